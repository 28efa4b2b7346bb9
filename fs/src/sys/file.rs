//! I/O on real (non-`O_PATH`) fds: read, write, sync, allocate, seek,
//! copy, truncate, statvfs, and reads and writes through an aligned bounce
//! buffer for fds opened with `O_DIRECT`.

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

/// Alignment of the bounce buffers of [`pread_aligned`] and
/// [`pwrite_aligned`], in bytes: a page, which covers the memory alignment
/// `O_DIRECT` asks for on every block device (its logical block size, at
/// most a page).
pub(crate) const DIRECT_ALIGN: usize = 4096;

/// Where the first [`DIRECT_ALIGN`]-aligned byte of `buf`'s allocation is.
fn aligned_start(buf: &[u8]) -> usize {
    (DIRECT_ALIGN - (buf.as_ptr() as usize) % DIRECT_ALIGN) % DIRECT_ALIGN
}

/// `pread` of at most `len` bytes at `offset` into memory aligned to
/// [`DIRECT_ALIGN`], as an `O_DIRECT` fd needs; the bytes read. The offset
/// and length are passed on as they are, so a misaligned one fails as the
/// filesystem decides (`EINVAL` on ext4).
pub(crate) fn pread_aligned(fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len + DIRECT_ALIGN];
    let start = aligned_start(&buf);
    let n = pread(fd, &mut buf[start..start + len], offset)?;
    buf.truncate(start + n);
    buf.drain(..start);
    Ok(buf)
}

/// `pwrite` of `data` at `offset` from a copy aligned to [`DIRECT_ALIGN`],
/// as an `O_DIRECT` fd needs; the bytes written. The offset and length are
/// passed on as they are (see [`pread_aligned`]).
pub(crate) fn pwrite_aligned(fd: BorrowedFd<'_>, data: &[u8], offset: u64) -> io::Result<usize> {
    // The capacity is reserved up front, so the allocation never moves and
    // the start computed from it stays aligned.
    let mut buf = Vec::with_capacity(data.len() + DIRECT_ALIGN);
    let start = aligned_start(&buf);
    buf.resize(start, 0);
    buf.extend_from_slice(data);
    pwrite(fd, &buf[start..], offset)
}

/// The file status flags and access mode of `fd` (`fcntl(F_GETFL)`).
pub(crate) fn status_flags(fd: BorrowedFd<'_>) -> io::Result<i32> {
    // SAFETY: valid fd; F_GETFL takes no argument.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
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

/// `ioctl(dst, FICLONE, src)`: `dst` shares every extent of `src` (a
/// reflink), with `src`'s length. Fails with `EOPNOTSUPP` (or `EINVAL`,
/// `ENOTTY`) where the filesystem has no reflinks (ext4, tmpfs) and `EXDEV`
/// across filesystems.
pub(crate) fn ficlone(dst: BorrowedFd<'_>, src: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: valid fds; FICLONE takes the source fd as its argument.
    cvt(unsafe { libc::ioctl(dst.as_raw_fd(), libc::FICLONE, src.as_raw_fd()) })?;
    Ok(())
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
