//! The passthrough's state and its namespace and metadata operations:
//! lookup, attributes, creating, removing and renaming entries, symlinks,
//! extended attributes. File and directory I/O is in `io.rs`.
//!
//! Every mutating operation takes the read side of the quiesce gate, asks
//! the hook ([`Report::before`]), and only then touches the backing
//! directory; it holds the gate until the backing call returned, then tells
//! the hook what it left ([`Report::after`]). Read-only operations never call
//! the hook.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FileAttr, FileHandle, InitFlags, RenameFlags};
use log::trace;

use super::attr::{attr, decode_dev, timespec};
use crate::creds::{zero_umask_for_thread, AsCaller, Caller};
use crate::errno::errno;
use crate::front::{Granted, Meta, Names, SetAttr};
use crate::handle::{Handle, Handles};
use crate::hook::{Mutation, MutationHook};
use crate::inode::{child, InodeKey, Inodes, NodeRef, Stamp};
use crate::quiesce::Gate;
use crate::reply::{Attr, Entry, Res, Xattr};
use crate::report::Report;
use crate::sys;
use crate::watch::Watch;

/// State shared by the callbacks and the [`crate::Controller`].
pub(crate) struct State {
    pub(crate) inodes: Inodes,
    pub(crate) handles: Handles,
    pub(crate) gate: Arc<Gate>,
    pub(crate) hook: Arc<dyn MutationHook>,
    /// How long the kernel may cache while the watch keeps it coherent.
    pub(crate) watched: Ttls,
    /// How long without a working watch (at most [`crate::UNWATCHED_TTL`];
    /// no negative entries).
    pub(crate) unwatched: Ttls,
    /// The watch on the backing directory, if one could be set up.
    pub(crate) watch: Option<Arc<Watch>>,
    /// The capabilities asked for at init beyond those always asked for
    /// (`front.rs`, `init`), each only where the mount allows it:
    /// `FUSE_NO_OPENDIR_SUPPORT` and `FUSE_NO_OPEN_SUPPORT` only when the
    /// watch was active at mount (the kernel then caches every listing and
    /// keeps every file's pages for as long as nothing invalidates them),
    /// `FUSE_HANDLE_KILLPRIV_V2` only once the kernel took
    /// `FUSE_NO_OPEN_SUPPORT` (with OPEN, an `O_TRUNC` open's kill flag
    /// would arrive where fuser 0.18 drops it).
    pub(crate) wanted: InitFlags,
    /// Which of `wanted` the kernel took, set at init:
    /// `FUSE_NO_OPENDIR_SUPPORT`: OPENDIR answers `ENOSYS` (after which
    /// the kernel sends none), READDIR comes with handle 0;
    /// `FUSE_NO_OPEN_SUPPORT`: OPEN and FLUSH answer `ENOSYS` (after which
    /// the kernel sends none), a file's I/O comes with handle 0, `create`
    /// answers handle 0 (see `io.rs`); `FUSE_HANDLE_KILLPRIV_V2`: clearing
    /// set-user-ID and set-group-ID bits on a write, truncation,
    /// allocation or copy by a caller without `CAP_FSETID` is the daemon's
    /// job (see `io.rs`).
    pub(crate) granted: Granted,
    /// Answer CREATE `ENOSYS` once the kernel took `FUSE_NO_OPEN_SUPPORT`:
    /// new files then arrive as MKNOD (see `io.rs`, `create`).
    pub(crate) no_create: bool,
    /// Answer LSEEK `ENOSYS` (the kernel then answers `SEEK_DATA` and
    /// `SEEK_HOLE` itself, reporting no holes; see `Options::no_lseek`).
    pub(crate) no_lseek: bool,
    /// The session's notifier, set before the first request: for the
    /// attribute invalidation a callback sends before it replies (see
    /// [`crate::Controller`]'s `notifier`).
    pub(crate) notifier: std::sync::OnceLock<fuser::Notifier>,
}

/// How long the kernel may cache what one reply tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ttls {
    /// Attributes.
    pub(crate) attr: Duration,
    /// A name → inode entry.
    pub(crate) entry: Duration,
    /// A miss (a negative entry); zero answers `ENOENT` uncached.
    pub(crate) negative: Duration,
}

impl Ttls {
    /// Nothing cached: the answer of a lookup raced by a change.
    const ZERO: Ttls = Ttls {
        attr: Duration::ZERO,
        entry: Duration::ZERO,
        negative: Duration::ZERO,
    };
}

