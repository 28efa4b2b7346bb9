//! Thin, safe wrappers around the `*at` system calls the passthrough uses.
//!
//! Every name argument is a single path component resolved relative to a
//! directory fd, and every call that could follow a symlink in the last
//! component is made with `O_NOFOLLOW` / `AT_SYMLINK_NOFOLLOW`. Where a call
//! has no `*at` form that works on an `O_PATH` fd, it goes through
//! `/proc/self/fd/N`, which resolves to the inode the fd holds (for a
//! symlink, the link itself), never to anything the inode points at.
//!
//! - `at.rs`: the `*at` calls on directory fds; `proc.rs`: calls through
//!   `/proc/self/fd/N`; `file.rs`: I/O on real fds; `dirent.rs`: directory
//!   listings; `xattr.rs`: extended attributes; `limits.rs`: `RLIMIT_NOFILE`;
//!   `child.rs`: `fdatasync` of files of the daemon's own mount in a forked
//!   child; `maps.rs`: the files some process maps shared; `sched.rs`: the
//!   real-time class of the threads that keep the kernel coherent.

mod at;
mod child;
mod dirent;
mod file;
mod limits;
mod maps;
mod proc;
mod sched;
mod xattr;

pub(crate) use at::{
    chown_fd, fstat, link_fd, mkdirat, mknodat, open_dir, open_path, open_tree_clone, openat,
    readlink_fd, renameat2, stat_at, symlinkat, unlinkat,
};
pub(crate) use child::{fdatasync_in_child, SyncOutcome};
pub(crate) use dirent::{getdents, parse_dirents, Dirent};
pub(crate) use file::{
    close_dup, copy_file_range, fallocate, ficlone, fsync, ftruncate, lseek, pread, pread_aligned,
    pwrite, pwrite_aligned, status_flags, statvfs,
};
pub(crate) use limits::raise_nofile_limit;
pub(crate) use maps::{mount_dev, shared_mappings};
pub(crate) use proc::{
    chmod_fd, holds_fsetid, in_chown, overrides_file_modes, reopen, truncate_path_fd, utimens_fd,
};
pub(crate) use sched::Urgency;
pub(crate) use xattr::{getxattr, listxattr, removexattr, setxattr};

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

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

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
