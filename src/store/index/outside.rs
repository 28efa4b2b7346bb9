//! The `outside_edits` table: states of a path made behind the mount's
//! back during a turn, kept just before a mutation through the mount
//! overwrote, removed or moved them (`docs/design.md`, "Edits behind the
//! mount that the agent overwrites").

use rusqlite::{params, OptionalExtension};

use super::codec::{self, Uint};
use super::{Index, IndexError};
use crate::record::{Hash, PreImage};

/// One kept state: what `path` held, made outside the mount, when a
/// mutation through the mount in `turn` met it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutsideEdit {
    /// The turn that was open.
    pub turn: u64,
    /// Project-relative path bytes.
    pub path: Vec<u8>,
    /// 1 for the first state kept for (turn, path), then 2, ...
    pub seq: u64,
    /// What the path held (a file's bytes are blob `blob`; a directory or
    /// special file is kept without its entries or content).
    pub pre: PreImage,
    /// When it was kept, ns since the Unix epoch.
    pub kept_at: i64,
    /// The mutation that met it: `write`, `metadata`, `remove`,
    /// `rename` (moved away) or `replace` (renamed over).
    pub by: String,
}

impl OutsideEdit {
    /// The blob holding a kept file's bytes.
    pub fn blob(&self) -> Option<Hash> {
        match &self.pre {
            PreImage::File { blob, .. } => Some(*blob),
            _ => None,
        }
    }
}

const COLUMNS: &str = "turn, path, seq, kind, perm, blob, size, target, rdev, ino, kept_at, by";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<OutsideEdit, String>> {
    let turn: Uint = r.get(0)?;
    let path: Vec<u8> = r.get(1)?;
    let seq: Uint = r.get(2)?;
    let kept_at: i64 = r.get(10)?;
    let by: String = r.get(11)?;
    Ok(codec::preimage_from_row(r, 3).map(|pre| OutsideEdit {
        turn: turn.0,
        path,
        seq: seq.0,
        pre,
        kept_at,
        by,
    }))
}

impl Index {
    /// True when the file has the `outside_edits` table (schema version 7;
    /// an older file opened read-only has none).
    pub(super) fn has_outside_table(&self) -> Result<bool, IndexError> {
        self.conn
            .prepare_cached(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outside_edits'",
            )
            .and_then(|mut s| s.exists([]))
            .map_err(self.err())
    }

    /// Keeps `pre` (with a file's blob, already in the blob store, listed
    /// as `blob_size` bytes) as the next state of `path` kept in `turn`,
    /// met by mutation `by`; returns its sequence number and the bytes of
    /// the blob when this listed it for the first time (else 0). One
    /// transaction: durable after `Ok` to the level the index was opened
    /// with; after `Err` nothing was written.
    pub fn keep_outside_edit(
        &mut self,
        turn: u64,
        path: &[u8],
        pre: &PreImage,
        by: &str,
        kept_at: i64,
    ) -> Result<(u64, u64), IndexError> {
        self.in_transaction(|tx| {
            let mut added = 0;
            if let PreImage::File { blob, size, .. } = pre {
                if tx.execute(
                    "INSERT OR IGNORE INTO blobs(hash, size) VALUES (?1, ?2)",
                    params![&blob[..], Uint(*size)],
                )? > 0
                {
                    added = *size;
                }
            }
            let seq: Uint = tx.query_row(
                "SELECT coalesce(max(seq), 0) + 1 FROM outside_edits WHERE turn = ?1 AND path = ?2",
                params![Uint(turn), path],
                |r| r.get(0),
            )?;
            let (kind, perm, blob, size, target, rdev, ino) = codec::columns(pre);
            tx.execute(
                &format!("INSERT INTO outside_edits({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"),
                params![Uint(turn), path, seq, kind, perm, blob, size, target, rdev, ino, kept_at, by],
            )?;
            Ok((seq.0, added))
        })
    }

    /// The states kept from turn `from` on (all turns with `None`), by
    /// turn, path and sequence number.
    ///
    /// Errors: SQLite's; [`IndexError::Corrupt`] for a malformed row.
    pub fn outside_edits(&self, from: Option<u64>) -> Result<Vec<OutsideEdit>, IndexError> {
        if !self.has_outside_table()? {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM outside_edits WHERE turn >= ?1 ORDER BY turn, path, seq"
            ))
            .map_err(self.err())?;
        let rows = stmt
            .query_map([Uint(from.unwrap_or(0))], from_row)
            .map_err(self.err())?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r.map_err(self.err())?.map_err(|w| self.corrupt(w))?);
        }
        Ok(out)
    }

    /// The state kept for `path` in `turn` with sequence number `seq`, or
    /// the last one kept when `seq` is `None`.
    ///
    /// Errors: SQLite's; [`IndexError::Corrupt`] for a malformed row.
    pub fn outside_edit(
        &self,
        turn: u64,
        path: &[u8],
        seq: Option<u64>,
    ) -> Result<Option<OutsideEdit>, IndexError> {
        if !self.has_outside_table()? {
            return Ok(None);
        }
        let row = self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM outside_edits WHERE turn = ?1 AND path = ?2
                 AND (?3 IS NULL OR seq = ?3) ORDER BY seq DESC LIMIT 1"
            ))
            .and_then(|mut s| {
                s.query_row(params![Uint(turn), path, seq.map(Uint)], from_row)
                    .optional()
            })
            .map_err(self.err())?;
        row.transpose().map_err(|w| self.corrupt(w))
    }
}
