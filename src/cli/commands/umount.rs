//! `opfs umount [MOUNTPOINT]`: without MOUNTPOINT, the mount of the
//! project `-C` (or the current directory) names. Afterwards `-C
//! MOUNTPOINT` still points to the project it served
//! ([`crate::cli::former_mount_entry`]).

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use opfs::daemon;
use opfs::state::{self, registry};

use crate::cli::args::UmountArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::{former_mount_entry, Ctx};

pub fn run(ctx: &Ctx, a: &UmountArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let mp = match &a.mountpoint {
        // A relative MOUNTPOINT is relative to `-C`, as with git.
        Some(m) => state::absolute(&ctx.dir.as_ref().map_or_else(|| m.clone(), |d| d.join(m))),
        None => mount_of_dir(ctx)?,
    };
    let st = state::resolve(ctx.home(), &mp).ok_or_else(|| {
        CommandError::failure(format!(
            "{} is not an opfs mountpoint (no opfs daemon serves it{})",
            mp.display(),
            if mp.exists() {
                ""
            } else {
                "; it does not exist"
            }
        ))
    })?;
    daemon::stop(&st, &mp, Duration::from_secs(60)).map_err(failure)?;
    let entry = former_mount_entry(ctx.home(), &mp);
    let recorded = entry
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&entry, st.project.as_os_str().as_bytes()));
    if let Err(e) = recorded {
        // Only a later `-C MOUNTPOINT` loses its pointer to the project.
        log::warn!("cannot record the former mount in {}: {e}", entry.display());
    }
    if ctx.format.is_json() {
        writeln!(out, "{}", serde_json::json!({ "unmounted": mp }))?;
    }
    Ok(())
}

/// The mountpoint for `opfs -C DIR umount`: where the project DIR
/// belongs to (DIR is the project, its mountpoint, or inside either) is
/// mounted.
fn mount_of_dir(ctx: &Ctx) -> Result<PathBuf, CommandError> {
    let st = ctx.project_state()?;
    registry::recorded_mountpoint(&st).ok_or_else(|| {
        CommandError::failure(format!(
            "{} is not mounted (no opfs daemon serves it): nothing to unmount",
            st.project.display()
        ))
    })
}
