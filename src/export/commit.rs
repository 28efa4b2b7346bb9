//! Commits and refs: the deterministic signature, the commit messages and
//! their trailers, writing a commit, moving refs, and reading back which
//! turn the branch tip holds.

use gix::bstr::ByteSlice;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;
use gix::ObjectId;

use super::{ExportError, Exporter, GitContext, BRANCH};
use crate::record::Turn;

/// Where an export stands: a commit of ours, its tree, and the newest turn
/// it holds (`first - 1` for a baseline of turn `first`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Tip {
    /// The commit.
    pub(super) commit: ObjectId,
    /// Its tree.
    pub(super) tree: ObjectId,
    /// The newest turn whose end it shows.
    pub(super) turn: u64,
}

/// The commit [`BRANCH`] points at, if any, and the turn it holds; the
/// commit read through `commits`, the exporter's cache of decoded
/// commits (an id names its content), and added to it.
///
/// Errors: [`ExportError::Git`] when the ref or the commit cannot be read,
/// or the commit is not one of ours (no `opfs-turn:` / `opfs-baseline:`
/// trailer).
pub(super) fn branch_tip(
    repo: &gix::Repository,
    git_dir: &std::path::Path,
    commits: &mut super::CommitCache,
) -> Result<Option<Tip>, ExportError> {
    let tip = repo
        .try_find_reference(BRANCH)
        .git(git_dir, "reading refs/heads/opfs")?
        .and_then(|r| r.try_id().map(|id| id.detach()));
    let Some(id) = tip else {
        return Ok(None);
    };
    let commit = match commits.get(&id) {
        Some(c) => c,
        None => {
            let c = repo
                .find_commit(id)
                .git(git_dir, "reading the branch tip")?;
            let owned = c
                .decode()
                .and_then(|c| c.to_owned())
                .git(git_dir, "reading the branch tip")?;
            commits.entry(id).or_insert(owned)
        }
    };
    let turn = exported_turn(&commit.message).ok_or_else(|| ExportError::Git {
        git_dir: git_dir.to_path_buf(),
        what: format!("{BRANCH} does not point at an opfs commit"),
        source: "no opfs-turn trailer".into(),
    })?;
    Ok(Some(Tip {
        commit: id,
        tree: commit.tree,
        turn,
    }))
}

impl Exporter<'_> {
    /// Writes a commit of `tree` (with `parent`, if any) at `time_ns`.
    pub(super) fn commit(
        &mut self,
        tree: ObjectId,
        parent: Option<ObjectId>,
        message: String,
        time_ns: i64,
    ) -> Result<ObjectId, ExportError> {
        let sig = signature(time_ns);
        let commit = gix::objs::Commit {
            tree,
            parents: parent.into_iter().collect(),
            author: sig.clone(),
            committer: sig,
            encoding: None,
            message: message.into(),
            extra_headers: Vec::new(),
        };
        self.objects += 1;
        let id = self
            .repo
            .write_object(&commit)
            .git(&self.git_dir, "writing a commit")?
            .detach();
        // The next run's relabel walk starts at this commit.
        self.commits.insert(id, commit);
        Ok(id)
    }

    /// Points every ref in `names` at `id`, in one transaction (reflog
    /// message `opfs export`, time `time_ns`).
    pub(super) fn set_refs(
        &self,
        names: &[&str],
        id: ObjectId,
        time_ns: i64,
    ) -> Result<(), ExportError> {
        let mut edits = Vec::new();
        for name in names {
            edits.push(RefEdit {
                change: Change::Update {
                    log: LogChange {
                        mode: RefLog::AndReference,
                        force_create_reflog: false,
                        message: "opfs export".into(),
                    },
                    expected: PreviousValue::Any,
                    new: Target::Object(id),
                },
                name: (*name)
                    .try_into()
                    .git_with(&self.git_dir, || format!("ref name {name}"))?,
                deref: false,
            });
        }
        let sig = signature(time_ns);
        let mut buf = gix::date::parse::TimeBuf::default();
        self.repo
            .edit_references_as(edits, Some(sig.to_ref(&mut buf)))
            .git(&self.git_dir, "updating refs")?;
        Ok(())
    }

    /// Makes `HEAD` a symbolic ref to [`BRANCH`], so `git --git-dir=... log`
    /// shows the history.
    pub(super) fn point_head(&self, time_ns: i64) -> Result<(), ExportError> {
        let git_dir = &self.git_dir;
        let head = RefEdit {
            change: Change::Update {
                log: LogChange::default(),
                expected: PreviousValue::Any,
                new: Target::Symbolic(BRANCH.try_into().git(git_dir, "ref name")?),
            },
            name: "HEAD".try_into().git(git_dir, "ref name")?,
            deref: false,
        };
        let sig = signature(time_ns);
        let mut buf = gix::date::parse::TimeBuf::default();
        self.repo
            .edit_references_as(Some(head), Some(sig.to_ref(&mut buf)))
            .git(git_dir, "pointing HEAD at refs/heads/opfs")?;
        Ok(())
    }
}

