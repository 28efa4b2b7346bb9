//! Committing the capture log (`store::log`) into the index: blob rows,
//! records, saved ranges and the fingerprints they invalidate, in one
//! transaction.

use std::collections::{BTreeMap, HashMap, HashSet};

use rusqlite::params;

use super::codec::{kind, Uint};
use super::records::{insert_preimage, INSERT_PREIMAGE};
use super::{Index, IndexError};
use crate::record::Hash;
use crate::record::PreImage;
use crate::store::log::{Entry, Op};
use crate::store::BlobStore;

/// The `(offset, blob)` of the saved pieces of one (turn, path) the index
/// lists.
type Listed = HashSet<(u64, Hash)>;

impl Index {
    /// Commits the capture log's `entries` in one transaction: each blob
    /// row (with the inline content of a small file), each record (the
    /// first of a (turn, path) wins, so applying an entry twice changes
    /// nothing), each saved piece, and the removal of each recorded path's
    /// stored fingerprint (the mount is about to change it; see
    /// `Journal`). Returns the bytes of the blobs and packed pieces it
    /// listed that were not listed before (so a daemon keeps its running
    /// total of stored bytes without a scan).
    ///
    /// A saved piece that carries its bytes (at most
    /// [`INLINE_MAX`](crate::store::INLINE_MAX)) is not a blob: before the
    /// transaction, the pieces of each turn are appended to that turn's
    /// range pack in `blobs` with one write ([`BlobStore::append_pack`]),
    /// and the piece's row names its offset there. Bytes appended by an
    /// attempt whose transaction failed stay in the pack unreferenced
    /// until gc drops the turn. Saved pieces are listed as given: a replay
    /// of the capture log drops the ones already listed first
    /// ([`Index::unlisted`]); listed twice, a piece would only be read
    /// after itself (the earlier piece wins, and its bytes are the same).
    ///
    /// Durable after `Ok` to the level the index was opened with; after
    /// `Err` nothing of it is (a pack may have grown, see above).
    ///
    /// Errors: SQLite's; [`IndexError::Pack`] when a pack cannot be
    /// written (nothing is committed); [`IndexError::Corrupt`] for an
    /// [`Op::Kept`] entry (kept records are resolved before any commit,
    /// `store::kept`: one here would name no blob), before anything is
    /// written.
    pub fn apply(&mut self, entries: &[Entry], blobs: &BlobStore) -> Result<u64, IndexError> {
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
        let packed = self.append_packs(entries, blobs)?;
        self.in_transaction(|tx| {
            let mut added = 0u64;
            // One deletion per path and group: the first removes the row.
            let mut forgotten: HashSet<&[u8]> = HashSet::new();
            let mut blob = tx.prepare_cached(
                "INSERT OR IGNORE INTO blobs(hash, size, data) VALUES (?1, ?2, ?3)",
            )?;
            let mut record = tx.prepare_cached(INSERT_PREIMAGE)?;
            let mut forget = tx.prepare_cached("DELETE FROM fingerprints WHERE path = ?1")?;
            let mut piece = tx.prepare_cached(
                "INSERT INTO ranges(turn, path, offset, len, blob, pack)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            let mut drop_ranged = tx.prepare_cached(&format!(
                "DELETE FROM preimages WHERE turn = ?1 AND path = ?2 AND kind = {}",
                kind::RANGED
            ))?;
            let mut drop_pieces =
                tx.prepare_cached("DELETE FROM ranges WHERE turn = ?1 AND path = ?2")?;
            for (e, pack) in entries.iter().zip(&packed) {
                if let PreImage::File {
                    blob: hash, size, ..
                } = &e.pre
                {
                    if pack.is_none()
                        && blob.execute(params![&hash[..], Uint(*size), e.data.as_deref()])? > 0
                    {
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
                                &hash[..],
                                pack.map(Uint),
                            ])?;
                            if pack.is_some() {
                                added = added.saturating_add(*size);
                            }
                        }
                    }
                }
                if forgotten.insert(&e.path) {
                    forget.execute([&e.path])?;
                }
            }
            Ok(added)
        })
    }

    /// `entries` without the saved pieces the index lists already (same
    /// turn, path, offset and bytes): for a replay of the capture log,
    /// which may repeat a group that was committed just before a crash.
    /// Cost: one read of the listed pieces of each path with pieces in
    /// `entries`.
    ///
    /// Errors: SQLite's.
    pub fn unlisted(&self, entries: Vec<Entry>) -> Result<Vec<Entry>, IndexError> {
        let mut listed: HashMap<(u64, Vec<u8>), Listed> = HashMap::new();
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            if let (Op::Range { offset }, PreImage::File { blob, .. }) = (e.op, &e.pre) {
                let key = (e.turn, e.path.clone());
                let set = match listed.entry(key) {
                    std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(self.listed_pieces(e.turn, &e.path)?)
                    }
                };
                if set.contains(&(offset, *blob)) {
                    continue;
                }
            }
            out.push(e);
        }
        Ok(out)
    }

    /// Appends the bytes of the saved pieces among `entries` that carry
    /// them to their turns' range packs, one write per turn (identical
    /// bytes within the group once); returns, per entry, the offset of its
    /// bytes in its pack (`None`: not a packed piece). Nothing is packed in
    /// a file older than version 6 opened read-only.
    fn append_packs(
        &self,
        entries: &[Entry],
        blobs: &BlobStore,
    ) -> Result<Vec<Option<u64>>, IndexError> {
        let mut packed = vec![None; entries.len()];
        if !self.pack_column {
            return Ok(packed);
        }
        let mut by_turn: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, e) in entries.iter().enumerate() {
            if matches!(e.op, Op::Range { .. }) && e.data.is_some() {
                by_turn.entry(e.turn).or_default().push(i);
            }
        }
        for (turn, idx) in by_turn {
            let mut buf = Vec::new();
            let mut at_in_buf: HashMap<Hash, u64> = HashMap::new();
            let mut rel = Vec::with_capacity(idx.len());
            for &i in &idx {
                let (PreImage::File { blob, .. }, Some(data)) = (&entries[i].pre, &entries[i].data)
                else {
                    continue;
                };
                let at = *at_in_buf.entry(*blob).or_insert_with(|| {
                    let at = buf.len() as u64;
                    buf.extend_from_slice(data);
                    at
                });
                rel.push((i, at));
            }
            let start = blobs
                .append_pack(turn, &buf)
                .map_err(|source| IndexError::Pack {
                    path: blobs.pack_path(turn),
                    source,
                })?;
            for (i, at) in rel {
                packed[i] = Some(start + at);
            }
        }
        Ok(packed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::TurnKind;

    fn piece(turn: u64, offset: u64, bytes: &[u8]) -> Entry {
        Entry {
            turn,
            path: b"big".to_vec(),
            pre: PreImage::File {
                blob: *blake3::hash(bytes).as_bytes(),
                size: bytes.len() as u64,
                perm: 0,
                ino: 0,
            },
            data: Some(bytes.to_vec()),
            op: Op::Range { offset },
            meta: None,
        }
    }

    fn ranged(turn: u64) -> Entry {
        Entry::record(
            turn,
            b"big".to_vec(),
            PreImage::Ranged {
                size: 1 << 20,
                perm: 0o644,
                ino: 5,
            },
            None,
        )
    }

    /// Small pieces go to the turn's range pack (identical bytes of one
    /// group once), not to `blobs`; they read back by hash; a replay of
    /// the same entries (a crash between the commit and the log's
    /// truncation) adds no row and only unreferenced bytes; the bytes
    /// count as stored; a version 5 file gains the column (its rows kept in
    /// order); a lost pack is
    /// reported missing; gc's removal takes the packs of dropped turns.
    #[test]
    fn small_pieces_are_packed_per_turn_and_a_replay_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("index.db");
        {
            // What a version 5 file looks like: no `ranges.pack`.
            let ix = Index::open(&path, false).expect("open");
            ix.conn
                .execute_batch(
                    "DROP INDEX ranges_by_path;
                     DROP TABLE ranges;
                     CREATE TABLE ranges(turn INTEGER NOT NULL, path BLOB NOT NULL,
                         offset INTEGER NOT NULL, len INTEGER NOT NULL, blob BLOB NOT NULL,
                         UNIQUE (turn, path, offset, blob));
                     INSERT INTO ranges VALUES (9, x'6f6c64', 500, 10, zeroblob(32));
                     INSERT INTO ranges VALUES (9, x'6f6c64', 100, 20, zeroblob(32));
                     UPDATE meta SET value = '5' WHERE key = 'schema_version';",
                )
                .expect("downgrade");
        }
        let mut ix = Index::open(&path, false).expect("upgrade");
        assert!(ix.has_column("ranges", "pack").expect("column"));
        let old = ix.ranges_of(9, b"old").expect("old pieces");
        assert_eq!(
            old.iter().map(|p| (p.offset, p.at)).collect::<Vec<_>>(),
            [(500, None), (100, None)],
            "upgraded in saving order, as blobs"
        );
        let blobs = BlobStore::open(&dir.path().join("blobs"), false).expect("blobs");
        ix.next_turn(None, TurnKind::Agent, None, None, None)
            .expect("t1");
        let (a, b) = (vec![1u8; 4096], vec![2u8; 100]);
        let entries = vec![
            ranged(1),
            piece(1, 0, &a),
            piece(1, 8192, &b),
            piece(1, 65536, &a),
        ];
        let added = ix.apply(&entries, &blobs).expect("apply");
        assert_eq!(added, 4096 + 100 + 4096);
        let pack = blobs.pack_path(1);
        assert_eq!(std::fs::metadata(&pack).expect("pack").len(), 4096 + 100);
        let listed: u64 = ix
            .conn
            .query_row("SELECT count(*) FROM blobs", [], |r| r.get(0))
            .expect("count");
        assert_eq!(listed, 0, "packed pieces are not blobs");
        let pieces = ix.ranges_of(1, b"big").expect("pieces");
        assert_eq!(
            pieces.iter().map(|p| p.offset).collect::<Vec<_>>(),
            [0, 8192, 65536]
        );
        for (bytes, p) in [(&a, pieces[0]), (&b, pieces[1]), (&a, pieces[2])] {
            assert_eq!(
                &crate::store::read_piece(&ix, &blobs, &p.blob, p.at).expect("read"),
                bytes
            );
        }
        assert_eq!(pieces[0].at, pieces[2].at, "identical bytes packed once");
        assert_eq!(ix.totals().expect("totals").1, 4096 + 100 + 4096);
        assert_eq!(ix.kept_blob_bytes(1).expect("kept"), 4096 + 100 + 4096);
        assert_eq!(ix.kept_blob_bytes(2).expect("kept"), 0);
        let again = ix.unlisted(entries.clone()).expect("unlisted");
        assert_eq!(again, vec![ranged(1)], "a replay skips listed pieces");
        assert_eq!(ix.apply(&again, &blobs).expect("replay"), 0);
        assert_eq!(ix.ranges_of(1, b"big").expect("pieces"), pieces);
        // An attempt whose transaction failed left bytes no row names.
        blobs.append_pack(1, &[9; 77]).expect("torn");
        ix.apply(&[piece(1, 4096, &b)], &blobs)
            .expect("after a torn append");
        let last = ix.ranges_of(1, b"big").expect("pieces")[3];
        assert_eq!(last.at.map(|p| p.offset), Some(4096 + 100 + 77));
        // Cut short: the bytes a row names are missing, not wrong.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&pack)
            .and_then(|f| f.set_len(50))
            .expect("cut");
        assert!(matches!(
            crate::store::read_piece(&ix, &blobs, &pieces[1].blob, pieces[1].at),
            Err(crate::store::BlobError::Missing(_))
        ));
        assert_eq!(blobs.remove_packs_before(1, false), (0, 0));
        assert_eq!(blobs.remove_packs_before(2, true), (1, 50));
        assert!(pack.exists(), "a dry run removes nothing");
        assert_eq!(blobs.remove_packs_before(2, false), (1, 50));
        assert!(!pack.exists());
    }
}
