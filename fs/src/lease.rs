//! File leases (`fcntl(F_SETLEASE)`), for a caller that must know nobody
//! else has a file open before it takes the inode over (the journal keeps
//! a removed file's inode instead of copying it; `docs/design.md`,
//! "Removals keep the inode").
//!
//! A write lease on a descriptor is granted only while no other open file
//! description of the inode exists (for reading or writing; a shared
//! mapping holds one; `O_PATH` descriptors do not count). While it is held,
//! another `open` of the inode *breaks* it: the opener waits (up to
//! `/proc/sys/fs/lease-break-time` seconds) until the holder releases or
//! downgrades, and the holder is sent `SIGIO`. A process that takes leases
//! must therefore keep `SIGIO` from killing it (its default action).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Takes a write lease on `fd` (open read-only is enough). `Ok(false)`:
/// refused because the inode is open elsewhere (`EAGAIN`).
///
/// Errors: the kernel's other refusals (`EACCES`: the caller neither owns
/// the file nor has `CAP_LEASE`; `EINVAL`: the filesystem has no leases),
/// which callers treat like a refusal.
pub fn take_write(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: valid fd; F_SETLEASE takes an int argument.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) => Ok(false),
        _ => Err(e),
    }
}

/// True while `fd`'s write lease is held and unbroken: no `open` of the
/// inode has been attempted since it was taken (a breaking lease reports
/// the type it is being broken to).
///
/// Errors: the kernel's (`EBADF`).
pub fn write_held(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: valid fd; F_GETLEASE takes no argument.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLEASE) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r == libc::F_WRLCK)
}

/// Releases `fd`'s lease (the descriptor stays open). A waiting opener
/// proceeds.
///
/// Errors: the kernel's.
pub fn release(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: valid fd; F_SETLEASE takes an int argument.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
