//! The index's tables (`docs/format.md`) and the upgrade of older files.
//!
//! Versions 1 to 5 lack only columns, a table and indexes that
//! [`create_or_upgrade`] adds in place; version 4 also allows the record
//! kind 10 (unknown), which older builds refuse, and version 5 records a
//! path's owner and extended attributes (`uid`, `gid`, `xattrs`), which a
//! version 4 build would drop when it copies records, so the version number
//! is raised once they are added. Version 6 keeps small saved pieces of
//! ranged records in range packs (`ranges.pack`), which a version 5 build
//! would look for in vain among the blobs. Version 7 adds `outside_edits`
//! (edits behind the mount kept before the mount overwrote them) and
//! `repo_moves` (the project's `.git` moved through the mount): a version 6
//! build's gc would drop the kept edits' blobs. A newer version is refused.

use rusqlite::OptionalExtension;

use super::{Index, IndexError};

/// The version of the schema this build reads and writes.
pub const SCHEMA_VERSION: i64 = 7;

/// Every table, as version [`SCHEMA_VERSION`] has it (`IF NOT EXISTS`: a
/// no-op on a current file).
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
    uid    INTEGER,
    gid    INTEGER,
    xattrs BLOB,
    PRIMARY KEY (turn, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS links(
    turn  INTEGER NOT NULL,
    path  BLOB NOT NULL,
    nlink INTEGER NOT NULL,
    PRIMARY KEY (turn, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ranges(
    turn   INTEGER NOT NULL,
    path   BLOB NOT NULL,
    offset INTEGER NOT NULL,
    len    INTEGER NOT NULL,
    blob   BLOB NOT NULL,
    pack   INTEGER
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
CREATE TABLE IF NOT EXISTS outside_edits(
    turn    INTEGER NOT NULL,
    path    BLOB NOT NULL,
    seq     INTEGER NOT NULL,
    kind    INTEGER NOT NULL,
    perm    INTEGER,
    blob    BLOB,
    size    INTEGER,
    target  BLOB,
    rdev    INTEGER,
    ino     INTEGER,
    kept_at INTEGER NOT NULL,
    by      TEXT NOT NULL,
    PRIMARY KEY (turn, path, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS repo_moves(
    turn INTEGER NOT NULL,
    path BLOB NOT NULL,
    PRIMARY KEY (turn, path)
) WITHOUT ROWID;
";

/// Columns added since the first release: `(table, column, type)`. They
/// are optional (NULL: unknown inode, content in a blob file, a piece
/// stored as a blob), so older files gain them in place.
const ADDED_COLUMNS: [(&str, &str, &str); 10] = [
    ("preimages", "ino", "INTEGER"),
    ("blobs", "data", "BLOB"),
    ("preimages", "uid", "INTEGER"),
    ("preimages", "gid", "INTEGER"),
    ("preimages", "xattrs", "BLOB"),
    ("restores", "outcome", "TEXT"),
    ("restores", "restored", "INTEGER"),
    ("restores", "total", "INTEGER"),
    ("restores", "detail", "TEXT"),
    ("turns", "origin", "TEXT"),
];

/// Indexes added since the first release.
const ADDED_INDEXES: &str =
    "CREATE INDEX IF NOT EXISTS preimages_by_ino ON preimages(ino) WHERE ino IS NOT NULL;
     CREATE INDEX IF NOT EXISTS preimages_by_path ON preimages(path, turn);
     CREATE INDEX IF NOT EXISTS ranges_by_path ON ranges(turn, path);";

/// Version 6's `ranges` table: the `pack` column, and no `UNIQUE (turn,
/// path, offset, blob)` (an index keyed by the offset of random writes
/// dirtied a page per piece; a replay skips pieces already listed
/// instead, [`Index::apply`]). Rebuilt in rowid order, which is the
/// saving order the readers rely on.
const RANGES_V6: &str = "
CREATE TABLE ranges_v6(
    turn   INTEGER NOT NULL,
    path   BLOB NOT NULL,
    offset INTEGER NOT NULL,
    len    INTEGER NOT NULL,
    blob   BLOB NOT NULL,
    pack   INTEGER
);
INSERT INTO ranges_v6(rowid, turn, path, offset, len, blob)
    SELECT rowid, turn, path, offset, len, blob FROM ranges ORDER BY rowid;
DROP TABLE ranges;
ALTER TABLE ranges_v6 RENAME TO ranges;";

/// Creates the tables of a fresh file, or brings a version 1 to 5 file up
/// to [`SCHEMA_VERSION`] (durable with the connection's `synchronous`
/// level). Errors: [`IndexError::Version`] for a newer file,
/// [`IndexError::Corrupt`] for an unreadable version, else SQLite's.
pub(super) fn create_or_upgrade(index: &Index) -> Result<(), IndexError> {
    let err = index.err();
    index.conn.execute_batch(SCHEMA).map_err(&err)?;
    if !index.has_column("ranges", "pack")? {
        // One transaction: dropped on error, the old table stays.
        let tx = index.conn.unchecked_transaction().map_err(&err)?;
        tx.execute_batch(RANGES_V6).map_err(&err)?;
        tx.commit().map_err(&err)?;
    }
    for (table, column, ty) in ADDED_COLUMNS {
        if !index.has_column(table, column)? {
            index
                .conn
                .execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {ty}"))
                .map_err(&err)?;
        }
    }
    index.conn.execute_batch(ADDED_INDEXES).map_err(&err)?;
    let version: Option<String> = index
        .conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(&err)?;
    match version {
        None => {
            index
                .conn
                .execute(
                    "INSERT INTO meta(key, value) VALUES ('schema_version', ?1)",
                    [SCHEMA_VERSION.to_string()],
                )
                .map_err(&err)?;
        }
        Some(v) => {
            let found: i64 = v
                .parse()
                .map_err(|_| index.corrupt(format!("schema_version {v:?} is not a number")))?;
            if (1..SCHEMA_VERSION).contains(&found) {
                index
                    .conn
                    .execute(
                        "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
                        [SCHEMA_VERSION.to_string()],
                    )
                    .map_err(&err)?;
            } else if found != SCHEMA_VERSION {
                return Err(IndexError::Version {
                    path: index.path.clone(),
                    found,
                });
            }
        }
    }
    Ok(())
}
