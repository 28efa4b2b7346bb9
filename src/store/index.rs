//! The SQLite index: turns, pre-image records, blobs and the restore journal.
//!
//! The schema is documented in `docs/format.md` (schema version
//! [`SCHEMA_VERSION`]). The database runs in WAL mode; with
//! `synchronous=NORMAL` a committed transaction survives a crash of the
//! process, with `synchronous=FULL` (the `--sync` option) also a power loss.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};

use crate::paths;
use crate::record::Fingerprint;
use crate::record::{Hash, PreImage, Special};
use crate::store::log::{Entry, Op};

/// One saved range of a [`PreImage::Ranged`] record: `len` bytes at
/// `offset` when the turn began, stored as blob `blob`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes (at least 1).
    pub len: u64,
    /// BLAKE3 of the bytes.
    pub blob: Hash,
}

/// The version of the schema this build reads and writes.
pub const SCHEMA_VERSION: i64 = 4;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS turns(
    number      INTEGER PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('agent', 'rewind', 'merge')),
    label       TEXT,
    external_id TEXT,
    started_at  INTEGER NOT NULL,
    ended_at    INTEGER,
    rewound_to  INTEGER
);
CREATE INDEX IF NOT EXISTS turns_by_external_id ON turns(external_id);
CREATE TABLE IF NOT EXISTS blobs(
    hash BLOB PRIMARY KEY,
    size INTEGER NOT NULL,
    data BLOB
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS preimages(
    turn   INTEGER NOT NULL,
    path   BLOB NOT NULL,
    kind   INTEGER NOT NULL,
    perm   INTEGER,
    blob   BLOB,
    size   INTEGER,
    target BLOB,
    rdev   INTEGER,
    ino    INTEGER,
    PRIMARY KEY (turn, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ranges(
    turn   INTEGER NOT NULL,
    path   BLOB NOT NULL,
    offset INTEGER NOT NULL,
    len    INTEGER NOT NULL,
    blob   BLOB NOT NULL,
    UNIQUE (turn, path, offset, blob)
);
CREATE TABLE IF NOT EXISTS fingerprints(
    path     BLOB PRIMARY KEY,
    ftype    INTEGER NOT NULL,
    ino      INTEGER NOT NULL,
    size     INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    perm     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS restores(
    rewind_turn INTEGER PRIMARY KEY,
    rewound_to  INTEGER NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('running', 'done'))
);
";

/// Errors from the index. Each names the database file.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// SQLite reported an error (a corrupt or truncated file shows up here).
    #[error("index {path}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// A value read back is not one opfs could have written.
    #[error("index {path} is corrupt: {what}")]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The database was written by a newer opfs.
    #[error("index {path} has schema version {found}; this opfs reads version {SCHEMA_VERSION}")]
    Version {
        /// The database file.
        path: PathBuf,
        /// The version found.
        found: i64,
    },
}

impl IndexError {
    /// The database file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            IndexError::Sqlite { path, .. }
            | IndexError::Corrupt { path, .. }
            | IndexError::Version { path, .. } => path,
        }
    }

    /// The errno a FUSE operation fails with when capture hits this error:
    /// `ENOSPC` when the disk is full, `EAGAIN` when the database is busy,
    /// `EIO` otherwise.
    pub fn errno(&self) -> i32 {
        if let IndexError::Sqlite {
            source: rusqlite::Error::SqliteFailure(e, _),
            ..
        } = self
        {
            return match e.code {
                rusqlite::ErrorCode::DiskFull => libc::ENOSPC,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked => {
                    libc::EAGAIN
                }
                _ => libc::EIO,
            };
        }
        libc::EIO
    }
}

/// The kind of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnKind {
    /// Agent work (normally one user message).
    Agent,
    /// The mutations a rewind made.
    Rewind,
    /// A worktree merge.
    Merge,
}

impl TurnKind {
    /// The word stored in the index and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnKind::Agent => "agent",
            TurnKind::Rewind => "rewind",
            TurnKind::Merge => "merge",
        }
    }

    fn parse(s: &str) -> Option<TurnKind> {
        match s {
            "agent" => Some(TurnKind::Agent),
            "rewind" => Some(TurnKind::Rewind),
            "merge" => Some(TurnKind::Merge),
            _ => None,
        }
    }
}

/// One turn's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Turn number (starts at 1, only grows).
    pub number: u64,
    /// Agent, rewind or merge.
    pub kind: TurnKind,
    /// The user's label, if any.
    pub label: Option<String>,
    /// An external id (e.g. the agent's message id), if any.
    pub external_id: Option<String>,
    /// Start, ns since the Unix epoch.
    pub started_at: i64,
    /// End, ns since the Unix epoch; `None` while open.
    pub ended_at: Option<i64>,
    /// For rewind turns: the turn whose start was restored.
    pub rewound_to: Option<u64>,
}

