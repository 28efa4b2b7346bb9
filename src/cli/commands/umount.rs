//! `opfs umount [--force] [MOUNTPOINT]`: without MOUNTPOINT, the mount of
//! the project `-C` (or the current directory) names. Afterwards `-C
//! MOUNTPOINT` still points to the project it served
//! ([`crate::cli::former_mount_entry`]). `--force` ends a daemon that is
//! stopped or hung ([`opfs::daemon::force_stop`]) without asking it
//! anything; a plain `umount` of such a daemon fails within its bound and
//! says so.

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
        Some(m) => {
            let m = ctx.dir.as_ref().map_or_else(|| m.clone(), |d| d.join(m));
            // A registered mountpoint is found without touching it (a stat
            // of a stopped daemon's mount would wait for it).
            let lexical = state::lexically_absolute(&m);
            if state::mount_entry(ctx.home(), &lexical).exists() {
                lexical
            } else {
                state::absolute(&m)
            }
        }
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
    if a.force {
        let r = daemon::force_stop(ctx.home(), &st, &mp).map_err(failure)?;
        if !ctx.format.is_json() {
            if let Some(pid) = r.killed {
                writeln!(
                    out,
                    "killed the daemon of {} (pid {pid}{}); detached {}",
                    st.project.display(),
                    r.was
                        .as_deref()
                        .map(|w| format!(", {w}"))
                        .unwrap_or_default(),
                    if r.detached.is_empty() {
                        "nothing (no mount was left)".to_string()
                    } else {
                        r.detached
                            .iter()
                            .map(|m| m.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )?;
            }
        }
    } else {
        daemon::stop(&st, &mp, Duration::from_secs(60)).map_err(failure)?;
    }
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
