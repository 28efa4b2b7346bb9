//! The control protocol: one JSON object per line in each direction over
//! the daemon's `control.sock`, a [`Request`] from the client and one
//! [`Response`] from the daemon. A rewind that asks for progress
//! (`"progress": true`) gets [`Response::Progress`] lines before its one
//! answer; a request that does not ask gets none, so a client that never
//! asks reads exactly one line per request as before.

use std::io::{self, BufRead, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::rewind::RewindReport;
use crate::worktree::merge::MergeReport;

/// A request to the daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Report mount state.
    Status,
    /// Close the open turn and open the next.
    Turn {
        /// Label of the new turn.
        label: Option<String>,
        /// External id of the new turn.
        id: Option<String>,
        /// Label of the turn it closes (`opfs turn -m`; absent: keep it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        closing_label: Option<String>,
    },
    /// A prompt sent from inside `opfs run`'s sandbox (through the run's
    /// narrow socket, `crate::mcp::narrow`): relabel the open turn when it
    /// is empty and was opened from inside or is `placeholder`, else close
    /// it and open a turn marked as opened from inside
    /// (`crate::capture::Journal::sandbox_turn`). Never wakes retention.
    /// Answered with [`Response::Turn`].
    SandboxTurn {
        /// Label of the turn (already cut to its bound by the caller).
        label: Option<String>,
        /// External id of the turn.
        id: Option<String>,
        /// The turn `opfs run` opened for the session with a label of its
        /// own, which the first prompt may relabel while it is empty.
        #[serde(default)]
        placeholder: Option<u64>,
    },
    /// Rewind to the start of a turn.
    Rewind {
        /// The turn.
        to: u64,
        /// Plan only.
        dry_run: bool,
        /// Restore paths changed behind the mount's back too.
        #[serde(default)]
        force: bool,
        /// Send [`Response::Progress`] lines while the restore runs
        /// (absent: false).
        #[serde(default)]
        progress: bool,
        /// Resume or abort the pending rewind instead (`to` is ignored;
        /// absent: none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pending: Option<crate::rewind::Pending>,
        /// With conflicts: restore the other paths (absent: false, a
        /// conflict stops the rewind before it writes).
        #[serde(default)]
        partial: bool,
        /// Write conflict markers into conflicted text files (absent: false).
        #[serde(default)]
        markers: bool,
        /// `opfs restore`: restore only these paths (rendered, `\xNN`
        /// for bytes that are not UTF-8; each with everything beneath it),
        /// as a rewind turn of its own (absent: the whole project).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        paths: Option<Vec<String>>,
    },
    /// Unmount and exit.
    Unmount,
    /// Merge a worktree of this project into it, as one turn of kind
    /// `merge` (`crate::worktree::merge`).
    Merge {
        /// The worktree's name.
        worktree: String,
        /// Plan only.
        dry_run: bool,
        /// Take the worktree's side for paths the project changed too.
        #[serde(default)]
        force: bool,
        /// With conflicts: merge the other paths (absent: false, a
        /// conflict stops the merge before it writes).
        #[serde(default)]
        partial: bool,
        /// Write conflict markers into text files both sides changed
        /// (absent: false).
        #[serde(default)]
        markers: bool,
        /// Merge paths the project's ignore rules ignore too (absent:
        /// false).
        #[serde(default)]
        include_ignored: bool,
    },
    /// Serve callers in the mount and user namespaces of process `pid` (a
    /// view `opfs shell` made: `--sandbox unrestricted`, which confines
    /// nothing) for as long as the process that asks lives. Like every
    /// request, accepted only from the daemon's own namespaces, which no
    /// sandbox reaches. Answered with [`Response::Trusted`].
    TrustView {
        /// A process in the view (bwrap's child).
        pid: i32,
    },
    /// Commit the capture records pending in the capture log to the index,
    /// so a reader in another process (history, export) sees every capture
    /// made so far. Answered with [`Response::Committed`].
    Commit,
    /// Apply retention while mounted (`crate::gc::gc_served`). Answered
    /// with [`Response::Gc`].
    Gc {
        /// Keep at least the newest this many turns.
        keep: u64,
        /// Drop more old turns until the kept blobs take at most this many
        /// bytes.
        max_bytes: Option<u64>,
        /// Drop only turns that ended at least this many days ago (absent:
        /// any age).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_age_days: Option<u64>,
    },
}

/// How a failed request failed.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The request was wrong (bad turn number...): exit code 2.
    Usage,
    /// The operation failed: exit code 1.
    Failure,
}

