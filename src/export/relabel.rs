//! Labels changed after a turn was exported (`opfs label N TEXT`): the
//! commits whose message no longer says what the index says are written
//! again with the new message, and every commit after them on the new
//! parent (same trees and signatures), so the export says what `opfs log`
//! says. A commit written this way has the id a fresh export of the same
//! history gives.

use std::collections::HashMap;

use gix::ObjectId;

use super::commit::{exported_turn, turn_message, Tip};
use super::{prune, ExportError, Exporter, GitContext, BRANCH, TURN_REF_PREFIX};

/// Brings the messages of the commits from `tip` down to the baseline in
/// line with the turns' labels in the index: returns the new tip and the
/// turns whose message changed, oldest first (none: `tip` as it was).
///
/// Costs one commit read per exported turn (none for a commit already in
/// the exporter's cache of decoded commits); writes only when a label
/// changed (one commit per commit from the oldest changed one on, and
/// one ref transaction). Worktree branches based on a rewritten commit are
/// moved onto its new id in the same transaction.
///
/// Errors: the repository cannot be read or written, or the index read.
pub(super) fn relabel(ex: &mut Exporter<'_>, tip: Tip) -> Result<(Tip, Vec<u64>), ExportError> {
    let git_dir = ex.git_dir.clone();
    // The chain, newest first: (id, commit, the turn it holds; None for
    // the baseline).
    let mut chain: Vec<(ObjectId, gix::objs::Commit, Option<u64>)> = Vec::new();
    let mut next = Some(tip.commit);
    while let Some(id) = next {
        // A commit never changes under its id: one read per commit for as
        // long as the exporter keeps its cache (the daemon's, across runs).
        let owned = match ex.commits.get(&id) {
            Some(c) => c.clone(),
            None => {
                let c = ex
                    .repo
                    .find_commit(id)
                    .git(&git_dir, "reading the history")?;
                let owned = c
                    .decode()
                    .and_then(|c| c.to_owned())
                    .git(&git_dir, "reading the history")?;
                ex.commits.insert(id, owned.clone());
                owned
            }
        };
        let Some(turn) = exported_turn(&owned.message) else {
            break; // not ours: nothing below it is either
        };
        let baseline = owned
            .message
            .split(|&b| b == b'\n')
            .any(|l| l.starts_with(b"opfs-baseline: "));
        next = owned.parents.first().copied();
        chain.push((id, owned, (!baseline).then_some(turn)));
    }
    chain.reverse();
    let turns: HashMap<u64, crate::record::Turn> = ex
        .src
        .index
        .turns(None)?
        .into_iter()
        .map(|t| (t.number, t))
        .collect();
    let wanted = |c: &(ObjectId, gix::objs::Commit, Option<u64>)| -> Option<String> {
        let t = turns.get(&c.2?)?;
        let m = turn_message(t);
        (m.as_bytes() != c.1.message.as_slice()).then_some(m)
    };
    let Some(start) = chain.iter().position(|c| wanted(c).is_some()) else {
        return Ok((tip, Vec::new()));
    };
    let mut parent = chain[start].1.parents.first().copied();
    let mut edits = Vec::new();
    let mut moved = HashMap::new();
    let mut relabelled = Vec::new();
    let mut new_tip = tip;
    for c in &chain[start..] {
        let mut commit = c.1.clone();
        if let Some(m) = wanted(c) {
            commit.message = m.into();
            relabelled.extend(c.2);
        }
        commit.parents = parent.into_iter().collect();
        ex.objects += 1;
        let id = ex
            .repo
            .write_object(&commit)
            .git(&git_dir, "writing a commit")?
            .detach();
        moved.insert(c.0, id);
        if let Some(turn) = c.2 {
            edits.push(prune::update(
                &git_dir,
                &format!("{TURN_REF_PREFIX}{turn}"),
                id,
                "opfs export: label changed",
            )?);
        }
        parent = Some(id);
        new_tip.commit = id;
    }
    edits.push(prune::update(
        &git_dir,
        BRANCH,
        new_tip.commit,
        "opfs export: label changed",
    )?);
    for (name, at) in prune::rewrite_branches(ex.repo, &git_dir, &moved)? {
        edits.push(prune::update(
            &git_dir,
            &name,
            at,
            "opfs export: label changed",
        )?);
    }
    let sig = super::commit::signature(crate::store::index::now_ns());
    let mut buf = gix::date::parse::TimeBuf::default();
    ex.repo
        .edit_references_as(edits, Some(sig.to_ref(&mut buf)))
        .git(&git_dir, "moving refs to the relabelled commits")?;
    Ok((new_tip, relabelled))
}
