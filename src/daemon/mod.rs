//! `opfs mount`: the daemon's life, from checking the request to serving
//! the mount, and stopping it.
//!
//! - [`check`]: the mount request is checked before anything happens;
//! - [`run`]: serves one project at one mountpoint in this process;
//! - [`spawn`]: starts [`run`] in the background and waits until it is ready;
//! - [`stop`]: asks a running daemon to unmount and waits for it.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::capture::{Exclusive, Journal};
use crate::control::client::{self, wait_for};
use crate::control::server::{self, MountOps};
use crate::control::{Request, Response};
use crate::rewind;
use crate::state::lock::StateLock;
use crate::state::{mountinfo, registry};
use crate::store::StateDir;

mod check;
pub mod logfile;
mod options;
pub mod signals;
pub mod spawn;
pub mod worktree;

pub use check::{
    check, is_dead_mount, mounts_of, probe_mount, MountError, MountPlan, MountProbe,
    DEAD_DAEMON_LOCK_WAIT, MOUNT_PROBE_LIMIT,
};
pub use options::{
    default_threads, parse_range_min, project_sync, range_min_from, remember_sync, BadRangeMin,
    DaemonOptions, FsTuning,
};
pub use spawn::SpawnError;

/// The period of the daemon's group commit timer: a captured record waits
/// in the capture log at most this long after the captures pause (when
/// fewer than [`crate::capture::GROUP_MAX`] are pending), and at most
/// [`crate::capture::GROUP_MAX_WAIT`] while they keep coming.
pub const GROUP_INTERVAL: Duration = Duration::from_millis(100);

/// The served mount as the control server sees it.
struct Served {
    controller: opfs_fs::Controller,
    /// Wakes the background exporter, when there is one.
    exporter: Option<crossbeam_channel::Sender<()>>,
    /// Wakes the automatic retention, when it is configured.
    retainer: Option<crossbeam_channel::Sender<()>>,
}

impl MountOps for Served {
    fn write_back(&self) {
        if let Err(e) = self.controller.write_back() {
            log::warn!("writing back the mount's dirty pages failed: {e}");
        }
    }

    fn quiesce(&self) -> Exclusive<'static> {
        Exclusive::quiesced(self.controller.quiesce())
    }

    fn invalidate(&self, paths: &[Vec<u8>]) {
        self.controller.invalidate(paths)
    }

    fn unmount(&self) -> io::Result<()> {
        self.controller.unmount_if_idle()
    }

    fn turns_closed(&self) {
        // Full means a run is already queued; it will see this turn.
        for tx in self.exporter.iter().chain(&self.retainer) {
            let _ = tx.try_send(());
        }
    }
}

fn io_err(what: String) -> impl FnOnce(io::Error) -> MountError {
    move |source| MountError::Io { what, source }
}

