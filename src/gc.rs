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
//! Order and durability: the records, turns and `blobs` rows are deleted in
//! one transaction (committed with `synchronous=FULL`); blob files are
//! removed only after it commits. A crash or power loss in between leaves
//! unreferenced blob files (removed by the next gc), never a record whose
//! blob is gone. The caller must hold the state lock (no daemon running),
//! since a daemon writes a blob before the record naming it; a dry run
//! only reads and may run beside a daemon (its figures are then a
//! snapshot).
//!
//! The export (`export.git`) is pruned after: the commits of dropped
//! turns leave its history and it is packed ([`crate::export::prune`]).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::record::Hash;
use crate::store::{BlobStore, Index, IndexError, StateDir};

/// Turns kept when no other number is given.
pub const DEFAULT_KEEP: u64 = 100;

/// What to keep.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Keep at least the newest this many turns (at least 1).
    pub keep: u64,
    /// Drop more old turns until referenced blobs take at most this many
    /// bytes (the open turn is kept whatever its size).
    pub max_bytes: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep: DEFAULT_KEEP,
            max_bytes: None,
        }
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
}

/// A turn gc must keep, with every turn after it, whatever the
/// [`Retention`] asks: a rewind point something still needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    /// A restore marked `running` that did not finish (the process died
    /// during a rewind): the next start finishes it from the records of
    /// every turn from `rewound_to` on.
    Restore {
        /// The turn the restore is recorded as.
        rewind_turn: u64,
        /// The turn whose start it restores (the pinned turn).
        rewound_to: u64,
    },
    /// A worktree's base turn: its lower layer is the project at the start
    /// of that turn, read from the records of every turn from it on.
    Worktree {
        /// The worktree's name.
        name: String,
        /// Its base turn (the pinned turn).
        base: u64,
    },
}

impl Pin {
    /// The oldest turn this pin keeps.
    pub fn turn(&self) -> u64 {
        match self {
            Pin::Restore { rewound_to, .. } => *rewound_to,
            Pin::Worktree { base, .. } => *base,
        }
    }

    /// Why turns from `cut` on were kept, for [`GcReport::note`].
    fn note(&self, cut: u64) -> String {
        match self {
            Pin::Restore {
                rewind_turn,
                rewound_to,
            } => format!(
                "kept turns from {cut}: the unfinished rewind to turn {rewound_to} (recorded as turn {rewind_turn}) needs them"
            ),
            Pin::Worktree { name, base } => format!(
                "kept turns from {cut}: worktree {name:?} shows the project at turn {base} (`opfs worktree discard {name}` releases them)"
            ),
        }
    }
}

/// Every pin of the store behind `index`: the unfinished restores, and the
/// base turn of each worktree of the project whose state dir is `state`.
///
/// Errors: the index cannot be read.
pub fn pins(index: &Index, state: &StateDir) -> Result<Vec<Pin>, IndexError> {
    let mut pins: Vec<Pin> = index
        .running_restores()?
        .into_iter()
        .map(|(rewind_turn, rewound_to)| Pin::Restore {
            rewind_turn,
            rewound_to,
        })
        .collect();
    pins.extend(
        crate::worktree::list(state)
            .into_iter()
            .map(|(wt, meta)| Pin::Worktree {
                name: wt.name,
                base: meta.base_turn,
            }),
    );
    Ok(pins)
}

/// What gc did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    /// Turns dropped: `[first, last]`, or `None`.
    pub dropped_turns: Option<(u64, u64)>,
    /// The oldest turn kept.
    pub oldest_kept: Option<u64>,
    /// Pre-image records deleted.
    pub records_deleted: u64,
    /// Blobs removed: files, and inline blobs deleted with their rows.
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

