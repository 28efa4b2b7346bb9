//! Thin, safe wrappers around the `*at` system calls the passthrough uses.
//!
//! Every name argument is a single path component resolved relative to a
//! directory fd, and every call that could follow a symlink in the last
//! component is made with `O_NOFOLLOW` / `AT_SYMLINK_NOFOLLOW`. Where a call
//! has no `*at` form that works on an `O_PATH` fd, it goes through
//! `/proc/self/fd/N`, which resolves to the inode the fd holds (for a
//! symlink, the link itself), never to anything the inode points at.

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::errno::os;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// A name from the kernel as a C string; a NUL inside is `EINVAL`, a `/` is
/// `EINVAL` too (the kernel never sends one; refusing keeps every call to a
/// single component).
pub(crate) fn cname(name: &[u8]) -> io::Result<CString> {
    if name.contains(&b'/') {
        return Err(os(libc::EINVAL));
    }
    CString::new(name).map_err(|_| os(libc::EINVAL))
}

/// Any byte string without NUL (a symlink target, an xattr name) as a C
/// string; a NUL inside is `EINVAL`.
pub(crate) fn cname_any(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| os(libc::EINVAL))
}

/// `/proc/self/fd/N` for `fd`.
pub(crate) fn proc_path(fd: BorrowedFd<'_>) -> CString {
    let text = format!("/proc/self/fd/{}", fd.as_raw_fd());
    // A formatted integer never contains NUL.
    CString::new(text).unwrap_or_default()
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a directory by path (used once, for the backing root).
pub(crate) fn open_dir(path: &CString) -> io::Result<OwnedFd> {
    // SAFETY: valid C string.
    owned(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })
}

/// `openat(dir, name, flags, mode)` with `O_CLOEXEC` added.
pub(crate) fn openat(
    dir: BorrowedFd<'_>,
    name: &CString,
    flags: i32,
    mode: u32,
) -> io::Result<OwnedFd> {
    // SAFETY: valid fd and C string.
    owned(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })
}

/// An `O_PATH | O_NOFOLLOW` fd for `name` in `dir`.
pub(crate) fn open_path(dir: BorrowedFd<'_>, name: &CString) -> io::Result<OwnedFd> {
    openat(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)
}

/// Opens the inode behind an `O_PATH` fd for real I/O.
pub(crate) fn reopen(fd: BorrowedFd<'_>, flags: i32) -> io::Result<OwnedFd> {
    let path = proc_path(fd);
    // SAFETY: valid C string.
    owned(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })
}

