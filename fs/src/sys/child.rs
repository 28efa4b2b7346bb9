//! `fdatasync` of files of the daemon's own mount, done in a forked child.
//!
//! Syncing a file through the mount makes the kernel send the daemon
//! requests (WRITE for each dirty page, then FSYNC) and wait for their
//! answers, uninterruptibly once a worker has read them. If the daemon is
//! killed while one of its workers holds such a request, a thread of the
//! daemon waiting there never returns; the dying process keeps its files,
//! `/dev/fuse` among them, so the kernel never aborts the connection, and
//! the daemon never finishes dying (holding its state lock, its mount
//! hanging every caller). A child that closed every inherited descriptor
//! but its result pipe does not hold `/dev/fuse`: when the daemon dies, its
//! `/dev/fuse` closes, the kernel aborts the connection, and the child's
//! wait ends with an error.
//!
//! After `fork` in a multi-threaded process the child may only make
//! async-signal-safe calls: everything it needs (the paths as C strings,
//! the descriptor limit) is prepared before the fork, and the child only
//! calls `sigprocmask`, `close_range` (or `close`), `open`, `fstat`,
//! `fdatasync`, `write` and `_exit`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::cvt;

/// What happened to one file in [`fdatasync_in_child`].
#[derive(Debug)]
pub(crate) enum SyncOutcome {
    /// Opened read-only and `fdatasync`ed; the result of the sync.
    Synced(io::Result<()>),
    /// Opened, but not a regular file (or `fstat` failed): nothing to write
    /// back.
    NotRegular,
    /// The open failed (`ENOENT`: the name went away).
    OpenFailed(io::Error),
}

/// One result record the child writes: file index, outcome kind, errno.
/// 12 bytes, below `PIPE_BUF`, so each `write` is atomic.
const RECORD: usize = 12;
const KIND_SYNCED: i32 = 0;
const KIND_NOT_REGULAR: i32 = 1;
const KIND_OPEN_FAILED: i32 = 2;

/// Opens each of `paths` read-only (`O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`)
/// and `fdatasync`s it if it is a regular file, in a forked child process,
/// one after the other; calls `each(i, outcome)` in this process as the
/// result for `paths[i]` arrives. Returns once the child has exited.
///
/// Costs one `fork` (page tables of this process copied, a few hundred
/// microseconds for a daemon of a few hundred MiB), one pipe, and the
/// syscalls per file; call it only when there is a file to sync.
///
/// # Errors
///
/// The pipe or the fork cannot be made (`EMFILE`, `EAGAIN`, `ENOMEM`), or
/// the child ended before reporting every file (killed): the files it
/// reported were handled, `each` was not called for the rest. A failure of
/// one file is its [`SyncOutcome`], not an error.
pub(crate) fn fdatasync_in_child(
    paths: &[CString],
    mut each: impl FnMut(usize, SyncOutcome),
) -> io::Result<()> {
    let mut fds = [0; 2];
    // SAFETY: a writable two-element array.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both were just returned by the kernel and are owned by nobody else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let fd_limit = fd_limit();
    // SAFETY: the child runs only `child_main`, which makes
    // async-signal-safe calls on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        child_main(paths, write_end.as_raw_fd(), fd_limit);
    }
    // The child holds the write end now; ours must go, so that the read
    // below sees the end of the pipe when the child exits.
    drop(write_end);
    let mut reported = 0;
    let mut buf = [0u8; RECORD];
    while read_record(&read_end, &mut buf)? {
        let field = |k: usize| i32::from_ne_bytes([buf[k], buf[k + 1], buf[k + 2], buf[k + 3]]);
        let (index, kind, errno) = (field(0), field(4), field(8));
        let Some(index) = usize::try_from(index).ok().filter(|&i| i < paths.len()) else {
            continue;
        };
        let err = || io::Error::from_raw_os_error(errno);
        let outcome = match kind {
            KIND_SYNCED if errno == 0 => SyncOutcome::Synced(Ok(())),
            KIND_SYNCED => SyncOutcome::Synced(Err(err())),
            KIND_NOT_REGULAR => SyncOutcome::NotRegular,
            _ => SyncOutcome::OpenFailed(err()),
        };
        each(index, outcome);
        reported += 1;
    }
    let status = wait_child(pid)?;
    if reported < paths.len() {
        return Err(io::Error::other(format!(
            "the write-back child process ended (wait status {status}) after {reported} of {} files",
            paths.len()
        )));
    }
    Ok(())
}

