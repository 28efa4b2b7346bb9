//! `opfs gc`: retention (design §3).
//!
//! Keeps the newest `keep` turns (default [`DEFAULT_KEEP`]) and, with a byte
//! budget, drops further old turns until the blobs the kept records refer
//! to fit in it. The open turn is always kept. Dropping turns older than
//! turn C deletes their records only: a path's state at the start of any
//! kept turn N >= C is its earliest record at or after N, which is still
//! there, so every kept rewind point stays exact. Blobs no kept record
//! refers to are then removed.
//!
//! Never collected: anything an unfinished restore needs (no turn at or
//! after its rewound-to turn is dropped while a restore is `running`).
//!
//! Order and durability: the records, turns and `blobs` rows are deleted in
//! one transaction; blob files are removed only after it commits. A crash
//! in between leaves unreferenced blob files (removed by the next gc),
//! never a record whose blob is gone. The caller must hold the state lock
//! (no daemon running), since a daemon writes a blob before the record
//! naming it.

use std::collections::BTreeSet;
use std::path::PathBuf;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use crate::record::Hash;
use crate::store::BlobStore;
use crate::store::StateDir;

/// Turns kept when no other number is given.
pub const DEFAULT_KEEP: u64 = 100;

/// What to keep.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Keep at least the newest this many turns (at least 1).
    pub keep: u64,
    /// Drop more old turns until referenced blobs take at most this many
    /// bytes (the open turn is kept whatever its size).
    pub max_bytes: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep: DEFAULT_KEEP,
            max_bytes: None,
        }
    }
}

/// Why gc failed. Nothing was deleted unless the message says so.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// The index could not be read or written.
    #[error("index {path}: {source}")]
    Index {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The capture log could not be moved into the index first.
    #[error(transparent)]
    Replay(#[from] crate::store::ReplayError),
}

/// What gc did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    /// Turns dropped: `[first, last]`, or `None`.
    pub dropped_turns: Option<(u64, u64)>,
    /// The oldest turn kept.
    pub oldest_kept: Option<u64>,
    /// Pre-image records deleted.
    pub records_deleted: u64,
    /// Blobs removed: files, and inline blobs deleted with their rows.
    pub blobs_removed: u64,
    /// Bytes of the blobs removed.
    pub bytes_freed: u64,
    /// True when nothing was changed.
    pub dry_run: bool,
    /// Why fewer turns were dropped than asked, if so.
    pub note: Option<String>,
}

/// The blobs that records and saved ranges of turns `>= ?1` name.
const KEPT_BLOBS: &str = "SELECT blob FROM preimages WHERE turn >= ?1 AND blob IS NOT NULL
     UNION SELECT blob FROM ranges WHERE turn >= ?1";

fn blob_bytes_from(conn: &Connection, from: i64) -> rusqlite::Result<u64> {
    conn.query_row(
        &format!("SELECT coalesce(sum(b.size), 0) FROM blobs b WHERE b.hash IN ({KEPT_BLOBS})"),
        [from],
        |r| r.get::<_, i64>(0),
    )
    .map(|v| v as u64)
}

