//! The SQLite index: turns, pre-image records, blobs and the restore journal.
//!
//! The schema is documented in `docs/format.md` (schema version
//! [`SCHEMA_VERSION`]). The database runs in WAL mode; with
//! `synchronous=NORMAL` a committed transaction survives a crash of the
//! process, with `synchronous=FULL` (the `--sync` option) also a power loss.
//!
//! One file per table family, each adding methods to [`Index`]:
//! - [`schema`] (the tables and the upgrades from versions 1 to 5),
//! - `turns`, `records` (reading and writing pre-image records), `apply`
//!   (committing the capture log), `ranges`, `blobs`, `fingerprints`,
//!   `restores`, and `retention` (what `opfs gc` reads and deletes);
//! - `codec`: how values map to columns (record kinds, checked integers).

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::store::{blob, layout};

mod apply;
mod blobs;
mod codec;
mod fingerprints;
mod outside;
mod ranges;
mod records;
mod repo_moves;
mod restores;
mod retention;
mod schema;
mod turns;

pub use outside::OutsideEdit;
pub use ranges::{Packed, Piece};
pub use records::Target;
pub use restores::StoppedRestore;
pub use retention::{Dropped, TopUse};
pub use schema::SCHEMA_VERSION;

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
    /// A removed file kept for hashing (`store::kept`) could not be made a
    /// blob before its record was committed; the record stays pending.
    #[error("kept file {path} cannot be stored as a blob: {source}")]
    Kept {
        /// The kept file.
        path: PathBuf,
        /// The cause.
        source: crate::store::BlobError,
    },
    /// A range pack (the saved pieces of a turn's ranged records) could
    /// not be written; nothing of the commit is in the index.
    #[error("range pack {path}: {source}")]
    Pack {
        /// The pack file.
        path: PathBuf,
        /// The cause (ENOSPC when the disk is full).
        source: crate::store::BlobError,
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
    /// What SQLite reports when the disk is full (`SQLITE_FULL`, "database
    /// or disk is full") for the index at `path`: the error the failure
    /// tests inject (`crate::failpoint::failpoint_error`).
    pub fn disk_full(path: PathBuf) -> IndexError {
        IndexError::Sqlite {
            path,
            source: rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                None,
            ),
        }
    }
}

impl IndexError {
    /// The database file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            IndexError::Sqlite { path, .. }
            | IndexError::Kept { path, .. }
            | IndexError::Pack { path, .. }
            | IndexError::Corrupt { path, .. }
            | IndexError::Version { path, .. } => path,
        }
    }
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
    /// The `preimages.uid`, `gid` and `xattrs` columns exist (false only
    /// for a file older than version 5 opened read-only).
    meta_columns: bool,
    /// The `ranges.pack` column exists (false only for a file older than
    /// version 6 opened read-only: no piece is in a pack).
    pack_column: bool,
}