/// Runs the daemon in this process until the mount is unmounted (by
/// `opfs umount`, `fusermount3 -u`, SIGTERM or SIGINT).
///
/// `ready` is called once the mount is visible and the control socket
/// answers. Before mounting, an interrupted rewind is finished (and logged).
///
/// Errors: the state dir cannot be created or locked (another daemon holds
/// it: [`MountError::AlreadyMounted`]), the journal cannot be opened, the
/// mount, registration, socket or signal handlers fail, or serving fails.
pub fn run(
    home: &Path,
    plan: &MountPlan,
    opts: &DaemonOptions,
    ready: impl FnOnce(),
) -> Result<(), MountError> {
    let state = &plan.state;
    let lock = lock_state(state)?;
    let journal = open_journal(state, opts)?;
    // Nothing is mounted yet: the state lock alone holds mutations out.
    let recovered = recover(&journal, &Exclusive::unmounted(&lock));
    let hook: Arc<dyn opfs_fs::MutationHook> = journal.clone();
    let mount = match &opts.worktree {
        Some(spec) => {
            let fs = worktree::overlay_options(fs_options(plan, opts), &opts.tuning);
            worktree::run_overlay(home, plan, spec, hook, &fs)?
        }
        None => opfs_fs::mount(
            &state.project,
            &plan.mountpoint,
            hook,
            &fs_options(plan, opts),
        )
        .map_err(io_err(format!(
            "cannot mount {} at {}",
            state.project.display(),
            plan.mountpoint.display()
        )))?,
    };
    // This daemon's own stop for its pushes (a clone of the caller's
    // environment would share the caller's).
    let push = opts.push.clone().map(|mut p| {
        p.git.cancel = crate::remote::Cancel::default();
        p
    });
    let push_cancel = push.as_ref().map(|p| p.git.cancel.clone());
    let exporter = opts.export.then(|| match &opts.worktree {
        Some(spec) => worktree::start_exporter(home, spec, state, &journal, push.clone()),
        None => start_exporter(state, &journal, push.clone()),
    });
    let retainer = opts
        .retention
        .map(|r| start_retainer(&journal, mount.controller(), r));
    let ops: Arc<dyn MountOps> = Arc::new(Served {
        controller: mount.controller(),
        exporter: exporter.as_ref().map(|w| w.waker()),
        retainer: retainer.as_ref().map(|w| w.waker()),
    });
    registry::register_mount(home, state, &plan.mountpoint).map_err(io_err(format!(
        "cannot register the mount in {}",
        home.display()
    )))?;
    start_control(plan, &journal, ops, recovered)?;
    signals::unmount_on_signals(mount.controller())
        .map_err(io_err("cannot install signal handlers".into()))?;
    let committer = Committer::start(&journal);
    ready();
    log::info!(
        "serving {} at {} (turn {})",
        state.project.display(),
        plan.mountpoint.display(),
        journal.open_turn()
    );
    let result = mount.run();
    stop_workers(exporter, retainer);
    if let Some(cancel) = push_cancel {
        stop_pushes(&cancel);
    }
    committer.stop();
    shut_down(home, plan, &journal);
    result.map_err(io_err(format!(
        "serving {} failed",
        plan.mountpoint.display()
    )))
}

/// How long an unmount waits for the export under way (and one more run
/// for a turn closed before it) and for the retention under way: with
/// [`PUSH_STOP_WAIT`], within the 60 s `opfs umount` waits for the daemon.
const WORKER_STOP_WAIT: Duration = Duration::from_secs(15);

/// At unmount, before the state lock is released: lets the export under
/// way finish and exports a turn closed just before (so the history is
/// whole when `opfs umount` returns), lets the retention under way finish
/// (a retention not begun is dropped: the mount is gone), and waits for
/// both, so no export, retention or `git gc` they started still writes
/// into the state dir once the daemon has released it. Each is waited
/// for at most [`WORKER_STOP_WAIT`]; past that the daemon exits anyway
/// (an export cut short is redone at the next mount: `docs/crash-model.md`).
fn stop_workers(exporter: Option<crate::export::Worker>, retainer: Option<crate::export::Worker>) {
    use crate::export::Pending;
    for (worker, pending, what) in [
        (exporter, Pending::Run, "export"),
        (retainer, Pending::Drop, "retention"),
    ] {
        if let Some(w) = worker {
            if !w.stop(pending, WORKER_STOP_WAIT) {
                log::warn!(
                    "the {what} under way did not end within {} s of the unmount; it ends with the daemon",
                    WORKER_STOP_WAIT.as_secs()
                );
            }
        }
    }
}

/// How long an unmount waits for the push under way to end once stopped
/// (its git is killed at once; a bucket upload under way stops within
/// 50 ms, a multipart upload then aborted within
/// `remote::bucket::ABORT_WAIT`).
const PUSH_STOP_WAIT: Duration = Duration::from_secs(20);

/// At unmount: stops the automatic push under way (its git and the
/// transport it started are killed, the bucket upload under way is cut
/// short, a multipart upload aborted) and waits for it to record itself as interrupted in
/// `push.json`, so no push of an unmounted project stays behind; the
/// next mount pushes again.
fn stop_pushes(cancel: &crate::remote::Cancel) {
    cancel.cancel();
    if !cancel.wait_idle(PUSH_STOP_WAIT) {
        log::warn!(
            "the automatic push did not end within {} s of the unmount; it ends with the daemon",
            PUSH_STOP_WAIT.as_secs()
        );
    }
}

