//! The FUSE callbacks: a passthrough to the backing directory that calls the
//! mutation hook before every mutation.
//!
//! Every mutating callback takes the read side of the quiesce gate, asks the
//! hook, and only then touches the backing directory; it holds the gate
//! until the backing call returned. Read-only callbacks never call the hook.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use log::trace;

use crate::creds::{zero_umask_for_thread, AsCaller, Caller};
use crate::errno::to_errno;
use crate::handle::{Handle, Handles, NO_EPOCH};
use crate::hook::{Mutation, MutationHook};
use crate::inode::{child, InodeKey, Inodes, NodeRef, Stamp, ROOT};
use crate::quiesce::Gate;
use crate::sys;

type Res<T> = Result<T, Errno>;

fn e(err: io::Error) -> Errno {
    to_errno(&err)
}

/// State shared by the callbacks and the [`crate::Controller`].
pub(crate) struct Shared {
    pub(crate) inodes: Inodes,
    pub(crate) handles: Handles,
    pub(crate) gate: Arc<Gate>,
    pub(crate) hook: Arc<dyn MutationHook>,
    pub(crate) attr_ttl: Duration,
    pub(crate) entry_ttl: Duration,
    /// Answer `FOPEN_KEEP_CACHE` when the backing file is unchanged since
    /// its previous open.
    pub(crate) keep_cache: bool,
    /// Let the kernel cache directory listings (`FOPEN_CACHE_DIR`), kept
    /// across opens while the directory is unchanged.
    pub(crate) cache_dir: bool,
    /// Tell the kernel not to send `flush` when a read-only handle closes.
    pub(crate) no_flush: bool,
}

/// The `fuser::Filesystem` implementation.
pub(crate) struct Passthrough {
    pub(crate) shared: Arc<Shared>,
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    let nsec = u32::try_from(nsec.clamp(0, 999_999_999)).unwrap_or(0);
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec.unsigned_abs(), nsec)
    } else {
        UNIX_EPOCH - Duration::new(sec.unsigned_abs(), 0) + Duration::new(0, nsec)
    }
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn dtype_kind(d_type: u8) -> FileType {
    match d_type {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// The kernel's 32-bit device encoding (`new_encode_dev`) of a `dev_t`.
fn encode_dev(dev: u64) -> u32 {
    let major = libc::major(dev as libc::dev_t);
    let minor = libc::minor(dev as libc::dev_t);
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// The `dev_t` of the kernel's 32-bit device encoding (`new_decode_dev`).
fn decode_dev(dev: u32) -> u64 {
    let major = (dev & 0xfff00) >> 8;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    libc::makedev(major, minor)
}

fn attr(ino: u64, st: &libc::stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size.max(0) as u64,
        blocks: st.st_blocks.max(0) as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: kind_of(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: encode_dev(st.st_rdev),
        blksize: u32::try_from(st.st_blksize).unwrap_or(4096),
        flags: 0,
    }
}

fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
            },
            Err(before) => {
                let d = before.duration();
                let mut sec = -(d.as_secs() as libc::time_t);
                let mut nsec = libc::c_long::from(d.subsec_nanos() as i32);
                if nsec > 0 {
                    sec -= 1;
                    nsec = 1_000_000_000 - nsec;
                }
                libc::timespec {
                    tv_sec: sec,
                    tv_nsec: nsec,
                }
            }
        },
    }
}

fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl Shared {
    fn node(&self, ino: u64) -> Res<NodeRef> {
        self.inodes.get(ino).ok_or(Errno::ESTALE)
    }

    /// Makes sure the node cached for `parent/name`, if any, holds its fd
    /// before the name goes away (an unlink, or a rename over it): a node
    /// without a name cannot be reopened once the fd budget closed its fd,
    /// and the kernel may still use it (an open file).
    fn hold_fd_of(&self, parent: u64, name: &[u8]) {
        self.inodes.hold_fd_of(parent, name);
    }

    fn handle(&self, fh: FileHandle) -> Res<Arc<Handle>> {
        self.handles.get(fh.0).ok_or(Errno::EBADF)
    }

    fn before(&self, mutation: Mutation<'_>) -> Res<()> {
        trace!("hook {mutation:?}");
        self.hook.before(&mutation).map_err(Errno::from_i32)
    }

    fn after(&self, mutation: Mutation<'_>, now: Option<&libc::stat>) {
        self.hook.after(&mutation, now);
    }

    /// Reports `make(path)` after the fact for every known path of `ino`,
    /// with the inode's attributes as they are now.
    fn after_inode(&self, ino: u64, make: fn(&[u8]) -> Mutation<'_>) {
        let paths = self.inodes.paths(ino);
        if paths.is_empty() {
            return;
        }
        let now = self
            .node(ino)
            .ok()
            .and_then(|n| sys::fstat(n.fd.as_fd()).ok());
        for path in paths {
            self.after(make(&path), now.as_ref());
        }
    }

    /// Reports `make(path)` for every known path of `ino`. A node with no
    /// known name was unlinked through the mount: its mutation changes no
    /// path, so there is nothing to report.
    fn before_inode(&self, ino: u64, make: fn(&[u8]) -> Mutation<'_>) -> Res<()> {
        for path in self.inodes.paths(ino) {
            self.before(make(&path))?;
        }
        Ok(())
    }

    /// Reports [`Mutation::Range`] of `[offset, offset + len)` for every
    /// known path of `ino`.
    fn before_range(&self, ino: u64, offset: u64, len: u64) -> Res<()> {
        for path in self.inodes.paths(ino) {
            self.before(Mutation::Range {
                path: &path,
                offset,
                len,
            })?;
        }
        Ok(())
    }

    /// True when the file behind `fd` is written as ranges (see
    /// `MutationHook::range_min`). Costs an `fstat` only when range capture
    /// is on.
    fn ranged(&self, fd: BorrowedFd<'_>) -> bool {
        let min = self.hook.range_min();
        min != u64::MAX
            && sys::fstat(fd).is_ok_and(|st| {
                st.st_mode & libc::S_IFMT == libc::S_IFREG
                    && st.st_nlink == 1
                    && st.st_size as u64 >= min
            })
    }

    /// The path of `parent/name`. A parent without a known path (a deleted
    /// directory) fails the mutation: it could not be recorded.
    fn child_path(&self, parent: u64, name: &[u8]) -> Res<Vec<u8>> {
        let parent_path = self.inodes.path(parent).ok_or(Errno::ENOENT)?;
        Ok(child(&parent_path, name))
    }

    /// Looks `name` up in `parent` on the backing side and records it.
    fn lookup_entry(&self, parent: u64, name: &[u8]) -> Res<FileAttr> {
        let dir = self.node(parent)?;
        let cname = sys::cname(name).map_err(e)?;
        let fd = sys::open_path(dir.fd.as_fd(), &cname).map_err(e)?;
        let st = sys::fstat(fd.as_fd()).map_err(e)?;
        let ino = self.inodes.lookup(
            parent,
            name,
            fd,
            InodeKey::of(&st),
            st.st_mode & libc::S_IFMT,
        );
        Ok(attr(ino, &st))
    }

    fn reply_entry(&self, reply: ReplyEntry, res: Res<FileAttr>) {
        match res {
            Ok(a) => reply.entry_with_ttls(&self.attr_ttl, &self.entry_ttl, &a, Generation(0)),
            Err(err) => reply.error(err),
        }
    }

    fn getattr(&self, ino: u64, fh: Option<FileHandle>) -> Res<FileAttr> {
        let st = match fh.and_then(|fh| self.handles.get(fh.0)) {
            Some(h) => sys::fstat(h.fd.as_fd()),
            None => sys::fstat(self.node(ino)?.fd.as_fd()),
        }
        .map_err(e)?;
        Ok(attr(ino, &st))
    }

    /// Creates `parent/name` with `make` (run as the caller) after the hook
    /// agreed, then looks it up.
    fn create_entry(
        &self,
        req: &Request,
        parent: u64,
        name: &[u8],
        make: impl FnOnce(BorrowedFd<'_>, &std::ffi::CString) -> io::Result<()>,
    ) -> Res<FileAttr> {
        let dir = self.node(parent)?;
        let cname = sys::cname(name).map_err(e)?;
        zero_umask_for_thread().map_err(e)?;
        {
            let _gate = self.gate.read();
            let path = self.child_path(parent, name)?;
            // The hook records "absent" for a Create, so it must never see one
            // for a name that exists.
            if sys::stat_at(dir.fd.as_fd(), &cname).map_err(e)?.is_some() {
                return Err(Errno::EEXIST);
            }
            self.before(Mutation::Create { path: &path })?;
            {
                let _as = AsCaller::switch(caller(req)).map_err(e)?;
                make(dir.fd.as_fd(), &cname).map_err(e)?;
            }
            let now = sys::stat_at(dir.fd.as_fd(), &cname).ok().flatten();
            self.after(Mutation::Create { path: &path }, now.as_ref());
        }
        self.lookup_entry(parent, name)
    }

    fn setattr(&self, ino: u64, a: &SetAttr) -> Res<FileAttr> {
        let node = self.node(ino)?;
        let handle = a.fh.and_then(|fh| self.handles.get(fh.0));
        {
            let _gate = self.gate.read();
            if let Some(size) = a.size {
                // A large file cut or grown: only the bytes past the new
                // size can be lost.
                if self.ranged(node.fd.as_fd()) {
                    self.before_range(ino, size, u64::MAX - size)?
                } else {
                    self.before_inode(ino, |path| Mutation::Content { path })?
                }
            }
            // Timestamps alone are not part of a pre-image (a rewind gives
            // restored files the time of the rewind), so `utimens` by itself
            // records nothing: `touch` in a build costs no capture.
            if a.mode.is_some() || a.uid.is_some() || a.gid.is_some() {
                self.before_inode(ino, |path| Mutation::Metadata { path })?;
            }
            let fd = match &handle {
                Some(h) => h.fd.as_fd(),
                None => node.fd.as_fd(),
            };
            if let Some(mode) = a.mode {
                sys::chmod_fd(fd, mode & 0o7777).map_err(e)?;
            }
            if a.uid.is_some() || a.gid.is_some() {
                sys::chown_fd(
                    node.fd.as_fd(),
                    a.uid.unwrap_or(u32::MAX),
                    a.gid.unwrap_or(u32::MAX),
                )
                .map_err(e)?;
            }
            if let Some(size) = a.size {
                match &handle {
                    Some(h) => sys::ftruncate(h.fd.as_fd(), size),
                    None => sys::truncate_path_fd(node.fd.as_fd(), size),
                }
                .map_err(e)?;
            }
            if a.atime.is_some() || a.mtime.is_some() {
                sys::utimens_fd(fd, &[timespec(a.atime), timespec(a.mtime)]).map_err(e)?;
            }
            // Reported after the fact even for timestamps alone: the hook's
            // fingerprint of the path (its times) must follow.
            if a.size.is_some() {
                self.after_inode(ino, |path| Mutation::Content { path });
            } else {
                self.after_inode(ino, |path| Mutation::Metadata { path });
            }
        }
        self.getattr(ino, a.fh)
    }

    /// Opens `ino`; returns the handle and whether the kernel may keep its
    /// page cache of the file.
    /// Whether the kernel's cached pages (or listing) of `ino`, opened as
    /// `fd`, are still exact: nothing changed the backing inode since its
    /// previous open. Writes through the mount go through that cache, and
    /// any other change (behind the mount's back, a rewind, O_TRUNC) moves
    /// the ctime. The stamp is taken after the open, so a change racing with
    /// it only costs a cache drop at the next open.
    fn unchanged_since_last_open(&self, ino: u64, fd: BorrowedFd<'_>) -> bool {
        match sys::fstat(fd) {
            Ok(st) => self.inodes.opened(ino, Stamp::of(&st)),
            Err(_) => false,
        }
    }

    /// The `FOPEN_*` flags for a file handle of `ino` opened as `fd`.
    fn open_flags(&self, ino: u64, fd: BorrowedFd<'_>, writable: bool) -> FopenFlags {
        let mut flags = FopenFlags::empty();
        if self.keep_cache && self.unchanged_since_last_open(ino, fd) {
            flags |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        if self.no_flush && !writable {
            flags |= FopenFlags::FOPEN_NOFLUSH;
        }
        flags
    }

    fn open(&self, ino: u64, flags: i32) -> Res<(u64, FopenFlags)> {
        let node = self.node(ino)?;
        if node.kind == libc::S_IFLNK {
            return Err(Errno::ELOOP);
        }
        // The kernel resolved the path already; the node fd is the inode
        // itself, so O_NOFOLLOW has nothing left to do, and creation flags
        // belong to `create`.
        let flags = flags & !(libc::O_NOFOLLOW | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY);
        let handle = if !writes(flags) {
            Handle::new(
                sys::reopen(node.fd.as_fd(), flags).map_err(e)?,
                ino,
                NO_EPOCH,
            )
        } else {
            // Read the epoch first: if a turn boundary slips in between, the
            // next write sees a newer epoch and reports again.
            let epoch = self.hook.epoch();
            let _gate = self.gate.read();
            if flags & libc::O_TRUNC == 0 && self.ranged(node.fd.as_fd()) {
                // Nothing changes at the open itself; each write reports
                // its range.
                let fd = sys::reopen(node.fd.as_fd(), flags).map_err(e)?;
                Handle::new_ranged(fd, ino, epoch)
            } else {
                self.before_inode(ino, |path| Mutation::Content { path })?;
                let fd = sys::reopen(node.fd.as_fd(), flags).map_err(e)?;
                Handle::new(fd, ino, epoch)
            }
        };
        let fopen = self.open_flags(ino, handle.fd.as_fd(), writes(flags));
        Ok((self.handles.insert(handle), fopen))
    }

    fn create(
        &self,
        req: &Request,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Res<(FileAttr, u64)> {
        let dir = self.node(parent)?;
        let cname = sys::cname(name).map_err(e)?;
        zero_umask_for_thread().map_err(e)?;
        let flags = flags & !(libc::O_NOCTTY | libc::O_CREAT);
        let mode = mode & 0o7777 & !umask;
        // A file that appears between the existence check and the open (made
        // behind the mount's back) turns a reported Create into a retry.
        for _ in 0..4 {
            let epoch = self.hook.epoch();
            let _gate = self.gate.read();
            let path = self.child_path(parent, name)?;
            let existing = sys::stat_at(dir.fd.as_fd(), &cname).map_err(e)?;
            let opened = if existing.is_some() {
                if flags & libc::O_EXCL != 0 {
                    return Err(Errno::EEXIST);
                }
                if writes(flags) {
                    self.before(Mutation::Content { path: &path })?;
                }
                sys::openat(dir.fd.as_fd(), &cname, flags | libc::O_NOFOLLOW, 0)
            } else {
                self.before(Mutation::Create { path: &path })?;
                let _as = AsCaller::switch(caller(req)).map_err(e)?;
                sys::openat(
                    dir.fd.as_fd(),
                    &cname,
                    flags | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                    mode,
                )
            };
            let fd = match opened {
                Ok(fd) => fd,
                Err(err)
                    if existing.is_none()
                        && flags & libc::O_EXCL == 0
                        && err.raw_os_error() == Some(libc::EEXIST) =>
                {
                    continue
                }
                Err(err) => return Err(e(err)),
            };
            drop(_gate);
            let a = self.lookup_entry(parent, name)?;
            let fh = self.handles.insert(Handle::new(
                fd,
                a.ino.0,
                if writes(flags) || existing.is_none() {
                    epoch
                } else {
                    NO_EPOCH
                },
            ));
            return Ok((a, fh));
        }
        Err(Errno::EAGAIN)
    }

    /// `fsync`/`fdatasync` of an open file or directory handle.
    fn fsync(&self, fh: FileHandle, datasync: bool) -> Res<()> {
        let h = self.handle(fh)?;
        sys::fsync(h.fd.as_fd(), datasync).map_err(e)
    }

    /// Called before `[offset, offset + len)` of `h`'s file changes.
    fn write_check(&self, h: &Handle, offset: u64, len: u64) -> Res<()> {
        h.mark_dirty();
        if h.ranged {
            return self.before_range(h.ino, offset, len);
        }
        let epoch = self.hook.epoch();
        if h.epoch() != epoch {
            self.before_inode(h.ino, |path| Mutation::Content { path })?;
            h.set_epoch(epoch);
        }
        Ok(())
    }

    fn readdir_entries(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        mut emit: impl FnMut(&sys::Dirent<'_>) -> Res<bool>,
    ) -> Res<()> {
        let h = self.handle(fh)?;
        let _lock = h.dir_lock.lock().unwrap_or_else(|e| e.into_inner());
        let offset = i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
        sys::lseek(h.fd.as_fd(), offset, libc::SEEK_SET).map_err(e)?;
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            let n = sys::getdents(h.fd.as_fd(), &mut buf).map_err(e)?;
            if n == 0 {
                return Ok(());
            }
            for ent in sys::parse_dirents(&buf[..n]) {
                if emit(&ent)? {
                    trace!("readdir {ino}: buffer full");
                    return Ok(());
                }
            }
        }
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

/// The optional fields of a `setattr` call.
struct SetAttr {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
    fh: Option<FileHandle>,
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

fn dot_attr(ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::Directory,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

impl Filesystem for Passthrough {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        for flag in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_ATOMIC_O_TRUNC,
            InitFlags::FUSE_PARALLEL_DIROPS,
        ] {
            if let Err(unsupported) = config.add_capabilities(flag) {
                log::debug!("kernel lacks {unsupported:?}");
            }
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        trace!("lookup {parent:?} {name:?}");
        let s = &self.shared;
        s.reply_entry(reply, s.lookup_entry(parent.0, name.as_bytes()));
    }

    // `batch_forget` keeps fuser's default, which calls `forget` per inode
    // (fuser does not export the type its signature needs).
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        trace!("getattr {ino:?}");
        match self.shared.getattr(ino.0, fh) {
            Ok(a) => reply.attr(&self.shared.attr_ttl, &a),
            Err(err) => reply.error(err),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh,
        };
        match self.shared.setattr(ino.0, &a) {
            Ok(a) => reply.attr(&self.shared.attr_ttl, &a),
            Err(err) => reply.error(err),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let res = self
            .shared
            .node(ino.0)
            .and_then(|n| sys::readlink_fd(n.fd.as_fd()).map_err(e));
        match res {
            Ok(target) => reply.data(&target),
            Err(err) => reply.error(err),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let s = &self.shared;
        let mode = (mode & libc::S_IFMT) | (mode & 0o7777 & !umask);
        let res = s.create_entry(req, parent.0, name.as_bytes(), |dir, name| {
            sys::mknodat(dir, name, mode, decode_dev(rdev))
        });
        s.reply_entry(reply, res);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let s = &self.shared;
        let mode = mode & 0o7777 & !umask;
        let res = s.create_entry(req, parent.0, name.as_bytes(), |dir, name| {
            sys::mkdirat(dir, name, mode)
        });
        s.reply_entry(reply, res);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match remove(&self.shared, parent.0, name.as_bytes(), 0) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match remove(&self.shared, parent.0, name.as_bytes(), libc::AT_REMOVEDIR) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let s = &self.shared;
        let res = sys::cname_any(target.as_os_str().as_bytes())
            .map_err(e)
            .and_then(|target| {
                s.create_entry(req, parent.0, link_name.as_bytes(), |dir, name| {
                    sys::symlinkat(&target, dir, name)
                })
            });
        s.reply_entry(reply, res);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match rename(
            &self.shared,
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            flags,
        ) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let s = &self.shared;
        let res = s.node(ino.0).and_then(|node| {
            s.create_entry(req, newparent.0, newname.as_bytes(), |dir, name| {
                sys::link_fd(node.fd.as_fd(), dir, name)
            })
        });
        s.reply_entry(reply, res);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        trace!("open {ino:?} {:#x}", flags.0);
        match self.shared.open(ino.0, flags.0) {
            Ok((fh, fopen)) => reply.opened(FileHandle(fh), fopen),
            Err(err) => reply.error(err),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        trace!("read {ino:?} {offset} {size}");
        let res = self.shared.handle(fh).and_then(|h| {
            let mut buf = vec![0u8; size as usize];
            let n = sys::pread(h.fd.as_fd(), &mut buf, offset).map_err(e)?;
            buf.truncate(n);
            Ok(buf)
        });
        match res {
            Ok(buf) => reply.data(&buf),
            Err(err) => reply.error(err),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        trace!("write {ino:?} {offset} {}", data.len());
        let s = &self.shared;
        let res = s.handle(fh).and_then(|h| {
            let _gate = s.gate.read();
            s.write_check(&h, offset, data.len() as u64)?;
            sys::pwrite(h.fd.as_fd(), data, offset).map_err(e)
        });
        match res {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(err) => reply.error(err),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let s = &self.shared;
        let res = s.handle(fh).and_then(|h| {
            sys::close_dup(h.fd.as_fd()).map_err(e)?;
            // close(2) waits for FLUSH (RELEASE comes later, asynchronously),
            // so the hook learns what a writer left before close returns:
            // a change made right after it is someone else's.
            if h.epoch() != NO_EPOCH && h.take_dirty() {
                s.after_inode(h.ino, |path| Mutation::Content { path });
            }
            Ok(())
        });
        match res {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let s = &self.shared;
        if let Some(h) = s.handles.remove(fh.0) {
            // Not under the gate: a release is no mutation, and blocking it
            // while quiesced would tie up a worker thread for nothing. Only
            // if something (an mmap writeback) wrote since the last flush:
            // RELEASE arrives after close(2) returned, and a stat now could
            // take someone else's later change for the mount's.
            if h.epoch() != NO_EPOCH && h.take_dirty() {
                s.after_inode(h.ino, |path| Mutation::Content { path });
            }
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.shared.fsync(fh, datasync) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let s = &self.shared;
        let res = s.node(ino.0).and_then(|node| {
            let fd = sys::openat(
                node.fd.as_fd(),
                &std::ffi::CString::from(c"."),
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            )
            .map_err(e)?;
            // A directory's ctime moves with every entry added, removed or
            // renamed, so an unchanged stamp means the kernel's cached
            // listing is still exact.
            let mut fopen = FopenFlags::empty();
            if s.cache_dir {
                fopen |= FopenFlags::FOPEN_CACHE_DIR;
                if s.unchanged_since_last_open(ino.0, fd.as_fd()) {
                    fopen |= FopenFlags::FOPEN_KEEP_CACHE;
                }
            }
            Ok((s.handles.insert(Handle::new(fd, ino.0, NO_EPOCH)), fopen))
        });
        match res {
            Ok((fh, fopen)) => reply.opened(FileHandle(fh), fopen),
            Err(err) => reply.error(err),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let s = &self.shared;
        let res = s.readdir_entries(ino.0, fh, offset, |ent| {
            let name = OsStr::from_bytes(ent.name);
            // Report the FUSE inode number (what stat shows) when the entry
            // is cached; the backing one otherwise (never 0, which some
            // programs treat as a deleted entry).
            let shown = match ent.name {
                b"." => ino.0,
                b".." => s.inodes.parent(ino.0).unwrap_or(ROOT),
                _ => s.inodes.child(ino.0, ent.name).unwrap_or(ent.ino),
            };
            Ok(reply.add(INodeNo(shown), ent.offset, dtype_kind(ent.kind), name))
        });
        match res {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let s = &self.shared;
        let res = s.readdir_entries(ino.0, fh, offset, |ent| {
            let name = OsStr::from_bytes(ent.name);
            if is_dot(ent.name) {
                // The kernel never links "." or ".." from readdirplus; only
                // the dirent part is used.
                let dot = if ent.name == b"." {
                    ino.0
                } else {
                    s.inodes.parent(ino.0).unwrap_or(ROOT)
                };
                return Ok(reply.add(
                    INodeNo(dot),
                    ent.offset,
                    name,
                    &s.entry_ttl,
                    &dot_attr(dot),
                    Generation(0),
                ));
            }
            let a = match s.lookup_entry(ino.0, ent.name) {
                Ok(a) => a,
                // Gone since getdents: skip it, as a later readdir would.
                Err(_) => return Ok(false),
            };
            let full = reply.add(a.ino, ent.offset, name, &s.entry_ttl, &a, Generation(0));
            if full {
                // Not sent: the kernel will not count this lookup.
                s.inodes.forget(a.ino.0, 1);
            }
            Ok(full)
        });
        match res {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.shared.handles.remove(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.shared.fsync(fh, datasync) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let s = &self.shared;
        let res = s
            .node(ino.0)
            .or_else(|_| s.node(ROOT))
            .and_then(|n| sys::statvfs(n.fd.as_fd()).map_err(e));
        match res {
            Ok(st) => reply.statfs(
                st.f_blocks,
                st.f_bfree,
                st.f_bavail,
                st.f_files,
                st.f_ffree,
                u32::try_from(st.f_bsize).unwrap_or(4096),
                u32::try_from(st.f_namemax).unwrap_or(255),
                u32::try_from(st.f_frsize).unwrap_or(4096),
            ),
            Err(err) => reply.error(err),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let s = &self.shared;
        let res = (|| {
            let node = s.node(ino.0)?;
            let name = sys::cname_any(name.as_bytes()).map_err(e)?;
            let _gate = s.gate.read();
            s.before_inode(ino.0, |path| Mutation::Metadata { path })?;
            sys::setxattr(node.fd.as_fd(), &name, value, flags).map_err(e)?;
            s.after_inode(ino.0, |path| Mutation::Metadata { path });
            Ok(())
        })();
        match res {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let s = &self.shared;
        let res = (|| {
            let node = s.node(ino.0)?;
            let name = sys::cname_any(name.as_bytes()).map_err(e)?;
            let mut buf = vec![0u8; size as usize];
            let n = sys::getxattr(node.fd.as_fd(), &name, &mut buf).map_err(e)?;
            buf.truncate(n);
            Ok((n, buf))
        })();
        match res {
            Ok((n, _)) if size == 0 => reply.size(u32::try_from(n).unwrap_or(u32::MAX)),
            Ok((_, buf)) => reply.data(&buf),
            Err(err) => reply.error(err),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let s = &self.shared;
        let res = (|| {
            let node = s.node(ino.0)?;
            let mut buf = vec![0u8; size as usize];
            let n = sys::listxattr(node.fd.as_fd(), &mut buf).map_err(e)?;
            buf.truncate(n);
            Ok((n, buf))
        })();
        match res {
            Ok((n, _)) if size == 0 => reply.size(u32::try_from(n).unwrap_or(u32::MAX)),
            Ok((_, buf)) => reply.data(&buf),
            Err(err) => reply.error(err),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let s = &self.shared;
        let res = (|| {
            let node = s.node(ino.0)?;
            let name = sys::cname_any(name.as_bytes()).map_err(e)?;
            let _gate = s.gate.read();
            s.before_inode(ino.0, |path| Mutation::Metadata { path })?;
            sys::removexattr(node.fd.as_fd(), &name).map_err(e)?;
            s.after_inode(ino.0, |path| Mutation::Metadata { path });
            Ok(())
        })();
        match res {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // With `default_permissions` the kernel checks the mode bits itself;
        // this only confirms the inode still exists.
        let s = &self.shared;
        match s
            .node(ino.0)
            .and_then(|n| sys::fstat(n.fd.as_fd()).map_err(e))
        {
            Ok(_) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        trace!("create {parent:?} {name:?} {flags:#x}");
        let s = &self.shared;
        match s.create(req, parent.0, name.as_bytes(), mode, umask, flags) {
            Ok((a, fh)) => reply.created(
                &s.entry_ttl,
                &a,
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
            ),
            Err(err) => reply.error(err),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let s = &self.shared;
        let res = s.handle(fh).and_then(|h| {
            let _gate = s.gate.read();
            if h.ranged
                && mode & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0
            {
                // Moves bytes around the whole tail: not a range.
                h.mark_dirty();
                s.before_inode(h.ino, |path| Mutation::Content { path })?;
            } else {
                s.write_check(&h, offset, length)?;
            }
            sys::fallocate(h.fd.as_fd(), mode, offset, length).map_err(e)
        });
        match res {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let res = self
            .shared
            .handle(fh)
            .and_then(|h| sys::lseek(h.fd.as_fd(), offset, whence).map_err(e));
        match res {
            Ok(off) => reply.offset(off),
            Err(err) => reply.error(err),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let s = &self.shared;
        let res = (|| {
            let h_in = s.handle(fh_in)?;
            let h_out = s.handle(fh_out)?;
            let _gate = s.gate.read();
            s.write_check(&h_out, offset_out, len)?;
            sys::copy_file_range(
                h_in.fd.as_fd(),
                offset_in,
                h_out.fd.as_fd(),
                offset_out,
                len,
                0,
            )
            .map_err(e)
        })();
        match res {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(err) => reply.error(err),
        }
    }
}

fn remove(s: &Shared, parent: u64, name: &[u8], flags: i32) -> Res<()> {
    let dir = s.node(parent)?;
    let cname = sys::cname(name).map_err(e)?;
    let _gate = s.gate.read();
    let path = s.child_path(parent, name)?;
    s.before(Mutation::Remove { path: &path })?;
    s.hold_fd_of(parent, name);
    sys::unlinkat(dir.fd.as_fd(), &cname, flags).map_err(e)?;
    s.inodes.unlink(parent, name);
    s.after(Mutation::Remove { path: &path }, None);
    Ok(())
}

fn rename(
    s: &Shared,
    parent: u64,
    name: &[u8],
    new_parent: u64,
    new_name: &[u8],
    flags: RenameFlags,
) -> Res<()> {
    let dir = s.node(parent)?;
    let new_dir = s.node(new_parent)?;
    let cname = sys::cname(name).map_err(e)?;
    let new_cname = sys::cname(new_name).map_err(e)?;
    let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
    let _gate = s.gate.read();
    let from = s.child_path(parent, name)?;
    let to = s.child_path(new_parent, new_name)?;
    s.before(Mutation::Rename {
        from: &from,
        to: &to,
        exchange,
    })?;
    if !exchange {
        s.hold_fd_of(new_parent, new_name);
    }
    sys::renameat2(
        dir.fd.as_fd(),
        &cname,
        new_dir.fd.as_fd(),
        &new_cname,
        flags.bits(),
    )
    .map_err(e)?;
    s.inodes
        .rename(parent, name, new_parent, new_name, exchange);
    let now = match exchange {
        true => None,
        false => sys::stat_at(new_dir.fd.as_fd(), &new_cname).ok().flatten(),
    };
    s.after(
        Mutation::Rename {
            from: &from,
            to: &to,
            exchange,
        },
        now.as_ref(),
    );
    Ok(())
}
