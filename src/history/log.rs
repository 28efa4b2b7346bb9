//! `opfs log`: one entry per turn, with what it added, modified and
//! deleted and the bytes its records keep.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::record::{Hash, PreImage};
use crate::view::Timeline;

use super::changes::{classify, ChangeKind};
use super::{HistoryError, Sources};

/// One turn as `opfs log` shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LogEntry {
    /// Turn number.
    pub turn: u64,
    /// `agent`, `rewind` or `merge`.
    pub kind: &'static str,
    /// The label, if any.
    pub label: Option<String>,
    /// The external id, if any.
    pub external_id: Option<String>,
    /// Start, ns since the Unix epoch.
    pub started_at: i64,
    /// End, ns since the Unix epoch; `None` for the open turn.
    pub ended_at: Option<i64>,
    /// For rewind turns: the turn whose start was restored.
    pub rewound_to: Option<u64>,
    /// Files and symlinks that did not exist when the turn began and did at
    /// its end.
    pub added: u64,
    /// Files and symlinks that existed at both ends with different content,
    /// permission bits or type.
    pub modified: u64,
    /// Files and symlinks that existed when the turn began and not at its end.
    pub deleted: u64,
    /// Paths recorded in the turn (including directories and paths whose
    /// content ended up unchanged).
    pub paths: u64,
    /// Bytes of the distinct pre-image blobs the turn's records refer to.
    pub bytes_stored: u64,
    /// Files and symlinks the turn added, modified or deleted that the
    /// caller's filter left out of the three counts above (`opfs log`:
    /// paths the project's ignore rules ignore).
    pub ignored: u64,
}

/// `opfs log`: one entry per turn, newest first.
///
/// The end state of the newest turns is read from the project (once per
/// path). Errors: the index or the project cannot be read.
pub fn log(src: &Sources<'_>) -> Result<Vec<LogEntry>, HistoryError> {
    log_of(src, true, &mut |_| true)
}

/// [`log`], counting in `added`, `modified` and `deleted` only the paths
/// `counted` keeps (the others go to `ignored`); `paths` and
/// `bytes_stored` still say what the turn recorded. `opfs log` passes the
/// project's ignore rules.
///
/// Errors: as [`log`].
pub fn log_counting(
    src: &Sources<'_>,
    counted: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<Vec<LogEntry>, HistoryError> {
    log_of(src, true, counted)
}

/// [`log`] without `added`, `modified` and `deleted` (left 0), so nothing
/// of the project is read: for a caller that counts them in a view of its
/// own (a worktree's, `worktree::history`).
///
/// Errors: the index cannot be read, or a ranged record cannot be put
/// together.
pub fn log_turns(src: &Sources<'_>) -> Result<Vec<LogEntry>, HistoryError> {
    log_of(src, false, &mut |_| true)
}

fn log_of(
    src: &Sources<'_>,
    count: bool,
    counted: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<Vec<LogEntry>, HistoryError> {
    let turns = src.index.turns(None)?;
    let Some(first) = turns.last().map(|t| t.number) else {
        return Ok(Vec::new());
    };
    let mut timeline = Timeline::load(src.index, first)?;
    // A ranged record stores its saved ranges, not the file.
    let mut ranged_stored: BTreeMap<(u64, Vec<u8>), u64> = BTreeMap::new();
    for (path, recs) in timeline.iter() {
        for (t, pre) in recs {
            if let PreImage::Ranged { .. } = pre {
                let pieces = src.index.ranges_of(*t, path)?;
                ranged_stored.insert((*t, path.clone()), pieces.iter().map(|p| p.len).sum());
            }
        }
    }
    if count {
        src.resolve(&mut timeline, None, false)?;
    }
    // Paths whose newest record is their last word need the project's
    // current state; read each once.
    let mut current_cache: BTreeMap<Vec<u8>, PreImage> = BTreeMap::new();
    if count {
        let need_current: Vec<Vec<u8>> = timeline.iter().map(|(p, _)| p.clone()).collect();
        let newest = turns.first().map(|t| t.number).unwrap_or(first);
        let at_end = src.states_at(&timeline, &need_current, newest + 1)?;
        for (p, v) in at_end {
            current_cache.insert(p, v.state);
        }
    }
    let by_turn = timeline.by_turn();
    let mut out = Vec::with_capacity(turns.len());
    for t in &turns {
        let mut e = LogEntry {
            turn: t.number,
            kind: t.kind.as_str(),
            label: t.label.clone(),
            external_id: t.external_id.clone(),
            started_at: t.started_at,
            ended_at: t.ended_at,
            rewound_to: t.rewound_to,
            added: 0,
            modified: 0,
            deleted: 0,
            paths: 0,
            bytes_stored: 0,
            ignored: 0,
        };
        let mut blobs: BTreeSet<Hash> = BTreeSet::new();
        for p in by_turn.get(&t.number).map(Vec::as_slice).unwrap_or(&[]) {
            e.paths += 1;
            let Some(before) = timeline.record(p, t.number) else {
                continue;
            };
            if let Some(n) = ranged_stored.get(&(t.number, p.clone())) {
                e.bytes_stored += n;
            } else if let PreImage::File { blob, size, .. } = before {
                if blobs.insert(*blob) {
                    e.bytes_stored += size;
                }
            }
            if !count {
                continue;
            }
            let after = match timeline.state_at(p, t.number + 1) {
                Some(a) => a,
                None => match current_cache.get(p) {
                    Some(a) => a,
                    None => continue,
                },
            };
            let kind = classify(before, after);
            if kind.is_some() && !counted(p) {
                e.ignored += 1;
                continue;
            }
            match kind {
                Some(ChangeKind::Added) => e.added += 1,
                Some(ChangeKind::Modified) => e.modified += 1,
                Some(ChangeKind::Deleted) => e.deleted += 1,
                None => {}
            }
        }
        out.push(e);
    }
    Ok(out)
}
