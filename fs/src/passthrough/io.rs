//! File I/O of the passthrough: open, create, read, write, flush, release,
//! fsync, fallocate, lseek, copy_file_range (directory listings:
//! `dir.rs`).
//!
//! A write handle remembers the hook epoch it last reported `Content` in,
//! so a write costs one atomic compare unless a turn boundary passed; a
//! ranged handle reports the bytes each write may change instead (see the
//! crate README, "Epochs" and "Ranged handles").
//!
//! Without OPEN (`FUSE_NO_OPEN_SUPPORT`, crate README "No open"): a file's
//! requests come with handle 0 and go through an fd opened for the request
//! with the caller's file flags that matter (`O_DIRECT`, `O_APPEND`,
//! `O_SYNC`); the node remembers the epoch its content was reported in, so
//! the first mutating request of a turn reports it; each mutating request
//! reports what it left (`after`).
//!
//! Direct I/O: an open with `O_DIRECT` opens the backing file with it, and
//! a read or write the caller makes as direct goes through an aligned
//! bounce buffer to that fd, so the backing filesystem decides what is
//! aligned enough; a request of the other mode (a page-cache writeback, a
//! flag flipped with `fcntl(F_SETFL)`) uses a second open of the file with
//! `O_DIRECT` flipped (crate README, "Direct I/O").

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use fuser::{Errno, FileHandle, FopenFlags, InitFlags};

use super::ops::State;
use crate::creds::{zero_umask_for_thread, Caller};
use crate::errno::errno;
use crate::front::{Files, WriteHow};
use crate::handle::{Handle, NO_EPOCH};
use crate::hook::Mutation;
use crate::inode::Stamp;
use crate::reply::{Created, Opened, Res};
use crate::report::Report;
use crate::sys;

/// True when open `flags` may change the file (write access or `O_TRUNC`).
fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

pub(super) fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// The bits the kernel clears when a caller without `CAP_FSETID` changes
/// the content of the file `st` (`setattr_should_drop_suidgid`):
/// set-user-ID always; set-group-ID when group execute is set too, or
/// when the caller is not in the file's group (`in_group`, asked only
/// then). None for anything but a regular file.
fn suidgid_to_kill(st: &libc::stat, in_group: impl FnOnce(u32) -> bool) -> u32 {
    let mode = st.st_mode;
    if mode & libc::S_IFMT != libc::S_IFREG {
        return 0;
    }
    let mut kill = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !in_group(st.st_gid)) {
        kill |= libc::S_ISGID;
    }
    kill
}

impl State {
    /// Under `FUSE_HANDLE_KILLPRIV_V2` (taken at init, crate README
    /// "Killing suid/sgid"), called under the gate before the content of
    /// file `ino` (any fd of it as `fd`, `O_PATH` included) changes by
    /// `caller`: clears its set-user-ID and set-group-ID bits as the
    /// kernel would have before the change, when the caller lacks
    /// `CAP_FSETID` (`lacks_fsetid`, asked only when there is a bit to
    /// clear). The mode change is reported (`Metadata`) before it is made,
    /// so it is captured like a `chmod`, and the kernel's cached
    /// attributes of `ino` are invalidated after it. Without the flag
    /// taken, nothing. Errors: the `fstat` or `chmod` of the backing file
    /// fails, or the hook refuses the change; the content change must then
    /// not happen.
    pub(super) fn kill_suidgid(
        &self,
        ino: u64,
        fd: BorrowedFd<'_>,
        caller: Caller,
        lacks_fsetid: impl FnOnce() -> bool,
    ) -> Res<()> {
        if !self.granted.has(InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
            return Ok(());
        }
        let st = sys::fstat(fd).map_err(errno)?;
        if st.st_mode & (libc::S_ISUID | libc::S_ISGID) == 0 || !lacks_fsetid() {
            return Ok(());
        }
        let kill = suidgid_to_kill(&st, |gid| caller.in_group(gid));
        if kill == 0 {
            return Ok(());
        }
        self.before_inode(ino, |path| Mutation::Metadata { path })?;
        sys::chmod_fd(fd, st.st_mode & 0o7777 & !kill).map_err(errno)?;
        // A WRITE's reply carries no attributes: the kernel would go on
        // showing the bits it cached (for the attribute TTL). An
        // attribute-only invalidation takes no lock the caller's request
        // holds, so it is sent from here, before the reply.
        if let Some(notifier) = self.notifier.get() {
            if let Err(err) = notifier.inval_inode(fuser::INodeNo(ino), -1, 0) {
                log::debug!("attribute invalidation of {ino} failed: {err}");
            }
        }
        Ok(())
    }

