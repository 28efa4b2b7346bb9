//! The passthrough filesystem: serves the backing directory as it is and
//! calls the mutation hook before every mutation.
//!
//! - `mod.rs` (here): the `fuser::Filesystem` impl. Each callback decodes
//!   its arguments, calls one operation on [`State`] and answers with
//!   [`Answer::answer`]; nothing else.
//! - `ops.rs`: [`State`] (inodes, handles, the quiesce gate, the hook, the
//!   cache settings) and the namespace and metadata operations.
//! - `io.rs`: file I/O; `dir.rs`: directory I/O (listings).
//! - `attr.rs`: `stat` ↔ FUSE conversions (attributes, times, devices).
//! - `cache.rs`: what [`crate::Controller::invalidate`] needs from the
//!   passthrough (the crate's `Invalidate` trait).
//!
//! Every mutating operation takes the read side of the quiesce gate, asks
//! the hook, and only then touches the backing directory; it holds the gate
//! until the backing call returned. Read-only operations never call the hook.

pub(crate) mod attr;
mod cache;
mod dir;
mod io;
mod ops;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, CopyFileRangeFlags, FileHandle, Filesystem, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use log::trace;

pub(crate) use ops::{Granted, State, Ttls};

use crate::reply::Answer;
use ops::SetAttr;

/// The `fuser::Filesystem` implementation.
pub(crate) struct Passthrough {
    pub(crate) state: Arc<State>,
}

