//! Acting as the caller while creating entries.
//!
//! The daemon runs as root, but a file created through the mount must belong
//! to the process that created it (and land in the right group when the
//! parent directory is set-group-ID). Around each creating system call the
//! calling thread switches its filesystem uid/gid and supplementary groups to
//! the caller's. `setfsuid`, `setfsgid` and the raw `setgroups` system call
//! affect only the calling thread (glibc's `setgroups` wrapper would change
//! every thread, so it is not used).

use std::ffi::CString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use crate::sys;

/// The caller's credentials, taken from the FUSE request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) pid: u32,
}

impl Caller {
    /// Whether the caller is in group `gid`: its own group or one of its
    /// supplementary groups (read from `/proc`, so only asked when needed).
    pub(crate) fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || groups_of(self.pid).contains(&gid)
    }
}

/// Restores the daemon's own credentials on drop.
pub(crate) struct AsCaller {
    switched: bool,
}

/// The supplementary groups of `pid` (a thread id works too), from
/// `/proc/PID/status`; empty when the process is gone.
pub(crate) fn groups_of(pid: u32) -> Vec<libc::gid_t> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|g| g.parse::<libc::gid_t>().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn set_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: pointer and length describe a valid slice.
    let ret = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn set_fsuid(uid: u32) {
    // SAFETY: setfsuid has no memory effects; it cannot fail in a way that
    // matters here (the daemon is root, so every uid is allowed).
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) };
}

fn set_fsgid(gid: u32) {
    // SAFETY: as for set_fsuid.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) };
}

impl Caller {
    /// Makes and opens the file `name` in `dir` as this caller, with
    /// `flags | O_CREAT | O_EXCL | O_NOFOLLOW` and `mode` as given (see
    /// [`zero_umask_for_thread`]): fails with `EEXIST` where the name is
    /// taken, and never follows a symlink there.
    pub(crate) fn create_file(
        self,
        dir: BorrowedFd<'_>,
        name: &CString,
        flags: i32,
        mode: u32,
    ) -> io::Result<OwnedFd> {
        let _as = AsCaller::switch(self)?;
        let flags = flags | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
        sys::openat(dir, name, flags, mode)
    }
}

impl AsCaller {
    /// Switches this thread to `caller` unless the caller is root or the
    /// daemon is not root (then it could not switch back and does nothing).
    pub(crate) fn switch(caller: Caller) -> io::Result<AsCaller> {
        // SAFETY: geteuid has no preconditions.
        let daemon_is_root = unsafe { libc::geteuid() } == 0;
        if !daemon_is_root || (caller.uid == 0 && caller.gid == 0) {
            return Ok(AsCaller { switched: false });
        }
        set_groups(&groups_of(caller.pid))?;
        set_fsgid(caller.gid);
        if caller.uid != 0 {
            set_fsuid(caller.uid);
        }
        Ok(AsCaller { switched: true })
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if self.switched {
            // Back to root: fsuid 0 also restores the capabilities that a
            // non-zero fsuid dropped from the effective set.
            set_fsuid(0);
            set_fsgid(0);
            if let Err(e) = set_groups(&[]) {
                log::error!("cannot restore supplementary groups: {e}");
            }
        }
    }
}

thread_local! {
    static OWN_UMASK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Gives the calling thread its own umask of 0, once.
///
/// The kernel has already applied the caller's umask to the mode it sends
/// (and the layer applies the `umask` field of the request again), so the
/// daemon's own umask must not mask the mode a third time. The umask is
/// shared by every thread of a process; `unshare(CLONE_FS)` detaches this
/// thread's copy so the rest of the process (the core, a CLI) keeps its own.
pub(crate) fn zero_umask_for_thread() -> io::Result<()> {
    if OWN_UMASK.with(|c| c.get()) {
        return Ok(());
    }
    // SAFETY: unshare(CLONE_FS) only changes this thread's fs context.
    if unsafe { libc::unshare(libc::CLONE_FS) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(0) };
    OWN_UMASK.with(|c| c.set(true));
    Ok(())
}
