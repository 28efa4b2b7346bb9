//! The control socket from the client's side: one request and its answer
//! ([`request`], [`exchange`]), how long each request may take
//! ([`answer_limit`]), and what to say of a daemon that does not answer
//! ([`Unanswered`], [`unresponsive_message`]).

use std::io::{self, BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::control::protocol::{self, Request, Response};
use crate::state::holder::{self, ProcState};
use crate::store::StateDir;

pub(super) fn is_cut_off(e: &io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset, UnexpectedEof};
    matches!(e.kind(), UnexpectedEof | ConnectionReset | BrokenPipe)
}

/// How long a client waits for the daemon's answer to `req` (between two
/// lines, for a request that gets progress lines), unless the daemon is
/// found frozen first (stopped, traced or exited: checked about four
/// times a second while waiting, and before connecting):
///
/// - status: 10 s (a daemon answers it from memory and one index read);
/// - commit of pending captures: 30 s (one group commit);
/// - turn: 60 s (it writes back dirty mmap pages and waits for the
///   mutations in flight; the agent hook waits 5 s, [`HOOK_LIMIT`]);
/// - unmount: 30 s for the answer (then the caller waits for the daemon
///   to exit, with a bound of its own);
/// - rewind, merge, gc: 30 min without a line (each progress line of a
///   rewind starts the wait again).
pub fn answer_limit(req: &Request) -> Duration {
    match req {
        Request::Status => Duration::from_secs(10),
        Request::Commit | Request::Unmount | Request::TrustView { .. } => Duration::from_secs(30),
        Request::Turn { .. } | Request::SandboxTurn { .. } => Duration::from_secs(60),
        Request::Rewind { .. } | Request::Merge { .. } | Request::Gc { .. } => {
            Duration::from_secs(30 * 60)
        }
    }
}

/// How long the agent hook (`opfs hook`) waits for a turn: short, so a
/// hung daemon never hangs the agent; the hook then tells the agent that
/// work may not be recorded.
pub const HOOK_LIMIT: Duration = Duration::from_secs(5);

/// How long a client waits to connect to the control socket (a stopped
/// daemon's listen queue fills, then `connect` blocks).
const CONNECT_LIMIT: Duration = Duration::from_secs(5);

/// How often a waiting client checks whether the daemon froze.
const FROZEN_CHECK_EVERY: Duration = Duration::from_millis(250);

/// A daemon that did not answer: who holds the state lock and what the
/// kernel says it is doing.
#[derive(Debug, Clone)]
pub struct Unanswered {
    /// The lock holder's pid, when `/proc/locks` names one.
    pub pid: Option<u32>,
    /// Its state when last checked (`None`: gone, or no pid).
    pub state: Option<ProcState>,
    /// How long the client waited (0 when the daemon was frozen before
    /// the request was sent).
    pub waited: Duration,
    /// The bound it waited for.
    pub limit: Duration,
}

/// The message for a daemon that does not answer: who, what it is
/// doing, that nothing is recorded meanwhile, and what to do.
pub fn unresponsive_message(
    project: &Path,
    u: &Unanswered,
    mountpoint: Option<&Path>,
    log: &Path,
) -> String {
    let who = match u.pid {
        Some(pid) => format!("the daemon of {} (pid {pid})", project.display()),
        None => format!("the daemon of {}", project.display()),
    };
    let what = match u.state {
        Some(st) if st.is_frozen() => format!("does not answer: {st}"),
        Some(st) => format!(
            "did not answer within {} s: it is {st}, busy or hung (see {}); what was asked \
             may still happen when it gets to it",
            u.limit.as_secs(),
            log.display()
        ),
        None => format!(
            "did not answer within {} s; what was asked may still happen when it gets to it",
            u.limit.as_secs()
        ),
    };
    let mp = mountpoint.map_or_else(|| "MOUNTPOINT".to_string(), |m| m.display().to_string());
    let resume = match (u.pid, u.state) {
        (Some(pid), Some(ProcState::Stopped)) => {
            format!("`kill -CONT {pid}` resumes it, or ")
        }
        _ => String::new(),
    };
    format!(
        "{who} {what}; nothing in its mount is served or recorded meanwhile: {resume}\
         `opfs umount --force {mp}` ends it and unmounts (what it captured is kept and \
         replayed at the next mount)"
    )
}

/// Why [`request`] got no answer.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// Connecting, sending or reading failed: no daemon listens (the
    /// socket is missing or refuses), or it closed the connection
    /// without answering (`UnexpectedEof`).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The daemon is frozen, or did not answer within the bound.
    #[error("the daemon does not answer ({unanswered:?})", unanswered = .0)]
    Unanswered(Unanswered),
}

/// Sends one request to the daemon serving `state` and waits for the
/// answer, at most [`answer_limit`] of the request.
///
/// Errors: as [`exchange`].
pub fn request(state: &StateDir, req: &Request) -> Result<Response, AskError> {
    exchange(state, req, answer_limit(req), &mut |_, _| {})
}

