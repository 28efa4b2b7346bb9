//! A history of its own exported as a branch off the project's export: a
//! worktree's (`docs/export.md`, "Worktree branches").
//!
//! The branch `refs/opfs/worktrees/NAME` starts from the project's export
//! commit for the start of the worktree's base turn (the commit of turn
//! `base - 1`, or the baseline when that is turn `base`'s), and has one
//! commit per closed turn of the worktree's own history, whose tree is the
//! worktree's view at the end of that turn. What a turn changed and the
//! bytes come from a [`BranchSource`] (the worktree module maps the
//! worktree's upper layer through its base); the trees follow the same
//! rules as the project's (pointer files, names git cannot hold), since
//! they are written by the same [`Exporter`], and ignore rules read from
//! the branch's own view ([`BranchSource::ignore_file`]: a `.gitignore`
//! the worktree wrote applies to its branch).
//!
//! Each commit carries the trailers of a project turn's commit (`opfs-turn:
//! N` is the worktree's own turn) and `opfs-worktree: NAME`,
//! `opfs-worktree-id: ID` (the worktree's creation time, so a branch left
//! by an earlier worktree of the same name is never continued) and
//! `opfs-base-turn: B`. Incremental like the project's export: the tip's
//! `opfs-turn:` says where it stands. When the project's export was
//! rewritten under the branch (`opfs gc` rewrites kept commits), the
//! branch's commits are written again on the new parent, same trees.

use std::path::{Path, PathBuf};
use std::time::Instant;

use gix::bstr::ByteSlice;
use gix::ObjectId;
use serde::Serialize;

use super::commit::{exported_turn, turn_message};
use super::ignore::IgnoreRules;
use super::lock::ExportLock;
use super::{
    default_git_dir, export, repo, ExportError, Exporter, GitContext, BASELINE_REF,
    EXPORT_IGNORED_MARKER, TURN_REF_PREFIX,
};
use crate::history;
use crate::record::{PreImage, Turn};
use crate::store::StateDir;

/// Prefix of the worktree branches: `refs/opfs/worktrees/NAME`.
pub const WORKTREE_REF_PREFIX: &str = "refs/opfs/worktrees/";

/// What a branch's history is made of.
pub trait BranchSource {
    /// The closed turns numbered after `after`, oldest first.
    ///
    /// Errors: the history cannot be read.
    fn closed_after(&self, after: u64) -> Result<Vec<Turn>, ExportError>;

    /// The paths turn `turn` may have changed, each with its state at the
    /// turn's end (setting a path to the state it already had is
    /// harmless). Called for the closed turns in order.
    ///
    /// Errors: the history or what it reads cannot be read.
    fn end_states(&self, turn: u64) -> Result<Vec<(Vec<u8>, PreImage)>, ExportError>;

    /// The bytes of a file state [`BranchSource::end_states`] just gave for
    /// `path`.
    ///
    /// Errors: they cannot be read.
    fn bytes(&self, path: &[u8], state: &PreImage) -> Result<Vec<u8>, ExportError>;

    /// The text of the ignore file at `path` (a `.gitignore`, or
    /// `.git/info/exclude`) as the branch's own view holds it now: the
    /// branch follows its own ignore rules, not the project's. `None`: no
    /// such file there, or it cannot be read (an ignore file never stops
    /// an export).
    fn ignore_file(&self, path: &[u8]) -> Option<String>;
}

/// Which branch: its name, the instance it belongs to, its base.
#[derive(Debug, Clone)]
pub struct BranchSpec {
    /// The worktree's name: the ref is `refs/opfs/worktrees/NAME`.
    pub name: String,
    /// What tells this worktree from an earlier one of the same name (its
    /// creation time in ns).
    pub id: String,
    /// The project turn whose start the branch starts from.
    pub base_turn: u64,
}

