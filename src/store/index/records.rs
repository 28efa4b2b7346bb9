//! The `preimages` table: each path's state when a turn began (its first
//! record in the turn), written one at a time or from the capture log
//! (`apply`), read by turn, by path, by inode or as the whole project's
//! state at a turn.

use rusqlite::params;

use super::codec::{self, kind, Id, Uint};
use super::{Index, IndexError};
use crate::paths;
use crate::record::{Meta, PreImage};

/// A path's state at a rewind point with where it comes from: the record
/// [`Index::targets_at`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The path.
    pub path: Vec<u8>,
    /// The turn of the record (the path's first record at or after the
    /// rewind point).
    pub turn: u64,
    /// The path's state.
    pub pre: PreImage,
    /// Its owner and extended attributes; `None` when the record holds
    /// none (absent, unknown, or recorded before schema version 5).
    pub meta: Option<Meta>,
}

/// Inserts a record unless its (turn, path) has one: the first record of a
/// turn is the pre-image.
pub(super) const INSERT_PREIMAGE: &str =
    "INSERT OR IGNORE INTO preimages(turn, path, kind, perm, blob, size, target, rdev, ino,
                                     uid, gid, xattrs)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// Runs [`INSERT_PREIMAGE`] for one record; returns the rows inserted (0 or 1).
pub(super) fn insert_preimage(
    stmt: &mut rusqlite::Statement<'_>,
    turn: u64,
    path: &[u8],
    pre: &PreImage,
    meta: Option<&Meta>,
) -> rusqlite::Result<usize> {
    let (kind, perm, blob, size, target, rdev, ino) = codec::columns(pre);
    let xattrs = meta.and_then(Meta::encode_xattrs);
    stmt.execute(params![
        Uint(turn),
        path,
        kind,
        perm,
        blob,
        size,
        target,
        rdev,
        ino,
        meta.map(|m| m.uid),
        meta.map(|m| m.gid),
        xattrs
    ])
}

/// The owner and attributes in columns uid, gid, xattrs of `r` from column
/// `first` (`None` when uid is NULL). `Err` says what is malformed.
fn meta_from_row(r: &rusqlite::Row<'_>, first: usize) -> Result<Option<Meta>, String> {
    let get_err = |e: rusqlite::Error| e.to_string();
    let uid: Option<u32> = r.get(first).map_err(get_err)?;
    let gid: Option<u32> = r.get(first + 1).map_err(get_err)?;
    let xattrs: Option<Vec<u8>> = r.get(first + 2).map_err(get_err)?;
    match (uid, gid) {
        (None, _) => Ok(None),
        (Some(uid), Some(gid)) => Ok(Some(Meta {
            uid,
            gid,
            xattrs: Meta::decode_xattrs(xattrs.as_deref())?,
        })),
        (Some(_), None) => Err("a record with an owner but no group".into()),
    }
}

/// An exclusive upper turn bound for SQL: `None` (no bound) and bounds
/// past `i64::MAX` are `i64::MAX`.
fn until_bound(until: Option<u64>) -> i64 {
    until.map_or(i64::MAX, |u| i64::try_from(u).unwrap_or(i64::MAX))
}

impl Index {
    /// Records `path`'s pre-image for `turn` unless one is already recorded
    /// (the first record of a turn is the pre-image; later ones are ignored).
    /// Returns true when this call inserted the record.
    ///
    /// Durable after `Ok` to the level the index was opened with.
    pub fn add_preimage(&self, turn: u64, path: &[u8], pre: &PreImage) -> Result<bool, IndexError> {
        self.add_record(turn, path, pre, None)
    }

    /// [`Index::add_preimage`] with the path's owner and extended
    /// attributes (`None`: not known).
    pub fn add_record(
        &self,
        turn: u64,
        path: &[u8],
        pre: &PreImage,
        meta: Option<&Meta>,
    ) -> Result<bool, IndexError> {
        let n = self
            .conn
            .prepare_cached(INSERT_PREIMAGE)
            .and_then(|mut s| insert_preimage(&mut s, turn, path, pre, meta))
            .map_err(self.err())?;
        Ok(n == 1)
    }

