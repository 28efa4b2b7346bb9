//! Capture: turns, and the pre-image of every path before a mutation.
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
//!
//! The journal reads the project through a [`Tree`] (today the project
//! directory, [`Dir`]); it never writes there itself.
//!
//! Files: `record.rs` (whole pre-images, the capture log and group
//! commit), `ranges.rs` (files captured as ranges), `birth.rs` (inodes
//! that arrived behind the mount's back), `links.rs` (hard links),
//! `rename.rs` (subtree moves), `fingerprints.rs` (what the mount left at
//! each path), `turns.rs` (turn switches), `error.rs` and `errno.rs`.

mod birth;
mod errno;
mod error;
mod exclusive;
mod fingerprints;
pub mod git_note;
mod keep;
mod links;
mod outside;
mod ranges;
mod record;
mod rename;
mod turns;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use opfs_fs::{Errno, Mutation, MutationHook, Parents};

pub use error::{CaptureError, OpenError};
pub use exclusive::Exclusive;
pub use keep::DEFAULT_KEEP_MIN;
pub use turns::NewTurn;

use crate::record::PreImage;
use crate::record::TurnKind;
use crate::store::StateDir;
use crate::store::{BlobError, BlobStore, Index, IndexError, KeptDir, ReplayError};
use crate::tree::{Dir, Tree};
use error::index_as_blob_error;
use fingerprints::Fingerprints;
use keep::{Keeper, Leaving};
use ranges::RangeState;
use record::Pending;
use turns::TurnState;

/// Pending records that trigger a group commit on the capturing thread.
pub const GROUP_MAX: usize = 4096;
/// Pending inline bytes that trigger a group commit.
pub const GROUP_MAX_BYTES: usize = 8 << 20;
/// While captures keep arriving, the timer's group commit
/// ([`Journal::apply_pending_on_tick`]) waits for a pause, but no longer
/// than this after the oldest pending record was appended.
pub const GROUP_MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// Files of at least this many bytes (and one link) are captured as ranges
/// when written in place, unless the daemon is told otherwise
/// (`OPFS_RANGE_MIN`). See `docs/ranges.md`.
pub const DEFAULT_RANGE_MIN: u64 = 1 << 20;

/// Everything the journal's lock guards.
struct Inner {
    index: Index,
    /// Records in the capture log, not yet in the index.
    pending: Pending,
    /// What the open turn has recorded, and when each turn began.
    turn: TurnState,
    /// Fingerprints not yet written to the index.
    fingerprints: Fingerprints,
    /// Bytes of the blobs the index lists (what a byte budget counts),
    /// once [`Journal::stored_bytes`] has summed them; each group commit
    /// adds the blobs it lists first, [`Journal::recount_stored_bytes`]
    /// sums again after gc.
    stored_bytes: Option<u64>,
    /// Files kept for a removal that is under way, by path (`keep.rs`).
    leaving: HashMap<Vec<u8>, Leaving>,
}

/// Turns and capture for one project, read through the tree `T` (the
/// project directory unless said otherwise).
pub struct Journal<T = Dir> {
    tree: T,
    blobs: Arc<BlobStore>,
    /// This scope's kept files (`store::kept`).
    kept: Arc<KeptDir>,
    /// Set when removed files may be kept ([`Journal::set_keep_min`]).
    keeper: Option<Keeper>,
    /// The FUSE layer runs without OPEN ([`MutationHook::opens_unseen`]):
    /// a lease cannot see files open through the mount, so removed files
    /// are copied, never kept.
    opens_unseen: std::sync::atomic::AtomicBool,
    state: StateDir,
    inner: Mutex<Inner>,
    epoch: AtomicU64,
    range_min: u64,
    /// The paths not recorded: `.git/` and the list in effect for the
    /// state dir (`StateDir::record_exclude`), read once at open.
    exclude: crate::paths::Exclude,
    /// Changes to what git runs or trusts noted so far (`git_note`).
    git_notes: git_note::GitNotes,
    /// Captures refused for a full or failing store since the last one
    /// that succeeded ([`Journal::refusals`]).
    refused: Refused,
}

/// Captures that failed with `ENOSPC` or `EIO` (a full state dir, a
/// damaged store) since the last capture that succeeded: the mutations
/// refused meanwhile. Two atomics, so the success path costs one relaxed
/// load.
#[derive(Debug, Default)]
struct Refused {
    /// How many.
    count: AtomicU64,
    /// When the first of them failed, in milliseconds since the Unix
    /// epoch; 0 while none has.
    since_ms: AtomicU64,
    /// The errno of the last one.
    errno: AtomicU64,
}

