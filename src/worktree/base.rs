//! A worktree's lower layer: the project as it was when its base turn
//! began, read from the project as it is now plus the records made since
//! (design §7; [`crate::view`] explains why that is exact).
//!
//! **Nothing is copied at creation.** A path's base state is its earliest
//! record from the base turn on; a path with no such record is unchanged
//! since, so the project's own file is served. Opening costs one query
//! (every record since the base turn: proportional to what changed, not
//! to the tree).
//!
//! **Frozen against the project's later changes.** The project's mount
//! records a path's pre-image before it changes the path (capture before
//! mutation). So when the worktree answers from the project itself, it
//! compares a snapshot of the project's records (the index's
//! `data_version` and the capture log's identity and length) taken after
//! the answer was read with the one taken when the records were last
//! loaded: equal, no capture happened since they were loaded, so nothing
//! changed the project through the mount before the read ended and the
//! answer is the base's; different, it reloads the records (after asking
//! the project's daemon to commit what its capture log holds) and answers
//! again. A change made through the mount can therefore never leak into
//! the worktree, even while the project's agent keeps working. An answer
//! from records alone needs no look (a path's earliest record since the
//! base never changes once made). The look (`records.rs`) first reads an
//! inotify watch on the records' files: with no event since the records
//! were loaded, no capture happened (the event of a capture's write is
//! queued before that write returns, so before the mutation it guards),
//! and the snapshot is not taken; `records.rs` argues it, and says when
//! the snapshot is taken at every look instead.
//!
//! **A file read is resolved once.** The overlay opens a lower file for
//! its reads ([`Lower::open`]: once per read without OPEN, once per
//! handle with it): the path's state is looked up and the file opened
//! then, with no look at the records' mark. Each read of the open file is
//! followed by that look (one `read` of the watch's empty queue, or the
//! snapshot: one index query and one `stat` of the capture log):
//! unchanged, the bytes are the base's; moved, the records are
//! reloaded, and if the path still has none the bytes are still the
//! base's (nothing changed it through the mount before the read ended),
//! else the read is answered from the record, as are the handle's later
//! reads. A pre-image's blob never changes and needs no check.
//!
//! **Names are resolved relative to held directories** (`dirs.rs`): each
//! lookup, open or readlink in the project resolves one name from a held
//! descriptor of its parent, not the whole path from the root; a reload
//! of the records drops them all.
//!
//! **Changes behind the project's mount** (an editor writing the project
//! directory directly, or work done while it was not mounted) have no
//! record. A path the worktree serves from the project whose change time
//! is later than the base turn's start is *drifted*: its base bytes are
//! not known, the worktree shows what the project holds, and the path is
//! written to the worktree's drift list, which `worktree list` counts and
//! `worktree merge` reports as a conflict. A deletion made behind the
//! mount is not noticed (there is nothing left to look at): the worktree
//! then misses that path too (`docs/worktrees.md`).

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opfs_fs::overlay::{Attr, DirEntry, Kind, Lent, Lower, LowerOpen};

use crate::paths;
use crate::record::{Hash, PreImage, Special, Stat};
use crate::store::{BlobStore, Index, IndexError, StateDir};
use crate::tree::Dir;
use crate::view::{Resolved, Timeline, ViewError};

mod dirs;
mod drift;
mod files;
mod records;

use dirs::Dirs;
pub use drift::read_drift;
use drift::Drift;
use files::{read_full_at, BlobFile, BytesFile, ProjectFile};
use records::{log_dir, Mark, Watch};

