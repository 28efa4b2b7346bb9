//! The daemon and its control socket.
//!
//! One daemon serves one project at one mountpoint. It holds an exclusive
//! `flock` on the state dir's `lock` file for its whole life (so a second
//! mount of the same project, or a direct CLI operation on the state dir,
//! is refused while it runs), and answers requests on `control.sock`: one
//! JSON object per line in each direction.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::journal::Journal;
use crate::rewind::{self, RewindError, RewindReport};
use crate::state::{self, StateDir};
use crate::store::TurnKind;

/// A request to the daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Report mount state.
    Status,
    /// Close the open turn and open the next.
    Turn {
        /// Label of the new turn.
        label: Option<String>,
        /// External id of the new turn.
        id: Option<String>,
    },
    /// Rewind to the start of a turn.
    Rewind {
        /// The turn.
        to: u64,
        /// Plan only.
        dry_run: bool,
        /// Restore paths changed behind the mount's back too.
        #[serde(default)]
        force: bool,
    },
    /// Unmount and exit.
    Unmount,
    /// Commit the capture records pending in the capture log to the index,
    /// so a reader in another process (history, export) sees every capture
    /// made so far. Answered with [`Response::Committed`].
    Commit,
}

/// How a failed request failed.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The request was wrong (bad turn number...): exit code 2.
    Usage,
    /// The operation failed: exit code 1.
    Failure,
}

/// The daemon's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    /// Status.
    Status(Status),
    /// A new turn was opened.
    Turn {
        /// Its number.
        turn: u64,
    },
    /// A rewind ran (or was planned).
    Rewind(serde_json::Value),
    /// The daemon is unmounting.
    Unmounting,
    /// The pending capture records are in the index.
    Committed,
    /// The request failed.
    Error {
        /// Usage or failure.
        kind: FailureKind,
        /// What went wrong, naming the path or turn.
        message: String,
    },
}

/// What `opfs status` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// True while a daemon serves the project.
    pub mounted: bool,
    /// The mountpoint, if mounted.
    pub mountpoint: Option<PathBuf>,
    /// The project directory.
    pub project: PathBuf,
    /// The state dir.
    pub state_dir: PathBuf,
    /// The open turn.
    pub turn: u64,
    /// Bytes of blobs referenced by the index.
    pub store_bytes: u64,
    /// Number of pre-image records.
    pub records: u64,
    /// The daemon's pid, if mounted.
    pub pid: Option<u32>,
    /// What the daemon recovered at start (an interrupted rewind), if anything.
    pub recovered: Option<String>,
    /// True when the project directory was deleted while mounted: every
    /// mutation through the mount fails (`ENOENT`) and rewinds are refused.
    #[serde(default)]
    pub project_deleted: bool,
}

/// Builds the status of `journal`.
pub fn status_of(
    journal: &Journal,
    mountpoint: Option<&Path>,
    recovered: Option<String>,
) -> Status {
    let (records, store_bytes) = journal.with_index(|ix| ix.totals()).unwrap_or((0, 0));
    Status {
        mounted: mountpoint.is_some(),
        mountpoint: mountpoint.map(Path::to_path_buf),
        project: journal.project().to_path_buf(),
        state_dir: journal.state().dir.clone(),
        turn: journal.open_turn(),
        store_bytes,
        records,
        pid: mountpoint.map(|_| std::process::id()),
        recovered,
        project_deleted: journal.backing().is_deleted(),
    }
}

/// What the control server needs from the mount.
pub trait MountOps: Send + Sync + 'static {
    /// Blocks new mutations and waits for in-flight ones; released on drop.
    fn quiesce(&self) -> Box<dyn std::any::Any>;
    /// Drops the kernel's caches for these paths (called without the guard).
    fn invalidate(&self, paths: &[Vec<u8>]);
    /// Unmounts, which ends the daemon.
    fn unmount(&self) -> io::Result<()>;
    /// Called after a request closed one or more turns (a new turn, a
    /// rewind); must return at once (the background export hangs here).
    fn turns_closed(&self) {}
}

