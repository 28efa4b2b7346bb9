//! Pager and colour for `diff` and `log`, as git does them.
//!
//! - **Pager**: only when stdout is a terminal and neither `--no-pager`
//!   nor `--json` is given. The command is `$OPFS_PAGER`, else `$PAGER`,
//!   else `less -FRX`, run through `sh -c` (an empty value or `cat` means
//!   no pager); `LESS=FRX` is set for it when `LESS` is unset, as git
//!   does. A pager that cannot be started is skipped (the output goes to
//!   stdout) with a note under `-v`; a pager the user quits early is a
//!   normal end.
//! - **Colour**: `--color=always`, or `--color=auto` (the default) when
//!   stdout is a terminal, `NO_COLOR` is unset or empty and `TERM` is not
//!   `dumb`. `--color=never` never. Under a pipe, `auto` gives neither.

use std::io::{self, Write};
use std::process::{Command, Stdio};

use crate::cli::args::ColorWhen;
use crate::cli::error::CommandError;
use crate::cli::Ctx;

/// The pager when neither `OPFS_PAGER` nor `PAGER` is set.
pub const DEFAULT_PAGER: &str = "less -FRX";

/// What the terminal side of the environment says, read once in
/// [`crate::cli::Env`].
#[derive(Debug, Clone, Default)]
pub struct TermEnv {
    /// stdout is a terminal.
    pub stdout_tty: bool,
    /// stderr is a terminal (progress bars).
    pub stderr_tty: bool,
    /// `$OPFS_PAGER`, else `$PAGER`, as given.
    pub pager: Option<String>,
    /// `$NO_COLOR` is set and not empty.
    pub no_color: bool,
    /// `$TERM` is `dumb`.
    pub dumb: bool,
    /// `$LESS` is set.
    pub less_set: bool,
}

/// Colours for people, or none ([`Paint::on`] false).
#[derive(Debug, Clone, Copy)]
pub struct Paint {
    /// Whether to emit ANSI colour codes.
    pub on: bool,
}

const RESET: &str = "\x1b[m";
const BOLD: &str = "\x1b[1m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const CYAN: &str = "\x1b[36m";

impl Paint {
    fn wrap(&self, code: &str, text: &str) -> String {
        if self.on {
            format!("{code}{text}{RESET}")
        } else {
            text.to_string()
        }
    }

    /// A turn heading in `log` (yellow, as git's commit ids).
    pub fn turn(&self, text: &str) -> String {
        self.wrap(YELLOW, text)
    }

    /// Writes a patch (or `--stat`, `--name-status`) with git's colours:
    /// headers bold, hunk headers cyan, removed lines red, added lines
    /// green. Without colour the bytes pass through unchanged.
    pub fn write_diff(&self, patch: &[u8], out: &mut dyn Write) -> io::Result<()> {
        if !self.on {
            return out.write_all(patch);
        }
        let mut in_header = false;
        for line in patch.split_inclusive(|b| *b == b'\n') {
            let (body, nl) = match line.strip_suffix(b"\n") {
                Some(b) => (b, &b"\n"[..]),
                None => (line, &b""[..]),
            };
            if body.starts_with(b"diff --git ") {
                in_header = true;
            } else if body.starts_with(b"@@") {
                in_header = false;
            }
            let code = if in_header {
                Some(BOLD)
            } else if body.starts_with(b"@@") {
                Some(CYAN)
            } else if body.starts_with(b"+") {
                Some(GREEN)
            } else if body.starts_with(b"-") {
                Some(RED)
            } else {
                None
            };
            match code {
                Some(c) if !body.is_empty() => {
                    out.write_all(c.as_bytes())?;
                    out.write_all(body)?;
                    out.write_all(RESET.as_bytes())?;
                    out.write_all(nl)?;
                }
                _ => out.write_all(line)?,
            }
            if body.starts_with(b"+++ ") {
                in_header = false;
            }
        }
        Ok(())
    }
}

/// Whether `diff` and `log` colour their output.
pub fn colour(ctx: &Ctx) -> bool {
    let t = &ctx.env.term;
    match ctx.color {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => t.stdout_tty && !t.no_color && !t.dumb,
    }
}

/// The pager command to run, if the output is to be paged.
fn pager_command(ctx: &Ctx) -> Option<String> {
    let t = &ctx.env.term;
    if !t.stdout_tty || ctx.no_pager || ctx.format.is_json() {
        return None;
    }
    let cmd = t.pager.clone().unwrap_or_else(|| DEFAULT_PAGER.to_string());
    let trimmed = cmd.trim();
    (!trimmed.is_empty() && trimmed != "cat").then(|| trimmed.to_string())
}

/// Runs `write` with the output of a human-readable command: into the
/// pager when one applies ([`pager_command`]), else into `out`; with the
/// colours [`colour`] decides.
///
/// Errors: what `write` returns (a pager the user quit is not one), or the
/// pager's exit status cannot be read.
pub fn page(
    ctx: &Ctx,
    out: &mut dyn Write,
    write: impl FnOnce(&mut dyn Write, Paint) -> io::Result<()>,
) -> Result<(), CommandError> {
    let paint = Paint { on: colour(ctx) };
    let Some(cmd) = pager_command(ctx) else {
        return Ok(write(out, paint)?);
    };
    let mut c = Command::new("sh");
    c.arg("-c").arg(&cmd).stdin(Stdio::piped());
    if !ctx.env.term.less_set {
        c.env("LESS", "FRX");
    }
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            log::info!("cannot start the pager {cmd:?}: {e}; writing to stdout");
            return Ok(write(out, paint)?);
        }
    };
    // Whatever stdout holds so far goes first.
    out.flush()?;
    let written = match child.stdin.take() {
        Some(mut stdin) => write(&mut stdin, paint).and_then(|()| stdin.flush()),
        None => Ok(()),
    };
    // stdin is closed here: the pager sees the end and waits for the user.
    let status = child
        .wait()
        .map_err(|e| CommandError::failure(format!("the pager {cmd:?}: {e}")))?;
    match written {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
        Ok(()) => {
            if !status.success() {
                log::info!("the pager {cmd:?} exited with {status}");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_lines_get_git_colours() {
        let patch = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n c\n";
        let mut out = Vec::new();
        Paint { on: true }
            .write_diff(patch, &mut out)
            .expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.starts_with("\x1b[1mdiff --git a/f b/f\x1b[m\n"),
            "{text}"
        );
        assert!(text.contains("\x1b[1m--- a/f\x1b[m\n\x1b[1m+++ b/f\x1b[m\n"));
        assert!(
            text.contains("\x1b[36m@@ -1 +1 @@\x1b[m\n\x1b[31m-a\x1b[m\n\x1b[32m+b\x1b[m\n c\n")
        );
        let mut plain = Vec::new();
        Paint { on: false }
            .write_diff(patch, &mut plain)
            .expect("write");
        assert_eq!(plain, patch);
    }
}
