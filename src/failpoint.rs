//! Crash injection: named points where a test can make the process die.
//! The table of armed points is the one global of the library: the command
//! line arms it once at start ([`arm`]), so no layer passes it down.

/// Crash injection for the crash tests (see `docs/crash-model.md`).
///
/// With `OPFS_FAILPOINT=NAME:N` in the daemon's environment, the N-th time
/// (counting from 1) the process passes the failpoint `NAME` it sends
/// itself SIGKILL, exactly as a crash at that instant would end it: no
/// destructor, no flush. With `OPFS_FAILPOINT=NAME:N:pause=MS` it sleeps
/// MS milliseconds there instead (logged as a warning first), so a test can
/// act inside a window that is otherwise too short to hit. The command
/// line reads the variable and passes it to [`arm`]. Without it (the
/// normal case) a failpoint costs one atomic load.
///
/// Failpoints: `rewind-begin` (the rewind turn is open, the restore not yet
/// marked running), `rewind-after-capture` (after each path's current state
/// is recorded, the restore still not marked running), `rewind-running`
/// (every record committed, the restore marked running, nothing written), `rewind-after-step` (after each path operation of the
/// executor), `rewind-before-done` (all steps done, restore still running),
/// `rewind-after-done` (restore done, no new agent turn yet),
/// `rewind-patch-run` (after each run an in-place restore of a file kept
/// as ranges wrote back), `merge-begin` (a worktree merge's turn is open
/// and marked running, nothing written), `merge-before-done` (every step
/// of the merge done, still marked running), and in the
/// journal `capture-after-blob` (a pre-image's bytes are stored, its record
/// is not) and `capture-after-record` (the record is committed, the
/// mutation has not run), `kept-after-removal` (a removed file was kept:
/// its record is in the capture log, the removal done, the hash pending),
/// `before-removal` (an unlink's pre-image is recorded and the journal's
/// lock released, the unlink has not run), and in gc `gc-after-drop` (the turns are
/// deleted from the index, no blob file is removed yet), `gc-before-sweep`
/// (while mounted: the kept blobs are read, the sweep has not begun) and
/// `gc-between-steps` (while mounted: one step of the deletions is
/// committed, the next has not begun), `gc-after-remove` (after each blob
/// file removed), `gc-after-hold` (while mounted: the export is held, or
/// found missing, nothing dropped yet), in the export
/// `export-before-turns` (the baseline is written and the closed turns
/// listed, their records not loaded yet), and
/// `push-after-git` (the remote took a push, `push.json` does not say so
/// yet), and
/// `worktree-before-meta` (`worktree create` checked its base turn and has
/// not written the metadata that pins it).
pub fn failpoint(name: &str) {
    let Some((at, action)) = reached(name) else {
        return;
    };
    match action {
        Action::Pause(ms) => {
            log::warn!("failpoint {name}:{at} reached: pausing for {ms} ms");
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        Action::Kill => {
            log::error!("failpoint {name}:{at} reached: killing this process");
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
        }
        Action::Enospc { .. } => {}
    }
}

/// An error-injecting failpoint for the failure tests: with
/// `OPFS_FAILPOINT=NAME:N:enospc` the N-th pass through `NAME` returns
/// `ENOSPC` (the others `Ok`); with `NAME:N:enospc+` the N-th and every
/// later pass does. The restore executor passes `rewind-write` before each
/// write to the project, and a rewind `rewind-commit` before it commits
/// its records and `rewind-done` before it marks its restore done
/// (`docs/crash-model.md`, "A rewind that fails").
/// A rewind also passes `rewind-close` before it closes its turn after
/// such a failure. Several failpoints are armed at once as a
/// comma-separated list (`rewind-commit:1:enospc,rewind-close:1:enospc`),
/// each counting its own passes.
/// Without the variable: `Ok` after one atomic load.
///
/// Errors: `ENOSPC` when armed as above.
pub fn failpoint_error(name: &str) -> std::io::Result<()> {
    match reached(name) {
        Some((at, Action::Enospc { .. })) => {
            log::warn!("failpoint {name}:{at} reached: failing with ENOSPC");
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        }
        _ => Ok(()),
    }
}

/// What an armed failpoint does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// SIGKILL (the default).
    Kill,
    /// Sleep this many ms.
    Pause(u64),
    /// [`failpoint_error`] fails; `sticky`: on every later pass too.
    Enospc {
        /// Every pass from the N-th on, not only the N-th.
        sticky: bool,
    },
}

/// One armed failpoint: its name, the pass it acts on, what it does, and
/// the passes so far.
type Armed = Vec<(String, u64, Action, std::sync::atomic::AtomicU64)>;

/// The failpoints [`arm`] armed; unset (none armed) until it is called.
static ARMED: std::sync::OnceLock<Armed> = std::sync::OnceLock::new();

/// Arms the failpoints `spec` lists: the value of `OPFS_FAILPOINT`, which
/// only the command line reads (`cli::Env`) and hands here once at start,
/// before any failpoint can be passed. `None` (the variable unset) arms
/// none. Entries that do not parse are ignored. A second call changes
/// nothing and returns `false`.
pub fn arm(spec: Option<&str>) -> bool {
    let armed = spec
        .map(|v| {
            v.split(',')
                .filter_map(parse)
                .map(|(n, at, a)| (n, at, a, std::sync::atomic::AtomicU64::new(0)))
                .collect()
        })
        .unwrap_or_default();
    ARMED.set(armed).is_ok()
}

/// The hit count and action when this pass through `name` is the armed
/// one (or, for a sticky action, a later one).
fn reached(name: &str) -> Option<(u64, Action)> {
    use std::sync::atomic::Ordering;
    let (_, at, action, hits) = ARMED.get()?.iter().find(|(n, ..)| n == name)?;
    let hit = hits.fetch_add(1, Ordering::SeqCst) + 1;
    let sticky = matches!(action, Action::Enospc { sticky: true });
    (hit == *at || (sticky && hit > *at)).then_some((*at, *action))
}

/// `NAME`, `NAME:N`, `NAME:N:pause=MS`, `NAME:N:enospc` or
/// `NAME:N:enospc+` as (name, N, action).
fn parse(v: &str) -> Option<(String, u64, Action)> {
    let mut parts = v.splitn(3, ':');
    let name = parts.next()?.to_string();
    let at = match parts.next() {
        Some(n) => n.parse().ok()?,
        None => 1,
    };
    let action = match parts.next() {
        Some("enospc") => Action::Enospc { sticky: false },
        Some("enospc+") => Action::Enospc { sticky: true },
        Some(action) => Action::Pause(action.strip_prefix("pause=")?.parse().ok()?),
        None => Action::Kill,
    };
    Some((name, at, action))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_names_counts_and_pauses() {
        use super::Action;
        assert_eq!(super::parse("a-b"), Some(("a-b".into(), 1, Action::Kill)));
        assert_eq!(super::parse("a-b:3"), Some(("a-b".into(), 3, Action::Kill)));
        assert_eq!(
            super::parse("a-b:2:pause=500"),
            Some(("a-b".into(), 2, Action::Pause(500)))
        );
        assert_eq!(
            super::parse("a-b:2:enospc+"),
            Some(("a-b".into(), 2, Action::Enospc { sticky: true }))
        );
        assert_eq!(super::parse("a-b:x"), None);
        assert_eq!(super::parse("a-b:2:sleep"), None);
    }
}
