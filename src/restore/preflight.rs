//! Checks run before anything is written: what would make a step fail or
//! clobber the user's work moves a path from the plan to the conflicts.

use std::collections::BTreeSet;

use crate::capture::Journal;
use crate::paths;
use crate::record::PreImage;
use crate::view::current::Current;

use super::conflict::{Conflict, ConflictReason};
use super::plan::{PathPlan, Step};

/// Checks, before anything is written, what would make a step fail or
/// clobber the user's work: a path changed behind the mount's back since
/// opfs last saw it (unless `force`), a missing or corrupt blob, a directory
/// to remove that holds entries opfs did not record (even with `force`:
/// such entries could never be brought back). Such paths are moved from the
/// plan to the conflicts.
pub(crate) fn preflight(
    journal: &Journal,
    plan: &mut Vec<PathPlan>,
    conflicts: &mut Vec<Conflict>,
    force: bool,
) {
    let removed: BTreeSet<Vec<u8>> = plan
        .iter()
        .filter(|p| p.steps.contains(&Step::Remove))
        .map(|p| p.raw.clone())
        .collect();
    let planned: BTreeSet<Vec<u8>> = plan.iter().map(|p| p.raw.clone()).collect();
    let mut bad: BTreeSet<Vec<u8>> = BTreeSet::new();
    // Paths moved to the conflicts because they changed behind the mount.
    let mut changed: BTreeSet<Vec<u8>> = BTreeSet::new();
    for p in plan.iter() {
        if !force {
            if let Some(what) = changed_outside(journal, &p.raw) {
                conflicts.push(Conflict::new(
                    &p.raw,
                    ConflictReason::ChangedOutsideMount { what },
                ));
                bad.insert(p.raw.clone());
                changed.insert(p.raw.clone());
                continue;
            }
            // Linked to a name this plan leaves alone: that name's file is
            // what this path becomes, and may be rewritten through it.
            if let Some(other) = p.link_raw.as_ref().filter(|o| !planned.contains(*o)) {
                if changed_outside(journal, other).is_some() {
                    conflicts.push(Conflict::new(
                        &p.raw,
                        ConflictReason::LinkChangedOutsideMount {
                            other: other.clone(),
                        },
                    ));
                    bad.insert(p.raw.clone());
                    continue;
                }
            }
        }
        if let PreImage::File { blob, .. } = &p.target_state {
            if let Err(e) = journal.verify_blob(blob) {
                conflicts.push(Conflict::new(&p.raw, ConflictReason::Content(e)));
                bad.insert(p.raw.clone());
                continue;
            }
        }
        if let Some(segments) = &p.patch {
            let mut blobs: BTreeSet<[u8; 32]> = BTreeSet::new();
            let mut packed = BTreeSet::new();
            for s in segments {
                match s.at {
                    Some(at) => packed.insert((at.turn, at.offset, at.len, s.blob)),
                    None => blobs.insert(s.blob),
                };
            }
            let failed = blobs
                .iter()
                .find_map(|b| journal.verify_blob(b).err())
                .or_else(|| {
                    packed.iter().find_map(|&(turn, offset, len, blob)| {
                        let at = crate::store::index::Packed { turn, offset, len };
                        journal.read_piece(&blob, Some(at)).err()
                    })
                });
            if let Some(e) = failed {
                conflicts.push(Conflict::new(&p.raw, ConflictReason::SavedRange(e)));
                bad.insert(p.raw.clone());
                continue;
            }
        }
        if p.steps.contains(&Step::Remove) && matches!(p.current_state, Current::Dir { .. }) {
            match journal.backing().list_dir(&p.raw) {
                Ok(names) => {
                    let foreign: Vec<Vec<u8>> = names
                        .iter()
                        .map(|n| paths::join(&p.raw, n))
                        .filter(|child| !removed.contains(child))
                        .collect();
                    if !foreign.is_empty() {
                        conflicts.push(Conflict::new(
                            &p.raw,
                            ConflictReason::UnrecordedEntries { names: foreign },
                        ));
                        bad.insert(p.raw.clone());
                    }
                }
                Err(e) => {
                    conflicts.push(Conflict::new(&p.raw, ConflictReason::ListDir(e)));
                    bad.insert(p.raw.clone());
                }
            }
        }
    }
    spread_over_links(plan, conflicts, &mut bad, &changed);
    plan.retain(|p| !bad.contains(&p.raw));
}

/// What changed at `path` behind the mount since it last left it (`None`:
/// nothing, or no fingerprint to compare with). A file whose inode the
/// mount left exactly so under another name (a write through a hard link
/// moves this name's mtime too) has not changed.
fn changed_outside(journal: &Journal, path: &[u8]) -> Option<String> {
    let (Ok(Some(fp)), Ok(now)) = (journal.last_seen(path), journal.backing().lstat(path)) else {
        return None;
    };
    let linked_elsewhere = |now: &crate::record::Stat| {
        now.ino == fp.ino
            && journal
                .seen_under_some_name(&crate::record::Fingerprint::of(Some(now)))
                .unwrap_or(false)
    };
    fp.differs(now.as_ref())
        .filter(|_| !now.as_ref().is_some_and(linked_elsewhere))
}

/// Hard links share their fate: a change behind the mount through one name
/// of a file changed every name of it, so each planned path that names the
/// same file now is left alone too (restoring it would overwrite the change,
/// in place or by replacing it); and a path that was to become a link of a
/// path left alone stays as it is.
fn spread_over_links(
    plan: &[PathPlan],
    conflicts: &mut Vec<Conflict>,
    bad: &mut BTreeSet<Vec<u8>>,
    changed: &BTreeSet<Vec<u8>>,
) {
    let file_of = |p: &PathPlan| match &p.current_state {
        Current::File { stat } if stat.nlink > 1 => Some(stat.ino),
        _ => None,
    };
    let mut changed_files: std::collections::BTreeMap<u64, Vec<u8>> = plan
        .iter()
        .filter(|p| changed.contains(&p.raw))
        .filter_map(|p| file_of(p).map(|ino| (ino, p.raw.clone())))
        .collect();
    loop {
        let mut more = false;
        for p in plan {
            if bad.contains(&p.raw) {
                continue;
            }
            let reason = if let Some(other) = file_of(p).and_then(|i| changed_files.get(&i)) {
                ConflictReason::LinkChangedOutsideMount {
                    other: other.clone(),
                }
            } else if let Some(other) = p.link_raw.as_ref().filter(|o| bad.contains(*o)) {
                ConflictReason::LinkNotRestored {
                    other: other.clone(),
                }
            } else {
                continue;
            };
            if let ConflictReason::LinkChangedOutsideMount { .. } = reason {
                if let Some(ino) = file_of(p) {
                    changed_files.entry(ino).or_insert_with(|| p.raw.clone());
                }
            }
            conflicts.push(Conflict::new(&p.raw, reason));
            bad.insert(p.raw.clone());
            more = true;
        }
        if !more {
            return;
        }
    }
}