/// A pre-image as the `preimages` columns kind, perm, blob, size, target, rdev.
type Columns<'a> = (
    i64,
    Option<i64>,
    Option<&'a [u8]>,
    Option<i64>,
    Option<&'a [u8]>,
    Option<i64>,
);

fn columns(pre: &PreImage) -> Columns<'_> {
    match pre {
        PreImage::Absent => (0, None, None, None, None, None),
        PreImage::Unknown => (10, None, None, None, None, None),
        PreImage::File {
            blob, size, perm, ..
        } => (
            1,
            Some(*perm as i64),
            Some(&blob[..]),
            Some(*size as i64),
            None,
            None,
        ),
        PreImage::Ranged { size, perm, .. } => {
            (8, Some(*perm as i64), None, Some(*size as i64), None, None)
        }
        PreImage::Dir { perm } => (2, Some(*perm as i64), None, None, None, None),
        PreImage::Symlink { target } => (3, None, None, None, Some(&target[..]), None),
        PreImage::Special { perm, rdev, .. } => (
            pre.code() as i64,
            Some(*perm as i64),
            None,
            None,
            None,
            Some(*rdev as i64),
        ),
    }
}

/// Inserts a record unless its (turn, path) has one: the first record of a
/// turn is the pre-image.
const INSERT_PREIMAGE: &str =
    "INSERT OR IGNORE INTO preimages(turn, path, kind, perm, blob, size, target, rdev, ino)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

/// Runs [`INSERT_PREIMAGE`] for one record; returns the rows inserted (0 or 1).
fn insert_preimage(
    stmt: &mut rusqlite::Statement<'_>,
    turn: u64,
    path: &[u8],
    pre: &PreImage,
) -> rusqlite::Result<usize> {
    let (kind, perm, blob, size, target, rdev) = columns(pre);
    let ino = match pre {
        PreImage::File { ino, .. } | PreImage::Ranged { ino, .. } if *ino != 0 => Some(*ino as i64),
        _ => None,
    };
    stmt.execute(params![
        turn as i64,
        path,
        kind,
        perm,
        blob,
        size,
        target,
        rdev,
        ino
    ])
}

/// An open index database.
#[derive(Debug)]
pub struct Index {
    conn: Connection,
    path: PathBuf,
    /// The `blobs.data` column exists (false only for a version-1 file
    /// opened read-only).
    inline_column: bool,
    /// The `ranges` table exists (false only for a version-1 or -2 file
    /// opened read-only, which has no ranged records).
    ranges_table: bool,
}

/// Current time in ns since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Refuses to start a fresh index where one existed: SQLite treats a
/// missing or zero-length file as an empty database and would silently
/// begin a new history. A fresh state dir has no blob and no capture log
/// yet (both are only created after the index exists), so a missing or
/// empty `index.db` next to either means the index was deleted or
/// truncated.
fn refuse_lost_index(path: &Path) -> Result<(), IndexError> {
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(_) => return Ok(()), // Connection::open reports it with its cause.
    };
    if len > 0 {
        return Ok(());
    }
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    let blobs = dir.join("blobs");
    let has_blobs = std::fs::read_dir(&blobs)
        .map(|mut it| it.any(|e| e.is_ok_and(|e| e.file_name() != "tmp")))
        .unwrap_or(false);
    let witness = if has_blobs {
        format!("{} holds recorded content", blobs.display())
    } else if dir.join("capture.log").exists() {
        format!("{} exists", dir.join("capture.log").display())
    } else {
        return Ok(());
    };
    Err(IndexError::Corrupt {
        path: path.to_path_buf(),
        what: format!(
            "the file is missing or empty but {witness}: the index was deleted or \
             truncated (restore it from a backup, or move the state dir away to \
             start a new history)"
        ),
    })
}