impl Report for State {
    fn hook(&self) -> &dyn MutationHook {
        self.hook.as_ref()
    }

    fn paths(&self, ino: u64) -> Vec<Vec<u8>> {
        self.inodes.paths(ino)
    }

    fn reported(&self, ino: u64) -> Option<(u64, bool)> {
        self.inodes.reported(ino)
    }

    fn set_reported(&self, ino: u64, epoch: u64, ranged: bool) {
        self.inodes.set_reported(ino, epoch, ranged);
    }

    /// Compares with the stamp the layer took when it last reported what
    /// it left ([`Inodes::set_left`]). One `fstat`; false when there is no
    /// stamp to compare with or the `fstat` fails (the hook's own check at
    /// the next report still runs).
    fn changed_behind(&self, ino: u64, fd: BorrowedFd<'_>) -> bool {
        match (self.inodes.left(ino), sys::fstat(fd)) {
            (Some(left), Ok(st)) => Stamp::of(&st) != left,
            _ => false,
        }
    }
}

impl State {
    /// The node of FUSE inode `ino`; `ESTALE` if the table no longer has it
    /// or cannot reopen it.
    pub(super) fn node(&self, ino: u64) -> Res<NodeRef> {
        self.inodes.get(ino).ok_or(Errno::ESTALE)
    }

    /// Makes sure the node cached for `parent/name`, if any, holds its fd
    /// before the name goes away (an unlink, or a rename over it): a node
    /// without a name cannot be reopened once the fd budget closed its fd,
    /// and the kernel may still use it (an open file).
    fn hold_fd_of(&self, parent: u64, name: &[u8]) {
        self.inodes.hold_fd_of(parent, name);
    }

    /// The open handle `fh`; `EBADF` if there is none.
    pub(super) fn handle(&self, fh: FileHandle) -> Res<Arc<Handle>> {
        self.handles.get(fh.0).ok_or(Errno::EBADF)
    }

    /// [`Report::before`] for a removal or rename that runs in `parents`.
    fn before_in(&self, mutation: Mutation<'_>, parents: crate::Parents<'_>) -> Res<()> {
        trace!("hook {mutation:?}");
        self.hook
            .before_in(&mutation, parents)
            .map_err(Errno::from_i32)
    }

    /// Reports `make(path)` after the fact for every known path of `ino`,
    /// with the inode's attributes as they are now.
    pub(super) fn after_inode(&self, ino: u64, make: fn(&[u8]) -> Mutation<'_>) {
        let paths = self.inodes.paths(ino);
        if paths.is_empty() {
            return;
        }
        let now = self
            .node(ino)
            .ok()
            .and_then(|n| sys::fstat(n.fd.as_fd()).ok());
        if let Some(st) = &now {
            self.inodes.set_left(ino, Stamp::of(st));
        }
        for path in paths {
            self.after(make(&path), now.as_ref());
        }
    }

    /// [`State::after_inode`] with the inode's attributes `now` read by
    /// the caller.
    pub(super) fn after_inode_with(
        &self,
        ino: u64,
        make: fn(&[u8]) -> Mutation<'_>,
        now: Option<&libc::stat>,
    ) {
        if let Some(st) = now {
            self.inodes.set_left(ino, Stamp::of(st));
        }
        for path in self.inodes.paths(ino) {
            self.after(make(&path), now);
        }
    }

    /// The path of `parent/name`. A parent without a known path (a deleted
    /// directory) fails the mutation: it could not be recorded.
    pub(super) fn child_path(&self, parent: u64, name: &[u8]) -> Res<Vec<u8>> {
        let parent_path = self.inodes.path(parent).ok_or(Errno::ENOENT)?;
        Ok(child(&parent_path, name))
    }

    /// The event counter of directory `dir` (0 without a watch): read
    /// before reading the backing directory, handed to
    /// [`State::ttls_since`] when answering.
    pub(super) fn gen(&self, dir: u64) -> u64 {
        self.watch.as_ref().map_or(0, |w| w.gen(dir))
    }

