//! What `opfs gc` reads and deletes (`crate::gc` holds the policy). A
//! turn's records and saved ranges are kept or dropped together; a blob is
//! kept while some kept record or range names it.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::{params, OptionalExtension};

use super::codec::Uint;
use super::{Index, IndexError};
use crate::record::Hash;

/// The blobs that records and saved ranges of turns `>= ?1` name.
const KEPT_BLOBS: &str = "SELECT blob FROM preimages WHERE turn >= ?1 AND blob IS NOT NULL
     UNION SELECT blob FROM ranges WHERE turn >= ?1
     UNION SELECT blob FROM outside_edits WHERE turn >= ?1 AND blob IS NOT NULL";

/// Where the stored bytes go: one top-level entry of the project
/// ([`Index::bytes_by_top`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TopUse {
    /// The first component of the paths (`""`: none; bytes as stored).
    pub top: Vec<u8>,
    /// Bytes of the distinct blobs the records and saved ranges of paths
    /// under it name (a blob named under two tops counts in each).
    pub bytes: u64,
    /// Records (one per path and turn) under it.
    pub records: u64,
}

/// The first component of `path` as SQL over a BLOB column.
const TOP: &str =
    "CASE WHEN instr(path, X'2F') > 0 THEN substr(path, 1, instr(path, X'2F') - 1) ELSE path END";

