//! `opfs verify`: checks a project's store against its index.
//!
//! Reads only: the index is opened read-only (so it can run next to a
//! daemon, WAL readers do not block the writer) and every blob a record
//! refers to is read and hashed once. Each problem found is reported on its
//! own; nothing is repaired.
//!
//! What is checked:
//! - the SQLite file itself (`PRAGMA quick_check`) and its schema version;
//! - turns: numbers contiguous from the oldest kept turn to the newest,
//!   exactly one open turn and it is the newest, known kinds, end not
//!   before start, a rewind turn names an earlier existing-or-dropped turn;
//! - records: a turn that exists, a valid project-relative path (design §3),
//!   a known kind with the columns that kind needs;
//! - blobs: every referenced blob present, hashing to its name, of the
//!   size the record says, and listed in the `blobs` table;
//! - restores: none left `running` (an interrupted rewind the next daemon
//!   start would finish);
//! - the blob directory: files whose names are not blob names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde::Serialize;

use crate::paths;
use crate::record::{hex, Hash, TurnKind};
use crate::store::index::SCHEMA_VERSION;
use crate::store::StateDir;
use crate::store::{BlobError, BlobStore};

/// A failure that stops verification before it can check anything.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// There is no index for this project.
    #[error("index {0} does not exist: nothing has been recorded for this project")]
    NoIndex(PathBuf),
    /// The index file is empty (0 bytes): no table, no history.
    #[error(
        "index {0} is empty (0 bytes): it holds no history. If this project had one, the file \
         was truncated or replaced: restore it from a backup; if not, remove the file (the next \
         mount starts a new history)"
    )]
    EmptyIndex(PathBuf),
    /// The index cannot be opened or read at all (not a database, damaged
    /// header, permission).
    #[error("index {path}: {source}")]
    Index {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
}

/// One problem found.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Problem {
    /// The area: `index`, `turn`, `record`, `blob`, `restore`, `store`.
    pub area: &'static str,
    /// What is wrong, naming the turn, path, blob or file.
    pub message: String,
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// The state dir checked.
    pub state_dir: PathBuf,
    /// Turns in the index.
    pub turns: u64,
    /// Pre-image records in the index.
    pub records: u64,
    /// Distinct blobs referenced and checked.
    pub blobs: u64,
    /// Blob files no record refers to (not a problem: `opfs gc` removes them).
    pub unreferenced_blobs: u64,
    /// Everything found wrong; empty when the store is consistent.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    /// True when no problem was found.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The problems found so far, in the order the checks run.
struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn add(&mut self, area: &'static str, message: String) {
        self.problems.push(Problem { area, message });
    }
}

/// The index opened read-only, with its file name for errors.
struct Db<'a> {
    conn: Connection,
    path: &'a Path,
}

