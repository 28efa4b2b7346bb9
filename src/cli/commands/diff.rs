//! `opfs diff N[..M] [PATH...]`: a patch git can apply, `--stat` or
//! `--name-status`.

use opfs::control::client::commit_through_daemon;
use std::io::Write;

use opfs::diff as patch;
use opfs::history::{self, Opened};

use crate::cli::args::DiffArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

/// What `opfs diff` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Patch,
    Stat,
    NameStatus,
}

pub fn run(ctx: &Ctx, a: &DiffArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let project = ctx.project()?;
    project.commit_pending()?;
    let mode = if a.stat {
        Mode::Stat
    } else if a.name_status {
        Mode::NameStatus
    } else {
        Mode::Patch
    };
    let range = &a.range;
    let (from, to) = history::parse_range_arg(range)?;
    let filter = a
        .paths
        .iter()
        .map(|p| history::parse_path(p))
        .collect::<Result<Vec<_>, _>>()?;
    let st = project.state().clone();
    let opened = Opened::open(
        project.state(),
        Box::new(move || commit_through_daemon(&st)),
    )?;
    let src = opened.sources();
    let changes = history::changes(&src, from, to, &filter)?;
    let diffs = patch::build(&src, &changes)?;
    let write = |w: &mut dyn Write| match mode {
        Mode::Stat => patch::write_stat(&diffs, w),
        Mode::NameStatus => patch::write_name_status(&diffs, w),
        Mode::Patch => patch::write_patch(&diffs, w),
    };
    if ctx.format.is_json() {
        let mut buf = Vec::new();
        write(&mut buf).map_err(failure)?;
        let v = serde_json::json!({
            "from": from,
            "to": to,
            "output": String::from_utf8_lossy(&buf),
        });
        writeln!(out, "{v}")?;
        return Ok(());
    }
    Ok(write(out)?)
}
