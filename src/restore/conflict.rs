//! Per-path outcomes a restore leaves unrestored: [`Conflict`] and its
//! typed [`ConflictReason`].
//!
//! The reasons' texts are part of the CLI's contract (`docs/errors.md`,
//! `opfs rewind --json`): each is written once, in [`ConflictReason`]'s
//! `Display`. A conflict serializes as `{"path": "<rendered>", "reason":
//! "<text>"}`.

use std::fmt;
use std::io;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::capture::CaptureError;
use crate::paths;
use crate::store::BlobError;
use crate::view::chain::RangeError;

/// A path left unrestored and why.
#[derive(Debug)]
pub struct Conflict {
    /// The path's raw bytes (rendered with `\xNN` escapes when serialized).
    pub path: Vec<u8>,
    /// Why it was not restored.
    pub reason: ConflictReason,
}

impl Conflict {
    /// A conflict on `path` for `reason`.
    pub fn new(path: &[u8], reason: ConflictReason) -> Conflict {
        Conflict {
            path: path.to_vec(),
            reason,
        }
    }

    /// The path, rendered (`\xNN` for bytes that are not UTF-8).
    pub fn display_path(&self) -> String {
        paths::display(&self.path)
    }
}

/// The step of the executor that failed on a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedStep {
    /// Removing what was there.
    Remove,
    /// Creating or rewriting the target, or setting a file's bits.
    Restore,
    /// Setting a directory's permission bits (last, deepest first).
    Chmod,
    /// Setting the owner or the extended attributes (the content and
    /// permission bits are restored). Without privilege a chown to another
    /// user, or a `trusted.*`/`security.*` attribute, fails with `EPERM`:
    /// run the rewind as root to restore them.
    Attrs,
}

impl FailedStep {
    fn as_str(self) -> &'static str {
        match self {
            FailedStep::Remove => "remove",
            FailedStep::Restore => "restore",
            FailedStep::Chmod => "chmod",
            FailedStep::Attrs => {
                "setting the owner and extended attributes (the content and mode are restored)"
            }
        }
    }
}

