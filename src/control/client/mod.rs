//! The one client of a project: each operation goes to the daemon if one
//! answers, else runs directly on the state dir under its [`StateLock`].
//!
//! [`Project`] is what the CLI and `opfs run` use for `status`, `turn`,
//! `rewind` and making pending captures visible; nothing else decides
//! between the daemon and direct access.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::protocol::{FailureKind, Request, Response, Status};
use super::server;
use crate::capture::{Exclusive, Journal, NewTurn, OpenError};
use crate::record::TurnKind;
use crate::rewind::{self, RewindError, RewindReport};
use crate::state::lock::StateLock;
use crate::store::Index;
use crate::store::StateDir;

mod socket;

use socket::is_cut_off;

pub use socket::{
    answer_limit, exchange, request, unresponsive_message, wait_for, wait_for_every, AskError,
    Unanswered, HOOK_LIMIT,
};

/// How long a request waits for a daemon that died (mid-request, for a
/// status; or before it, the socket refusing) to release the state lock
/// before it reads the state dir itself.
const DYING_DAEMON_WAIT: Duration = Duration::from_secs(5);

/// Why a [`Project`] operation failed. [`ClientError::kind`] says whether
/// the request itself was wrong.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon answered with an error.
    #[error("{message}")]
    Refused {
        /// Usage or failure, as the daemon classified it.
        kind: FailureKind,
        /// The daemon's message.
        message: String,
    },
    /// The daemon took the request but died before answering; running it
    /// again directly could repeat half of it.
    #[error(
        "the daemon for {project} died while handling the request ({source}); \
         run `opfs mount` again: it cleans up the dead mount and finishes \
         an interrupted rewind (see {log})"
    )]
    DaemonDied {
        /// The project.
        project: PathBuf,
        /// The daemon's log file.
        log: PathBuf,
        /// How the connection ended.
        source: io::Error,
    },
    /// A daemon holds the state lock but its socket does not answer.
    #[error("the daemon for {project} does not answer on {socket}: {source}")]
    NoAnswer {
        /// The project.
        project: PathBuf,
        /// The control socket.
        socket: PathBuf,
        /// Why connecting or asking failed.
        source: io::Error,
    },
    /// The daemon took no answer within the request's bound
    /// ([`answer_limit`]), or cannot answer at all: it is stopped
    /// (`SIGSTOP`), traced or exited. Nothing in its mount is served or
    /// recorded meanwhile.
    #[error("{}", unresponsive_message(.project, .unanswered, .mountpoint.as_deref(), .log))]
    Unresponsive {
        /// The project.
        project: PathBuf,
        /// Its mountpoint, when the state dir records one.
        mountpoint: Option<PathBuf>,
        /// The daemon's log file.
        log: PathBuf,
        /// What was found.
        unanswered: Unanswered,
    },
    /// The daemon answered with something that does not fit the request.
    #[error("unexpected answer from the daemon: {0:?}")]
    Unexpected(Box<Response>),
    /// The state lock could not be taken (an I/O error, not contention).
    #[error("cannot lock {path}: {source}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A daemon (or another command) holds the state lock, but no daemon
    /// answered.
    #[error("{} is busy: a daemon holds its lock", .0.display())]
    Busy(PathBuf),
    /// Opening the journal directly failed.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The direct operation failed; the message names the path or turn.
    #[error("{0}")]
    Direct(String),
    /// A direct rewind failed.
    #[error(transparent)]
    Rewind(#[from] RewindError),
    /// Retention failed.
    #[error(transparent)]
    Gc(#[from] crate::gc::GcError),
    /// No daemon serves the project, and the operation was asked to run
    /// only through one: with nothing mounted, changes to the project are
    /// not recorded, so a turn opened now would promise what it cannot keep.
    #[error(
        "no opfs daemon serves {}: changes to it are not being recorded, so no turn was opened; \
         mount it first (`opfs mount {} MOUNTPOINT`), or pass --allow-unmounted to open the turn \
         in its state dir anyway",
        .0.display(),
        .0.display()
    )]
    NotServed(PathBuf),
}

/// Who carried out an operation of a [`Project`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The daemon serving the project: what happened in its mount is
    /// recorded.
    Daemon,
    /// Nothing serves the project: the operation ran on the state dir
    /// under its lock, and changes made to the project meanwhile were not
    /// recorded.
    Direct,
}

