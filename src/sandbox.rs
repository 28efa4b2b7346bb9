//! `opfs run`: runs a command in a bubblewrap sandbox with the project,
//! served through the journaling mount, at its own absolute path (design §6
//! and guarantee 8).
//!
//! The sandbox is built from one ordered list of bwrap arguments
//! ([`bwrap_args`]); bwrap resolves every bind *source* in the host's view, so
//! a source may lie inside a directory that an earlier argument hid. The
//! order is:
//!
//! 1. namespaces and process hygiene: a new pid, ipc and uts namespace (and a
//!    new network namespace unless `--net`), a new session (no terminal
//!    injection), `--die-with-parent`, and every capability dropped (bwrap
//!    run by root keeps them otherwise, and with `CAP_SYS_ADMIN` a process
//!    could unmount what hides the state dir);
//! 2. the host root read-only, a fresh `/dev` and `/proc` (a new pid
//!    namespace, so `/proc/PID/root` of host processes is unreachable), a
//!    private `/tmp`;
//! 3. writable roots (`--writable`, config);
//! 4. hidden paths that are not inside the project: the state dirs and
//!    credential paths, an empty read-only tmpfs over a directory and
//!    `/dev/null` over anything else;
//! 5. the mountpoint bound over the project path (read-only in `read-only`
//!    mode), so every write to the project goes through the journal;
//! 6. hidden paths inside the project (they would be re-exposed by 5).
//!
//! The library never prints; what went wrong is in [`RunError`].

use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::capture::{Journal, NewTurn};
use crate::config::{self, ConfigError, SandboxConfig};
use crate::control::{self, Request, Response, StateLock};
use crate::daemon;
use crate::record::TurnKind;
use crate::state;
use crate::store::StateDir;

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

/// Signals `opfs run` passes on to the sandboxed command.
const FORWARDED: &[i32] = &[
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// The file descriptor bwrap reports the sandbox's pid on.
const INFO_FD: RawFd = 3;

/// How much the sandboxed command may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The host read-only; the project (through the mount), writable roots
    /// and a private `/tmp` writable.
    WorkspaceWrite,
    /// Nothing writable but a private `/tmp`; the project is read through
    /// the mount.
    ReadOnly,
    /// No sandbox at all: the command runs as a plain child process. Only
    /// when asked for by name.
    DangerFullAccess,
}

impl Mode {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::WorkspaceWrite => "workspace-write",
            Mode::ReadOnly => "read-only",
            Mode::DangerFullAccess => "danger-full-access",
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "workspace-write" => Ok(Mode::WorkspaceWrite),
            "read-only" => Ok(Mode::ReadOnly),
            "danger-full-access" => Ok(Mode::DangerFullAccess),
            other => Err(format!(
                "unknown sandbox mode {other:?} (workspace-write, read-only, danger-full-access)"
            )),
        }
    }
}

/// Why `opfs run` refused or failed. In every case the command was not run
/// unless the variant says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad arguments (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// bubblewrap is not installed (or `$OPFS_BWRAP` names a missing file).
    #[error(
        "bubblewrap ({0}) was not found, so the command was not run: opfs run never runs a \
         command unsandboxed. Install it (e.g. `apt-get install bubblewrap`), or ask for no \
         sandbox by name with --sandbox danger-full-access"
    )]
    BwrapMissing(String),
    /// bwrap could not build the sandbox; the command was not run.
    #[error("cannot set up the sandbox, so the command was not run: {0}")]
    Setup(String),
    /// The project could not be mounted.
    #[error("cannot mount the project: {0}")]
    Mount(String),
    /// `--turn` could not open a turn; the command was not run.
    #[error("cannot open a turn: {0}")]
    Turn(String),
    /// The configuration file is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the path.
        what: String,
        /// The cause.
        source: io::Error,
    },
}

impl RunError {
    fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> RunError {
        let what = what.into();
        move |source| RunError::Io { what, source }
    }
}

/// What the sandbox allows, with every path absolute.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The mode.
    pub mode: Mode,
    /// Share the host's network namespace.
    pub net: bool,
    /// Writable roots (existing directories, canonical).
    pub writable: Vec<PathBuf>,
    /// Paths made unreadable (missing ones are skipped).
    pub hide: Vec<PathBuf>,
    /// Environment variables removed.
    pub secret_env: Vec<OsString>,
}