/// What [`export_branch`] did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct BranchReport {
    /// The worktree.
    pub name: String,
    /// The ref.
    pub branch: String,
    /// The repository.
    pub git_dir: PathBuf,
    /// The project turn whose start the branch starts from.
    pub base_turn: u64,
    /// Turns of the worktree exported by this run, oldest first.
    pub turns: Vec<u64>,
    /// The newest worktree turn on the branch (`None`: none yet, the
    /// branch is at its base).
    pub last_turn: Option<u64>,
    /// Whether the branch's earlier commits were written again on a new
    /// parent (the project's export was rewritten by `opfs gc`), or
    /// started over (a branch of an earlier worktree of that name).
    pub rewritten: bool,
    /// Git objects handed to the object database.
    pub objects: u64,
    /// Paths left out because git cannot hold them.
    pub skipped: Vec<String>,
    /// Wall time in ms.
    pub elapsed_ms: u64,
}

/// The ref of worktree `name`'s branch.
pub fn branch_ref(name: &str) -> String {
    format!("{WORKTREE_REF_PREFIX}{name}")
}

/// The project's export commit for the start of turn `base`: the commit of
/// turn `base - 1`, or the baseline when it is turn `base`'s.
fn base_commit(
    repo: &gix::Repository,
    git_dir: &Path,
    base: u64,
) -> Result<Option<ObjectId>, ExportError> {
    let find = |name: &str| -> Result<Option<ObjectId>, ExportError> {
        Ok(repo
            .try_find_reference(name)
            .git_with(git_dir, || format!("reading {name}"))?
            .and_then(|r| r.try_id().map(|id| id.detach())))
    };
    if base > 1 {
        if let Some(id) = find(&format!("{TURN_REF_PREFIX}{}", base - 1))? {
            return Ok(Some(id));
        }
    }
    if let Some(id) = find(BASELINE_REF)? {
        let msg = message(repo, git_dir, id)?;
        if exported_turn(&msg) == Some(base.saturating_sub(1)) {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

fn message(repo: &gix::Repository, git_dir: &Path, id: ObjectId) -> Result<Vec<u8>, ExportError> {
    Ok(repo
        .find_commit(id)
        .git(git_dir, "reading a commit")?
        .message_raw()
        .git(git_dir, "reading a commit")?
        .to_vec())
}

fn trailer<'m>(msg: &'m [u8], key: &str) -> Option<&'m [u8]> {
    msg.lines().find_map(|l| {
        l.strip_prefix(key.as_bytes())
            .and_then(|r| r.strip_prefix(b": "))
            .map(|v| v.trim())
    })
}

/// Exports the closed turns of `source` not on the branch yet into
/// `git_dir` (default: the project's [`default_git_dir`]) as commits of
/// `refs/opfs/worktrees/NAME`. When the project's export has no commit for
/// the start of the base turn yet, the project's export runs first
/// ([`export`], with `project_commit` as its group commit).
///
/// After `Ok`, the ref points at a complete commit. After `Err`, it names
/// the last turn fully exported (objects of a later one may remain
/// unreferenced; a rerun writes the same ids). Nothing is fsynced.
///
/// Errors: as [`export`]; [`ExportError::Git`] when the project's export
/// has no commit for the start of the base turn even after it ran (the
/// turn before was dropped and no baseline is the base's), or when turns
/// of the branch's history were dropped by retention before they were
/// exported.
pub fn export_branch(
    project: &StateDir,
    git_dir: Option<&Path>,
    spec: &BranchSpec,
    source: &dyn BranchSource,
    project_commit: &dyn Fn(),
) -> Result<BranchReport, ExportError> {
    let start = Instant::now();
    let git_dir = git_dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_git_dir(project));
    let repo = repo::open(project, &git_dir)?;
    if base_commit(&repo, &git_dir, spec.base_turn)?.is_none() {
        export(project, Some(&git_dir), &mut |_| {}, project_commit)?;
    }
    let lock = ExportLock::acquire(&git_dir)?;
    let repo = repo::open(project, &git_dir)?;
    let parent = base_commit(&repo, &git_dir, spec.base_turn)?.ok_or_else(|| ExportError::Git {
        git_dir: git_dir.clone(),
        what: format!(
            "the project's export has no commit for the start of turn {}, the base of worktree {:?}",
            spec.base_turn, spec.name
        ),
        source: "run `opfs export` in the project".into(),
    })?;
    let opened = history::Opened::open(project, Box::new(project_commit))?;
    let fetch = |p: &[u8], s: &PreImage| source.bytes(p, s);
    let trees = super::repo::Trees::default();
    let tree_source = super::repo::TreeSource {
        trees: &trees,
        objects: &repo.objects,
    };
    let mut ex = Exporter::new(&repo, &git_dir, opened.sources(), &tree_source);
    if !git_dir.join(EXPORT_IGNORED_MARKER).exists() {
        let root = ex.src.backing.path().to_path_buf();
        ex.ignore = Some(IgnoreRules::load_with(
            &root,
            Box::new(|rel| source.ignore_file(rel)),
        ));
    }
    // The project's `[record] exclude` list, as its own export applies it:
    // a path the project keeps no history of is in none of its branches.
    ex.exclude = project.record_exclude().unwrap_or_else(|e| {
        log::warn!("{e}");
        crate::paths::Exclude::none()
    });
    ex.fetch = Some(&fetch);
    let name = branch_ref(&spec.name);
    let (mut tip, rewritten, at_ref) = branch_tip(&mut ex, &name, spec, parent)?;
    let closed = source.closed_after(tip.turn)?;
    if let Some(first) = closed.first() {
        if first.number > tip.turn + 1 {
            return Err(ExportError::Git {
                git_dir: git_dir.clone(),
                what: format!(
                    "worktree {:?}: turns {} to {} were dropped by retention before they were exported",
                    spec.name,
                    tip.turn + 1,
                    first.number - 1
                ),
                source: format!("{name} stays at turn {}", tip.turn).into(),
            });
        }
    }
    let mut turns = Vec::new();
    for t in &closed {
        let mut editor = repo
            .edit_tree(tip.tree)
            .git(&git_dir, "loading the previous tree")?
            .detach();
        for (path, state) in source.end_states(t.number)? {
            let g = ex.git_state_of(&path, &state)?;
            ex.apply(&mut editor, &path, g)?;
        }
        let tree = ex.write_tree(&mut editor)?;
        let time = t.ended_at.unwrap_or(t.started_at);
        let commit = ex.commit(tree, Some(tip.commit), branch_message(t, spec), time)?;
        ex.set_refs(&[&name], commit, time)?;
        tip = Tip {
            commit,
            tree,
            turn: t.number,
        };
        turns.push(t.number);
    }
    if turns.is_empty() && at_ref != Some(tip.commit) {
        // A new branch starts at its base; a rewritten one moves to its
        // new chain.
        ex.set_refs(&[&name], tip.commit, 0)?;
    }
    if ex.objects > 0 {
        super::prune::pack(&git_dir, &lock, true);
    }
    Ok(BranchReport {
        name: spec.name.clone(),
        branch: name,
        git_dir: git_dir.clone(),
        base_turn: spec.base_turn,
        turns,
        last_turn: (tip.turn > 0).then_some(tip.turn),
        rewritten,
        objects: ex.objects,
        skipped: std::mem::take(&mut ex.skipped),
        elapsed_ms: start.elapsed().as_millis() as u64,
    })
}