/// Creates the state dir and takes its lock for the daemon's life.
fn lock_state(state: &StateDir) -> Result<StateLock, MountError> {
    state.create().map_err(io_err(format!(
        "cannot create state dir {}",
        state.dir.display()
    )))?;
    StateLock::try_acquire(state)
        .map_err(io_err(format!(
            "cannot lock {}",
            state.lock_path().display()
        )))?
        .ok_or_else(|| MountError::AlreadyMounted {
            project: state.project.clone(),
            at: registry::recorded_mountpoint(state),
        })
}

fn open_journal(state: &StateDir, opts: &DaemonOptions) -> Result<Arc<Journal>, MountError> {
    if let (Some(exclude), None) = (&opts.record_exclude, &opts.worktree) {
        // Under the state lock: the list in effect changes only here.
        state
            .create()
            .and_then(|()| state.set_record_exclude(exclude))
            .map_err(io_err(format!(
                "cannot write {}",
                state.record_exclude_path().display()
            )))?;
    }
    if opts.worktree.is_none() {
        // Under the state lock: the project's worktrees follow this mount's
        // durability (`worktree::mount`).
        options::remember_sync(state, opts.sync).map_err(io_err(format!(
            "cannot record the durability choice in {}",
            state.dir.display()
        )))?;
    }
    // A damaged page is found now, not by the first capture that meets it.
    crate::store::quick_check(&state.index_path())
        .map_err(|e| MountError::Journal(crate::capture::OpenError::from(e)))?;
    let mut journal = Journal::open(state, opts.sync)?;
    journal.set_range_min(opts.range_min);
    let keep_min = opts
        .tuning
        .keep_min
        .unwrap_or(crate::capture::DEFAULT_KEEP_MIN);
    // Keeping a removed file holds a lease on it while the removal runs;
    // an `open` of it meanwhile makes the kernel send SIGIO, whose default
    // action would end the daemon. A handler makes it harmless (the
    // journal sees the broken lease itself). No handler, no keeping.
    if keep_min != u64::MAX {
        match signal_hook::flag::register(
            signal_hook::consts::SIGIO,
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        ) {
            Ok(_) => journal.set_keep_min(keep_min),
            Err(e) => log::warn!("removed files are copied, not kept: no SIGIO handler: {e}"),
        }
    }
    Ok(Arc::new(journal))
}

