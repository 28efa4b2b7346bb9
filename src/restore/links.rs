//! Hard-link identity: names that shared one inode when the rewind point's
//! turn began share one inode again after the restore.
//!
//! A file record holds the inode number its path named when recorded. A
//! path's target is its first record at or after the rewind point, taken
//! before the first mutation of the path since then, so the number is the
//! one the path had when the turn began; two targets with the same number
//! were names of one inode then (numbers are unique among live inodes).
//! [`relink`] groups the targets by that number and gives each group one
//! inode again (`docs/design.md`, "Hard links"):
//!
//! - the *anchor* is the inode to keep: the one a member still names (the
//!   turn-start inode itself, so names opfs never recorded keep sharing
//!   it), else one a name the rewind has no record of still holds (found by
//!   a walk of the tree, only when a record says the inode had more names
//!   than the rewind has targets for), else the first member's file;
//! - every other member that does not name the anchor already is replaced
//!   by a link to it ([`Step::Link`]), run after the creations and
//!   rewrites, and the anchor's bytes, bits, owner and attributes are
//!   restored once through one of its names.

use std::collections::{BTreeMap, BTreeSet};

use crate::capture::Journal;
use crate::record::{Hash, PreImage};
use crate::view::current::Current;

use super::plan::{hash_file, PathPlan, Step};

/// The inode number a target names (file targets recorded with one).
fn target_ino(p: &PathPlan) -> Option<u64> {
    match p.target_state {
        PreImage::File { ino, .. } | PreImage::Ranged { ino, .. } if ino != 0 => Some(ino),
        _ => None,
    }
}

/// What the inode must hold: bytes (`None` for a ranged target, restored
/// in place), size and permission bits. Members of one group agree on it;
/// a group whose members do not is left as it is (its records disagree
/// with each other, so they cannot all be the turn-start state of one
/// inode).
fn content(p: &PathPlan) -> Option<(Option<Hash>, u64, u32)> {
    match &p.target_state {
        PreImage::File {
            blob, size, perm, ..
        } => Some((Some(*blob), *size, *perm)),
        PreImage::Ranged { size, perm, .. } => Some((None, *size, *perm)),
        _ => None,
    }
}

/// The inode of the regular file at the path now.
fn current_ino(p: &PathPlan) -> Option<u64> {
    match &p.current_state {
        Current::File { stat } => Some(stat.ino),
        _ => None,
    }
}

/// The anchor of one group.
enum Anchor {
    /// A member's current file (its index in the plan).
    Member(usize),
    /// A name the rewind has no record of.
    Outside(Vec<u8>),
}

