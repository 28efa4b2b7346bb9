//! The one `fuser::Filesystem` front end of the passthrough and the
//! overlay.
//!
//! [`Front`] decodes each request (names as bytes, modes under the umask,
//! the caller, the flags that decide how a read or a write lands), traces
//! it, calls one operation of its filesystem and answers with
//! [`Answer::answer`]. The flags negotiated at `init` are decided here too,
//! from what the filesystem asks for ([`Caps`]). Nothing else: no state,
//! no I/O.
//!
//! **Shape.** The operations are four traits with plain
//! `Result`-returning methods, grouped as the two filesystems group their
//! code, so each implements a trait directly where the operations live
//! (no forwarding layer):
//!
//! - [`Names`]: lookup, forget, creating, removing and renaming entries;
//! - [`Meta`]: attributes, symlink targets, extended attributes, statfs,
//!   access;
//! - [`Files`]: file I/O, with and without handles;
//! - [`Dirs`]: directory handles and listings.
//!
//! One generic front end rather than one trait object: the callbacks are
//! monomorphised per filesystem, so a request costs what it did when each
//! filesystem had its own `impl Filesystem`.
//!
//! **Where the two differ** the traits say so in the method's contract,
//! and each implementation decides: the passthrough asks the hook before
//! every mutation of the backing directory; the overlay copies a lower
//! entry up before its first change and asks the hook before every change
//! of the upper directory. Both answer OPEN, FLUSH and CREATE `ENOSYS` once
//! the kernel took `FUSE_NO_OPEN_SUPPORT`, and OPENDIR once it took
//! `FUSE_NO_OPENDIR_SUPPORT` (the passthrough answers CREATE `ENOSYS`
//! only where `Options::no_create` says so). Arguments only one of them
//! needs (the handle of a getattr, `O_DIRECT`, the caller of a write) are
//! decoded for both; the other ignores them.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, CopyFileRangeFlags, FileHandle, Filesystem, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use log::trace;

use crate::creds::Caller;
use crate::reply::{Answer, Attr, Created, Entry, Opened, Res, Xattr};

/// The init capabilities the kernel took: written once at init, before
/// any other request, and read by every request after.
#[derive(Debug, Default)]
pub(crate) struct Granted(AtomicU64);

impl Granted {
    /// Records that the kernel took `flags`.
    pub(crate) fn add(&self, flags: InitFlags) {
        self.0.fetch_or(flags.bits(), Ordering::Relaxed);
    }

    /// True when the kernel took every flag of `flags`.
    pub(crate) fn has(&self, flags: InitFlags) -> bool {
        InitFlags::from_bits_retain(self.0.load(Ordering::Relaxed)).contains(flags)
    }
}

/// The optional fields of a `setattr` call.
pub(crate) struct SetAttr {
    pub(crate) mode: Option<u32>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) size: Option<u64>,
    pub(crate) atime: Option<TimeOrNow>,
    pub(crate) mtime: Option<TimeOrNow>,
    pub(crate) fh: Option<FileHandle>,
    /// The caller (whether it holds `CAP_FSETID` decides if a truncation
    /// clears suid/sgid under `FUSE_HANDLE_KILLPRIV_V2`).
    pub(crate) caller: Caller,
    /// Nothing but perhaps the change time is set: a `chown` to -1, -1.
    pub(crate) nothing: bool,
}

/// How a WRITE request lands, from its flags.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteHow {
    /// The caller's file is `O_DIRECT` now and the write is its own, not a
    /// page-cache writeback.
    pub(crate) direct: bool,
    /// `FUSE_WRITE_KILL_SUIDGID`: the caller lacks `CAP_FSETID`.
    pub(crate) kill: bool,
    /// The caller's `O_APPEND`, `O_SYNC`, `O_DSYNC` (none for a writeback),
    /// for a write without a handle.
    pub(crate) landing: i32,
}

/// The caller of a request, as entries it creates should be owned.
pub(crate) fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

/// What a filesystem asks of the kernel at init, and where it keeps what
/// the kernel took.
pub(crate) trait Caps {
    /// The prefix of its trace lines.
    const TRACE: &'static str;
    /// Asked for on every mount (each one the kernel lacks is logged and
    /// left off).
    const ALWAYS: InitFlags;
    /// Asked for where the mount allows it, recorded in
    /// [`Caps::granted`] when taken: `FUSE_NO_OPEN_SUPPORT`,
    /// `FUSE_HANDLE_KILLPRIV_V2` (asked only once the kernel took
    /// `FUSE_NO_OPEN_SUPPORT`), `FUSE_NO_OPENDIR_SUPPORT`.
    fn wanted(&self) -> InitFlags;
    /// Which of [`Caps::wanted`] the kernel took.
    fn granted(&self) -> &Granted;
}