/// Current time in ns since the Unix epoch (0 before it, `i64::MAX` after
/// the year 2262).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Refuses to start a fresh index where one existed: SQLite treats a
/// missing or zero-length file as an empty database and would silently
/// begin a new history. A fresh state dir has no blob and no capture log
/// yet (both are only created after the index exists), so a missing or
/// empty index next to either (the names are [`layout`]'s) means the index
/// was deleted or truncated.
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
    let blobs = dir.join(layout::BLOBS);
    let capture_log = dir.join(layout::CAPTURE_LOG);
    let has_blobs = std::fs::read_dir(&blobs)
        .map(|mut it| it.any(|e| e.is_ok_and(|e| e.file_name() != blob::TMP_DIR)))
        .unwrap_or(false);
    let witness = if has_blobs {
        format!("{} holds recorded content", blobs.display())
    } else if capture_log.exists() {
        format!("{} exists", capture_log.display())
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

/// A read-only connection to the index at `path` that waits up to 10 s
/// for a writer's lock.
fn connect_read_only(path: &Path) -> Result<Connection, IndexError> {
    let err = |source| codec::sqlite_error(path, source);
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(err)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(err)?;
    Ok(conn)
}

/// Reads every page of the index at `path` once (SQLite's `PRAGMA
/// quick_check`) and fails if any is damaged: SQLite itself reads pages
/// lazily, so a file with garbage in its middle opens, and a mount or a
/// rewind would run on it until it met the damage. `mount` and a rewind
/// run without a daemon call this first. Cost: one read of the file (a
/// 117 MiB index: 0.3 s with a warm page cache, 3.5 s cold). A missing or
/// empty file passes (a new history; [`Index::open`] refuses one that was
/// lost).
///
/// Errors: [`IndexError::Corrupt`] naming the file and the first problems
/// SQLite found, and the fix; [`IndexError::Sqlite`] when it is not a
/// database at all.
pub fn quick_check(path: &Path) -> Result<(), IndexError> {
    if std::fs::metadata(path).map_or(true, |m| m.len() == 0) {
        return Ok(());
    }
    let err = |source| codec::sqlite_error(path, source);
    let conn = connect_read_only(path)?;
    let lines: Vec<String> = match conn.prepare("PRAGMA quick_check(5)").and_then(|mut st| {
        st.query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<_, _>>()
    }) {
        Ok(lines) => lines,
        // Damage where the check itself must read (the schema) stops it.
        Err(e @ rusqlite::Error::SqliteFailure(..)) => vec![e.to_string()],
        Err(e) => return Err(err(e)),
    };
    if lines == ["ok"] {
        return Ok(());
    }
    Err(IndexError::Corrupt {
        path: path.to_path_buf(),
        what: format!(
            "SQLite's check of every page found: {}; nothing was changed. Restore the file \
             from a backup, or move the state dir away to start a new history (`opfs verify` \
             lists what it can still read)",
            lines.join("; ")
        ),
    })
}

/// SQLite's page cache per connection, as its `cache_size` pragma takes
/// it: negative means KiB (16 MiB; the default is 2 MiB).
const CACHE_KIB: i64 = -16 * 1024;

/// WAL pages between automatic checkpoints (the default is 1,000: 4 MiB of
/// 4 KiB pages; this lets the WAL grow to 32 MiB before the checkpoint
/// copies it into the database and resets it).
const CHECKPOINT_PAGES: i64 = 8192;

impl Index {
    /// Opens (creating if needed) the index at `path`, upgrading an older
    /// schema in place. `sync` selects `synchronous=FULL` (power-loss safe)
    /// instead of `NORMAL`.
    ///
    /// Errors: [`IndexError::Sqlite`] when the file is not a database or is
    /// damaged, [`IndexError::Version`] for a newer schema,
    /// [`IndexError::Corrupt`] when the file is missing or empty but the
    /// state dir shows a history was recorded.
    ///
    /// A new index is made without an `fsync` unless `sync`: SQLite would
    /// otherwise sync its rollback journal, the directory, the database
    /// and the new WAL's header (five syncs, tens of milliseconds on a
    /// busy disk, paid by every `worktree create`). What a process crash
    /// may lose is unchanged (every write has reached the kernel when this
    /// returns); a power loss may lose a new index that holds nothing yet,
    /// which the default mode does not promise to survive anyway.
    pub fn open(path: &Path, sync: bool) -> Result<Index, IndexError> {
        let err = |source| codec::sqlite_error(path, source);
        refuse_lost_index(path)?;
        let new = !path.exists();
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(err)?;
        let synchronous = if sync { "FULL" } else { "NORMAL" };
        if new && !sync {
            conn.pragma_update(None, "synchronous", "OFF")
                .map_err(err)?;
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        // A burst of captures (an `rm -rf`) inserts rows at random places
        // of the blob table (keyed by hash): at SQLite's defaults the
        // group commits re-read evicted pages and checkpoint (copy the
        // WAL into the database, then `fsync`) every 1,000 pages, so a
        // hot page is written several times a second. A larger page cache
        // and WAL between checkpoints write each page fewer times
        // (`docs/bench/2026-12-03-removal-capture.md`, "Removals: the capture's cost per file").
        conn.pragma_update(None, "cache_size", CACHE_KIB)
            .map_err(err)?;
        conn.pragma_update(None, "wal_autocheckpoint", CHECKPOINT_PAGES)
            .map_err(err)?;
        let index = Index {
            conn,
            path: path.to_path_buf(),
            inline_column: true,
            ranges_table: true,
            meta_columns: true,
            pack_column: true,
        };
        schema::create_or_upgrade(&index)?;
        index
            .conn
            .pragma_update(None, "synchronous", synchronous)
            .map_err(err)?;
        Ok(index)
    }

    /// Opens an existing index read-only (for listing while a daemon runs).
    /// An older schema is read as it is (nothing is upgraded).
    ///
    /// Errors: [`IndexError::Sqlite`] when the file is missing, is not a
    /// database or has no `turns` table.
    pub fn open_read_only(path: &Path) -> Result<Index, IndexError> {
        let conn = connect_read_only(path)?;
        let mut index = Index {
            conn,
            path: path.to_path_buf(),
            inline_column: false,
            ranges_table: false,
            meta_columns: false,
            pack_column: false,
        };
        // Touch the schema so a garbage file fails here, with its name.
        index
            .conn
            .query_row("SELECT count(*) FROM turns", [], |r| r.get::<_, i64>(0))
            .map_err(|source| codec::sqlite_error(path, source))?;
        index.inline_column = index.has_column("blobs", "data")?;
        index.ranges_table = index.has_column("ranges", "offset")?;
        index.meta_columns = index.has_column("preimages", "xattrs")?;
        index.pack_column = index.ranges_table && index.has_column("ranges", "pack")?;
        Ok(index)
    }

    /// Maps a SQLite error to the [`IndexError`] naming this database.
    fn err(&self) -> impl Fn(rusqlite::Error) -> IndexError + '_ {
        move |source| codec::sqlite_error(&self.path, source)
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

    fn has_column(&self, table: &str, column: &str) -> Result<bool, IndexError> {
        self.conn
            .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")
            .and_then(|mut s| s.exists([table, column]))
            .map_err(self.err())
    }

    /// Runs `f` in one transaction and commits it; nothing of it is kept
    /// when `f` or the commit fails. Errors name the database file.
    fn in_transaction<R>(
        &mut self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<R>,
    ) -> Result<R, IndexError> {
        let path = self.path.clone();
        (|| {
            let tx = self.conn.transaction()?;
            let r = f(&tx)?;
            tx.commit()?;
            Ok(r)
        })()
        .map_err(|source| codec::sqlite_error(&path, source))
    }

    /// SQLite's `PRAGMA data_version` for this connection: a number that
    /// changes whenever another connection (another process: the daemon)
    /// has committed to the file since this connection last looked. Cheap
    /// (no disk read when nothing changed); a worktree's lower layer uses it
    /// to tell whether the project's records moved on.
    ///
    /// Errors: those of SQLite.
    pub fn data_version(&self) -> Result<i64, IndexError> {
        // Cached: a worktree's base asks after each read it serves from
        // the project, and parsing the pragma each time cost more than
        // the answer.
        self.conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{PreImage, TurnKind};

    fn file(n: u8) -> PreImage {
        PreImage::File {
            blob: [n; 32],
            size: u64::from(n),
            perm: 0o644,
            ino: u64::from(n),
        }
    }

    #[test]
    fn turns_opened_from_inside_relabel_when_empty_and_are_not_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ix = Index::open(&dir.path().join("index.db"), false).expect("open");
        ix.next_turn(None, TurnKind::Agent, Some("u1"), None, None)
            .expect("t1");
        ix.next_turn(Some(1), TurnKind::Agent, Some("u2"), None, None)
            .expect("t2");
        // The user's empty turn is not relabelled: a new one opens.
        assert_eq!(
            ix.sandbox_turn(2, Some("p1"), None, None).expect("p1"),
            (3, true)
        );
        // An empty turn opened from inside is relabelled.
        assert_eq!(
            ix.sandbox_turn(3, Some("p2"), Some("s"), None).expect("p2"),
            (3, false)
        );
        let t3 = ix.turn(3).expect("read").expect("t3");
        assert_eq!(
            (t3.label.as_deref(), t3.external_id.as_deref()),
            (Some("p2"), Some("s"))
        );
        assert_eq!(
            ix.turn(2).expect("read").expect("t2").label.as_deref(),
            Some("u2")
        );
        // Once it recorded something, the next prompt opens a new turn.
        ix.add_preimage(3, b"a", &file(1)).expect("add");
        assert_eq!(
            ix.sandbox_turn(3, Some("p3"), None, None).expect("p3"),
            (4, true)
        );
        // The run's placeholder is relabelled while empty.
        ix.next_turn(Some(4), TurnKind::Agent, Some("claude session"), None, None)
            .expect("t5");
        assert_eq!(
            ix.sandbox_turn(5, Some("p4"), None, Some(5)).expect("p4"),
            (5, false)
        );
        // Count-based retention counts turns 1, 2 and 5 only.
        assert_eq!(ix.nth_newest_outside_turn(1).expect("1"), Some(5));
        assert_eq!(ix.nth_newest_outside_turn(2).expect("2"), Some(2));
        assert_eq!(ix.nth_newest_outside_turn(3).expect("3"), Some(1));
        assert_eq!(ix.nth_newest_outside_turn(4).expect("4"), None);
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
    fn a_version_4_index_gains_owner_and_attribute_columns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("index.db");
        {
            let mut ix = Index::open(&path, false).expect("open");
            ix.next_turn(None, TurnKind::Agent, None, None, None)
                .expect("t1");
            ix.add_preimage(1, b"a", &file(1)).expect("add");
            // What a version 4 file looks like: no uid, gid, xattrs.
            ix.conn
                .execute_batch(
                    "ALTER TABLE preimages DROP COLUMN uid;
                     ALTER TABLE preimages DROP COLUMN gid;
                     ALTER TABLE preimages DROP COLUMN xattrs;
                     UPDATE meta SET value = '4' WHERE key = 'schema_version';",
                )
                .expect("downgrade");
        }
        {
            let ro = Index::open_read_only(&path).expect("read-only, as it is");
            assert_eq!(ro.meta_of(1, b"a").expect("no columns: none"), None);
            assert_eq!(ro.states_at(1, None).expect("states").len(), 1);
        }
        let ix = Index::open(&path, false).expect("upgrade");
        let targets = ix.targets_at(1, None).expect("targets");
        assert_eq!(targets.len(), 1);
        assert_eq!(targets[0].meta, None, "an old record holds no metadata");
        let meta = crate::record::Meta::new(1000, 100, vec![(b"user.x".to_vec(), b"1".to_vec())]);
        assert!(ix.add_record(1, b"b", &file(2), Some(&meta)).expect("add"));
        assert_eq!(ix.meta_of(1, b"b").expect("read"), Some(meta));
        let bare = crate::record::Meta::new(5, 6, vec![]);
        assert!(ix.add_record(1, b"c", &file(3), Some(&bare)).expect("add"));
        let stored: Option<Vec<u8>> = ix
            .conn
            .query_row(
                "SELECT xattrs FROM preimages WHERE path = ?1",
                [&b"c"[..]],
                |r| r.get(0),
            )
            .expect("xattrs column");
        assert_eq!(stored, None, "an empty attribute set is NULL");
        assert_eq!(ix.meta_of(1, b"c").expect("read"), Some(bare));
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