/// Sends one request to the daemon serving `state` and waits for the
/// answer, passing each [`Response::Progress`] line that comes before it
/// to `progress(done, total)`. Waits at most `limit` for each line, and
/// not at all for a daemon found frozen (stopped, traced, exited: the
/// holder of the state lock, checked before connecting and about four
/// times a second while waiting). The request is never sent to a daemon
/// already frozen; one that freezes after it was sent may still carry it
/// out when it runs again, unless the client has gone by then (the
/// daemon drops requests whose client stopped waiting).
///
/// Errors: [`AskError::Io`] when no daemon listens, the connection ends
/// without an answer (`UnexpectedEof`) or the answer is not JSON;
/// [`AskError::Unanswered`] for a frozen daemon or one silent for `limit`.
pub fn exchange(
    state: &StateDir,
    req: &Request,
    limit: Duration,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Response, AskError> {
    let start = Instant::now();
    let frozen = |waited: Duration| -> Option<Unanswered> {
        let pid = holder::lock_holder(state)?;
        let st = holder::proc_state(pid)?;
        st.is_frozen().then_some(Unanswered {
            pid: Some(pid),
            state: Some(st),
            waited,
            limit,
        })
    };
    if let Some(u) = frozen(Duration::ZERO) {
        return Err(AskError::Unanswered(u));
    }
    let socket = state.socket_path();
    let mut conn = match connect_within(&socket, CONNECT_LIMIT.min(limit)) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::TimedOut => {
            return Err(AskError::Unanswered(unanswered_now(
                state,
                start.elapsed(),
                limit,
            )))
        }
        Err(e) => return Err(e.into()),
    };
    conn.set_write_timeout(Some(CONNECT_LIMIT))?;
    protocol::write_message(&mut conn, req)?;
    conn.set_read_timeout(Some(FROZEN_CHECK_EVERY))?;
    let mut reader = BufReader::new(conn);
    let mut line = Vec::new();
    let mut since = Instant::now();
    loop {
        match reader.read_until(b'\n', &mut line) {
            Ok(_) if line.ends_with(b"\n") => {
                match serde_json::from_slice(&line).map_err(io::Error::other)? {
                    Response::Progress { done, total } => progress(done, total),
                    answer => return Ok(answer),
                }
                line.clear();
                since = Instant::now();
            }
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the daemon closed the connection without answering",
                )
                .into())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                // What was read of a line so far stays in `line`.
                if let Some(u) = frozen(start.elapsed()) {
                    return Err(AskError::Unanswered(u));
                }
                if since.elapsed() >= limit {
                    return Err(AskError::Unanswered(unanswered_now(
                        state,
                        start.elapsed(),
                        limit,
                    )));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// What the lock holder of `state` is doing now.
fn unanswered_now(state: &StateDir, waited: Duration, limit: Duration) -> Unanswered {
    let pid = holder::lock_holder(state);
    Unanswered {
        pid,
        state: pid.and_then(holder::proc_state),
        waited,
        limit,
    }
}

/// Connects to `socket`, giving up after `limit` (`TimedOut`): `connect`
/// blocks once a daemon that stopped accepting has a full listen queue.
/// The wait is the socket's own: a stream `connect` waits for room in the
/// queue at most the socket's send timeout, then fails with `EAGAIN`
/// (`unix(7)`), so no thread is started and nothing is left connecting
/// after a timeout.
fn connect_within(socket: &Path, limit: Duration) -> io::Result<UnixStream> {
    use rustix::io::Errno;
    use rustix::net::{self, sockopt, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let timed_out = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connecting to {} timed out", socket.display()),
        )
    };
    let fd = net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let addr = SocketAddrUnix::new(socket)?;
    let start = Instant::now();
    loop {
        // A zero timeout would be none at all.
        let left = limit
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(1));
        sockopt::set_socket_timeout(&fd, sockopt::Timeout::Send, Some(left))?;
        match net::connect(&fd, &addr) {
            Ok(()) => break,
            Err(Errno::AGAIN) => return Err(timed_out()),
            // A signal: the connection was not made; again, in what is left.
            Err(Errno::INTR) if start.elapsed() < limit => {}
            Err(Errno::INTR) => return Err(timed_out()),
            Err(e) => return Err(e.into()),
        }
    }
    sockopt::set_socket_timeout(&fd, sockopt::Timeout::Send, None)?;
    Ok(UnixStream::from(fd))
}

/// Waits until `cond` holds, checking every 20 ms, for at most `limit`;
/// returns whether it held.
pub fn wait_for(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    wait_for_every(limit, Duration::from_millis(20), cond)
}

/// [`wait_for`], checking every `interval`.
pub fn wait_for_every(limit: Duration, interval: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(interval);
    }
    cond()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The names of this process's threads.
    fn thread_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|n| n.trim_end().to_string())
            .collect()
    }

    /// A daemon that stopped accepting, its listen queue full: the connect
    /// gives up after the bound, and leaves nothing behind still trying.
    #[test]
    fn a_connect_to_a_full_queue_times_out_and_leaves_no_thread() {
        use rustix::net::{self, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let listener = net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        net::bind(&listener, &SocketAddrUnix::new(&path).unwrap()).unwrap();
        net::listen(&listener, 0).unwrap();
        // Fill the queue (never accepted): connects succeed until it is full.
        let mut queued = Vec::new();
        let refused = loop {
            match connect_within(&path, Duration::from_millis(200)) {
                Ok(c) => queued.push(c),
                Err(e) => break e,
            }
            assert!(queued.len() < 16, "the queue never filled");
        };
        assert_eq!(refused.kind(), io::ErrorKind::TimedOut, "{refused}");
        assert!(refused.to_string().contains("control.sock"), "{refused}");
        let names = thread_names();
        assert!(
            !names.iter().any(|n| n == "opfs-connect"),
            "a thread still connecting: {names:?}"
        );
        drop(listener);
    }
}
