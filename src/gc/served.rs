//! gc inside the daemon while the project is mounted ([`gc_served`]), in
//! steps under the mount's gate, and the daemon's cheap check whether a
//! policy has work ([`due`]).

use crate::capture::{Exclusive, Journal};
use crate::store::{Index, IndexError, StateDir};

use std::collections::BTreeSet;

use super::{
    counting_outside_turns, pins, plan_cut, prune_export, sweep_files, Decided, GcError, GcReport,
    Pin, PinsLock, Retention, STEP_RECORDS,
};

/// Applies `retention` inside the daemon serving the project of `journal`,
/// while the mount runs. `quiesce` blocks new mutations through the mount
/// and waits for those in flight (the mount's gate, released when the
/// returned [`Exclusive`] drops); rewinds and merges run under the same
/// gate.
///
/// Order (see `docs/crash-model.md`, "gc"):
///
/// 1. The export is held ([`crate::export::hold`]), so no background or
///    manual export reads records that are going away.
/// 2. A blob sweep begins ([`BlobStore::begin_sweep`]): from now on every
///    blob a capture, rewind or merge stores is marked and never removed
///    by this gc.
/// 3. The cut is decided on a read-only snapshot of the index (no lock:
///    captures go on).
/// 4. In steps of at most [`STEP_RECORDS`] records (or one turn), each
///    under the [`PinsLock`], the gate and the journal's lock: pending
///    capture records are committed, the pins read again (the cut moves
///    back to the oldest), and the oldest turns up to the cut deleted in
///    one transaction. Mutations wait only for one step at a time
///    ([`GcReport::paused_ms`] is the longest).
/// 5. Off the gate: blob files that no record of a kept turn names and no
///    `put` handed out since step 2 are removed; the export is pruned.
///
/// Durable after `Ok`: as [`gc`]; the index transaction commits before
/// any blob file is removed. Errors: [`GcError::Index`] when the index
/// cannot be read or written (nothing was deleted when it comes from
/// steps 3–4); [`GcError::Lock`] when the pins lock cannot be taken.
pub fn gc_served(
    journal: &Journal,
    quiesce: &dyn Fn() -> Exclusive<'static>,
    retention: Retention,
) -> Result<GcReport, GcError> {
    let state = journal.state().clone();
    let (hold, mut held_note) = match crate::export::hold(&state) {
        Ok(h) => (h, None),
        Err(e) => (None, Some(format!("the export could not be held: {e}"))),
    };
    crate::failpoint::failpoint("gc-after-hold");
    let sweep = journal.blobs().begin_sweep();
    journal.apply_pending()?;
    let planned = {
        let index = Index::open_read_only(&state.index_path())?;
        match index.turn_bounds()? {
            None => None,
            Some((first, last)) => {
                let pins = pins(&index, &state)?;
                Some(plan_cut(&index, first, last, retention, &pins)?)
            }
        }
    };
    let Some((planned_cut, planned_note)) = planned else {
        return Ok(GcReport::nothing(false));
    };
    // The pins lock before the gate: `worktree create` holds the pins lock
    // while it may open a turn through the daemon (which takes the gate).
    let mut total: Option<Decided> = None;
    let mut paused_ms = 0u64;
    loop {
        let pins_lock = PinsLock::acquire(&state)?;
        let gated = std::time::Instant::now();
        let guard = quiesce();
        let step = journal.with_index(|ix| {
            // Between the plan and the gate a worktree may have been
            // created or a rewind interrupted: their pins win.
            let pins = pins(ix, &state)?;
            let Some((first, _)) = ix.turn_bounds()? else {
                return Ok(None);
            };
            let mut cut = planned_cut.max(first);
            let mut note = planned_note.clone();
            if let Some(pin) = pins.iter().min_by_key(|p| p.turn()) {
                if cut > pin.turn() {
                    cut = pin.turn().max(first);
                    note = Some(pin.note(cut));
                }
            }
            let mut d = Decided {
                first,
                cut,
                note,
                records_deleted: 0,
                inline_removed: 0,
                inline_bytes: 0,
            };
            if cut <= first {
                return Ok(Some((d, true)));
            }
            let last = match ix.step_end(first, STEP_RECORDS)? {
                Some(end) if end < cut => {
                    d.cut = end;
                    false
                }
                _ => true,
            };
            d.records_deleted = ix.drop_turns_step(d.cut)?;
            Ok(Some((d, last)))
        });
        drop(guard);
        let held = gated.elapsed();
        paused_ms = paused_ms.max(held.as_millis() as u64);
        drop(pins_lock);
        let Some((d, last)) = step? else {
            break;
        };
        total = Some(match total {
            None => d,
            Some(t) => Decided {
                first: t.first,
                cut: d.cut,
                note: d.note,
                records_deleted: t.records_deleted + d.records_deleted,
                inline_removed: t.inline_removed + d.inline_removed,
                inline_bytes: t.inline_bytes + d.inline_bytes,
            },
        });
        if last {
            break;
        }
        crate::failpoint::failpoint("gc-between-steps");
        // The gate prefers a waiting quiesce: asked again at once, it would
        // hold off the mutations that waited for this step until the next
        // one. They get at least as long as the step took.
        std::thread::sleep(held.max(std::time::Duration::from_millis(2)));
    }
    let Some(mut d) = total else {
        return Ok(GcReport::nothing(false));
    };
    // The `blobs` rows no kept record names, read on a snapshot taken after
    // the last step (so against the cut as the pins left it), then deleted
    // in batches under the journal's lock only, each looking again at the
    // turns records can have been added to since. The same snapshot gives
    // the blob files to keep; records added from here on name blobs their
    // `put` marked.
    let (kept, unkept, open) = {
        let index = Index::open_read_only(&state.index_path())?;
        let open = index.turn_bounds()?.map_or(d.cut, |(_, last)| last);
        (
            index.kept_blobs(d.cut)?,
            index.unkept_blob_rows(d.cut)?,
            open,
        )
    };
    for batch in unkept.chunks(STEP_RECORDS as usize) {
        // Captures wait for the journal's lock meanwhile: this counts as a
        // pause too.
        let locked = std::time::Instant::now();
        let rows = journal.with_index(|ix| ix.delete_blob_rows(batch, open))?;
        paused_ms = paused_ms.max(locked.elapsed().as_millis() as u64);
        d.inline_removed += rows.inline_blobs;
        d.inline_bytes += rows.inline_bytes;
    }
    if d.cut > d.first {
        // The daemon's index may commit with `synchronous=NORMAL` (no
        // `--sync`): the deletions must be on disk before any blob file
        // goes, or a power loss could keep a record whose blob is gone.
        if let Err(e) = sync_index(&state) {
            log::warn!("cannot sync the index after gc; no blob file is removed: {e}");
            let mut report = GcReport::of(d, (0, 0), false);
            report.paused_ms = Some(paused_ms);
            report.note = Some(format!(
                "no blob file was removed: the index could not be synced ({e}); the next gc removes them"
            ));
            return Ok(report);
        }
        crate::failpoint::failpoint("gc-after-drop");
        if let Err(e) = journal.recount_stored_bytes() {
            log::warn!("cannot sum the stored bytes after gc: {e}");
        }
    }
    crate::failpoint::failpoint("gc-before-sweep");
    let mut swept = sweep_files(
        &sweep,
        &state.blobs_dir(),
        &kept,
        &BTreeSet::new(),
        false,
        &mut |_, _| {},
    );
    drop(sweep);
    // The range packs of the dropped turns (no row names them any more).
    let packs = journal.blobs().remove_packs_before(d.cut, false);
    swept = (swept.0 + packs.0, swept.1 + packs.1);
    let cut = d.cut;
    let mut report = GcReport::of(d, swept, false);
    report.paused_ms = Some(paused_ms);
    let note = match (report.note.take(), held_note.take()) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    (report.export, report.note) = prune_export(&state, hold.as_ref(), cut, false, note);
    Ok(report)
}