/// Where the project is and where the sandboxed command starts.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The project's canonical path: where it appears inside.
    pub project: PathBuf,
    /// What is bound there: the mountpoint serving the project.
    pub source: PathBuf,
    /// The working directory inside.
    pub cwd: PathBuf,
}

/// Everything `opfs run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The opfs home (root of the state dirs).
    pub home: PathBuf,
    /// The user's home directory (for credential paths and `~/` in the
    /// configuration), if known.
    pub user_home: Option<PathBuf>,
    /// The project, a mountpoint, or a directory inside one (`-C`, else the
    /// current directory). A directory opfs does not know yet becomes the
    /// project.
    pub dir: PathBuf,
    /// The mode.
    pub mode: Mode,
    /// `--net`.
    pub net: bool,
    /// `--writable` directories.
    pub writable: Vec<PathBuf>,
    /// `--turn`: open a turn with this label before the command starts.
    pub turn: Option<String>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Defaults from the configuration file.
    pub config: SandboxConfig,
    /// The bwrap binary; `None` searches `$PATH`.
    pub bwrap: Option<PathBuf>,
}

/// How the run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The command's exit status: its exit code, or 128 + the signal that
    /// killed it.
    pub code: i32,
    /// Problems after the command ran (e.g. the private mount could not be
    /// unmounted), for the caller to report.
    pub warnings: Vec<String>,
}

/// Starts a daemon serving the project (first argument) at the mountpoint
/// (second) and returns once it answers; `Err` carries the reason.
pub type MountFn<'a> = &'a mut dyn FnMut(&Path, &Path) -> Result<(), String>;

/// Runs `opts.command` as `opts.mode` says, and returns its exit status.
///
/// In the sandboxed modes the project is mounted first if no daemon serves
/// it (with `mount`, at a private mountpoint under the state dir, unmounted
/// again afterwards); an existing mount is used and left running. Signals
/// sent to this process (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1/2,
/// SIGWINCH) are forwarded to the command's process group while it runs.
///
/// Errors: every `Err` means the command did not run. bwrap missing, or
/// failing to build the sandbox, is an error, never a reason to run the
/// command without one.
pub fn run(opts: &RunOptions, mount: MountFn<'_>) -> Result<RunOutcome, RunError> {
    if opts.command.is_empty() {
        return Err(RunError::Usage(
            "no command given (opfs run -- CMD...)".into(),
        ));
    }
    let home = state::absolute(&opts.home);
    if opts.mode == Mode::DangerFullAccess {
        return run_unsandboxed(opts, &home);
    }
    let policy = policy_for(opts, &home)?;
    let bwrap = find_bwrap(opts.bwrap.as_deref())?;
    let st = locate(&home, &opts.dir)?;
    let mut guard = MountGuard::ensure(&st, mount)?;
    if let Some(label) = &opts.turn {
        open_turn(&st, label)?;
    }
    let layout = Layout {
        project: st.project.clone(),
        source: guard.mountpoint.clone(),
        cwd: map_cwd(&opts.dir, &st.project, &guard.mountpoint),
    };
    let args = bwrap_args(&policy, &layout)?;
    preflight(&bwrap, &args, &policy)?;
    let mut cmd = Command::new(&bwrap);
    cmd.args(&args)
        .arg("--info-fd")
        .arg(INFO_FD.to_string())
        .arg("--")
        .args(&opts.command);
    apply_env(&mut cmd, &policy);
    let code = spawn_and_wait(cmd)?;
    let mut warnings = Vec::new();
    if let Err(e) = guard.finish() {
        warnings.push(e);
    }
    Ok(RunOutcome { code, warnings })
}

