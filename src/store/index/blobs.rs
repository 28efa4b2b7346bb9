//! The `blobs` table: which blobs are stored, their sizes, and the content
//! of small ones kept inline (see `store::log`).

use rusqlite::{params, OptionalExtension};

use super::codec::Uint;
use super::{Index, IndexError};
use crate::record::Hash;

impl Index {
    /// The content of blob `hash` when it is stored inline (a small file,
    /// see `store::log`); `None` when it is a blob file or unknown.
    pub fn inline_blob(&self, hash: &Hash) -> Result<Option<Vec<u8>>, IndexError> {
        if !self.inline_column {
            return Ok(None); // a version-1 file opened read-only
        }
        self.conn
            .prepare_cached("SELECT data FROM blobs WHERE hash = ?1 AND data IS NOT NULL")
            .and_then(|mut s| s.query_row([&hash[..]], |r| r.get(0)).optional())
            .map_err(self.err())
    }

    /// Records that blob `hash` of `size` bytes is stored.
    pub fn add_blob(&self, hash: &Hash, size: u64) -> Result<(), IndexError> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO blobs(hash, size) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![&hash[..], Uint(size)]))
            .map(drop)
            .map_err(self.err())
    }

    /// Every blob hash some record or saved range refers to.
    ///
    /// Errors: [`IndexError::Corrupt`] when a reference is not 32 bytes.
    pub fn referenced_blobs(&self) -> Result<Vec<Hash>, IndexError> {
        let sql = if self.has_outside_table()? {
            "SELECT blob FROM preimages WHERE blob IS NOT NULL UNION SELECT blob FROM ranges
             UNION SELECT blob FROM outside_edits WHERE blob IS NOT NULL"
        } else if self.ranges_table {
            "SELECT blob FROM preimages WHERE blob IS NOT NULL UNION SELECT blob FROM ranges"
        } else {
            "SELECT DISTINCT blob FROM preimages WHERE blob IS NOT NULL"
        };
        let mut stmt = self.conn.prepare(sql).map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| r.get::<_, Vec<u8>>(0))
            .map_err(self.err())?;
        let mut out = Vec::new();
        for r in rows {
            let b = r.map_err(self.err())?;
            let h: Hash = b
                .as_slice()
                .try_into()
                .map_err(|_| self.corrupt("a blob reference is not 32 bytes".into()))?;
            out.push(h);
        }
        Ok(out)
    }
}
