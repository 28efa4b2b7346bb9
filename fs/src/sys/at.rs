//! The `*at` calls: each name is a single component resolved relative to
//! a directory fd, and nothing follows a symlink in the last component
//! (`O_NOFOLLOW` / `AT_SYMLINK_NOFOLLOW`, or an `O_PATH` fd with
//! `AT_EMPTY_PATH`).

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use super::{cvt, cvt_size, owned, proc::proc_path};

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

/// `open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | AT_RECURSIVE)`: an
/// `O_PATH` fd of the directory `path` on a private copy of the mount tree
/// under it (a detached mount that only this fd and what is opened through
/// it hold; the original mounts are untouched). Files opened through it
/// are the same inodes as through `path`, on another vfsmount. Fails with
/// `EPERM` without `CAP_SYS_ADMIN`, `ENOSYS` before Linux 5.2.
pub(crate) fn open_tree_clone(path: &CString) -> io::Result<OwnedFd> {
    /// `OPEN_TREE_CLONE` (`linux/mount.h`).
    const OPEN_TREE_CLONE: libc::c_long = 1;
    /// `AT_RECURSIVE` (`linux/fcntl.h`): the mounts below `path` too.
    const AT_RECURSIVE: libc::c_long = 0x8000;
    let flags = OPEN_TREE_CLONE | AT_RECURSIVE | libc::c_long::from(libc::O_CLOEXEC);
    // SAFETY: valid C string; the call returns a new fd or -1.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::c_long::from(libc::AT_FDCWD),
            path.as_ptr(),
            flags,
        )
    };
    owned(libc::c_int::try_from(ret).unwrap_or(-1))
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