/// Reads one whole record; false at the end of the pipe.
fn read_record(fd: &OwnedFd, buf: &mut [u8; RECORD]) -> io::Result<bool> {
    let mut got = 0;
    while got < RECORD {
        // SAFETY: the unfilled tail of `buf`.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf[got..].as_mut_ptr().cast(), RECORD - got) };
        match n {
            0 if got == 0 => return Ok(false),
            0 => return Err(io::Error::other("the write-back child wrote half a record")),
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(e);
                }
            }
            n => got += n as usize,
        }
    }
    Ok(true)
}

/// Reaps the child; its raw wait status.
fn wait_child(pid: libc::pid_t) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: a child of this process and a writable int.
        if unsafe { libc::waitpid(pid, &mut status, 0) } >= 0 {
            return Ok(status);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// The soft `RLIMIT_NOFILE`: above it no descriptor can be open. Only used
/// to close descriptors one by one where `close_range` (Linux 5.9) is
/// missing.
fn fd_limit() -> libc::c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writable struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } < 0 {
        return 1 << 20;
    }
    libc::c_int::try_from(lim.rlim_cur).unwrap_or(libc::c_int::MAX)
}

/// The child: closes every inherited descriptor but 0–2 and `out`, syncs
/// each path, writes one record per path to `out`, exits. Async-signal-safe
/// calls only, no allocation, no unwinding.
fn child_main(paths: &[CString], out: libc::c_int, fd_limit: libc::c_int) -> ! {
    // SAFETY (whole body): async-signal-safe system calls on descriptors
    // this process owns and on memory prepared before the fork.
    unsafe {
        // Signals the daemon handles (SIGTERM...) must not run its
        // handlers here; SIGKILL still ends the child.
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        close_others(out, fd_limit);
        for (i, path) in paths.iter().enumerate() {
            let (kind, errno) = sync_one(path);
            let index = i32::try_from(i).unwrap_or(i32::MAX);
            let mut rec = [0u8; RECORD];
            rec[0..4].copy_from_slice(&index.to_ne_bytes());
            rec[4..8].copy_from_slice(&kind.to_ne_bytes());
            rec[8..12].copy_from_slice(&errno.to_ne_bytes());
            loop {
                let n = libc::write(out, rec.as_ptr().cast(), RECORD);
                if n == RECORD as libc::ssize_t {
                    break;
                }
                if n < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                // The parent is gone: nobody waits for the rest.
                libc::_exit(1);
            }
        }
        libc::_exit(0)
    }
}

/// Closes every descriptor but 0, 1, 2 and `keep`.
///
/// # Safety
///
/// Only in the forked child: it closes descriptors other code may own.
unsafe fn close_others(keep: libc::c_int, fd_limit: libc::c_int) {
    let range = |first: libc::c_int, last: libc::c_uint| {
        // SAFETY: close_range has no memory arguments.
        unsafe { libc::syscall(libc::SYS_close_range, first as libc::c_uint, last, 0) == 0 }
    };
    let low = keep <= 3 || range(3, (keep - 1) as libc::c_uint);
    let high = range(keep + 1, libc::c_uint::MAX);
    if !(low && high) {
        for fd in 3..fd_limit {
            if fd != keep {
                // SAFETY: closing a number that may or may not be open.
                unsafe { libc::close(fd) };
            }
        }
    }
}

/// Opens and syncs one path; (kind, errno).
///
/// # Safety
///
/// Async-signal-safe calls only; meant for the forked child.
unsafe fn sync_one(path: &CString) -> (i32, i32) {
    // SAFETY: valid C string; an fd this function owns; a zeroed stat buffer.
    unsafe {
        let errno = || *libc::__errno_location();
        let fd = libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return (KIND_OPEN_FAILED, errno());
        }
        let mut st: libc::stat = std::mem::zeroed();
        let res = if libc::fstat(fd, &mut st) < 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
            (KIND_NOT_REGULAR, 0)
        } else if libc::fdatasync(fd) < 0 {
            (KIND_SYNCED, errno())
        } else {
            (KIND_SYNCED, 0)
        };
        libc::close(fd);
        res
    }
}