/// Errors opening a base.
#[derive(Debug, thiserror::Error)]
pub enum BaseError {
    /// The project's index cannot be read.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The records since the base turn cannot be put together.
    #[error(transparent)]
    View(#[from] ViewError),
    /// The project directory cannot be opened.
    #[error("cannot open the project {}: {source}", .path.display())]
    Project {
        /// The project directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

struct Inner {
    index: Index,
    timeline: Timeline,
    resolved: Resolved,
    /// The mark taken when the records were loaded (`None`: unknown, or
    /// found moved since: the next look reloads).
    seen: Option<Mark>,
    /// The inotify watch in front of the mark (`records.rs`); `None` when
    /// it cannot be made or trusted, or for a quiesced base.
    watch: Option<Watch>,
    /// Bumped at each reload: a file opened for a handle
    /// ([`Lower::open`]) is known to hold the base's bytes while the
    /// records are still those of the generation it was opened in.
    generation: u64,
    /// Set when an answer read the project itself (not only records): only
    /// such an answer can have raced with a capture ([`Core::fresh`]).
    read_project: std::cell::Cell<bool>,
    /// Paths an answer found changed behind the mount (by their `ctime`),
    /// noted as drifted only once the answer stands ([`Core::fresh`]): an
    /// answer given up because the records moved may have taken a change
    /// through the mount, not yet in the records it read, for one.
    pending_drift: std::cell::RefCell<Vec<Vec<u8>>>,
}

/// A path's state at the base.
#[derive(Debug, Clone)]
enum State {
    Absent,
    /// Known from a record.
    Recorded(PreImage),
    /// As the project holds it now (no record since the base).
    Current(Stat),
}

/// The project at the start of a turn, as an overlay's lower layer.
///
/// Cheap to share: the files it opens for the overlay's handles
/// ([`Lower::open`]) hold on to it.
pub struct Base {
    core: Arc<Core>,
}

struct Core {
    project: Dir,
    blobs: BlobStore,
    log_path: PathBuf,
    /// An `O_PATH` descriptor of the capture log's folder and the log's
    /// name there (`None` if the folder could not be opened: the path is
    /// used).
    log_dir: Option<(std::os::fd::OwnedFd, std::ffi::CString)>,
    turn: u64,
    since_ns: i64,
    /// Owner shown for entries known only from records.
    owner: (u32, u32),
    commit: Box<dyn Fn() + Send + Sync>,
    /// False once [`Base::quiesced`]: no capture can happen while it is
    /// read, so [`Core::fresh`] looks at the records no more.
    check: AtomicBool,
    inner: Mutex<Inner>,
    drift: Mutex<Drift>,
    /// The project's directories read lately, held open (`dirs.rs`).
    dirs: Dirs,
}

impl std::fmt::Debug for Base {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Base")
            .field("project", &self.core.project.path())
            .field("turn", &self.core.turn)
            .finish_non_exhaustive()
    }
}

impl Base {
    /// The project of `state` as it was when `turn` began (`since_ns`: that
    /// moment, ns since the Unix epoch). `commit` asks the project's daemon,
    /// if one runs, to move its capture log into the index (see
    /// [`crate::control::client::commit_through_daemon`]). `drift_file`
    /// receives the drift list, one hex-encoded path per line (appended).
    ///
    /// Errors: the project's index or directory cannot be opened, or the
    /// records since `turn` cannot be put together.
    pub fn open(
        state: &StateDir,
        turn: u64,
        since_ns: i64,
        commit: Box<dyn Fn() + Send + Sync>,
        drift_file: Option<&Path>,
    ) -> Result<Base, BaseError> {
        Core::open(state, turn, since_ns, commit, drift_file).map(|core| Base {
            core: Arc::new(core),
        })
    }

    /// This base for a caller during whose reads nothing can capture in
    /// the project: it holds `_excl` (the project mount's quiesce gate, or
    /// the state lock with no mount: a merge). Its answers then skip the
    /// check that the project's records did not move meanwhile (a look at
    /// the watch's queue, or an index query and a `stat` of the capture
    /// log, per answer; several per changed path of a merge), and it drops
    /// the watch.
    pub fn quiesced(self, _excl: &crate::capture::Exclusive<'_>) -> Base {
        self.core.check.store(false, Ordering::Relaxed);
        self.core.lock().watch = None;
        self
    }

    /// The turn whose start this base shows.
    pub fn turn(&self) -> u64 {
        self.core.turn
    }

    /// Paths found drifted so far (see the module docs).
    pub fn drifted(&self) -> Vec<Vec<u8>> {
        self.core.drifted()
    }
}

impl Core {
    fn open(
        state: &StateDir,
        turn: u64,
        since_ns: i64,
        commit: Box<dyn Fn() + Send + Sync>,
        drift_file: Option<&Path>,
    ) -> Result<Core, BaseError> {
        let project = Dir::open(&state.project).map_err(|source| BaseError::Project {
            path: state.project.clone(),
            source,
        })?;
        let owner = std::fs::metadata(&state.project)
            .map(|m| (m.uid(), m.gid()))
            .unwrap_or((0, 0));
        let index = Index::open_read_only(&state.index_path())?;
        // Made before the records are first loaded (`records.rs`).
        let watch = Watch::new(&state.index_path(), &state.capture_log_path())
            .map_err(|e| {
                log::info!(
                    "cannot watch the project's records in {} ({e}): each read in the \
                     worktree looks at them in full (if a limit was reached, raise \
                     fs.inotify.max_user_instances or max_user_watches)",
                    state.dir.display()
                )
            })
            .ok();
        let drift = Drift {
            seen: drift_file.map(read_drift).unwrap_or_default(),
            file: drift_file.and_then(|p| {
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| log::warn!("cannot open the drift list {}: {e}", p.display()))
                    .ok()
            }),
        };
        let base = Core {
            project,
            blobs: BlobStore::open_existing(&state.blobs_dir()),
            log_path: state.capture_log_path(),
            log_dir: log_dir(&state.capture_log_path()),
            turn,
            since_ns,
            owner,
            commit,
            check: AtomicBool::new(true),
            dirs: Dirs::default(),
            inner: Mutex::new(Inner {
                index,
                timeline: Timeline::default(),
                resolved: Resolved::default(),
                seen: None,
                watch,
                generation: 0,
                read_project: std::cell::Cell::new(false),
                pending_drift: std::cell::RefCell::default(),
            }),
            drift: Mutex::new(drift),
        };
        {
            let mut inner = base.lock();
            base.reload(&mut inner)?;
        }
        Ok(base)
    }

    fn drifted(&self) -> Vec<Vec<u8>> {
        match self.drift.lock() {
            Ok(d) => d.seen.iter().cloned().collect(),
            Err(p) => p.into_inner().seen.iter().cloned().collect(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn state(&self, inner: &Inner, path: &[u8]) -> io::Result<State> {
        if let Some(pre) = inner.timeline.state_at(path, self.turn) {
            return Ok(match pre {
                PreImage::Absent => State::Absent,
                PreImage::Unknown => {
                    self.note_drift(path);
                    State::Absent
                }
                other => State::Recorded(other.clone()),
            });
        }
        // What the project holds now is the base's only if no capture
        // happened since the records were read: `Core::fresh` checks.
        inner.read_project.set(true);
        Ok(match self.lstat(path)? {
            // Absent now and never recorded since the base: absent then
            // too, if no capture (of its removal) happened meanwhile.
            None => State::Absent,
            Some(st) => {
                // A directory's times move with every child created or removed
                // through the mount (each recorded on its own), so only
                // the other kinds can tell a change behind the mount.
                if st.ctime_ns > self.since_ns
                    && st.file_type() != libc::S_IFDIR
                    && !paths::is_excluded(path)
                {
                    inner.pending_drift.borrow_mut().push(path.to_vec());
                }
                State::Current(st)
            }
        })
    }

    /// `lstat` of the project's `path`, resolved relative to the held
    /// descriptor of its parent directory (`dirs.rs`); `None` when absent.
    fn lstat(&self, path: &[u8]) -> io::Result<Option<Stat>> {
        let Some((dir, _)) = paths::split(path) else {
            return self.project.lstat(path);
        };
        match self.dirs.get(&self.project, dir)? {
            Some(fd) => self.project.lstat_in(path, Some(fd.as_fd())),
            None => Ok(None),
        }
    }

    /// The project's regular file at `path` opened with `flags`
    /// (`O_NOFOLLOW` added), through the held descriptor of its parent.
    fn open_project(&self, path: &[u8], flags: libc::c_int) -> io::Result<File> {
        let Some((dir, _)) = paths::split(path) else {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        };
        match self.dirs.get(&self.project, dir)? {
            Some(fd) => self.project.open_file_in(path, Some(fd.as_fd()), flags),
            None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
        }
    }

    /// The target of the project's symlink at `path`, read through the
    /// held descriptor of its parent.
    fn read_link_project(&self, path: &[u8]) -> io::Result<Vec<u8>> {
        let Some((dir, _)) = paths::split(path) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        match self.dirs.get(&self.project, dir)? {
            Some(fd) => self.project.read_link_in(path, Some(fd.as_fd())),
            None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
        }
    }

    /// Notes the drift an answer found, now that it stands.
    fn note_pending_drift(&self, inner: &Inner) {
        for path in inner.pending_drift.borrow_mut().drain(..) {
            self.note_drift(&path);
        }
    }

    fn note_drift(&self, path: &[u8]) {
        let mut d = match self.drift.lock() {
            Ok(d) => d,
            Err(p) => p.into_inner(),
        };
        d.note(path);
    }

    fn attr(&self, path: &[u8], state: &State) -> Option<Attr> {
        let since = UNIX_EPOCH + Duration::from_nanos(u64::try_from(self.since_ns).unwrap_or(0));
        let recorded = |kind, perm, size, rdev| Attr {
            kind,
            perm,
            size,
            uid: self.owner.0,
            gid: self.owner.1,
            mtime: since,
            ctime: since,
            nlink: 1,
            rdev,
            origin: synthetic_origin(path),
        };
        Some(match state {
            State::Absent => return None,
            State::Current(st) => Attr {
                kind: Kind::from_mode(st.mode)?,
                perm: st.perm(),
                size: st.size,
                uid: st.uid,
                gid: st.gid,
                mtime: to_time(st.mtime_ns),
                ctime: to_time(st.ctime_ns),
                nlink: u32::try_from(st.nlink).unwrap_or(u32::MAX),
                rdev: st.rdev,
                origin: st.ino,
            },
            State::Recorded(pre) => match pre {
                PreImage::File { size, perm, .. } => recorded(Kind::File, *perm, *size, 0),
                PreImage::Dir { perm } => recorded(Kind::Dir, *perm, 0, 0),
                PreImage::Symlink { target } => {
                    recorded(Kind::Symlink, 0o777, target.len() as u64, 0)
                }
                PreImage::Special { kind, perm, rdev } => {
                    let k = match kind {
                        Special::Fifo => Kind::Fifo,
                        Special::Socket => Kind::Socket,
                        Special::Char => Kind::CharDevice,
                        Special::Block => Kind::BlockDevice,
                    };
                    recorded(k, *perm, 0, *rdev)
                }
                PreImage::Absent | PreImage::Unknown | PreImage::Ranged { .. } => return None,
            },
        })
    }

    /// The bytes of blob `hash`, from `[offset, offset + buf.len())`.
    fn read_blob(
        &self,
        inner: &Inner,
        hash: &Hash,
        offset: u64,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        let copy = |bytes: &[u8], buf: &mut [u8]| {
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            let n = (bytes.len() - start).min(buf.len());
            buf[..n].copy_from_slice(&bytes[start..start + n]);
            n
        };
        if let Some(bytes) = inner.resolved.borrow().get(hash) {
            return Ok(copy(bytes, buf));
        }
        if let Some(bytes) = inner.index.inline_blob(hash).map_err(io::Error::other)? {
            return Ok(copy(&bytes, buf));
        }
        let file = File::open(self.blobs.path_of(hash))?;
        read_full_at(&file, offset, buf)
    }
}

fn to_time(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(ns).unwrap_or(0))
}

/// An identity for an entry known only from a record: the path's hash with
/// the top bit set (project inode numbers on Linux filesystems never have
/// it), so it never equals a project file's.
fn synthetic_origin(path: &[u8]) -> u64 {
    let h = blake3::hash(path);
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(b) | (1 << 63)
}

impl Core {
    /// The project's own file at `path`, which the base serves unchanged
    /// (`st`: its `lstat`), opened read-only. `None` when the name went
    /// away since; `EISDIR` for a directory, `EINVAL` for any other type.
    fn open_current(&self, path: &[u8], st: &Stat) -> io::Result<Option<File>> {
        match st.file_type() {
            libc::S_IFREG => {
                enoent_to_none(self.open_project(path, libc::O_RDONLY | libc::O_NONBLOCK))
            }
            libc::S_IFDIR => Err(io::Error::from_raw_os_error(libc::EISDIR)),
            _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }
}

/// What [`Core::open_file`] found for a path.
enum Opened {
    /// The project's own file (the base serves it unchanged), opened while
    /// the records were those of `generation`.
    Project { file: File, generation: u64 },
    /// A pre-image's blob file: content-addressed, never changes.
    Blob(File),
    /// A pre-image's bytes held elsewhere (inline in the index, or in a
    /// dead daemon's capture log).
    Bytes(Vec<u8>),
}

impl Core {
    /// [`Lower::open`]: the path resolved once, for every read of one
    /// overlay handle. The project's own file gets the check of
    /// [`ProjectFile`] at each read; a pre-image never changes.
    fn open_file(core: &Arc<Core>, path: &[u8]) -> io::Result<Option<LowerOpen>> {
        // The project's own file opened needs no second look at the
        // records: each read checks that they hold nothing for the path
        // since the generation it was opened in, which covers a capture
        // racing with this open too.
        let project = |o: &Option<Opened>| matches!(o, Some(Opened::Project { .. }));
        let opened = core.fresh_unless(
            |inner| match core.state(inner, path)? {
                State::Absent => Ok(None),
                State::Recorded(PreImage::File { blob, .. }) => {
                    if let Some(bytes) = inner.resolved.borrow().get(&blob) {
                        return Ok(Some(Opened::Bytes(bytes.clone())));
                    }
                    if let Some(bytes) = inner.index.inline_blob(&blob).map_err(io::Error::other)? {
                        return Ok(Some(Opened::Bytes(bytes)));
                    }
                    File::open(core.blobs.path_of(&blob)).map(|f| Some(Opened::Blob(f)))
                }
                State::Recorded(PreImage::Dir { .. }) => {
                    Err(io::Error::from_raw_os_error(libc::EISDIR))
                }
                State::Recorded(_) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
                State::Current(st) => {
                    Ok(core.open_current(path, &st)?.map(|file| Opened::Project {
                        file,
                        generation: inner.generation,
                    }))
                }
            },
            project,
        )?;
        Ok(opened.map(|o| {
            LowerOpen::File(match o {
                Opened::Project { file, generation } => Box::new(ProjectFile {
                    core: Arc::clone(core),
                    path: path.to_vec(),
                    file,
                    generation: AtomicU64::new(generation),
                }),
                Opened::Blob(file) => Box::new(BlobFile(file)),
                Opened::Bytes(bytes) => Box::new(BytesFile(bytes)),
            })
        }))
    }

    /// Notes drift for the project's file at `path` if its change time is
    /// past the base's start (see [`Core::state`]): a change behind the
    /// project's mount after the file was opened.
    fn check_drift(&self, path: &[u8], st: &std::fs::Metadata) {
        let ctime_ns = st.ctime() * 1_000_000_000 + st.ctime_nsec();
        if ctime_ns > self.since_ns && !paths::is_excluded(path) {
            self.note_drift(path);
        }
    }
}

impl Lower for Base {
    fn getattr(&self, path: &[u8]) -> io::Result<Option<Attr>> {
        self.core.getattr(path)
    }

    /// One look at the project's records for all of `names` (instead of
    /// two per name): the overlay asks for the entries of a READDIRPLUS
    /// reply together.
    fn lookup_all(&self, dir: &[u8], names: &[&[u8]]) -> io::Result<Vec<Option<Attr>>> {
        self.core.fresh(|inner| {
            names
                .iter()
                .map(|name| {
                    let path = paths::join(dir, name);
                    let state = self.core.state(inner, &path)?;
                    Ok(self.core.attr(&path, &state))
                })
                .collect()
        })
    }

    fn read_at(&self, path: &[u8], offset: u64, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.core.read_at(path, offset, buf)
    }

    fn open(&self, path: &[u8]) -> io::Result<Option<LowerOpen>> {
        Core::open_file(&self.core, path)
    }

    fn with_file(
        &self,
        path: &[u8],
        use_fd: &mut dyn FnMut(BorrowedFd<'_>) -> io::Result<()>,
    ) -> io::Result<Option<Lent>> {
        self.core.with_file(path, use_fd)
    }

    fn readdir(&self, path: &[u8]) -> io::Result<Option<Vec<DirEntry>>> {
        self.core.readdir(path)
    }

    fn readlink(&self, path: &[u8]) -> io::Result<Option<Vec<u8>>> {
        self.core.readlink(path)
    }
}

fn enoent_to_none<T>(r: io::Result<T>) -> io::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if crate::tree::is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

impl Lower for Core {
    fn getattr(&self, path: &[u8]) -> io::Result<Option<Attr>> {
        self.fresh(|inner| {
            let state = self.state(inner, path)?;
            Ok(self.attr(path, &state))
        })
    }

    fn read_at(&self, path: &[u8], offset: u64, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.fresh(|inner| match self.state(inner, path)? {
            State::Absent => Ok(None),
            State::Recorded(PreImage::File { blob, .. }) => {
                self.read_blob(inner, &blob, offset, buf).map(Some)
            }
            State::Recorded(PreImage::Dir { .. }) => {
                Err(io::Error::from_raw_os_error(libc::EISDIR))
            }
            State::Recorded(_) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            State::Current(st) => match self.open_current(path, &st)? {
                Some(f) => read_full_at(&f, offset, buf).map(Some),
                None => Ok(None),
            },
        })
    }

    /// Lends the project's own file when the base serves it unchanged, the
    /// pre-image's blob file when a record holds it; `Lent::ReadAt` for a
    /// pre-image whose bytes live elsewhere (inline in the index, rebuilt
    /// from ranges, in a dead daemon's capture log). Runs inside
    /// [`Core::fresh`], so a capture racing with `use_fd` makes it run again
    /// on the recorded pre-image: the bytes lent are always the base's.
    fn with_file(
        &self,
        path: &[u8],
        use_fd: &mut dyn FnMut(BorrowedFd<'_>) -> io::Result<()>,
    ) -> io::Result<Option<Lent>> {
        self.fresh(|inner| match self.state(inner, path)? {
            State::Absent => Ok(None),
            State::Recorded(PreImage::File { blob, .. }) => {
                if inner.resolved.borrow().contains_key(&blob) {
                    return Ok(Some(Lent::ReadAt));
                }
                match File::open(self.blobs.path_of(&blob)) {
                    Ok(f) => {
                        use_fd(f.as_fd())?;
                        Ok(Some(Lent::Fd))
                    }
                    // Inline in the index (or missing: `read_at` says so).
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some(Lent::ReadAt)),
                    Err(e) => Err(e),
                }
            }
            State::Recorded(PreImage::Dir { .. }) => {
                Err(io::Error::from_raw_os_error(libc::EISDIR))
            }
            State::Recorded(_) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            State::Current(st) => match self.open_current(path, &st)? {
                Some(f) => {
                    use_fd(f.as_fd())?;
                    Ok(Some(Lent::Fd))
                }
                None => Ok(None),
            },
        })
    }

    fn readdir(&self, path: &[u8]) -> io::Result<Option<Vec<DirEntry>>> {
        self.fresh(|inner| {
            let is_dir = match self.state(inner, path)? {
                State::Absent => return Ok(None),
                State::Recorded(PreImage::Dir { .. }) => true,
                State::Current(st) => st.file_type() == libc::S_IFDIR,
                State::Recorded(_) => false,
            };
            if !is_dir {
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
            let mut out = Vec::new();
            let recorded = inner.timeline.children_at(path, self.turn);
            let recorded_names: BTreeSet<&[u8]> = recorded
                .iter()
                .filter(|(_, s)| s.is_some())
                .map(|(n, _)| n.as_slice())
                .collect();
            // Children unchanged since the base, as the project holds them,
            // with the types its listing gives (no `lstat` of each: a
            // lookup of the child reads its attributes, and notes its
            // drift, when the overlay needs them).
            inner.read_project.set(true);
            let current = match self.lstat(path)? {
                Some(st) if st.file_type() == libc::S_IFDIR => {
                    enoent_to_none(self.project.list_dir_typed(path))?.unwrap_or_default()
                }
                _ => Vec::new(),
            };
            for (name, mode) in current {
                if recorded_names.contains(name.as_slice()) {
                    continue;
                }
                let mode = match mode {
                    0 => match self.lstat(&paths::join(path, &name))? {
                        Some(st) => st.mode,
                        None => continue,
                    },
                    m => m,
                };
                if let Some(kind) = Kind::from_mode(mode) {
                    out.push(DirEntry { name, kind });
                }
            }
            // Children known from records.
            for (name, state) in recorded {
                let Some(pre) = state else { continue };
                let child = paths::join(path, &name);
                if let Some(a) = self.attr(&child, &State::Recorded(pre.clone())) {
                    out.push(DirEntry { name, kind: a.kind });
                }
            }
            Ok(Some(out))
        })
    }

    fn readlink(&self, path: &[u8]) -> io::Result<Option<Vec<u8>>> {
        self.fresh(|inner| match self.state(inner, path)? {
            State::Absent => Ok(None),
            State::Recorded(PreImage::Symlink { target }) => Ok(Some(target)),
            State::Recorded(_) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            State::Current(st) if st.file_type() == libc::S_IFLNK => {
                enoent_to_none(self.read_link_project(path))
            }
            State::Current(_) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        })
    }
}