/// Names: lookups and the operations that create, remove or rename
/// entries. Each mutation asks the hook first (the overlay: after copying
/// up what it changes) and fails with the hook's errno unchanged.
pub(crate) trait Names {
    /// `lookup` of `parent/name`; a miss is `ENOENT` with a negative TTL.
    fn lookup(&self, parent: u64, name: &[u8]) -> Res<Entry>;
    /// The kernel dropped `n` lookups of `ino`.
    fn forget(&self, ino: u64, n: u64);
    /// `mknod` of `parent/name`, `mode` with the umask applied, owned by
    /// `caller`.
    fn mknod(&self, caller: Caller, parent: u64, name: &[u8], mode: u32, rdev: u32) -> Res<Entry>;
    /// `mkdir` of `parent/name`, `mode` with the umask applied.
    fn mkdir(&self, caller: Caller, parent: u64, name: &[u8], mode: u32) -> Res<Entry>;
    /// `symlink` at `parent/name` pointing at `target`.
    fn symlink(&self, caller: Caller, parent: u64, name: &[u8], target: &[u8]) -> Res<Entry>;
    /// `link` of `ino` as `new_parent/new_name`.
    fn link(&self, caller: Caller, ino: u64, new_parent: u64, new_name: &[u8]) -> Res<Entry>;
    /// `unlink` (or `rmdir` when `rmdir`) of `parent/name`.
    fn remove(&self, parent: u64, name: &[u8], rmdir: bool) -> Res<()>;
    /// `rename` of `from` (directory, name) to `to` (`renameat2` flags).
    fn rename(&self, from: (u64, &[u8]), to: (u64, &[u8]), flags: RenameFlags) -> Res<()>;
}

/// Metadata: attributes, symlink targets, extended attributes.
pub(crate) trait Meta {
    /// `getattr` of `ino` (through handle `fh` where the kernel sent one).
    fn getattr(&self, ino: u64, fh: Option<FileHandle>) -> Res<Attr>;
    /// `setattr` of `ino`: a mutation (size, mode, owner, times).
    fn setattr(&self, ino: u64, a: &SetAttr) -> Res<Attr>;
    /// The target of symlink `ino`.
    fn readlink(&self, ino: u64) -> Res<Vec<u8>>;
    /// `statfs` of the filesystem holding `ino`.
    fn statfs(&self, ino: u64) -> Res<libc::statvfs>;
    /// `access` of `ino` (permissions are the kernel's:
    /// `default_permissions`).
    fn access(&self, ino: u64) -> Res<()>;
    /// `setxattr` of `name` on `ino`: a mutation.
    fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Res<()>;
    /// `getxattr` of `name` on `ino`; `size` 0 asks for the size.
    fn getxattr(&self, ino: u64, name: &[u8], size: u32) -> Res<Xattr>;
    /// `listxattr` of `ino`; `size` 0 asks for the size.
    fn listxattr(&self, ino: u64, size: u32) -> Res<Xattr>;
    /// `removexattr` of `name` on `ino`: a mutation.
    fn removexattr(&self, ino: u64, name: &[u8]) -> Res<()>;
}

/// File I/O. Without OPEN (`FUSE_NO_OPEN_SUPPORT` taken) requests come
/// with handle 0 and OPEN, FLUSH and CREATE answer `ENOSYS`.
pub(crate) trait Files {
    /// `open` of `ino` with the caller's `open(2)` flags.
    fn open(&self, ino: u64, flags: i32) -> Res<Opened>;
    /// `create` (and open) `parent/name` as `who`: `mode` with the umask applied,
    /// `flags` the `open(2)` flags without `O_CREAT` and `O_NOCTTY`.
    fn create(&self, who: Caller, parent: u64, name: &[u8], mode: u32, flags: i32) -> Res<Created>;
    /// `size` bytes of `ino` at `offset`; `direct`: the caller's file is
    /// `O_DIRECT` now.
    fn read(&self, ino: u64, fh: FileHandle, offset: u64, size: u32, direct: bool) -> Res<Vec<u8>>;
    /// `data` into `ino` at `offset`, landing as `how` says; the bytes
    /// written.
    fn write(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        how: WriteHow,
        caller: Caller,
    ) -> Res<usize>;
    /// `flush` of handle `fh` (a `close` of one of its descriptors).
    fn flush(&self, fh: FileHandle) -> Res<()>;
    /// The kernel's last reference to handle `fh` is gone.
    fn release(&self, fh: FileHandle);
    /// `fsync` (`fdatasync` when `datasync`) of `ino`.
    fn fsync_file(&self, ino: u64, fh: FileHandle, datasync: bool) -> Res<()>;
    /// `fallocate` of `ino`: a mutation.
    fn fallocate(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        caller: Caller,
    ) -> Res<()>;
    /// `lseek` (`SEEK_DATA`, `SEEK_HOLE`) in `ino`.
    fn lseek(&self, ino: u64, fh: FileHandle, offset: i64, whence: i32) -> Res<i64>;
    /// `copy_file_range` between two open files; the bytes copied.
    fn copy_file_range(
        &self,
        from: (u64, FileHandle),
        offset_in: u64,
        to: (u64, FileHandle),
        offset_out: u64,
        len: u64,
        caller: Caller,
    ) -> Res<usize>;
}

