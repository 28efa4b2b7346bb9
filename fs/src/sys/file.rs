//! I/O on real (non-`O_PATH`) fds: read, write, sync, allocate, seek,
//! copy, truncate, statvfs.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::{cvt, cvt_size};
use crate::errno::os;

pub(crate) fn ftruncate(fd: BorrowedFd<'_>, size: u64) -> io::Result<()> {
    let size = libc::off_t::try_from(size).map_err(|_| os(libc::EFBIG))?;
    // SAFETY: valid fd.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), size) })?;
    Ok(())
}

pub(crate) fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let offset = libc::off_t::try_from(offset).map_err(|_| os(libc::EINVAL))?;
    // SAFETY: valid fd and buffer.
    cvt_size(unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset) })
}

pub(crate) fn pwrite(fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize> {
    let offset = libc::off_t::try_from(offset).map_err(|_| os(libc::EFBIG))?;
    // SAFETY: valid fd and buffer.
    cvt_size(unsafe { libc::pwrite(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), offset) })
}

pub(crate) fn fsync(fd: BorrowedFd<'_>, datasync: bool) -> io::Result<()> {
    // SAFETY: valid fd.
    cvt(unsafe {
        if datasync {
            libc::fdatasync(fd.as_raw_fd())
        } else {
            libc::fsync(fd.as_raw_fd())
        }
    })?;
    Ok(())
}

pub(crate) fn fallocate(fd: BorrowedFd<'_>, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    let offset = libc::off_t::try_from(offset).map_err(|_| os(libc::EFBIG))?;
    let len = libc::off_t::try_from(len).map_err(|_| os(libc::EFBIG))?;
    // SAFETY: valid fd.
    cvt(unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset, len) })?;
    Ok(())
}

pub(crate) fn lseek(fd: BorrowedFd<'_>, offset: i64, whence: i32) -> io::Result<i64> {
    // SAFETY: valid fd.
    let ret = unsafe { libc::lseek(fd.as_raw_fd(), offset, whence) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub(crate) fn copy_file_range(
    fd_in: BorrowedFd<'_>,
    off_in: u64,
    fd_out: BorrowedFd<'_>,
    off_out: u64,
    len: u64,
    flags: u32,
) -> io::Result<usize> {
    let mut off_in = libc::off64_t::try_from(off_in).map_err(|_| os(libc::EINVAL))?;
    let mut off_out = libc::off64_t::try_from(off_out).map_err(|_| os(libc::EINVAL))?;
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    // SAFETY: valid fds and offset pointers.
    cvt_size(unsafe {
        libc::copy_file_range(
            fd_in.as_raw_fd(),
            &mut off_in,
            fd_out.as_raw_fd(),
            &mut off_out,
            len,
            flags,
        )
    })
}

/// Emulates `close` on the caller's file for POSIX lock semantics without
/// closing the handle: close a duplicate.
pub(crate) fn close_dup(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: valid fd; the duplicate is closed right away.
    let dup = cvt(unsafe { libc::dup(fd.as_raw_fd()) })?;
    // SAFETY: `dup` is ours.
    cvt(unsafe { libc::close(dup) })?;
    Ok(())
}

pub(crate) fn statvfs(fd: BorrowedFd<'_>) -> io::Result<libc::statvfs> {
    let mut st = MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: valid fd and writable struct.
    cvt(unsafe { libc::fstatvfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: filled by fstatvfs.
    Ok(unsafe { st.assume_init() })
}
