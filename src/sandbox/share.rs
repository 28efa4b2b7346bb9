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
//! What git runs or trusts in each worktree (`git.rs`) is bound read-only
//! over itself below its bind. A read-only remount does not propagate, so
//! each worktree is put together in a private staging folder first
//! (`<pid>-stage` beside the folder: its clone, then the git binds,
//! remounted read-only) and moved into the folder whole: the sandbox's
//! copies of a moved tree keep the flags it has.
//!
//! Guarantee 8: nothing but worktree mounts appears in the folder. It holds
//! only the empty directories opfs makes as mountpoints, and inside it is
//! read-only, so the command cannot create entries there (a symlink it
//! planted would redirect a later bind on the host).
//!
//! Life: when the run ends, whatever the command's fate, the folder is made
//! private again and the binds and the tmpfs are unmounted
//! ([`WorktreeShare::close`], also on drop); the worktrees stay mounted at
//! their own paths outside. Its empty mountpoint directory, and the
//! staging folder's, are removed by the next `opfs run` of the project,
//! not at once: a sandbox that started
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

use super::git::GitGuard;
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
    /// What git runs or trusts in each worktree is bound read-only over
    /// itself below its bind (`git.rs`).
    git: GitGuard,
}

#[derive(Debug, Default)]
struct Bound {
    /// Names bound at `dir/NAME`, with the worktree's mountpoint.
    names: std::collections::BTreeMap<String, PathBuf>,
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
    pub(crate) fn make(st: &StateDir, git: GitGuard) -> io::Result<WorktreeShare> {
        let parent = st.dir.join(SHARE_DIR);
        std::fs::create_dir_all(&parent)?;
        reap_stale(&parent);
        let dir = parent.join(std::process::id().to_string());
        // Ours by name only if this process made it: one left by an earlier
        // process with the same pid goes first.
        teardown(&dir);
        teardown(&stage_of(&dir));
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
        // The staging folder: private, so the git binds made on a worktree
        // there are read-only before the tree moves into the shared folder
        // (a read-only remount does not propagate; a moved tree's copies
        // keep the flags it has).
        let stage = stage_of(&dir);
        let staged = std::fs::create_dir_all(&stage).and_then(|()| {
            rustix::mount::mount(
                "opfs-worktrees-stage",
                &stage,
                "tmpfs",
                MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                Some(c"mode=0700,size=64k"),
            )
            .and_then(|()| mount_change(&stage, MountPropagationFlags::PRIVATE))
            .map_err(io::Error::from)
        });
        if let Err(e) = staged {
            let _ = teardown(&stage);
            let _ = teardown(&dir);
            let _ = std::fs::remove_dir(&parent);
            return Err(e);
        }
        Ok(WorktreeShare {
            dir,
            state: Mutex::new(Bound::default()),
            git,
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
        for name in std::mem::take(&mut bound.names).into_keys() {
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
        // Unmounted, its directory left for the next run like the
        // folder's: a private mount's unmount reaches no sandbox that
        // copied it while setting up, and bwrap fails when the path of a
        // copy vanishes under it.
        warnings.extend(unmount_all(&stage_of(&self.dir)));
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
        if bound.names.contains_key(name) {
            return Ok(inside);
        }
        let target = self.dir.join(name);
        match std::fs::create_dir(&target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // Made in the private staging folder with its git binds, then
        // moved in whole.
        let staged = stage_of(&self.dir).join(name);
        let _ = std::fs::create_dir(&staged);
        let made = attach_clone(mountpoint, &staged)
            .map_err(|e| {
                io::Error::other(format!(
                    "cannot bind {} at {}: {e}",
                    mountpoint.display(),
                    staged.display()
                ))
            })
            .and_then(|()| {
                self.guard_git(mountpoint, &staged).map_err(|e| {
                    io::Error::other(format!(
                        "cannot keep what git runs in {} read-only: {e}",
                        mountpoint.display()
                    ))
                })
            })
            .and_then(|()| {
                use rustix::mount::{move_mount, MoveMountFlags};
                move_mount(
                    rustix::fs::CWD,
                    &staged,
                    rustix::fs::CWD,
                    &target,
                    MoveMountFlags::empty(),
                )
                .map_err(|e| {
                    io::Error::other(format!(
                        "cannot move {} to {}: {e}",
                        staged.display(),
                        target.display()
                    ))
                })
            });
        if let Err(e) = made {
            let _ = unmount_all(&staged);
            let _ = std::fs::remove_dir(&staged);
            let _ = std::fs::remove_dir(&target);
            return Err(e);
        }
        let _ = std::fs::remove_dir(&staged);
        bound
            .names
            .insert(name.to_string(), mountpoint.to_path_buf());
        Ok(inside)
    }

    fn unbind(&self, name: &str) -> io::Result<bool> {
        let mut bound = self.lock();
        let Some(mountpoint) = bound.names.get(name).cloned() else {
            return Ok(false);
        };
        let target = self.dir.join(name);
        // Its git binds first (a mount with mounts below it is busy), then
        // the bind itself, not lazily: a process inside that uses it keeps
        // it (EBUSY), and the git binds are made again.
        let below: Vec<PathBuf> = mountinfo::mount_points_under(&target)
            .into_iter()
            .filter(|m| *m != target)
            .collect();
        let mut result = Ok(());
        for m in below {
            if let Err(e) = unmount(&m, UnmountFlags::empty()) {
                result = Err(e.into());
                break;
            }
        }
        if result.is_ok() {
            result = unmount(&target, UnmountFlags::empty()).map_err(io::Error::from);
        }
        if let Err(e) = result {
            // Read-only remounts here do not reach the sandbox's copy of
            // the bind; the binds themselves do (a git write that renames
            // over one fails with EBUSY).
            if let Err(g) = self.guard_git(&mountpoint, &target) {
                log::warn!(
                    "worktree {name:?} stays bound in the sandbox, but what git runs in it \
                     could not be made read-only again: {g}"
                );
            }
            return Err(e);
        }
        bound.names.remove(name);
        // Its directory stays (in the tmpfs, gone with it): a sandbox
        // starting now may be resolving its path in a copy of the folder.
        Ok(true)
    }
}

impl WorktreeShare {
    /// Binds what git runs or trusts in the worktree mounted at
    /// `mountpoint` read-only over itself below its bind at `target` (the
    /// `.git` directory writable onto itself); the binds already made stay
    /// on error (the caller unmounts everything below `target`).
    fn guard_git(&self, mountpoint: &Path, target: &Path) -> io::Result<()> {
        let binds = self
            .git
            .binds(mountpoint, target)
            .map_err(|e| io::Error::other(e.to_string()))?;
        for b in binds {
            if std::fs::symlink_metadata(&b.dest).is_ok_and(|m| m.is_dir() || m.is_file()) {
                rustix::mount::mount_bind(&b.source, &b.dest)?;
                if !b.writable {
                    rustix::mount::mount_remount(
                        &b.dest,
                        MountFlags::BIND | MountFlags::RDONLY,
                        "",
                    )?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for WorktreeShare {
    fn drop(&mut self) {
        for w in self.close() {
            log::warn!("{w}");
        }
    }
}

/// The private staging folder of shared folder `dir` (`<pid>-stage`
/// beside it).
fn stage_of(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push("-stage");
    dir.with_file_name(name)
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
        let Some(pid) = e
            .file_name()
            .to_str()
            .and_then(|n| n.strip_suffix("-stage").unwrap_or(n).parse::<i32>().ok())
        else {
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