    /// The kernel took `FUSE_NO_OPEN_SUPPORT`: files have no handles.
    pub(super) fn no_open_active(&self) -> bool {
        self.granted.has(InitFlags::FUSE_NO_OPEN_SUPPORT)
    }

    /// True when a request on a file carries no handle because the kernel
    /// sends no OPEN (handle 0 under `FUSE_NO_OPEN_SUPPORT`).
    fn handleless(&self, fh: FileHandle) -> bool {
        fh.0 == 0 && self.no_open_active()
    }

    /// An fd of file `ino` for one request without a handle: opened
    /// (through `/proc/self/fd`) with `access` (`O_RDONLY` or `O_WRONLY`)
    /// and `flags`, the caller's file flags that change how the backing
    /// call lands (`O_DIRECT`, `O_APPEND`, `O_SYNC`, `O_DSYNC`). Fails as
    /// the open does (`ESTALE` for a node the table lost, `EINVAL` for
    /// `O_DIRECT` where the backing filesystem has none).
    fn request_fd(&self, ino: u64, access: i32, flags: i32) -> Res<OwnedFd> {
        let node = self.node(ino)?;
        let keep = flags & (libc::O_DIRECT | libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC);
        sys::reopen(node.fd.as_fd(), access | keep).map_err(errno)
    }

    /// Called before a request without a handle takes every byte of file
    /// `ino` away (a truncation to size 0, which is also how an `O_TRUNC`
    /// open arrives), under the gate: reports `Content` unless the file was
    /// reported whole in this epoch already, and marks it so. A whole
    /// capture, as an `O_TRUNC` open makes through OPEN, not the range from
    /// 0 to the end: a range record holds a sparse file's holes as zeros,
    /// and a rewind of it would write them back allocated.
    pub(super) fn content_whole_before(&self, ino: u64, fd: BorrowedFd<'_>) -> Res<()> {
        let epoch = self.hook.epoch();
        if self.inodes.reported(ino) == Some((epoch, false)) && !self.changed_behind(ino, fd) {
            return Ok(());
        }
        self.before_inode(ino, |path| Mutation::Content { path })?;
        self.inodes.set_reported(ino, epoch, false);
        Ok(())
    }

    /// Reports what a request without a handle left in file `ino` (open
    /// as `fd`), as a close does for a handle: with no FLUSH, the
    /// fingerprint must follow each change, so that a change made behind
    /// the mount once the caller's call returned is someone else's.
    fn content_after(&self, ino: u64, fd: BorrowedFd<'_>) {
        let now = sys::fstat(fd).ok();
        self.after_inode_with(ino, |path| Mutation::Content { path }, now.as_ref());
    }

    /// Whether the kernel's cached pages (or listing) of `ino`, opened as
    /// `fd`, are still exact: nothing changed the backing inode since its
    /// previous open. Writes through the mount go through that cache, and
    /// any other change (behind the mount's back, a rewind, O_TRUNC) moves
    /// the ctime. The stamp is taken after the open, so a change racing with
    /// it only costs a cache drop at the next open.
    pub(super) fn unchanged_since_last_open(&self, ino: u64, fd: BorrowedFd<'_>) -> bool {
        match sys::fstat(fd) {
            Ok(st) => self.inodes.opened(ino, Stamp::of(&st)),
            Err(_) => false,
        }
    }

