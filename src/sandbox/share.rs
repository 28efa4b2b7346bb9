//! The shared folder through which worktrees reach a running sandbox
//! (`docs/mcp.md`, "Worktrees inside the sandbox").
//!
//! bwrap makes every mount of the sandbox's namespace a slave of the
//! host's, so a mount made on the host after the sandbox started shows
//! inside only if it is made below a *shared* mount that the sandbox has a
//! copy of. The host's root is often private (it is on the machines we
//! test on), so `opfs run` makes a folder of its own: a small tmpfs at
//! `<state dir>/sandbox-worktrees/<pid>`, bound read-only at
//! [`WORKTREES_INSIDE`] inside. Each worktree the sandbox shows is
//! bind-mounted (its FUSE mount alone, non-recursive, checked to be one
//! before it is attached) at `<folder>/NAME` on the host: the ones mounted
//! when the run starts while the folder is still private, then the folder
//! is made shared (`MS_SHARED`) before bwrap starts, and the ones
//! `worktree_create` makes through the narrow socket as they are made;
//! those propagate to the sandbox's copy at once, writable (the read-only
//! remount of the folder inside is not recursive). Unmounting
//! `<folder>/NAME` on the host propagates too, so a worktree bound during
//! the run can be removed from the running sandbox (the unmount fails with
//! `EBUSY` while a process inside uses it).
//!
//! Guarantee 8: nothing but worktree mounts appears in the folder. It holds
//! only the empty directories opfs makes as mountpoints, and inside it is
//! read-only, so the command cannot create entries there (a symlink it
//! planted would redirect a later bind on the host).
//!
//! Life: when the run ends, whatever the command's fate, the folder is made
//! private again and the binds and the tmpfs are unmounted
//! ([`WorktreeShare::close`], also on drop); the worktrees stay mounted at
//! their own paths outside. Its empty mountpoint directory is removed by
//! the next `opfs run` of the project, not at once: a sandbox that started
//! meanwhile holds a copy of the folder's mount, and bwrap fails to set up
//! when the path of a mount it copied vanishes under it. A folder left by
//! an `opfs run` that was killed (its pid no longer runs) is unmounted and
//! removed by the next `opfs run` too ([`WorktreeShare::make`]).
//!
//! Making the folder needs the right to mount on the host (root, or
//! `CAP_SYS_ADMIN` in the mount namespace's user namespace); without it
//! [`WorktreeShare::make`] fails and `opfs run` binds the worktrees mounted
//! at start through bwrap, as before.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rustix::mount::{mount_change, unmount, MountFlags, MountPropagationFlags, UnmountFlags};

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
    /// Makes this process's folder for `st`'s project, after tearing down
    /// any folder left by a run that no longer exists; [`Self::share`]
    /// then makes it shared.
    ///
    /// Durable after `Ok`: the folder, a (still private) mount point
    /// holding nothing. After `Err` nothing of it is left.
    ///
    /// Errors: its directory cannot be made; mounting its tmpfs fails
    /// (`EPERM` without the right to mount).
    pub(crate) fn make(st: &StateDir) -> io::Result<WorktreeShare> {
        let parent = st.dir.join(SHARE_DIR);
        std::fs::create_dir_all(&parent)?;
        reap_stale(&parent);
        let dir = parent.join(std::process::id().to_string());
        // Ours by name only if this process made it: one left by an earlier
        // process with the same pid goes first.
        teardown(&dir);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // A tmpfs of its own, not a bind of the state dir: the mountpoint
        // directories in it go away with it, in every copy at once.
        if let Err(e) = rustix::mount::mount(
            "opfs-worktrees",
            &dir,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            Some(c"mode=0755,size=64k"),
        ) {
            let _ = std::fs::remove_dir(&dir);
            let _ = std::fs::remove_dir(&parent);
            return Err(e.into());
        }
        Ok(WorktreeShare {
            dir,
            state: Mutex::new(Bound::default()),
        })
    }

    /// Marks the folder shared: from now on a bind made in it (or removed
    /// from it) reaches every copy of it made afterwards, the sandbox's
    /// first. Call it after binding the worktrees mounted at start and
    /// before starting bwrap: mount namespaces made before (other
    /// sandboxes) never get a shared copy, and binding those worktrees
    /// changes no other namespace.
    ///
    /// Errors: the kernel refused (`EPERM`); the folder is then torn down
    /// ([`Self::close`]) and the caller falls back to bwrap's binds.
    pub(crate) fn share(&self) -> io::Result<()> {
        if let Err(e) = mount_change(&self.dir, MountPropagationFlags::SHARED) {
            for w in self.close() {
                log::warn!("{w}");
            }
            return Err(e.into());
        }
        Ok(())
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
        // Private first: the unmounts below then reach no other mount
        // namespace (a sandbox started during the run has a copy of the
        // folder; a mount vanishing under bwrap while it sets up makes it
        // fail). Such a copy keeps its binds until that namespace ends, as
        // it keeps every mount that existed when it was made.
        let _ = mount_change(&self.dir, MountPropagationFlags::PRIVATE);
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
        warnings.extend(unmount_all(&self.dir));
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
        if let Err(e) = attach_clone(mountpoint, &target) {
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
        // Its directory stays (in the tmpfs, gone with it): a sandbox
        // starting now may be resolving its path in a copy of the folder.
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

/// `FUSE_SUPER_MAGIC`: the filesystem type of a worktree's mount.
const FUSE_SUPER_MAGIC: rustix::fs::FsWord = 0x6573_5546;

/// Binds the mount at `mountpoint` (alone, not what is mounted below it) at
/// `target`, only if it is a FUSE mount. The clone is checked before it is
/// attached, so a worktree whose daemon died just before cannot expose the
/// state dir's empty mountpoint folder in its place, not even for an
/// instant.
fn attach_clone(mountpoint: &Path, target: &Path) -> io::Result<()> {
    use rustix::mount::{move_mount, open_tree, MoveMountFlags, OpenTreeFlags};
    let tree = open_tree(
        rustix::fs::CWD,
        mountpoint,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )?;
    if rustix::fs::fstatfs(&tree)?.f_type != FUSE_SUPER_MAGIC {
        return Err(io::Error::other(format!(
            "{} is not a worktree's mount (its daemon has stopped)",
            mountpoint.display()
        )));
    }
    move_mount(
        &tree,
        "",
        rustix::fs::CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?;
    Ok(())
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

/// Unmounts whatever is mounted at or below `dir` (deepest first),
/// without letting the unmounts reach other mount namespaces. Returns what
/// could not be unmounted.
fn unmount_all(dir: &Path) -> Vec<String> {
    let mut warnings = Vec::new();
    let mounts = mountinfo::mount_points_under(dir);
    if mounts.iter().any(|m| m == dir) {
        // As in `close`: the unmounts reach no other namespace.
        let _ = mount_change(dir, MountPropagationFlags::PRIVATE);
    }
    for m in mounts {
        if let Err(e) = unmount_now(&m) {
            warnings.push(format!("cannot unmount {}: {e}", m.display()));
        }
    }
    warnings
}

/// Unmounts whatever is mounted at or below `dir` and removes `dir` if it
/// is then an empty directory; never deletes anything else. Returns what
/// could not be done.
fn teardown(dir: &Path) -> Vec<String> {
    let mut warnings = unmount_all(dir);
    if !warnings.is_empty() {
        // Something is still mounted there: leave the directory.
        return warnings;
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => warnings.push(format!("cannot remove {}: {e}", dir.display())),
    }
    warnings
}

/// Tears down the folders in `parent` whose run (the pid they are named
/// after) no longer exists: the empty mountpoint an ended run leaves (its
/// removal waits for a later run: a sandbox that started while the folder
/// was mounted holds a copy of its mount, and bwrap fails to set up if the
/// path of a mount it copied vanishes meanwhile), or everything a killed
/// `opfs run` could not unmount.
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
