//! The mount the sandbox binds: an existing daemon's, or a private one
//! `opfs run` starts under the state dir and stops again afterwards.

use std::path::PathBuf;
use std::time::Duration;

use super::RunError;
use crate::daemon::{self, DaemonOptions};
use crate::state::lock::StateLock;
use crate::state::{mountinfo, registry};
use crate::store::StateDir;

/// The mount the sandbox binds; unmounts it on drop if `opfs run` made it.
pub(super) struct MountGuard {
    state: StateDir,
    pub(super) mountpoint: PathBuf,
    owned: bool,
}

impl MountGuard {
    /// The mount serving `st`'s project: the running daemon's, else a
    /// private one started with `opts` (and `verbose` `-v` flags).
    pub(super) fn ensure(
        st: &StateDir,
        home: &std::path::Path,
        opts: &DaemonOptions,
        verbose: u8,
    ) -> Result<MountGuard, RunError> {
        if StateLock::is_held(st) {
            let mp = registry::recorded_mountpoint(st)
                .filter(|m| mountinfo::is_mount_point(m))
                .ok_or_else(|| RunError::LockedUnmounted(st.project.clone()))?;
            return Ok(MountGuard {
                state: st.clone(),
                mountpoint: mp,
                owned: false,
            });
        }
        // The private mountpoint lies in the state dir: a state dir inside
        // the project (`opfs run` in the home folder, state under
        // ~/.local/share) is said as such, before anything is made in it
        // (zero intrusion), not as a mountpoint the user never chose.
        let home_abs = crate::state::absolute(home);
        if home_abs.starts_with(&st.project) {
            return Err(RunError::Mount(daemon::SpawnError::Check(
                daemon::MountError::StateInsideProject {
                    state: home_abs,
                    project: st.project.clone(),
                },
            )));
        }
        st.create()
            .map_err(RunError::io(format!("cannot create {}", st.dir.display())))?;
        let mp = st.dir.join("run").join(std::process::id().to_string());
        std::fs::create_dir_all(&mp)
            .map_err(RunError::io(format!("cannot create {}", mp.display())))?;
        if let Err(e) = daemon::spawn::start(home, &st.project, &mp, opts, verbose) {
            let _ = std::fs::remove_dir(&mp);
            return Err(RunError::Mount(e));
        }
        Ok(MountGuard {
            state: st.clone(),
            mountpoint: mp,
            owned: true,
        })
    }

    /// The mount of worktree `name` of `st`'s project, mounted first if it
    /// is not (and left mounted afterwards: a worktree outlives the run);
    /// with the worktree's own state dir, where `--turn` opens its turn.
    pub(super) fn worktree(
        st: &StateDir,
        home: &std::path::Path,
        name: &str,
        opts: &DaemonOptions,
        verbose: u8,
    ) -> Result<(MountGuard, StateDir), RunError> {
        use crate::worktree::life as wt_cmd;
        let served = crate::daemon::worktree::Served {
            home,
            opts,
            verbose,
        };
        let wt = crate::worktree::Worktree::of(st, name);
        let meta = wt
            .meta()
            .map_err(|e| RunError::Worktree(wt_cmd::WorktreeCmdError::Worktree(e)))?;
        if !wt_cmd::is_mounted(home, &wt, &meta, &served) {
            wt_cmd::mount(st, name, &served).map_err(RunError::Worktree)?;
        }
        let state = wt.state(home);
        Ok((
            MountGuard {
                state: state.clone(),
                mountpoint: meta.mountpoint,
                owned: false,
            },
            state,
        ))
    }

    /// Whether the daemon behind the mountpoint is gone: it is no longer
    /// a mount point (unmounted, or cleaned up after its daemon was
    /// killed), or its FUSE connection is dead (`ENOTCONN`).
    pub(super) fn daemon_stopped(&self) -> bool {
        if !mountinfo::is_mount_point(&self.mountpoint) {
            return true;
        }
        matches!(
            rustix::fs::statfs(&self.mountpoint),
            Err(rustix::io::Errno::NOTCONN)
        )
    }

    /// Unmounts a mount this run made and removes its mountpoint.
    pub(super) fn finish(&mut self) -> Result<(), String> {
        if !self.owned {
            return Ok(());
        }
        self.owned = false;
        daemon::stop(&self.state, &self.mountpoint, Duration::from_secs(60))
            .map_err(|e| e.to_string())?;
        std::fs::remove_dir(&self.mountpoint)
            .map_err(|e| format!("cannot remove {}: {e}", self.mountpoint.display()))?;
        if let Some(parent) = self.mountpoint.parent() {
            let _ = std::fs::remove_dir(parent);
        }
        Ok(())
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            log::warn!("{e}");
        }
    }
}
