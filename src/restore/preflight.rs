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
    let mut bad: BTreeSet<Vec<u8>> = BTreeSet::new();
    for p in plan.iter() {
        if !force {
            let seen = journal.last_seen(&p.raw);
            let now = journal.backing().lstat(&p.raw);
            if let (Ok(Some(fp)), Ok(now)) = (seen, now) {
                let linked_elsewhere = |now: &crate::record::Stat| {
                    // The same inode was written through the mount under
                    // another name (a hard link, maybe gone since): its
                    // mtime moved under this name too.
                    now.ino == fp.ino
                        && journal
                            .seen_under_some_name(&crate::record::Fingerprint::of(Some(now)))
                            .unwrap_or(false)
                };
                let differs = fp
                    .differs(now.as_ref())
                    .filter(|_| !now.as_ref().is_some_and(linked_elsewhere));
                if let Some(what) = differs {
                    conflicts.push(Conflict::new(
                        &p.raw,
                        ConflictReason::ChangedOutsideMount { what },
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
            let blobs: BTreeSet<[u8; 32]> = segments.iter().map(|s| s.blob).collect();
            if let Some(e) = blobs.iter().find_map(|b| journal.verify_blob(b).err()) {
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
    plan.retain(|p| !bad.contains(&p.raw));
}