impl ClientError {
    /// Usage for a request that names what does not exist (an unknown or
    /// dropped turn), else failure.
    pub fn kind(&self) -> FailureKind {
        match self {
            ClientError::Refused { kind, .. } => *kind,
            ClientError::Rewind(RewindError::Turn(_)) => FailureKind::Usage,
            _ => FailureKind::Failure,
        }
    }

    /// The error for an answer that does not fit: the daemon's own error
    /// as such, anything else as [`ClientError::Unexpected`].
    fn from_answer(r: Response) -> ClientError {
        match r {
            Response::Error { kind, message } => ClientError::Refused { kind, message },
            other => ClientError::Unexpected(Box::new(other)),
        }
    }
}

/// One project, reached through its daemon when one runs.
#[derive(Debug, Clone)]
pub struct Project {
    state: StateDir,
    /// Overrides [`answer_limit`] for every request, when set.
    limit: Option<Duration>,
}

impl Project {
    /// The project whose state dir is `state` (it need not exist yet).
    pub fn new(state: StateDir) -> Project {
        Project { state, limit: None }
    }

    /// This project, waiting at most `limit` for any answer of its daemon
    /// instead of each request's own bound ([`answer_limit`]): the agent
    /// hook uses a short one, so a hung daemon never hangs the agent.
    pub fn with_answer_limit(mut self, limit: Duration) -> Project {
        self.limit = Some(limit);
        self
    }

    /// The project's state dir.
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// Applies `retention` (`dry_run`: only reports what it would drop).
    /// While a daemon serves the project, it applies retention itself
    /// ([`crate::gc::gc_served`]); else it runs on the state dir under the
    /// state lock, held for the whole run so no daemon starts meanwhile. A
    /// dry run asks a running daemon to commit its pending records, then
    /// only reads (its figures are a snapshot).
    ///
    /// Errors: [`ClientError::Refused`] when the daemon's gc failed;
    /// [`ClientError::Busy`] while another command holds the lock and no
    /// daemon answers; [`ClientError::Lock`] when the lock file cannot be
    /// opened; [`ClientError::Gc`] when retention fails (see
    /// [`crate::gc::gc`] for what is durable then).
    pub fn gc(
        &self,
        retention: crate::gc::Retention,
        dry_run: bool,
    ) -> Result<crate::gc::GcReport, ClientError> {
        self.gc_with_progress(retention, dry_run, &mut |_, _| {})
    }