/// The policy for `opts`: its writable roots (checked, canonical), the
/// hidden paths (state dirs, credentials, the ssh agent socket, the
/// configuration's list) and the secret environment variables.
///
/// Errors: `--writable` in `read-only` mode, a writable root that does not
/// exist, is not a directory, or lies inside a hidden path.
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
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        hide.push(PathBuf::from(x).join("opfs"));
    }
    if let Some(sock) = std::env::var_os("SSH_AUTH_SOCK").filter(|v| !v.is_empty()) {
        hide.push(PathBuf::from(sock));
    }
    hide.extend(opts.config.hide.iter().map(|s| expand(s)));
    let hide: Vec<PathBuf> = hide.into_iter().filter(|p| p.is_absolute()).collect();
    let hidden_real: Vec<PathBuf> = hide
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();

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
            if p.is_dir() {
                writable.push(writable_root(&p, &hidden_real)?);
            }
        }
    }
    let mut secret_env: Vec<OsString> = SECRET_ENV.iter().map(OsString::from).collect();
    secret_env.extend(opts.config.secret_env.iter().map(OsString::from));
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
    if !c.is_dir() {
        return Err(RunError::Usage(format!(
            "writable root {} is not a directory",
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

/// The bwrap arguments (everything before `--`) for `policy` and `layout`,
/// in the order the module documentation gives. Looks at the filesystem
/// only to skip missing hidden paths and to tell directories from files.
///
/// Errors: `DangerFullAccess` (it has no sandbox), a relative path.
pub fn bwrap_args(policy: &Policy, layout: &Layout) -> Result<Vec<OsString>, RunError> {
    if policy.mode == Mode::DangerFullAccess {
        return Err(RunError::Usage(
            "danger-full-access runs without a sandbox; there are no bwrap arguments".into(),
        ));
    }
    for p in [&layout.project, &layout.source, &layout.cwd]
        .into_iter()
        .chain(&policy.writable)
    {
        if !p.is_absolute() {
            return Err(RunError::Usage(format!(
                "{} is not an absolute path",
                p.display()
            )));
        }
    }
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
    push(&[
        "--die-with-parent".as_ref(),
        "--new-session".as_ref(),
        "--unshare-pid".as_ref(),
        "--unshare-ipc".as_ref(),
        "--unshare-uts".as_ref(),
        "--unshare-cgroup-try".as_ref(),
        "--cap-drop".as_ref(),
        "ALL".as_ref(),
    ]);
    if !policy.net {
        push(&["--unshare-net".as_ref()]);
    }
    push(&[
        "--ro-bind".as_ref(),
        "/".as_ref(),
        "/".as_ref(),
        "--dev".as_ref(),
        "/dev".as_ref(),
        "--proc".as_ref(),
        "/proc".as_ref(),
        "--tmpfs".as_ref(),
        "/tmp".as_ref(),
    ]);
    if policy.mode == Mode::WorkspaceWrite {
        for w in &policy.writable {
            push(&["--bind".as_ref(), w.as_os_str(), w.as_os_str()]);
        }
    }
    let hides = hide_targets(&policy.hide);
    let (inside, outside): (Vec<_>, Vec<_>) = hides
        .into_iter()
        .partition(|(p, _)| p.starts_with(&layout.project));
    for (p, is_dir) in &outside {
        push_hide(&mut a, p, *is_dir);
    }
    let bind = if policy.mode == Mode::ReadOnly {
        "--ro-bind"
    } else {
        "--bind"
    };
    a.extend([
        OsString::from(bind),
        layout.source.clone().into(),
        layout.project.clone().into(),
    ]);
    for (p, is_dir) in &inside {
        push_hide(&mut a, p, *is_dir);
    }
    a.extend([OsString::from("--chdir"), layout.cwd.clone().into()]);
    Ok(a)
}

/// The existing hidden paths, resolved (a symlink hides its target),
/// deduplicated, without those under `/tmp` (private inside anyway).
fn hide_targets(paths: &[PathBuf]) -> Vec<(PathBuf, bool)> {
    let mut out: Vec<(PathBuf, bool)> = Vec::new();
    for p in paths {
        let Ok(real) = std::fs::canonicalize(p) else {
            continue;
        };
        if real.starts_with("/tmp") || out.iter().any(|(q, _)| *q == real) {
            continue;
        }
        let is_dir = real.is_dir();
        out.push((real, is_dir));
    }
    out
}

fn push_hide(a: &mut Vec<OsString>, p: &Path, is_dir: bool) {
    if is_dir {
        a.extend([
            "--tmpfs".into(),
            p.as_os_str().to_os_string(),
            "--remount-ro".into(),
            p.as_os_str().to_os_string(),
        ]);
    } else {
        a.extend([
            "--ro-bind".into(),
            "/dev/null".into(),
            p.as_os_str().to_os_string(),
        ]);
    }
}

/// The working directory inside for a caller in `dir`: the same place in
/// the project when `dir` is in the project or in the mountpoint, else the
/// project root.
pub fn map_cwd(dir: &Path, project: &Path, mountpoint: &Path) -> PathBuf {
    let d = state::absolute(dir);
    if let Ok(rest) = d.strip_prefix(mountpoint) {
        return project.join(rest);
    }
    if d.starts_with(project) {
        return d;
    }
    project.to_path_buf()
}

/// The bwrap binary: `explicit` if given, else `bwrap` on `$PATH`.
pub fn find_bwrap(explicit: Option<&Path>) -> Result<PathBuf, RunError> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(RunError::BwrapMissing(p.display().to_string()))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
        .ok_or_else(|| RunError::BwrapMissing("bwrap on $PATH".into()))
}

/// The state dir of the project `dir` belongs to; a directory opfs does not
/// know yet is the project itself.
fn locate(home: &Path, dir: &Path) -> Result<StateDir, RunError> {
    let abs = state::absolute(dir);
    if let Some(st) = state::resolve(home, &abs) {
        return Ok(st);
    }
    if !abs.is_dir() {
        return Err(RunError::Usage(format!(
            "{} is not a directory",
            abs.display()
        )));
    }
    Ok(StateDir::for_project(home, &abs))
}

/// The mount the sandbox binds; unmounts it on drop if `opfs run` made it.
struct MountGuard {
    state: StateDir,
    mountpoint: PathBuf,
    owned: bool,
}

impl MountGuard {
    fn ensure(st: &StateDir, mount: MountFn<'_>) -> Result<MountGuard, RunError> {
        if StateLock::is_held(st) {
            let mp = control::recorded_mountpoint(st)
                .filter(|m| control::is_mount_point(m))
                .ok_or_else(|| {
                    RunError::Mount(format!(
                        "{} is locked by another opfs command but not mounted; try again",
                        st.project.display()
                    ))
                })?;
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
        if let Err(e) = mount(&st.project, &mp) {
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
    fn finish(&mut self) -> Result<(), String> {
        if !self.owned {
            return Ok(());
        }
        self.owned = false;
        daemon::stop(&self.state, &self.mountpoint, Duration::from_secs(60))?;
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

/// Closes the open turn and opens one labelled `label`: through the daemon
/// if one runs, else directly on the state dir.
fn open_turn(st: &StateDir, label: &str) -> Result<u64, RunError> {
    let req = Request::Turn {
        label: Some(label.to_string()),
        id: None,
    };
    match control::request(&st.socket_path(), &req) {
        Ok(Response::Turn { turn }) => Ok(turn),
        Ok(Response::Error { message, .. }) => Err(RunError::Turn(message)),
        Ok(other) => Err(RunError::Turn(format!(
            "unexpected answer from the daemon: {other:?}"
        ))),
        Err(e) if StateLock::is_held(st) => Err(RunError::Turn(format!(
            "the daemon does not answer on {}: {e}",
            st.socket_path().display()
        ))),
        Err(_) => {
            let _lock = StateLock::try_acquire(st)
                .ok()
                .flatten()
                .ok_or_else(|| RunError::Turn(format!("{} is busy", st.dir.display())))?;
            let j = Journal::open(st, false).map_err(|e| RunError::Turn(e.to_string()))?;
            j.next_turn(NewTurn {
                kind: TurnKind::Agent,
                label: Some(label),
                external_id: None,
                rewound_to: None,
            })
            .map_err(|e| RunError::Turn(e.to_string()))
        }
    }
}

/// Runs `bwrap ARGS -- true`: proves the sandbox can be built before the
/// real command starts, so a setup failure is reported as such and never
/// confused with the command's own exit status.
fn preflight(bwrap: &Path, args: &[OsString], policy: &Policy) -> Result<(), RunError> {
    let mut cmd = Command::new(bwrap);
    cmd.args(args)
        .arg("--")
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    apply_env(&mut cmd, policy);
    let out = cmd
        .output()
        .map_err(|e| RunError::Setup(format!("cannot start {}: {e}", bwrap.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(RunError::Setup(if stderr.is_empty() {
        format!("{} exited with {}", bwrap.display(), out.status)
    } else {
        stderr
    }))
}

fn apply_env(cmd: &mut Command, policy: &Policy) {
    for k in &policy.secret_env {
        cmd.env_remove(k);
    }
    cmd.env("OPFS_SANDBOX", policy.mode.as_str());
}

/// Spawns bwrap in its own process group (so the terminal's signals reach
/// only `opfs run`, which forwards them), learns the sandbox's pid from
/// `--info-fd`, and waits.
fn spawn_and_wait(mut cmd: Command) -> Result<i32, RunError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(RunError::io("cannot create a pipe")(
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: pipe2 returned two fresh descriptors that we now own.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let w = fds[1];
    // SAFETY: only async-signal-safe calls (setpgid, dup2, fcntl) between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            let r = if w == INFO_FD {
                libc::fcntl(w, libc::F_SETFD, 0)
            } else {
                libc::dup2(w, INFO_FD)
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| RunError::Setup(format!("cannot start bwrap: {e}")))?;
    drop(write_end);
    let sandbox_pid = Arc::new(AtomicI32::new(0));
    {
        let sandbox_pid = sandbox_pid.clone();
        std::thread::spawn(move || {
            if let Some(pid) = read_child_pid(read_end) {
                sandbox_pid.store(pid, Ordering::SeqCst);
            }
        });
    }
    let status = wait_forwarding(child, FORWARDED, move |sig, bwrap_pid| {
        let pid = sandbox_pid.load(Ordering::SeqCst);
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            if pid > 0 {
                // The sandbox's init leads the new session and process group
                // the command runs in: signal the group, as a terminal would.
                libc::kill(-pid, sig);
            } else {
                // Not started yet: bwrap dies of it and takes the sandbox
                // with it (--die-with-parent).
                libc::kill(bwrap_pid, sig);
            }
        }
    })
    .map_err(RunError::io("cannot wait for bwrap"))?;
    Ok(exit_code(status))
}

/// Reads bwrap's `--info-fd` JSON up to the end of the first object and
/// returns its `child-pid`. The fd may stay open in the sandbox, so this
/// does not wait for end of file.
fn read_child_pid(fd: OwnedFd) -> Option<i32> {
    let mut f = std::fs::File::from(fd);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let n = f.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&buf) {
            return v["child-pid"].as_i64().and_then(|p| i32::try_from(p).ok());
        }
    }
}

/// Waits for `child`, calling `forward(signal, child_pid)` for each of
/// `signals` this process receives meanwhile.
fn wait_forwarding(
    mut child: Child,
    signals: &[i32],
    forward: impl Fn(i32, i32) + Send + 'static,
) -> io::Result<ExitStatus> {
    let mut sigs = signal_hook::iterator::Signals::new(signals)?;
    let handle = sigs.handle();
    let pid = child.id() as i32;
    let thread = std::thread::spawn(move || {
        for sig in sigs.forever() {
            forward(sig, pid);
        }
    });
    let status = child.wait();
    handle.close();
    let _ = thread.join();
    status
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// `danger-full-access`: the command runs as a plain child in the caller's
/// directory (`-C` if given), with no mount namespace and no sandbox.
/// `--turn` still opens a turn.
fn run_unsandboxed(opts: &RunOptions, home: &Path) -> Result<RunOutcome, RunError> {
    if !opts.writable.is_empty() {
        return Err(RunError::Usage(
            "--writable has no effect with danger-full-access (everything is writable)".into(),
        ));
    }
    if let Some(label) = &opts.turn {
        let st = locate(home, &opts.dir)?;
        open_turn(&st, label)?;
    }
    let mut cmd = Command::new(&opts.command[0]);
    cmd.args(&opts.command[1..])
        .current_dir(&opts.dir)
        .env("OPFS_SANDBOX", Mode::DangerFullAccess.as_str());
    let child = cmd.spawn().map_err(RunError::io(format!(
        "cannot run {}",
        Path::new(&opts.command[0]).display()
    )))?;
    // The child shares our process group, so the terminal's SIGINT, SIGQUIT
    // and SIGWINCH reach it directly; only signals aimed at this process
    // are passed on.
    let status = wait_forwarding(
        child,
        &[
            libc::SIGHUP,
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGINT,
            libc::SIGQUIT,
        ],
        |sig, pid| {
            if sig != libc::SIGINT && sig != libc::SIGQUIT {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(pid, sig);
                }
            }
        },
    )
    .map_err(RunError::io("cannot wait for the command"))?;
    Ok(RunOutcome {
        code: exit_code(status),
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn policy(mode: Mode) -> Policy {
        Policy {
            mode,
            net: false,
            writable: vec![PathBuf::from("/var")],
            hide: vec![],
            secret_env: vec![],
        }
    }

    fn layout() -> Layout {
        Layout {
            project: PathBuf::from("/srv/app"),
            source: PathBuf::from("/state/run/1"),
            cwd: PathBuf::from("/srv/app/src"),
        }
    }

    fn text(a: &[OsString]) -> String {
        a.iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn workspace_write_binds_the_mountpoint_over_the_project_last() {
        let a = text(&bwrap_args(&policy(Mode::WorkspaceWrite), &layout()).unwrap());
        assert!(a.contains("--cap-drop ALL"));
        assert!(a.contains("--unshare-net"));
        assert!(a.contains("--unshare-pid"));
        assert!(a.contains("--ro-bind / / --dev /dev --proc /proc --tmpfs /tmp"));
        let w = a.find("--bind /var /var").unwrap();
        let p = a.find("--bind /state/run/1 /srv/app").unwrap();
        assert!(w < p);
        assert!(a.ends_with("--chdir /srv/app/src"));
    }

    #[test]
    fn read_only_binds_the_project_read_only_and_nothing_writable() {
        let a = text(&bwrap_args(&policy(Mode::ReadOnly), &layout()).unwrap());
        assert!(a.contains("--ro-bind /state/run/1 /srv/app"));
        assert!(!a.contains("--bind /var"));
    }

    #[test]
    fn net_keeps_the_host_network() {
        let mut p = policy(Mode::WorkspaceWrite);
        p.net = true;
        assert!(!text(&bwrap_args(&p, &layout()).unwrap()).contains("--unshare-net"));
    }

    #[test]
    fn danger_full_access_has_no_bwrap_arguments() {
        assert!(bwrap_args(&policy(Mode::DangerFullAccess), &layout()).is_err());
    }

    #[test]
    fn hidden_directories_get_a_read_only_tmpfs_and_files_dev_null() {
        let mut p = policy(Mode::WorkspaceWrite);
        p.hide = vec![
            PathBuf::from("/etc"),
            PathBuf::from("/etc/hostname"),
            PathBuf::from("/nonexistent/opfs-test"),
        ];
        let a = text(&bwrap_args(&p, &layout()).unwrap());
        assert!(a.contains("--tmpfs /etc --remount-ro /etc"));
        assert!(a.contains("--ro-bind /dev/null /etc/hostname"));
        assert!(!a.contains("nonexistent"));
    }

    #[test]
    fn cwd_in_the_mountpoint_maps_to_the_project() {
        let p = Path::new("/nonexistent-p");
        let m = Path::new("/nonexistent-m");
        assert_eq!(map_cwd(&m.join("a/b"), p, m), p.join("a/b"));
        assert_eq!(map_cwd(&p.join("c"), p, m), p.join("c"));
        assert_eq!(map_cwd(Path::new("/elsewhere-x"), p, m), p);
    }

    #[test]
    fn modes_parse_by_name_only() {
        assert_eq!("read-only".parse::<Mode>().unwrap(), Mode::ReadOnly);
        assert!("danger".parse::<Mode>().is_err());
        assert!("full".parse::<Mode>().is_err());
    }
}