/// Author and committer of every commit: `opfs <opfs@localhost>` at
/// `time_ns` (whole seconds, UTC), so commits are deterministic.
pub(super) fn signature(time_ns: i64) -> gix::actor::Signature {
    gix::actor::Signature {
        name: "opfs".into(),
        email: "opfs@localhost".into(),
        time: gix::date::Time {
            seconds: time_ns.div_euclid(1_000_000_000),
            offset: 0,
        },
    }
}

/// The commit message of a turn: `Turn N: label` (or `Turn N (kind)`),
/// then trailers naming the turn, its kind, id and rewind target.
pub(super) fn turn_message(t: &Turn) -> String {
    let mut label_lines = t.label.as_deref().unwrap_or("").lines();
    let first = label_lines.next().unwrap_or("").trim();
    let mut m = if first.is_empty() {
        format!("Turn {} ({})", t.number, t.kind.as_str())
    } else {
        format!("Turn {}: {first}", t.number)
    };
    m.push_str("\n\n");
    let rest: Vec<&str> = label_lines.collect();
    if !rest.is_empty() {
        m.push_str(rest.join("\n").trim());
        m.push_str("\n\n");
    }
    m.push_str(&format!(
        "opfs-turn: {}\nopfs-kind: {}\n",
        t.number,
        t.kind.as_str()
    ));
    if let Some(id) = &t.external_id {
        m.push_str(&format!("opfs-id: {}\n", id.replace('\n', " ")));
    }
    if let Some(r) = t.rewound_to {
        m.push_str(&format!("opfs-rewound-to: {r}\n"));
    }
    m
}

/// The commit message of the baseline of turn `first`.
pub(super) fn baseline_message(first: u64) -> String {
    format!(
        "Baseline: the project as first seen\n\nThe project when turn {first} began.\n\nopfs-baseline: {first}\n"
    )
}

/// The turn a commit of ours holds: `Some(n)` for `opfs-turn: n`,
/// `Some(f - 1)` for a baseline of turn f.
pub(super) fn exported_turn(message: &[u8]) -> Option<u64> {
    for line in message.lines() {
        if let Some(n) = line.strip_prefix(b"opfs-turn: ") {
            return n.to_str().ok()?.trim().parse().ok();
        }
        if let Some(n) = line.strip_prefix(b"opfs-baseline: ") {
            let f: u64 = n.to_str().ok()?.trim().parse().ok()?;
            return Some(f.saturating_sub(1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailers_round_trip() {
        assert_eq!(
            exported_turn(b"Turn 3: x\n\nopfs-turn: 3\nopfs-kind: agent\n"),
            Some(3)
        );
        assert_eq!(exported_turn(b"Baseline\n\nopfs-baseline: 1\n"), Some(0));
        assert_eq!(exported_turn(b"something else"), None);
    }

    #[test]
    fn the_baseline_message_round_trips() {
        assert_eq!(exported_turn(baseline_message(5).as_bytes()), Some(4));
    }
}
