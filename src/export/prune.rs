//! Keeping the export as small as the history it shows: after `opfs gc` drops turns, their commits leave the
//! export ([`prune`]); loose objects are packed ([`pack`]).
//!
//! **Pruning** rewrites the chain from the oldest kept turn C on: the new
//! baseline is the tree of turn C - 1's commit (the project at the end of
//! C - 1 = the start of C, exactly what a baseline of turn C holds), and
//! each kept turn's commit is written again with the same tree, message,
//! author and committer on the new parent. Trees and blobs are reused, so
//! this writes one object per kept commit. Each worktree branch
//! (`refs/opfs/worktrees/NAME`) sitting on a kept commit is written again
//! on that commit's new id the same way, or `git gc` would keep every
//! dropped turn below it. Refs move in one transaction (the baseline, each
//! kept turn, the branch, the worktree branches); the refs of dropped
//! turns are deleted in it. A crash before the transaction leaves the old chain
//! (a rerun prunes again); after it, the old commits are unreachable.
//!
//! **Packing** runs the `git` binary (`git gc`), because gix 0.87 writes
//! loose objects only: it can read packs but has no repack, prune or gc.
//! Without `git` on `PATH` the export stays loose and the reports say so.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;
use gix::ObjectId;
use serde::{Deserialize, Serialize};

use super::branch::WORKTREE_REF_PREFIX;
use super::commit::{baseline_message, exported_turn, signature};
use super::lock::ExportLock;
use super::{default_git_dir, ExportError, GitContext, BASELINE_REF, BRANCH, TURN_REF_PREFIX};
use crate::state::usage::disk_bytes;
use crate::store::{Index, StateDir};

/// What [`prune`] did (or, in a dry run, would do) to the export.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PruneReport {
    /// Commits of dropped turns taken out of the history (the old baseline
    /// included).
    pub commits_dropped: u64,
    /// Kept commits written again on the new baseline.
    pub commits_rewritten: u64,
    /// Worktree branches (`refs/opfs/worktrees/NAME`) written again on
    /// their base's new commit, in the same transaction, so none keeps a
    /// dropped turn's objects.
    #[serde(default)]
    pub branches_rewritten: u64,
    /// Disk bytes of the repository before.
    pub bytes_before: u64,
    /// Disk bytes after (the same as before in a dry run).
    pub bytes_after: u64,
    /// How the repository was packed afterwards (see [`Packed`]).
    pub packed: Packed,
}

/// Whether loose objects were packed.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Packed {
    /// Not asked, or nothing to do (a dry run).
    #[default]
    No,
    /// `git gc` packed the repository and removed unreachable objects.
    Git,
    /// `git` is not on `PATH`: the objects stay loose.
    GitNotFound,
}

/// Takes the commits of turns before `oldest_kept` out of the project's
/// default export (`export.git` in the state dir) and packs it, unless
/// `dry_run`. `Ok(None)` when there is no export. A repository written
/// with `--git-dir` elsewhere is not known to opfs and is left alone.
///
/// Durable after `Ok`: the refs point at the rewritten chain (not
/// fsynced: the export can always be rebuilt). After `Err`, the refs are
/// either all old or all new, and objects already written stay (unused).
///
/// Errors: [`ExportError::Git`] when the repository cannot be read or
/// written, [`ExportError::Io`] for its lock file, the index when the
/// start time of turn `oldest_kept` cannot be read. A failing `git gc` is
/// not an error: [`Packed::No`] is reported and the next run tries again.
pub fn prune(
    state: &StateDir,
    oldest_kept: u64,
    dry_run: bool,
) -> Result<Option<PruneReport>, ExportError> {
    prune_with(state, oldest_kept, dry_run, None)
}

/// The project's default export held against every other export (its
/// lock, see [`hold`]) while gc drops turns, so no export reads records
/// that are going away; released on drop.
#[must_use = "the export is released when this value is dropped"]
pub struct ExportHold {
    lock: ExportLock,
}

impl std::fmt::Debug for ExportHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExportHold")
    }
}