/// Finishes an interrupted rewind (or closes its turn); returns what was
/// recovered, for `opfs status`.
fn recover(journal: &Journal, excl: &Exclusive<'_>) -> Option<String> {
    let rewind = recover_rewind(journal, excl);
    let merge = match crate::worktree::merge::roll_back_interrupted(journal, excl) {
        Ok(m) => m,
        Err(e) => {
            log::error!("{e}");
            Some(e.to_string())
        }
    };
    if let Some(m) = &merge {
        log::warn!("{m}");
    }
    match (rewind, merge) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

/// Finishes an interrupted rewind (or closes its turn).
fn recover_rewind(journal: &Journal, excl: &Exclusive<'_>) -> Option<String> {
    match rewind::resume(journal, excl) {
        Ok(Some(r)) => {
            let msg = format!(
                "finished an interrupted rewind to turn {} (recorded as turn {}): {} paths restored, {} left unrestored{}",
                r.rewound_to,
                r.turn.unwrap_or(0),
                r.restored.len(),
                r.conflicts.len(),
                match r.conflicts.first() {
                    Some(c) => format!(" (first: {c})"),
                    None => String::new(),
                }
            );
            log::warn!("{msg}");
            Some(msg)
        }
        Ok(None) => match rewind::close_interrupted_rewind_turn(journal, excl) {
            Ok(msg) => {
                if let Some(m) = &msg {
                    log::warn!("{m}");
                }
                msg
            }
            Err(e) => {
                log::error!("cannot close an interrupted rewind turn: {e}");
                Some(format!(
                    "an interrupted rewind turn could not be closed: {e}"
                ))
            }
        },
        Err(e) => {
            log::error!("cannot finish an interrupted rewind: {e}");
            // The agent must not work in the rewind's turn.
            if let Err(e) = rewind::leave_rewind_turn(journal, excl) {
                log::error!("cannot open an agent turn: {e}");
            }
            Some(format!("an interrupted rewind could not be finished: {e}"))
        }
    }
}

fn fs_options(plan: &MountPlan, opts: &DaemonOptions) -> opfs_fs::Options {
    opts.tuning.apply(opfs_fs::Options {
        threads: opts.threads,
        allow_other: rustix::process::geteuid().is_root(),
        fsname: format!("opfs:{}", plan.state.project.display()),
        ..Default::default()
    })
}

/// Starts the background exporter and wakes it once. Off the request path:
/// a thread of its own, woken through a channel. The first wake-up writes
/// the baseline while the project is as first seen, or catches up with
/// turns closed while nothing was mounted.
///
/// With `push`, each export that succeeded wakes the automatic pusher
/// (`crate::remote::spawn_pusher`), a thread of its own too.
fn start_exporter(
    state: &StateDir,
    journal: &Arc<Journal>,
    push: Option<crate::remote::AutoPush>,
) -> crate::export::Worker {
    let journal = journal.clone();
    let pusher = push.map(|p| crate::remote::spawn_pusher(state.clone(), p));
    let worker = crate::export::spawn_background_then(
        state.clone(),
        Box::new(move || {
            if let Err(e) = journal.apply_pending() {
                log::warn!("group commit before the export deferred: {e}");
            }
        }),
        Box::new(move || {
            // Full means a push is already queued; it will see this export.
            if let Some(tx) = &pusher {
                let _ = tx.try_send(());
            }
        }),
    );
    worker.wake();
    worker
}

/// Starts the automatic retention: a thread that, each time a request
/// closes a turn, checks whether `retention` has work ([`crate::gc::due`]:
/// no scan) and if so applies it ([`crate::gc::gc_served`]), off the
/// request path. Woken once at start, so a policy configured since the
/// last mount applies at once. Wake-ups during a run merge into one more
/// check; failures go to the daemon log.
fn start_retainer(
    journal: &Arc<Journal>,
    controller: opfs_fs::Controller,
    retention: crate::gc::Retention,
) -> crate::export::Worker {
    let journal = journal.clone();
    let worker = crate::export::spawn_worker(
        "opfs-retention",
        Box::new(move || match crate::gc::due(&journal, retention) {
            Ok(false) => {}
            Ok(true) => {
                let quiesce = || Exclusive::quiesced(controller.quiesce());
                match crate::gc::gc_served(&journal, &quiesce, retention) {
                    Ok(r) => log::info!(
                        "retention: dropped turns {:?}, {} records, {} blobs ({} bytes) freed{}",
                        r.dropped_turns,
                        r.records_deleted,
                        r.blobs_removed,
                        r.bytes_freed,
                        r.note.map(|n| format!("; {n}")).unwrap_or_default()
                    ),
                    Err(e) => log::warn!("retention failed: {e}"),
                }
            }
            Err(e) => log::warn!("retention check failed: {e}"),
        }),
    );
    worker.wake();
    worker
}

/// Binds the control socket and serves it on a thread of its own.
fn start_control(
    plan: &MountPlan,
    journal: &Arc<Journal>,
    ops: Arc<dyn MountOps>,
    recovered: Option<String>,
) -> Result<(), MountError> {
    let socket = plan.state.socket_path();
    let listener =
        server::bind(&socket).map_err(io_err(format!("cannot bind {}", socket.display())))?;
    let journal = journal.clone();
    let mp = plan.mountpoint.clone();
    std::thread::spawn(move || server::serve(listener, journal, ops, mp, recovered));
    Ok(())
}

/// Group commits of the capture log happen on the capturing thread when
/// enough records are pending; this timer commits the rest within
/// [`GROUP_INTERVAL`] of a pause in the captures, and at least once per
/// [`crate::capture::GROUP_MAX_WAIT`] while they keep coming
/// ([`Journal::apply_pending_on_tick`]). History commands in other
/// processes ask the daemon to commit first (`Commit`).
struct Committer {
    stop: crossbeam_channel::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Committer {
    fn start(journal: &Arc<Journal>) -> Committer {
        let (stop, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let journal = journal.clone();
        let thread = std::thread::spawn(move || {
            // Ticks in a row that found a kept file's removal under way;
            // after `MAX_WAIT` of them the tick commits anyway (copying
            // such a file), so a stream of removals cannot hold captures
            // out of the index for more than about a second.
            const MAX_WAIT: u32 = 10;
            let mut waited = 0;
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                stop_rx.recv_timeout(GROUP_INTERVAL)
            {
                let done = if waited >= MAX_WAIT {
                    journal.apply_pending().map(|()| true)
                } else {
                    journal.apply_pending_on_tick()
                };
                match done {
                    Ok(true) => waited = 0,
                    Ok(false) => waited += 1,
                    Err(e) => {
                        waited = 0;
                        log::warn!("group commit deferred: {e}");
                    }
                }
            }
        });
        Committer { stop, thread }
    }

    fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

/// After the mount is gone: stores fingerprints, checkpoints the index and
/// removes the registration.
fn shut_down(home: &Path, plan: &MountPlan, journal: &Journal) {
    if let Err(e) = journal.flush() {
        log::error!("cannot store fingerprints at unmount: {e}");
    }
    if let Err(e) = journal.with_index(|ix| ix.checkpoint()) {
        log::warn!("cannot checkpoint the index at unmount: {e}");
    }
    registry::unregister_mount(home, &plan.state, &plan.mountpoint);
    log::info!("unmounted {}", plan.mountpoint.display());
}

/// Why [`stop`] or [`force_stop`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StopError {
    /// The daemon refused (a busy mountpoint); its message.
    #[error("{0}")]
    Refused(String),
    /// The daemon answered with something else.
    #[error("unexpected answer from the daemon: {0:?}")]
    Unexpected(Box<Response>),
    /// A daemon holds the state lock but does not answer.
    #[error("the daemon serving {} does not answer on {}: {source}", .mountpoint.display(), .socket.display())]
    NoAnswer {
        /// The mountpoint.
        mountpoint: std::path::PathBuf,
        /// The control socket.
        socket: std::path::PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The daemon is frozen (stopped, traced) or did not answer the
    /// unmount request in time; the message names its pid and state and
    /// says how to end it (`opfs umount --force`).
    #[error("{0}")]
    Unresponsive(String),
    /// No daemon, and neither `fusermount3 -uz` nor a lazy `umount2`
    /// could detach what it left.
    #[error(
        "cannot unmount the mount at {m}: `fusermount3 -uz` (package fuse3) and a lazy unmount \
         both failed; as root, `umount -l {m}`",
        m = .0.display()
    )]
    Stale(std::path::PathBuf),
    /// The daemon did not release the state lock in time.
    #[error("the daemon serving {} did not stop within {} s", .mountpoint.display(), .limit.as_secs())]
    Timeout {
        /// The mountpoint.
        mountpoint: std::path::PathBuf,
        /// How long it was given.
        limit: Duration,
    },
    /// [`force_stop`] could not end the process holding the state lock.
    #[error(
        "cannot end the daemon of {} (pid {pid}): {source}; end it yourself (`kill -KILL {pid}`)",
        .project.display()
    )]
    Kill {
        /// The project.
        project: std::path::PathBuf,
        /// The daemon's pid.
        pid: u32,
        /// The cause.
        source: io::Error,
    },
}

