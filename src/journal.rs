//! The journal: turns and capture.
//!
//! [`Journal`] implements the FUSE layer's [`MutationHook`]: before any
//! mutation reaches the project it records the pre-image of every path the
//! mutation can change, once per turn per path (design §2.1–2.2). A record is
//! a *path state* (see `docs/design.md`): "path P, when turn T began, was X".
//! The first record of a path in a turn wins; later mutations of the same
//! path in the same turn cost one hash-set lookup.
//!
//! Capture order: a large file's blob is written and renamed into place,
//! then the record (with a small file's bytes inline) is appended to the
//! capture log (`store::log`), then the hook returns and the mutation
//! runs. A crash at any point leaves either no record (and no mutation) or
//! a record of the true pre-image. Records move from the log into the index
//! in groups ("group commit"): when [`GROUP_MAX`] records or
//! [`GROUP_MAX_BYTES`] bytes are pending, before anything reads the index
//! through the journal, at every turn switch, and when the daemon's timer
//! calls [`Journal::apply_pending`].

use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use opfs_fs::{Errno, Mutation, MutationHook};

use crate::backing::Backing;
use crate::paths;
use crate::record::Fingerprint;
use crate::record::Stat;
use crate::record::{PreImage, Special};
use crate::state::StateDir;
use crate::store::log::Op;
use crate::store::{
    BlobError, BlobStore, CaptureLog, Entry, Index, IndexError, LogError, ReplayError, TurnKind,
    INLINE_MAX,
};

/// Pending records that trigger a group commit on the capturing thread.
pub const GROUP_MAX: usize = 4096;
/// Pending inline bytes that trigger a group commit.
pub const GROUP_MAX_BYTES: usize = 8 << 20;
/// With this many records pending and the index refusing them, captures
/// fail (the log would otherwise grow without bound).
const PENDING_HARD_MAX: usize = 1 << 20;
/// Files of at least this many bytes (and one link) are captured as ranges
/// when written in place, unless the daemon is told otherwise
/// (`OPFS_RANGE_MIN`). See `docs/ranges.md`.
pub const DEFAULT_RANGE_MIN: u64 = 1 << 20;
/// A saved range is stored in pieces of at most this many bytes, so
/// putting a file back together never holds more than one piece in memory.
const PIECE_MAX: u64 = 4 << 20;

/// What the open turn knows of a file it captures as ranges.
struct RangeState {
    /// The file, opened at its first capture (`None` after a restart until
    /// the next write needs it).
    file: Option<std::fs::File>,
    /// Its length when the turn began.
    size: u64,
    /// Byte ranges below `size` whose turn-start bytes are saved.
    covered: crate::view::ranges::Intervals,
}

/// A failure to record a pre-image. The mutation it guarded must not run.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Reading the path's current state from the project failed.
    #[error("cannot read {path} in the project: {source}")]
    Read {
        /// The path, rendered.
        path: String,
        /// The cause.
        source: io::Error,
    },
    /// Storing its content failed.
    #[error("cannot store the pre-image of {path}: {source}")]
    Blob {
        /// The path, rendered.
        path: String,
        /// The cause.
        source: BlobError,
    },
    /// Appending the record to the capture log failed.
    #[error("cannot record the pre-image of {path}: {source}")]
    Log {
        /// The path, rendered.
        path: String,
        /// The cause.
        source: LogError,
    },
    /// Writing the record failed.
    #[error("cannot record the pre-image of {path}: {source}")]
    Index {
        /// The path, rendered.
        path: String,
        /// The cause.
        source: IndexError,
    },
}