/// What [`Journal::refusals`] reports: mutations refused because their
/// capture failed for a full (`ENOSPC`) or failing (`EIO`) store, since
/// the last capture that succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusals {
    /// How many mutations were refused.
    pub count: u64,
    /// When the first was, in milliseconds since the Unix epoch.
    pub since_ms: u64,
    /// The errno of the last (`ENOSPC` or `EIO`).
    pub errno: i32,
}

impl<T> std::fmt::Debug for Journal<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("project", &self.state.project)
            .field("turn", &self.epoch.load(Ordering::Relaxed))
            .finish()
    }
}

impl<T> Journal<T> {
    /// Mutations refused since the last capture that succeeded because
    /// their capture failed with `ENOSPC` (the state dir's filesystem is
    /// full) or `EIO` (a failing store); `None` while captures succeed.
    /// For `opfs status`: a full state dir must not be invisible.
    pub fn refusals(&self) -> Option<Refusals> {
        let since_ms = self.refused.since_ms.load(Ordering::Relaxed);
        (since_ms != 0).then(|| Refusals {
            count: self.refused.count.load(Ordering::Relaxed),
            since_ms,
            errno: self.refused.errno.load(Ordering::Relaxed) as i32,
        })
    }

    /// Logs a failed capture and counts it when the store is full or
    /// failing; clears the count on success. Returns the errno the
    /// mutation fails with.
    fn count_refusal(&self, result: Result<(), CaptureError>) -> Result<(), Errno> {
        match result {
            Ok(()) => {
                if self.refused.since_ms.load(Ordering::Relaxed) != 0 {
                    self.refused.since_ms.store(0, Ordering::Relaxed);
                    self.refused.count.store(0, Ordering::Relaxed);
                }
                Ok(())
            }
            Err(e) => {
                log::error!("capture failed, refusing the mutation: {e}");
                let errno = e.errno();
                if matches!(errno, libc::ENOSPC | libc::EIO) {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(1, |d| d.as_millis().max(1) as u64);
                    let _ = self.refused.since_ms.compare_exchange(
                        0,
                        now,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    self.refused.count.fetch_add(1, Ordering::Relaxed);
                    self.refused.errno.store(errno as u64, Ordering::Relaxed);
                }
                Err(errno)
            }
        }
    }
}

impl Journal {
    /// Opens the journal of the project at canonical path `project`, whose
    /// state lives in `state`. Creates the state dir, index and blob store on
    /// first use and makes sure a turn is open: turn 1 on first use, else the
    /// newest turn (a later mount continues the numbering).
    ///
    /// `sync` makes blobs and index commits durable across power loss.
    pub fn open(state: &StateDir, sync: bool) -> Result<Journal, OpenError> {
        let dir = Dir::open(&state.project).map_err(|source| OpenError::Project {
            path: state.project.clone(),
            source,
        })?;
        Journal::open_over(dir, state, sync)
    }

    /// Confined access to the project.
    pub fn backing(&self) -> &Dir {
        &self.tree
    }
}

impl<T: Tree> Journal<T> {
    /// [`Journal::open`], reading the project through `tree` instead of
    /// opening the directory `state.project`.
    pub fn open_over(tree: T, state: &StateDir, sync: bool) -> Result<Journal<T>, OpenError> {
        state.create().map_err(|source| OpenError::State {
            path: state.dir.clone(),
            source,
        })?;
        let exclude = state.record_exclude().map_err(OpenError::Exclude)?;
        let blobs = Arc::new(BlobStore::open(&state.blobs_dir(), sync)?);
        blobs.clear_tmp();
        let kept =
            Arc::new(
                KeptDir::open(&state.kept_dir()).map_err(|source| OpenError::State {
                    path: state.kept_dir(),
                    source,
                })?,
            );
        let mut index = Index::open(&state.index_path(), sync)?;
        // Records a crash left in the capture log go into the index before
        // anything reads it (kept files hashed first); applying one twice
        // changes nothing.
        let capture_log = crate::store::replay_capture_log(
            &mut index,
            &state.capture_log_path(),
            &kept,
            &blobs,
            sync,
        )
        .map_err(|e| match e {
            ReplayError::Log(e) => OpenError::Log(e),
            ReplayError::Index(e) => OpenError::Index(e),
            ReplayError::Blob(e) => OpenError::Blob(e),
        })?;
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
        let mut state_of_turn = TurnState::new(turn, starts);
        // What the open turn recorded before a restart: those records are
        // its pre-images already (a second capture would be ignored), and a
        // ranged file goes on saving ranges where it left off.
        for (path, pre) in index.records_of_turn(turn)? {
            match pre {
                PreImage::Ranged { size, .. } => {
                    let mut covered = crate::view::ranges::Intervals::new();
                    for p in index.ranges_of(turn, &path)? {
                        covered.insert(p.offset, p.offset.saturating_add(p.len));
                    }
                    state_of_turn.ranged.insert(
                        path,
                        RangeState {
                            file: None,
                            size,
                            covered,
                        },
                    );
                }
                _ => {
                    state_of_turn.captured.insert(path);
                }
            }
        }
        Ok(Journal {
            tree,
            blobs: Arc::clone(&blobs),
            kept: Arc::clone(&kept),
            keeper: None,
            opens_unseen: std::sync::atomic::AtomicBool::new(false),
            state: state.clone(),
            inner: Mutex::new(Inner {
                index,
                pending: Pending::new(capture_log, kept, blobs),
                turn: state_of_turn,
                fingerprints: Fingerprints::default(),
                stored_bytes: None,
                leaving: HashMap::new(),
            }),
            epoch: AtomicU64::new(turn),
            range_min: DEFAULT_RANGE_MIN,
            exclude,
            git_notes: Default::default(),
            refused: Refused::default(),
        })
    }