/// The daemon's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    /// Status.
    Status(Status),
    /// A new turn was opened.
    Turn {
        /// Its number.
        turn: u64,
        /// True when the daemon looked in the index, right after opening
        /// the turn, for a rewind that stopped half way, and says what it
        /// found in `stopped_rewind`; false (absent) from a daemon that
        /// does not look, and for a turn opened from inside the sandbox:
        /// the client then looks itself.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        checked_rewind: bool,
        /// With `checked_rewind`: the note of the rewind that stopped half
        /// way (`opfs rewind --resume`/`--abort` pending), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stopped_rewind: Option<String>,
    },
    /// A rewind ran (or was planned): the report's fields sit beside
    /// `result` (its `touched` paths are not sent).
    Rewind(RewindReport),
    /// A merge ran (or was planned): the report's fields sit beside
    /// `result`.
    Merge(MergeReport),
    /// The daemon is unmounting.
    Unmounting,
    /// The pending capture records are in the index.
    Committed,
    /// Callers in the view's namespaces are served from now on.
    Trusted,
    /// Not an answer: how far the request has got, `done` of `total`
    /// units of work (for a rewind: see `rewind::rewind_with_progress`).
    /// Sent only to a request that asked for it, before its answer: at
    /// most about ten times a second while the work runs, then once with
    /// where it ended (`done == total` for a rewind that restored).
    Progress {
        /// Units done.
        done: u64,
        /// Units in all.
        total: u64,
    },
    /// Retention ran: the report's fields sit beside `result`.
    Gc(crate::gc::GcReport),
    /// The request failed.
    Error {
        /// Usage or failure.
        kind: FailureKind,
        /// What went wrong, naming the path or turn.
        message: String,
    },
}

/// What `opfs status` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// True while a daemon serves the project.
    pub mounted: bool,
    /// The mountpoint, if mounted.
    pub mountpoint: Option<PathBuf>,
    /// The project directory.
    pub project: PathBuf,
    /// The state dir.
    pub state_dir: PathBuf,
    /// The open turn.
    pub turn: u64,
    /// Bytes of blobs referenced by the index.
    pub store_bytes: u64,
    /// Number of pre-image records.
    pub records: u64,
    /// The daemon's pid, if mounted.
    pub pid: Option<u32>,
    /// What the daemon recovered at start (an interrupted rewind), if anything.
    pub recovered: Option<String>,
    /// True when the project directory was deleted while mounted: every
    /// mutation through the mount fails (`ENOENT`) and rewinds are refused.
    #[serde(default)]
    pub project_deleted: bool,
    /// Mutations refused since the last capture that succeeded, because
    /// their capture failed with `ENOSPC` (the state dir's filesystem is
    /// full) or `EIO`; absent while captures succeed (and without a
    /// daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutations_refused: Option<MutationsRefused>,
}

/// Mutations refused for a full or failing store ([`Status`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MutationsRefused {
    /// How many since the last capture that succeeded.
    pub count: u64,
    /// When the first of them was, in milliseconds since the Unix epoch.
    pub since_ms: u64,
    /// Why the last one failed: `ENOSPC` or `EIO`.
    pub errno: String,
}

/// Writes `msg` as one line of JSON.
///
/// Errors: the write fails (the peer went away).
pub fn write_message<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let mut out = serde_json::to_vec(msg).map_err(io::Error::other)?;
    out.push(b'\n');
    w.write_all(&out)
}

/// Reads one line into `line` (cleared first); `Ok(false)` at end of file.
///
/// Errors: the read fails.
pub fn read_line(r: &mut impl BufRead, line: &mut String) -> io::Result<bool> {
    line.clear();
    Ok(r.read_line(line)? > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewind_report_crosses_the_socket_as_it_was_sent() {
        let sent = serde_json::json!({
            "turn": 5,
            "rewound_to": 2,
            "dry_run": false,
            "restored": ["a", "caf\\xe9"],
            "conflicts": [{"path": "d/\\\\x41", "reason": "remove failed: boom"}],
            "plan": [
                {"path": "a", "current": "file", "target": "file", "steps": ["rewrite"]},
                {"path": "d", "current": "dir", "target": "absent", "steps": ["remove"]},
            ],
            "open_turn": 6,
            "stopped_by_conflicts": false,
            "marked": [],
        });
        let report: RewindReport = serde_json::from_value(sent.clone()).expect("report");
        let mut wire = Vec::new();
        write_message(&mut wire, &Response::Rewind(report)).expect("write");
        let mut line = String::new();
        assert!(read_line(&mut &wire[..], &mut line).expect("read"));
        let mut fields: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(fields["result"], "rewind", "{line}");
        if let Some(map) = fields.as_object_mut() {
            map.remove("result");
        }
        assert_eq!(
            fields, sent,
            "the wire carries the report's fields beside the tag"
        );
        let Response::Rewind(back) = serde_json::from_str(&line).expect("response") else {
            panic!("not a rewind answer: {line}");
        };
        assert_eq!(serde_json::to_value(&back).expect("json"), sent);
        assert_eq!(back.conflicts[0].path, b"d/\\x41");
        assert!(back.touched.is_empty());
    }
}