    /// [`Index::states_at`] with each record's turn and metadata: for every
    /// path recorded in turns `from..until`, its earliest record there.
    /// Sorted by path bytes.
    ///
    /// Errors: [`IndexError::Corrupt`] when a stored path is not a valid
    /// project-relative path or a record is malformed.
    pub fn targets_at(&self, from: u64, until: Option<u64>) -> Result<Vec<Target>, IndexError> {
        let meta_cols = if self.meta_columns {
            "p.uid, p.gid, p.xattrs"
        } else {
            "NULL, NULL, NULL"
        };
        let sql = format!(
            "SELECT p.path, p.kind, p.perm, p.blob, p.size, p.target, p.rdev, p.ino,
                    p.turn, {meta_cols}
             FROM preimages p
             JOIN (SELECT path, MIN(turn) AS t FROM preimages
                   WHERE turn >= ?1 AND turn < ?2 GROUP BY path) m
               ON p.turn = m.t AND p.path = m.path
             ORDER BY p.path"
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(self.err())?;
        let mut rows = stmt
            .query(params![Uint(from), until_bound(until)])
            .map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            let (path, pre) = self.record_from_row(r, 0)?;
            let turn: Uint = r.get(8).map_err(self.err())?;
            let meta = meta_from_row(r, 9).map_err(|w| {
                self.corrupt(format!("record for {:?}: {w}", paths::display(&path)))
            })?;
            out.push(Target {
                path,
                turn: turn.0,
                pre,
                meta,
            });
        }
        Ok(out)
    }

    /// The owner and extended attributes recorded with `path`'s record in
    /// exactly turn `turn` (`None`: no record, or one without them).
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed attribute set.
    pub fn meta_of(&self, turn: u64, path: &[u8]) -> Result<Option<Meta>, IndexError> {
        if !self.meta_columns {
            return Ok(None);
        }
        let mut stmt = self
            .conn
            .prepare_cached("SELECT uid, gid, xattrs FROM preimages WHERE turn = ?1 AND path = ?2")
            .map_err(self.err())?;
        let mut rows = stmt.query(params![Uint(turn), path]).map_err(self.err())?;
        match rows.next().map_err(self.err())? {
            None => Ok(None),
            Some(r) => meta_from_row(r, 0)
                .map_err(|w| self.corrupt(format!("record for {:?}: {w}", paths::display(path)))),
        }
    }

    /// A record's path (column `col`, checked: a malformed path is
    /// corruption, never followed) and its pre-image (the columns after it).
    fn record_from_row(
        &self,
        r: &rusqlite::Row<'_>,
        col: usize,
    ) -> Result<(Vec<u8>, PreImage), IndexError> {
        let path: Vec<u8> = r.get(col).map_err(self.err())?;
        paths::validate(&path).map_err(|what| {
            self.corrupt(format!("stored path {:?}: {what}", paths::display(&path)))
        })?;
        if path.is_empty() {
            return Err(self.corrupt("a record names the project root".into()));
        }
        let pre = codec::preimage_from_row(r, col + 1)
            .map_err(|w| self.corrupt(format!("record for {:?}: {w}", paths::display(&path))))?;
        Ok((path, pre))
    }