    /// The paths this journal does not record (`docs/design.md` "Excluded
    /// paths"): `.git/` and the `[record] exclude` list that was in effect
    /// for the state dir when the journal was opened.
    pub fn exclude(&self) -> &crate::paths::Exclude {
        &self.exclude
    }

    /// True when `path` is not recorded ([`Self::exclude`]).
    pub fn excludes(&self, path: &[u8]) -> bool {
        self.exclude.excludes(path)
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

    /// The tree the journal reads the project through.
    pub fn tree(&self) -> &T {
        &self.tree
    }

    /// The blob store.
    pub fn blobs(&self) -> &BlobStore {
        &self.blobs
    }

    /// Checks that blob `hash` is stored (inline or as a file) and hashes
    /// to its name; returns its length. Errors as [`crate::store::verify_blob`].
    pub fn verify_blob(&self, hash: &crate::record::Hash) -> Result<u64, BlobError> {
        let mut inner = self.lock();
        inner.apply_pending().map_err(index_as_blob_error)?;
        crate::store::verify_blob(&inner.index, &self.blobs, hash)
    }

    /// The content of blob `hash` when it is stored inline (checked), else
    /// `None` (read the blob file). Errors as [`crate::store::read_blob`].
    pub fn inline_blob(&self, hash: &crate::record::Hash) -> Result<Option<Vec<u8>>, BlobError> {
        let mut inner = self.lock();
        inner.apply_pending().map_err(index_as_blob_error)?;
        match inner.index.inline_blob(hash).map_err(index_as_blob_error)? {
            Some(_) => crate::store::read_blob(&inner.index, &self.blobs, hash).map(Some),
            None => Ok(None),
        }
    }

    /// The bytes of a saved piece (checked): from its range pack when
    /// `at` says where, else blob `hash` (inline or a blob file). Errors
    /// as [`crate::store::read_blob`].
    pub fn read_piece(
        &self,
        hash: &crate::record::Hash,
        at: Option<crate::store::index::Packed>,
    ) -> Result<Vec<u8>, BlobError> {
        let mut inner = self.lock();
        inner.apply_pending().map_err(index_as_blob_error)?;
        crate::store::read_piece(&inner.index, &self.blobs, hash, at)
    }

    /// The open turn's number.
    pub fn open_turn(&self) -> u64 {
        self.lock().turn.number
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
        inner.apply_pending()?;
        f(&mut inner.index)
    }

    /// Bytes of the blobs the index lists, pending records included: the
    /// first call sums the `blobs` table (one scan), later ones read a
    /// running total (no scan; each group commit adds what it lists first).
    /// Rows some other writer adds are not counted until
    /// [`Journal::recount_stored_bytes`].
    ///
    /// Errors: the pending records cannot be committed, or the sum cannot
    /// be read.
    pub fn stored_bytes(&self) -> Result<u64, IndexError> {
        let mut inner = self.lock();
        inner.apply_pending()?;
        if let Some(total) = inner.stored_bytes {
            return Ok(total);
        }
        let (_, total) = inner.index.totals()?;
        inner.stored_bytes = Some(total);
        Ok(total)
    }

    /// Sums the `blobs` table again (after gc deleted rows) and keeps the
    /// sum as [`Journal::stored_bytes`]'s running total; returns it.
    ///
    /// Errors: the sum cannot be read (the running total is then
    /// forgotten, and the next [`Journal::stored_bytes`] sums again).
    pub fn recount_stored_bytes(&self) -> Result<u64, IndexError> {
        let mut inner = self.lock();
        inner.stored_bytes = None;
        inner.apply_pending()?;
        let (_, total) = inner.index.totals()?;
        inner.stored_bytes = Some(total);
        Ok(total)
    }

    /// Commits the records pending in the capture log to the index in one
    /// transaction (a group commit), then empties the log. The daemon calls
    /// this on a timer so other processes reading the index (history,
    /// export) see captures within a fraction of a second.
    ///
    /// Errors: the index refused the transaction; the records stay pending
    /// and in the log, and the next call retries.
    pub fn apply_pending(&self) -> Result<(), IndexError> {
        self.lock().apply_pending()
    }

    /// [`Journal::apply_pending`] for the daemon's timer. It does nothing
    /// and returns `Ok(true)` while captures keep arriving (a record was
    /// appended since the previous tick and the oldest pending one is
    /// younger than [`GROUP_MAX_WAIT`]), and returns `Ok(false)` while
    /// the removal of a kept file is under way (between its record and the
    /// end of the unlink or rename): a commit in that window would have to
    /// copy the file's bytes (its removal may still fail, so the inode
    /// cannot become a blob yet), which is the work keeping saves; the
    /// removal ends within one request, so a later tick commits. A caller
    /// that must commit now (history commands, a turn boundary) uses
    /// `apply_pending`.
    ///
    /// A burst of captures (an `rm -rf`, an untar) is so committed in
    /// transactions of up to [`GROUP_MAX`] records, at least once per
    /// [`GROUP_MAX_WAIT`], instead of one per tick: each transaction
    /// rewrites every index page its records touch (the `blobs` table is
    /// keyed by hash, so a group of any size touches pages all over it).
    /// Nothing waits on this for correctness: the records are durable in
    /// the capture log, and every reader of the index (the daemon's own,
    /// a history command's `Commit` request, a turn boundary) commits
    /// first.
    ///
    /// Errors: as `apply_pending`; the records stay pending.
    pub fn apply_pending_on_tick(&self) -> Result<bool, IndexError> {
        let mut inner = self.lock();
        if inner.pending.streaming(GROUP_MAX_WAIT) {
            return Ok(true);
        }
        if !inner.leaving.is_empty() {
            return Ok(false);
        }
        inner.apply_pending().map(|()| true)
    }
}

impl<T: Tree + 'static> MutationHook for Journal<T> {
    fn before(&self, mutation: &Mutation<'_>) -> Result<(), Errno> {
        self.git_guard(mutation)?;
        let result = match *mutation {
            Mutation::Content { path } => {
                // One lock for both: record the pre-image, then mark the
                // fingerprint unknown while the mount changes the file.
                if self.excludes(path) {
                    return Ok(());
                }
                let mut inner = self.lock();
                self.capture_locked(&mut inner, path)
                    .map(|()| inner.fingerprints.changing(path))
            }
            Mutation::Range { path, offset, len } => {
                if self.excludes(path) {
                    return Ok(());
                }
                let mut inner = self.lock();
                self.capture_range(&mut inner, path, offset, len)
                    .map(|()| inner.fingerprints.changing(path))
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
                if inner.turn.ranged.contains_key(path) {
                    self.keep_outside_ranged(&mut inner, path, "metadata")
                } else {
                    self.capture_by(&mut inner, path, "metadata")
                }
            }
            Mutation::Remove { path } => {
                let captured = self.capture_leaving(&mut self.lock(), path, None, "remove");
                crate::failpoint::failpoint("before-removal");
                captured
            }
            Mutation::Rename { from, to, exchange } => self.capture_rename(from, to, exchange),
        };
        self.count_refusal(result)
    }