/// Applies `retention` to the state dir, keeping every pinned turn
/// ([`pins`]). The caller holds the state lock.
///
/// Durable after `Ok`: the deletions are committed (power-loss safe)
/// before any blob file is removed. Errors: the capture log cannot be
/// moved into the index ([`GcError::Replay`]), the index cannot be read or
/// written ([`GcError::Index`]); blob files that cannot be removed are
/// skipped (not counted), for the next gc.
pub fn gc(state: &StateDir, retention: Retention, dry_run: bool) -> Result<GcReport, GcError> {
    gc_with_progress(state, retention, dry_run, &mut |_, _| {})
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
    dry_run: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<GcReport, GcError> {
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
        crate::store::replay_capture_log(&mut index, &state.capture_log_path(), false)?;
    }
    let Some((first, last)) = index.turn_bounds()? else {
        return Ok(GcReport {
            dropped_turns: None,
            oldest_kept: None,
            records_deleted: 0,
            blobs_removed: 0,
            bytes_freed: 0,
            dry_run,
            note: None,
            export: None,
        });
    };
    let pins = pins(&index, state)?;
    let (cut, note) = cut_point(first, last, retention, &pins, |from| {
        index.kept_blob_bytes(from)
    })?;
    let records_deleted = index.records_before(cut)?;
    let kept = index.kept_blobs(cut)?;
    // Inline blobs (small files) go with their rows.
    let (inline_removed, inline_bytes) = index.unkept_inline_blobs(cut)?;
    if !dry_run && cut > first {
        index.drop_turns_before(cut)?;
    }
    drop(index);
    // Blob files no kept record names (including leftovers of earlier runs
    // and of failed captures).
    let store = BlobStore::open_existing(&state.blobs_dir());
    let mut blobs_removed = inline_removed;
    let mut bytes_freed = inline_bytes;
    if let Ok(dirs) = std::fs::read_dir(state.blobs_dir()) {
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
                let path = store.path_of(&hash);
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                if dry_run || std::fs::remove_file(&path).is_ok() {
                    blobs_removed += 1;
                    bytes_freed += len;
                }
            }
        }
        progress(total, total);
    }
    if !dry_run {
        store.clear_tmp();
    }
    let (export, note) = match crate::export::prune(state, cut, dry_run) {
        Ok(r) => (r, note),
        Err(e) => {
            let failed = format!("the export was not pruned: {e} (the next gc tries again)");
            let note = Some(match note {
                Some(n) => format!("{n}; {failed}"),
                None => failed,
            });
            (None, note)
        }
    };
    Ok(GcReport {
        dropped_turns: (cut > first).then(|| (first, cut - 1)),
        oldest_kept: Some(cut),
        records_deleted,
        blobs_removed,
        bytes_freed,
        dry_run,
        note,
        export,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_keeps_the_newest_turns_and_every_pinned_one() {
        let never = |_| -> Result<u64, IndexError> { Ok(0) };
        let keep = |keep| Retention {
            keep,
            max_bytes: None,
        };
        assert_eq!(cut_point(1, 10, keep(3), &[], never).ok(), Some((8, None)));
        assert_eq!(
            cut_point(4, 10, keep(100), &[], never).ok(),
            Some((4, None))
        );
        assert_eq!(
            cut_point(1, 10, keep(u64::MAX), &[], never).ok(),
            Some((1, None))
        );
        let pin = Pin::Restore {
            rewind_turn: 9,
            rewound_to: 5,
        };
        let (cut, note) = cut_point(1, 10, keep(1), &[pin], never).expect("cut");
        assert_eq!(cut, 5);
        assert_eq!(
            note.as_deref(),
            Some("kept turns from 5: the unfinished rewind to turn 5 (recorded as turn 9) needs them")
        );
        // The byte budget drops more old turns, the open turn stays.
        let bytes = |from: u64| -> Result<u64, IndexError> { Ok(100 * (11 - from)) };
        let budget = Retention {
            keep: 100,
            max_bytes: Some(250),
        };
        assert_eq!(cut_point(1, 10, budget, &[], bytes).ok(), Some((9, None)));
    }
}