impl Db<'_> {
    fn err(&self) -> impl Fn(rusqlite::Error) -> VerifyError + '_ {
        move |source| VerifyError::Index {
            path: self.path.to_path_buf(),
            source,
        }
    }

    /// Every row of `sql` (no parameters), read by `f`.
    fn rows<T>(
        &self,
        sql: &str,
        f: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, VerifyError> {
        let mut stmt = self.conn.prepare(sql).map_err(self.err())?;
        let rows = stmt.query_map([], f).map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// True when `table` has `column` (older schema versions lack some).
    fn has_column(&self, table: &str, column: &str) -> Result<bool, VerifyError> {
        self.conn
            .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")
            .and_then(|mut s| s.exists([table, column]))
            .map_err(self.err())
    }
}

/// One `ranges` row as stored: turn, path, offset, length, blob, offset
/// in the turn's range pack.
type RawPiece = (i64, Vec<u8>, i64, i64, Vec<u8>, Option<i64>);

/// One `turns` row as stored: number, kind, started, ended, rewound to.
type TurnRow = (i64, String, i64, Option<i64>, Option<i64>);

/// One `preimages` row as stored.
struct RawRecord {
    turn: i64,
    path: Vec<u8>,
    kind: i64,
    perm: Option<i64>,
    blob: Option<Vec<u8>>,
    size: Option<i64>,
    target: Option<Vec<u8>>,
}

/// The blobs records and saved ranges refer to: hash -> (the size the
/// records say, -1 when a record's size is bad; the first turn and path
/// naming it).
type Wanted = BTreeMap<Hash, (i64, String)>;

/// Checks the store of `state` against its index. Reads only.
///
/// Returns the report (problems listed in it); `Err` only when the index
/// cannot be opened or queried at all.
pub fn verify(state: &StateDir) -> Result<VerifyReport, VerifyError> {
    verify_with_progress(state, &mut |_, _| {})
}

/// [`verify`], calling `progress(done, total)` as the blobs are checked
/// (the part that reads every byte): `total` is the number of blobs the
/// records use, `done` how many are checked so far (from 0 to `total`).
/// The library never prints; the CLI draws a progress bar with it.
///
/// Errors: as [`verify`].
pub fn verify_with_progress(
    state: &StateDir,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<VerifyReport, VerifyError> {
    let path = state.index_path();
    match std::fs::metadata(&path) {
        Err(_) => return Err(VerifyError::NoIndex(path)),
        Ok(m) if m.len() == 0 => return Err(VerifyError::EmptyIndex(path)),
        Ok(_) => {}
    }
    let err = |source| VerifyError::Index {
        path: path.clone(),
        source,
    };
    let conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(err)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(err)?;
    let db = Db { conn, path: &path };
    let mut c = Checker {
        problems: Vec::new(),
    };
    check_file(&db, &mut c)?;
    let turns = check_turns(&db, &mut c)?;
    let numbers: BTreeSet<i64> = turns.iter().map(|t| t.0).collect();
    let mut wanted = Wanted::new();
    let records = check_records(&db, &numbers, &mut wanted, &mut c)?;
    check_outside_edits(&db, &numbers, &mut wanted, &mut c)?;
    check_ranges(&db, state, &numbers, &mut wanted, &mut c)?;
    check_blobs(&db, state, &wanted, &mut c, progress)?;
    let unreferenced = check_blob_dir(state, &wanted, &mut c);
    check_log(state, &mut c);
    check_restores(&db, &mut c)?;
    Ok(VerifyReport {
        state_dir: state.dir.clone(),
        turns: turns.len() as u64,
        records,
        blobs: wanted.len() as u64,
        unreferenced_blobs: unreferenced,
        problems: c.problems,
    })
}

/// The SQLite file itself (`quick_check` reads every page once) and its
/// schema version.
fn check_file(db: &Db<'_>, c: &mut Checker) -> Result<(), VerifyError> {
    let where_ = db.path.display().to_string();
    let lines = db.rows("PRAGMA quick_check", |r| r.get::<_, String>(0))?;
    if lines != ["ok"] {
        for l in lines.iter().take(20) {
            c.add("index", format!("{where_}: {l}"));
        }
    }
    let version: Option<String> = db
        .conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(db.err())?;
    // Versions 1 to 3 are upgraded in place by the next mount.
    if version.as_deref() != Some(&SCHEMA_VERSION.to_string())
        && !matches!(version.as_deref(), Some("1" | "2" | "3"))
    {
        c.add(
            "index",
            format!(
                "{where_}: schema_version is {version:?}; this opfs reads version {SCHEMA_VERSION}"
            ),
        );
    }
    Ok(())
}

/// Turns: numbers contiguous, one open turn and it is the newest, known
/// kinds, times in order, a rewind turn naming an earlier turn. Returns
/// the rows, oldest first.
fn check_turns(db: &Db<'_>, c: &mut Checker) -> Result<Vec<TurnRow>, VerifyError> {
    let turns: Vec<TurnRow> = db.rows(
        "SELECT number, kind, started_at, ended_at, rewound_to FROM turns ORDER BY number",
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )?;
    if turns.is_empty() {
        c.add("turn", "the index holds no turn".into());
    }
    let first = turns.first().map(|t| t.0).unwrap_or(1);
    let last = turns.last().map(|t| t.0).unwrap_or(0);
    if first < 1 {
        c.add("turn", format!("turn {first}: turn numbers start at 1"));
    }
    for (i, (n, kind, started, ended, rewound_to)) in turns.iter().enumerate() {
        if i > 0 && turns[i - 1].0 + 1 != *n {
            c.add(
                "turn",
                format!(
                    "turns {} to {} are missing (only the oldest turns may be dropped)",
                    turns[i - 1].0 + 1,
                    n - 1
                ),
            );
        }
        if TurnKind::parse(kind).is_none() {
            c.add("turn", format!("turn {n}: unknown kind {kind:?}"));
        }
        match ended {
            None if *n != last => c.add(
                "turn",
                format!("turn {n} is open but turn {last} is newer (only the newest may be open)"),
            ),
            Some(e) if e < started => c.add("turn", format!("turn {n} ends before it starts")),
            _ => {}
        }
        if i > 0 && *started < turns[i - 1].2 {
            c.add(
                "turn",
                format!("turn {n} starts before turn {}", turns[i - 1].0),
            );
        }
        match (TurnKind::parse(kind), rewound_to) {
            (Some(TurnKind::Rewind), None) => c.add(
                "turn",
                format!("rewind turn {n} does not say which turn it restored"),
            ),
            (Some(TurnKind::Rewind), Some(t)) if *t < 1 || *t > *n => c.add(
                "turn",
                format!("rewind turn {n} restored turn {t}, which is not an earlier turn"),
            ),
            _ => {}
        }
    }
    if let Some(t) = turns.last() {
        if t.3.is_some() {
            c.add(
                "turn",
                format!("no turn is open (the newest, {}, has ended)", t.0),
            );
        }
    }
    Ok(turns)
}

/// Records: an existing turn (`numbers`), a valid project-relative path
/// (design §3), a known kind with the columns it needs. Adds the blobs
/// file records name to `wanted`; returns the number of records.
fn check_records(
    db: &Db<'_>,
    numbers: &BTreeSet<i64>,
    wanted: &mut Wanted,
    c: &mut Checker,
) -> Result<u64, VerifyError> {
    check_rows(
        db,
        "SELECT turn, path, kind, perm, blob, size, target FROM preimages ORDER BY turn, path",
        numbers,
        wanted,
        c,
    )
}

/// Edits made behind the mount and kept (`outside_edits`, version 7):
/// checked as records are, their blobs added to `wanted`.
fn check_outside_edits(
    db: &Db<'_>,
    numbers: &BTreeSet<i64>,
    wanted: &mut Wanted,
    c: &mut Checker,
) -> Result<(), VerifyError> {
    if !db.has_column("outside_edits", "seq")? {
        return Ok(());
    }
    check_rows(
        db,
        "SELECT turn, path, kind, perm, blob, size, target FROM outside_edits
         ORDER BY turn, path, seq",
        numbers,
        wanted,
        c,
    )
    .map(|_| ())
}

/// Checks each row `sql` selects (turn, path, kind, perm, blob, size,
/// target) as a record; returns how many there were.
fn check_rows(
    db: &Db<'_>,
    sql: &str,
    numbers: &BTreeSet<i64>,
    wanted: &mut Wanted,
    c: &mut Checker,
) -> Result<u64, VerifyError> {
    let rows: Vec<RawRecord> = db.rows(sql, |r| {
        Ok(RawRecord {
            turn: r.get(0)?,
            path: r.get(1)?,
            kind: r.get(2)?,
            perm: r.get(3)?,
            blob: r.get(4)?,
            size: r.get(5)?,
            target: r.get(6)?,
        })
    })?;
    for r in &rows {
        check_record(r, numbers, wanted, c);
    }
    Ok(rows.len() as u64)
}

/// One record (see [`check_records`]).
fn check_record(r: &RawRecord, numbers: &BTreeSet<i64>, wanted: &mut Wanted, c: &mut Checker) {
    let shown = paths::display(&r.path);
    let at = format!("turn {} path {shown:?}", r.turn);
    if !numbers.contains(&r.turn) {
        c.add("record", format!("{at}: the turn does not exist"));
    }
    if let Err(what) = paths::validate(&r.path) {
        c.add("record", format!("{at}: invalid path ({what})"));
    } else if r.path.is_empty() {
        c.add("record", format!("{at}: names the project root"));
    } else if paths::is_excluded(&r.path) {
        c.add("record", format!("{at}: .git is never recorded"));
    }
    let perm_ok = matches!(r.perm, Some(p) if (0..=0o7777).contains(&p));
    let bad_perm = |c: &mut Checker| {
        if !perm_ok {
            c.add("record", format!("{at}: bad permission bits {:?}", r.perm));
        }
    };
    match r.kind {
        // Absent, and unknown (version 4): no columns needed.
        0 | 10 => {}
        1 => {
            bad_perm(c);
            let size = match r.size {
                Some(s) if s >= 0 => s,
                other => {
                    c.add("record", format!("{at}: file record with size {other:?}"));
                    -1
                }
            };
            match r.blob.as_deref().map(<Hash>::try_from) {
                Some(Ok(h)) => {
                    let e = wanted.entry(h).or_insert((size, at.clone()));
                    if e.0 != size && size >= 0 && e.0 >= 0 {
                        c.add(
                            "record",
                            format!(
                                "{at}: blob {} has size {size} here but {} at {}",
                                hex(&h),
                                e.0,
                                e.1
                            ),
                        );
                    }
                }
                _ => c.add(
                    "record",
                    format!("{at}: file record without a 32-byte blob hash"),
                ),
            }
        }
        2 | 4..=7 => bad_perm(c),
        8 => {
            bad_perm(c);
            if !matches!(r.size, Some(s) if s >= 0) {
                c.add(
                    "record",
                    format!("{at}: ranged file record with size {:?}", r.size),
                );
            }
        }
        3 => {
            if r.target.as_ref().is_none_or(|t| t.is_empty()) {
                c.add("record", format!("{at}: symlink record without a target"));
            }
        }
        k => c.add("record", format!("{at}: unknown pre-image kind {k}")),
    }
}

/// Saved ranges of ranged records (version 3): an existing turn, a sane
/// offset and length, a 32-byte blob hash (added to `wanted`), or for a
/// piece kept in a range pack (version 6), bytes in the turn's pack that
/// hash to it.
fn check_ranges(
    db: &Db<'_>,
    state: &StateDir,
    numbers: &BTreeSet<i64>,
    wanted: &mut Wanted,
    c: &mut Checker,
) -> Result<(), VerifyError> {
    if !db.has_column("ranges", "offset")? {
        return Ok(());
    }
    let sql = if db.has_column("ranges", "pack")? {
        "SELECT turn, path, offset, len, blob, pack FROM ranges ORDER BY turn, path, offset"
    } else {
        "SELECT turn, path, offset, len, blob, NULL FROM ranges ORDER BY turn, path, offset"
    };
    let pieces: Vec<RawPiece> = db.rows(sql, |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        ))
    })?;
    let store = BlobStore::open_existing(&state.blobs_dir());
    for (turn, path, offset, len, blob, pack) in pieces {
        let at = format!(
            "turn {turn} path {:?} saved range at byte {offset}",
            paths::display(&path)
        );
        if !numbers.contains(&turn) {
            c.add("record", format!("{at}: the turn does not exist"));
        }
        if offset < 0 || len <= 0 {
            c.add("record", format!("{at}: bad offset or length {len}"));
        }
        match (<Hash>::try_from(blob.as_slice()), pack) {
            (Ok(h), None) => {
                wanted.entry(h).or_insert((len, at));
            }
            (Ok(h), Some(p)) => match (u64::try_from(turn), u64::try_from(p), u64::try_from(len)) {
                (Ok(t), Ok(p), Ok(n)) if n > 0 => {
                    if let Err(e) = store.read_packed(t, p, n, &h) {
                        c.add("blob", format!("{e} (used by {at})"));
                    }
                }
                _ => c.add("record", format!("{at}: bad range pack offset {p}")),
            },
            (Err(_), _) => c.add("record", format!("{at}: blob hash is not 32 bytes")),
        }
    }
    Ok(())
}