/// Waits until no export of the project's default export (`export.git`)
/// runs, and keeps others out until the returned hold is dropped. `None`
/// when there is no export yet.
///
/// Errors: [`ExportError::Io`] naming the lock file when it cannot be
/// opened or locked.
pub fn hold(state: &StateDir) -> Result<Option<ExportHold>, ExportError> {
    let git_dir = default_git_dir(state);
    if !git_dir.join("HEAD").exists() {
        return Ok(None);
    }
    Ok(Some(ExportHold {
        lock: ExportLock::acquire(&git_dir)?,
    }))
}

/// [`prune`] by the holder of `hold` (the lock is not taken again).
///
/// Errors as [`prune`].
pub fn prune_held(
    state: &StateDir,
    hold: &ExportHold,
    oldest_kept: u64,
    dry_run: bool,
) -> Result<Option<PruneReport>, ExportError> {
    prune_with(state, oldest_kept, dry_run, Some(hold))
}

fn prune_with(
    state: &StateDir,
    oldest_kept: u64,
    dry_run: bool,
    held: Option<&ExportHold>,
) -> Result<Option<PruneReport>, ExportError> {
    let git_dir = default_git_dir(state);
    if !git_dir.join("HEAD").exists() {
        return Ok(None);
    }
    let repo = gix::open_opts(&git_dir, gix::open::Options::isolated())
        .git(&git_dir, "opening the repository")?;
    let taken;
    let lock = match held {
        Some(hold) => &hold.lock,
        None => {
            taken = ExportLock::acquire(&git_dir)?;
            &taken
        }
    };
    let bytes_before = disk_bytes(&git_dir);
    let mut report = PruneReport {
        bytes_before,
        bytes_after: bytes_before,
        ..PruneReport::default()
    };
    // The chain, newest first: (id, commit, the turn it holds).
    let mut chain: Vec<(ObjectId, gix::objs::Commit, u64)> = Vec::new();
    let mut next = repo
        .try_find_reference(BRANCH)
        .git(&git_dir, "reading refs/heads/opfs")?
        .and_then(|r| r.try_id().map(|id| id.detach()));
    while let Some(id) = next {
        let c = repo.find_commit(id).git(&git_dir, "reading the history")?;
        let owned = c
            .decode()
            .and_then(|c| c.to_owned())
            .git(&git_dir, "reading the history")?;
        let Some(turn) = exported_turn(&owned.message) else {
            break; // not ours: nothing below it is either
        };
        next = owned.parents.first().copied();
        chain.push((id, owned, turn));
    }
    chain.reverse();
    // The baseline holds turn F - 1 (the start of F): nothing older to drop.
    // With no chain (a baseline that never finished) nothing is dropped
    // either. Objects an interrupted export left (killed, or failed before
    // a cleanup could run) are unreachable: removed here, so `gc` reclaims
    // them.
    let nothing_to_drop = chain.first().is_none_or(|c| c.2 + 1 >= oldest_kept);
    if nothing_to_drop {
        if !dry_run {
            drop_unreachable(&git_dir, lock);
            report.packed = pack(&git_dir, lock, true);
            report.bytes_after = disk_bytes(&git_dir);
        }
        return Ok(Some(report));
    }
    let start = chain.iter().position(|c| c.2 + 1 == oldest_kept);
    let mut edits = Vec::new();
    let sig_time;
    match start {
        Some(i) => {
            report.commits_dropped = i as u64;
            report.commits_rewritten = (chain.len() - i - 1) as u64;
            if dry_run {
                return Ok(Some(report));
            }
            let index = Index::open_read_only(&state.index_path())?;
            sig_time = index.turn(oldest_kept)?.map(|t| t.started_at).unwrap_or(0);
            let sig = signature(sig_time);
            let base = gix::objs::Commit {
                tree: chain[i].1.tree,
                parents: Default::default(),
                author: sig.clone(),
                committer: sig,
                encoding: None,
                message: baseline_message(oldest_kept).into(),
                extra_headers: Vec::new(),
            };
            let mut parent = write(&repo, &git_dir, &base)?;
            edits.push(update(&git_dir, BASELINE_REF, parent, "opfs gc")?);
            // The new id of each commit of chain[i..], in order.
            let mut new_ids = vec![parent];
            for (_, c, turn) in &chain[i + 1..] {
                let mut c = c.clone();
                c.parents = vec![parent].into();
                parent = write(&repo, &git_dir, &c)?;
                new_ids.push(parent);
                edits.push(update(
                    &git_dir,
                    &format!("{TURN_REF_PREFIX}{turn}"),
                    parent,
                    "opfs gc",
                )?);
            }
            edits.push(update(&git_dir, BRANCH, parent, "opfs gc")?);
            // Each worktree branch sits on a commit of the old chain (its
            // base): moved onto the base's new commit with the rest, or
            // `git gc` would keep every dropped turn it reaches.
            let moved: HashMap<ObjectId, ObjectId> =
                chain[i..].iter().map(|c| c.0).zip(new_ids).collect();
            for (name, tip) in rewrite_branches(&repo, &git_dir, &moved)? {
                report.branches_rewritten += 1;
                edits.push(update(&git_dir, &name, tip, "opfs gc")?);
            }
        }
        None => {
            // The export has not reached the start of the oldest kept turn
            // yet: start over (the next export writes a new baseline).
            report.commits_dropped = chain.len() as u64;
            if dry_run {
                return Ok(Some(report));
            }
            sig_time = 0;
            edits.push(delete(&git_dir, BRANCH)?);
            edits.push(delete(&git_dir, BASELINE_REF)?);
        }
    }
    let refs = repo.references().git(&git_dir, "listing refs")?;
    let turn_refs = refs
        .prefixed(TURN_REF_PREFIX)
        .git(&git_dir, "listing refs")?;
    for r in turn_refs.flatten() {
        let name = r.name().as_bstr().to_string();
        let n: Option<u64> = name
            .strip_prefix(TURN_REF_PREFIX)
            .and_then(|n| n.parse().ok());
        if n.is_some_and(|n| n < oldest_kept || start.is_none()) {
            edits.push(delete(&git_dir, &name)?);
        }
    }
    let mut buf = gix::date::parse::TimeBuf::default();
    let sig = signature(sig_time);
    repo.edit_references_as(edits, Some(sig.to_ref(&mut buf)))
        .git(&git_dir, "moving refs to the pruned history")?;
    report.packed = pack(&git_dir, lock, false);
    report.bytes_after = disk_bytes(&git_dir);
    Ok(Some(report))
}