    /// [`Project::gc`], calling `progress(done, total)` as
    /// [`crate::gc::gc_with_progress`] says when the gc runs in this
    /// process (a dry run, or no daemon); a daemon's gc reports no
    /// progress. Errors as [`Project::gc`].
    pub fn gc_with_progress(
        &self,
        retention: crate::gc::Retention,
        dry_run: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<crate::gc::GcReport, ClientError> {
        if dry_run {
            commit_through_daemon(&self.state);
            return Ok(crate::gc::gc_with_progress(
                &self.state,
                retention,
                crate::gc::Offline::DryRun,
                progress,
            )?);
        }
        let req = Request::Gc {
            keep: retention.keep,
            max_bytes: retention.max_bytes,
            min_age_days: retention.min_age_days,
        };
        match self.ask(&req)? {
            Some(Response::Gc(report)) => Ok(report),
            Some(other) => Err(ClientError::from_answer(other)),
            None => {
                let lock = self
                    .try_lock()?
                    .ok_or_else(|| ClientError::Busy(self.state.dir.clone()))?;
                Ok(crate::gc::gc_with_progress(
                    &self.state,
                    retention,
                    crate::gc::Offline::Locked(&lock),
                    progress,
                )?)
            }
        }
    }

    /// The mount state, open turn and store size.
    ///
    /// Errors: a daemon that does not answer, or the state dir cannot be
    /// opened directly.
    pub fn status(&self) -> Result<Status, ClientError> {
        match self.ask(&Request::Status)? {
            Some(Response::Status(s)) => Ok(s),
            Some(other) => Err(ClientError::from_answer(other)),
            None => {
                let (journal, _lock) = self.open_direct()?;
                Ok(server::status_of(&journal, None, None))
            }
        }
    }

    /// True when a daemon serves the project (it answered a status
    /// request).
    ///
    /// Errors: a daemon holds the lock but does not answer.
    pub fn served(&self) -> Result<bool, ClientError> {
        Ok(self.ask(&Request::Status)?.is_some())
    }

    /// Closes the open turn and opens the next (kind agent) with `label`
    /// and the external `id`; returns its number. Durable when this
    /// returns. Opens it directly on the state dir when no daemon serves
    /// the project (see [`Project::turn_via`]).
    ///
    /// Errors: the daemon refused or does not answer, or the direct
    /// operation failed.
    pub fn turn(&self, label: Option<&str>, id: Option<&str>) -> Result<u64, ClientError> {
        self.turn_via(label, id, true).map(|(turn, _)| turn)
    }

    /// [`Project::turn`], also saying who opened the turn. With no daemon
    /// serving the project the turn is opened directly on the state dir
    /// only if `allow_direct`; else no turn is opened (opening the state
    /// dir may still move records a crash left in its capture log into the
    /// index, as any direct access does).
    ///
    /// Errors: [`ClientError::NotServed`] without a daemon and without
    /// `allow_direct` (checked after the state dir opened, so a damaged
    /// index or capture log is reported as such first); the daemon refused
    /// or does not answer; the direct operation failed.
    pub fn turn_via(
        &self,
        label: Option<&str>,
        id: Option<&str>,
        allow_direct: bool,
    ) -> Result<(u64, Via), ClientError> {
        self.turn_closing(None, label, id, allow_direct)
    }

    /// [`Project::turn_via`], also labelling the turn it closes with
    /// `closing_label` when given (`opfs turn -m`; `Some("")` removes its
    /// label), in the transaction that closes it: after `Ok` the closed
    /// turn has that label, after `Err` it keeps its own. Errors as
    /// [`Project::turn_via`].
    pub fn turn_closing(
        &self,
        closing_label: Option<&str>,
        label: Option<&str>,
        id: Option<&str>,
        allow_direct: bool,
    ) -> Result<(u64, Via), ClientError> {
        self.turn_checked(closing_label, label, id, allow_direct)
            .map(|(turn, via, _)| (turn, via))
    }

    /// [`Project::turn_closing`], also returning what the daemon found,
    /// right after it opened the turn, of a rewind that stopped half way:
    /// `Some(None)` none, `Some(Some(note))` its note (as
    /// [`crate::store::index::StoppedRestore`] displays it), `None` when it was
    /// not looked for (a daemon that does not look, a failed look, a turn
    /// opened directly): the caller then reads the index itself. Errors as
    /// [`Project::turn_via`].
    pub fn turn_checked(
        &self,
        closing_label: Option<&str>,
        label: Option<&str>,
        id: Option<&str>,
        allow_direct: bool,
    ) -> Result<(u64, Via, Option<Option<String>>), ClientError> {
        let req = Request::Turn {
            label: label.map(String::from),
            id: id.map(String::from),
            closing_label: closing_label.map(String::from),
        };
        match self.ask(&req)? {
            Some(Response::Turn {
                turn,
                checked_rewind,
                stopped_rewind,
            }) => Ok((turn, Via::Daemon, checked_rewind.then_some(stopped_rewind))),
            Some(other) => Err(ClientError::from_answer(other)),
            None => {
                let (journal, lock) = self.open_direct()?;
                if !allow_direct {
                    return Err(ClientError::NotServed(self.state.project.clone()));
                }
                journal
                    .next_turn(
                        &Exclusive::unmounted(&lock),
                        NewTurn {
                            kind: TurnKind::Agent,
                            label,
                            external_id: id,
                            rewound_to: None,
                            closing_label,
                        },
                    )
                    .map(|turn| (turn, Via::Direct, None))
                    .map_err(|e| ClientError::Direct(e.to_string()))
            }
        }
    }

    /// Opens a turn for a prompt sent from inside `opfs run`'s sandbox
    /// ([`Request::SandboxTurn`]), through the daemon only. Returns the
    /// open turn's number.
    ///
    /// Errors: [`ClientError::NotServed`] when no daemon serves the
    /// project; the daemon refused or does not answer.
    pub fn sandbox_turn(
        &self,
        label: Option<&str>,
        id: Option<&str>,
        placeholder: Option<u64>,
    ) -> Result<u64, ClientError> {
        let req = Request::SandboxTurn {
            label: label.map(String::from),
            id: id.map(String::from),
            placeholder,
        };
        match self.ask(&req)? {
            Some(Response::Turn { turn, .. }) => Ok(turn),
            Some(other) => Err(ClientError::from_answer(other)),
            None => Err(ClientError::NotServed(self.state.project.clone())),
        }
    }

    /// Rewinds to the start of turn `to` (only plans with `dry_run`;
    /// `force` restores paths changed behind the mount's back too).
    /// Returns the rewind report. From a daemon it is the report as the
    /// socket carries it: its conflicts' reasons are text
    /// ([`crate::restore::ConflictReason::Text`]), its plan has no raw
    /// paths or states and `touched` is empty (the daemon has already
    /// invalidated them). What the rewind wrote is durable as
    /// [`rewind::rewind`] says.
    ///
    /// Errors: an unknown or dropped turn (usage), the daemon refused or
    /// does not answer, or the rewind failed.
    pub fn rewind(&self, to: u64, dry_run: bool, force: bool) -> Result<RewindReport, ClientError> {
        self.rewind_via(to, dry_run, force).map(|(r, _)| r)
    }

    /// [`Project::rewind`], also saying who ran it: with [`Via::Direct`]
    /// no daemon served the project, so what was changed in it since it
    /// was last unmounted was not recorded (a rewind reports such paths as
    /// conflicts unless `force`). Errors as [`Project::rewind`].
    pub fn rewind_via(
        &self,
        to: u64,
        dry_run: bool,
        force: bool,
    ) -> Result<(RewindReport, Via), ClientError> {
        self.rewind_with_progress(to, dry_run, force, None)
    }

    /// [`Project::rewind_via`], calling `progress(done, total)` while the
    /// restore runs, when given: through the daemon (which sends
    /// [`Response::Progress`] lines, at most about ten a second) or
    /// directly ([`rewind::rewind_with_progress`]). `done` grows to
    /// `total`; a dry run reports none. Errors as [`Project::rewind`].
    pub fn rewind_with_progress(
        &self,
        to: u64,
        dry_run: bool,
        force: bool,
        progress: Option<&mut dyn FnMut(u64, u64)>,
    ) -> Result<(RewindReport, Via), ClientError> {
        let opts = rewind::RewindOptions {
            dry_run,
            force,
            pending: None,
            ..Default::default()
        };
        self.rewind_opts_with_progress(to, opts, progress)
    }

    /// [`Project::rewind_with_progress`] with every option, so also `opfs
    /// rewind --resume` and `--abort` (`opts.pending`; `to` is then
    /// ignored). Errors as [`Project::rewind`], and
    /// [`rewind::RewindError::NothingPending`] for `--resume`/`--abort`
    /// with no pending rewind.
    pub fn rewind_opts_with_progress(
        &self,
        to: u64,
        opts: rewind::RewindOptions,
        progress: Option<&mut dyn FnMut(u64, u64)>,
    ) -> Result<(RewindReport, Via), ClientError> {
        self.rewind_within(to, None, opts, progress)
    }

    /// `opfs restore`: [`rewind::restore_paths`] of the paths within
    /// `only` to the start of turn `to`, through the daemon or directly as
    /// [`Project::rewind_opts_with_progress`]. Errors as [`Project::rewind`].
    pub fn restore_paths(
        &self,
        to: u64,
        only: &[Vec<u8>],
        opts: rewind::RewindOptions,
        progress: Option<&mut dyn FnMut(u64, u64)>,
    ) -> Result<(RewindReport, Via), ClientError> {
        self.rewind_within(to, Some(only), opts, progress)
    }

    fn rewind_within(
        &self,
        to: u64,
        only: Option<&[Vec<u8>]>,
        opts: rewind::RewindOptions,
        progress: Option<&mut dyn FnMut(u64, u64)>,
    ) -> Result<(RewindReport, Via), ClientError> {
        let rewind::RewindOptions {
            dry_run,
            force,
            pending,
            partial,
            markers,
        } = opts;
        let mut none = |_: u64, _: u64| {};
        let wants = progress.is_some();
        let progress: &mut dyn FnMut(u64, u64) = match progress {
            Some(p) => p,
            None => &mut none,
        };
        let req = Request::Rewind {
            to,
            dry_run,
            force,
            progress: wants,
            pending,
            partial,
            markers,
            paths: only.map(|ps| ps.iter().map(|p| crate::paths::display(p)).collect()),
        };
        match self.ask_with_progress(&req, progress)? {
            Some(Response::Rewind(report)) => Ok((report, Via::Daemon)),
            Some(other) => Err(ClientError::from_answer(other)),
            None => {
                // A damaged page must stop the rewind before it writes
                // (opening the journal replays the capture log into it).
                crate::store::quick_check(&self.state.index_path())
                    .map_err(|e| ClientError::Open(OpenError::from(e)))?;
                let (journal, lock) = self.open_direct()?;
                let excl = Exclusive::unmounted(&lock);
                let report = match only {
                    None => rewind::rewind_with_progress(&journal, &excl, to, opts, progress)?,
                    Some(only) => rewind::restore_paths(&journal, &excl, to, only, opts, progress)?,
                };
                Ok((report, Via::Direct))
            }
        }
    }

    /// Merges worktree `name` into the project as one turn of kind
    /// `merge` (only plans with `opts.dry_run`; the other options as
    /// [`crate::worktree::merge::MergeOptions`] says): through the daemon when
    /// one serves the project, else directly under the state lock. Returns
    /// the merge report; from a daemon its conflicts' reasons are text and
    /// `touched` is empty (the daemon has invalidated them). What the merge
    /// wrote is durable as [`crate::worktree::merge::merge`] says.
    ///
    /// Errors: no such worktree (usage), the daemon refused or does not
    /// answer, or the merge failed before writing anything.
    pub fn merge(
        &self,
        name: &str,
        opts: crate::worktree::merge::MergeOptions,
    ) -> Result<crate::worktree::merge::MergeReport, ClientError> {
        let crate::worktree::merge::MergeOptions {
            dry_run,
            force,
            partial,
            markers,
            include_ignored,
        } = opts;
        let req = Request::Merge {
            worktree: name.to_string(),
            dry_run,
            force,
            partial,
            markers,
            include_ignored,
        };
        match self.ask(&req)? {
            Some(Response::Merge(report)) => Ok(report),
            Some(other) => Err(ClientError::from_answer(other)),
            None => {
                let (journal, lock) = self.open_direct()?;
                let excl = Exclusive::unmounted(&lock);
                crate::worktree::merge::merge(&journal, &excl, name, opts).map_err(|e| {
                    if e.is_usage() {
                        ClientError::Refused {
                            kind: FailureKind::Usage,
                            message: e.to_string(),
                        }
                    } else {
                        ClientError::Direct(e.to_string())
                    }
                })
            }
        }
    }

    /// Makes every capture so far visible to the index readers (history,
    /// export, verify): a running daemon commits the records pending in its
    /// capture log; with none running, records a crash left there are moved
    /// into the index (under the state lock, as a mount would). A state dir
    /// that does not exist has nothing pending.
    ///
    /// Errors: the daemon failed to commit or does not answer, or the
    /// capture log cannot be replayed.
    pub fn commit_pending(&self) -> Result<(), ClientError> {
        let st = &self.state;
        if !st.exists() {
            return Ok(());
        }
        match self.ask(&Request::Commit)? {
            Some(Response::Committed) => return Ok(()),
            Some(Response::Error { message, .. }) => {
                return Err(ClientError::Refused {
                    kind: FailureKind::Failure,
                    message,
                })
            }
            Some(other) => return Err(ClientError::Unexpected(Box::new(other))),
            None => {}
        }
        let log = st.capture_log_path();
        if std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) == 0 {
            return Ok(());
        }
        let Some(_lock) = self.try_lock()? else {
            return Ok(()); // a daemon started meanwhile; it replays the log
        };
        let mut index =
            Index::open(&st.index_path(), false).map_err(|e| ClientError::Direct(e.to_string()))?;
        let kept = crate::store::KeptDir::open(&st.kept_dir())
            .map_err(|e| ClientError::Direct(e.to_string()))?;
        let blobs = crate::store::BlobStore::open(&st.blobs_dir(), false)
            .map_err(|e| ClientError::Direct(e.to_string()))?;
        crate::store::replay_capture_log(&mut index, &log, &kept, &blobs, false)
            .map(drop)
            .map_err(|e| ClientError::Direct(e.to_string()))
    }

