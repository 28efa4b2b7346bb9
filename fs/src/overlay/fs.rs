//! The overlay's `fuser::Filesystem` impl. Each callback decodes its
//! arguments, calls one operation on [`State`] and answers with
//! [`Answer::answer`]; nothing else (the same shape as the passthrough's).

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

use super::meta::SetAttr;
use super::state::State;
use crate::reply::Answer;

/// The `fuser::Filesystem` implementation of the overlay.
pub(crate) struct Overlay {
    pub(crate) state: Arc<State>,
}

impl Filesystem for Overlay {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(unsupported) = config.add_capabilities(InitFlags::FUSE_READDIRPLUS_AUTO) {
            log::debug!("kernel lacks {unsupported:?}");
        }
        // No OPEN, RELEASE or FLUSH for files (`io.rs`, "No OPEN"); then
        // no `ATOMIC_O_TRUNC`: an `O_TRUNC` open must arrive as a size
        // SETATTR, as nothing else would truncate.
        if self.state.no_open {
            match config.add_capabilities(InitFlags::FUSE_NO_OPEN_SUPPORT) {
                Ok(()) => self
                    .state
                    .open_off
                    .store(true, std::sync::atomic::Ordering::Relaxed),
                Err(unsupported) => log::debug!("kernel lacks {unsupported:?}"),
            }
        }
        let trunc = (!self
            .state
            .open_off
            .load(std::sync::atomic::Ordering::Relaxed))
        .then_some(InitFlags::FUSE_ATOMIC_O_TRUNC);
        for flag in [
            Some(InitFlags::FUSE_DO_READDIRPLUS),
            trunc,
            Some(InitFlags::FUSE_PARALLEL_DIROPS),
        ]
        .into_iter()
        .flatten()
        {
            if let Err(unsupported) = config.add_capabilities(flag) {
                log::debug!("kernel lacks {unsupported:?}");
            }
        }
        // No OPENDIR/RELEASEDIR, every listing cached until invalidated:
        // only this mount and a rewind of the worktree change a merged
        // listing (`State::opendir`).
        if self.state.no_opendir {
            match config.add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
                Ok(()) => self
                    .state
                    .opendir_off
                    .store(true, std::sync::atomic::Ordering::Relaxed),
                Err(unsupported) => log::debug!("kernel lacks {unsupported:?}"),
            }
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        trace!("overlay lookup {parent:?} {name:?}");
        self.state.lookup(parent.0, name.as_bytes()).answer(reply);
    }

    // `batch_forget` keeps fuser's default, which calls `forget` per inode
    // (fuser does not export the type its signature needs).
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.state.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        trace!("overlay getattr {ino:?}");
        let _ = fh;
        self.state.getattr(ino.0).answer(reply);
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
            .remove(parent.0, name.as_bytes(), false)
            .answer(reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.state
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
        trace!("overlay open {ino:?} {:#x}", flags.0);
        self.state.open(ino.0, flags.0).answer(reply);
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
        trace!("overlay read {ino:?} {offset} {size}");
        self.state.read(ino.0, fh, offset, size).answer(reply);
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
        trace!("overlay write {ino:?} {offset} {}", data.len());
        self.state.write(ino.0, fh, offset, data).answer(reply);
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
        let _ = ino;
        self.state.statfs().answer(reply);
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
        trace!("overlay create {parent:?} {name:?} {flags:#x}");
        self.state
            .create(req, parent.0, name.as_bytes(), mode, umask, flags)
            .answer(reply);
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.state
            .fallocate(ino.0, fh, offset, length, mode)
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
        _req: &Request,
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