/// Every worktree branch whose base (the first commit below its own that
/// is not one of them) is a key of `moved` (an old commit of the
/// project's chain → its rewritten commit), with its own commits written
/// again on the new base (same trees, messages and signatures): the ref
/// and its new tip. A branch whose base is not in `moved` is left as it
/// is (the next export of that worktree finds its base again).
///
/// Errors: the repository cannot be read or written.
pub(super) fn rewrite_branches(
    repo: &gix::Repository,
    git_dir: &Path,
    moved: &HashMap<ObjectId, ObjectId>,
) -> Result<Vec<(String, ObjectId)>, ExportError> {
    let refs = repo.references().git(git_dir, "listing refs")?;
    let branches = refs
        .prefixed(WORKTREE_REF_PREFIX)
        .git(git_dir, "listing refs")?;
    let mut out = Vec::new();
    for r in branches.flatten() {
        let name = r.name().as_bstr().to_string();
        let Some(tip) = r.try_id().map(|id| id.detach()) else {
            continue;
        };
        // The branch's own commits, newest first, down to its base.
        let mut own: Vec<gix::objs::Commit> = Vec::new();
        let mut cur = tip;
        let base = loop {
            if let Some(new) = moved.get(&cur) {
                break Some(*new);
            }
            let c = repo.find_commit(cur).git(git_dir, "reading a branch")?;
            let owned = c
                .decode()
                .and_then(|c| c.to_owned())
                .git(git_dir, "reading a branch")?;
            let Some(parent) = owned.parents.first().copied() else {
                break None;
            };
            own.push(owned);
            cur = parent;
        };
        let Some(mut at) = base else {
            continue;
        };
        for c in own.iter().rev() {
            let mut c = c.clone();
            c.parents = vec![at].into();
            at = write(repo, git_dir, &c)?;
        }
        if at != tip {
            out.push((name, at));
        }
    }
    Ok(out)
}