impl Index {
    /// Opens (creating if needed) the index at `path`. `sync` selects
    /// `synchronous=FULL` (power-loss safe) instead of `NORMAL`.
    ///
    /// Errors: [`IndexError::Sqlite`] when the file is not a database or is
    /// damaged, [`IndexError::Version`] for a newer schema.
    pub fn open(path: &Path, sync: bool) -> Result<Index, IndexError> {
        let err = |source| IndexError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        refuse_lost_index(path)?;
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", if sync { "FULL" } else { "NORMAL" })
            .map_err(err)?;
        let index = Index {
            conn,
            path: path.to_path_buf(),
            inline_column: true,
            ranges_table: true,
        };
        index.conn.execute_batch(SCHEMA).map_err(err)?;
        // Columns added since the first release are optional (NULL: unknown
        // inode, content in a blob file), so older files gain them in place.
        for (table, column, ty) in [("preimages", "ino", "INTEGER"), ("blobs", "data", "BLOB")] {
            if !index.has_column(table, column)? {
                index
                    .conn
                    .execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {ty}"))
                    .map_err(err)?;
            }
        }
        index
            .conn
            .execute_batch(
                "CREATE INDEX IF NOT EXISTS preimages_by_ino ON preimages(ino) WHERE ino IS NOT NULL;
                 CREATE INDEX IF NOT EXISTS preimages_by_path ON preimages(path, turn);",
            )
            .map_err(err)?;
        let version: Option<String> = index
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(err)?;
        match version {
            None => {
                index
                    .conn
                    .execute(
                        "INSERT INTO meta(key, value) VALUES ('schema_version', ?1)",
                        [SCHEMA_VERSION.to_string()],
                    )
                    .map_err(err)?;
            }
            Some(v) => {
                let found: i64 = v.parse().map_err(|_| IndexError::Corrupt {
                    path: path.to_path_buf(),
                    what: format!("schema_version {v:?} is not a number"),
                })?;
                // Versions 1 to 3 lack only the columns, the table and the
                // indexes added above (version 4 also allows the record
                // kind 10, unknown, which older builds refuse).
                if (1..SCHEMA_VERSION).contains(&found) {
                    index
                        .conn
                        .execute(
                            "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
                            [SCHEMA_VERSION.to_string()],
                        )
                        .map_err(err)?;
                } else if found != SCHEMA_VERSION {
                    return Err(IndexError::Version {
                        path: path.to_path_buf(),
                        found,
                    });
                }
            }
        }
        Ok(index)
    }