/// Gives each group of file targets recorded with one inode number one
/// inode again (see the module doc). `plan` holds the paths that need
/// steps, `idle` the file targets that need none on their own (right
/// bytes, but maybe a separate inode); `targets` every path the rewind has
/// a target for (never taken as an outside anchor); `nlink_of(i)` the link
/// count noted with the record of `plan[i]` after `idle` is appended.
/// Returns the new plan, sorted by path. Writes nothing; reads the tree
/// (a walk only as described above; a walk that fails leaves those groups
/// without an outside anchor, logged).
pub(super) fn relink(
    journal: &Journal,
    plan: Vec<PathPlan>,
    idle: Vec<PathPlan>,
    targets: &BTreeSet<Vec<u8>>,
    nlink_of: &dyn Fn(&PathPlan) -> u64,
) -> Vec<PathPlan> {
    let mut all: Vec<PathPlan> = plan.into_iter().chain(idle).collect();
    all.sort_by(|a, b| a.raw.cmp(&b.raw));
    let mut groups: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, p) in all.iter().enumerate() {
        if let Some(ino) = target_ino(p) {
            groups.entry(ino).or_default().push(i);
        }
    }
    // Inodes a path this plan removes holds: the executor moves them back
    // through a parked link (`apply::moved_inode_pairs`).
    let removed: BTreeSet<u64> = all
        .iter()
        .filter(|p| p.steps.contains(&Step::Remove))
        .filter_map(current_ino)
        .collect();
    let mut wanted = BTreeSet::new();
    for (&ino, members) in &groups {
        if members.iter().any(|&i| current_ino(&all[i]) == Some(ino)) || removed.contains(&ino) {
            continue;
        }
        // Every name the inode had when the first of these records was made
        // was still there (removing or renaming one records it first), so
        // a count above the members means names the rewind has no record
        // of: untouched since, and still naming the inode.
        let most = members.iter().map(|&i| nlink_of(&all[i])).max();
        if most.is_some_and(|n| n > members.len() as u64) {
            wanted.insert(ino);
        }
    }
    let outside = if wanted.is_empty() {
        BTreeMap::new()
    } else {
        journal
            .backing()
            .find_names(&wanted, &|p| targets.contains(p))
            .unwrap_or_else(|e| {
                log::warn!("cannot look for the other names of hard-linked files: {e}");
                BTreeMap::new()
            })
    };
    for (ino, members) in groups {
        let first = content(&all[members[0]]);
        if members.iter().any(|&i| content(&all[i]) != first) {
            continue;
        }
        let anchor = if let Some(&a) = members.iter().find(|&&i| current_ino(&all[i]) == Some(ino))
        {
            Anchor::Member(a)
        } else if let Some(name) = outside.get(&ino) {
            Anchor::Outside(name.clone())
        } else if removed.contains(&ino) {
            // The member that is created gets the inode back through the
            // parked link; make sure one is.
            let a = members
                .iter()
                .copied()
                .find(|&i| all[i].steps.contains(&Step::Create))
                .unwrap_or(members[0]);
            let p = &mut all[a];
            if !p.steps.contains(&Step::Create) {
                p.steps = match p.current_state {
                    Current::Absent => vec![Step::Create],
                    _ => vec![Step::Remove, Step::Create],
                };
            }
            Anchor::Member(a)
        } else if members.len() == 1 {
            continue;
        } else {
            Anchor::Member(members[0])
        };
        match anchor {
            Anchor::Member(a) => {
                // The anchor's inode after its own steps: its current one
                // unless it is replaced.
                let kept = (!all[a].steps.contains(&Step::Remove)
                    && !all[a].steps.contains(&Step::Create))
                .then(|| current_ino(&all[a]))
                .flatten();
                let to = all[a].raw.clone();
                for &m in members.iter().filter(|&&m| m != a) {
                    if kept.is_some() && current_ino(&all[m]) == kept {
                        continue;
                    }
                    link_to(&mut all[m], &to);
                }
            }
            Anchor::Outside(name) => {
                let PreImage::File {
                    blob, size, perm, ..
                } = all[members[0]].target_state
                else {
                    continue;
                };
                let backing = journal.backing();
                // The inode's bytes and bits are restored once, through
                // the first member, after it is linked.
                let (rewrite, chmod) = match backing.lstat(&name) {
                    Ok(Some(st)) => {
                        let same =
                            st.size == size && hash_file(backing, &name).is_ok_and(|h| h == blob);
                        (!same, st.perm() != perm)
                    }
                    _ => (true, true),
                };
                for (k, &m) in members.iter().enumerate() {
                    link_to(&mut all[m], &name);
                    if k == 0 && rewrite {
                        all[m].steps.push(Step::Rewrite);
                    } else if k == 0 && chmod {
                        all[m].steps.push(Step::Chmod);
                    }
                }
            }
        }
    }
    all.retain(|p| !p.steps.is_empty());
    all
}

/// Replaces `p`'s steps by a link to `to` (after removing what is there).
fn link_to(p: &mut PathPlan, to: &[u8]) {
    p.steps = match p.current_state {
        Current::Absent => vec![Step::Link],
        _ => vec![Step::Remove, Step::Link],
    };
    p.link_to = Some(crate::paths::display(to));
    p.link_raw = Some(to.to_vec());
}