/// Stops the daemon serving `state`'s project: asks it to unmount and waits
/// (up to `limit`) until it has released the state lock.
///
/// A daemon that closes the connection without answering (it unmounted
/// and exited before its answer went out) is waited for like one that
/// answered. Errors name the mountpoint: the daemon refused (busy
/// mountpoint), is frozen or did not answer within
/// [`client::answer_limit`] ([`StopError::Unresponsive`], naming its pid
/// and state), or did not stop in time. A daemon that died and left a
/// stale mount is detached ([`check::detach_mount`]: `fusermount3 -uz`,
/// else a lazy `umount2`).
pub fn stop(state: &StateDir, mountpoint: &Path, limit: Duration) -> Result<(), StopError> {
    match client::request(state, &Request::Unmount) {
        Ok(Response::Unmounting) => {}
        Ok(Response::Error { message, .. }) => return Err(StopError::Refused(message)),
        Ok(other) => return Err(StopError::Unexpected(Box::new(other))),
        Err(client::AskError::Unanswered(u)) => {
            return Err(StopError::Unresponsive(client::unresponsive_message(
                &state.project,
                &u,
                Some(mountpoint),
                &state.log_path(),
            )))
        }
        Err(client::AskError::Io(source)) => {
            // A daemon that took the request unmounts and exits, and may be
            // gone before its answer is written: a connection cut off with
            // the lock still held is waited for like an answer.
            let cut_off = matches!(
                source.kind(),
                io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
            );
            if StateLock::is_held(state)
                && !(cut_off && wait_for(limit, || !StateLock::is_held(state)))
            {
                return Err(StopError::NoAnswer {
                    mountpoint: mountpoint.to_path_buf(),
                    socket: state.socket_path(),
                    source,
                });
            }
            // No daemon: clean up whatever mount is left.
            if mountinfo::is_mount_point(mountpoint) && check::detach_mount(mountpoint).is_err() {
                return Err(StopError::Stale(mountpoint.to_path_buf()));
            }
            return Ok(());
        }
    }
    if wait_for(limit, || !StateLock::is_held(state)) {
        Ok(())
    } else {
        Err(StopError::Timeout {
            mountpoint: mountpoint.to_path_buf(),
            limit,
        })
    }
}

