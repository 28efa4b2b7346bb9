//! The shared folder through which worktrees reach a running sandbox
//! (`docs/mcp.md`, "Worktrees inside the sandbox").
//!
//! bwrap makes every mount of the sandbox's namespace a slave of the
//! host's, so a mount made on the host after the sandbox started shows
//! inside only if it is made below a *shared* mount that the sandbox has a
//! copy of. The host's root is often private (it is on the machines we
//! test on), so `opfs run` makes a folder of its own shared:
//! `<state dir>/sandbox-worktrees/<pid>`, bound on itself and marked
//! `MS_SHARED`, bound read-only at [`WORKTREES_INSIDE`] inside. Each
//! worktree the sandbox shows is bind-mounted (its mount alone,
//! non-recursive) at `<folder>/NAME` on the host: the ones mounted when the
//! run starts before bwrap runs, the ones `worktree_create` makes through
//! the narrow socket as they are made; both propagate to the sandbox's copy
//! at once, writable (the read-only remount of the folder inside is not
//! recursive). Unmounting `<folder>/NAME` on the host propagates too, so a
//! worktree bound during the run can be removed from the running sandbox
//! (the unmount fails with `EBUSY` while a process inside uses it).
//!
//! Guarantee 8: nothing but worktree mounts appears in the folder. It holds
//! only the empty directories opfs makes as mountpoints, and inside it is
//! read-only, so the command cannot create entries there (a symlink it
//! planted would redirect a later bind on the host).
//!
//! Life: the binds and the folder's own mount are unmounted, and its
//! directories removed, when the run ends ([`WorktreeShare::close`], also
//! on drop), whatever the command's fate; the worktrees stay mounted at
//! their own paths outside. A folder left by an `opfs run` that was killed
//! (its pid no longer runs) is torn down by the next `opfs run` of the
//! project ([`WorktreeShare::make`]).
//!
//! Making the folder needs the right to mount on the host (root, or
//! `CAP_SYS_ADMIN` in the mount namespace's user namespace); without it
//! [`WorktreeShare::make`] fails and `opfs run` binds the worktrees mounted
//! at start through bwrap, as before.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rustix::mount::{mount_bind, mount_change, unmount, MountPropagationFlags, UnmountFlags};

use crate::mcp::tools::{SandboxBinds, WORKTREES_INSIDE};
use crate::state::mountinfo;
use crate::store::StateDir;

/// The folder of the state dir that holds the runs' shared folders.
pub(super) const SHARE_DIR: &str = "sandbox-worktrees";

/// One run's shared folder (see the module documentation).
#[derive(Debug)]
pub(crate) struct WorktreeShare {
    dir: PathBuf,
    state: Mutex<Bound>,
}

#[derive(Debug, Default)]
struct Bound {
    /// Names bound at `dir/NAME`.
    names: std::collections::BTreeSet<String>,
    /// Set by [`WorktreeShare::close`]: nothing more is bound.
    closed: bool,
}

impl WorktreeShare {
    /// Makes this process's shared folder for `st`'s project, after tearing
    /// down any folder left by a run that no longer exists.
    ///
    /// Durable after `Ok`: the folder, a shared mount point, holding
    /// nothing. After `Err` nothing of it is left.
    ///
    /// Errors: its directory cannot be made; the bind of the folder on
    /// itself or marking it shared fails (`EPERM` without the right to
    /// mount).
    pub(crate) fn make(st: &StateDir) -> io::Result<WorktreeShare> {
        let parent = st.dir.join(SHARE_DIR);
        std::fs::create_dir_all(&parent)?;
        reap_stale(&parent);
        let dir = parent.join(std::process::id().to_string());
        // Ours by name only if this process made it: one left by an earlier
        // process with the same pid goes first.
        teardown(&dir);
        std::fs::create_dir(&dir)?;
        let shared = mount_bind(&dir, &dir)
            .map_err(io::Error::from)
            .and_then(|()| {
                mount_change(&dir, MountPropagationFlags::SHARED).map_err(|e| {
                    let _ = unmount(&dir, UnmountFlags::DETACH);
                    io::Error::from(e)
                })
            });
        if let Err(e) = shared {
            let _ = std::fs::remove_dir(&dir);
            let _ = std::fs::remove_dir(&parent);
            return Err(e);
        }
        Ok(WorktreeShare {
            dir,
            state: Mutex::new(Bound::default()),
        })
    }