impl Index {
    /// The stored bytes and records by the first component of their
    /// paths, most bytes first (`opfs status`). One pass over the records
    /// and saved ranges.
    ///
    /// Errors: SQLite's.
    pub fn bytes_by_top(&self) -> Result<Vec<TopUse>, IndexError> {
        let sql = format!(
            "WITH named(top, hash) AS (
                 SELECT {TOP}, blob FROM preimages WHERE blob IS NOT NULL
                 UNION SELECT {TOP}, blob FROM ranges),
             sizes(top, bytes) AS (
                 SELECT n.top, coalesce(sum(b.size), 0) FROM named n
                 JOIN blobs b ON b.hash = n.hash GROUP BY n.top),
             counts(top, records) AS (
                 SELECT {TOP}, count(*) FROM preimages GROUP BY 1)
             SELECT c.top, coalesce(s.bytes, 0), c.records FROM counts c
             LEFT JOIN sizes s ON s.top = c.top
             ORDER BY 2 DESC, 3 DESC, 1"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| {
                Ok(TopUse {
                    top: r.get::<_, Vec<u8>>(0)?,
                    bytes: r.get::<_, Uint>(1)?.0,
                    records: r.get::<_, Uint>(2)?.0,
                })
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(self.err())?);
        }
        Ok(out)
    }

    /// The oldest and the newest turn, or `None` when there is none.
    pub fn turn_bounds(&self) -> Result<Option<(u64, u64)>, IndexError> {
        let (first, last) = self
            .conn
            .query_row("SELECT min(number), max(number) FROM turns", [], |r| {
                Ok((r.get::<_, Option<Uint>>(0)?, r.get::<_, Option<Uint>>(1)?))
            })
            .map_err(self.err())?;
        Ok(first.zip(last).map(|(f, l)| (f.0, l.0)))
    }

    /// Bytes of the listed blobs that records and saved ranges of turns
    /// `>= from` name, plus the saved pieces those turns keep in range
    /// packs.
    pub fn kept_blob_bytes(&self, from: u64) -> Result<u64, IndexError> {
        let blobs = self
            .conn
            .query_row(
                &format!(
                    "SELECT coalesce(sum(b.size), 0) FROM blobs b WHERE b.hash IN ({KEPT_BLOBS})"
                ),
                [Uint(from)],
                |r| r.get::<_, Uint>(0),
            )
            .map(|v| v.0)
            .map_err(self.err())?;
        if !self.pack_column {
            return Ok(blobs);
        }
        let packed = self
            .conn
            .query_row(
                "SELECT coalesce(sum(len), 0) FROM ranges WHERE turn >= ?1 AND pack IS NOT NULL",
                [Uint(from)],
                |r| r.get::<_, Uint>(0),
            )
            .map(|v| v.0)
            .map_err(self.err())?;
        Ok(blobs.saturating_add(packed))
    }

    /// The bytes of the listed blobs by the newest turn whose records or
    /// saved ranges name them, plus each turn's packed pieces: `kept_blob_bytes(from)` is the sum of the
    /// values of the keys `>= from`. One pass over the records, however
    /// many cuts the caller then weighs.
    pub fn bytes_by_last_use(&self) -> Result<BTreeMap<u64, u64>, IndexError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT t, sum(size) FROM (
                     SELECT b.size AS size, max(x.turn) AS t FROM blobs b
                     JOIN (SELECT blob, turn FROM preimages WHERE blob IS NOT NULL
                           UNION ALL SELECT blob, turn FROM ranges
                           UNION ALL SELECT blob, turn FROM outside_edits
                               WHERE blob IS NOT NULL) x ON x.blob = b.hash
                     GROUP BY b.hash)
                 GROUP BY t",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, Uint>(0)?.0, r.get::<_, Uint>(1)?.0)))
            .map_err(self.err())?;
        let mut out = BTreeMap::new();
        for r in rows {
            let (t, bytes) = r.map_err(self.err())?;
            out.insert(t, bytes);
        }
        if self.pack_column {
            // A packed piece belongs to its turn alone.
            let mut stmt = self
                .conn
                .prepare("SELECT turn, sum(len) FROM ranges WHERE pack IS NOT NULL GROUP BY turn")
                .map_err(self.err())?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, Uint>(0)?.0, r.get::<_, Uint>(1)?.0)))
                .map_err(self.err())?;
            for r in rows {
                let (t, bytes) = r.map_err(self.err())?;
                let e = out.entry(t).or_insert(0);
                *e = e.saturating_add(bytes);
            }
        }
        Ok(out)
    }

    /// The number of records of turns before `cut`.
    pub fn records_before(&self, cut: u64) -> Result<u64, IndexError> {
        self.conn
            .query_row(
                "SELECT count(*) FROM preimages WHERE turn < ?1",
                [Uint(cut)],
                |r| r.get::<_, Uint>(0),
            )
            .map(|v| v.0)
            .map_err(self.err())
    }

    /// The blobs that records and saved ranges of turns `>= from` name. A
    /// malformed reference (not 32 bytes) names no blob and is left out
    /// (`opfs verify` reports it).
    pub fn kept_blobs(&self, from: u64) -> Result<BTreeSet<Hash>, IndexError> {
        let mut stmt = self.conn.prepare(KEPT_BLOBS).map_err(self.err())?;
        let rows = stmt
            .query_map([Uint(from)], |r| r.get::<_, Vec<u8>>(0))
            .map_err(self.err())?;
        let mut out = BTreeSet::new();
        for r in rows {
            if let Ok(h) = Hash::try_from(r.map_err(self.err())?.as_slice()) {
                out.insert(h);
            }
        }
        Ok(out)
    }

    /// The inline blobs (small files, content in the `blobs` row) no record
    /// or saved range of turns `>= from` names: `(count, bytes)`.
    pub fn unkept_inline_blobs(&self, from: u64) -> Result<(u64, u64), IndexError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT count(*), coalesce(sum(size), 0) FROM blobs
                     WHERE data IS NOT NULL AND hash NOT IN ({KEPT_BLOBS})"
                ),
                [Uint(from)],
                |r| Ok((r.get::<_, Uint>(0)?.0, r.get::<_, Uint>(1)?.0)),
            )
            .map_err(self.err())
    }

    /// Deletes, in one transaction, the records, saved ranges and rows of
    /// the turns before `cut`, the finished restores recorded before it,
    /// and the `blobs` rows (inline content included) nothing kept names.
    /// Blob files are the caller's to remove, after this returns. Returns
    /// what it deleted, counted by the deletions themselves.
    ///
    /// Durable after `Ok` to the level the index was opened with; after
    /// `Err` nothing was deleted.
    pub fn drop_turns_before(&mut self, cut: u64) -> Result<Dropped, IndexError> {
        self.drop_turns(cut)
    }

    /// One step of a gc done in steps: deletes, in one transaction, the
    /// records, saved ranges and rows of the turns before `cut` and the
    /// finished restores recorded before it, but no `blobs` row (those go
    /// later, [`Index::unkept_blob_rows`] and [`Index::delete_blob_rows`]).
    /// Its cost follows the records it deletes. Returns how many records
    /// it deleted.
    ///
    /// Durable after `Ok` to the level the index was opened with; after
    /// `Err` nothing was deleted.
    pub fn drop_turns_step(&mut self, cut: u64) -> Result<u64, IndexError> {
        self.in_transaction(|tx| {
            let cut = Uint(cut);
            let records = tx.execute("DELETE FROM preimages WHERE turn < ?1", params![cut])?;
            tx.execute("DELETE FROM ranges WHERE turn < ?1", params![cut])?;
            tx.execute("DELETE FROM links WHERE turn < ?1", params![cut])?;
            tx.execute("DELETE FROM outside_edits WHERE turn < ?1", params![cut])?;
            tx.execute("DELETE FROM repo_moves WHERE turn < ?1", params![cut])?;
            tx.execute("DELETE FROM turns WHERE number < ?1", params![cut])?;
            tx.execute(
                "DELETE FROM restores WHERE rewind_turn < ?1 AND state = 'done'",
                params![cut],
            )?;
            Ok(records as u64)
        })
    }

    /// The `blobs` rows that no record or saved range of turns `>= from`
    /// names (read on a snapshot: a daemon's gc reads them without a lock).
    pub fn unkept_blob_rows(&self, from: u64) -> Result<Vec<Hash>, IndexError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT hash FROM blobs WHERE hash NOT IN ({KEPT_BLOBS}) ORDER BY hash"
            ))
            .map_err(self.err())?;
        let rows = stmt
            .query_map([Uint(from)], |r| r.get::<_, Vec<u8>>(0))
            .map_err(self.err())?;
        let mut out = Vec::new();
        for r in rows {
            if let Ok(h) = Hash::try_from(r.map_err(self.err())?.as_slice()) {
                out.push(h);
            }
        }
        Ok(out)
    }

    /// Deletes, in one transaction, the `blobs` rows of `hashes` that no
    /// record or saved range of turns `>= open` names; returns what it
    /// deleted (`records` is 0). For a daemon's gc: `hashes` were read as
    /// unkept on a snapshot whose newest turn was `open`, and since then
    /// records can only have been added to turns `>= open` (the open turn,
    /// a rewind's or merge's new turn; the "unknown" records of older
    /// turns name no blob), so that is all this looks at again. A record
    /// still pending in the capture log that names a deleted row puts it
    /// back when it is committed (its entry carries the size, and a small
    /// file's bytes). Cost: `hashes` plus the records of turns `>= open`.
    ///
    /// Durable after `Ok` to the level the index was opened with; after
    /// `Err` nothing was deleted.
    pub fn delete_blob_rows(&mut self, hashes: &[Hash], open: u64) -> Result<Dropped, IndexError> {
        self.in_transaction(|tx| {
            tx.execute(
                "CREATE TEMP TABLE IF NOT EXISTS gc_candidates(hash BLOB PRIMARY KEY)",
                [],
            )?;
            tx.execute("DELETE FROM gc_candidates", [])?;
            {
                let mut add =
                    tx.prepare_cached("INSERT OR IGNORE INTO gc_candidates(hash) VALUES (?1)")?;
                for h in hashes {
                    add.execute([&h[..]])?;
                }
            }
            let mut dropped = Dropped::default();
            {
                let mut rows = tx.prepare(&format!(
                    "DELETE FROM blobs WHERE hash IN (SELECT hash FROM gc_candidates)
                     AND hash NOT IN ({KEPT_BLOBS})
                     RETURNING size, data IS NOT NULL"
                ))?;
                let mut it = rows.query([Uint(open)])?;
                while let Some(r) = it.next()? {
                    if r.get::<_, bool>(1)? {
                        dropped.inline_blobs += 1;
                        dropped.inline_bytes += r.get::<_, Uint>(0)?.0;
                    }
                }
            }
            tx.execute("DELETE FROM gc_candidates", [])?;
            Ok(dropped)
        })
    }

    /// The turn such that the turns from `first` up to it (excluded) hold
    /// at most `records` records, at least one turn further than `first`;
    /// `None` when the records from `first` on are fewer.
    pub fn step_end(&self, first: u64, records: u64) -> Result<Option<u64>, IndexError> {
        let at: Option<Uint> = self
            .conn
            .query_row(
                "SELECT turn FROM preimages WHERE turn >= ?1 ORDER BY turn LIMIT 1 OFFSET ?2",
                params![Uint(first), Uint(records)],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?;
        Ok(at.map(|t| t.0.max(first + 1)))
    }

    fn drop_turns(&mut self, cut: u64) -> Result<Dropped, IndexError> {
        self.in_transaction(|tx| {
            let cut = Uint(cut);
            let mut dropped = Dropped::default();
            {
                let mut rows = tx.prepare(&format!(
                    "DELETE FROM blobs WHERE hash NOT IN ({KEPT_BLOBS})
                     RETURNING size, data IS NOT NULL"
                ))?;
                let mut it = rows.query([cut])?;
                while let Some(r) = it.next()? {
                    if r.get::<_, bool>(1)? {
                        dropped.inline_blobs += 1;
                        dropped.inline_bytes += r.get::<_, Uint>(0)?.0;
                    }
                }
            }
            dropped.records =
                tx.execute("DELETE FROM preimages WHERE turn < ?1", params![cut])? as u64;
            tx.execute("DELETE FROM ranges WHERE turn < ?1", params![cut])?;
            tx.execute("DELETE FROM outside_edits WHERE turn < ?1", params![cut])?;
            tx.execute("DELETE FROM repo_moves WHERE turn < ?1", params![cut])?;
            tx.execute("DELETE FROM turns WHERE number < ?1", params![cut])?;
            tx.execute(
                "DELETE FROM restores WHERE rewind_turn < ?1 AND state = 'done'",
                params![cut],
            )?;
            Ok(dropped)
        })
    }
}

