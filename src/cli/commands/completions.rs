//! `opfs completions SHELL` and `opfs man [--dir DIR]`: shell completions
//! (`clap_complete`) and man pages (`clap_mangen`), both generated from
//! the clap tree, so they always list the commands and flags this build
//! has.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use crate::cli::args::{Cli, CompletionsArgs, ManArgs};
use crate::cli::error::CommandError;
use crate::cli::Ctx;

pub fn completions(a: &CompletionsArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let mut cmd = Cli::command();
    // Into a buffer first: `generate` panics when its writer fails, and a
    // closed pipe (`opfs completions bash | head`) must exit quietly like
    // every other command's output.
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "opfs", &mut script);
    out.write_all(&script)?;
    Ok(())
}

/// Without `--dir`, `opfs(1)` on stdout. With it, `opfs.1` and one
/// `opfs-CMD.1` per command (`opfs-worktree-create.1` for nested ones) in
/// DIR, which must exist; prints the files written.
pub fn man(ctx: &Ctx, a: &ManArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let cmd = Cli::command();
    let Some(dir) = &a.dir else {
        clap_mangen::Man::new(cmd).render(out)?;
        return Ok(());
    };
    if !dir.is_dir() {
        return Err(CommandError::failure(format!(
            "--dir {}: no such directory (create it first)",
            dir.display()
        )));
    }
    let mut written = Vec::new();
    write_pages(dir, cmd, "opfs", &mut written)?;
    if ctx.format.is_json() {
        writeln!(out, "{}", serde_json::json!({ "written": written }))?;
    } else {
        for w in &written {
            writeln!(out, "{}", w.display())?;
        }
    }
    Ok(())
}

/// Writes `NAME.1` for `cmd` and, under it, one page per subcommand.
fn write_pages(
    dir: &Path,
    cmd: clap::Command,
    name: &str,
    written: &mut Vec<std::path::PathBuf>,
) -> Result<(), CommandError> {
    let cmd = cmd.name(name.to_string());
    let path = dir.join(format!("{name}.1"));
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    std::fs::write(&path, buf)
        .map_err(|e| CommandError::failure(format!("cannot write {}: {e}", path.display())))?;
    written.push(path);
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let sub_name = format!("{name}-{}", sub.get_name());
        write_pages(dir, sub.clone(), &sub_name, written)?;
    }
    Ok(())
}