    /// The folder (outside), to bind at [`WORKTREES_INSIDE`].
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> MutexGuard<'_, Bound> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unmounts every bind and the folder's own mount and removes its
    /// directories; binds nothing more afterwards. Idempotent. Returns what
    /// could not be cleaned up, for the caller to report.
    pub(crate) fn close(&self) -> Vec<String> {
        let mut bound = self.lock();
        if bound.closed {
            return Vec::new();
        }
        bound.closed = true;
        let mut warnings = Vec::new();
        for name in std::mem::take(&mut bound.names) {
            let target = self.dir.join(&name);
            if let Err(e) = unmount_now(&target) {
                warnings.push(format!(
                    "cannot unmount worktree {name:?}'s bind {}: {e}",
                    target.display()
                ));
            }
        }
        drop(bound);
        warnings.extend(teardown(&self.dir));
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
        warnings
    }
}

impl SandboxBinds for WorktreeShare {
    fn bind(&self, name: &str, mountpoint: &Path) -> io::Result<PathBuf> {
        crate::worktree::check_name(name).map_err(io::Error::other)?;
        let mut bound = self.lock();
        if bound.closed {
            return Err(io::Error::other("the sandbox has ended"));
        }
        let inside = Path::new(WORKTREES_INSIDE).join(name);
        if bound.names.contains(name) {
            return Ok(inside);
        }
        let target = self.dir.join(name);
        match std::fs::create_dir(&target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        if let Err(e) = mount_bind(mountpoint, &target) {
            let _ = std::fs::remove_dir(&target);
            return Err(io::Error::other(format!(
                "cannot bind {} at {}: {e}",
                mountpoint.display(),
                target.display()
            )));
        }
        bound.names.insert(name.to_string());
        Ok(inside)
    }

    fn unbind(&self, name: &str) -> io::Result<bool> {
        let mut bound = self.lock();
        if !bound.names.contains(name) {
            return Ok(false);
        }
        let target = self.dir.join(name);
        // Not lazy: a process inside that uses it keeps it (EBUSY).
        unmount(&target, UnmountFlags::empty())?;
        bound.names.remove(name);
        let _ = std::fs::remove_dir(&target);
        Ok(true)
    }
}

impl Drop for WorktreeShare {
    fn drop(&mut self) {
        for w in self.close() {
            log::warn!("{w}");
        }
    }
}

/// Unmounts `target`, lazily if something still uses it (the sandbox has
/// ended: what is left is a process outside that will let go).
fn unmount_now(target: &Path) -> io::Result<()> {
    match unmount(target, UnmountFlags::empty()) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::BUSY) => Ok(unmount(target, UnmountFlags::DETACH)?),
        Err(e) => Err(e.into()),
    }
}

/// Unmounts whatever is mounted at or below `dir` (deepest first) and
/// removes `dir` and the empty directories in it; never deletes a file, nor
/// a directory that is not empty. Returns what could not be done.
fn teardown(dir: &Path) -> Vec<String> {
    let mut warnings = Vec::new();
    for m in mountinfo::mount_points_under(dir) {
        if let Err(e) = unmount_now(&m) {
            warnings.push(format!("cannot unmount {}: {e}", m.display()));
        }
    }
    if !warnings.is_empty() {
        // Something is still mounted: removing directories could reach into it.
        return warnings;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => warnings.push(format!("cannot remove {}: {e}", dir.display())),
    }
    warnings
}

/// Tears down the folders in `parent` whose run (the pid they are named
/// after) no longer exists: `opfs run` was killed before it could.
fn reap_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let alive = rustix::process::Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::test_kill_process(p) != Err(rustix::io::Errno::SRCH));
        if !alive {
            for w in teardown(&e.path()) {
                log::warn!("a shared worktree folder left by a killed `opfs run`: {w}");
            }
        }
    }
}
