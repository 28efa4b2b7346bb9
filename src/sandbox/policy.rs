//! What the sandbox allows: the writable roots, the hidden paths and the
//! secret environment variables, checked and made absolute.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::config;
use super::{Mode, RunError, RunOptions};

/// Credential paths, relative to the user's home, that are unreadable inside
/// the sandbox. The configuration's `hide` list adds to them.
pub const CREDENTIAL_PATHS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gh",
    ".netrc",
    ".docker",
    ".kube",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gcloud",
    ".azure",
];

/// Host paths that are unreadable inside whoever the user is: sockets that
/// hand out more power than the sandbox has (a read-only mount does not stop
/// `connect(2)` on a Unix socket).
pub const SYSTEM_HIDDEN: &[&str] = &["/run/docker.sock", "/var/run/docker.sock"];

/// Environment variables removed inside the sandbox (they unlock the
/// credentials hidden by [`CREDENTIAL_PATHS`]). The configuration's
/// `secret_env` list adds to them.
pub const SECRET_ENV: &[&str] = &[
    "SSH_AUTH_SOCK",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GH_TOKEN",
    "GITHUB_TOKEN",
];

/// What the sandbox allows, with every path absolute.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The mode.
    pub mode: Mode,
    /// Share the host's network namespace.
    pub net: bool,
    /// Writable roots (existing directories or regular files, canonical).
    pub writable: Vec<PathBuf>,
    /// Paths made unreadable (missing ones are skipped).
    pub hide: Vec<PathBuf>,
    /// Environment variables removed.
    pub secret_env: Vec<OsString>,
}

/// hidden paths (state dirs, credentials, the ssh agent socket, the
/// configuration's list) and the secret environment variables.
///
/// Errors: `--writable` in `read-only` mode, a writable root that does not
/// exist, is neither a directory nor a regular file, or lies inside a
/// hidden path.
pub fn policy_for(opts: &RunOptions, home: &Path) -> Result<Policy, RunError> {
    let user_home = opts.user_home.clone();
    let expand = |s: &str| match &user_home {
        Some(h) => config::expand_home(s, h),
        None => PathBuf::from(s),
    };
    let mut hide: Vec<PathBuf> = vec![home.to_path_buf()];
    if let Some(h) = &user_home {
        hide.push(h.join(".local/share/opfs"));
        hide.extend(CREDENTIAL_PATHS.iter().map(|p| h.join(p)));
    }
    hide.extend(SYSTEM_HIDDEN.iter().map(PathBuf::from));
    if let Some(x) = opts
        .env
        .xdg_data_home
        .as_ref()
        .filter(|v| !v.as_os_str().is_empty())
    {
        hide.push(x.join("opfs"));
    }
    hide.extend(opts.env.credential_files.iter().cloned());
    if let Some(sock) = opts
        .env
        .ssh_auth_sock
        .as_ref()
        .filter(|v| !v.as_os_str().is_empty())
    {
        hide.push(sock.clone());
    }
    hide.extend(opts.config.hide.iter().map(|s| expand(s)));
    let mut hide: Vec<PathBuf> = hide.into_iter().filter(|p| p.is_absolute()).collect();
    let hidden_real: Vec<PathBuf> = hide
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();

    if opts.mode == Mode::Unrestricted && !opts.writable.is_empty() {
        return Err(RunError::Usage(
            "--writable has no effect with --sandbox unrestricted (everything the caller may \
             write is writable); drop it or use workspace-write"
                .into(),
        ));
    }
    if opts.mode == Mode::ReadOnly && !opts.writable.is_empty() {
        return Err(RunError::Usage(
            "--writable has no effect in read-only mode; drop it or use workspace-write".into(),
        ));
    }
    let mut writable = Vec::new();
    if opts.mode == Mode::WorkspaceWrite {
        for w in &opts.writable {
            writable.push(writable_root(w, &hidden_real)?);
        }
        // Configured roots are defaults for any project: skip missing ones.
        for w in &opts.config.writable {
            let p = expand(w);
            if p.exists() {
                writable.push(writable_root(&p, &hidden_real)?);
            }
        }
    }
    let mut secret_env: Vec<OsString> = Vec::new();
    if opts.mode != Mode::Unrestricted {
        secret_env.extend(SECRET_ENV.iter().map(OsString::from));
        secret_env.extend(opts.config.secret_env.iter().map(OsString::from));
    } else {
        hide.clear();
    }
    Ok(Policy {
        mode: opts.mode,
        net: opts.net || opts.config.net,
        writable,
        hide,
        secret_env,
    })
}

fn writable_root(path: &Path, hidden: &[PathBuf]) -> Result<PathBuf, RunError> {
    let c = std::fs::canonicalize(path).map_err(|e| {
        RunError::Usage(format!(
            "writable root {} cannot be used: {e}",
            path.display()
        ))
    })?;
    if !c.is_dir() && !c.is_file() {
        return Err(RunError::Usage(format!(
            "writable root {} is neither a directory nor a regular file",
            path.display()
        )));
    }
    if let Some(h) = hidden.iter().find(|h| c.starts_with(h)) {
        return Err(RunError::Usage(format!(
            "writable root {} lies inside {}, which the sandbox hides (the state dir or a credential path)",
            path.display(),
            h.display()
        )));
    }
    Ok(c)
}
