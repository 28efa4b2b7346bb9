//! The `fingerprints` table: what each path looked like when the mount last
//! saw it, so a change made behind its back can be told (design §3).

use rusqlite::{params, OptionalExtension};

use super::codec::{Id, Uint};
use super::{Index, IndexError};
use crate::record::Fingerprint;

impl Index {
    /// Stores fingerprints in one transaction; `None` deletes the path's
    /// fingerprint (the mount is changing it; nothing to compare against).
    ///
    /// Durable after `Ok` to the level the index was opened with; after
    /// `Err` none of them is.
    pub fn put_fingerprints<'a>(
        &mut self,
        entries: impl Iterator<Item = (&'a [u8], Option<&'a Fingerprint>)>,
    ) -> Result<(), IndexError> {
        self.in_transaction(|tx| {
            let mut put = tx.prepare_cached(
                "INSERT OR REPLACE INTO fingerprints(path, ftype, ino, size, mtime_ns, perm)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            let mut del = tx.prepare_cached("DELETE FROM fingerprints WHERE path = ?1")?;
            for (p, fp) in entries {
                match fp {
                    Some(f) => put.execute(params![
                        p,
                        i64::from(f.file_type),
                        Id(f.ino),
                        Uint(f.size),
                        f.mtime_ns,
                        i64::from(f.perm)
                    ]),
                    None => del.execute([p]),
                }?;
            }
            Ok(())
        })
    }

    /// True when some path's stored fingerprint is `fp` exactly (same
    /// inode, type, size, mtime and permission bits): the mount last left
    /// that inode in that state under some name. A scan of the table; used
    /// only for a file with several links whose own fingerprint differs.
    ///
    /// Errors: those of SQLite.
    pub fn fingerprint_stored(&self, fp: &Fingerprint) -> Result<bool, IndexError> {
        self.conn
            .prepare_cached(
                "SELECT 1 FROM fingerprints WHERE ino = ?1 AND ftype = ?2 AND size = ?3
                 AND mtime_ns = ?4 AND perm = ?5 LIMIT 1",
            )
            .and_then(|mut s| {
                s.exists(params![
                    Id(fp.ino),
                    i64::from(fp.file_type),
                    Uint(fp.size),
                    fp.mtime_ns,
                    i64::from(fp.perm)
                ])
            })
            .map_err(self.err())
    }

    /// The stored fingerprint of `path`, if any.
    ///
    /// Errors: [`IndexError::Corrupt`] when a stored field is out of range.
    pub fn fingerprint(&self, path: &[u8]) -> Result<Option<Fingerprint>, IndexError> {
        let row = self
            .conn
            .prepare_cached(
                "SELECT ftype, ino, size, mtime_ns, perm FROM fingerprints WHERE path = ?1",
            )
            .and_then(|mut s| {
                s.query_row([path], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, Id>(1)?.0,
                        r.get::<_, Uint>(2)?.0,
                        r.get::<_, i64>(3)?,
                        r.get::<_, i64>(4)?,
                    ))
                })
                .optional()
            })
            .map_err(self.err())?;
        let Some((ftype, ino, size, mtime_ns, perm)) = row else {
            return Ok(None);
        };
        let (Ok(file_type), Ok(perm)) = (u32::try_from(ftype), u32::try_from(perm)) else {
            return Err(self.corrupt(format!(
                "fingerprint of {:?}: file type {ftype} or permission bits {perm} out of range",
                crate::paths::display(path)
            )));
        };
        Ok(Some(Fingerprint {
            file_type,
            ino,
            size,
            mtime_ns,
            perm,
        }))
    }
}