/// Why a path was not restored.
#[derive(Debug, thiserror::Error)]
pub enum ConflictReason {
    /// Its record is [`crate::record::PreImage::Unknown`]: it was made
    /// outside the mount after the turn began.
    #[error("it was created or replaced outside the mount after turn {turn} began, so its state then is unknown; left as it is")]
    UnknownAtTurnStart {
        /// The turn rewound to.
        turn: u64,
    },
    /// Its record says it existed, but an ancestor was then not a
    /// directory: it was made outside the mount.
    #[error("its record says it existed when turn {turn} began, but {} was then {}: it was made outside the mount, so its state then is unknown; left as it is", paths::display(.parent), then_words(.parent_kind))]
    MadeOutsideMount {
        /// The turn rewound to.
        turn: u64,
        /// The ancestor's raw path.
        parent: Vec<u8>,
        /// What the ancestor was then (`absent`, `unknown`, `file`, ...).
        parent_kind: &'static str,
    },
    /// Its turn-start content is kept as ranges that cannot be put back.
    #[error("cannot restore its content: {0}")]
    Ranges(#[source] RangeError),
    /// A directory on its path is a symlink now.
    #[error("a directory on its path is a symbolic link now; opfs never writes through one, so it is left as it is")]
    UnderSymlink,
    /// Its current state cannot be read.
    #[error("cannot read its current state: {0}")]
    ReadCurrent(#[source] io::Error),
    /// It changed behind the mount's back since opfs last saw it.
    #[error("changed outside the mount since opfs last saw it ({what}); left as it is (--force restores it anyway)")]
    ChangedOutsideMount {
        /// What changed, as [`crate::record::Fingerprint::differs`] words it.
        what: String,
    },
    /// A rewind that resumes or aborts an earlier one that stopped: the
    /// path changed in a turn after that rewind stopped (the agent's work,
    /// recorded there), so it is not overwritten.
    #[error("changed in turn {turn}, after the interrupted rewind (turn {rewind}) stopped; left as it is (--force restores it anyway, after recording its current state in the new rewind's own turn, so that a rewind to that turn gives the change back; turn {turn}'s records hold the path as it was before the change)")]
    ChangedAfterStop {
        /// The interrupted rewind's turn.
        rewind: u64,
        /// The first later turn that recorded the path.
        turn: u64,
    },
    /// Another name of its file (a hard link) changed behind the mount's
    /// back: so did this one.
    #[error("{} changed outside the mount since opfs last saw it, and it is a hard link of this path's file, so this path changed too; left as it is (--force restores it anyway)", paths::display(.other))]
    LinkChangedOutsideMount {
        /// The other name's raw path.
        other: Vec<u8>,
    },
    /// It was a hard link of a path this restore leaves as it is.
    #[error("it was a hard link of {} when the turn began, and that path is left as it is, so this one is too", paths::display(.other))]
    LinkNotRestored {
        /// The other name's raw path.
        other: Vec<u8>,
    },
    /// The target's blob is missing or corrupt.
    #[error("cannot restore its content: {0}")]
    Content(#[source] BlobError),
    /// A saved range's blob is missing or corrupt.
    #[error("cannot restore its content: a saved range: {0}")]
    SavedRange(#[source] BlobError),
    /// A directory to remove holds entries opfs did not record.
    #[error("directory holds entries opfs did not record, left in place: {}", joined(.names))]
    UnrecordedEntries {
        /// The entries' raw paths.
        names: Vec<Vec<u8>>,
    },
    /// It is, or holds, the project's git repository, which a rename
    /// through the mount moved there from `.git` after the target turn
    /// began: a rewind never removes it (`restore::repo`).
    #[error("{}; a rewind never removes the project's repository, so it is left as it is (move it back with `mv {} .git` once `.git` is free, or out of the project, then rewind again)", repo_words(.repo, .turn, .this), paths::display(.repo))]
    Repository {
        /// The repository's raw path.
        repo: Vec<u8>,
        /// The turn whose rename moved it there.
        turn: u64,
        /// True for the repository itself, false for a directory holding it.
        this: bool,
    },
    /// A directory to remove cannot be listed.
    #[error("cannot list the directory: {0}")]
    ListDir(#[source] io::Error),
    /// Its current state could not be recorded in the restore's turn.
    #[error("not restored: its current state could not be recorded: {0}")]
    Capture(#[source] CaptureError),
    /// A step of the executor failed.
    #[error("{} failed: {source}", .step.as_str())]
    Step {
        /// The step.
        step: FailedStep,
        /// The cause.
        source: io::Error,
    },
    /// A worktree merge: the project changed the path since the
    /// worktree's base turn began, and so did the worktree.
    #[error("changed both in the worktree and in the project since the worktree's base (turn {base}); left as the project has it (--force takes the worktree's side)")]
    ChangedInProject {
        /// The worktree's base turn.
        base: u64,
    },
    /// A worktree merge: the path changed behind the project's mount after
    /// the worktree's base turn began, so the worktree saw those bytes, not
    /// its base.
    #[error("changed in the project behind its mount after the worktree's base (turn {base}) began, so the worktree's base of it is not known; left as the project has it (--force takes the worktree's side)")]
    DriftedBase {
        /// The worktree's base turn.
        base: u64,
    },
    /// A reason received as text (a report deserialized from JSON).
    #[error("{0}")]
    Text(String),
}

fn repo_words(repo: &[u8], turn: &u64, this: &bool) -> String {
    if *this {
        format!("it is the project's git repository, moved here from .git through the mount in turn {turn}")
    } else {
        format!(
            "it holds the project's git repository at {}, moved there from .git through the mount in turn {turn}",
            paths::display(repo)
        )
    }
}

fn then_words(kind: &str) -> String {
    match kind {
        "absent" => "absent".to_string(),
        "unknown" => "of unknown state".to_string(),
        k => format!("a {k}"),
    }
}

fn joined(names: &[Vec<u8>]) -> String {
    names
        .iter()
        .map(|n| paths::display(n))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Clone for Conflict {
    /// A clone keeps the path and the reason's text
    /// ([`ConflictReason::Text`]): `io::Error` cannot be cloned.
    fn clone(&self) -> Conflict {
        Conflict {
            path: self.path.clone(),
            reason: ConflictReason::Text(self.reason.to_string()),
        }
    }
}

impl PartialEq for Conflict {
    /// Same path and same reason text.
    fn eq(&self, other: &Conflict) -> bool {
        self.path == other.path && self.reason.to_string() == other.reason.to_string()
    }
}

impl Eq for Conflict {}

#[derive(Serialize, Deserialize)]
struct Wire {
    path: String,
    reason: String,
}

impl Serialize for Conflict {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Wire {
            path: self.display_path(),
            reason: self.reason.to_string(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Conflict {
    /// The path is parsed back from its rendering; the reason is kept as
    /// text ([`ConflictReason::Text`]).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Conflict, D::Error> {
        let w = Wire::deserialize(d)?;
        Ok(Conflict {
            path: paths::parse_display(&w.path),
            reason: ConflictReason::Text(w.reason),
        })
    }
}

impl fmt::Display for Conflict {
    /// `PATH: REASON`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.display_path(), self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: ConflictReason) -> String {
        r.to_string()
    }

    #[test]
    fn reasons_read_as_they_always_have() {
        assert_eq!(
            text(ConflictReason::UnknownAtTurnStart { turn: 3 }),
            "it was created or replaced outside the mount after turn 3 began, so its state then is unknown; left as it is"
        );
        for (kind, then) in [
            ("absent", "absent"),
            ("unknown", "of unknown state"),
            ("file", "a file"),
        ] {
            assert_eq!(
                text(ConflictReason::MadeOutsideMount {
                    turn: 1,
                    parent: b"d".to_vec(),
                    parent_kind: kind,
                }),
                format!("its record says it existed when turn 1 began, but d was then {then}: it was made outside the mount, so its state then is unknown; left as it is")
            );
        }
        assert_eq!(
            text(ConflictReason::Ranges(RangeError::BaseGone)),
            "cannot restore its content: its turn-start bytes are kept as ranges over a file that is no longer there"
        );
        assert_eq!(
            text(ConflictReason::UnderSymlink),
            "a directory on its path is a symbolic link now; opfs never writes through one, so it is left as it is"
        );
        assert_eq!(
            text(ConflictReason::ChangedOutsideMount {
                what: "it was deleted".into()
            }),
            "changed outside the mount since opfs last saw it (it was deleted); left as it is (--force restores it anyway)"
        );
        assert_eq!(
            text(ConflictReason::UnrecordedEntries {
                names: vec![b"d/a".to_vec(), b"d/\xff".to_vec()]
            }),
            "directory holds entries opfs did not record, left in place: d/a, d/\\xff"
        );
        assert_eq!(
            text(ConflictReason::Step {
                step: FailedStep::Remove,
                source: io::Error::other("boom"),
            }),
            "remove failed: boom"
        );
        assert_eq!(
            text(ConflictReason::ListDir(io::Error::other("boom"))),
            "cannot list the directory: boom"
        );
        assert_eq!(
            text(ConflictReason::ReadCurrent(io::Error::other("boom"))),
            "cannot read its current state: boom"
        );
    }

    #[test]
    fn a_conflict_serializes_as_path_and_reason_and_reads_back() {
        let c = Conflict::new(b"caf\xe9", ConflictReason::UnderSymlink);
        let json = serde_json::to_string(&c).expect("json");
        assert_eq!(
            json,
            r#"{"path":"caf\\xe9","reason":"a directory on its path is a symbolic link now; opfs never writes through one, so it is left as it is"}"#
        );
        let back: Conflict = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, c);
        assert_eq!(back.path, b"caf\xe9");
    }
}
