//! Starting the daemon in the background: `opfs mount` re-executes itself
//! with `-f --json` in a new session, logging to the state dir's
//! `daemon.log`, and returns once the mount is visible and its control
//! socket answers: the daemon says so by printing its JSON line on its
//! stdout, a pipe the caller reads (no polling).

use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{logfile, DaemonOptions, MountError, MountPlan};
use crate::state;

/// The hidden `opfs mount` flag that makes the re-executed daemon leave the
/// caller's session first thing (see [`detach_session`]).
pub const SETSID_FLAG: &str = "--setsid";

/// How long a background start waits for the mount to become ready.
const READY_LIMIT: Duration = Duration::from_secs(30);

/// Why a background start failed. The daemon is not running after any of
/// these (one that did not become ready in time is killed).
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The mount request was refused.
    #[error(transparent)]
    Check(#[from] MountError),
    /// The state dir cannot be created.
    #[error("cannot create {path}: {source}")]
    StateDir {
        /// The state dir.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The daemon's log file cannot be opened.
    #[error("cannot open {path}: {source}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The running executable cannot be found to re-execute it.
    #[error("cannot find opfs itself: {0}")]
    Exe(io::Error),
    /// The daemon process cannot be started.
    #[error("cannot start the daemon: {0}")]
    Start(io::Error),
    /// The daemon exited before the mount was ready.
    #[error("the daemon exited ({status}) before the mount was ready:\n{log_tail}")]
    Exited {
        /// Its exit status.
        status: ExitStatus,
        /// What it wrote to its log during this start.
        log_tail: String,
    },
    /// The mount did not become ready within 30 s; the daemon was killed.
    #[error("the mount at {mountpoint} did not become ready within 30 s (log: {log})")]
    NotReady {
        /// The mountpoint.
        mountpoint: PathBuf,
        /// The daemon's log file.
        log: PathBuf,
    },
}

/// Leaves the caller's session and process group, so the terminal's
/// signals and hang-up no longer reach the daemon. Called first thing by a
/// daemon started with [`SETSID_FLAG`].
///
/// Errors: this process already leads a process group.
pub fn detach_session() -> io::Result<()> {
    rustix::process::setsid()?;
    Ok(())
}

/// Checks the request ([`super::check`]) and starts the daemon serving
/// `project` at `mountpoint` in the background with `opts`, passing
/// `verbose` `-v` flags on; returns its pid once the mount is ready.
///
/// Errors: see [`SpawnError`].
pub fn start(
    home: &Path,
    project: &Path,
    mountpoint: &Path,
    opts: &DaemonOptions,
    verbose: u8,
) -> Result<(MountPlan, u32), SpawnError> {
    let plan = super::check(home, project, mountpoint)?;
    let pid = spawn(home, &plan, opts, verbose)?;
    Ok((plan, pid))
}

/// Starts the daemon for the checked `plan` in the background and waits
/// until it is ready; returns its pid.
///
/// Errors: see [`SpawnError`].
pub fn spawn(
    home: &Path,
    plan: &MountPlan,
    opts: &DaemonOptions,
    verbose: u8,
) -> Result<u32, SpawnError> {
    plan.state.create().map_err(|source| SpawnError::StateDir {
        path: plan.state.dir.clone(),
        source,
    })?;
    let log_path = plan.state.log_path();
    if let Err(e) = logfile::rotate_if_over(&log_path, logfile::LOG_CAP, logfile::LOG_KEEP) {
        log::warn!("cannot rotate {}: {e}", log_path.display());
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|source| SpawnError::Log {
            path: log_path.clone(),
            source,
        })?;
    let log_len = log.metadata().map(|m| m.len()).unwrap_or(0);
    let exe = std::env::current_exe().map_err(SpawnError::Exe)?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg("-f")
        .arg("--json")
        .arg(SETSID_FLAG)
        .arg(&plan.state.project)
        .arg(&plan.mountpoint)
        .arg("--threads")
        .arg(opts.threads.to_string())
        .arg("--range-min")
        .arg(match opts.range_min {
            u64::MAX => "off".to_string(),
            n => n.to_string(),
        })
        .env("OPFS_HOME", state::absolute(home))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log);
    if opts.sync {
        cmd.arg("--sync");
    }
    if !opts.export {
        cmd.arg("--no-export");
    }
    if let Some(w) = &opts.worktree {
        cmd.arg("--worktree-of")
            .arg(&w.project)
            .arg("--worktree")
            .arg(&w.name);
    }
    for _ in 0..verbose {
        cmd.arg("-v");
    }
    let mut child = cmd.spawn().map_err(SpawnError::Start)?;
    match wait_ready(&mut child) {
        Ready::Yes => Ok(child.id()),
        Ready::Exited(status) => Err(SpawnError::Exited {
            status,
            log_tail: log_tail(&log_path, log_len),
        }),
        Ready::TimedOut => {
            let _ = child.kill();
            let _ = child.wait();
            Err(SpawnError::NotReady {
                mountpoint: plan.mountpoint.clone(),
                log: log_path,
            })
        }
    }
}

/// How a background start ended.
enum Ready {
    /// The daemon announced the mount ready.
    Yes,
    /// It exited first.
    Exited(ExitStatus),
    /// Neither within [`READY_LIMIT`].
    TimedOut,
}

/// Waits until the daemon `child` (started with `-f --json`, its stdout a
/// pipe) prints the JSON line of a ready mount naming its own pid, which
/// `daemon::run` does once the mount is visible and the control socket
/// answers. The line is read on a thread of its own, so that the wait can
/// also notice the daemon exiting (a mount helper it started may hold
/// the pipe open) and give up after [`READY_LIMIT`].
fn wait_ready(child: &mut Child) -> Ready {
    let (tx, rx) = crossbeam_channel::bounded(1);
    if let Some(stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
    }
    let pid = child.id();
    let announced = |line: &str| {
        serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("pid")?.as_u64())
            == Some(u64::from(pid))
    };
    let start = Instant::now();
    let mut line_seen = false;
    while start.elapsed() < READY_LIMIT {
        if let Ok(Some(status)) = child.try_wait() {
            return Ready::Exited(status);
        }
        if line_seen {
            // Its stdout ended without the line: it is exiting.
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) if announced(&line) => return Ready::Yes,
            Ok(_) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => line_seen = true,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
        }
    }
    Ready::TimedOut
}

/// What the log at `path` gained after its first `from` bytes, trimmed.
fn log_tail(path: &Path, from: u64) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let start = usize::try_from(from).unwrap_or(usize::MAX).min(text.len());
    String::from_utf8_lossy(&text[start..])
        .trim_end()
        .to_string()
}