    /// The TTLs for an answer about a name in `dir` whose backing state was
    /// read after `gen` was [`State::gen`]: the long ones while the watch
    /// is active and no event for `dir` was handled since (else the
    /// invalidation could have gone out before the answer: nothing is
    /// cached), the short ones without a working watch.
    pub(super) fn ttls_since(&self, dir: u64, gen: u64) -> Ttls {
        match &self.watch {
            Some(w) if w.active() => {
                if w.gen(dir) == gen {
                    self.watched
                } else {
                    Ttls::ZERO
                }
            }
            _ => self.unwatched,
        }
    }

    /// The TTLs for attributes (the kernel's attribute version guards them
    /// against an invalidation in flight).
    pub(super) fn ttls(&self) -> Ttls {
        match &self.watch {
            Some(w) if w.active() => self.watched,
            _ => self.unwatched,
        }
    }

    /// Looks `name` up in `parent` on the backing side and records it: one
    /// more lookup of the node, which the kernel owes a `forget` for once
    /// the reply is sent.
    pub(super) fn lookup_entry(&self, parent: u64, name: &[u8]) -> Res<FileAttr> {
        let dir = self.node(parent)?;
        let cname = sys::cname(name).map_err(errno)?;
        let fd = sys::open_path(dir.fd.as_fd(), &cname).map_err(errno)?;
        let st = sys::fstat(fd.as_fd()).map_err(errno)?;
        Ok(self.enter(parent, name, fd, &st))
    }

    /// Records `parent/name`, opened as `fd` (`O_PATH`) whose attributes
    /// are `st`, as [`State::lookup_entry`] does.
    fn enter(&self, parent: u64, name: &[u8], fd: OwnedFd, st: &libc::stat) -> FileAttr {
        let kind = st.st_mode & libc::S_IFMT;
        let key = InodeKey::of(st);
        let (ino, created) = self.inodes.lookup(parent, name, fd, key, kind);
        // A new directory node is marked before the kernel can look
        // anything up in it (its children's answers are cached only once
        // this reply is out).
        if let (Some(w), true, true) = (&self.watch, created, kind == libc::S_IFDIR) {
            if let Some(node) = self.inodes.get(ino) {
                w.add(ino, key, node.fd.as_fd());
            }
        }
        attr(ino, st)
    }

    fn stat(&self, ino: u64, fh: Option<FileHandle>) -> Res<FileAttr> {
        let st = match fh.and_then(|fh| self.handles.get(fh.0)) {
            Some(h) => sys::fstat(h.fd.as_fd()),
            None => sys::fstat(self.node(ino)?.fd.as_fd()),
        }
        .map_err(errno)?;
        Ok(attr(ino, &st))
    }

