//! `opfs gc`: retention (design §3).
//!
//! Keeps the newest `keep` turns (default [`DEFAULT_KEEP`]) and, with a byte
//! budget, drops further old turns until the blobs the kept records refer
//! to fit in it. The open turn is always kept. Dropping turns older than
//! turn C deletes their records only: a path's state at the start of any
//! kept turn N >= C is its earliest record at or after N, which is still
//! there, so every kept rewind point stays exact. Blobs no kept record
//! refers to are then removed.
//!
//! Never collected: a **pinned** turn and every turn after it ([`Pin`]):
//! the rewound-to turn of an unfinished restore (while it is `running`),
//! and the base turn of every worktree (its lower layer is read from the
//! records from that turn on).
//!
//! Two ways to run it: [`gc`] on the state dir while nothing is mounted
//! (under the state lock, which [`Offline::Locked`] borrows), and
//! [`gc_served`] inside the daemon while the project is mounted, each
//! step under the mount's gate (an [`crate::capture::Exclusive`]; see its
//! order; `docs/design.md`, "Retention while mounted"). A dry run
//! ([`Offline::DryRun`]) only reads and may run beside a daemon (its
//! figures are then a snapshot).
//! [`due`] is the daemon's cheap check whether a configured policy has
//! work after a turn.
//!
//! Order and durability: the records, turns and `blobs` rows are deleted
//! and committed (with `synchronous=FULL`, or the daemon's commit followed
//! by an fsync of the index's WAL) before any blob file is removed. A
//! crash or power loss in between leaves unreferenced blob files (removed
//! by the next gc), never a record whose blob is gone. A blob a capture,
//! rewind or merge stores while a daemon's gc runs is never removed by it
//! (the blob store's [`Sweep`]).
//!
//! The export (`export.git`) is pruned after: the commits of dropped
//! turns leave its history and it is packed ([`crate::export::prune`]).

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::record::Hash;
use crate::store::{BlobStore, Index, IndexError, StateDir, Sweep};

mod pins;
mod served;

pub use crate::state::lock::PinsLock;
pub use pins::{pins, Pin};
pub use served::{due, gc_served};

/// Turns kept when no other number is given.
pub const DEFAULT_KEEP: u64 = 100;

/// What to keep.
#[derive(PartialEq, Eq, Debug, Clone, Copy)]
pub struct Retention {
    /// Keep at least the newest this many turns (at least 1).
    pub keep: u64,
    /// Drop more old turns until referenced blobs take at most this many
    /// bytes (the open turn is kept whatever its size).
    pub max_bytes: Option<u64>,
    /// Drop only turns that ended at least this many days ago (`None`: any
    /// age). The default policy of a mount with no `[retention]` table
    /// ([`Retention::automatic_default`]).
    pub min_age_days: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep: DEFAULT_KEEP,
            max_bytes: None,
            min_age_days: None,
        }
    }
}

/// The days a turn is kept at least by the default automatic policy.
pub const DEFAULT_MIN_AGE_DAYS: u64 = 30;

impl Retention {
    /// What a mount applies by itself when the user configured no
    /// retention: a turn goes once it is older than the newest
    /// [`DEFAULT_KEEP`] turns *and* ended more than
    /// [`DEFAULT_MIN_AGE_DAYS`] days ago (`docs/cli.md` "Automatic
    /// retention"), so the store stops growing without bound while
    /// nothing from the last month or the last 100 turns goes.
    pub fn automatic_default() -> Retention {
        Retention {
            keep: DEFAULT_KEEP,
            max_bytes: None,
            min_age_days: Some(DEFAULT_MIN_AGE_DAYS),
        }
    }

    /// The newest `ended_at` (ns) a turn may have and still be dropped
    /// under [`Retention::min_age_days`], at `now_ns`; `None`: any.
    fn ended_by(&self, now_ns: i64) -> Option<i64> {
        self.min_age_days.map(|d| {
            let age = i64::try_from(d.saturating_mul(86_400_000_000_000)).unwrap_or(i64::MAX);
            now_ns.saturating_sub(age)
        })
    }
}

