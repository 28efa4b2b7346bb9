//! File I/O of the overlay ([`crate::front::Files`]): open (copy-up
//! before the first write), create, read (from the lower layer until the
//! file has an upper copy), write, flush, release, fsync, fallocate, lseek,
//! copy_file_range. Directory listings are in `dir.rs`.
//!
//! Handles on upper files behave exactly as the passthrough's: the capture
//! epoch, ranged handles (`MutationHook::range_min`), `after` at each
//! flush and release of a writer.
//!
//! **No OPEN** (`FUSE_NO_OPEN_SUPPORT`, as the passthrough's: crate README
//! "No open"). When the kernel takes it, OPEN and FLUSH are answered
//! `ENOSYS` once and the kernel sends no OPEN, FLUSH or RELEASE for files
//! again: a cold read of a file costs one request (READ) instead of three,
//! a warm one none. Requests on a file then come with handle 0 and each
//! goes through a descriptor of its own: a READ of a lower file through
//! [`Lower::open`] for that read, of an upper one through a reopen of its
//! node's fd. A WRITE, FALLOCATE
//! or the destination of a COPY_FILE_RANGE copies a lower file up first
//! (as an open for writing did), reports `Content` (or its range, for a
//! ranged file) at the first such request of each hook epoch (the node
//! remembers the epoch) and what it left after each (`after`). An
//! `O_TRUNC` open arrives as a size SETATTR (no `ATOMIC_O_TRUNC` then),
//! which copies up and captures as before. CREATE is answered `ENOSYS`
//! once too: the kernel then makes a new file with MKNOD and opens it
//! without OPEN, so no file has a handle whose writes would be reported
//! only at its RELEASE, after the writer's close returned.
//!
//! [`Lower::open`]: super::Lower::open

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex};

use fuser::{Errno, FileHandle, FopenFlags, InitFlags};

use super::handle::{LowerSource, OHandle};
use super::lower::LowerOpen;
use super::state::State;
use super::whiteout::whiteout_name;
use crate::creds::{zero_umask_for_thread, Caller};
use crate::errno::errno;
use crate::front::{Files, WriteHow};
use crate::handle::{Handle, NO_EPOCH};
use crate::hook::Mutation;
use crate::inode::{child, Stamp};
use crate::reply::{Created, Opened, Res};
use crate::report::Report;
use crate::sys;

