//! The `repo_moves` table: where a rename through the mount moved the
//! project's repository (`.git` at the root) in each turn, so a rewind never
//! removes it (`docs/design.md`, "`.git`").

use rusqlite::params;

use super::codec::Uint;
use super::{Index, IndexError};

impl Index {
    /// Notes that a rename through the mount in `turn` moved the root
    /// `.git` to `path` (written at once, before the rename runs).
    ///
    /// Errors: SQLite's.
    pub fn note_repo_move(&self, turn: u64, path: &[u8]) -> Result<(), IndexError> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO repo_moves(turn, path) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![Uint(turn), path]))
            .map(drop)
            .map_err(self.err())
    }

    /// True when some turn noted a move of the project's repository to
    /// `path` ([`Index::note_repo_move`]).
    ///
    /// Errors: SQLite's.
    pub fn repo_moved_to(&self, path: &[u8]) -> Result<bool, IndexError> {
        self.conn
            .prepare_cached("SELECT 1 FROM repo_moves WHERE path = ?1 LIMIT 1")
            .and_then(|mut s| s.exists([path]))
            .map_err(self.err())
    }

    /// The paths the root `.git` was moved to through the mount in turns
    /// `>= from`, with the turn of each move, oldest first. Empty for a file
    /// without the table (an older schema opened read-only).
    ///
    /// Errors: SQLite's.
    pub fn repo_moves(&self, from: u64) -> Result<Vec<(u64, Vec<u8>)>, IndexError> {
        let exists = self
            .conn
            .prepare_cached(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'repo_moves'",
            )
            .and_then(|mut s| s.exists([]))
            .map_err(self.err())?;
        if !exists {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare_cached("SELECT turn, path FROM repo_moves WHERE turn >= ?1 ORDER BY turn")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([Uint(from)], |r| Ok((r.get::<_, Uint>(0)?.0, r.get(1)?)))
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }
}