/// What [`force_stop`] did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ForceStop {
    /// The mountpoints detached (lazily: a process still inside one keeps
    /// what it has open; new accesses see the directory beneath).
    pub detached: Vec<std::path::PathBuf>,
    /// The pid of the process that held the state lock, killed.
    pub killed: Option<u32>,
    /// What that process was doing before (`stopped (state T)`...).
    pub was: Option<String>,
}

/// How long [`force_stop`] waits for a killed daemon to release the state
/// lock (its last thread leaving the kernel).
pub const FORCE_STOP_WAIT: Duration = Duration::from_secs(10);

/// Ends the daemon serving `state`'s project whatever it is doing
/// (stopped, hung, busy, or already gone): detaches `mountpoint` and the
/// mountpoint the state dir records (`fusermount3 -uz`, else a lazy
/// `umount2(MNT_DETACH)`), kills the process holding the state lock with
/// `SIGKILL` (which ends a stopped process too, and fails the requests
/// waiting on its mount with `ENOTCONN`), waits up to [`FORCE_STOP_WAIT`]
/// for the lock to be released, and removes the mount's registration.
/// Never asks the daemon anything, so it never waits on it.
///
/// Durable afterwards: every capture the daemon made (its capture log is
/// replayed into the index at the next open, as after any crash); a
/// rewind it was running is finished by the next mount. Lost: nothing
/// recorded; a mutation that was in flight through the mount fails.
///
/// Errors: [`StopError::Kill`] when the process cannot be killed or still
/// holds the lock after the wait; [`StopError::Stale`] when a mountpoint
/// stays mounted.
pub fn force_stop(
    home: &Path,
    state: &StateDir,
    mountpoint: &Path,
) -> Result<ForceStop, StopError> {
    let mut report = ForceStop::default();
    let mut points = vec![mountpoint.to_path_buf()];
    if let Some(m) = registry::recorded_mountpoint(state) {
        if !points.contains(&m) {
            points.push(m);
        }
    }
    let pid = crate::state::holder::lock_holder(state);
    for m in &points {
        if mountinfo::is_mount_point(m) {
            if check::detach_mount(m).is_err() {
                return Err(StopError::Stale(m.clone()));
            }
            report.detached.push(m.clone());
        }
    }
    if let Some(pid) = pid {
        report.was = crate::state::holder::proc_state(pid).map(|s| s.to_string());
        let kill_err = |source: io::Error| StopError::Kill {
            project: state.project.clone(),
            pid,
            source,
        };
        let p = rustix::process::Pid::from_raw(pid as i32)
            .ok_or_else(|| kill_err(io::Error::other("not a pid")))?;
        match rustix::process::kill_process(p, rustix::process::Signal::KILL) {
            Ok(()) => report.killed = Some(pid),
            Err(rustix::io::Errno::SRCH) => {}
            Err(e) => return Err(kill_err(e.into())),
        }
        if !wait_for(FORCE_STOP_WAIT, || !StateLock::is_held(state)) {
            return Err(kill_err(io::Error::other(format!(
                "it still holds {} after {} s",
                state.lock_path().display(),
                FORCE_STOP_WAIT.as_secs()
            ))));
        }
    }
    for m in &points {
        registry::unregister_mount(home, state, m);
    }
    Ok(report)
}
