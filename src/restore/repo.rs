//! The project's repository is never removed by a rewind (`docs/design.md`,
//! "`.git`"): a directory the root `.git` was moved to through the mount
//! (noted at capture, `Index::note_repo_move`) after the target turn began
//! is, as far as the records go, a path to remove. When it is still a git
//! repository, it stays, with everything in it and every directory holding
//! it, and the rewind reports a conflict naming it and the way back.

use std::collections::BTreeSet;

use crate::capture::Journal;
use crate::paths;
use crate::tree::Dir;

use super::conflict::{Conflict, ConflictReason};
use super::plan::{PathPlan, Step};

/// True when `path` in the project is a git repository directory: it holds
/// `HEAD` (a file), `objects` and `refs` (directories), as git itself
/// checks.
fn is_repository(backing: &Dir, path: &[u8]) -> bool {
    let is = |name: &[u8], ty: u32| matches!(backing.lstat(&paths::join(path, name)), Ok(Some(st)) if st.file_type() == ty);
    is(b"HEAD", libc::S_IFREG) && is(b"objects", libc::S_IFDIR) && is(b"refs", libc::S_IFDIR)
}

/// Moves out of `plan` every path a rewind to turn `to` would remove that
/// is, or holds, or lies beneath a repository the root `.git` was moved to
/// through the mount in turn `to` or later, and that is still a git
/// repository. The repository and each planned directory holding it get a
/// [`ConflictReason::Repository`]; the paths inside it leave the plan
/// silently (it stays whole). Applies with `--force` too: no rewind removes
/// the project's repository. Cost: one indexed read of the (usually empty)
/// table of moves.
pub(crate) fn keep_repositories(
    journal: &Journal,
    to: u64,
    plan: &mut Vec<PathPlan>,
    conflicts: &mut Vec<Conflict>,
) {
    let moves = match journal.with_index(|ix| ix.repo_moves(to)) {
        Ok(m) => m,
        Err(e) => {
            log::warn!("cannot read where the project's repository was moved: {e}");
            return;
        }
    };
    if moves.is_empty() {
        return;
    }
    let removed = |raw: &[u8]| {
        plan.iter()
            .any(|p| p.raw == raw && p.steps.contains(&Step::Remove))
    };
    let repos: Vec<(Vec<u8>, u64)> = moves
        .into_iter()
        .filter(|(_, path)| removed(path) && is_repository(journal.backing(), path))
        .map(|(turn, path)| (path, turn))
        .collect();
    if repos.is_empty() {
        return;
    }
    let mut bad: BTreeSet<Vec<u8>> = BTreeSet::new();
    for (repo, turn) in &repos {
        for p in plan.iter() {
            let inside = p.raw.starts_with(repo) && p.raw.get(repo.len()) == Some(&b'/');
            let holds = p.steps.contains(&Step::Remove)
                && (p.raw == *repo || paths::ancestors(repo).any(|a| a == p.raw.as_slice()));
            if holds && bad.insert(p.raw.clone()) {
                conflicts.push(Conflict::new(
                    &p.raw,
                    ConflictReason::Repository {
                        repo: repo.clone(),
                        turn: *turn,
                        this: p.raw == *repo,
                    },
                ));
            } else if inside {
                bad.insert(p.raw.clone());
            }
        }
    }
    plan.retain(|p| !bad.contains(&p.raw));
}