/// What [`Index::drop_turns_before`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Pre-image records.
    pub records: u64,
    /// Inline blobs (small files' content, deleted with their rows).
    pub inline_blobs: u64,
    /// Their bytes.
    pub inline_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{PreImage, TurnKind};

    fn file(n: u8, size: u64) -> PreImage {
        PreImage::File {
            blob: [n; 32],
            size,
            perm: 0o644,
            ino: 0,
        }
    }

    /// The one-pass sums agree with the per-cut query, shared blobs and
    /// blobs named only by old turns included, and the deletions count
    /// what they deleted.
    #[test]
    fn bytes_by_last_use_sums_like_kept_blob_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ix = Index::open(&dir.path().join("index.db"), false).expect("open");
        // Turn t names blobs t and t+1; blob 1 again in turn 4.
        for t in 1..=5u8 {
            let prev = (t > 1).then_some(u64::from(t) - 1);
            ix.next_turn(prev, TurnKind::Agent, None, None, None)
                .expect("turn");
            for (path, n) in [(b"a".as_slice(), t), (b"b".as_slice(), t + 1)] {
                let pre = file(n, 100 * u64::from(n));
                ix.add_blob(&[n; 32], 100 * u64::from(n)).expect("blob");
                ix.add_preimage(u64::from(t), path, &pre).expect("record");
            }
        }
        ix.add_preimage(4, b"c", &file(1, 100)).expect("record");
        let by_last = ix.bytes_by_last_use().expect("sums");
        for from in 1..=6 {
            let sum: u64 = by_last.range(from..).map(|(_, b)| *b).sum();
            assert_eq!(sum, ix.kept_blob_bytes(from).expect("kept"), "from {from}");
        }
        // Two records a turn: a step of 3 records ends after 2 turns.
        assert_eq!(ix.step_end(1, 3).expect("step"), Some(2));
        assert_eq!(ix.step_end(1, 0).expect("step"), Some(2));
        assert_eq!(ix.step_end(1, 100).expect("step"), None);
        assert_eq!(ix.drop_turns_step(2).expect("step"), 2);
        // Turn 1's blob rows stay until deleted by name: blob 1 is named
        // again in turn 4, blob 2 by turn 2.
        let unkept = ix.unkept_blob_rows(2).expect("unkept");
        assert!(unkept.is_empty(), "{unkept:?}");
        // Rows only turns older than 4 name: 2 and 3. Deleted by name,
        // unless a turn from `open` on names them: turn 3 does not count.
        let unkept = ix.unkept_blob_rows(4).expect("unkept");
        assert_eq!(unkept, vec![[2; 32], [3; 32]]);
        let d = ix.delete_blob_rows(&unkept, 5).expect("rows");
        assert_eq!(d.records, 0);
        assert_eq!((d.inline_blobs, d.inline_bytes), (0, 0));
        // Only turns from `open` on were looked at again: turns 2 and 3
        // still name the deleted rows (a daemon's gc dropped them first).
        let before: u64 = by_last.range(2..).map(|(_, b)| *b).sum();
        assert_eq!(ix.kept_blob_bytes(2).expect("kept"), before - 200 - 300);
        let d = ix.drop_turns_before(3).expect("drop");
        assert_eq!(d.records, 2);
        // Blob 2 (turns 1 and 2) goes; blob 1 stays (turn 4), blob 3 too.
        assert_eq!(ix.kept_blobs(3).expect("kept").len(), 5);
        assert_eq!(ix.turn_bounds().expect("bounds"), Some((3, 5)));
    }
}
