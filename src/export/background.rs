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
/// The thread ends when every sender is dropped.
pub fn spawn_background(
    state: StateDir,
    commit: Box<dyn Fn() + Send>,
) -> crossbeam_channel::Sender<()> {
    spawn_background_then(state, commit, Box::new(|| {}))
}

/// [`spawn_background`], calling `then` after each export that succeeded
/// (on the exporter's thread; the daemon wakes its automatic push there,
/// `crate::remote::spawn_pusher`).
pub fn spawn_background_then(
    state: StateDir,
    commit: Box<dyn Fn() + Send>,
    then: Box<dyn Fn() + Send>,
) -> crossbeam_channel::Sender<()> {
    spawn_thread(Box::new(move || {
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
    }))
}

/// Starts a background exporter that runs `job` each time it is woken
/// through the returned sender (wake-ups arriving during a run are merged
/// into one more run), on a thread of its own; `job` logs its own
/// failures. [`spawn_background`] is the project's; a worktree's daemon
/// runs its branch export this way.
///
/// The thread ends when every sender is dropped.
pub fn spawn_worker(job: Box<dyn FnMut() + Send>) -> crossbeam_channel::Sender<()> {
    spawn_thread(Box::new(move || job))
}

/// The job a worker runs, made on the worker's thread.
type MakeJob = Box<dyn FnOnce() -> Box<dyn FnMut()> + Send>;

/// [`spawn_worker`] with the job made on the worker's own thread by
/// `make` (so it may hold what cannot move between threads).
fn spawn_thread(make: MakeJob) -> crossbeam_channel::Sender<()> {
    // Size one: a wake-up sent while one is pending is merged into it.
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    let spawned = std::thread::Builder::new()
        .name("opfs-export".into())
        .spawn(move || {
            let mut job = make();
            for () in rx {
                job();
            }
        });
    if let Err(e) = spawned {
        log::warn!("cannot start the background exporter: {e}");
    }
    tx
}
