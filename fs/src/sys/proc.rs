//! Calls that go through `/proc/self/fd/N`: the ones with no `*at` form
//! that works on an `O_PATH` fd. The path resolves to the inode the fd
//! holds (for a symlink, the link itself), never to what it points at.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use super::{cvt, owned};
use crate::errno::os;

/// `/proc/self/fd/N` for `fd`.
pub(crate) fn proc_path(fd: BorrowedFd<'_>) -> CString {
    let text = format!("/proc/self/fd/{}", fd.as_raw_fd());
    // A formatted integer never contains NUL.
    CString::new(text).unwrap_or_default()
}

/// Opens the inode behind an `O_PATH` fd for real I/O.
pub(crate) fn reopen(fd: BorrowedFd<'_>, flags: i32) -> io::Result<OwnedFd> {
    let path = proc_path(fd);
    // SAFETY: valid C string.
    owned(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })
}

pub(crate) fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: valid C string.
    cvt(unsafe { libc::chmod(path.as_ptr(), mode as libc::mode_t) })?;
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

/// Whether this process may open any file for writing whatever its mode
/// (`CAP_DAC_OVERRIDE` in its effective set, read from
/// `/proc/self/status`). False when that cannot be read.
pub(crate) fn overrides_file_modes() -> bool {
    const CAP_DAC_OVERRIDE: u32 = 1;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_DAC_OVERRIDE) != 0)
}

/// Whether the process (or thread) `pid`, as the FUSE request names it,
/// holds `CAP_FSETID` as the kernel's `capable()` asks: in its effective
/// set (`CapEff:` of `/proc/PID/status`) and in this process's user
/// namespace (a caller in a namespace of its own holds nothing over the
/// daemon's files, whatever its set says). False when `pid` is gone or
/// cannot be read: the caller is then treated as unprivileged, so a
/// set-user-ID bit is cleared rather than kept.
pub(crate) fn holds_fsetid(pid: u32) -> bool {
    const CAP_FSETID: u32 = 4;
    if pid == 0 {
        return false;
    }
    let same_ns = match (
        std::fs::metadata(format!("/proc/{pid}/ns/user")),
        std::fs::metadata("/proc/self/ns/user"),
    ) {
        (Ok(theirs), Ok(ours)) => {
            use std::os::unix::fs::MetadataExt;
            theirs.ino() == ours.ino() && theirs.dev() == ours.dev()
        }
        _ => false,
    };
    if !same_ns {
        return false;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_FSETID) != 0)
}

/// Whether the thread `pid` (as a FUSE request names its caller) is in a
/// `chown` system call now, read from `/proc/PID/syscall` (the caller
/// waits in it for the daemon's reply). False when it cannot be read.
pub(crate) fn in_chown(pid: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/syscall")) else {
        return false;
    };
    let Some(nr) = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<i64>().ok())
    else {
        return false;
    };
    #[cfg(target_arch = "x86_64")]
    let legacy = [libc::SYS_chown, libc::SYS_lchown];
    #[cfg(not(target_arch = "x86_64"))]
    let legacy: [i64; 0] = [];
    nr == libc::SYS_fchownat || nr == libc::SYS_fchown || legacy.contains(&nr)
}
