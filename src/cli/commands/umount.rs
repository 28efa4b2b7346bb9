//! `opfs umount MOUNTPOINT`.

use std::io::Write;
use std::time::Duration;

use opfs::daemon;
use opfs::state;

use crate::cli::args::UmountArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &UmountArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let mp = state::absolute(&a.mountpoint);
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
    if ctx.format.is_json() {
        writeln!(out, "{}", serde_json::json!({ "unmounted": mp }))?;
    }
    Ok(())
}