/// Every wanted blob: listed in the `blobs` table with the records' size,
/// present (inline or as a file), hashing to its name, of that size.
fn check_blobs(
    db: &Db<'_>,
    state: &StateDir,
    wanted: &Wanted,
    c: &mut Checker,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), VerifyError> {
    let total = wanted.len() as u64;
    progress(0, total);
    let listed: BTreeMap<Vec<u8>, i64> = db
        .rows("SELECT hash, size FROM blobs", |r| {
            Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?))
        })?
        .into_iter()
        .collect();
    let store = BlobStore::open_existing(&state.blobs_dir());
    let has_inline = db.has_column("blobs", "data")?;
    let inline = |hash: &[u8]| -> rusqlite::Result<Option<Vec<u8>>> {
        if !has_inline {
            return Ok(None);
        }
        db.conn
            .prepare_cached("SELECT data FROM blobs WHERE hash = ?1 AND data IS NOT NULL")?
            .query_row([hash], |r| r.get(0))
            .optional()
    };
    for (done, (hash, (size, at))) in wanted.iter().enumerate() {
        progress(done as u64, total);
        let name = hex(hash);
        match listed.get(&hash[..]) {
            None => c.add(
                "blob",
                format!("blob {name} (used by {at}) is not in the blobs table"),
            ),
            Some(s) if *size >= 0 && s != size => c.add(
                "blob",
                format!("blob {name} (used by {at}) has size {s} in the blobs table, {size} in the record"),
            ),
            _ => {}
        }
        let checked = match inline(&hash[..]).map_err(db.err())? {
            Some(data) => {
                let actual = *blake3::hash(&data).as_bytes();
                if &actual == hash {
                    Ok(data.len() as u64)
                } else {
                    Err(BlobError::Corrupt {
                        hash: hex(hash),
                        actual: hex(&actual),
                    })
                }
            }
            None => store.verify(hash),
        };
        match checked {
            Ok(n) if u64::try_from(*size).is_ok_and(|s| n != s) => c.add(
                "blob",
                format!("blob {name} (used by {at}) holds {n} bytes, the record says {size}"),
            ),
            Ok(_) => {}
            Err(e) => c.add("blob", format!("{e} (used by {at})")),
        }
    }
    progress(total, total);
    Ok(())
}

