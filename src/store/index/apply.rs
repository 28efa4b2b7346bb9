//! Committing the capture log (`store::log`) into the index: blob rows,
//! records, saved ranges and the fingerprints they invalidate, in one
//! transaction.

use rusqlite::params;

use super::codec::{kind, Uint};
use super::records::{insert_preimage, INSERT_PREIMAGE};
use super::{Index, IndexError};
use crate::record::PreImage;
use crate::store::log::{Entry, Op};

impl Index {
    /// Commits the capture log's `entries` in one transaction: each blob
    /// row (with the inline content of a small file), each record (the
    /// first of a (turn, path) wins, so applying an entry twice changes
    /// nothing), and the removal of each recorded path's stored fingerprint
    /// (the mount is about to change it; see `Journal`). Returns the bytes
    /// of the blobs it listed that were not listed before (so a daemon
    /// keeps its running total of stored bytes without a scan).
    ///
    /// Durable after `Ok` to the level the index was opened with; after
    /// `Err` nothing of it is.
    ///
    /// Errors: SQLite's; [`IndexError::Corrupt`] for an [`Op::Kept`] entry
    /// (kept records are resolved before any commit, `store::kept`: one
    /// here would name no blob), before anything is written.
    pub fn apply(&mut self, entries: &[Entry]) -> Result<u64, IndexError> {
        if let Some(e) = entries.iter().find(|e| matches!(e.op, Op::Kept { .. })) {
            return Err(IndexError::Corrupt {
                path: self.path.clone(),
                what: format!(
                    "a kept record of {:?} (turn {}) reached the index unresolved",
                    crate::paths::display(&e.path),
                    e.turn
                ),
            });
        }
        self.in_transaction(|tx| {
            let mut added = 0u64;
            let mut blob = tx.prepare_cached(
                "INSERT OR IGNORE INTO blobs(hash, size, data) VALUES (?1, ?2, ?3)",
            )?;
            let mut record = tx.prepare_cached(INSERT_PREIMAGE)?;
            let mut forget = tx.prepare_cached("DELETE FROM fingerprints WHERE path = ?1")?;
            let mut piece = tx.prepare_cached(
                "INSERT OR IGNORE INTO ranges(turn, path, offset, len, blob)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            let mut drop_ranged = tx.prepare_cached(&format!(
                "DELETE FROM preimages WHERE turn = ?1 AND path = ?2 AND kind = {}",
                kind::RANGED
            ))?;
            let mut drop_pieces =
                tx.prepare_cached("DELETE FROM ranges WHERE turn = ?1 AND path = ?2")?;
            for e in entries {
                if let PreImage::File {
                    blob: hash, size, ..
                } = &e.pre
                {
                    if blob.execute(params![&hash[..], Uint(*size), e.data.as_deref()])? > 0 {
                        added = added.saturating_add(*size);
                    }
                }
                match e.op {
                    Op::Record => {
                        insert_preimage(&mut record, e.turn, &e.path, &e.pre, e.meta.as_ref())?;
                    }
                    Op::Replace => {
                        // Only a ranged record is replaced: any other first
                        // record of the turn stays the pre-image.
                        if drop_ranged.execute(params![Uint(e.turn), &e.path])? > 0 {
                            drop_pieces.execute(params![Uint(e.turn), &e.path])?;
                        }
                        insert_preimage(&mut record, e.turn, &e.path, &e.pre, e.meta.as_ref())?;
                    }
                    // Never reached: refused before the transaction.
                    Op::Kept { .. } => {}
                    Op::Range { offset } => {
                        if let PreImage::File {
                            blob: hash, size, ..
                        } = &e.pre
                        {
                            piece.execute(params![
                                Uint(e.turn),
                                &e.path,
                                Uint(offset),
                                Uint(*size),
                                &hash[..]
                            ])?;
                        }
                    }
                }
                forget.execute([&e.path])?;
            }
            Ok(added)
        })
    }
}
