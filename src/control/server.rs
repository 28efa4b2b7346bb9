//! The daemon's side of the control socket: answers each [`Request`] on
//! the journal and the mount it serves.

use std::io::{self, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::protocol::{self, FailureKind, Request, Response, Status};
use crate::capture::{Exclusive, Journal, NewTurn};
use crate::record::TurnKind;
use crate::rewind::{self, RewindError, RewindReport};
use crate::worktree::merge::{self, MergeError, MergeOptions, MergeReport};

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
        mutations_refused: journal
            .refusals()
            .map(|r| super::protocol::MutationsRefused {
                count: r.count,
                since_ms: r.since_ms,
                errno: match r.errno {
                    libc::ENOSPC => "ENOSPC".into(),
                    libc::EIO => "EIO".into(),
                    n => n.to_string(),
                },
            }),
    }
}

/// What the control server needs from the mount.
pub trait MountOps: Send + Sync + 'static {
    /// Makes the kernel write back the mount's dirty pages (shared mmap
    /// stores) and waits until they are served; called before
    /// [`MountOps::quiesce`], without the guard. Costs O(files with dirty
    /// pages).
    fn write_back(&self) {}
    /// Blocks new mutations and waits for in-flight ones; released when
    /// the [`Exclusive`] drops.
    fn quiesce(&self) -> Exclusive<'static>;
    /// Drops the kernel's caches for these paths (called without the guard).
    fn invalidate(&self, paths: &[Vec<u8>]);
    /// Unmounts, which ends the daemon.
    fn unmount(&self) -> io::Result<()>;
    /// Called after a request closed one or more turns (a new turn, a
    /// rewind); must return at once (the background export hangs here).
    fn turns_closed(&self) {}
}