    /// Opens an existing index read-only (for listing while a daemon runs).
    pub fn open_read_only(path: &Path) -> Result<Index, IndexError> {
        let err = |source| IndexError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(err)?;
        let mut index = Index {
            conn,
            path: path.to_path_buf(),
            inline_column: false,
            ranges_table: false,
        };
        // Touch the schema so a garbage file fails here, with its name.
        index
            .conn
            .query_row("SELECT count(*) FROM turns", [], |r| r.get::<_, i64>(0))
            .map_err(err)?;
        index.inline_column = index.has_column("blobs", "data")?;
        index.ranges_table = index.has_column("ranges", "offset")?;
        Ok(index)
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> IndexError + '_ {
        move |source| IndexError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn corrupt(&self, what: String) -> IndexError {
        IndexError::Corrupt {
            path: self.path.clone(),
            what,
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn turn_from_row(&self, r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Turn, String>> {
        let kind: String = r.get(1)?;
        let Some(kind) = TurnKind::parse(&kind) else {
            return Ok(Err(format!("unknown turn kind {kind:?}")));
        };
        Ok(Ok(Turn {
            number: r.get::<_, i64>(0)? as u64,
            kind,
            label: r.get(2)?,
            external_id: r.get(3)?,
            started_at: r.get(4)?,
            ended_at: r.get(5)?,
            rewound_to: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
        }))
    }

    const TURN_COLUMNS: &'static str =
        "number, kind, label, external_id, started_at, ended_at, rewound_to";

    /// The newest turn, if any.
    pub fn last_turn(&self) -> Result<Option<Turn>, IndexError> {
        let sql = format!(
            "SELECT {} FROM turns ORDER BY number DESC LIMIT 1",
            Self::TURN_COLUMNS
        );
        let row = self
            .conn
            .query_row(&sql, [], |r| self.turn_from_row(r))
            .optional()
            .map_err(self.err())?;
        row.transpose().map_err(|w| self.corrupt(w))
    }

    /// The turn numbered `number`, if it exists.
    pub fn turn(&self, number: u64) -> Result<Option<Turn>, IndexError> {
        let sql = format!("SELECT {} FROM turns WHERE number = ?1", Self::TURN_COLUMNS);
        let row = self
            .conn
            .query_row(&sql, [number as i64], |r| self.turn_from_row(r))
            .optional()
            .map_err(self.err())?;
        row.transpose().map_err(|w| self.corrupt(w))
    }

    /// The newest turn carrying external id `id`.
    pub fn turn_by_external_id(&self, id: &str) -> Result<Option<Turn>, IndexError> {
        let sql = format!(
            "SELECT {} FROM turns WHERE external_id = ?1 ORDER BY number DESC LIMIT 1",
            Self::TURN_COLUMNS
        );
        let row = self
            .conn
            .query_row(&sql, [id], |r| self.turn_from_row(r))
            .optional()
            .map_err(self.err())?;
        row.transpose().map_err(|w| self.corrupt(w))
    }

    /// Turns, newest first; at most `limit` of them (`None`: all).
    pub fn turns(&self, limit: Option<u64>) -> Result<Vec<Turn>, IndexError> {
        let sql = format!(
            "SELECT {} FROM turns ORDER BY number DESC LIMIT ?1",
            Self::TURN_COLUMNS
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.err())?;
        let rows = stmt
            .query_map([limit.map(|l| l as i64).unwrap_or(-1)], |r| {
                self.turn_from_row(r)
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(self.err())?.map_err(|w| self.corrupt(w))?);
        }
        Ok(out)
    }

    /// Closes turn `open` (if given) and opens turn `open + 1` (or 1) in one
    /// transaction. Returns the new turn's number.
    pub fn next_turn(
        &mut self,
        open: Option<u64>,
        kind: TurnKind,
        label: Option<&str>,
        external_id: Option<&str>,
        rewound_to: Option<u64>,
    ) -> Result<u64, IndexError> {
        let now = now_ns();
        let number = open.map_or(1, |n| n + 1);
        self.in_transaction(|tx| {
            if let Some(open) = open {
                tx.execute(
                    "UPDATE turns SET ended_at = ?1 WHERE number = ?2",
                    params![now, open as i64],
                )?;
            }
            tx.execute(
                "INSERT INTO turns(number, kind, label, external_id, started_at, rewound_to)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    number as i64,
                    kind.as_str(),
                    label,
                    external_id,
                    now,
                    rewound_to.map(|v| v as i64)
                ],
            )?;
            Ok(number)
        })
    }

    fn has_column(&self, table: &str, column: &str) -> Result<bool, IndexError> {
        self.conn
            .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")
            .and_then(|mut s| s.exists([table, column]))
            .map_err(self.err())
    }

    /// Commits the capture log's `entries` in one transaction: each blob
    /// row (with the inline content of a small file), each record (the
    /// first of a (turn, path) wins, so applying an entry twice changes
    /// nothing), and the removal of each recorded path's stored fingerprint
    /// (the mount is about to change it; see `Journal`).
    ///
    /// Durable after `Ok` to the level the index was opened with; after
    /// `Err` nothing of it is.
    pub fn apply(&mut self, entries: &[Entry]) -> Result<(), IndexError> {
        self.in_transaction(|tx| {
            let mut blob = tx.prepare_cached(
                "INSERT OR IGNORE INTO blobs(hash, size, data) VALUES (?1, ?2, ?3)",
            )?;
            let mut record = tx.prepare_cached(INSERT_PREIMAGE)?;
            let mut forget = tx.prepare_cached("DELETE FROM fingerprints WHERE path = ?1")?;
            let mut piece = tx.prepare_cached(
                "INSERT OR IGNORE INTO ranges(turn, path, offset, len, blob)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            let mut drop_ranged = tx.prepare_cached(
                "DELETE FROM preimages WHERE turn = ?1 AND path = ?2 AND kind = 8",
            )?;
            let mut drop_pieces =
                tx.prepare_cached("DELETE FROM ranges WHERE turn = ?1 AND path = ?2")?;
            for e in entries {
                if let PreImage::File {
                    blob: hash, size, ..
                } = &e.pre
                {
                    blob.execute(params![&hash[..], *size as i64, e.data.as_deref()])?;
                }
                match e.op {
                    Op::Record => {
                        insert_preimage(&mut record, e.turn, &e.path, &e.pre)?;
                    }
                    Op::Replace => {
                        // Only a ranged record is replaced: any other first
                        // record of the turn stays the pre-image.
                        if drop_ranged.execute(params![e.turn as i64, &e.path])? > 0 {
                            drop_pieces.execute(params![e.turn as i64, &e.path])?;
                        }
                        insert_preimage(&mut record, e.turn, &e.path, &e.pre)?;
                    }
                    Op::Range { offset } => {
                        if let PreImage::File {
                            blob: hash, size, ..
                        } = &e.pre
                        {
                            piece.execute(params![
                                e.turn as i64,
                                &e.path,
                                offset as i64,
                                *size as i64,
                                &hash[..]
                            ])?;
                        }
                    }
                }
                forget.execute([&e.path])?;
            }
            Ok(())
        })
    }

    /// Runs `f` in one transaction and commits it; nothing of it is kept
    /// when `f` or the commit fails. Errors name the database file.
    fn in_transaction<R>(
        &mut self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<R>,
    ) -> Result<R, IndexError> {
        let path = self.path.clone();
        let err = |source| IndexError::Sqlite { path, source };
        (|| {
            let tx = self.conn.transaction()?;
            let r = f(&tx)?;
            tx.commit()?;
            Ok(r)
        })()
        .map_err(err)
    }

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
            .and_then(|mut s| s.execute(params![&hash[..], size as i64]))
            .map(drop)
            .map_err(self.err())
    }

    /// Records `path`'s pre-image for `turn` unless one is already recorded
    /// (the first record of a turn is the pre-image; later ones are ignored).
    /// Returns true when this call inserted the record.
    ///
    /// Durable after `Ok` to the level the index was opened with.
    pub fn add_preimage(&self, turn: u64, path: &[u8], pre: &PreImage) -> Result<bool, IndexError> {
        let n = self
            .conn
            .prepare_cached(INSERT_PREIMAGE)
            .and_then(|mut s| insert_preimage(&mut s, turn, path, pre))
            .map_err(self.err())?;
        Ok(n == 1)
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
        let pre = self
            .preimage_from_row(r, col + 1)
            .map_err(|w| self.corrupt(format!("record for {:?}: {w}", paths::display(&path))))?;
        Ok((path, pre))
    }

    fn preimage_from_row(&self, r: &rusqlite::Row<'_>, first: usize) -> Result<PreImage, String> {
        let get_err = |e: rusqlite::Error| e.to_string();
        let kind: i64 = r.get(first).map_err(get_err)?;
        let perm: Option<i64> = r.get(first + 1).map_err(get_err)?;
        let blob: Option<Vec<u8>> = r.get(first + 2).map_err(get_err)?;
        let size: Option<i64> = r.get(first + 3).map_err(get_err)?;
        let target: Option<Vec<u8>> = r.get(first + 4).map_err(get_err)?;
        let rdev: Option<i64> = r.get(first + 5).map_err(get_err)?;
        let ino: Option<i64> = r.get(first + 6).map_err(get_err)?;
        let perm = || -> Result<u32, String> {
            match perm {
                Some(p) if (0..=0o7777).contains(&p) => Ok(p as u32),
                other => Err(format!("bad permission bits {other:?}")),
            }
        };
        Ok(match kind {
            0 => PreImage::Absent,
            1 => {
                let blob: Hash = blob
                    .as_deref()
                    .and_then(|b| b.try_into().ok())
                    .ok_or("file record without a 32-byte blob hash")?;
                let size = size
                    .filter(|s| *s >= 0)
                    .ok_or("file record without a size")?;
                PreImage::File {
                    blob,
                    size: size as u64,
                    perm: perm()?,
                    ino: ino.unwrap_or(0) as u64,
                }
            }
            8 => PreImage::Ranged {
                size: size
                    .filter(|s| *s >= 0)
                    .ok_or("ranged file record without a size")? as u64,
                perm: perm()?,
                ino: ino.unwrap_or(0) as u64,
            },
            2 => PreImage::Dir { perm: perm()? },
            10 => PreImage::Unknown,
            3 => PreImage::Symlink {
                target: target.ok_or("symlink record without a target")?,
            },
            4..=7 => PreImage::Special {
                kind: Special::from_code(kind as u8).unwrap_or(Special::Block),
                perm: perm()?,
                rdev: rdev.unwrap_or(0) as u64,
            },
            k => return Err(format!("unknown pre-image kind {k}")),
        })
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
        let until = until.map(|u| u as i64).unwrap_or(i64::MAX);
        let mut stmt = self
            .conn
            .prepare(
                "SELECT p.path, p.kind, p.perm, p.blob, p.size, p.target, p.rdev, p.ino
                 FROM preimages p
                 JOIN (SELECT path, MIN(turn) AS t FROM preimages
                       WHERE turn >= ?1 AND turn < ?2 GROUP BY path) m
                   ON p.turn = m.t AND p.path = m.path
                 ORDER BY p.path",
            )
            .map_err(self.err())?;
        let mut rows = stmt
            .query(params![from as i64, until])
            .map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            out.push(self.record_from_row(r, 0)?);
        }
        Ok(out)
    }

    /// Every record with `turn >= from`, as `(turn, path, pre-image)`,
    /// sorted by path bytes and then by turn. One query however many turns
    /// it spans; history commands build their per-path timelines from it.
    ///
    /// True when `path` has a record in some turn before `before`.
    pub fn recorded_before(&self, path: &[u8], before: u64) -> Result<bool, IndexError> {
        self.conn
            .prepare_cached("SELECT 1 FROM preimages WHERE path = ?1 AND turn < ?2 LIMIT 1")
            .and_then(|mut s| s.exists(params![path, before as i64]))
            .map_err(self.err())
    }

    /// True when `path` has a record in some turn in `from..until`
    /// (`until` exclusive). One lookup in the `(path, turn)` index.
    pub fn recorded_between(&self, path: &[u8], from: u64, until: u64) -> Result<bool, IndexError> {
        self.conn
            .prepare_cached(
                "SELECT 1 FROM preimages WHERE path = ?1 AND turn >= ?2 AND turn < ?3 LIMIT 1",
            )
            .and_then(|mut s| s.exists(params![path, from as i64, until as i64]))
            .map_err(self.err())
    }

    /// File records of inode `ino` in turns before `before`, except those of
    /// `path`: `(turn, path, pre-image)`, oldest first.
    pub fn records_of_inode(
        &self,
        ino: u64,
        before: u64,
        path: &[u8],
    ) -> Result<Vec<(u64, Vec<u8>, PreImage)>, IndexError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT turn, path, kind, perm, blob, size, target, rdev, ino FROM preimages
                 WHERE ino = ?1 AND kind = 1 AND turn < ?2 AND path != ?3 ORDER BY turn",
            )
            .map_err(self.err())?;
        let mut rows = stmt
            .query(params![ino as i64, before as i64, path])
            .map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            let turn: i64 = r.get(0).map_err(self.err())?;
            let (path, pre) = self.record_from_row(r, 1)?;
            out.push((turn as u64, path, pre));
        }
        Ok(out)
    }

    /// Errors: [`IndexError::Corrupt`] when a stored path is not a valid
    /// project-relative path or a record is malformed.
    pub fn records_since(&self, from: u64) -> Result<Vec<(u64, Vec<u8>, PreImage)>, IndexError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT turn, path, kind, perm, blob, size, target, rdev, ino FROM preimages
                 WHERE turn >= ?1 ORDER BY path, turn",
            )
            .map_err(self.err())?;
        let mut rows = stmt.query([from as i64]).map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            let turn: i64 = r.get(0).map_err(self.err())?;
            let (path, pre) = self.record_from_row(r, 1)?;
            out.push((turn as u64, path, pre));
        }
        Ok(out)
    }

    /// The earliest record of `path` with `turn >= from`: the path's state
    /// when turn `from` began. `None` when the path has no such record (it
    /// did not change since `from` began; its state is the project's).
    pub fn state_from(&self, path: &[u8], from: u64) -> Result<Option<PreImage>, IndexError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT kind, perm, blob, size, target, rdev, ino FROM preimages
                 WHERE path = ?1 AND turn >= ?2 ORDER BY turn LIMIT 1",
            )
            .map_err(self.err())?;
        let mut rows = stmt.query(params![path, from as i64]).map_err(self.err())?;
        match rows.next().map_err(self.err())? {
            None => Ok(None),
            Some(r) => self
                .preimage_from_row(r, 0)
                .map(Some)
                .map_err(|w| self.corrupt(w)),
        }
    }

    /// The oldest turn still in the index (retention may have dropped
    /// older ones), if any.
    pub fn first_turn(&self) -> Result<Option<u64>, IndexError> {
        self.conn
            .query_row("SELECT min(number) FROM turns", [], |r| {
                r.get::<_, Option<i64>>(0)
            })
            .map(|v| v.map(|n| n as u64))
            .map_err(self.err())
    }

    /// Every record of turn `turn`, as `(path, pre-image)`, sorted by path.
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed record.
    pub fn records_of_turn(&self, turn: u64) -> Result<Vec<(Vec<u8>, PreImage)>, IndexError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT path, kind, perm, blob, size, target, rdev, ino FROM preimages
                 WHERE turn = ?1 ORDER BY path",
            )
            .map_err(self.err())?;
        let mut rows = stmt.query([turn as i64]).map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            out.push(self.record_from_row(r, 0)?);
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
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT turn, kind, perm, blob, size, target, rdev, ino FROM preimages
                 WHERE path = ?1 AND turn >= ?2 ORDER BY turn",
            )
            .map_err(self.err())?;
        let mut rows = stmt.query(params![path, from as i64]).map_err(self.err())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err())? {
            let turn: i64 = r.get(0).map_err(self.err())?;
            let pre = self.preimage_from_row(r, 1).map_err(|w| self.corrupt(w))?;
            out.push((turn as u64, pre));
        }
        Ok(out)
    }

    /// The earliest record of `path` with `turn >= from`, with its turn.
    pub fn record_from(
        &self,
        path: &[u8],
        from: u64,
    ) -> Result<Option<(u64, PreImage)>, IndexError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT turn, kind, perm, blob, size, target, rdev, ino FROM preimages
                 WHERE path = ?1 AND turn >= ?2 ORDER BY turn LIMIT 1",
            )
            .map_err(self.err())?;
        let mut rows = stmt.query(params![path, from as i64]).map_err(self.err())?;
        match rows.next().map_err(self.err())? {
            None => Ok(None),
            Some(r) => {
                let turn: i64 = r.get(0).map_err(self.err())?;
                let pre = self.preimage_from_row(r, 1).map_err(|w| self.corrupt(w))?;
                Ok(Some((turn as u64, pre)))
            }
        }
    }

    /// The paths recorded in turn `turn`, sorted.
    pub fn paths_of_turn(&self, turn: u64) -> Result<Vec<Vec<u8>>, IndexError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT path FROM preimages WHERE turn = ?1 ORDER BY path")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([turn as i64], |r| r.get::<_, Vec<u8>>(0))
            .map_err(self.err())?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r.map_err(self.err())?);
        }
        Ok(out)
    }

    /// The pre-image of `path` recorded in exactly turn `turn`.
    pub fn preimage(&self, turn: u64, path: &[u8]) -> Result<Option<PreImage>, IndexError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT kind, perm, blob, size, target, rdev, ino FROM preimages
                 WHERE turn = ?1 AND path = ?2",
            )
            .map_err(self.err())?;
        let mut rows = stmt.query(params![turn as i64, path]).map_err(self.err())?;
        match rows.next().map_err(self.err())? {
            None => Ok(None),
            Some(r) => self
                .preimage_from_row(r, 0)
                .map(Some)
                .map_err(|w| self.corrupt(w)),
        }
    }

    /// The saved ranges of `path`'s [`PreImage::Ranged`] record in `turn`,
    /// in the order they were saved (earliest first: where two overlap,
    /// the earlier holds the turn-start bytes).
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
        let mut rows = stmt.query(params![turn as i64, path]).map_err(self.err())?;
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
            if offset < 0 || len <= 0 || offset.checked_add(len).is_none() {
                return Err(bad());
            }
            out.push(Piece {
                offset: offset as u64,
                len: len as u64,
                blob,
            });
        }
        Ok(out)
    }

    /// Every blob hash some record or saved range refers to.
    pub fn referenced_blobs(&self) -> Result<Vec<Hash>, IndexError> {
        let sql = if self.ranges_table {
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

    /// Stores fingerprints in one transaction; `None` deletes the path's
    /// fingerprint (the mount is changing it; nothing to compare against).
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
                        f.file_type as i64,
                        f.ino as i64,
                        f.size as i64,
                        f.mtime_ns,
                        f.perm as i64
                    ]),
                    None => del.execute([p]),
                }?;
            }
            Ok(())
        })
    }

    /// The stored fingerprint of `path`, if any.
    pub fn fingerprint(&self, path: &[u8]) -> Result<Option<Fingerprint>, IndexError> {
        self.conn
            .prepare_cached(
                "SELECT ftype, ino, size, mtime_ns, perm FROM fingerprints WHERE path = ?1",
            )
            .and_then(|mut s| {
                s.query_row([path], |r| {
                    Ok(Fingerprint {
                        file_type: r.get::<_, i64>(0)? as u32,
                        ino: r.get::<_, i64>(1)? as u64,
                        size: r.get::<_, i64>(2)? as u64,
                        mtime_ns: r.get(3)?,
                        perm: r.get::<_, i64>(4)? as u32,
                    })
                })
                .optional()
            })
            .map_err(self.err())
    }

    /// Copies the WAL into the database file and empties it, so the file
    /// alone holds everything (done at a clean unmount). Errors are those
    /// of SQLite; the WAL stays valid if it fails.
    pub fn checkpoint(&self) -> Result<(), IndexError> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(self.err())
    }

    /// Marks the start of the restore recorded as `rewind_turn`.
    pub fn begin_restore(&self, rewind_turn: u64, rewound_to: u64) -> Result<(), IndexError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO restores(rewind_turn, rewound_to, state) VALUES (?1, ?2, 'running')",
                params![rewind_turn as i64, rewound_to as i64],
            )
            .map(drop)
            .map_err(self.err())
    }

    /// Marks the restore recorded as `rewind_turn` complete.
    pub fn finish_restore(&self, rewind_turn: u64) -> Result<(), IndexError> {
        self.conn
            .execute(
                "UPDATE restores SET state = 'done' WHERE rewind_turn = ?1",
                [rewind_turn as i64],
            )
            .map(drop)
            .map_err(self.err())
    }

    /// Whether a restore was ever marked running for `rewind_turn` (it may
    /// since have been marked done).
    pub fn restore_started(&self, rewind_turn: u64) -> Result<bool, IndexError> {
        self.conn
            .query_row(
                "SELECT 1 FROM restores WHERE rewind_turn = ?1",
                [rewind_turn as i64],
                |_| Ok(()),
            )
            .optional()
            .map(|r| r.is_some())
            .map_err(self.err())
    }

    /// A restore that started and did not finish (the process died during
    /// it): `(rewind turn, rewound-to turn)`.
    pub fn unfinished_restore(&self) -> Result<Option<(u64, u64)>, IndexError> {
        self.conn
            .query_row(
                "SELECT rewind_turn, rewound_to FROM restores WHERE state = 'running'
                 ORDER BY rewind_turn DESC LIMIT 1",
                [],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )
            .optional()
            .map_err(self.err())
    }

    /// Number of pre-image records and total bytes of referenced blobs.
    pub fn totals(&self) -> Result<(u64, u64), IndexError> {
        let records: i64 = self
            .conn
            .query_row("SELECT count(*) FROM preimages", [], |r| r.get(0))
            .map_err(self.err())?;
        let bytes: i64 = self
            .conn
            .query_row("SELECT coalesce(sum(size), 0) FROM blobs", [], |r| r.get(0))
            .map_err(self.err())?;
        Ok((records as u64, bytes as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(n: u8) -> PreImage {
        PreImage::File {
            blob: [n; 32],
            size: n as u64,
            perm: 0o644,
            ino: n as u64,
        }
    }

    #[test]
    fn earliest_record_per_path_wins() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ix = Index::open(&dir.path().join("index.db"), false).expect("open");
        let t1 = ix
            .next_turn(None, TurnKind::Agent, Some("one"), None, None)
            .expect("t1");
        assert_eq!(t1, 1);
        assert!(ix.add_preimage(1, b"a", &file(1)).expect("add"));
        assert!(!ix.add_preimage(1, b"a", &file(9)).expect("dup ignored"));
        let t2 = ix
            .next_turn(Some(1), TurnKind::Agent, None, Some("msg-2"), None)
            .expect("t2");
        ix.add_preimage(t2, b"a", &file(2)).expect("add");
        ix.add_preimage(t2, b"b/c", &PreImage::Absent).expect("add");
        ix.add_preimage(
            t2,
            b"d",
            &PreImage::Symlink {
                target: b"\xff".to_vec(),
            },
        )
        .expect("add");
        let at1 = ix.states_at(1, None).expect("states");
        assert_eq!(at1[0], (b"a".to_vec(), file(1)));
        assert_eq!(at1.len(), 3);
        let at2 = ix.states_at(2, None).expect("states");
        assert_eq!(at2[0], (b"a".to_vec(), file(2)));
        assert_eq!(ix.states_at(1, Some(2)).expect("range").len(), 1);
        assert_eq!(
            ix.turn_by_external_id("msg-2")
                .expect("by id")
                .map(|t| t.number),
            Some(2)
        );
        assert!(ix.turn(1).expect("turn").and_then(|t| t.ended_at).is_some());
        assert_eq!(ix.paths_of_turn(2).expect("paths").len(), 3);
    }

    #[test]
    fn a_version_3_index_is_upgraded_and_a_newer_one_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("index.db");
        {
            let mut ix = Index::open(&path, false).expect("open");
            ix.next_turn(None, TurnKind::Agent, None, None, None)
                .expect("t1");
            ix.add_preimage(1, b"a", &file(1)).expect("add");
            // What a version 3 file looks like: no (path, turn) index.
            ix.conn
                .execute_batch(
                    "DROP INDEX preimages_by_path;
                     UPDATE meta SET value = '3' WHERE key = 'schema_version';",
                )
                .expect("downgrade");
        }
        {
            let ix = Index::open(&path, false).expect("upgrade");
            let version: String = ix
                .conn
                .query_row(
                    "SELECT value FROM meta WHERE key = 'schema_version'",
                    [],
                    |r| r.get(0),
                )
                .expect("version");
            assert_eq!(version, SCHEMA_VERSION.to_string());
            assert!(ix.recorded_between(b"a", 1, 2).expect("lookup"));
            assert!(!ix.recorded_between(b"a", 2, 5).expect("lookup"));
            assert!(ix.add_preimage(1, b"u", &PreImage::Unknown).expect("add"));
            assert_eq!(ix.preimage(1, b"u").expect("read"), Some(PreImage::Unknown));
            ix.conn
                .execute(
                    "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
                    [(SCHEMA_VERSION + 1).to_string()],
                )
                .expect("from the future");
        }
        assert!(matches!(
            Index::open(&path, false),
            Err(IndexError::Version { found, .. }) if found == SCHEMA_VERSION + 1
        ));
    }

    #[test]
    fn corrupt_path_is_rejected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ix = Index::open(&dir.path().join("index.db"), false).expect("open");
        ix.next_turn(None, TurnKind::Agent, None, None, None)
            .expect("t1");
        ix.add_preimage(1, b"../etc/passwd", &PreImage::Absent)
            .expect("add");
        assert!(matches!(
            ix.states_at(1, None),
            Err(IndexError::Corrupt { .. })
        ));
    }

    #[test]
    fn garbage_file_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("index.db");
        std::fs::write(&path, vec![0x5a; 8192]).expect("write garbage");
        let err = Index::open(&path, false).expect_err("must fail");
        assert!(err.to_string().contains("index.db"), "{err}");
    }
}