/// Why gc failed. Nothing was deleted unless the message says so.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// The index could not be read or written.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The capture log could not be moved into the index first.
    #[error(transparent)]
    Replay(#[from] crate::store::ReplayError),
    /// The lock on the pins ([`PinsLock`]) could not be taken.
    #[error(transparent)]
    Lock(#[from] crate::state::lock::PinsLockError),
}

/// What gc did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GcReport {
    /// Turns dropped: `[first, last]`, or `None`.
    pub dropped_turns: Option<(u64, u64)>,
    /// The oldest turn kept.
    pub oldest_kept: Option<u64>,
    /// Pre-image records deleted.
    pub records_deleted: u64,
    /// Blobs removed: files, inline blobs deleted with their rows, and the
    /// range packs of the dropped turns.
    pub blobs_removed: u64,
    /// Bytes of the blobs removed.
    pub bytes_freed: u64,
    /// True when nothing was changed.
    pub dry_run: bool,
    /// Why fewer turns were dropped than asked, if so; also a failure to
    /// prune the export (gc itself then succeeded).
    pub note: Option<String>,
    /// What happened to the export (`export.git` in the state dir): the
    /// commits of dropped turns taken out, then packed. `None` without an
    /// export.
    pub export: Option<crate::export::PruneReport>,
    /// Run by the daemon while mounted: the longest time (ms) mutations
    /// through the mount waited for gc (one step of its deletions under
    /// the gate, or one batch of `blobs` rows under the journal's lock).
    /// `None` when nothing was mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_ms: Option<u64>,
}

/// The oldest turn to keep among `first..=last`: the policy's choice
/// (`kept_bytes(from)` is the blob bytes the records of turns `>= from`
/// name), moved back to the oldest pin, with the note saying so.
fn cut_point(
    first: u64,
    last: u64,
    retention: Retention,
    pins: &[Pin],
    kept_bytes: impl Fn(u64) -> Result<u64, IndexError>,
) -> Result<(u64, Option<String>), IndexError> {
    let keep = retention.keep.max(1);
    let mut cut = (last + 1).saturating_sub(keep).max(first);
    if let Some(budget) = retention.max_bytes {
        while cut < last && kept_bytes(cut)? > budget {
            cut += 1;
        }
    }
    let mut note = None;
    if let Some(pin) = pins.iter().min_by_key(|p| p.turn()) {
        if cut > pin.turn() {
            cut = pin.turn().max(first);
            note = Some(pin.note(cut));
        }
    }
    Ok((cut, note))
}

/// [`cut_point`] over the turns `first..=last` of `index`; with a byte
/// budget, the bytes each cut keeps come from one pass over the records
/// ([`Index::bytes_by_last_use`]).
fn plan_cut(
    index: &Index,
    first: u64,
    last: u64,
    retention: Retention,
    pins: &[Pin],
) -> Result<(u64, Option<String>), IndexError> {
    let by_last = match retention.max_bytes {
        Some(_) => index.bytes_by_last_use()?,
        None => Default::default(),
    };
    let retention = counting_outside_turns(index, first, last, retention)?;
    let (cut, note) = cut_point(first, last, retention, pins, |from| {
        Ok(by_last.range(from..).map(|(_, b)| *b).sum())
    })?;
    // With a minimum age, no turn that ended since (or is open) goes.
    match retention.ended_by(crate::store::index::now_ns()) {
        Some(by) => Ok((cut.min(index.first_turn_ended_after(by)?).max(first), note)),
        None => Ok((cut, note)),
    }
}

/// `retention` with `keep` widened so that it counts only the turns
/// opened from outside `opfs run`'s sandbox (`docs/sandbox.md`, "Turns
/// opened from inside"): the newest `keep` such turns and every turn after
/// the oldest of them are kept, so no number of turns opened from inside
/// pushes an older turn out.
fn counting_outside_turns(
    index: &Index,
    first: u64,
    last: u64,
    retention: Retention,
) -> Result<Retention, IndexError> {
    let from = index
        .nth_newest_outside_turn(retention.keep)?
        .unwrap_or(first)
        .max(first);
    Ok(Retention {
        keep: (last + 1).saturating_sub(from).max(retention.keep),
        ..retention
    })
}

/// Records a daemon-side gc deletes in one step under the mount's gate
/// (a turn holding more is deleted in one step of its own): mutations wait
/// for one step at a time, whatever gc drops in all.
pub const STEP_RECORDS: u64 = 2048;

/// What the first phase of gc decided (and, unless a dry run, did to the
/// index): the cut, and what the records before it held.
struct Decided {
    first: u64,
    cut: u64,
    note: Option<String>,
    records_deleted: u64,
    inline_removed: u64,
    inline_bytes: u64,
}

