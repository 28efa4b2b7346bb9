//! Crash injection: named points where a test can make the process die.

/// Crash injection for the crash tests (see `docs/crash-model.md`).
///
/// With `OPFS_FAILPOINT=NAME:N` in the daemon's environment, the N-th time
/// (counting from 1) the process passes the failpoint `NAME` it sends
/// itself SIGKILL, exactly as a crash at that instant would end it: no
/// destructor, no flush. Without the variable (the normal case) a
/// failpoint costs one atomic load after the first call.
///
/// Failpoints: `rewind-begin` (the rewind turn is open, the restore not yet
/// marked running), `rewind-after-capture` (after each path's current state
/// is recorded), `rewind-after-step` (after each path operation of the
/// executor), `rewind-before-done` (all steps done, restore still running),
/// `rewind-after-done` (restore done, no new agent turn yet),
/// `rewind-patch-run` (after each run an in-place restore of a file kept
/// as ranges wrote back), `merge-begin` (a worktree merge's turn is open
/// and marked running, nothing written), `merge-before-done` (every step
/// of the merge done, still marked running), and in the
/// journal `capture-after-blob` (a pre-image's bytes are stored, its record
/// is not) and `capture-after-record` (the record is committed, the
/// mutation has not run).
pub fn failpoint(name: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    let armed = ARMED.get_or_init(|| {
        let v = std::env::var("OPFS_FAILPOINT").ok()?;
        let (n, count) = v.rsplit_once(':').unwrap_or((v.as_str(), "1"));
        Some((n.to_string(), count.parse().ok()?))
    });
    let Some((armed_name, at)) = armed else {
        return;
    };
    if armed_name == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *at {
        log::error!("failpoint {name}:{at} reached: killing this process");
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}