/// Directory handles and listings. Without OPENDIR
/// (`FUSE_NO_OPENDIR_SUPPORT` taken) listings come with handle 0 and
/// OPENDIR answers `ENOSYS`.
pub(crate) trait Dirs {
    /// `opendir` of `ino`.
    fn opendir(&self, ino: u64) -> Res<Opened>;
    /// Adds the entries of `ino` from `offset` to `reply`.
    fn readdir(&self, ino: u64, fh: FileHandle, offset: u64, reply: &mut ReplyDirectory)
        -> Res<()>;
    /// Adds the entries of `ino` from `offset` with their attributes.
    fn readdirplus(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectoryPlus,
    ) -> Res<()>;
    /// The kernel's last reference to directory handle `fh` is gone.
    fn releasedir(&self, fh: FileHandle);
    /// `fsync` of directory `ino`.
    fn fsyncdir(&self, ino: u64, fh: FileHandle, datasync: bool) -> Res<()>;
}

/// A filesystem the front end serves.
pub(crate) trait Ops: Caps + Names + Meta + Files + Dirs + Send + Sync + 'static {}

impl<T: Caps + Names + Meta + Files + Dirs + Send + Sync + 'static> Ops for T {}

/// The `fuser::Filesystem` of a mount: decode, call, answer.
pub(crate) struct Front<T> {
    pub(crate) fs: Arc<T>,
}

/// Asks for `flag`; false (logged) where the kernel lacks it.
fn ask(config: &mut KernelConfig, flag: InitFlags) -> bool {
    match config.add_capabilities(flag) {
        Ok(()) => true,
        Err(unsupported) => {
            log::debug!("kernel lacks {unsupported:?}");
            false
        }
    }
}