/// The blob directory: entries that are not blob directories or not named
/// like blobs. Returns the number of blob files nothing wants (not a
/// problem: `opfs gc` removes them).
fn check_blob_dir(state: &StateDir, wanted: &Wanted, c: &mut Checker) -> u64 {
    let mut unreferenced = 0u64;
    let blobs_dir = state.blobs_dir();
    let Ok(dirs) = std::fs::read_dir(&blobs_dir) else {
        if !wanted.is_empty() {
            c.add(
                "store",
                format!("blob directory {} cannot be read", blobs_dir.display()),
            );
        }
        return 0;
    };
    let is_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    for d in dirs.flatten() {
        let dname = d.file_name();
        let dname = dname.to_string_lossy();
        if dname == crate::store::blob::TMP_DIR {
            continue;
        }
        if dname == crate::store::blob::PACKS_DIR && d.path().is_dir() {
            // Range packs: one per turn, named by its number (their bytes
            // are checked with the saved ranges).
            for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                let name = f.file_name();
                if name.to_str().and_then(|n| n.parse::<u64>().ok()).is_none() {
                    c.add(
                        "store",
                        format!("{} is not named like a range pack", f.path().display()),
                    );
                }
            }
            continue;
        }
        if dname.len() != 2 || !is_hex(&dname) || !d.path().is_dir() {
            c.add(
                "store",
                format!("{} is not a blob directory", d.path().display()),
            );
            continue;
        }
        let Ok(files) = std::fs::read_dir(d.path()) else {
            c.add("store", format!("cannot list {}", d.path().display()));
            continue;
        };
        for f in files.flatten() {
            let fname = f.file_name();
            let fname = fname.to_string_lossy();
            let full = format!("{dname}{fname}");
            let parsed = (fname.len() == 62 && is_hex(&fname))
                .then(|| blake3::Hash::from_hex(&full).ok())
                .flatten();
            match parsed {
                None => c.add(
                    "store",
                    format!("{} is not named like a blob", f.path().display()),
                ),
                Some(h) if !wanted.contains_key(h.as_bytes()) => unreferenced += 1,
                Some(_) => {}
            }
        }
    }
    unreferenced
}