/// Decides the cut among the turns `index` holds and, unless `dry_run`,
/// deletes the turns before it ([`Index::drop_turns_before`]). `None` when
/// there is no turn.
fn decide_and_drop(
    index: &mut Index,
    retention: Retention,
    pins: &[Pin],
    dry_run: bool,
) -> Result<Option<Decided>, IndexError> {
    let Some((first, last)) = index.turn_bounds()? else {
        return Ok(None);
    };
    let (cut, note) = plan_cut(index, first, last, retention, pins)?;
    drop_before(index, first, cut, note, dry_run).map(Some)
}

/// Counts what the turns before `cut` hold and, unless `dry_run`, deletes
/// them.
fn drop_before(
    index: &mut Index,
    first: u64,
    cut: u64,
    note: Option<String>,
    dry_run: bool,
) -> Result<Decided, IndexError> {
    // Inline blobs (small files) go with their rows; a real run counts
    // what its deletions deleted, a dry run what they would.
    let (records_deleted, inline_removed, inline_bytes) = if cut <= first {
        (0, 0, 0)
    } else if dry_run {
        let (n, bytes) = index.unkept_inline_blobs(cut)?;
        (index.records_before(cut)?, n, bytes)
    } else {
        let d = index.drop_turns_before(cut)?;
        (d.records, d.inline_blobs, d.inline_bytes)
    };
    Ok(Decided {
        first,
        cut,
        note,
        records_deleted,
        inline_removed,
        inline_bytes,
    })
}

/// Removes (or, with `dry_run`, counts) every blob file whose hash is
/// neither in `kept` nor in `logged` nor handed out by a `put` since
/// `sweep` began; returns `(files, bytes)`. Names that are not blobs are
/// left alone (`opfs verify` reports them); files that cannot be removed
/// are skipped, for the next gc. Calls `progress(done, total)` per blob
/// folder (`total` at most 256), last with `done == total`.
fn sweep_files(
    sweep: &Sweep<'_>,
    dir: &Path,
    kept: &BTreeSet<Hash>,
    logged: &BTreeSet<Hash>,
    dry_run: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> (u64, u64) {
    let mut removed = 0;
    let mut bytes = 0;
    let Ok(dirs) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    let dirs: Vec<_> = dirs
        .flatten()
        .filter(|d| d.file_name().len() == 2)
        .collect();
    let total = dirs.len() as u64;
    for (i, d) in dirs.into_iter().enumerate() {
        progress(i as u64, total);
        let dname = d.file_name().to_string_lossy().into_owned();
        let Ok(files) = std::fs::read_dir(d.path()) else {
            continue;
        };
        for f in files.flatten() {
            let full = format!("{dname}{}", f.file_name().to_string_lossy());
            let Ok(h) = blake3::Hash::from_hex(&full) else {
                continue; // not a blob: verify reports it, gc leaves it
            };
            let hash: Hash = *h.as_bytes();
            if kept.contains(&hash) || logged.contains(&hash) {
                continue;
            }
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if dry_run || matches!(sweep.remove(&hash), Ok(true)) {
                removed += 1;
                bytes += len;
                if !dry_run {
                    crate::failpoint::failpoint("gc-after-remove");
                }
            }
        }
    }
    progress(total, total);
    (removed, bytes)
}

/// Prunes the export after gc kept turns from `cut` on (as the holder of
/// `hold`, when given); a failure becomes part of the note (gc itself
/// succeeded).
fn prune_export(
    state: &StateDir,
    hold: Option<&crate::export::ExportHold>,
    cut: u64,
    dry_run: bool,
    note: Option<String>,
) -> (Option<crate::export::PruneReport>, Option<String>) {
    let pruned = match hold {
        Some(h) => crate::export::prune_held(state, h, cut, dry_run),
        None => crate::export::prune(state, cut, dry_run),
    };
    match pruned {
        Ok(r) => (r, note),
        Err(e) => {
            let failed = format!("the export was not pruned: {e} (the next gc tries again)");
            let note = Some(match note {
                Some(n) => format!("{n}; {failed}"),
                None => failed,
            });
            (None, note)
        }
    }
}

impl GcReport {
    /// The report of a gc that found no turn.
    fn nothing(dry_run: bool) -> GcReport {
        GcReport {
            dropped_turns: None,
            oldest_kept: None,
            records_deleted: 0,
            blobs_removed: 0,
            bytes_freed: 0,
            dry_run,
            note: None,
            export: None,
            paused_ms: None,
        }
    }

    fn of(d: Decided, swept: (u64, u64), dry_run: bool) -> GcReport {
        GcReport {
            dropped_turns: (d.cut > d.first).then(|| (d.first, d.cut - 1)),
            oldest_kept: Some(d.cut),
            records_deleted: d.records_deleted,
            blobs_removed: d.inline_removed + swept.0,
            bytes_freed: d.inline_bytes + swept.1,
            dry_run,
            note: d.note,
            export: None,
            paused_ms: None,
        }
    }
}

/// How an unmounted gc runs: [`Offline::DryRun`] only reads and may run
/// beside a daemon (its figures are then a snapshot); a real one runs
/// under the state lock it borrows, so nothing is mounted and no other
/// command writes the state dir (a daemon applies retention with
/// [`gc_served`]). A gc that deletes without the lock does not compile.
#[derive(Debug, Clone, Copy)]
pub enum Offline<'a> {
    /// Counts what would go; writes nothing.
    DryRun,
    /// Deletes, under this state lock.
    Locked(&'a crate::state::lock::StateLock),
}

impl Offline<'_> {
    fn dry_run(self) -> bool {
        matches!(self, Offline::DryRun)
    }
}