    /// Creates `parent/name` with `make` (run as the caller) after the hook
    /// agreed, then looks it up.
    fn create_entry(
        &self,
        caller: Caller,
        parent: u64,
        name: &[u8],
        make: impl FnOnce(BorrowedFd<'_>, &CString) -> io::Result<()>,
    ) -> Res<Entry> {
        let dir = self.node(parent)?;
        let cname = sys::cname(name).map_err(errno)?;
        zero_umask_for_thread().map_err(errno)?;
        let gen;
        let made;
        {
            let _gate = self.gate.read();
            let path = self.child_path(parent, name)?;
            // The hook records "absent" for a Create, so it must never see one
            // for a name that exists.
            if sys::stat_at(dir.fd.as_fd(), &cname)
                .map_err(errno)?
                .is_some()
            {
                return Err(Errno::EEXIST);
            }
            self.before(Mutation::Create { path: &path })?;
            {
                let _as = AsCaller::switch(caller).map_err(errno)?;
                make(dir.fd.as_fd(), &cname).map_err(errno)?;
            }
            // Read before the new entry is: a change behind the mount
            // handled from here on makes the answer uncached.
            gen = self.gen(parent);
            // One open and one stat give both what the mount left (for the
            // hook) and the entry (for the reply).
            made = sys::open_path(dir.fd.as_fd(), &cname)
                .and_then(|fd| sys::fstat(fd.as_fd()).map(|st| (fd, st)))
                .ok();
            self.after(
                Mutation::Create { path: &path },
                made.as_ref().map(|(_, st)| st),
            );
        }
        // A positive entry or the error: a negative entry is no answer to
        // a creation (the kernel takes inode 0 there for EIO).
        let attr = match made {
            Some((fd, st)) => self.enter(parent, name, fd, &st),
            None => self.lookup_entry(parent, name)?,
        };
        let ttl = self.ttls_since(parent, gen);
        Ok(Entry {
            attr,
            attr_ttl: ttl.attr,
            entry_ttl: ttl.entry,
        })
    }

    /// A SETATTR with nothing to set (at most the change time) of `ino`
    /// (open as `fd`) under `FUSE_HANDLE_KILLPRIV_V2`, where the kernel
    /// dropped its clearing of set-user-ID and set-group-ID bits. It is
    /// what `chown(path, -1, -1)` sends, and what the kernel's own
    /// `file_remove_privs` sends before a write, truncation or allocation
    /// by a caller without `CAP_FSETID` (forced past permission checks;
    /// the request that follows clears the bits, [`State::kill_suidgid`]).
    /// The two look the same; the caller's current system call
    /// (`/proc/PID/syscall`) tells them apart. For a `chown`: the same
    /// `chown` of the backing file with the caller's credentials, which
    /// clears exactly what the kernel would (the set-group-ID bit depends
    /// on the caller's groups and `CAP_FSETID`) and is refused as it would
    /// be (`EPERM` for a set-user-ID file the caller does not own). For
    /// anything else, nothing. Reports `Metadata` first when there is a bit
    /// that could go. Without the flag taken, nothing (the kernel sent the
    /// new mode itself). Errors: the backing `fstat` or `chown` fails, or
    /// the hook refuses.
    fn chown_nothing(&self, ino: u64, fd: BorrowedFd<'_>, caller: Caller) -> Res<()> {
        if !self.granted.has(InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
            return Ok(());
        }
        let st = sys::fstat(fd).map_err(errno)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG
            || st.st_mode & (libc::S_ISUID | libc::S_ISGID) == 0
            || !sys::in_chown(caller.pid)
        {
            return Ok(());
        }
        self.before_inode(ino, |path| Mutation::Metadata { path })?;
        let _as = AsCaller::switch(caller).map_err(errno)?;
        sys::chown_fd(fd, u32::MAX, u32::MAX).map_err(errno)
    }
}

impl Names for State {
    /// `lookup`: the entry `parent/name`; a missing name is a negative
    /// entry (inode 0) cached for the negative TTL when the watch is
    /// active, else `ENOENT`.
    fn lookup(&self, parent: u64, name: &[u8]) -> Res<Entry> {
        let gen = self.gen(parent);
        match self.lookup_entry(parent, name) {
            Ok(attr) => {
                let ttl = self.ttls_since(parent, gen);
                Ok(Entry {
                    attr,
                    attr_ttl: ttl.attr,
                    entry_ttl: ttl.entry,
                })
            }
            Err(e) if e == Errno::ENOENT => {
                let ttl = self.ttls_since(parent, gen);
                if ttl.negative.is_zero() {
                    return Err(e);
                }
                Ok(Entry {
                    attr: super::attr::dot_attr(0),
                    attr_ttl: ttl.negative,
                    entry_ttl: ttl.negative,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Drops `n` lookups of `ino` (a forget, or an entry that was never
    /// sent), and the watch's mark of a directory node that goes with it.
    fn forget(&self, ino: u64, n: u64) {
        if let Some(key) = self.inodes.forget(ino, n) {
            if let Some(w) = &self.watch {
                w.remove(key);
            }
        }
    }

    /// `mknod` of `parent/name`; `mode` carries the type, `rdev` is in the
    /// kernel's 32-bit encoding. Without OPEN and CREATE (see `io.rs`,
    /// `create`) this is also how every `open(O_CREAT)` of a new name
    /// arrives: a new regular file then starts out reported in this epoch,
    /// as one made by CREATE does (its birth is recorded as absent, so its
    /// first write of the turn has nothing to capture).
    fn mknod(&self, caller: Caller, parent: u64, name: &[u8], mode: u32, rdev: u32) -> Res<Entry> {
        // Read before the report: a boundary since makes the next write
        // report again.
        let epoch = self.hook.epoch();
        let entry = self.create_entry(caller, parent, name, |dir, name| {
            sys::mknodat(dir, name, mode, decode_dev(rdev))
        })?;
        if mode & libc::S_IFMT == libc::S_IFREG && self.no_open_active() {
            self.inodes.set_reported(entry.attr.ino.0, epoch, false);
        }
        Ok(entry)
    }

    /// `mkdir` of `parent/name` with permission bits `mode`.
    fn mkdir(&self, caller: Caller, parent: u64, name: &[u8], mode: u32) -> Res<Entry> {
        self.create_entry(caller, parent, name, |dir, name| {
            sys::mkdirat(dir, name, mode)
        })
    }

    /// `symlink`: `parent/name` pointing at `target`.
    fn symlink(&self, caller: Caller, parent: u64, name: &[u8], target: &[u8]) -> Res<Entry> {
        let target = sys::cname_any(target).map_err(errno)?;
        self.create_entry(caller, parent, name, |dir, name| {
            sys::symlinkat(&target, dir, name)
        })
    }

    /// `link`: a new name `new_parent/new_name` for `ino`.
    fn link(&self, caller: Caller, ino: u64, new_parent: u64, new_name: &[u8]) -> Res<Entry> {
        let node = self.node(ino)?;
        self.create_entry(caller, new_parent, new_name, |dir, name| {
            sys::link_fd(node.fd.as_fd(), dir, name)
        })
    }

    /// `unlink` or `rmdir` (`rmdir`: `AT_REMOVEDIR`) of `parent/name`.
    fn remove(&self, parent: u64, name: &[u8], rmdir: bool) -> Res<()> {
        let flags = if rmdir { libc::AT_REMOVEDIR } else { 0 };
        let dir = self.node(parent)?;
        let cname = sys::cname(name).map_err(errno)?;
        let _gate = self.gate.read();
        let path = self.child_path(parent, name)?;
        self.before_in(
            Mutation::Remove { path: &path },
            crate::Parents {
                from: dir.fd.as_fd(),
                to: None,
            },
        )?;
        self.hold_fd_of(parent, name);
        if let Err(e) = sys::unlinkat(dir.fd.as_fd(), &cname, flags) {
            self.hook.failed(&Mutation::Remove { path: &path });
            return Err(errno(e));
        }
        self.inodes.unlink(parent, name);
        self.after(Mutation::Remove { path: &path }, None);
        Ok(())
    }

    /// `rename` of `parent/name` to `new_parent/new_name` (`renameat2`
    /// flags, `RENAME_EXCHANGE` included).
    fn rename(&self, from: (u64, &[u8]), to: (u64, &[u8]), flags: RenameFlags) -> Res<()> {
        let ((parent, name), (new_parent, new_name)) = (from, to);
        let dir = self.node(parent)?;
        let new_dir = self.node(new_parent)?;
        let cname = sys::cname(name).map_err(errno)?;
        let new_cname = sys::cname(new_name).map_err(errno)?;
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        let _gate = self.gate.read();
        let from = self.child_path(parent, name)?;
        let to = self.child_path(new_parent, new_name)?;
        self.before_in(
            Mutation::Rename {
                from: &from,
                to: &to,
                exchange,
            },
            crate::Parents {
                from: dir.fd.as_fd(),
                to: Some(new_dir.fd.as_fd()),
            },
        )?;
        if !exchange {
            self.hold_fd_of(new_parent, new_name);
        }
        if let Err(e) = sys::renameat2(
            dir.fd.as_fd(),
            &cname,
            new_dir.fd.as_fd(),
            &new_cname,
            flags.bits(),
        ) {
            self.hook.failed(&Mutation::Rename {
                from: &from,
                to: &to,
                exchange,
            });
            return Err(errno(e));
        }
        self.inodes
            .rename(parent, name, new_parent, new_name, exchange);
        let now = match exchange {
            true => None,
            false => sys::stat_at(new_dir.fd.as_fd(), &new_cname).ok().flatten(),
        };
        self.after(
            Mutation::Rename {
                from: &from,
                to: &to,
                exchange,
            },
            now.as_ref(),
        );
        Ok(())
    }
}

impl Meta for State {
    /// `getattr`: the attributes of `ino`, through the handle `fh` when
    /// there is one.
    fn getattr(&self, ino: u64, fh: Option<FileHandle>) -> Res<Attr> {
        Ok(Attr {
            attr: self.stat(ino, fh)?,
            ttl: self.ttls().attr,
        })
    }

    /// `setattr`: mode, owner, size and times of `ino` (through the handle
    /// when there is one); answers the attributes after the change.
    fn setattr(&self, ino: u64, a: &SetAttr) -> Res<Attr> {
        let node = self.node(ino)?;
        let handle = a.fh.and_then(|fh| self.handles.get(fh.0));
        {
            let _gate = self.gate.read();
            if let Some(size) = a.size {
                // A large file cut or grown: only the bytes past the new
                // size can be lost.
                if self.no_open_active() && size == 0 {
                    // An `O_TRUNC` open arrives here too (no
                    // `ATOMIC_O_TRUNC` without OPEN): captured whole.
                    self.content_whole_before(ino, node.fd.as_fd())?
                } else if self.no_open_active() {
                    self.content_before(ino, node.fd.as_fd(), size, u64::MAX - size)?
                } else if self.ranged(node.fd.as_fd()) {
                    self.before_range(ino, size, u64::MAX - size)?
                } else {
                    self.before_inode(ino, |path| Mutation::Content { path })?
                }
                self.kill_suidgid(ino, node.fd.as_fd(), a.caller, || {
                    !sys::holds_fsetid(a.caller.pid)
                })?;
            }
            if a.nothing {
                self.chown_nothing(ino, node.fd.as_fd(), a.caller)?;
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
                sys::chmod_fd(fd, mode & 0o7777).map_err(errno)?;
            }
            if a.uid.is_some() || a.gid.is_some() {
                sys::chown_fd(
                    node.fd.as_fd(),
                    a.uid.unwrap_or(u32::MAX),
                    a.gid.unwrap_or(u32::MAX),
                )
                .map_err(errno)?;
            }
            if let Some(size) = a.size {
                match &handle {
                    Some(h) => sys::ftruncate(h.fd.as_fd(), size),
                    None => sys::truncate_path_fd(node.fd.as_fd(), size),
                }
                .map_err(errno)?;
            }
            if a.atime.is_some() || a.mtime.is_some() {
                sys::utimens_fd(fd, &[timespec(a.atime), timespec(a.mtime)]).map_err(errno)?;
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

    /// `readlink`: the target of the symlink `ino`.
    fn readlink(&self, ino: u64) -> Res<Vec<u8>> {
        let node = self.node(ino)?;
        sys::readlink_fd(node.fd.as_fd()).map_err(errno)
    }

    /// `statfs` of the filesystem holding `ino` (the root's if `ino` is
    /// gone).
    fn statfs(&self, ino: u64) -> Res<libc::statvfs> {
        let node = self.node(ino).or_else(|_| self.node(crate::inode::ROOT))?;
        sys::statvfs(node.fd.as_fd()).map_err(errno)
    }

    /// `access`: with `default_permissions` the kernel checks the mode bits
    /// itself; this only confirms the inode still exists.
    fn access(&self, ino: u64) -> Res<()> {
        let node = self.node(ino)?;
        sys::fstat(node.fd.as_fd()).map_err(errno)?;
        Ok(())
    }

    /// `setxattr` of `name` on `ino` (`flags`: `XATTR_CREATE`/`_REPLACE`).
    fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Res<()> {
        let node = self.node(ino)?;
        let name = sys::cname_any(name).map_err(errno)?;
        let _gate = self.gate.read();
        self.before_inode(ino, |path| Mutation::Metadata { path })?;
        sys::setxattr(node.fd.as_fd(), &name, value, flags).map_err(errno)?;
        self.after_inode(ino, |path| Mutation::Metadata { path });
        Ok(())
    }

    /// `getxattr` of `name` on `ino`: the size needed when `size` is 0,
    /// else at most `size` bytes of the value (`ERANGE` if it is larger).
    fn getxattr(&self, ino: u64, name: &[u8], size: u32) -> Res<Xattr> {
        let node = self.node(ino)?;
        let name = sys::cname_any(name).map_err(errno)?;
        Xattr::read(size, |buf| sys::getxattr(node.fd.as_fd(), &name, buf))
    }

    /// `listxattr` of `ino`: as [`State::getxattr`], for the name list.
    fn listxattr(&self, ino: u64, size: u32) -> Res<Xattr> {
        let node = self.node(ino)?;
        Xattr::read(size, |buf| sys::listxattr(node.fd.as_fd(), buf))
    }

    /// `removexattr` of `name` on `ino`.
    fn removexattr(&self, ino: u64, name: &[u8]) -> Res<()> {
        let node = self.node(ino)?;
        let name = sys::cname_any(name).map_err(errno)?;
        let _gate = self.gate.read();
        self.before_inode(ino, |path| Mutation::Metadata { path })?;
        sys::removexattr(node.fd.as_fd(), &name).map_err(errno)?;
        self.after_inode(ino, |path| Mutation::Metadata { path });
        Ok(())
    }
}
