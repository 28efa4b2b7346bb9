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