/// Runs a rewind (of the paths within `only` alone, when given: `opfs
/// restore`) with the mount quiesced (the [`Exclusive`] it needs) and
/// invalidates the kernel's caches for every path it wrote.
pub fn rewind_mounted(
    journal: &Journal,
    mount: &dyn MountOps,
    to: u64,
    only: Option<&[Vec<u8>]>,
    opts: rewind::RewindOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RewindReport, RewindError> {
    // A dirty mmap page written back after the restore would clobber the
    // restored bytes: write it back first, so it is captured in the turn
    // being closed.
    mount.write_back();
    let excl = mount.quiesce();
    let report = match only {
        None => rewind::rewind_with_progress(journal, &excl, to, opts, progress),
        Some(only) => rewind::restore_paths(journal, &excl, to, only, opts, progress),
    };
    drop(excl);
    match &report {
        Ok(r) => invalidate_with_parents(mount, &r.touched),
        // Written, then (partly) put back: every path may differ from
        // what the kernel cached.
        Err(e) => invalidate_with_parents(mount, e.touched()),
    }
    report
}

/// Runs a worktree merge with the mount quiesced (dirty mmap pages
/// written back first, as for a rewind) and invalidates the kernel's caches
/// for every path it wrote.
pub fn merge_mounted(
    journal: &Journal,
    mount: &dyn MountOps,
    worktree: &str,
    opts: MergeOptions,
) -> Result<MergeReport, MergeError> {
    mount.write_back();
    let excl = mount.quiesce();
    let report = merge::merge(journal, &excl, worktree, opts);
    drop(excl);
    if let Ok(r) = &report {
        invalidate_with_parents(mount, &r.touched);
    }
    report
}

fn invalidate_with_parents(m: &dyn MountOps, touched: &[Vec<u8>]) {
    let mut paths = touched.to_vec();
    for p in touched {
        if let Some((parent, _)) = crate::paths::split(p) {
            paths.push(parent.to_vec());
        }
    }
    paths.sort();
    paths.dedup();
    m.invalidate(&paths);
}

/// Handles one request. `progress(done, total)` is called while a rewind
/// restores (on this thread, under the mount's quiesce guard: it must
/// never block).
pub fn handle(
    journal: &Journal,
    mount: &dyn MountOps,
    mountpoint: &Path,
    recovered: &Option<String>,
    req: Request,
    progress: &mut dyn FnMut(u64, u64),
) -> Response {
    match req {
        // Answered in `serve_one`, which knows the caller.
        Request::TrustView { .. } => Response::Error {
            kind: FailureKind::Usage,
            message: "a view can be trusted only over the control socket".into(),
        },
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
        Request::Turn {
            label,
            id,
            closing_label,
        } => {
            // Every store made before this request belongs to the turn it
            // closes, mmap stores still in the page cache too.
            mount.write_back();
            let excl = mount.quiesce();
            let r = journal.next_turn(
                &excl,
                NewTurn {
                    kind: TurnKind::Agent,
                    label: label.as_deref(),
                    external_id: id.as_deref(),
                    rewound_to: None,
                    closing_label: closing_label.as_deref(),
                },
            );
            drop(excl);
            if r.is_ok() {
                mount.turns_closed();
            }
            match r {
                // What the hook tells the agent after every prompt: read
                // here on the daemon's open index, so the hook process
                // need not open it (a failure to read leaves the client
                // to look itself).
                Ok(turn) => match journal.with_index(|ix| ix.stopped_restore()) {
                    Ok(stopped) => Response::Turn {
                        turn,
                        checked_rewind: true,
                        stopped_rewind: stopped.map(|s| s.to_string()),
                    },
                    Err(_) => Response::Turn {
                        turn,
                        checked_rewind: false,
                        stopped_rewind: None,
                    },
                },
                Err(e) => Response::Error {
                    kind: FailureKind::Failure,
                    message: e.to_string(),
                },
            }
        }
        Request::SandboxTurn {
            label,
            id,
            placeholder,
        } => {
            // As for a turn from outside: every store before it belongs
            // to the turn it closes. No wake-up of retention or export: a
            // request from inside never starts a gc (docs/sandbox.md).
            mount.write_back();
            let excl = mount.quiesce();
            let r = journal.sandbox_turn(&excl, label.as_deref(), id.as_deref(), placeholder);
            drop(excl);
            match r {
                Ok((turn, _)) => Response::Turn {
                    turn,
                    checked_rewind: false,
                    stopped_rewind: None,
                },
                Err(e) => Response::Error {
                    kind: FailureKind::Failure,
                    message: e.to_string(),
                },
            }
        }
        Request::Rewind {
            to,
            dry_run,
            force,
            pending,
            partial,
            markers,
            paths,
            ..
        } => {
            let only: Option<Vec<Vec<u8>>> =
                paths.map(|ps| ps.iter().map(|p| crate::paths::parse_display(p)).collect());
            let opts = rewind::RewindOptions {
                dry_run,
                force,
                pending,
                partial,
                markers,
            };
            let result = rewind_mounted(journal, mount, to, only.as_deref(), opts, progress);
            // A failed rewind may have closed turns too (its own, rolled back).
            if !dry_run {
                mount.turns_closed();
            }
            match result {
                Ok(report) => Response::Rewind(report),
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
        Request::Merge {
            worktree,
            dry_run,
            force,
            partial,
            markers,
            include_ignored,
        } => {
            let result = merge_mounted(
                journal,
                mount,
                &worktree,
                MergeOptions {
                    dry_run,
                    force,
                    partial,
                    markers,
                    include_ignored,
                },
            );
            if result.is_ok() && !dry_run {
                mount.turns_closed();
            }
            match result {
                Ok(report) => Response::Merge(report),
                Err(e) => Response::Error {
                    kind: if e.is_usage() {
                        FailureKind::Usage
                    } else {
                        FailureKind::Failure
                    },
                    message: e.to_string(),
                },
            }
        }
        Request::Gc {
            keep,
            max_bytes,
            min_age_days,
        } => {
            let retention = crate::gc::Retention {
                keep,
                max_bytes,
                min_age_days,
            };
            match crate::gc::gc_served(journal, &|| mount.quiesce(), retention) {
                Ok(report) => Response::Gc(report),
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
    if let Some(why) = peer_elsewhere(&writer) {
        // Answered, not just closed, so the caller says why.
        log::warn!("control connection refused: {why}");
        let refusal = Response::Error {
            kind: FailureKind::Failure,
            message: format!(
                "refused by the daemon of {}: {why}; no control socket is usable from inside a \
                 sandbox or view (`opfs run`, `opfs shell`): run this command outside it",
                journal.project().display()
            ),
        };
        while protocol::read_line(&mut reader, &mut line)? {
            protocol::write_message(&mut writer, &refusal)?;
        }
        return Ok(());
    }
    while protocol::read_line(&mut reader, &mut line)? {
        let resp = match serde_json::from_str::<Request>(&line) {
            Ok(req) if client_gone(&writer) => {
                // The client stopped waiting (the daemon was stopped or
                // busy past the client's bound): carrying the request out
                // now would surprise whoever gave up on it (an unmount, a
                // turn, a rewind long after it was asked for).
                log::warn!("control request dropped, its client stopped waiting: {req:?}");
                continue;
            }
            Ok(Request::TrustView { pid }) => trust_view(pid, &writer),
            Ok(req) => {
                log::info!("control request: {req:?}");
                if matches!(req, Request::Rewind { progress: true, .. }) {
                    handle_with_progress_lines(&writer, journal, mount, mountpoint, recovered, req)?
                } else {
                    handle(journal, mount, mountpoint, recovered, req, &mut |_, _| {})
                }
            }
            Err(e) => Response::Error {
                kind: FailureKind::Usage,
                message: format!("malformed request: {e}"),
            },
        };
        protocol::write_message(&mut writer, &resp)?;
    }
    Ok(())
}

/// True when the peer of `conn` has closed its end: a read would find
/// end of file at once. Our clients never close their end before reading
/// the answer, so this means the client gave up waiting.
fn client_gone(conn: &UnixStream) -> bool {
    use rustix::net::RecvFlags;
    let mut byte = [0u8; 1];
    matches!(
        rustix::net::recv(conn, &mut byte, RecvFlags::PEEK | RecvFlags::DONTWAIT),
        Ok((0, _))
    )
}

/// The shortest time between two progress lines.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// [`handle`] for a request that asked for progress: the handling thread
/// only stores the newest `(done, total)` (a mutex held for a copy, never
/// across I/O), and a thread of its own writes it to `conn` as a
/// [`Response::Progress`] line every [`PROGRESS_EVERY`] when it changed,
/// and once more when the request is done, so the last line says where the
/// work ended. A client that stops reading blocks that thread only, never
/// the mount's quiesce guard. The answer is written by the caller after
/// that thread is done, so lines never interleave.
///
/// Errors: the connection cannot be cloned for the progress thread.
fn handle_with_progress_lines(
    conn: &UnixStream,
    journal: &Journal,
    mount: &dyn MountOps,
    mountpoint: &Path,
    recovered: &Option<String>,
    req: Request,
) -> io::Result<Response> {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    use std::sync::Mutex;
    let mut out = conn.try_clone()?;
    let latest: Arc<Mutex<Option<(u64, u64)>>> = Arc::default();
    // Never sent on: dropping it tells the writer the request is done.
    let (done_tx, done_rx) = channel::<()>();
    let seen = latest.clone();
    let writer = std::thread::spawn(move || {
        let mut sent = None;
        loop {
            let finished = !matches!(
                done_rx.recv_timeout(PROGRESS_EVERY),
                Err(RecvTimeoutError::Timeout)
            );
            let now = *seen.lock().unwrap_or_else(|p| p.into_inner());
            if let (Some((done, total)), true) = (now, now != sent) {
                if protocol::write_message(&mut out, &Response::Progress { done, total }).is_err() {
                    break;
                }
                sent = now;
            }
            if finished {
                break;
            }
        }
    });
    let resp = handle(
        journal,
        mount,
        mountpoint,
        recovered,
        req,
        &mut |done, total| {
            *latest.lock().unwrap_or_else(|p| p.into_inner()) = Some((done, total));
        },
    );
    drop(done_tx);
    let _ = writer.join();
    Ok(resp)
}

/// Why the process at the other end of `conn` may not use the control
/// socket, or `None` when it may: it must live in the daemon's own mount
/// and user namespaces. A sandbox (`opfs run`'s bwrap, a container) has a
/// mount namespace of its own, so no project's daemon answers a process
/// inside one, whatever the socket's path or `OPFS_HOME` (guarantee 8;
/// `docs/sandbox.md` "No control socket inside"). A peer whose pid this
/// daemon cannot see (0: another pid namespace not below ours) or whose
/// namespaces cannot be read (it is gone) is refused too.
/// A view whose callers this daemon serves although they run in other
/// namespaces (`Request::TrustView`): its mount and user namespaces, and
/// the process that asked for it (pid and start time, so a reused pid
/// does not keep it), while that process lives.
struct TrustedView {
    mnt: PathBuf,
    user: PathBuf,
    holder: i32,
    holder_start: Option<u64>,
}

/// The views of this daemon (one daemon per process).
static TRUSTED_VIEWS: std::sync::Mutex<Vec<TrustedView>> = std::sync::Mutex::new(Vec::new());

fn namespace(pid: i32, ns: &str) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/{ns}"))
}

/// The start time of `pid` (field 22 of `/proc/PID/stat`), if it lives.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Trusts the namespaces of `pid` while the peer of `conn` (the `opfs
/// shell` that made the view, in this daemon's namespaces: others never
/// get here) lives.
fn trust_view(pid: i32, conn: &UnixStream) -> Response {
    let holder = match rustix::net::sockopt::socket_peercred(conn) {
        Ok(c) => c.pid.as_raw_nonzero().get(),
        Err(e) => {
            return Response::Error {
                kind: FailureKind::Failure,
                message: format!(
                    "the caller's credentials cannot be read ({})",
                    io::Error::from(e)
                ),
            }
        }
    };
    let (mnt, user) = match (namespace(pid, "mnt"), namespace(pid, "user")) {
        (Ok(m), Ok(u)) => (m, u),
        (Err(e), _) | (_, Err(e)) => {
            return Response::Error {
                kind: FailureKind::Failure,
                message: format!("the namespaces of process {pid} cannot be read: {e}"),
            }
        }
    };
    log::info!("serving the view of pid {pid} ({mnt:?}, {user:?}) while pid {holder} lives");
    let mut views = TRUSTED_VIEWS.lock().unwrap_or_else(|e| e.into_inner());
    views.retain(|v| start_time(v.holder) == v.holder_start);
    views.push(TrustedView {
        mnt,
        user,
        holder,
        holder_start: start_time(holder),
    });
    Response::Trusted
}

/// Whether `pid` runs in a view this daemon trusts whose holder lives.
fn in_trusted_view(pid: i32) -> bool {
    let (Ok(mnt), Ok(user)) = (namespace(pid, "mnt"), namespace(pid, "user")) else {
        return false;
    };
    let mut views = TRUSTED_VIEWS.lock().unwrap_or_else(|e| e.into_inner());
    views.retain(|v| v.holder_start.is_some() && start_time(v.holder) == v.holder_start);
    views.iter().any(|v| v.mnt == mnt && v.user == user)
}

fn peer_elsewhere(conn: &UnixStream) -> Option<String> {
    let cred = match rustix::net::sockopt::socket_peercred(conn) {
        Ok(c) => c,
        Err(e) => {
            return Some(format!(
                "the caller's credentials cannot be read ({})",
                io::Error::from(e)
            ))
        }
    };
    // A peer this pid namespace cannot see would read as pid 0, for which
    // `/proc/0/ns` does not exist: refused below.
    let pid = cred.pid.as_raw_nonzero().get();
    for ns in ["mnt", "user"] {
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}"));
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}"));
        match (ours, theirs) {
            (Ok(a), Ok(b)) if a == b => {}
            (Ok(_), Ok(_)) if in_trusted_view(pid) => return None,
            (Ok(_), Ok(_)) => {
                let what = if ns == "mnt" { "mount" } else { "user" };
                return Some(format!(
                    "the caller (pid {pid}) runs in another {what} namespace than this daemon"
                ));
            }
            (Err(e), _) | (_, Err(e)) => {
                return Some(format!(
                    "the namespaces of the caller (pid {pid}) cannot be compared: {e}"
                ))
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_in_the_daemons_own_namespaces_is_served() {
        let (a, _b) = UnixStream::pair().expect("pair");
        assert_eq!(peer_elsewhere(&a), None);
    }
}