/// Applies `retention` to the state dir, keeping every pinned turn
/// ([`pins`]), as `how` says ([`Offline`]).
///
/// Durable after `Ok`: the deletions are committed (power-loss safe)
/// before any blob file is removed. Errors: the capture log cannot be
/// moved into the index ([`GcError::Replay`]), the index cannot be read or
/// written ([`GcError::Index`]); blob files that cannot be removed are
/// skipped (not counted), for the next gc.
pub fn gc(state: &StateDir, retention: Retention, how: Offline<'_>) -> Result<GcReport, GcError> {
    gc_with_progress(state, retention, how, &mut |_, _| {})
}

/// [`gc`], calling `progress(done, total)` while it sweeps the blob store,
/// the part whose cost grows with the store: `total` is the number of
/// blob folders (at most 256), `done` those swept so far; the last call
/// has `done == total`. The library never prints; the CLI draws a bar.
///
/// Errors and durability: as [`gc`].
pub fn gc_with_progress(
    state: &StateDir,
    retention: Retention,
    how: Offline<'_>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<GcReport, GcError> {
    let dry_run = how.dry_run();
    // Opening the index upgrades an older schema in place; a dry run only
    // reads (it may run beside a daemon).
    let mut index = if dry_run {
        Index::open_read_only(&state.index_path())?
    } else {
        Index::open(&state.index_path(), true)?
    };
    // Records still in the capture log (a crash) name blobs and turns; they
    // go into the index first so the decisions below see them. A dry run
    // writes nothing, so it keeps every blob the log names instead.
    let mut logged = BTreeSet::new();
    if dry_run {
        let entries = crate::store::log::read(&state.capture_log_path())
            .map_err(crate::store::ReplayError::from)?;
        for e in entries {
            if let crate::record::PreImage::File { blob, .. } = e.pre {
                logged.insert(blob);
            }
        }
    } else {
        let kept = crate::store::KeptDir::open(&state.kept_dir()).map_err(|e| {
            crate::store::ReplayError::Log(crate::store::LogError::Io {
                path: state.kept_dir(),
                source: e,
            })
        })?;
        let blobs =
            BlobStore::open(&state.blobs_dir(), false).map_err(crate::store::ReplayError::from)?;
        crate::store::replay_capture_log(
            &mut index,
            &state.capture_log_path(),
            &kept,
            &blobs,
            false,
        )?;
    }
    let pins_lock = if dry_run {
        None
    } else {
        Some(PinsLock::acquire(state)?)
    };
    let pins = pins(&index, state)?;
    let Some(d) = decide_and_drop(&mut index, retention, &pins, dry_run)? else {
        return Ok(GcReport::nothing(dry_run));
    };
    drop(pins_lock);
    if !dry_run && d.cut > d.first {
        crate::failpoint::failpoint("gc-after-drop");
    }
    // Blob files no kept record names (including leftovers of earlier runs
    // and of failed captures). No `put` runs beside this one.
    let kept = index.kept_blobs(d.cut)?;
    drop(index);
    let store = BlobStore::open_existing(&state.blobs_dir());
    let sweep = store.begin_sweep();
    let mut swept = sweep_files(
        &sweep,
        &state.blobs_dir(),
        &kept,
        &logged,
        dry_run,
        progress,
    );
    drop(sweep);
    let packs = store.remove_packs_before(d.cut, dry_run);
    swept = (swept.0 + packs.0, swept.1 + packs.1);
    if !dry_run {
        store.clear_tmp();
    }
    let cut = d.cut;
    let mut report = GcReport::of(d, swept, dry_run);
    (report.export, report.note) = prune_export(state, None, cut, dry_run, report.note.take());
    Ok(report)
}

#[cfg(test)]
mod tests;