/// Applies `retention` to the state dir. The caller holds the state lock.
pub fn gc(state: &StateDir, retention: Retention, dry_run: bool) -> Result<GcReport, GcError> {
    let db = state.index_path();
    // Records still in the capture log (a crash) name blobs and turns; they
    // go into the index first so the decisions below see them. A dry run
    // writes nothing, so it keeps every blob the log names instead.
    let mut logged = BTreeSet::new();
    // Opening the index upgrades an older schema in place.
    let mut index =
        crate::store::Index::open(&db, false).map_err(crate::store::ReplayError::from)?;
    if dry_run {
        let entries = crate::store::log::read(&state.capture_log_path())
            .map_err(crate::store::ReplayError::from)?;
        for e in entries {
            if let crate::record::PreImage::File { blob, .. } = e.pre {
                logged.insert(blob.to_vec());
            }
        }
    } else {
        crate::store::replay_capture_log(&mut index, &state.capture_log_path(), false)?;
    }
    drop(index);
    let err = |source| GcError::Index {
        path: db.clone(),
        source,
    };
    let mut conn = Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
        .map_err(err)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(err)?;
    let (first, last): (Option<i64>, Option<i64>) = conn
        .query_row("SELECT min(number), max(number) FROM turns", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .map_err(err)?;
    let (Some(first), Some(last)) = (first, last) else {
        return Ok(GcReport {
            dropped_turns: None,
            oldest_kept: None,
            records_deleted: 0,
            blobs_removed: 0,
            bytes_freed: 0,
            dry_run,
            note: None,
        });
    };
    let keep = retention.keep.max(1) as i64;
    let mut cut = (last - keep + 1).max(first);
    if let Some(budget) = retention.max_bytes {
        while cut < last && blob_bytes_from(&conn, cut).map_err(err)? > budget {
            cut += 1;
        }
    }
    let mut note = None;
    let pending: Option<(i64, i64)> = conn
        .query_row(
            "SELECT rewind_turn, rewound_to FROM restores WHERE state = 'running'
             ORDER BY rewound_to LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(err)?;
    if let Some((rewind_turn, to)) = pending {
        if cut > to {
            cut = to.max(first);
            note = Some(format!(
                "kept turns from {cut}: the unfinished rewind to turn {to} (recorded as turn {rewind_turn}) needs them"
            ));
        }
    }
    let records_deleted: i64 = conn
        .query_row(
            "SELECT count(*) FROM preimages WHERE turn < ?1",
            [cut],
            |r| r.get(0),
        )
        .map_err(err)?;
    let keep_blobs = |conn: &Connection| -> rusqlite::Result<BTreeSet<Vec<u8>>> {
        let mut stmt = conn.prepare(KEPT_BLOBS)?;
        let rows = stmt.query_map([cut], |r| r.get::<_, Vec<u8>>(0))?;
        rows.collect()
    };
    let kept = keep_blobs(&conn).map_err(err)?;
    // Inline blobs (small files) go with their rows.
    let (inline_removed, inline_bytes): (i64, i64) = conn
        .query_row(
            &format!(
                "SELECT count(*), coalesce(sum(size), 0) FROM blobs
                 WHERE data IS NOT NULL AND hash NOT IN ({KEPT_BLOBS})"
            ),
            [cut],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(err)?;
    if !dry_run && cut > first {
        let tx = conn.transaction().map_err(err)?;
        tx.execute("DELETE FROM preimages WHERE turn < ?1", params![cut])
            .map_err(err)?;
        tx.execute("DELETE FROM ranges WHERE turn < ?1", params![cut])
            .map_err(err)?;
        tx.execute("DELETE FROM turns WHERE number < ?1", params![cut])
            .map_err(err)?;
        tx.execute(
            "DELETE FROM restores WHERE rewind_turn < ?1 AND state = 'done'",
            params![cut],
        )
        .map_err(err)?;
        tx.execute(
            &format!("DELETE FROM blobs WHERE hash NOT IN ({KEPT_BLOBS})"),
            [cut],
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
    }
    // Blob files no kept record names (including leftovers of earlier runs
    // and of failed captures).
    let store = BlobStore::open_existing(&state.blobs_dir());
    let mut blobs_removed = inline_removed as u64;
    let mut bytes_freed = inline_bytes as u64;
    if let Ok(dirs) = std::fs::read_dir(state.blobs_dir()) {
        for d in dirs.flatten() {
            let dname = d.file_name().to_string_lossy().into_owned();
            if dname.len() != 2 {
                continue;
            }
            let Ok(files) = std::fs::read_dir(d.path()) else {
                continue;
            };
            for f in files.flatten() {
                let full = format!("{dname}{}", f.file_name().to_string_lossy());
                let Ok(h) = blake3::Hash::from_hex(&full) else {
                    continue; // not a blob: verify reports it, gc leaves it
                };
                let hash: Hash = *h.as_bytes();
                if kept.contains(&hash[..]) || logged.contains(&hash[..]) {
                    continue;
                }
                let path = store.path_of(&hash);
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                if dry_run || std::fs::remove_file(&path).is_ok() {
                    blobs_removed += 1;
                    bytes_freed += len;
                }
            }
        }
    }
    if !dry_run {
        store.clear_tmp();
    }
    Ok(GcReport {
        dropped_turns: (cut > first).then_some((first as u64, cut as u64 - 1)),
        oldest_kept: Some(cut as u64),
        records_deleted: records_deleted as u64,
        blobs_removed,
        bytes_freed,
        dry_run,
        note,
    })
}