/// True when open `flags` may change the file (write access or `O_TRUNC`).
fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl State {
    /// The open handle `fh`; `EBADF` if there is none.
    pub(super) fn handle(&self, fh: FileHandle) -> Res<Arc<OHandle>> {
        self.handles.get(fh.0).ok_or(Errno::EBADF)
    }

    /// The `FOPEN_*` flags for an upper file handle of `ino` opened as `fd`
    /// (`writable`: for writing).
    fn open_flags(&self, ino: u64, fd: BorrowedFd<'_>, writable: bool) -> FopenFlags {
        let same = sys::fstat(fd).is_ok_and(|st| self.nodes.opened(ino, Stamp::of(&st)));
        let mut flags = FopenFlags::empty();
        if same {
            flags |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        if !writable {
            // A read-only handle has nothing to report at a close.
            flags |= FopenFlags::FOPEN_NOFLUSH;
        }
        flags
    }

    /// True when a request on a file carries no handle because the kernel
    /// sends no OPEN (handle 0 under `FUSE_NO_OPEN_SUPPORT`).
    fn handleless(&self, fh: FileHandle) -> bool {
        fh.0 == 0 && self.granted.has(InitFlags::FUSE_NO_OPEN_SUPPORT)
    }

    /// A descriptor of the upper file of `ino` for one request without a
    /// handle, opened with `flags`; `None` while it has no upper entry.
    fn request_fd(&self, ino: u64, flags: i32) -> Res<Option<std::os::fd::OwnedFd>> {
        match self.info(ino)?.upper {
            Some(up) => Ok(Some(sys::reopen(up.fd.as_fd(), flags).map_err(errno)?)),
            None => Ok(None),
        }
    }

    /// A READ without a handle: from the upper file if `ino` has one, else
    /// from the lower file, opened by the lower layer for this read.
    fn read_handleless(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Res<usize> {
        if let Some(fd) = self.request_fd(ino, libc::O_RDONLY)? {
            return sys::pread(fd.as_fd(), buf, offset).map_err(errno);
        }
        let n = self.info(ino)?;
        if n.kind != libc::S_IFREG {
            return Err(Errno::EINVAL);
        }
        let path = self.path(ino)?;
        match self.lower.open(&path).map_err(errno)? {
            None => Err(Errno::ENOENT),
            Some(LowerOpen::File(f)) => f.read_at(offset, buf).map_err(errno),
            Some(LowerOpen::ReadAt) => self
                .lower
                .read_at(&path, offset, buf)
                .map_err(errno)?
                .ok_or(Errno::ENOENT),
        }
    }

    /// The upper file of `ino` for a change through a request without a
    /// handle: copied up first if it is only in the lower layer (as an
    /// open for writing does), then opened with `flags`. The caller holds
    /// the gate.
    fn request_fd_for_change(&self, ino: u64, flags: i32) -> Res<std::os::fd::OwnedFd> {
        let up = {
            let _ns = self.ns.lock().unwrap_or_else(|e| e.into_inner());
            self.check_lower_reserved(ino)?;
            self.copy_up(ino, None)?
        };
        sys::reopen(up.as_fd(), flags).map_err(errno)
    }

    /// Reports what a request without a handle left in `ino` (open as
    /// `fd`), as a close does for a handle.
    fn content_after(&self, ino: u64, fd: BorrowedFd<'_>) {
        let now = sys::fstat(fd).ok();
        for path in self.nodes.paths(ino) {
            self.after(Mutation::Content { path: &path }, now.as_ref());
        }
    }

    /// The lower file a lower handle reads (`None`: read `path` with
    /// `Lower::read_at`), opened by the lower layer at the first read
    /// that needs it: resolved once per handle, not at every read, and
    /// not at all while the kernel answers from its cached pages.
    fn lower_source(
        &self,
        path: &[u8],
        file: &Mutex<LowerSource>,
    ) -> Res<Option<Arc<dyn super::LowerFile>>> {
        let mut source = file.lock().unwrap_or_else(|e| e.into_inner());
        if let LowerSource::Unopened = *source {
            *source = match self.lower.open(path).map_err(errno)? {
                None => return Err(Errno::ENOENT),
                Some(LowerOpen::File(f)) => LowerSource::File(Arc::from(f)),
                Some(LowerOpen::ReadAt) => LowerSource::ReadAt,
            };
        }
        Ok(match &*source {
            LowerSource::File(f) => Some(Arc::clone(f)),
            LowerSource::Unopened | LowerSource::ReadAt => None,
        })
    }

    /// The upper file handle `fh` (every writer is one); `EBADF` otherwise.
    fn writer(&self, fh: FileHandle) -> Res<Arc<OHandle>> {
        let h = self.handle(fh)?;
        if h.upper().is_none() {
            return Err(Errno::EBADF);
        }
        Ok(h)
    }

    /// `fsync`/`fdatasync` of an open handle (nothing to do for a lower
    /// file or a directory listing).
    pub(super) fn fsync(&self, fh: FileHandle, datasync: bool) -> Res<()> {
        let oh = self.handle(fh)?;
        match oh.upper() {
            Some(h) => sys::fsync(h.fd.as_fd(), datasync).map_err(errno),
            None => Ok(()),
        }
    }
}

impl Files for State {
    /// `open` of `ino` with open(2) `flags`. Opening a lower file for
    /// writing (or `O_TRUNC`) copies it up first (with no bytes for
    /// `O_TRUNC`), then reports `Content` as the passthrough does.
    fn open(&self, ino: u64, flags: i32) -> Res<Opened> {
        if self.granted.has(InitFlags::FUSE_NO_OPEN_SUPPORT) {
            return Err(Errno::ENOSYS);
        }
        let n = self.info(ino)?;
        if n.kind == libc::S_IFLNK {
            return Err(Errno::ELOOP);
        }
        let flags = flags & !(libc::O_NOFOLLOW | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY);
        if !writes(flags) {
            let up = match (&n.upper, n.kind) {
                (Some(up), _) => Arc::clone(&up.fd),
                (None, libc::S_IFREG) => {
                    let path = self.path(ino)?;
                    let fh = self.handles.insert(OHandle::Lower {
                        ino,
                        path,
                        file: Mutex::new(LowerSource::Unopened),
                        upper: Mutex::new(None),
                    });
                    // The lower layer never changes; a copy-up drops the
                    // cache at the first upper open (no stamp yet).
                    let flags = FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH;
                    return Ok(Opened { fh, flags });
                }
                // A fifo, socket or device: opening it may block or talk
                // to a driver, so it gets its upper twin first.
                (None, _) => {
                    let _gate = self.gate.read();
                    let _ns = self.ns.lock().unwrap_or_else(|e| e.into_inner());
                    self.check_lower_reserved(ino)?;
                    self.copy_up(ino, None)?
                }
            };
            let fd = sys::reopen(up.as_fd(), flags).map_err(errno)?;
            let fopen = self.open_flags(ino, fd.as_fd(), false);
            let fh = self
                .handles
                .insert(OHandle::Upper(Handle::new(fd, ino, NO_EPOCH)));
            return Ok(Opened { fh, flags: fopen });
        }
        let epoch = self.hook.epoch();
        let handle = {
            let _gate = self.gate.read();
            let up = {
                let _ns = self.ns.lock().unwrap_or_else(|e| e.into_inner());
                self.check_lower_reserved(ino)?;
                let limit = (flags & libc::O_TRUNC != 0).then_some(0);
                self.copy_up(ino, limit)?
            };
            self.open_writer(up.as_fd(), ino, flags, epoch)?
        };
        let fopen = self.open_flags(ino, handle.fd.as_fd(), true);
        Ok(Opened {
            fh: self.handles.insert(OHandle::Upper(handle)),
            flags: fopen,
        })
    }

    /// `create` of `parent/name`: opens it with `flags`, making it in the
    /// upper layer (as the caller, `mode & !umask`) if the merged view
    /// lacks it, over a whiteout if there is one.
    fn create(&self, who: Caller, parent: u64, name: &[u8], mode: u32, flags: i32) -> Res<Created> {
        if self.granted.has(InitFlags::FUSE_NO_OPEN_SUPPORT) {
            // Without OPEN, `ENOSYS` once: the kernel then makes new files
            // with MKNOD and opens them without OPEN, so no file has a
            // handle and every write reports what it left before it
            // returns (there is no FLUSH to do it at a close).
            return Err(Errno::ENOSYS);
        }
        Self::check_new_name(name)?;
        let cname = sys::cname(name).map_err(errno)?;
        zero_umask_for_thread().map_err(errno)?;
        let epoch = self.hook.epoch();
        let fd = {
            let _gate = self.gate.read();
            let _ns = self.ns.lock().unwrap_or_else(|e| e.into_inner());
            if self.exists(parent, name)? {
                if flags & libc::O_EXCL != 0 {
                    return Err(Errno::EEXIST);
                }
                None
            } else {
                let (up, dir_path) = self.upper_dir(parent)?;
                let path = child(&dir_path, name);
                let had_whiteout = super::whiteout::has(up.as_fd(), &whiteout_name(name))?;
                self.before(Mutation::Create { path: &path })?;
                let fd = who
                    .create_file(up.as_fd(), &cname, flags, mode)
                    .map_err(errno)?;
                let now = sys::fstat(fd.as_fd()).ok();
                self.after(Mutation::Create { path: &path }, now.as_ref());
                if had_whiteout {
                    self.replace_whiteout(up.as_fd(), &dir_path, name, false)?;
                }
                Some(fd)
            }
        };
        let a = self.lookup_entry(parent, name)?;
        let fh = match fd {
            Some(fd) => self
                .handles
                .insert(OHandle::Upper(Handle::new(fd, a.ino.0, epoch))),
            None => match self.open(a.ino.0, flags) {
                Ok(o) => o.fh,
                Err(e) => {
                    self.nodes.forget(a.ino.0, 1);
                    return Err(e);
                }
            },
        };
        Ok(Created {
            attr: a,
            ttl: self.entry_ttl,
            fh,
            flags: FopenFlags::empty(),
        })
    }

    /// `read`: at most `size` bytes of file `ino` through handle `fh` at
    /// `offset`.
    fn read(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _direct: bool,
    ) -> Res<Vec<u8>> {
        let mut buf = vec![0u8; size as usize];
        if self.handleless(fh) {
            let n = self.read_handleless(ino, offset, &mut buf)?;
            buf.truncate(n);
            return Ok(buf);
        }
        let h = self.handle(fh)?;
        let n = match &*h {
            OHandle::Upper(h) => sys::pread(h.fd.as_fd(), &mut buf, offset).map_err(errno)?,
            OHandle::Lower {
                ino,
                path,
                file,
                upper,
            } => {
                let up_fd = {
                    let mut cached = upper.lock().unwrap_or_else(|e| e.into_inner());
                    if cached.is_none() {
                        if let Some(up) = self.nodes.info(*ino).and_then(|n| n.upper) {
                            let fd = sys::reopen(up.fd.as_fd(), libc::O_RDONLY).map_err(errno)?;
                            *cached = Some(Arc::new(fd));
                        }
                    }
                    cached.clone()
                };
                match up_fd {
                    Some(fd) => sys::pread(fd.as_fd(), &mut buf, offset).map_err(errno)?,
                    None => match self.lower_source(path, file)? {
                        Some(f) => f.read_at(offset, &mut buf).map_err(errno)?,
                        None => self
                            .lower
                            .read_at(path, offset, &mut buf)
                            .map_err(errno)?
                            .ok_or(Errno::ENOENT)?,
                    },
                }
            }
            OHandle::Dir { .. } => return Err(Errno::EISDIR),
        };
        buf.truncate(n);
        Ok(buf)
    }

    /// `write` of `data` at `offset` into file `ino` through handle `fh`.
    fn write(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _how: WriteHow,
        _caller: Caller,
    ) -> Res<usize> {
        if self.handleless(fh) {
            let _gate = self.gate.read();
            let fd = self.request_fd_for_change(ino, libc::O_WRONLY)?;
            self.content_before(ino, fd.as_fd(), offset, data.len() as u64)?;
            let n = sys::pwrite(fd.as_fd(), data, offset).map_err(errno)?;
            self.content_after(ino, fd.as_fd());
            return Ok(n);
        }
        let oh = self.writer(fh)?;
        let h = oh.upper().ok_or(Errno::EBADF)?;
        let _gate = self.gate.read();
        self.write_check(h, offset, data.len() as u64)?;
        sys::pwrite(h.fd.as_fd(), data, offset).map_err(errno)
    }

    /// `flush` (each close(2) of the handle `fh`). Without OPEN, `ENOSYS`:
    /// the kernel then sends no FLUSH again; each request without a handle
    /// reports what it left itself.
    fn flush(&self, fh: FileHandle) -> Res<()> {
        if self.granted.has(InitFlags::FUSE_NO_OPEN_SUPPORT) {
            return Err(Errno::ENOSYS);
        }
        let oh = self.handle(fh)?;
        if let Some(h) = oh.upper() {
            sys::close_dup(h.fd.as_fd()).map_err(errno)?;
            if h.epoch() != NO_EPOCH && h.take_dirty() {
                self.after_inode(h.ino, |path| Mutation::Content { path });
            }
        }
        Ok(())
    }

    /// `release` of the handle `fh` (its last close); never fails.
    fn release(&self, fh: FileHandle) {
        if let Some(oh) = self.handles.remove(fh.0) {
            if let Some(h) = oh.upper() {
                if h.epoch() != NO_EPOCH && h.take_dirty() {
                    self.after_inode(h.ino, |path| Mutation::Content { path });
                }
            }
        }
    }

    /// `fsync`/`fdatasync` of file `ino` through handle `fh`, or through a
    /// descriptor of its own without a handle (nothing to do for a file
    /// only in the lower layer).
    fn fsync_file(&self, ino: u64, fh: FileHandle, datasync: bool) -> Res<()> {
        if self.handleless(fh) {
            return match self.request_fd(ino, libc::O_RDONLY)? {
                Some(fd) => sys::fsync(fd.as_fd(), datasync).map_err(errno),
                None => Ok(()),
            };
        }
        self.fsync(fh, datasync)
    }

    /// `fallocate` of `[offset, offset + length)` of file `ino` with
    /// fallocate(2) `mode`.
    fn fallocate(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        _caller: Caller,
    ) -> Res<()> {
        if self.handleless(fh) {
            let _gate = self.gate.read();
            let fd = self.request_fd_for_change(ino, libc::O_WRONLY)?;
            if mode & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0 {
                // Moves bytes around the whole tail: not a range.
                self.before_inode(ino, |path| Mutation::Content { path })?;
            } else {
                self.content_before(ino, fd.as_fd(), offset, length)?;
            }
            sys::fallocate(fd.as_fd(), mode, offset, length).map_err(errno)?;
            self.content_after(ino, fd.as_fd());
            return Ok(());
        }
        let oh = self.writer(fh)?;
        let h = oh.upper().ok_or(Errno::EBADF)?;
        let _gate = self.gate.read();
        if h.ranged && mode & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0 {
            h.mark_dirty();
            self.before_inode(h.ino, |path| Mutation::Content { path })?;
        } else {
            self.write_check(h, offset, length)?;
        }
        sys::fallocate(h.fd.as_fd(), mode, offset, length).map_err(errno)
    }

    /// `lseek` of file `ino` through handle `fh` (`SEEK_DATA`/`SEEK_HOLE`);
    /// a lower file is all data.
    fn lseek(&self, ino: u64, fh: FileHandle, offset: i64, whence: i32) -> Res<i64> {
        if self.handleless(fh) {
            if let Some(fd) = self.request_fd(ino, libc::O_RDONLY)? {
                return sys::lseek(fd.as_fd(), offset, whence).map_err(errno);
            }
        } else {
            let oh = self.handle(fh)?;
            if let Some(h) = oh.upper() {
                return sys::lseek(h.fd.as_fd(), offset, whence).map_err(errno);
            }
        }
        let size = self.stat(ino)?.size;
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        match whence {
            libc::SEEK_DATA if offset < size => Ok(offset),
            libc::SEEK_HOLE if offset < size => Ok(size),
            libc::SEEK_DATA | libc::SEEK_HOLE => Err(Errno::ENXIO),
            _ => Err(Errno::EINVAL),
        }
    }

    /// `copy_file_range` of `len` bytes; the bytes copied. Only the
    /// destination is a mutation; a lower source is read and written.
    fn copy_file_range(
        &self,
        (ino_in, fh_in): (u64, FileHandle),
        offset_in: u64,
        (ino_out, fh_out): (u64, FileHandle),
        offset_out: u64,
        len: u64,
        caller: Caller,
    ) -> Res<usize> {
        if !self.handleless(fh_in) && !self.handleless(fh_out) {
            let h_in = self.handle(fh_in)?;
            let oh_out = self.writer(fh_out)?;
            let h_out = oh_out.upper().ok_or(Errno::EBADF)?;
            if let Some(src) = h_in.upper() {
                let _gate = self.gate.read();
                self.write_check(h_out, offset_out, len)?;
                return sys::copy_file_range(
                    src.fd.as_fd(),
                    offset_in,
                    h_out.fd.as_fd(),
                    offset_out,
                    len,
                    0,
                )
                .map_err(errno);
            }
        }
        let size = u32::try_from(len.min(1 << 20)).unwrap_or(1 << 20);
        let data = self.read(ino_in, fh_in, offset_in, size, false)?;
        let how = WriteHow {
            direct: false,
            kill: false,
            landing: 0,
        };
        self.write(ino_out, fh_out, offset_out, &data, how, caller)
    }
}
