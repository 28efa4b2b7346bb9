//! The `git` binary as the remote side runs it: a clean environment (only
//! what [`GitEnv`] passes: where git finds the user's credential helpers,
//! SSH agent and proxies), never a prompt, never a hook.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The variables a `git` that talks to a remote is given, taken by the
/// caller from its own environment (the library reads none): `HOME` and
/// `XDG_CONFIG_HOME` (the user's git configuration: credential helpers,
/// `url.*.insteadOf`), `PATH`, `SSH_AUTH_SOCK` and `GIT_SSH_COMMAND`
/// (SSH), the proxy variables. Everything else is left out, and opfs adds
/// `GIT_TERMINAL_PROMPT=0` (no prompt: the pusher has no terminal) and
/// `LC_ALL=C`.
#[derive(Debug, Clone, Default)]
pub struct GitEnv {
    /// Name and value of each variable passed.
    pub vars: Vec<(OsString, OsString)>,
}

impl GitEnv {
    /// The names [`GitEnv`] passes when the caller's environment sets them.
    pub const NAMES: &'static [&'static str] = &[
        "HOME",
        "PATH",
        "XDG_CONFIG_HOME",
        "GIT_CONFIG_GLOBAL",
        "SSH_AUTH_SOCK",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "http_proxy",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
    ];

    /// A `git` command with this environment and nothing else; in
    /// `git_dir` when given. The user's configuration is read (it names
    /// the credential helpers), but hooks, signing and submodule pushes
    /// are turned off, so no setting of theirs runs a program of its own
    /// or changes what is pushed.
    pub fn command(&self, git_dir: Option<&Path>) -> Command {
        let mut cmd = Command::new("git");
        cmd.env_clear()
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            .args(["-c", "core.hooksPath=/dev/null"])
            .args(["-c", "push.gpgSign=false"])
            .args(["-c", "push.recurseSubmodules=no"])
            .args(["-c", "push.followTags=false"])
            .args(["-c", "fetch.recurseSubmodules=false"])
            .stdin(Stdio::null());
        if let Some(d) = git_dir {
            cmd.arg("--git-dir").arg(d);
        }
        cmd
    }
}

/// Runs `cmd`, its output captured.
///
/// Errors: `git` cannot be started (not on `PATH`: `NotFound`).
pub(super) fn output(mut cmd: Command) -> std::io::Result<Output> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).output()
}

/// git's stderr, trimmed, lines joined with "; " (for one-line errors).
pub(super) fn stderr_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains("Writing objects") && !l.contains("objects:"))
        .collect::<Vec<_>>()
        .join("; ")
}