/// `fstat` that works on `O_PATH` fds and never follows.
pub(crate) fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: valid fd, empty C string literal, `st` is writable.
    cvt(unsafe {
        libc::fstatat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            st.as_mut_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    // SAFETY: fstatat filled it.
    Ok(unsafe { st.assume_init() })
}

/// `fstatat(dir, name, NOFOLLOW)`; `Ok(None)` if the name does not exist.
pub(crate) fn stat_at(dir: BorrowedFd<'_>, name: &CString) -> io::Result<Option<libc::stat>> {
    let mut st = MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: valid fd and C string, `st` is writable.
    let ret = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    match cvt(ret) {
        // SAFETY: fstatat filled it.
        Ok(_) => Ok(Some(unsafe { st.assume_init() })),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

pub(crate) fn mkdirat(dir: BorrowedFd<'_>, name: &CString, mode: u32) -> io::Result<()> {
    // SAFETY: valid fd and C string.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) })?;
    Ok(())
}

pub(crate) fn mknodat(dir: BorrowedFd<'_>, name: &CString, mode: u32, rdev: u64) -> io::Result<()> {
    // SAFETY: valid fd and C string.
    cvt(unsafe {
        libc::mknodat(
            dir.as_raw_fd(),
            name.as_ptr(),
            mode as libc::mode_t,
            rdev as libc::dev_t,
        )
    })?;
    Ok(())
}

pub(crate) fn symlinkat(target: &CString, dir: BorrowedFd<'_>, name: &CString) -> io::Result<()> {
    // SAFETY: valid fd and C strings.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })?;
    Ok(())
}

/// Links the inode behind an `O_PATH` fd at `dir/name` (needs
/// `CAP_DAC_READ_SEARCH`, which the daemon has as root; falls back to the
/// `/proc` path otherwise).
pub(crate) fn link_fd(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &CString) -> io::Result<()> {
    // SAFETY: valid fds and C strings.
    let ret = unsafe {
        libc::linkat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    match cvt(ret) {
        Ok(_) => Ok(()),
        Err(e)
            if e.raw_os_error() == Some(libc::ENOENT) || e.raw_os_error() == Some(libc::EPERM) =>
        {
            let path = proc_path(fd);
            // SAFETY: valid fd and C strings.
            cvt(unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            })?;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

pub(crate) fn unlinkat(dir: BorrowedFd<'_>, name: &CString, flags: i32) -> io::Result<()> {
    // SAFETY: valid fd and C string.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })?;
    Ok(())
}

pub(crate) fn renameat2(
    old_dir: BorrowedFd<'_>,
    old: &CString,
    new_dir: BorrowedFd<'_>,
    new: &CString,
    flags: u32,
) -> io::Result<()> {
    // SAFETY: valid fds and C strings.
    cvt(unsafe {
        libc::renameat2(
            old_dir.as_raw_fd(),
            old.as_ptr(),
            new_dir.as_raw_fd(),
            new.as_ptr(),
            flags,
        )
    })?;
    Ok(())
}

/// The target of the symlink behind an `O_PATH` fd.
pub(crate) fn readlink_fd(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: valid fd, buffer of the given length.
    let n = cvt_size(unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })?;
    buf.truncate(n);
    Ok(buf)
}

pub(crate) fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: valid C string.
    cvt(unsafe { libc::chmod(path.as_ptr(), mode as libc::mode_t) })?;
    Ok(())
}

/// `fchownat(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`; `u32::MAX` leaves
/// a field unchanged.
pub(crate) fn chown_fd(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: valid fd.
    cvt(unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(())
}

pub(crate) fn ftruncate(fd: BorrowedFd<'_>, size: u64) -> io::Result<()> {
    let size = libc::off_t::try_from(size).map_err(|_| os(libc::EFBIG))?;
    // SAFETY: valid fd.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), size) })?;
    Ok(())
}

pub(crate) fn truncate_path_fd(fd: BorrowedFd<'_>, size: u64) -> io::Result<()> {
    let size = libc::off_t::try_from(size).map_err(|_| os(libc::EFBIG))?;
    let path = proc_path(fd);
    // SAFETY: valid C string.
    cvt(unsafe { libc::truncate(path.as_ptr(), size) })?;
    Ok(())
}

/// Sets times on the inode behind any fd (`O_PATH` included) without
/// following a symlink.
pub(crate) fn utimens_fd(fd: BorrowedFd<'_>, times: &[libc::timespec; 2]) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: valid C string and a two-element timespec array.
    cvt(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) })?;
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

/// Reads raw `linux_dirent64` records from a directory fd at its current
/// offset into `buf`; returns the number of bytes filled (0 at the end).
pub(crate) fn getdents(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: valid fd and buffer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// One parsed directory entry.
pub(crate) struct Dirent<'a> {
    pub(crate) ino: u64,
    pub(crate) offset: u64,
    pub(crate) kind: u8,
    pub(crate) name: &'a [u8],
}

/// Parses the records `getdents` produced.
pub(crate) fn parse_dirents(buf: &[u8]) -> Vec<Dirent<'_>> {
    // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 19 <= buf.len() {
        let rec = &buf[pos..];
        let ino = u64::from_ne_bytes(rec[0..8].try_into().unwrap_or([0; 8]));
        let off = u64::from_ne_bytes(rec[8..16].try_into().unwrap_or([0; 8]));
        let reclen = u16::from_ne_bytes(rec[16..18].try_into().unwrap_or([0; 2])) as usize;
        if reclen < 19 || pos + reclen > buf.len() {
            break;
        }
        let kind = rec[18];
        let raw = &rec[19..reclen];
        let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        out.push(Dirent {
            ino,
            offset: off,
            kind,
            name: &raw[..len],
        });
        pos += reclen;
    }
    out
}

fn xattr_result(ret: libc::ssize_t) -> io::Result<usize> {
    cvt_size(ret)
}

/// `getxattr` on the inode behind `fd`; with an empty `buf`, returns the size.
pub(crate) fn getxattr(fd: BorrowedFd<'_>, name: &CString, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_path(fd);
    // SAFETY: valid C strings and buffer (a null pointer with length 0 is allowed).
    xattr_result(unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })
}

/// `listxattr` on the inode behind `fd`; with an empty `buf`, returns the size.
pub(crate) fn listxattr(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_path(fd);
    // SAFETY: valid C string and buffer.
    xattr_result(unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })
}

pub(crate) fn setxattr(
    fd: BorrowedFd<'_>,
    name: &CString,
    value: &[u8],
    flags: i32,
) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: valid C strings and buffer.
    cvt(unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })?;
    Ok(())
}

pub(crate) fn removexattr(fd: BorrowedFd<'_>, name: &CString) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: valid C strings.
    cvt(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) })?;
    Ok(())
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (cached inodes hold
/// fds) and returns the soft limit now in force.
pub(crate) fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writable struct.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: valid struct.
        cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    }
    Ok(lim.rlim_cur)
}