impl CaptureError {
    /// The errno the guarded FUSE operation fails with: `ENOSPC` when the
    /// store is full, `EAGAIN` when the index is busy, `EIO` otherwise.
    pub fn errno(&self) -> Errno {
        match self {
            CaptureError::Read { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            CaptureError::Blob { source, .. } => source.errno(),
            CaptureError::Log { source, .. } => source.errno(),
            CaptureError::Index { source, .. } => source.errno(),
        }
    }
}

/// Errors opening a journal.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The project directory cannot be opened.
    #[error("cannot open project {path}: {source}")]
    Project {
        /// The project path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The state dir cannot be created.
    #[error("cannot create state dir {path}: {source}")]
    State {
        /// The state dir.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The blob store cannot be opened.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// The index cannot be opened or read.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The capture log cannot be read, replayed or opened.
    #[error(transparent)]
    Log(#[from] LogError),
}

struct Inner {
    index: Index,
    /// Records appended to `log` and not yet committed to `index`, in log
    /// order.
    log: CaptureLog,
    pending: Vec<Entry>,
    pending_bytes: usize,
    turn: u64,
    captured: HashSet<Vec<u8>>,
    /// Files with several hard links whose content was recorded in the open
    /// turn, by backing `(dev, ino)`: another name of the same inode
    /// recorded later in the turn (after a write through the first name)
    /// gets this turn-start content, not the bytes written since.
    linked: HashMap<(u64, u64), (crate::record::Hash, u64)>,
    /// Files captured as ranges in the open turn (a `Ranged` record is
    /// their pre-image; `captured` does not hold them).
    ranged: HashMap<Vec<u8>, RangeState>,
    /// Fingerprints not yet written to the index. `None`: the mount is in
    /// the middle of changing the path (a write handle is open), so there is
    /// nothing to compare against.
    fingerprints: HashMap<Vec<u8>, Option<Fingerprint>>,
    /// `(number, started_at)` of every turn, oldest first: which turn was
    /// open when an inode was born (see [`Journal::note_birth`]).
    starts: Vec<(u64, i64)>,
    /// Paths recorded in the closed turns since this process opened the
    /// journal, with the newest such turn: answers most of
    /// [`Journal::note_birth`]'s questions without a query. Emptied when it
    /// holds [`RECENT_MAX`] paths.
    recent: HashMap<Vec<u8>, u64>,
}

/// Most paths [`Inner::recent`] holds (about 100 MiB of paths at worst).
const RECENT_MAX: usize = 1 << 20;

/// Turns and capture for one project.
pub struct Journal {
    backing: Backing,
    blobs: BlobStore,
    state: StateDir,
    inner: Mutex<Inner>,
    epoch: AtomicU64,
    range_min: u64,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("project", &self.state.project)
            .field("turn", &self.epoch.load(Ordering::Relaxed))
            .finish()
    }
}

fn index_as_blob_error(e: IndexError) -> BlobError {
    BlobError::Io {
        path: e.path().to_path_buf(),
        source: io::Error::other(e.to_string()),
    }
}

/// Reads the state of `path` in the project without storing anything:
/// `Ok(None)` for absent, else the stat.
fn stat_of(backing: &Backing, path: &[u8]) -> Result<Option<Stat>, CaptureError> {
    backing.lstat(path).map_err(|source| CaptureError::Read {
        path: paths::display(path),
        source,
    })
}

impl Journal {
    /// Opens the journal of the project at canonical path `project`, whose
    /// state lives in `state`. Creates the state dir, index and blob store on
    /// first use and makes sure a turn is open: turn 1 on first use, else the
    /// newest turn (a later mount continues the numbering).
    ///
    /// `sync` makes blobs and index commits durable across power loss.
    pub fn open(state: &StateDir, sync: bool) -> Result<Journal, OpenError> {
        let backing = Backing::open(&state.project).map_err(|source| OpenError::Project {
            path: state.project.clone(),
            source,
        })?;
        state.create().map_err(|source| OpenError::State {
            path: state.dir.clone(),
            source,
        })?;
        let blobs = BlobStore::open(&state.blobs_dir(), sync)?;
        blobs.clear_tmp();
        let mut index = Index::open(&state.index_path(), sync)?;
        // Records a crash left in the capture log go into the index before
        // anything reads it; applying one twice changes nothing.
        let capture_log =
            crate::store::replay_capture_log(&mut index, &state.capture_log_path(), sync).map_err(
                |e| match e {
                    ReplayError::Log(e) => OpenError::Log(e),
                    ReplayError::Index(e) => OpenError::Index(e),
                },
            )?;
        let turn = match index.last_turn()? {
            Some(t) => t.number,
            None => index.next_turn(None, TurnKind::Agent, None, None, None)?,
        };
        let mut starts: Vec<(u64, i64)> = index
            .turns(None)?
            .into_iter()
            .map(|t| (t.number, t.started_at))
            .collect();
        starts.reverse();
        // What the open turn recorded before a restart: those records are
        // its pre-images already (a second capture would be ignored), and a
        // ranged file goes on saving ranges where it left off.
        let mut captured = HashSet::new();
        let mut ranged = HashMap::new();
        for (path, pre) in index.records_of_turn(turn)? {
            match pre {
                PreImage::Ranged { size, .. } => {
                    let mut covered = crate::view::ranges::Intervals::new();
                    for p in index.ranges_of(turn, &path)? {
                        covered.insert(p.offset, p.offset.saturating_add(p.len));
                    }
                    ranged.insert(
                        path,
                        RangeState {
                            file: None,
                            size,
                            covered,
                        },
                    );
                }
                _ => {
                    captured.insert(path);
                }
            }
        }
        Ok(Journal {
            backing,
            blobs,
            state: state.clone(),
            inner: Mutex::new(Inner {
                index,
                log: capture_log,
                pending: Vec::new(),
                pending_bytes: 0,
                turn,
                captured,
                linked: HashMap::new(),
                ranged,
                fingerprints: HashMap::new(),
                starts,
                recent: HashMap::new(),
            }),
            epoch: AtomicU64::new(turn),
            range_min: DEFAULT_RANGE_MIN,
        })
    }

    /// Sets the size (bytes) from which a file written in place is
    /// captured as ranges instead of whole ([`DEFAULT_RANGE_MIN`] unless
    /// set; `u64::MAX`: never).
    pub fn set_range_min(&mut self, bytes: u64) {
        self.range_min = bytes;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave `Inner` inconsistent in
        // a way that matters (the set only avoids duplicate work), so a
        // poisoned lock is taken over.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The project directory.
    pub fn project(&self) -> &Path {
        &self.state.project
    }

    /// The state dir.
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// Confined access to the project.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// The blob store.
    pub fn blobs(&self) -> &BlobStore {
        &self.blobs
    }

    /// Checks that blob `hash` is stored (inline or as a file) and hashes
    /// to its name; returns its length. Errors as [`crate::store::verify_blob`].
    pub fn verify_blob(&self, hash: &crate::record::Hash) -> Result<u64, BlobError> {
        let mut inner = self.lock();
        Self::apply_locked(&mut inner).map_err(index_as_blob_error)?;
        crate::store::verify_blob(&inner.index, &self.blobs, hash)
    }

    /// The content of blob `hash` when it is stored inline (checked), else
    /// `None` (read the blob file). Errors as [`crate::store::read_blob`].
    pub fn inline_blob(&self, hash: &crate::record::Hash) -> Result<Option<Vec<u8>>, BlobError> {
        let mut inner = self.lock();
        Self::apply_locked(&mut inner).map_err(index_as_blob_error)?;
        match inner.index.inline_blob(hash).map_err(index_as_blob_error)? {
            Some(_) => crate::store::read_blob(&inner.index, &self.blobs, hash).map(Some),
            None => Ok(None),
        }
    }

    /// The open turn's number.
    pub fn open_turn(&self) -> u64 {
        self.lock().turn
    }

    /// Runs `f` with the index (under the journal's lock), after committing
    /// the pending records so `f` sees every capture so far.
    ///
    /// Errors: committing the pending records failed (they stay pending
    /// and in the log), or `f`'s own.
    pub fn with_index<R>(
        &self,
        f: impl FnOnce(&mut Index) -> Result<R, IndexError>,
    ) -> Result<R, IndexError> {
        let mut inner = self.lock();
        Self::apply_locked(&mut inner)?;
        f(&mut inner.index)
    }

    /// Commits the records pending in the capture log to the index in one
    /// transaction (a group commit), then empties the log. The daemon calls
    /// this on a timer so other processes reading the index (history,
    /// export) see captures within a fraction of a second.
    ///
    /// Errors: the index refused the transaction; the records stay pending
    /// and in the log, and the next call retries.
    pub fn apply_pending(&self) -> Result<(), IndexError> {
        Self::apply_locked(&mut self.lock())
    }

    fn apply_locked(inner: &mut Inner) -> Result<(), IndexError> {
        if inner.pending.is_empty() {
            return Ok(());
        }
        inner.index.apply(&inner.pending)?;
        inner.pending.clear();
        inner.pending_bytes = 0;
        // If the truncation fails the log keeps records the index already
        // holds; replaying them changes nothing. The next group retries.
        if let Err(e) = inner.log.truncate() {
            log::warn!("{e}");
        }
        Ok(())
    }

    /// Appends `entry` to the capture log (durable when this returns) and
    /// queues it for the next group commit.
    fn append(&self, inner: &mut Inner, entry: Entry) -> Result<(), CaptureError> {
        let path_err = |e: &Entry| paths::display(&e.path);
        if inner.pending.len() >= PENDING_HARD_MAX {
            Self::apply_locked(inner).map_err(|source| CaptureError::Index {
                path: path_err(&entry),
                source,
            })?;
        }
        inner
            .log
            .append(&entry)
            .map_err(|source| CaptureError::Log {
                path: path_err(&entry),
                source,
            })?;
        inner.pending_bytes += entry.path.len() + entry.data.as_ref().map_or(0, Vec::len);
        inner.pending.push(entry);
        if inner.pending.len() >= GROUP_MAX || inner.pending_bytes >= GROUP_MAX_BYTES {
            // The records are durable in the log; a failed commit only
            // leaves them pending.
            if let Err(e) = Self::apply_locked(inner) {
                log::warn!("group commit deferred: {e}");
            }
        }
        Ok(())
    }

    /// Closes the open turn and opens the next one of `kind`. The caller must
    /// hold the mount's quiesce guard (no mutation in flight), so every
    /// mutation falls wholly in one turn.
    ///
    /// Returns the new turn's number. After `Ok` the switch is committed;
    /// after `Err` the old turn stays open.
    pub fn next_turn(
        &self,
        kind: TurnKind,
        label: Option<&str>,
        external_id: Option<&str>,
        rewound_to: Option<u64>,
    ) -> Result<u64, IndexError> {
        let mut inner = self.lock();
        Self::flush_locked(&mut inner)?;
        let open = inner.turn;
        let n = inner
            .index
            .next_turn(Some(open), kind, label, external_id, rewound_to)?;
        let started = inner
            .index
            .turn(n)?
            .map(|t| t.started_at)
            .unwrap_or_else(crate::store::index::now_ns);
        inner.starts.push((n, started));
        if inner.recent.len() + inner.captured.len() > RECENT_MAX {
            inner.recent.clear();
        }
        let Inner {
            captured,
            ranged,
            recent,
            ..
        } = &mut *inner;
        for path in captured.drain().chain(ranged.keys().cloned()) {
            recent.insert(path, open);
        }
        inner.turn = n;
        inner.linked.clear();
        inner.ranged.clear();
        self.epoch.store(n, Ordering::Release);
        Ok(n)
    }

    /// Writes the fingerprints remembered in memory to the index.
    pub fn flush(&self) -> Result<(), IndexError> {
        Self::flush_locked(&mut self.lock())
    }

    fn flush_locked(inner: &mut Inner) -> Result<(), IndexError> {
        // Pending records forget stored fingerprints; they must land before
        // the fresh fingerprints below, never after.
        Self::apply_locked(inner)?;
        if inner.fingerprints.is_empty() {
            return Ok(());
        }
        let Inner {
            index,
            fingerprints,
            ..
        } = inner;
        index.put_fingerprints(fingerprints.iter().map(|(p, f)| (p.as_slice(), f.as_ref())))?;
        fingerprints.clear();
        Ok(())
    }

    /// Remembers what is at `path` now as what the mount (or a rewind) left
    /// there.
    pub fn remember(&self, path: &[u8]) {
        self.remember_is_dir(path);
    }

    /// [`Journal::remember`]; true when a directory is there now.
    fn remember_is_dir(&self, path: &[u8]) -> bool {
        if paths::is_excluded(path) {
            return false;
        }
        let st = self.backing.lstat(path).ok();
        let is_dir = matches!(&st, Some(Some(s)) if s.file_type() == libc::S_IFDIR);
        let fp = st.map(|st| Fingerprint::of(st.as_ref()));
        self.lock().fingerprints.insert(path.to_vec(), fp);
        is_dir
    }

    /// What the mount last left at `path`, if known.
    pub fn last_seen(&self, path: &[u8]) -> Result<Option<Fingerprint>, IndexError> {
        let mut inner = self.lock();
        match inner.fingerprints.get(path) {
            Some(fp) => Ok(*fp),
            None => {
                Self::apply_locked(&mut inner)?;
                inner.index.fingerprint(path)
            }
        }
    }

    /// Remembers the paths a finished rename left, under both names and, for
    /// directories, at every depth.
    /// `now`: the layer's stat of the entry at `to` (a plain rename only;
    /// `from` is then absent).
    fn remember_rename(&self, from: &[u8], to: &[u8], exchange: bool, now: Option<&libc::stat>) {
        let (from_is_dir, to_is_dir) = match now {
            Some(st) if !exchange => {
                let st = Stat::from_raw(st);
                let mut inner = self.lock();
                for (path, fp) in [
                    (from, Fingerprint::of(None)),
                    (to, Fingerprint::of(Some(&st))),
                ] {
                    if !paths::is_excluded(path) {
                        inner.fingerprints.insert(path.to_vec(), Some(fp));
                    }
                }
                (
                    false,
                    st.file_type() == libc::S_IFDIR && !paths::is_excluded(to),
                )
            }
            _ => (self.remember_is_dir(from), self.remember_is_dir(to)),
        };
        let mut roots = Vec::new();
        if to_is_dir {
            roots.push((to, from));
        }
        if exchange && from_is_dir {
            roots.push((from, to));
        }
        for (now, other) in roots {
            let mut stack = vec![Vec::new()];
            while let Some(rel) = stack.pop() {
                let Ok(names) = self.backing.list_dir(&paths::join(now, &rel)) else {
                    continue;
                };
                for name in names {
                    let sub = paths::join(&rel, &name);
                    let here = paths::join(now, &sub);
                    self.remember(&here);
                    self.remember(&paths::join(other, &sub));
                    if matches!(self.backing.lstat(&here), Ok(Some(st)) if st.file_type() == libc::S_IFDIR)
                    {
                        stack.push(sub);
                    }
                }
            }
        }
    }

    /// Records the current state of `path` as its pre-image in the open turn,
    /// unless already recorded in this turn or excluded (`.git/`).
    pub fn capture(&self, path: &[u8]) -> Result<(), CaptureError> {
        let mut inner = self.lock();
        self.capture_locked(&mut inner, path)
    }

    fn capture_locked(&self, inner: &mut Inner, path: &[u8]) -> Result<(), CaptureError> {
        self.capture_known(inner, path, None)
    }

    /// Records `path`'s pre-image: `known` when the caller already knows
    /// it (a `Create` is reported only after the FUSE layer checked, under
    /// the quiesce gate, that the name is absent), else read from the
    /// project.
    fn capture_known(
        &self,
        inner: &mut Inner,
        path: &[u8],
        known: Option<PreImage>,
    ) -> Result<(), CaptureError> {
        if path.is_empty() || paths::is_excluded(path) || inner.captured.contains(path) {
            return Ok(());
        }
        if inner.ranged.contains_key(path) {
            return self.materialize(inner, path);
        }
        let (pre, data, nlink) = match known {
            Some(pre) => (pre, None, 0),
            None => self.read_state(inner, path)?,
        };
        if let PreImage::File { ino, .. } = pre {
            if nlink > 1 {
                self.backfill_other_names(inner, path, ino)?;
            }
        }
        // The entry also forgets the stored fingerprint (written at the
        // last turn switch, rewind or unmount): it describes the path
        // before the mutation about to run, and the new one lives in memory
        // until the next flush, so a crash before that flush leaves "not
        // known" (no check) instead of a false "changed behind the mount's
        // back".
        let turn = inner.turn;
        self.append(inner, Entry::record(turn, path.to_vec(), pre, data))?;
        crate::failpoint::failpoint("capture-after-record");
        inner.captured.insert(path.to_vec());
        Ok(())
    }

    /// Saves the turn-start bytes of `[offset, offset + len)` of the file at
    /// `path` that the open turn has not saved yet, before the mount
    /// overwrites them (`len` may run past the end of the file: a
    /// truncation). At the file's first range in the turn, records it as
    /// [`PreImage::Ranged`] when it is a regular file of at least the range
    /// threshold with one link; anything else is captured whole. Cost: one
    /// read and one log record per piece of new bytes; nothing for bytes
    /// already saved or past the turn-start length.
    fn capture_range(
        &self,
        inner: &mut Inner,
        path: &[u8],
        offset: u64,
        len: u64,
    ) -> Result<(), CaptureError> {
        if path.is_empty() || paths::is_excluded(path) || inner.captured.contains(path) {
            return Ok(());
        }
        let read_err = |source| CaptureError::Read {
            path: paths::display(path),
            source,
        };
        // The common case of a file written again and again: nothing new
        // to save, no allocation.
        if let Some(state) = inner.ranged.get(path) {
            let end = offset.saturating_add(len).min(state.size);
            if state.covered.covers(offset, end) {
                return Ok(());
            }
        }
        let turn = inner.turn;
        let mut state = match inner.ranged.remove(path) {
            Some(state) => state,
            None => {
                let Some((st, file)) = self.backing.lstat_open(path).map_err(read_err)? else {
                    return self.capture_known(inner, path, Some(PreImage::Absent));
                };
                if self.note_birth(inner, path, file.as_ref())? {
                    return self.capture_known(inner, path, Some(PreImage::Unknown));
                }
                match file {
                    Some(file)
                        if st.file_type() == libc::S_IFREG
                            && st.nlink == 1
                            && st.size >= self.range_min =>
                    {
                        let pre = PreImage::Ranged {
                            size: st.size,
                            perm: st.perm(),
                            ino: st.ino,
                        };
                        self.append(inner, Entry::record(turn, path.to_vec(), pre, None))?;
                        RangeState {
                            file: Some(file),
                            size: st.size,
                            covered: crate::view::ranges::Intervals::new(),
                        }
                    }
                    _ => return self.capture_known(inner, path, None),
                }
            }
        };
        let saved = self.save_ranges(inner, path, &mut state, offset, len);
        inner.ranged.insert(path.to_vec(), state);
        saved
    }

    /// The part of [`Journal::capture_range`] after the record: reads and
    /// logs the unsaved bytes in pieces of at most [`PIECE_MAX`].
    fn save_ranges(
        &self,
        inner: &mut Inner,
        path: &[u8],
        state: &mut RangeState,
        offset: u64,
        len: u64,
    ) -> Result<(), CaptureError> {
        let read_err = |source| CaptureError::Read {
            path: paths::display(path),
            source,
        };
        let end = offset.saturating_add(len).min(state.size);
        if offset >= end {
            return Ok(());
        }
        let gaps = state.covered.gaps(offset, end);
        if gaps.is_empty() {
            return Ok(());
        }
        if state.file.is_none() {
            // After a restart: the file the turn's record was made over.
            match self.backing.lstat_open(path).map_err(read_err)? {
                Some((st, Some(f))) if st.file_type() == libc::S_IFREG => state.file = Some(f),
                _ => {
                    return Err(read_err(io::Error::other(
                        "the file captured as ranges in this turn is no longer a regular file",
                    )))
                }
            }
        }
        let turn = inner.turn;
        for (a, b) in gaps {
            let mut at = a;
            while at < b {
                let n = (b - at).min(PIECE_MAX);
                let mut buf = vec![0u8; n as usize];
                if let Some(f) = &state.file {
                    use std::os::unix::fs::FileExt;
                    f.read_exact_at(&mut buf, at).map_err(|e| {
                        read_err(io::Error::new(
                            e.kind(),
                            format!(
                                "reading the {n} bytes at {at} before they are overwritten: {e}"
                            ),
                        ))
                    })?;
                }
                let blob = *blake3::hash(&buf).as_bytes();
                let data = if n <= INLINE_MAX {
                    Some(buf)
                } else {
                    self.blobs.put(&mut buf.as_slice(), n).map_err(|source| {
                        CaptureError::Blob {
                            path: paths::display(path),
                            source,
                        }
                    })?;
                    None
                };
                crate::failpoint::failpoint("capture-after-blob");
                let piece = PreImage::File {
                    blob,
                    size: n,
                    perm: 0,
                    ino: 0,
                };
                self.append(
                    inner,
                    Entry {
                        turn,
                        path: path.to_vec(),
                        pre: piece,
                        data,
                        op: Op::Range { offset: at },
                    },
                )?;
                crate::failpoint::failpoint("capture-after-record");
                state.covered.insert(at, at + n);
                at += n;
            }
        }
        Ok(())
    }

    /// Replaces the open turn's ranged record of `path` by a whole one: its
    /// turn-start bytes put together from the file and the saved ranges,
    /// before a mutation (rename, removal, truncating open) that would take
    /// the file the ranges are laid over away. Cost: one read of the file.
    fn materialize(&self, inner: &mut Inner, path: &[u8]) -> Result<(), CaptureError> {
        let Some(state) = inner.ranged.remove(path) else {
            return Ok(());
        };
        match self.materialize_state(inner, path, &state) {
            Ok(()) => {
                inner.captured.insert(path.to_vec());
                Ok(())
            }
            Err(e) => {
                inner.ranged.insert(path.to_vec(), state);
                Err(e)
            }
        }
    }

    fn materialize_state(
        &self,
        inner: &mut Inner,
        path: &[u8],
        state: &RangeState,
    ) -> Result<(), CaptureError> {
        let index_err = |source| CaptureError::Index {
            path: paths::display(path),
            source,
        };
        let read_err = |source| CaptureError::Read {
            path: paths::display(path),
            source,
        };
        let blob_err = |source| CaptureError::Blob {
            path: paths::display(path),
            source,
        };
        // The pieces are read back from the index.
        Self::apply_locked(inner).map_err(index_err)?;
        let turn = inner.turn;
        let Some(PreImage::Ranged { size, perm, ino }) =
            inner.index.preimage(turn, path).map_err(index_err)?
        else {
            // Another record came first (before a restart): it is the
            // pre-image, and the ranges were never needed.
            return Ok(());
        };
        let reopened;
        let file = match &state.file {
            Some(f) => f,
            None => match self.backing.lstat_open(path).map_err(read_err)? {
                Some((st, Some(f))) if st.file_type() == libc::S_IFREG => {
                    reopened = f;
                    &reopened
                }
                _ => {
                    return Err(read_err(io::Error::other(
                        "the file captured as ranges in this turn is no longer a regular file",
                    )))
                }
            },
        };
        let pieces = inner.index.ranges_of(turn, path).map_err(index_err)?;
        let (blob, data) = {
            let mut src = crate::view::ranges::Patched::new(
                crate::view::ranges::file_base(file),
                &inner.index,
                &self.blobs,
                &pieces,
                size,
            );
            if size <= INLINE_MAX {
                let mut bytes = Vec::new();
                src.read_to_end(&mut bytes).map_err(read_err)?;
                (*blake3::hash(&bytes).as_bytes(), Some(bytes))
            } else {
                let (blob, _) = self.blobs.put(&mut src, size).map_err(blob_err)?;
                (blob, None)
            }
        };
        let pre = PreImage::File {
            blob,
            size,
            perm,
            ino,
        };
        self.append(
            inner,
            Entry {
                turn,
                path: path.to_vec(),
                pre,
                data,
                op: Op::Replace,
            },
        )
    }

    /// A file with several hard links may have changed in earlier turns
    /// through another name while this name was unknown to the mount (a link
    /// made before it). Wherever the same inode was recorded under another
    /// name that still names it, this name had the same content then: record
    /// that for this name too, in that turn. Only for a name the mount never
    /// recorded before this turn (one it recorded has a history of its own,
    /// which already says what it was). Cost: two queries, and only for
    /// multiply-linked files (the caller checks the link count).
    fn backfill_other_names(
        &self,
        inner: &mut Inner,
        path: &[u8],
        ino: u64,
    ) -> Result<(), CaptureError> {
        let index_err = |source| CaptureError::Index {
            path: paths::display(path),
            source,
        };
        Self::apply_locked(inner).map_err(index_err)?;
        if inner
            .index
            .recorded_before(path, inner.turn)
            .map_err(index_err)?
        {
            return Ok(());
        }
        let earlier = inner
            .index
            .records_of_inode(ino, inner.turn, path)
            .map_err(index_err)?;
        let mut same_inode: HashMap<Vec<u8>, bool> = HashMap::new();
        for (turn, other, pre) in earlier {
            let still = *same_inode.entry(other.clone()).or_insert_with(
                || matches!(self.backing.lstat(&other), Ok(Some(st)) if st.ino == ino),
            );
            if still {
                inner
                    .index
                    .add_preimage(turn, path, &pre)
                    .map_err(index_err)?;
            }
        }
        Ok(())
    }

    /// Checks when the inode now at `path` was born, before the mount
    /// records the path in the open turn K (`docs/design.md`, "What
    /// fingerprints cannot see"). Say it was born while turn J was open:
    ///
    /// - J is before the first turn kept, or the path has a record in some
    ///   turn from J to K-1: nothing to do. The mount saw the path after
    ///   the inode arrived, or no rewind can reach back that far.
    /// - Otherwise the inode reached the path outside the mount. What the
    ///   path held when J began is unknown: a [`PreImage::Unknown`] record
    ///   goes into turn J. Turns J+1..K began after the inode arrived.
    /// - J is K itself: what the path held when K began is unknown. Returns
    ///   `true`, and the caller records [`PreImage::Unknown`] in K instead
    ///   of the content.
    ///
    /// Cost: one `statx`. For an inode born after the first kept turn began,
    /// also a look in [`Inner::recent`], and when that does not answer, one
    /// lookup in the index's `(path, turn)` index. Nothing when the
    /// filesystem does not report birth times: those paths keep the old
    /// rule, with no check.
    fn note_birth(
        &self,
        inner: &mut Inner,
        path: &[u8],
        file: Option<&std::fs::File>,
    ) -> Result<bool, CaptureError> {
        let Some(born) = self
            .backing
            .born_ns(path, file)
            .map_err(|source| CaptureError::Read {
                path: paths::display(path),
                source,
            })?
        else {
            return Ok(false);
        };
        let at = inner
            .starts
            .partition_point(|&(_, started)| started <= born);
        let Some(&(j, _)) = at.checked_sub(1).and_then(|i| inner.starts.get(i)) else {
            return Ok(false);
        };
        let k = inner.turn;
        if j >= k {
            return Ok(true);
        }
        let index_err = |source| CaptureError::Index {
            path: paths::display(path),
            source,
        };
        // Recorded in turn J or later by this process: no query.
        if inner.recent.get(path).is_some_and(|&t| t >= j) {
            return Ok(false);
        }
        // Records of turns before K are all in the index: a turn switch
        // commits the pending ones first.
        if inner
            .index
            .recorded_between(path, j, k)
            .map_err(index_err)?
            || inner.index.turn(j).map_err(index_err)?.is_none()
        {
            return Ok(false);
        }
        self.append(
            inner,
            Entry::record(j, path.to_vec(), PreImage::Unknown, None),
        )?;
        Ok(false)
    }

    /// Reads `path`'s current state from the project. A regular file's
    /// bytes are returned for an inline record when they fit in
    /// [`INLINE_MAX`], else stored as a blob file first. Also returns the
    /// link count (0 when absent).
    fn read_state(
        &self,
        inner: &mut Inner,
        path: &[u8],
    ) -> Result<(PreImage, Option<Vec<u8>>, u64), CaptureError> {
        let read_err = |source| CaptureError::Read {
            path: paths::display(path),
            source,
        };
        let Some((st, file)) = self.backing.lstat_open(path).map_err(read_err)? else {
            return Ok((PreImage::Absent, None, 0));
        };
        let nlink = st.nlink;
        if self.note_birth(inner, path, file.as_ref())? {
            return Ok((PreImage::Unknown, None, nlink));
        }
        let key = (st.dev, st.ino);
        let (pre, data) = match st.file_type() {
            libc::S_IFREG if st.nlink > 1 && inner.linked.contains_key(&key) => {
                let (blob, size) = inner.linked[&key];
                let pre = PreImage::File {
                    blob,
                    size,
                    perm: st.perm(),
                    ino: st.ino,
                };
                (pre, None)
            }
            libc::S_IFREG => {
                let Some(mut f) = file else {
                    return Err(read_err(io::Error::other(
                        "regular file without a descriptor",
                    )));
                };
                let blob_err = |source| CaptureError::Blob {
                    path: paths::display(path),
                    source,
                };
                let mut head = Vec::new();
                if st.size <= INLINE_MAX {
                    (&mut f)
                        .take(INLINE_MAX + 1)
                        .read_to_end(&mut head)
                        .map_err(read_err)?;
                }
                let (blob, size, data) = if st.size <= INLINE_MAX && head.len() as u64 <= INLINE_MAX
                {
                    let blob = *blake3::hash(&head).as_bytes();
                    (blob, head.len() as u64, Some(head))
                } else {
                    // Large, or grew past the limit since the stat: a blob
                    // file, written (and renamed into place) before the
                    // record that names it.
                    let mut src = io::Cursor::new(head).chain(f);
                    let (blob, size) = self.blobs.put(&mut src, st.size).map_err(blob_err)?;
                    (blob, size, None)
                };
                crate::failpoint::failpoint("capture-after-blob");
                if st.nlink > 1 {
                    inner.linked.insert(key, (blob, size));
                }
                let pre = PreImage::File {
                    blob,
                    size,
                    perm: st.perm(),
                    ino: st.ino,
                };
                (pre, data)
            }
            libc::S_IFDIR => (PreImage::Dir { perm: st.perm() }, None),
            libc::S_IFLNK => (
                PreImage::Symlink {
                    target: self.backing.read_link(path).map_err(read_err)?,
                },
                None,
            ),
            t => (
                PreImage::Special {
                    kind: Special::from_type_bits(t).unwrap_or(Special::Block),
                    perm: st.perm(),
                    rdev: st.rdev,
                },
                None,
            ),
        };
        Ok((pre, data, nlink))
    }

    /// Records the current bytes of `ranges` (`(offset, len)`) of the file at
    /// `path` before a rewind writes them back in place: as ranges of the
    /// open turn when the file qualifies, else its whole state (see
    /// [`Journal::capture_range`]).
    pub fn capture_ranges(&self, path: &[u8], ranges: &[(u64, u64)]) -> Result<(), CaptureError> {
        let mut inner = self.lock();
        for &(offset, len) in ranges {
            self.capture_range(&mut inner, path, offset, len)?;
        }
        Ok(())
    }

    /// Records what a rename changes: `from` and `to` themselves and, for a
    /// directory, every path under both names (the subtree's paths under
    /// `from` disappear, the same relative paths under `to` appear). With
    /// `exchange` the same holds the other way round.
    pub fn capture_rename(
        &self,
        from: &[u8],
        to: &[u8],
        exchange: bool,
    ) -> Result<(), CaptureError> {
        let mut inner = self.lock();
        self.capture_locked(&mut inner, from)?;
        self.capture_locked(&mut inner, to)?;
        self.capture_subtree_move(&mut inner, from, to)?;
        if exchange {
            self.capture_subtree_move(&mut inner, to, from)?;
        }
        Ok(())
    }

    /// For every path under directory `src`, records it and its counterpart
    /// under `dst`. Cost: one stat (and for files one read) per entry.
    fn capture_subtree_move(
        &self,
        inner: &mut Inner,
        src: &[u8],
        dst: &[u8],
    ) -> Result<(), CaptureError> {
        match stat_of(&self.backing, src)? {
            Some(st) if st.file_type() == libc::S_IFDIR => {}
            _ => return Ok(()),
        }
        let mut stack = vec![Vec::new()];
        while let Some(rel) = stack.pop() {
            let dir = paths::join(src, &rel);
            let names = self
                .backing
                .list_dir(&dir)
                .map_err(|source| CaptureError::Read {
                    path: paths::display(&dir),
                    source,
                })?;
            for name in names {
                let sub = paths::join(&rel, &name);
                let from_path = paths::join(src, &sub);
                self.capture_locked(inner, &from_path)?;
                self.capture_locked(inner, &paths::join(dst, &sub))?;
                if let Some(st) = stat_of(&self.backing, &from_path)? {
                    if st.file_type() == libc::S_IFDIR {
                        stack.push(sub);
                    }
                }
            }
        }
        Ok(())
    }
}

impl MutationHook for Journal {
    fn before(&self, mutation: &Mutation<'_>) -> Result<(), Errno> {
        let result = match *mutation {
            Mutation::Content { path } => {
                // One lock for both: record the pre-image, then mark the
                // fingerprint unknown while the mount changes the file.
                let mut inner = self.lock();
                self.capture_locked(&mut inner, path).map(|()| {
                    if !paths::is_excluded(path) {
                        inner.fingerprints.insert(path.to_vec(), None);
                    }
                })
            }
            Mutation::Range { path, offset, len } => {
                let mut inner = self.lock();
                self.capture_range(&mut inner, path, offset, len).map(|()| {
                    if !paths::is_excluded(path)
                        && !matches!(inner.fingerprints.get(path), Some(None))
                    {
                        inner.fingerprints.insert(path.to_vec(), None);
                    }
                })
            }

            // The layer reports Create only for a name it found absent under
            // the gate, so no second stat of the project is needed.
            Mutation::Create { path } => {
                self.capture_known(&mut self.lock(), path, Some(PreImage::Absent))
            }
            Mutation::Metadata { path } => {
                let mut inner = self.lock();
                // A ranged record holds the turn-start permission bits
                // already.
                if inner.ranged.contains_key(path) {
                    Ok(())
                } else {
                    self.capture_locked(&mut inner, path)
                }
            }
            Mutation::Remove { path } => self.capture(path),
            Mutation::Rename { from, to, exchange } => self.capture_rename(from, to, exchange),
        };
        result.map_err(|e| {
            log::error!("capture failed, refusing the mutation: {e}");
            e.errno()
        })
    }

    fn after(&self, mutation: &Mutation<'_>, now: Option<&libc::stat>) {
        match *mutation {
            Mutation::Content { path }
            | Mutation::Range { path, .. }
            | Mutation::Metadata { path }
            | Mutation::Create { path } => match now {
                // The layer's stat of the inode it holds for the path.
                Some(st) => {
                    if !paths::is_excluded(path) {
                        let fp = Fingerprint::of(Some(&Stat::from_raw(st)));
                        self.lock().fingerprints.insert(path.to_vec(), Some(fp));
                    }
                }
                None => self.remember(path),
            },
            // The layer reports a removal only once it succeeded: the path
            // is absent now, no stat needed.
            Mutation::Remove { path } => {
                if !paths::is_excluded(path) {
                    self.lock()
                        .fingerprints
                        .insert(path.to_vec(), Some(Fingerprint::of(None)));
                }
            }
            Mutation::Rename { from, to, exchange } => {
                self.remember_rename(from, to, exchange, now)
            }
        }
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn range_min(&self) -> u64 {
        self.range_min
    }
}