/// Runs a rewind with the mount quiesced and invalidates the kernel's caches
/// for every path it wrote.
pub fn rewind_mounted(
    journal: &Journal,
    mount: Option<&dyn MountOps>,
    to: u64,
    dry_run: bool,
    force: bool,
) -> Result<RewindReport, RewindError> {
    let guard = mount.map(|m| m.quiesce());
    let report = rewind::rewind(journal, to, rewind::RewindOptions { dry_run, force });
    drop(guard);
    if let (Some(m), Ok(r)) = (mount, &report) {
        let mut paths = r.touched.clone();
        for p in &r.touched {
            if let Some((parent, _)) = crate::paths::split(p) {
                paths.push(parent.to_vec());
            }
        }
        paths.sort();
        paths.dedup();
        m.invalidate(&paths);
    }
    report
}

/// Handles one request.
pub fn handle(
    journal: &Journal,
    mount: &dyn MountOps,
    mountpoint: &Path,
    recovered: &Option<String>,
    req: Request,
) -> Response {
    match req {
        Request::Commit => match journal.apply_pending() {
            Ok(()) => Response::Committed,
            Err(e) => Response::Error {
                kind: FailureKind::Failure,
                message: e.to_string(),
            },
        },
        Request::Status => {
            Response::Status(status_of(journal, Some(mountpoint), recovered.clone()))
        }
        Request::Turn { label, id } => {
            let guard = mount.quiesce();
            let r = journal.next_turn(TurnKind::Agent, label.as_deref(), id.as_deref(), None);
            drop(guard);
            if r.is_ok() {
                mount.turns_closed();
            }
            match r {
                Ok(turn) => Response::Turn { turn },
                Err(e) => Response::Error {
                    kind: FailureKind::Failure,
                    message: e.to_string(),
                },
            }
        }
        Request::Rewind { to, dry_run, force } => {
            let result = rewind_mounted(journal, Some(mount), to, dry_run, force);
            if result.is_ok() && !dry_run {
                mount.turns_closed();
            }
            match result {
                Ok(report) => match serde_json::to_value(&report) {
                    Ok(v) => Response::Rewind(v),
                    Err(e) => Response::Error {
                        kind: FailureKind::Failure,
                        message: e.to_string(),
                    },
                },
                Err(e @ RewindError::Turn(_)) => Response::Error {
                    kind: FailureKind::Usage,
                    message: e.to_string(),
                },
                Err(e) => Response::Error {
                    kind: FailureKind::Failure,
                    message: e.to_string(),
                },
            }
        }
        Request::Unmount => match mount.unmount() {
            Ok(()) => Response::Unmounting,
            Err(e) => Response::Error {
                kind: FailureKind::Failure,
                message: format!("cannot unmount {}: {e}", mountpoint.display()),
            },
        },
    }
}

/// Binds the control socket (replacing a stale one) with mode 0600.
pub fn bind(socket: &Path) -> io::Result<UnixListener> {
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(socket)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves requests on `listener` until the process ends, one thread per
/// connection.
pub fn serve(
    listener: UnixListener,
    journal: Arc<Journal>,
    mount: Arc<dyn MountOps>,
    mountpoint: PathBuf,
    recovered: Option<String>,
) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let journal = journal.clone();
        let mount = mount.clone();
        let mountpoint = mountpoint.clone();
        let recovered = recovered.clone();
        std::thread::spawn(move || {
            if let Err(e) = serve_one(conn, &journal, mount.as_ref(), &mountpoint, &recovered) {
                log::warn!("control connection: {e}");
            }
        });
    }
}