/// Deletes `refs/opfs/turns/N` for every N before `first` (one ref
/// transaction): an export starting over with a new baseline of turn
/// `first` leaves no ref on the old chain.
///
/// Errors: the refs cannot be read or written.
pub(super) fn delete_turn_refs_before(
    repo: &gix::Repository,
    git_dir: &Path,
    first: u64,
) -> Result<(), ExportError> {
    let refs = repo.references().git(git_dir, "listing refs")?;
    let mut edits = Vec::new();
    for r in refs
        .prefixed(TURN_REF_PREFIX)
        .git(git_dir, "listing refs")?
        .flatten()
    {
        let name = r.name().as_bstr().to_string();
        let n: Option<u64> = name
            .strip_prefix(TURN_REF_PREFIX)
            .and_then(|n| n.parse().ok());
        if n.is_some_and(|n| n < first) {
            edits.push(delete(git_dir, &name)?);
        }
    }
    if !edits.is_empty() {
        repo.edit_references(edits)
            .git(git_dir, "deleting the refs of dropped turns")?;
    }
    Ok(())
}

fn write(
    repo: &gix::Repository,
    git_dir: &Path,
    c: &gix::objs::Commit,
) -> Result<ObjectId, ExportError> {
    Ok(repo
        .write_object(c)
        .git(git_dir, "writing a commit")?
        .detach())
}

pub(super) fn update(
    git_dir: &Path,
    name: &str,
    id: ObjectId,
    reflog: &str,
) -> Result<RefEdit, ExportError> {
    Ok(RefEdit {
        change: Change::Update {
            log: LogChange {
                mode: RefLog::AndReference,
                force_create_reflog: false,
                message: reflog.into(),
            },
            expected: PreviousValue::Any,
            new: Target::Object(id),
        },
        name: name
            .try_into()
            .git_with(git_dir, || format!("ref name {name}"))?,
        deref: false,
    })
}

pub(super) fn delete(git_dir: &Path, name: &str) -> Result<RefEdit, ExportError> {
    Ok(RefEdit {
        change: Change::Delete {
            expected: PreviousValue::Any,
            log: RefLog::AndReference,
        },
        name: name
            .try_into()
            .git_with(git_dir, || format!("ref name {name}"))?,
        deref: false,
    })
}

/// Packs the repository at `git_dir` with `git gc` (reflogs expired, so a
/// dropped turn's objects really go). `auto`: only when git's own
/// heuristic finds enough loose objects (`git gc --auto`, threshold
/// lowered to [`AUTO_PACK_LOOSE`]); this is what every export runs. git
/// is started only when [`auto_pack_due`] says its heuristic would find
/// work ([`Packed::No`] otherwise): starting it to learn that there is
/// nothing to do cost a process per turn. Under `_lock`, the export
/// lock, so no export writes meanwhile.
pub(super) fn pack(git_dir: &Path, _lock: &ExportLock, auto: bool) -> Packed {
    if auto && !auto_pack_due(git_dir) {
        return Packed::No;
    }
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir")
        .arg(git_dir)
        .args(["-c", "gc.reflogExpire=now"])
        .args(["-c", "gc.reflogExpireUnreachable=now"])
        .args(["-c", "gc.autoDetach=false"])
        .args(["-c", &format!("gc.auto={AUTO_PACK_LOOSE}")])
        .args(["-c", &format!("gc.autoPackLimit={AUTO_PACK_LIMIT}")])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if auto {
        cmd.args(["gc", "--auto", "--quiet"]);
    } else {
        cmd.args(["gc", "--prune=now", "--quiet"]);
    }
    match cmd.output() {
        Ok(o) if o.status.success() => Packed::Git,
        Ok(o) => {
            log::warn!(
                "git gc in {}: {}",
                git_dir.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            );
            Packed::No
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Packed::GitNotFound,
        Err(e) => {
            log::warn!("git gc in {}: {e}", git_dir.display());
            Packed::No
        }
    }
}

/// Removes the loose objects of the repository at `git_dir` that no ref
/// (or reflog) reaches: what an export that failed or was killed wrote
/// before it could move a ref (`git prune --expire=now`; packs are left
/// alone). Under `_lock`, the export lock, so no export is writing
/// objects it has not yet made reachable. Without `git` on `PATH`,
/// nothing is removed. Returns whether git ran and succeeded; a failure is
/// logged.
pub(super) fn drop_unreachable(git_dir: &Path, _lock: &ExportLock) -> bool {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["prune", "--expire=now"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            log::warn!(
                "git prune in {}: {}",
                git_dir.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            );
            false
        }
        Err(e) => {
            log::warn!("git prune in {}: {e}", git_dir.display());
            false
        }
    }
}