    /// Asks the running daemon; `None` when no daemon runs for this project.
    fn ask(&self, req: &Request) -> Result<Option<Response>, ClientError> {
        self.ask_with_progress(req, &mut |_, _| {})
    }

    /// [`Project::ask`], passing the daemon's progress lines to `progress`.
    fn ask_with_progress(
        &self,
        req: &Request,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Option<Response>, ClientError> {
        let st = &self.state;
        let limit = self.limit.unwrap_or_else(|| answer_limit(req));
        let source = match exchange(st, req, limit, progress) {
            Ok(r) => return Ok(Some(r)),
            Err(AskError::Unanswered(unanswered)) => {
                return Err(ClientError::Unresponsive {
                    project: st.project.clone(),
                    mountpoint: crate::state::registry::recorded_mountpoint(st),
                    log: st.log_path(),
                    unanswered,
                })
            }
            Err(AskError::Io(e)) => e,
        };
        match source {
            // Connected and sent, but no answer: the daemon died while
            // handling the request. Running it again directly could repeat
            // half of it; the next `opfs mount` finishes an interrupted
            // rewind instead. A status needs no answer from a dying daemon:
            // once it is gone the state dir answers.
            e if is_cut_off(&e)
                && matches!(req, Request::Status)
                && wait_for(DYING_DAEMON_WAIT, || !StateLock::is_held(st)) =>
            {
                Ok(None)
            }
            source if is_cut_off(&source) => Err(ClientError::DaemonDied {
                project: st.project.clone(),
                log: st.log_path(),
                source,
            }),
            source => {
                // Nobody listens on the socket while the lock is held: a
                // daemon that was just killed, whose lock goes a moment
                // after its last thread (the request never reached it, so
                // running it directly once the lock is free repeats
                // nothing).
                let refused = source.kind() == io::ErrorKind::ConnectionRefused;
                if StateLock::is_held(st)
                    && !(refused && wait_for(DYING_DAEMON_WAIT, || !StateLock::is_held(st)))
                {
                    Err(ClientError::NoAnswer {
                        project: st.project.clone(),
                        socket: st.socket_path(),
                        source,
                    })
                } else {
                    Ok(None)
                }
            }
        }
    }

    fn try_lock(&self) -> Result<Option<StateLock>, ClientError> {
        StateLock::try_acquire(&self.state).map_err(|source| ClientError::Lock {
            path: self.state.lock_path(),
            source,
        })
    }

    /// The journal opened on the state dir, with the lock held.
    fn open_direct(&self) -> Result<(Journal, StateLock), ClientError> {
        let lock = self
            .try_lock()?
            .ok_or_else(|| ClientError::Busy(self.state.dir.clone()))?;
        let journal = Journal::open(&self.state, false)?;
        Ok((journal, lock))
    }
}

/// Asks the daemon serving `state`, if one runs, to commit the records
/// pending in its capture log. Without a daemon nothing is pending that a
/// reader could race with, so errors (no socket) are ignored; a daemon
/// that does not answer within [`answer_limit`] (at once when it is
/// stopped) is not waited for further: the reader goes on with what the
/// index holds. This is the `commit` seam the history readers are given.
pub fn commit_through_daemon(state: &StateDir) {
    if let Err(AskError::Unanswered(u)) = request(state, &Request::Commit) {
        log::warn!(
            "{}",
            unresponsive_message(
                &state.project,
                &u,
                crate::state::registry::recorded_mountpoint(state).as_deref(),
                &state.log_path()
            )
        );
    }
}

/// Asks the daemon serving `state` to serve callers in the namespaces of
/// process `pid` (an `opfs shell` view) while this process lives.
///
/// Errors: no daemon answers, or it refuses (an older daemon does not know
/// the request), with the daemon's message.
pub fn trust_view(state: &StateDir, pid: i32) -> Result<(), String> {
    match request(state, &Request::TrustView { pid }) {
        Ok(Response::Trusted) => Ok(()),
        Ok(Response::Error { message, .. }) => Err(message),
        Ok(other) => Err(format!("unexpected answer {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}