    /// The `FOPEN_*` flags for a file handle of `ino` opened as `fd`.
    fn open_flags(&self, ino: u64, fd: BorrowedFd<'_>, writable: bool) -> FopenFlags {
        let mut flags = FopenFlags::empty();
        if self.unchanged_since_last_open(ino, fd) {
            flags |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        if !writable {
            flags |= FopenFlags::FOPEN_NOFLUSH;
        }
        flags
    }

    /// The fd of `h` for a read or write that is `direct` (`O_DIRECT`) or
    /// not: the handle's own fd when its open was made the same way, else
    /// the handle's second open with `O_DIRECT` flipped, made now if it is
    /// the first such request. Fails as the reopen does (`EINVAL` where the
    /// backing filesystem has no direct I/O).
    fn io_fd<'h>(&self, h: &'h Handle, direct: bool) -> Res<BorrowedFd<'h>> {
        if direct == h.direct {
            return Ok(h.fd.as_fd());
        }
        if let Some(fd) = h.flipped.get() {
            return Ok(fd.as_fd());
        }
        let flags = sys::status_flags(h.fd.as_fd()).map_err(errno)? ^ libc::O_DIRECT;
        let fd = sys::reopen(
            h.fd.as_fd(),
            flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC),
        )
        .map_err(errno)?;
        // Two requests may race to make it: the loser's fd is dropped.
        let _ = h.flipped.set(fd);
        h.flipped.get().map(AsFd::as_fd).ok_or(Errno::EIO)
    }

    /// `fsync`/`fdatasync` of an open file or directory handle.
    pub(super) fn fsync(&self, fh: FileHandle, datasync: bool) -> Res<()> {
        let h = self.handle(fh)?;
        sys::fsync(h.fd.as_fd(), datasync).map_err(errno)
    }
}

/// At most `size` bytes of the file open at `fd` from `offset`; `direct`:
/// through an aligned bounce buffer (the fd is `O_DIRECT`).
fn read_at(fd: BorrowedFd<'_>, offset: u64, size: u32, direct: bool) -> Res<Vec<u8>> {
    if direct {
        return sys::pread_aligned(fd, size as usize, offset).map_err(errno);
    }
    let mut buf = vec![0u8; size as usize];
    let n = sys::pread(fd, &mut buf, offset).map_err(errno)?;
    buf.truncate(n);
    Ok(buf)
}

impl Files for State {
    /// `open` of `ino` with open(2) `flags`: the handle, and whether the
    /// kernel may keep its page cache of the file (`FOPEN_KEEP_CACHE`).
    /// Opening for writing reports `Content` (or nothing, for a ranged
    /// handle, whose writes report their ranges).
    ///
    /// With `FUSE_NO_OPEN_SUPPORT` taken, `ENOSYS`: the kernel then sends no
    /// OPEN or RELEASE of a file again, and its requests with handle 0.
    fn open(&self, ino: u64, flags: i32) -> Res<Opened> {
        if self.no_open_active() {
            return Err(Errno::ENOSYS);
        }
        let node = self.node(ino)?;
        if node.kind == libc::S_IFLNK {
            return Err(Errno::ELOOP);
        }
        // The kernel resolved the path already; the node fd is the inode
        // itself, so O_NOFOLLOW has nothing left to do, and creation flags
        // belong to `create`.
        let flags = flags & !(libc::O_NOFOLLOW | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY);
        let direct = flags & libc::O_DIRECT != 0;
        let handle = if !writes(flags) {
            Handle::new(
                sys::reopen(node.fd.as_fd(), flags).map_err(errno)?,
                ino,
                NO_EPOCH,
            )
        } else {
            // Read the epoch first: if a turn boundary slips in between, the
            // next write sees a newer epoch and reports again.
            let epoch = self.hook.epoch();
            let _gate = self.gate.read();
            self.open_writer(node.fd.as_fd(), ino, flags, epoch)?
        }
        .with_direct(direct);
        let fopen = self.open_flags(ino, handle.fd.as_fd(), writes(flags));
        Ok(Opened {
            fh: self.handles.insert(handle),
            flags: fopen,
        })
    }