impl<T: Ops> Filesystem for Front<T> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // What each flag saves, and the flags tried and left off:
        // fs/README.md, "Init flags".
        let (wanted, granted) = (self.fs.wanted(), self.fs.granted());
        let ask_wanted = |config: &mut KernelConfig, flag: InitFlags| {
            if wanted.contains(flag) && ask(config, flag) {
                granted.add(flag);
            }
        };
        // No OPEN, RELEASE or FLUSH for files: asked for first, it decides
        // whether `ATOMIC_O_TRUNC` may be.
        ask_wanted(config, InitFlags::FUSE_NO_OPEN_SUPPORT);
        // With `ATOMIC_O_TRUNC` the kernel leaves an `O_TRUNC` open's
        // truncation to the OPEN (`fuse_do_setattr` skips the SETATTR of
        // `ATTR_OPEN`); without OPEN nothing would truncate the file.
        // Without the flag it arrives as a size SETATTR, captured there.
        if !granted.has(InitFlags::FUSE_NO_OPEN_SUPPORT) {
            ask(config, InitFlags::FUSE_ATOMIC_O_TRUNC);
        }
        // No GETXATTR of `security.capability` before every write: the
        // daemon clears suid/sgid itself (passthrough `io.rs`, "Killing
        // suid/sgid"). Only without OPEN, where an `O_TRUNC` open arrives
        // as a size SETATTR: fuser 0.18 drops the OPEN's kill flag.
        if granted.has(InitFlags::FUSE_NO_OPEN_SUPPORT) {
            ask_wanted(config, InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        }
        for flag in T::ALWAYS.iter() {
            ask(config, flag);
        }
        // No OPENDIR/RELEASEDIR, every listing cached until invalidated.
        ask_wanted(config, InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        trace!("{}lookup {parent:?} {name:?}", T::TRACE);
        self.fs.lookup(parent.0, name.as_bytes()).answer(reply);
    }

    // `batch_forget` keeps fuser's default, which calls `forget` per inode
    // (fuser does not export the type its signature needs).
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        trace!("{}getattr {ino:?}", T::TRACE);
        self.fs.getattr(ino.0, fh).answer(reply);
    }

    fn setattr(
        &self,
        req: &Request,
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
            caller: caller(req),
            // What `chown(f, -1, -1)` sends under `FUSE_HANDLE_KILLPRIV_V2`
            // (nothing to set, or the change time alone): the kernel
            // dropped its suid/sgid kill (passthrough `ops.rs`,
            // `chown_nothing`).
            nothing: [mode, uid, gid].iter().all(Option::is_none)
                && size.is_none()
                && atime.is_none()
                && mtime.is_none(),
        };
        self.fs.setattr(ino.0, &a).answer(reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.fs.readlink(ino.0).answer(reply);
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
        let mode = (mode & libc::S_IFMT) | (mode & 0o7777 & !umask);
        self.fs
            .mknod(caller(req), parent.0, name.as_bytes(), mode, rdev)
            .answer(reply);
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
        let mode = mode & 0o7777 & !umask;
        self.fs
            .mkdir(caller(req), parent.0, name.as_bytes(), mode)
            .answer(reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.fs
            .remove(parent.0, name.as_bytes(), false)
            .answer(reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.fs
            .remove(parent.0, name.as_bytes(), true)
            .answer(reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (name, target) = (link_name.as_bytes(), target.as_os_str().as_bytes());
        self.fs
            .symlink(caller(req), parent.0, name, target)
            .answer(reply);
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
        let from = (parent.0, name.as_bytes());
        let to = (newparent.0, newname.as_bytes());
        self.fs.rename(from, to, flags).answer(reply);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.fs
            .link(caller(req), ino.0, newparent.0, newname.as_bytes())
            .answer(reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        trace!("{}open {ino:?} {:#x}", T::TRACE, flags.0);
        self.fs.open(ino.0, flags.0).answer(reply);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        trace!("{}read {ino:?} {offset} {size} {:#x}", T::TRACE, flags.0);
        // `flags` are the caller's file flags now (an `fcntl(F_SETFL)`
        // included): direct I/O is decided per request.
        let direct = flags.0 & libc::O_DIRECT != 0;
        self.fs.read(ino.0, fh, offset, size, direct).answer(reply);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        trace!(
            "{}write {ino:?} {offset} {} {write_flags:?} {:#x}",
            T::TRACE,
            data.len(),
            flags.0
        );
        // A page-cache writeback (of a shared mapping) is never direct,
        // whichever handle the kernel sends it through.
        let cache = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let direct = flags.0 & libc::O_DIRECT != 0 && !cache;
        // The caller's file flags that change how the backing write lands,
        // for a write without a handle (`FUSE_NO_OPEN_SUPPORT`). A
        // writeback is at page offsets, whatever the file's flags.
        let landing = if cache {
            0
        } else {
            flags.0 & (libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC)
        };
        // Set by the kernel under `FUSE_HANDLE_KILLPRIV_V2` when the
        // caller lacks `CAP_FSETID`.
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let how = WriteHow {
            direct,
            kill,
            landing,
        };
        self.fs
            .write(ino.0, fh, offset, data, how, caller(req))
            .answer(reply);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.fs.flush(fh).answer(reply);
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
        self.fs.release(fh);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fs.fsync_file(ino.0, fh, datasync).answer(reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.fs.opendir(ino.0).answer(reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let res = self.fs.readdir(ino.0, fh, offset, &mut reply);
        res.answer(reply);
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let res = self.fs.readdirplus(ino.0, fh, offset, &mut reply);
        res.answer(reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.releasedir(fh);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fs.fsyncdir(ino.0, fh, datasync).answer(reply);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.fs.statfs(ino.0).answer(reply);
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
        self.fs
            .setxattr(ino.0, name.as_bytes(), value, flags)
            .answer(reply);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.fs.getxattr(ino.0, name.as_bytes(), size).answer(reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.fs.listxattr(ino.0, size).answer(reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.fs.removexattr(ino.0, name.as_bytes()).answer(reply);
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.fs.access(ino.0).answer(reply);
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
        trace!("{}create {parent:?} {name:?} {flags:#x}", T::TRACE);
        let mode = mode & 0o7777 & !umask;
        let flags = flags & !(libc::O_NOCTTY | libc::O_CREAT);
        self.fs
            .create(caller(req), parent.0, name.as_bytes(), mode, flags)
            .answer(reply);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.fs
            .fallocate(ino.0, fh, offset, length, mode, caller(req))
            .answer(reply);
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.fs.lseek(ino.0, fh, offset, whence).answer(reply);
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let (from, to) = ((ino_in.0, fh_in), (ino_out.0, fh_out));
        self.fs
            .copy_file_range(from, offset_in, to, offset_out, len, caller(req))
            .answer(reply);
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        crate::ioctl::unsupported(cmd, reply);
    }
}