fn serve_one(
    conn: UnixStream,
    journal: &Journal,
    mount: &dyn MountOps,
    mountpoint: &Path,
    recovered: &Option<String>,
) -> io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut writer = conn;
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 {
        let resp = match serde_json::from_str::<Request>(&line) {
            Ok(req) => {
                log::info!("control request: {req:?}");
                handle(journal, mount, mountpoint, recovered, req)
            }
            Err(e) => Response::Error {
                kind: FailureKind::Usage,
                message: format!("malformed request: {e}"),
            },
        };
        let mut out = serde_json::to_vec(&resp).map_err(io::Error::other)?;
        out.push(b'\n');
        writer.write_all(&out)?;
        line.clear();
    }
    Ok(())
}

/// Sends one request to the daemon whose socket is `socket` and waits for
/// the answer. Errors: the socket is missing or refuses (no daemon), or the
/// daemon closed the connection without answering.
pub fn request(socket: &Path, req: &Request) -> io::Result<Response> {
    let mut conn = UnixStream::connect(socket)?;
    let mut out = serde_json::to_vec(req).map_err(io::Error::other)?;
    out.push(b'\n');
    conn.write_all(&out)?;
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the daemon closed the connection without answering",
        ));
    }
    serde_json::from_str(&line).map_err(io::Error::other)
}

/// An exclusive lock on a state dir, held by the daemon for its life or by a
/// CLI command that works on the state dir directly.
#[derive(Debug)]
pub struct StateLock {
    _file: std::fs::File,
}

impl StateLock {
    /// Takes the lock without waiting. `Ok(None)` when someone else holds it
    /// (a daemon is running).
    pub fn try_acquire(state: &StateDir) -> io::Result<Option<StateLock>> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(state.lock_path())?;
        // SAFETY: valid fd.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Ok(None);
            }
            return Err(e);
        }
        Ok(Some(StateLock { _file: file }))
    }

    /// True when some process holds the lock.
    pub fn is_held(state: &StateDir) -> bool {
        if !state.lock_path().exists() {
            return false;
        }
        matches!(StateLock::try_acquire(state), Ok(None))
    }
}

/// True when `path` is a mount point (listed in `/proc/self/mountinfo`).
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .map(unescape_mountinfo)
            .is_some_and(|m| m == want)
    })
}

/// The mountpoints of every opfs mount on this machine (in
/// `/proc/self/mountinfo`: type `fuse.opfs`, or a FUSE mount whose source is
/// `opfs:<project>`, the name the daemon gives its mounts).
pub fn opfs_mountpoints() -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut fields = right.split(' ');
            let (fstype, source) = (fields.next()?, fields.next()?);
            if fstype != "fuse.opfs" && !(fstype.starts_with("fuse") && source.starts_with("opfs:"))
            {
                return None;
            }
            Some(PathBuf::from(unescape_mountinfo(left.split(' ').nth(4)?)))
        })
        .collect()
}

fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            out.push(v as u8);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Waits until `cond` holds, checking every 20 ms, for at most `limit`.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Registers `mountpoint` as serving `state`'s project (for `-C`).
pub fn register_mount(home: &Path, state: &StateDir, mountpoint: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let entry = state::mount_entry(home, mountpoint);
    if let Some(parent) = entry.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&entry, state.project.as_os_str().as_bytes())?;
    std::fs::write(state.mount_record(), mountpoint.as_os_str().as_bytes())
}

/// Removes the registration made by [`register_mount`].
pub fn unregister_mount(home: &Path, state: &StateDir, mountpoint: &Path) {
    let _ = std::fs::remove_file(state::mount_entry(home, mountpoint));
    let _ = std::fs::remove_file(state.mount_record());
    let _ = std::fs::remove_file(state.socket_path());
}

/// The mountpoint recorded for `state`, if any.
pub fn recorded_mountpoint(state: &StateDir) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    std::fs::read(state.mount_record())
        .ok()
        .map(|b| PathBuf::from(std::ffi::OsStr::from_bytes(&b)))
}
