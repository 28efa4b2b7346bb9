//! The `ranges` table: the old bytes a turn saved before overwriting part
//! of a large file (`docs/ranges.md`).

use rusqlite::params;

use super::codec::Uint;
use super::{Index, IndexError};
use crate::paths;
use crate::record::Hash;

/// One saved range of a [`PreImage::Ranged`](crate::record::PreImage::Ranged)
/// record: `len` bytes at `offset` when the turn began, stored in the
/// turn's range pack (`at`) or as blob `blob`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes (at least 1).
    pub len: u64,
    /// BLAKE3 of the bytes.
    pub blob: Hash,
    /// Where the bytes are in a range pack (`None`: the blob `blob`).
    pub at: Option<Packed>,
}

impl Index {
    /// The saved ranges of `path`'s
    /// [`PreImage::Ranged`](crate::record::PreImage::Ranged) record in
    /// `turn`, in the order they were saved (earliest first: where two
    /// overlap, the earlier holds the turn-start bytes).
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed row.
    pub fn ranges_of(&self, turn: u64, path: &[u8]) -> Result<Vec<Piece>, IndexError> {
        if !self.ranges_table {
            return Ok(Vec::new());
        }
        let sql = if self.pack_column {
            "SELECT offset, len, blob, pack FROM ranges WHERE turn = ?1 AND path = ?2 ORDER BY rowid"
        } else {
            "SELECT offset, len, blob, NULL FROM ranges WHERE turn = ?1 AND path = ?2 ORDER BY rowid"
        };
        let mut stmt = self.conn.prepare_cached(sql).map_err(self.err())?;
        let mut rows = stmt.query(params![Uint(turn), path]).map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            let offset: i64 = r.get(0).map_err(self.err())?;
            let len: i64 = r.get(1).map_err(self.err())?;
            let blob: Vec<u8> = r.get(2).map_err(self.err())?;
            let pack: Option<i64> = r.get(3).map_err(self.err())?;
            let bad = || {
                self.corrupt(format!(
                    "saved range of {:?} in turn {turn} at {offset}+{len}",
                    paths::display(path)
                ))
            };
            let blob: Hash = blob.as_slice().try_into().map_err(|_| bad())?;
            let (Ok(start), Ok(n)) = (u64::try_from(offset), u64::try_from(len)) else {
                return Err(bad());
            };
            if n == 0 || offset.checked_add(len).is_none() {
                return Err(bad());
            }
            let at = match pack.map(u64::try_from) {
                None => None,
                Some(Ok(p)) => Some(Packed {
                    turn,
                    offset: p,
                    len: n,
                }),
                Some(Err(_)) => return Err(bad()),
            };
            out.push(Piece {
                offset: start,
                len: n,
                blob,
                at,
            });
        }
        Ok(out)
    }
}

/// Where a saved piece kept in a range pack is: the pack's turn, the byte
/// offset in the pack, the length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    /// The turn whose pack holds the bytes (`blobs/packs/<turn>`).
    pub turn: u64,
    /// Byte offset in the pack.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Index {
    /// The `(offset, blob)` of every saved piece of `path` in `turn`
    /// already listed: what a replay of the capture log skips (a crash
    /// between a group commit and the log's truncation).
    ///
    /// Errors: SQLite's.
    pub fn listed_pieces(
        &self,
        turn: u64,
        path: &[u8],
    ) -> Result<std::collections::HashSet<(u64, Hash)>, IndexError> {
        Ok(self
            .ranges_of(turn, path)?
            .into_iter()
            .map(|p| (p.offset, p.blob))
            .collect())
    }

    /// Bytes of the saved pieces kept in range packs (what the blobs
    /// table does not count).
    ///
    /// Errors: SQLite's.
    pub fn packed_bytes(&self) -> Result<u64, IndexError> {
        if !self.pack_column {
            return Ok(0);
        }
        self.conn
            .query_row(
                "SELECT coalesce(sum(len), 0) FROM ranges WHERE pack IS NOT NULL",
                [],
                |r| r.get::<_, Uint>(0),
            )
            .map(|v| v.0)
            .map_err(self.err())
    }
}