/// Where a branch stands.
#[derive(Debug, Clone, Copy)]
struct Tip {
    commit: ObjectId,
    tree: ObjectId,
    /// The newest turn of the branch's history on it (0: none).
    turn: u64,
}

/// The commit message of a worktree turn: a project turn's, plus the
/// branch's trailers.
fn branch_message(t: &Turn, spec: &BranchSpec) -> String {
    let mut m = turn_message(t);
    m.push_str(&format!(
        "opfs-worktree: {}\nopfs-worktree-id: {}\nopfs-base-turn: {}\n",
        spec.name, spec.id, spec.base_turn
    ));
    m
}

/// Where branch `name` stands, its commits written again on `parent`
/// first if they sit on another (the project's export was rewritten);
/// the base itself when the branch is missing or belongs to another
/// worktree of the same name. Also whether it was rewritten, and where the
/// ref points now.
fn branch_tip(
    ex: &mut Exporter<'_>,
    name: &str,
    spec: &BranchSpec,
    parent: ObjectId,
) -> Result<(Tip, bool, Option<ObjectId>), ExportError> {
    let repo = ex.repo;
    let git_dir = ex.git_dir.clone();
    let tree_of = |id: ObjectId| -> Result<ObjectId, ExportError> {
        Ok(repo
            .find_commit(id)
            .git(&git_dir, "reading a commit")?
            .tree_id()
            .git(&git_dir, "reading a commit")?
            .detach())
    };
    let at_base = Tip {
        commit: parent,
        tree: tree_of(parent)?,
        turn: 0,
    };
    let tip = repo
        .try_find_reference(name)
        .git_with(&git_dir, || format!("reading {name}"))?
        .and_then(|r| r.try_id().map(|id| id.detach()));
    let Some(tip) = tip else {
        return Ok((at_base, false, None));
    };
    // The branch's own commits, newest first, down to the first commit
    // that is not one (its base).
    let mut chain: Vec<gix::objs::Commit> = Vec::new();
    let mut cur = tip;
    let old_base = loop {
        let commit = repo.find_commit(cur).git(&git_dir, "reading the branch")?;
        let decoded = commit
            .decode()
            .and_then(|c| c.to_owned())
            .git(&git_dir, "reading the branch")?;
        let ours = trailer(decoded.message.as_ref(), "opfs-worktree-id")
            == Some(spec.id.as_bytes())
            && trailer(decoded.message.as_ref(), "opfs-worktree") == Some(spec.name.as_bytes());
        if !ours {
            break cur;
        }
        let Some(p) = decoded.parents.first().copied() else {
            break cur;
        };
        chain.push(decoded);
        cur = p;
    };
    let Some(newest) = chain.first() else {
        // Not this worktree's branch (or still at its base).
        return Ok((at_base, tip != parent, Some(tip)));
    };
    let turn = exported_turn(newest.message.as_ref()).unwrap_or(0);
    if old_base == parent {
        return Ok((
            Tip {
                commit: tip,
                tree: newest.tree,
                turn,
            },
            false,
            Some(tip),
        ));
    }
    let mut at = parent;
    for c in chain.iter().rev() {
        let mut c = c.clone();
        c.parents = vec![at].into();
        ex.objects += 1;
        at = repo
            .write_object(&c)
            .git(&git_dir, "writing a commit")?
            .detach();
    }
    Ok((
        Tip {
            commit: at,
            tree: newest.tree,
            turn,
        },
        true,
        Some(tip),
    ))
}

/// Deletes worktree `name`'s branch from `git_dir` (default: the
/// project's [`default_git_dir`]); nothing when there is no repository or
/// no such branch. Its objects go at the repository's next packing.
///
/// Errors: the repository or its refs cannot be read or written.
pub fn delete_branch(
    project: &StateDir,
    git_dir: Option<&Path>,
    name: &str,
) -> Result<bool, ExportError> {
    let git_dir = git_dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_git_dir(project));
    if !git_dir.join("HEAD").exists() {
        return Ok(false);
    }
    let _lock = ExportLock::acquire(&git_dir)?;
    let repo = repo::open(project, &git_dir)?;
    let refname = branch_ref(name);
    if repo
        .try_find_reference(refname.as_str())
        .git_with(&git_dir, || format!("reading {refname}"))?
        .is_none()
    {
        return Ok(false);
    }
    let edit = super::prune::delete(&git_dir, &refname)?;
    repo.edit_reference(edit)
        .git_with(&git_dir, || format!("deleting {refname}"))?;
    Ok(true)
}