impl Filesystem for Passthrough {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // What each flag saves, and the flags tried and left off:
        // fs/README.md, "Init flags".
        // No OPEN, RELEASE or FLUSH for files, every file's pages kept:
        // only while the watch invalidates a file's pages when it changes
        // behind the mount (docs/coherence.md). Asked for first: it decides
        // whether `ATOMIC_O_TRUNC` may be.
        let (wanted, granted) = (self.state.wanted, &self.state.granted);
        if wanted.contains(InitFlags::FUSE_NO_OPEN_SUPPORT) {
            match config.add_capabilities(InitFlags::FUSE_NO_OPEN_SUPPORT) {
                Ok(()) => granted.add(InitFlags::FUSE_NO_OPEN_SUPPORT),
                Err(unsupported) => log::debug!("kernel lacks {unsupported:?}"),
            }
        }
        // With `ATOMIC_O_TRUNC` the kernel leaves an `O_TRUNC` open's
        // truncation to the OPEN (`fuse_do_setattr` skips the SETATTR of
        // `ATTR_OPEN`); without OPEN nothing would truncate the backing
        // file. Without the flag it arrives as a size SETATTR, captured
        // there.
        if !granted.has(InitFlags::FUSE_NO_OPEN_SUPPORT) {
            if let Err(unsupported) = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC) {
                log::debug!("kernel lacks {unsupported:?}");
            }
        }
        // No GETXATTR of `security.capability` before every write: the
        // daemon clears suid/sgid itself (`io.rs`, "Killing suid/sgid").
        // Only without OPEN, where an `O_TRUNC` open arrives as a size
        // SETATTR: fuser 0.18 drops the OPEN's kill flag.
        if wanted.contains(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
            && granted.has(InitFlags::FUSE_NO_OPEN_SUPPORT)
        {
            match config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
                Ok(()) => granted.add(InitFlags::FUSE_HANDLE_KILLPRIV_V2),
                Err(unsupported) => log::debug!("kernel lacks {unsupported:?}"),
            }
        }
        for flag in [
            // READDIRPLUS only at the start of a listing or after a lookup
            // in it.
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_PARALLEL_DIROPS,
            // A symlink's target never changes for one inode; a rewind's
            // `inval_inode` drops the cached target with the pages.
            InitFlags::FUSE_CACHE_SYMLINKS,
            // The kernel drops an inode's cached pages (and cached symlink
            // target) when a refreshed mtime or size differs: a backstop
            // for `FOPEN_KEEP_CACHE` and `CACHE_SYMLINKS`.
            InitFlags::FUSE_AUTO_INVAL_DATA,
        ] {
            if let Err(unsupported) = config.add_capabilities(flag) {
                log::debug!("kernel lacks {unsupported:?}");
            }
        }
        // No OPENDIR/RELEASEDIR, every listing cached: only while the
        // watch invalidates a directory's listing when it changes behind
        // the mount (docs/coherence.md).
        if wanted.contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
            match config.add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
                Ok(()) => granted.add(InitFlags::FUSE_NO_OPENDIR_SUPPORT),
                Err(unsupported) => log::debug!("kernel lacks {unsupported:?}"),
            }
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        trace!("lookup {parent:?} {name:?}");
        self.state.lookup(parent.0, name.as_bytes()).answer(reply);
    }

    // `batch_forget` keeps fuser's default, which calls `forget` per inode
    // (fuser does not export the type its signature needs).
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.state.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        trace!("getattr {ino:?}");
        self.state.getattr(ino.0, fh).answer(reply);
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
            caller: ops::caller(req),
            // What `chown(f, -1, -1)` sends under `FUSE_HANDLE_KILLPRIV_V2`
            // (nothing to set, or the change time alone): the kernel
            // dropped its suid/sgid kill (ops.rs, `chown_nothing`).
            nothing: [mode, uid, gid].iter().all(Option::is_none)
                && size.is_none()
                && atime.is_none()
                && mtime.is_none(),
        };
        self.state.setattr(ino.0, &a).answer(reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.state.readlink(ino.0).answer(reply);
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
        self.state
            .mknod(req, parent.0, name.as_bytes(), mode, rdev)
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
        self.state
            .mkdir(req, parent.0, name.as_bytes(), mode)
            .answer(reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.state
            .remove(parent.0, name.as_bytes(), 0)
            .answer(reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.state
            .remove(parent.0, name.as_bytes(), libc::AT_REMOVEDIR)
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
        self.state
            .symlink(
                req,
                parent.0,
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
            )
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
        self.state
            .rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags,
            )
            .answer(reply);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.state
            .link(req, ino.0, newparent.0, newname.as_bytes())
            .answer(reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        trace!("open {ino:?} {:#x}", flags.0);
        self.state.open(ino.0, flags.0).answer(reply);
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
        trace!("read {ino:?} {offset} {size} {:#x}", flags.0);
        // `flags` are the caller's file flags now (an `fcntl(F_SETFL)`
        // included): direct I/O is decided per request.
        let direct = flags.0 & libc::O_DIRECT != 0;
        self.state
            .read(ino.0, fh, offset, size, direct)
            .answer(reply);
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
            "write {ino:?} {offset} {} {write_flags:?} {:#x}",
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
        self.state
            .write(
                ino.0,
                fh,
                offset,
                data,
                io::WriteHow {
                    direct,
                    kill,
                    landing,
                },
                ops::caller(req),
            )
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
        self.state.flush(fh).answer(reply);
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
        self.state.release(fh);
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
        self.state.fsync_file(ino.0, fh, datasync).answer(reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.state.opendir(ino.0).answer(reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let res = self.state.readdir(ino.0, fh, offset, &mut reply);
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
        let res = self.state.readdirplus(ino.0, fh, offset, &mut reply);
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
        self.state.releasedir(fh);
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
        self.state.fsyncdir(ino.0, fh, datasync).answer(reply);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.state.statfs(ino.0).answer(reply);
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
        self.state
            .setxattr(ino.0, name.as_bytes(), value, flags)
            .answer(reply);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.state
            .getxattr(ino.0, name.as_bytes(), size)
            .answer(reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.state.listxattr(ino.0, size).answer(reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.state.removexattr(ino.0, name.as_bytes()).answer(reply);
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.state.access(ino.0).answer(reply);
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
        self.state
            .create(req, parent.0, name.as_bytes(), mode, umask, flags)
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
        self.state
            .fallocate(ino.0, fh, offset, length, mode, ops::caller(req))
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
        self.state.lseek(ino.0, fh, offset, whence).answer(reply);
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
        self.state
            .copy_file_range(
                (ino_in.0, fh_in),
                offset_in,
                (ino_out.0, fh_out),
                offset_out,
                len,
                ops::caller(req),
            )
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