/// Loose objects above which an export packs the repository (git's
/// `gc.auto`, sampled by git itself): a baseline of a large tree is packed
/// at once, a run of small turns every few hundred objects.
pub const AUTO_PACK_LOOSE: u64 = 500;

/// Packs above which `git gc --auto` consolidates them (git's
/// `gc.autoPackLimit`, passed to it as such).
const AUTO_PACK_LIMIT: u64 = 20;

/// Whether `git gc --auto`, run with [`AUTO_PACK_LOOSE`] and
/// [`AUTO_PACK_LIMIT`], would find work in `git_dir`, judged from the same
/// evidence git uses: the loose objects in one of the 256 fan-out
/// directories (`objects/17`) standing for all of them, more than
/// `AUTO_PACK_LOOSE / 256` (rounded up) there; or more than
/// `AUTO_PACK_LIMIT` packs not marked `.keep`. Reading two directories
/// in-process costs microseconds; starting git to decide cost a process
/// per export. A directory that cannot be read counts as empty (git
/// decides the same way).
fn auto_pack_due(git_dir: &Path) -> bool {
    let objects = git_dir.join("objects");
    let threshold = AUTO_PACK_LOOSE.div_ceil(256);
    let is_loose =
        |name: &[u8]| name.len() == 38 && name.iter().all(|b| b"0123456789abcdef".contains(b));
    let loose = std::fs::read_dir(objects.join("17"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| is_loose(e.file_name().as_encoded_bytes()))
                .count() as u64
        })
        .unwrap_or(0);
    if loose > threshold {
        return true;
    }
    let pack_dir = objects.join("pack");
    let packs = std::fs::read_dir(&pack_dir)
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.as_encoded_bytes();
                    name.ends_with(b".pack") && {
                        let stem = &name[..name.len() - b".pack".len()];
                        let mut keep = stem.to_vec();
                        keep.extend_from_slice(b".keep");
                        !pack_dir.join(std::ffi::OsStr::from_bytes(&keep)).exists()
                    }
                })
                .count() as u64
        })
        .unwrap_or(0);
    packs > AUTO_PACK_LIMIT
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"").unwrap();
    }

    #[test]
    fn auto_pack_is_due_from_the_same_loose_and_pack_counts_as_git_gc_auto() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path();
        assert!(!auto_pack_due(git), "no objects dir");
        let sample = git.join("objects/17");
        // ⌈500 / 256⌉ = 2 loose objects in the sample are not enough.
        for name in ["a".repeat(38), "b".repeat(38)] {
            touch(&sample.join(name));
        }
        // Not loose objects: a temp file, a wrong length, upper case.
        for name in ["tmp_obj_x".to_string(), "c".repeat(37), "D".repeat(38)] {
            touch(&sample.join(name));
        }
        // Other fan-out directories are not sampled.
        touch(&git.join("objects/18").join("e".repeat(38)));
        assert!(!auto_pack_due(git));
        touch(&sample.join("0".repeat(38)));
        assert!(auto_pack_due(git), "3 loose objects in objects/17");

        let dir = tempfile::tempdir().unwrap();
        let git = dir.path();
        let packs = git.join("objects/pack");
        for i in 0..20 {
            touch(&packs.join(format!("pack-{i:040}.pack")));
            touch(&packs.join(format!("pack-{i:040}.idx")));
        }
        assert!(!auto_pack_due(git), "20 packs are the limit");
        touch(&packs.join(format!("pack-{:040}.pack", 20)));
        touch(&packs.join(format!("pack-{:040}.keep", 20)));
        assert!(!auto_pack_due(git), "a kept pack does not count");
        touch(&packs.join(format!("pack-{:040}.pack", 21)));
        assert!(auto_pack_due(git), "21 packs not kept");
    }
}