/// The capture log: records not yet moved into the index (the next mount
/// or rewind moves them) are fine; a damaged log is a problem.
fn check_log(state: &StateDir, c: &mut Checker) {
    if let Err(e) = crate::store::log::read(&state.capture_log_path()) {
        c.add("log", e.to_string());
    }
}

/// Restores: none left `running` (an interrupted rewind the next daemon
/// start would finish).
fn check_restores(db: &Db<'_>, c: &mut Checker) -> Result<(), VerifyError> {
    let outcome = if db.has_column("restores", "outcome")? {
        "outcome"
    } else {
        "NULL"
    };
    let running: Vec<(i64, i64, String, Option<String>)> = db.rows(
        &format!(
            "SELECT rewind_turn, rewound_to, state, {outcome} FROM restores WHERE state != 'done'"
        ),
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    for (turn, to, st, outcome) in running {
        c.add(
            "restore",
            if outcome.as_deref() == Some("stopped") {
                format!(
                    "the rewind to turn {to} (recorded as turn {turn}) stopped on a failure and \
                     left the project half restored: `opfs rewind --resume` finishes it, \
                     `opfs rewind --abort` puts back what it changed"
                )
            } else {
                format!(
                    "the rewind to turn {to} (recorded as turn {turn}) is {st:?}, not finished: the next mount finishes it"
                )
            },
        );
    }
    Ok(())
}