    fn before_in(&self, mutation: &Mutation<'_>, parents: Parents<'_>) -> Result<(), Errno> {
        if matches!(mutation, Mutation::Remove { .. } | Mutation::Rename { .. }) {
            self.git_guard(mutation)?;
        }
        // The layer's own descriptors of the directories the mutation runs
        // in: the capture reads exactly the entries it changes, and saves
        // resolving their parents from the project root again.
        let result = match *mutation {
            Mutation::Remove { path } => {
                let captured =
                    self.capture_leaving(&mut self.lock(), path, Some(parents.from), "remove");
                crate::failpoint::failpoint("before-removal");
                captured
            }
            Mutation::Rename { from, to, exchange } => {
                self.capture_rename_in(from, to, exchange, Some(parents))
            }
            _ => return self.before(mutation),
        };
        self.count_refusal(result)
    }

    fn after(&self, mutation: &Mutation<'_>, now: Option<&libc::stat>) {
        match *mutation {
            Mutation::Remove { path } => self.end_leaving(path, true),
            Mutation::Rename {
                to,
                exchange: false,
                ..
            } => self.end_leaving(to, true),
            _ => {}
        }
        self.remember_after(mutation, now)
    }

    fn failed(&self, mutation: &Mutation<'_>) {
        match *mutation {
            Mutation::Remove { path } => self.end_leaving(path, false),
            Mutation::Rename {
                to,
                exchange: false,
                ..
            } => self.end_leaving(to, false),
            _ => {}
        }
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn range_min(&self) -> u64 {
        self.range_min
    }

    fn opens_unseen(&self) {
        self.opens_unseen.store(true, Ordering::Release);
    }
}
