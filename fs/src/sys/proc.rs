//! Calls that go through `/proc/self/fd/N`: the ones with no `*at` form
//! that works on an `O_PATH` fd. The path resolves to the inode the fd
//! holds (for a symlink, the link itself), never to what it points at.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

use super::{cvt, owned};
use crate::errno::os;

/// `/proc/self/fd/N` for `fd`.
pub(crate) fn proc_path(fd: BorrowedFd<'_>) -> CString {
    let text = format!("/proc/self/fd/{}", fd.as_raw_fd());
    // A formatted integer never contains NUL.
    CString::new(text).unwrap_or_default()
}

/// This process's `/proc/self/fd`, opened once (`O_PATH`): the calls
/// below resolve one name in it (`N`, the fd's magic link) instead of
/// the four components of `/proc/self/fd/N` on every request (1.5 µs less
/// per call here; `docs/bench/2026-12-03-per-request-cost.md`, "Per-request cost of the
/// daemon"). It names this process's fd table for good, so a forked child
/// must not use it (`child.rs` prepares its own paths). `None` where it
/// cannot be opened (no `/proc`): the callers then take the full path,
/// which fails as it always did.
fn fd_dir() -> Option<BorrowedFd<'static>> {
    static DIR: OnceLock<Option<OwnedFd>> = OnceLock::new();
    DIR.get_or_init(|| {
        // SAFETY: a valid C string literal.
        let fd = unsafe {
            libc::open(
                c"/proc/self/fd".as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        owned(fd).ok()
    })
    .as_ref()
    .map(|fd| fd.as_fd())
}

/// The decimal name of `fd` in `/proc/self/fd`, NUL-terminated, without
/// allocating.
struct FdName {
    buf: [u8; 12],
    start: usize,
}

impl FdName {
    fn of(fd: BorrowedFd<'_>) -> FdName {
        let mut buf = [0u8; 12];
        let mut at = buf.len() - 1;
        // A descriptor is never negative.
        let mut n = fd.as_raw_fd().unsigned_abs();
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        FdName { buf, start: at }
    }

    fn as_ptr(&self) -> *const libc::c_char {
        self.buf[self.start..].as_ptr().cast()
    }
}

/// Calls `call(dirfd, name)` with the `*at` form of `/proc/self/fd/N`
/// for `fd`: [`fd_dir`] and `N` (no allocation), or `AT_FDCWD` and the
/// full path where `/proc/self/fd` could not be opened. Either names the
/// inode `fd` holds; a call that follows the magic link reaches that
/// inode and never goes beyond it.
fn at_proc_fd<R>(fd: BorrowedFd<'_>, call: impl FnOnce(i32, *const libc::c_char) -> R) -> R {
    match fd_dir() {
        Some(dir) => call(dir.as_raw_fd(), FdName::of(fd).as_ptr()),
        None => call(libc::AT_FDCWD, proc_path(fd).as_ptr()),
    }
}

/// Opens the inode behind an `O_PATH` fd for real I/O.
pub(crate) fn reopen(fd: BorrowedFd<'_>, flags: i32) -> io::Result<OwnedFd> {
    let flags = flags | libc::O_CLOEXEC;
    // SAFETY: a valid directory fd (or AT_FDCWD) and a NUL-terminated name.
    owned(at_proc_fd(fd, |dir, name| unsafe {
        libc::openat(dir, name, flags)
    }))
}

pub(crate) fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    // SAFETY: as in `reopen`; flags 0 follows the magic link to the inode,
    // as `chmod` of the path does.
    cvt(at_proc_fd(fd, |dir, name| unsafe {
        libc::fchmodat(dir, name, mode as libc::mode_t, 0)
    }))?;
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
    // SAFETY: as in `reopen`, and a two-element timespec array; flags 0
    // follows the magic link to the inode (never beyond it: the link is
    // the inode itself).
    cvt(at_proc_fd(fd, |dir, name| unsafe {
        libc::utimensat(dir, name, times.as_ptr(), 0)
    }))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::os::fd::FromRawFd;

    #[test]
    fn fd_names_are_the_decimal_numbers() {
        for n in [0, 7, 10, 99, 1234, 1_048_575, i32::MAX] {
            // SAFETY: the fd is only formatted, never used, and the
            // `OwnedFd` is forgotten so it is never closed.
            let fake = std::mem::ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(n) });
            let name = FdName::of(fake.as_fd());
            // SAFETY: `FdName` is NUL-terminated within its buffer.
            let text = unsafe { CStr::from_ptr(name.as_ptr()) };
            assert_eq!(text.to_bytes(), n.to_string().as_bytes());
        }
    }

    #[test]
    fn reopen_chmod_and_utimens_reach_the_inode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").expect("write");
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid C string.
        let opath = owned(unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) })
            .expect("O_PATH open");
        let f = reopen(opath.as_fd(), libc::O_RDONLY).expect("reopen");
        let mut buf = [0u8; 8];
        // SAFETY: a valid fd and buffer.
        let n = unsafe { libc::read(f.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!(&buf[..usize::try_from(n).expect("read")], b"abc");
        chmod_fd(opath.as_fd(), 0o640).expect("chmod");
        let times = [
            libc::timespec {
                tv_sec: 1_000_000,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: 2_000_000,
                tv_nsec: 5,
            },
        ];
        utimens_fd(opath.as_fd(), &times).expect("utimens");
        let md = std::fs::metadata(&path).expect("stat");
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!(md.permissions().mode() & 0o7777, 0o640);
        assert_eq!((md.mtime(), md.mtime_nsec()), (2_000_000, 5));
        assert_eq!(md.atime(), 1_000_000);
    }
}
