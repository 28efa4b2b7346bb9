//! The daemon's background exporter: a thread of its own that runs
//! [`export`](super::export) after every request that closes a turn, off
//! the request path, through one repository handle kept between runs.
//! Failures go to the daemon log, never to the request.

use crate::store::StateDir;

use super::export_in;

/// Starts the background exporter of a daemon: a thread that exports
/// `state`'s history into the default repository each time it is woken
/// through the returned sender (wake-ups arriving during an export are
/// merged into one more run). Failures are logged, never returned: the
/// export must not slow down or fail the request that closed the turn.
///
/// `commit` is the daemon's group commit of its capture log: it runs
/// before every export and wherever the export re-reads records.
///
/// The thread keeps the repository open between runs (`docs/design.md`
/// "The export keeps its repository open"): a run reopens it when the
/// repository was replaced, its packs changed or its refs were packed
/// since. It keeps the commits it read or wrote and the trees it wrote
/// whatever happened to the handle ("The export keeps the trees it
/// wrote").
///
/// The thread ends when [`Worker::stop`] is called (after one more run if
/// a wake-up is pending) or every sender is dropped.
pub fn spawn_background(state: StateDir, commit: Box<dyn Fn() + Send>) -> Worker {
    spawn_background_then(state, commit, Box::new(|| {}))
}

/// [`spawn_background`], calling `then` after each export that succeeded
/// (on the exporter's thread; the daemon wakes its automatic push there,
/// `crate::remote::spawn_pusher`).
pub fn spawn_background_then(
    state: StateDir,
    commit: Box<dyn Fn() + Send>,
    then: Box<dyn Fn() + Send>,
) -> Worker {
    spawn_thread(
        "opfs-export",
        Box::new(move || {
            // Made on the exporter's thread: a gix handle cannot move between
            // threads. Kept across runs (see `repo::Kept`), with the index's
            // read-only connection and the trees the export wrote.
            let mut warm = super::Warm::default();
            Box::new(move || {
                commit();
                let options = super::ExportOptions::default();
                let run = export_in(&state, None, &options, &mut |_| {}, &*commit, &mut warm);
                match run {
                    Ok(r) => {
                        if r.baseline || !r.turns.is_empty() {
                            log::info!(
                                "exported {} turn(s){} to {} in {} ms",
                                r.turns.len(),
                                if r.baseline { " and the baseline" } else { "" },
                                r.git_dir.display(),
                                r.elapsed_ms
                            );
                        }
                        then();
                    }
                    Err(e) => log::warn!("background export failed: {e}"),
                }
            })
        }),
    )
}

/// Starts a background exporter that runs `job` each time it is woken
/// through [`Worker::waker`] (wake-ups arriving during a run are merged
/// into one more run), on a thread of its own; `job` logs its own
/// failures. [`spawn_background`] is the project's; a worktree's daemon
/// runs its branch export this way.
pub fn spawn_worker(name: &str, job: Box<dyn FnMut() + Send>) -> Worker {
    spawn_thread(name, Box::new(move || job))
}

/// The job a worker runs, made on the worker's thread.
type MakeJob = Box<dyn FnOnce() -> Box<dyn FnMut()> + Send>;

/// A background thread that runs its job when woken: the daemon's
/// exporter and its automatic retention. Its owner stops it at unmount
/// ([`Worker::stop`]), so nothing it started (an export, the `git gc` an
/// export runs) still writes into the state dir once the daemon has
/// released it.
pub struct Worker {
    wake: crossbeam_channel::Sender<()>,
    stop: crossbeam_channel::Sender<Pending>,
    ended: crossbeam_channel::Receiver<()>,
}

impl Worker {
    /// A sender that wakes the worker. `try_send` on it: full means a
    /// run is already queued, and that run sees what this one would.
    pub fn waker(&self) -> crossbeam_channel::Sender<()> {
        self.wake.clone()
    }

    /// Wakes the worker (merged into a run already queued).
    pub fn wake(&self) {
        let _ = self.wake.try_send(());
    }

    /// Stops the worker: a run under way finishes, a wake-up still
    /// pending gets its run when `pending` says so (the exporter's: its
    /// turn closed before the stop), then the thread ends. Waits at most
    /// `limit` for that; `false` when the thread was still running then
    /// (it ends with the process).
    pub fn stop(self, pending: Pending, limit: std::time::Duration) -> bool {
        let _ = self.stop.try_send(pending);
        drop(self.stop);
        matches!(
            self.ended.recv_timeout(limit),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        )
    }
}

/// What [`Worker::stop`] does with a wake-up still pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// Its run happens before the thread ends.
    Run,
    /// It is dropped.
    Drop,
}

/// [`spawn_worker`] with the job made on the worker's own thread by
/// `make` (so it may hold what cannot move between threads).
fn spawn_thread(name: &str, make: MakeJob) -> Worker {
    // Size one: a wake-up sent while one is pending is merged into it.
    let (wake, rx) = crossbeam_channel::bounded::<()>(1);
    // The stop: what to do with a pending wake-up, then the sender dropped.
    let (stop, stopped) = crossbeam_channel::bounded::<Pending>(1);
    // Never sent on: the thread's end drops the sender.
    let (ended_tx, ended) = crossbeam_channel::bounded::<()>(0);
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ended = ended_tx;
            let mut job = make();
            loop {
                crossbeam_channel::select! {
                    recv(rx) -> woken => match woken {
                        Ok(()) => job(),
                        Err(_) => break,
                    },
                    recv(stopped) -> pending => {
                        if pending == Ok(Pending::Run) && rx.try_recv().is_ok() {
                            job();
                        }
                        break;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("cannot start the background {name} thread: {e}");
    }
    Worker { wake, stop, ended }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_stopped_worker_runs_the_pending_wake_up_then_ends() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
        let counted = runs.clone();
        let w = spawn_worker(
            "opfs-test",
            Box::new(move || {
                // The first run waits until the test lets it go, so the
                // second wake-up is pending when the stop comes.
                if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                    let _ = gate.recv();
                }
            }),
        );
        w.wake();
        while runs.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        w.wake();
        let stopper = std::thread::spawn(move || w.stop(Pending::Run, Duration::from_secs(60)));
        drop(gate_tx);
        assert!(stopper.join().expect("stop"), "the worker did not end");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "the pending wake-up was not run"
        );
    }

    #[test]
    fn a_stop_waits_at_most_its_limit() {
        let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
        let (started_tx, started) = crossbeam_channel::bounded::<()>(1);
        let w = spawn_worker(
            "opfs-test",
            Box::new(move || {
                let _ = started_tx.try_send(());
                let _ = gate.recv();
            }),
        );
        w.wake();
        started.recv().expect("started");
        assert!(
            !w.stop(Pending::Run, Duration::from_millis(50)),
            "a stop waited for a run that never ends"
        );
        drop(gate_tx);
    }
}