    /// Runs `sql`, whose rows are a turn and then a record's path and
    /// columns, into `(turn, path, pre-image)` in row order.
    fn turn_records(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Vec<(u64, Vec<u8>, PreImage)>, IndexError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(self.err())?;
        let mut rows = stmt.query(p).map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            let turn: Uint = r.get(0).map_err(self.err())?;
            let (path, pre) = self.record_from_row(r, 1)?;
            out.push((turn.0, path, pre));
        }
        Ok(out)
    }

    /// Runs `sql`, whose rows are a record's path and columns, into
    /// `(path, pre-image)` in row order.
    fn path_records(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Vec<(Vec<u8>, PreImage)>, IndexError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(self.err())?;
        let mut rows = stmt.query(p).map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            out.push(self.record_from_row(r, 0)?);
        }
        Ok(out)
    }

    /// For every path recorded in turns `from..until` (`until` exclusive;
    /// `None`: no upper bound), its earliest record in that range: the
    /// path's state when turn `from` began. Sorted by path bytes.
    ///
    /// Errors: [`IndexError::Corrupt`] when a stored path is not a valid
    /// project-relative path or a record is malformed.
    pub fn states_at(
        &self,
        from: u64,
        until: Option<u64>,
    ) -> Result<Vec<(Vec<u8>, PreImage)>, IndexError> {
        self.path_records(
            "SELECT p.path, p.kind, p.perm, p.blob, p.size, p.target, p.rdev, p.ino
             FROM preimages p
             JOIN (SELECT path, MIN(turn) AS t FROM preimages
                   WHERE turn >= ?1 AND turn < ?2 GROUP BY path) m
               ON p.turn = m.t AND p.path = m.path
             ORDER BY p.path",
            params![Uint(from), until_bound(until)],
        )
    }

    /// True when `path` has a record in some turn before `before`.
    pub fn recorded_before(&self, path: &[u8], before: u64) -> Result<bool, IndexError> {
        self.conn
            .prepare_cached("SELECT 1 FROM preimages WHERE path = ?1 AND turn < ?2 LIMIT 1")
            .and_then(|mut s| s.exists(params![path, Uint(before)]))
            .map_err(self.err())
    }

    /// True when `path` has a record in some turn in `from..until`
    /// (`until` exclusive). One lookup in the `(path, turn)` index.
    pub fn recorded_between(&self, path: &[u8], from: u64, until: u64) -> Result<bool, IndexError> {
        self.conn
            .prepare_cached(
                "SELECT 1 FROM preimages WHERE path = ?1 AND turn >= ?2 AND turn < ?3 LIMIT 1",
            )
            .and_then(|mut s| s.exists(params![path, Uint(from), Uint(until)]))
            .map_err(self.err())
    }

    /// File records of inode `ino` in turns before `before`, except those of
    /// `path`: `(turn, path, pre-image)`, oldest first.
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed record.
    pub fn records_of_inode(
        &self,
        ino: u64,
        before: u64,
        path: &[u8],
    ) -> Result<Vec<(u64, Vec<u8>, PreImage)>, IndexError> {
        self.turn_records(
            &format!(
                "SELECT turn, path, kind, perm, blob, size, target, rdev, ino FROM preimages
                 WHERE ino = ?1 AND kind = {} AND turn < ?2 AND path != ?3 ORDER BY turn",
                kind::FILE
            ),
            params![Id(ino), Uint(before), path],
        )
    }

    /// Every record with `turn >= from`, as `(turn, path, pre-image)`,
    /// sorted by path bytes and then by turn. One query however many turns
    /// it spans; history commands build their per-path timelines from it.
    ///
    /// Errors: [`IndexError::Corrupt`] when a stored path is not a valid
    /// project-relative path or a record is malformed.
    pub fn records_since(&self, from: u64) -> Result<Vec<(u64, Vec<u8>, PreImage)>, IndexError> {
        self.turn_records(
            "SELECT turn, path, kind, perm, blob, size, target, rdev, ino FROM preimages
             WHERE turn >= ?1 ORDER BY path, turn",
            [Uint(from)],
        )
    }

    /// Every record of turn `turn`, as `(path, pre-image)`, sorted by path.
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed record.
    pub fn records_of_turn(&self, turn: u64) -> Result<Vec<(Vec<u8>, PreImage)>, IndexError> {
        self.path_records(
            "SELECT path, kind, perm, blob, size, target, rdev, ino FROM preimages
             WHERE turn = ?1 ORDER BY path",
            [Uint(turn)],
        )
    }

    /// The records of `path` with `turn >= from`, oldest first; at most
    /// `limit` of them (`None`: all). The one reader behind
    /// [`Index::records_of_path`], [`Index::record_from`] and
    /// [`Index::state_from`].
    fn path_history(
        &self,
        path: &[u8],
        from: u64,
        limit: Option<u32>,
    ) -> Result<Vec<(u64, PreImage)>, IndexError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT turn, kind, perm, blob, size, target, rdev, ino FROM preimages
                 WHERE path = ?1 AND turn >= ?2 ORDER BY turn LIMIT ?3",
            )
            .map_err(self.err())?;
        let limit = limit.map_or(-1, i64::from);
        let mut rows = stmt
            .query(params![path, Uint(from), limit])
            .map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            let turn: Uint = r.get(0).map_err(self.err())?;
            let pre = codec::preimage_from_row(r, 1).map_err(|w| self.corrupt(w))?;
            out.push((turn.0, pre));
        }
        Ok(out)
    }

    /// Every record of `path` with `turn >= from`, oldest first.
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed record.
    pub fn records_of_path(
        &self,
        path: &[u8],
        from: u64,
    ) -> Result<Vec<(u64, PreImage)>, IndexError> {
        self.path_history(path, from, None)
    }

    /// The earliest record of `path` with `turn >= from`, with its turn.
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed record.
    pub fn record_from(
        &self,
        path: &[u8],
        from: u64,
    ) -> Result<Option<(u64, PreImage)>, IndexError> {
        Ok(self.path_history(path, from, Some(1))?.into_iter().next())
    }

    /// The earliest record of `path` with `turn >= from`: the path's state
    /// when turn `from` began. `None` when the path has no such record (it
    /// did not change since `from` began; its state is the project's).
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed record.
    pub fn state_from(&self, path: &[u8], from: u64) -> Result<Option<PreImage>, IndexError> {
        Ok(self.record_from(path, from)?.map(|(_, pre)| pre))
    }

    /// The paths recorded in turn `turn`, sorted.
    pub fn paths_of_turn(&self, turn: u64) -> Result<Vec<Vec<u8>>, IndexError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT path FROM preimages WHERE turn = ?1 ORDER BY path")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([Uint(turn)], |r| r.get::<_, Vec<u8>>(0))
            .map_err(self.err())?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r.map_err(self.err())?);
        }
        Ok(out)
    }

    /// The pre-image of `path` recorded in exactly turn `turn`.
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed record.
    pub fn preimage(&self, turn: u64, path: &[u8]) -> Result<Option<PreImage>, IndexError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT kind, perm, blob, size, target, rdev, ino FROM preimages
                 WHERE turn = ?1 AND path = ?2",
            )
            .map_err(self.err())?;
        let mut rows = stmt.query(params![Uint(turn), path]).map_err(self.err())?;
        match rows.next().map_err(self.err())? {
            None => Ok(None),
            Some(r) => codec::preimage_from_row(r, 0)
                .map(Some)
                .map_err(|w| self.corrupt(w)),
        }
    }

    /// Number of pre-image records and total bytes of the blobs the index
    /// lists (range packs included: the bytes of the pieces they hold).
    pub fn totals(&self) -> Result<(u64, u64), IndexError> {
        let records: Uint = self
            .conn
            .query_row("SELECT count(*) FROM preimages", [], |r| r.get(0))
            .map_err(self.err())?;
        let bytes: Uint = self
            .conn
            .query_row("SELECT coalesce(sum(size), 0) FROM blobs", [], |r| r.get(0))
            .map_err(self.err())?;
        Ok((records.0, bytes.0.saturating_add(self.packed_bytes()?)))
    }

    /// Notes that `path`'s record in `turn` is a file that had `nlink`
    /// names when it was recorded (only kept for more than one: a rewind
    /// then looks for the names of that inode it has no record of, see
    /// `restore::links`). The first note of a (turn, path) wins, as with
    /// records. Durable once the statement returns (autocommit).
    ///
    /// Errors: SQLite's.
    pub fn note_links(&self, turn: u64, path: &[u8], nlink: u64) -> Result<(), IndexError> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO links(turn, path, nlink) VALUES (?1, ?2, ?3)")
            .and_then(|mut s| s.execute(params![Uint(turn), path, Uint(nlink)]))
            .map(drop)
            .map_err(self.err())
    }

    /// The link count noted with `path`'s record in `turn`
    /// ([`Index::note_links`]); 1 when none was noted (a file with one
    /// name, or a record made before links were noted).
    ///
    /// Errors: SQLite's.
    pub fn links_of(&self, turn: u64, path: &[u8]) -> Result<u64, IndexError> {
        use rusqlite::OptionalExtension;
        let n: Option<Uint> = self
            .conn
            .prepare_cached("SELECT nlink FROM links WHERE turn = ?1 AND path = ?2")
            .and_then(|mut s| {
                s.query_row(params![Uint(turn), path], |r| r.get(0))
                    .optional()
            })
            .map_err(self.err())?;
        Ok(n.map_or(1, |n| n.0))
    }
}