    /// `create` of `parent/name`: opens it with `flags`, making it (as the
    /// caller, with `mode & !umask`) if absent. `Create` is reported only
    /// for a name that was absent; if it appears in between (made behind
    /// the mount's back) the call is retried, then fails with `EAGAIN`.
    ///
    /// Without OPEN (`FUSE_NO_OPEN_SUPPORT` taken) and with
    /// `Options::no_create`, `ENOSYS` before anything is touched: the
    /// kernel then sets `no_create` and makes this file, and every later
    /// one, with MKNOD (`fuse_atomic_open`), whose entry it opens without
    /// a request. An `O_CREAT` open of a name the kernel holds as present
    /// never reaches CREATE or MKNOD (it is a plain open, and its
    /// `O_TRUNC` a size SETATTR); MKNOD of a name that exists answers
    /// `EEXIST`, and the kernel drops its entry, as for CREATE.
    fn create(&self, who: Caller, parent: u64, name: &[u8], mode: u32, flags: i32) -> Res<Created> {
        if self.no_create && self.no_open_active() {
            return Err(Errno::ENOSYS);
        }
        let dir = self.node(parent)?;
        let cname = sys::cname(name).map_err(errno)?;
        zero_umask_for_thread().map_err(errno)?;
        // A file that appears between the existence check and the open (made
        // behind the mount's back) turns a reported Create into a retry.
        for _ in 0..4 {
            let gen = self.gen(parent);
            let epoch = self.hook.epoch();
            let _gate = self.gate.read();
            let path = self.child_path(parent, name)?;
            let existing = sys::stat_at(dir.fd.as_fd(), &cname).map_err(errno)?;
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
                who.create_file(dir.fd.as_fd(), &cname, flags, mode)
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
                Err(err) => return Err(errno(err)),
            };
            if self.no_open_active() {
                // No handle: the file's requests come with handle 0, and
                // the kernel sends no RELEASE for a created file either, so
                // a handle would never be freed. What the create left is
                // reported now (there is no FLUSH), and the node starts out
                // reported in this epoch.
                let reported = writes(flags) || existing.is_none();
                let mut now = None;
                if reported {
                    // Under the gate, as every `after`.
                    now = sys::fstat(fd.as_fd()).ok();
                    self.after(Mutation::Content { path: &path }, now.as_ref());
                }
                drop(fd);
                drop(_gate);
                let a = self.lookup_entry(parent, name)?;
                if reported {
                    // `epoch` was read before the report: a boundary since
                    // makes the next write report again.
                    self.inodes.set_reported(a.ino.0, epoch, false);
                    if let Some(st) = &now {
                        self.inodes.set_left(a.ino.0, Stamp::of(st));
                    }
                }
                return Ok(Created {
                    attr: a,
                    ttl: self.ttls_since(parent, gen).entry,
                    fh: 0,
                    flags: FopenFlags::FOPEN_NOFLUSH,
                });
            }
            drop(_gate);
            let a = self.lookup_entry(parent, name)?;
            let fh = self.handles.insert(
                Handle::new(
                    fd,
                    a.ino.0,
                    if writes(flags) || existing.is_none() {
                        epoch
                    } else {
                        NO_EPOCH
                    },
                )
                .with_direct(flags & libc::O_DIRECT != 0),
            );
            return Ok(Created {
                attr: a,
                ttl: self.ttls_since(parent, gen).entry,
                fh,
                flags: FopenFlags::empty(),
            });
        }
        Err(Errno::EAGAIN)
    }

    /// `read`: at most `size` bytes of handle `fh` at `offset`; `direct`
    /// when the caller's file is `O_DIRECT` now.
    fn read(&self, ino: u64, fh: FileHandle, offset: u64, size: u32, direct: bool) -> Res<Vec<u8>> {
        if self.handleless(fh) {
            let flags = if direct { libc::O_DIRECT } else { 0 };
            let fd = self.request_fd(ino, libc::O_RDONLY, flags)?;
            return read_at(fd.as_fd(), offset, size, direct);
        }
        let h = self.handle(fh)?;
        let fd = self.io_fd(&h, direct)?;
        read_at(fd, offset, size, direct)
    }

    /// `write` of `data` at `offset` through handle `fh` by `who`, landing
    /// as `how` says; the bytes written. A direct write (`how.direct`) is
    /// captured as any other, before it reaches the backing file. With
    /// `how.kill` (the caller lacks `CAP_FSETID`) set-user-ID and
    /// set-group-ID bits are cleared first ([`State::kill_suidgid`]).
    ///
    /// Without a handle (`FUSE_NO_OPEN_SUPPORT`) the write goes through an
    /// fd opened for it with `how.landing`, is captured by
    /// [`Report::content_before`] and reported after the fact.
    fn write(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        how: WriteHow,
        who: Caller,
    ) -> Res<usize> {
        let WriteHow {
            direct,
            kill,
            landing,
        } = how;
        if self.handleless(fh) {
            let flags = landing | if direct { libc::O_DIRECT } else { 0 };
            let fd = self.request_fd(ino, libc::O_WRONLY, flags)?;
            let _gate = self.gate.read();
            self.content_before(ino, fd.as_fd(), offset, data.len() as u64)?;
            if kill {
                self.kill_suidgid(ino, fd.as_fd(), who, || true)?;
            }
            let n = if direct {
                sys::pwrite_aligned(fd.as_fd(), data, offset)
            } else {
                sys::pwrite(fd.as_fd(), data, offset)
            }
            .map_err(errno)?;
            self.content_after(ino, fd.as_fd());
            return Ok(n);
        }
        let h = self.handle(fh)?;
        let fd = self.io_fd(&h, direct)?;
        let _gate = self.gate.read();
        self.write_check(&h, offset, data.len() as u64)?;
        if kill {
            self.kill_suidgid(ino, fd, who, || true)?;
        }
        if direct {
            sys::pwrite_aligned(fd, data, offset).map_err(errno)
        } else {
            sys::pwrite(fd, data, offset).map_err(errno)
        }
    }

    /// `flush` (each close(2) of the handle `fh`).
    ///
    /// Without OPEN (`FUSE_NO_OPEN_SUPPORT`), `ENOSYS`: the kernel then
    /// sends no FLUSH again (it still writes a file's dirty pages back at
    /// each close). Each mutating request reported what it left already.
    fn flush(&self, fh: FileHandle) -> Res<()> {
        if self.no_open_active() {
            return Err(Errno::ENOSYS);
        }
        let h = self.handle(fh)?;
        sys::close_dup(h.fd.as_fd()).map_err(errno)?;
        // close(2) waits for FLUSH (RELEASE comes later, asynchronously),
        // so the hook learns what a writer left before close returns:
        // a change made right after it is someone else's.
        if h.epoch() != NO_EPOCH && h.take_dirty() {
            self.after_inode(h.ino, |path| Mutation::Content { path });
        }
        Ok(())
    }

    /// `release` of the file handle `fh` (its last close); never fails.
    fn release(&self, fh: FileHandle) {
        if let Some(h) = self.handles.remove(fh.0) {
            // Not under the gate: a release is no mutation, and blocking it
            // while quiesced would tie up a worker thread for nothing. Only
            // if something (an mmap writeback) wrote since the last flush:
            // RELEASE arrives after close(2) returned, and a stat now could
            // take someone else's later change for the mount's.
            if h.epoch() != NO_EPOCH && h.take_dirty() {
                self.after_inode(h.ino, |path| Mutation::Content { path });
            }
        }
    }

    /// `fsync`/`fdatasync` of file `ino` through handle `fh`, or through an
    /// fd of its own when there is no handle (`FUSE_NO_OPEN_SUPPORT`).
    fn fsync_file(&self, ino: u64, fh: FileHandle, datasync: bool) -> Res<()> {
        if self.handleless(fh) {
            let fd = self.request_fd(ino, libc::O_RDONLY, 0)?;
            return sys::fsync(fd.as_fd(), datasync).map_err(errno);
        }
        self.fsync(fh, datasync)
    }

    /// `fallocate` of `[offset, offset + length)` with fallocate(2) `mode`,
    /// by `who` (see [`State::kill_suidgid`]).
    fn fallocate(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        who: Caller,
    ) -> Res<()> {
        let moves = mode & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0;
        if self.handleless(fh) {
            let fd = self.request_fd(ino, libc::O_WRONLY, 0)?;
            let _gate = self.gate.read();
            if moves {
                // Moves bytes around the whole tail: not a range.
                self.before_inode(ino, |path| Mutation::Content { path })?;
            } else {
                self.content_before(ino, fd.as_fd(), offset, length)?;
            }
            self.kill_suidgid(ino, fd.as_fd(), who, || !sys::holds_fsetid(who.pid))?;
            sys::fallocate(fd.as_fd(), mode, offset, length).map_err(errno)?;
            self.content_after(ino, fd.as_fd());
            return Ok(());
        }
        let h = self.handle(fh)?;
        let _gate = self.gate.read();
        if h.ranged && moves {
            // Moves bytes around the whole tail: not a range.
            h.mark_dirty();
            self.before_inode(h.ino, |path| Mutation::Content { path })?;
        } else {
            self.write_check(&h, offset, length)?;
        }
        self.kill_suidgid(ino, h.fd.as_fd(), who, || !sys::holds_fsetid(who.pid))?;
        sys::fallocate(h.fd.as_fd(), mode, offset, length).map_err(errno)
    }

    /// `lseek` of handle `fh` (for `SEEK_DATA`/`SEEK_HOLE`); the new offset.
    fn lseek(&self, ino: u64, fh: FileHandle, offset: i64, whence: i32) -> Res<i64> {
        if self.no_lseek {
            // Once: the kernel sets `no_lseek` and sends no more.
            return Err(Errno::ENOSYS);
        }
        if self.handleless(fh) {
            let fd = self.request_fd(ino, libc::O_RDONLY, 0)?;
            return sys::lseek(fd.as_fd(), offset, whence).map_err(errno);
        }
        let h = self.handle(fh)?;
        sys::lseek(h.fd.as_fd(), offset, whence).map_err(errno)
    }

    /// `copy_file_range` of `len` bytes from (inode, handle) `from` at
    /// `offset_in` to `to` at `offset_out`, by `who` (see
    /// [`State::kill_suidgid`]); the bytes copied. Only the destination is
    /// a mutation.
    fn copy_file_range(
        &self,
        (ino_in, fh_in): (u64, FileHandle),
        offset_in: u64,
        (ino_out, fh_out): (u64, FileHandle),
        offset_out: u64,
        len: u64,
        who: Caller,
    ) -> Res<usize> {
        if self.handleless(fh_in) || self.handleless(fh_out) {
            let fd_in = self.request_fd(ino_in, libc::O_RDONLY, 0)?;
            let fd_out = self.request_fd(ino_out, libc::O_WRONLY, 0)?;
            let _gate = self.gate.read();
            self.content_before(ino_out, fd_out.as_fd(), offset_out, len)?;
            self.kill_suidgid(ino_out, fd_out.as_fd(), who, || !sys::holds_fsetid(who.pid))?;
            let n =
                sys::copy_file_range(fd_in.as_fd(), offset_in, fd_out.as_fd(), offset_out, len, 0)
                    .map_err(errno)?;
            self.content_after(ino_out, fd_out.as_fd());
            return Ok(n);
        }
        let h_in = self.handle(fh_in)?;
        let h_out = self.handle(fh_out)?;
        let _gate = self.gate.read();
        self.write_check(&h_out, offset_out, len)?;
        self.kill_suidgid(ino_out, h_out.fd.as_fd(), who, || {
            !sys::holds_fsetid(who.pid)
        })?;
        sys::copy_file_range(
            h_in.fd.as_fd(),
            offset_in,
            h_out.fd.as_fd(),
            offset_out,
            len,
            0,
        )
        .map_err(errno)
    }
}
