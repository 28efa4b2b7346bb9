//! The `ranges` table: the old bytes a turn saved before overwriting part
//! of a large file (`docs/ranges.md`).

use rusqlite::params;

use super::codec::Uint;
use super::{Index, IndexError};
use crate::paths;
use crate::record::Hash;

/// One saved range of a [`PreImage::Ranged`](crate::record::PreImage::Ranged)
/// record: `len` bytes at `offset` when the turn began, stored as blob
/// `blob`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes (at least 1).
    pub len: u64,
    /// BLAKE3 of the bytes.
    pub blob: Hash,
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
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT offset, len, blob FROM ranges WHERE turn = ?1 AND path = ?2 ORDER BY rowid",
            )
            .map_err(self.err())?;
        let mut rows = stmt.query(params![Uint(turn), path]).map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            let offset: i64 = r.get(0).map_err(self.err())?;
            let len: i64 = r.get(1).map_err(self.err())?;
            let blob: Vec<u8> = r.get(2).map_err(self.err())?;
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
            out.push(Piece {
                offset: start,
                len: n,
                blob,
            });
        }
        Ok(out)
    }
}