/// Makes every committed transaction of the index at `state` durable by
/// fsyncing its write-ahead log, where a commit lands. (A checkpoint that
/// moved frames into the database file synced that file itself: SQLite
/// does with `synchronous=NORMAL` or above.) The database file itself is
/// never opened here: closing a second descriptor of it would drop the
/// POSIX locks SQLite holds on it in this process.
///
/// Errors: the log exists and cannot be opened or synced.
fn sync_index(state: &StateDir) -> std::io::Result<()> {
    let mut wal = state.index_path().into_os_string();
    wal.push("-wal");
    match std::fs::File::open(&wal) {
        Ok(f) => f.sync_all(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether the daemon's automatic retention has work: more turns than
/// `retention.keep`, or (with a byte budget) more stored bytes than it,
/// and a turn older than every pin and than the open turn to drop. Cost:
/// three lookups in the index (the oldest and newest turn, the running
/// restores), one listing of the worktrees, and the journal's running
/// total of stored bytes ([`Journal::stored_bytes`]; its first call after
/// a start sums the `blobs` table once). No scan of records or blobs.
///
/// Errors: the index cannot be read.
pub fn due(journal: &Journal, retention: Retention) -> Result<bool, IndexError> {
    let (bounds, pins, retention) = journal.with_index(|ix| {
        let bounds = ix.turn_bounds()?;
        let retention = match bounds {
            Some((first, last)) => counting_outside_turns(ix, first, last, retention)?,
            None => retention,
        };
        Ok((bounds, pins(ix, journal.state())?, retention))
    })?;
    let Some((first, last)) = bounds else {
        return Ok(false);
    };
    let floor = pins.iter().map(Pin::turn).min().unwrap_or(last).min(last);
    if first >= floor {
        return Ok(false);
    }
    if let Some(by) = retention.ended_by(crate::store::index::now_ns()) {
        // The oldest turn is too young to go: nothing is.
        if journal.with_index(|ix| ix.first_turn_ended_after(by))? <= first {
            return Ok(false);
        }
    }
    let by_count = (last + 1).saturating_sub(retention.keep.max(1)) > first;
    let by_bytes = match retention.max_bytes {
        Some(budget) => journal.stored_bytes()? > budget,
        None => false,
    };
    Ok(by_count || by_bytes)
}
