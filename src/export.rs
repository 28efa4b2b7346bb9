//! The shadow git export (design §8): the history as a bare git repository,
//! written with gix, outside the project.
//!
//! Layout (see `docs/export.md`): a baseline commit holding the project as
//! first seen (the start of the oldest turn kept), then one commit per
//! closed turn whose tree is the project at the end of that turn;
//! `refs/opfs/baseline`, `refs/opfs/turns/<N>` per turn, and the branch
//! `refs/heads/opfs` (which `HEAD` names) at the newest exported turn.
//!
//! Incremental: the branch tip's message says which turn it holds (an
//! `opfs-turn:` trailer). An export starts from that commit's tree and, for
//! each newer closed turn, edits only the paths the turn recorded (gix's
//! tree editor loads and rewrites only the trees on those paths). Only the
//! baseline reads the whole project, once.
//!
//! Commits are deterministic (fixed author, times from the index), so
//! re-exporting the same history yields the same ids, and an export
//! interrupted between writing objects and moving refs is redone exactly.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use gix::bstr::{BStr, ByteSlice};
use gix::objs::tree::EntryKind;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;
use gix::ObjectId;
use serde::Serialize;

use crate::backing::Backing;
use crate::history::{self, Sources};
use crate::paths;
use crate::record::{Hash, PreImage};
use crate::state::StateDir;
use crate::store::{BlobError, BlobStore, Index, IndexError, Turn};
use crate::view::{Timeline, Version};

/// The branch that follows the newest exported turn.
pub const BRANCH: &str = "refs/heads/opfs";
/// The ref of the baseline commit.
pub const BASELINE_REF: &str = "refs/opfs/baseline";
/// Prefix of the per-turn refs (`refs/opfs/turns/<N>`).
pub const TURN_REF_PREFIX: &str = "refs/opfs/turns/";

/// Errors from an export. Each names the repository, path or turn.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A gix operation failed.
    #[error("git repository {git_dir}: {what}: {source}")]
    Git {
        /// The repository.
        git_dir: PathBuf,
        /// What was being done.
        what: String,
        /// The cause.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file of the repository or state dir could not be used.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The repository was made for another project.
    #[error("{git_dir} holds the export of {other}, not of {project}")]
    Foreign {
        /// The repository.
        git_dir: PathBuf,
        /// The project it belongs to.
        other: String,
        /// This project.
        project: PathBuf,
    },
    /// The repository would be inside the project (zero intrusion).
    #[error("the export repository {git_dir} must not be inside the project {project}")]
    InsideProject {
        /// The repository.
        git_dir: PathBuf,
        /// The project.
        project: PathBuf,
    },
    /// The project cannot be read.
    #[error("cannot read {path} in the project: {source}")]
    Project {
        /// The path, rendered.
        path: String,
        /// The cause.
        source: io::Error,
    },
    /// A recorded blob is missing or corrupt.
    #[error("the recorded content of {path} cannot be read: {source}")]
    Blob {
        /// The path, rendered.
        path: String,
        /// The cause.
        source: BlobError,
    },
    /// The index failed.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// Reading a turn's states failed (a file kept as ranges could not be
    /// put together, or a file it is laid over could not be read).
    #[error(transparent)]
    History(#[from] history::HistoryError),
}

/// Progress of a running export, for the caller to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The baseline walk has read this many entries of the project so far.
    Baseline {
        /// Entries read.
        entries: u64,
    },
    /// Turn `turn` was exported.
    Turn {
        /// The turn.
        turn: u64,
    },
}

/// What an export did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExportReport {
    /// The repository.
    pub git_dir: PathBuf,
    /// Whether this run wrote the baseline.
    pub baseline: bool,
    /// Project entries the baseline walk read (0 without a baseline).
    pub baseline_entries: u64,
    /// Turns exported by this run, oldest first.
    pub turns: Vec<u64>,
    /// The newest turn in the export after this run (`None`: only the
    /// baseline, or nothing).
    pub last_turn: Option<u64>,
    /// Git objects handed to the object database (blobs, trees, commits);
    /// ones already present are not written again.
    pub objects: u64,
    /// Paths left out because git cannot hold them (see `docs/export.md`).
    pub skipped: Vec<String>,
    /// Wall time in ms.
    pub elapsed_ms: u64,
}

/// The default repository: `export.git` in the project's state dir.
pub fn default_git_dir(state: &StateDir) -> PathBuf {
    state.dir.join("export.git")
}

fn git_err<E: std::error::Error + Send + Sync + 'static>(
    git_dir: &Path,
    what: impl Into<String>,
) -> impl FnOnce(E) -> ExportError + '_ {
    let what = what.into();
    move |e| ExportError::Git {
        git_dir: git_dir.to_path_buf(),
        what,
        source: Box::new(e),
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// True when a tree entry named `name` would make `git fsck --strict`
/// complain or could be mistaken for a repository by git (`.git` and its
/// NTFS/HFS aliases; a symlink named `.gitmodules`).
fn rejected_name(name: &[u8], symlink: bool) -> bool {
    let opts = gix::validate::path::component::Options {
        protect_windows: false,
        protect_hfs: true,
        protect_ntfs: true,
    };
    let mode = symlink.then_some(gix::validate::path::component::Mode::Symlink);
    gix::validate::path::component(name.as_bstr(), mode, opts).is_err()
}

/// True when `path` cannot go into the export: `.git` at the root (never
/// recorded), or a component git rejects.
fn excluded(path: &[u8], symlink: bool) -> bool {
    if paths::is_excluded(path) {
        return true;
    }
    let mut parts = path.split(|&b| b == b'/').peekable();
    while let Some(c) = parts.next() {
        let last = parts.peek().is_none();
        if rejected_name(c, symlink && last) {
            return true;
        }
    }
    false
}

fn components(path: &[u8]) -> impl Iterator<Item = &BStr> {
    path.split(|&b| b == b'/').map(|c| c.as_bstr())
}

/// What one path becomes in a git tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitState {
    /// Nothing (absent, or a special file git cannot hold).
    Absent,
    /// A directory: its entries are paths of their own.
    Dir,
    /// A blob or symlink entry.
    Leaf(EntryKind, ObjectId),
}

/// An exclusive lock on the repository for the export's duration.
struct ExportLock {
    _file: File,
}

impl ExportLock {
    fn acquire(git_dir: &Path) -> Result<ExportLock, ExportError> {
        let path = git_dir.join("opfs-export.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        // SAFETY: valid fd; blocking flock, released when the file closes.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } < 0 {
            return Err(ExportError::Io {
                path,
                source: io::Error::last_os_error(),
            });
        }
        Ok(ExportLock { _file: file })
    }
}

struct Exporter<'a> {
    repo: &'a gix::Repository,
    git_dir: PathBuf,
    src: Sources<'a>,
    /// BLAKE3 of a recorded blob → its git blob id (a blob recorded in many
    /// turns is read once).
    known: HashMap<Hash, ObjectId>,
    objects: u64,
    skipped: Vec<String>,
}

impl Exporter<'_> {
    fn write_blob(&mut self, data: &[u8]) -> Result<ObjectId, ExportError> {
        self.objects += 1;
        let id = self
            .repo
            .write_blob(data)
            .map_err(git_err(&self.git_dir, "writing a blob"))?;
        Ok(id.detach())
    }

    /// The git state of a version (recorded or read from the project).
    fn git_state(&mut self, path: &[u8], v: &Version) -> Result<GitState, ExportError> {
        Ok(match &v.state {
            // Unknown: created outside the mount during the next turn; the
            // commit before it shows the path as absent, the next one shows
            // what the mount found.
            PreImage::Absent | PreImage::Unknown | PreImage::Special { .. } => GitState::Absent,
            // Put together by `Sources::timeline` before it gets here.
            PreImage::Ranged { .. } => {
                return Err(ExportError::Blob {
                    path: paths::display(path),
                    source: crate::store::BlobError::Missing(
                        "a file kept as ranges was not put together".into(),
                    ),
                })
            }
            PreImage::Dir { .. } => GitState::Dir,
            PreImage::Symlink { target } => {
                let id = self.write_blob(target)?;
                GitState::Leaf(EntryKind::Link, id)
            }
            PreImage::File { blob, perm, .. } => {
                let kind = if history::git_file_mode(*perm) == 0o100755 {
                    EntryKind::BlobExecutable
                } else {
                    EntryKind::Blob
                };
                let id = match (&v.bytes, self.known.get(blob)) {
                    (Some(bytes), _) => self.write_blob(bytes)?,
                    (None, Some(id)) => *id,
                    (None, None) => {
                        let data = self.src.blob(blob).map_err(|source| ExportError::Blob {
                            path: paths::display(path),
                            source,
                        })?;
                        self.write_blob(&data)?
                    }
                };
                self.known.insert(*blob, id);
                GitState::Leaf(kind, id)
            }
        })
    }

    fn apply(
        &mut self,
        editor: &mut gix::objs::tree::Editor<'_>,
        path: &[u8],
        state: GitState,
    ) -> Result<(), ExportError> {
        let symlink = matches!(state, GitState::Leaf(EntryKind::Link, _));
        if excluded(path, symlink) {
            if !matches!(state, GitState::Absent | GitState::Dir) {
                self.skipped.push(paths::display(path));
            }
            return Ok(());
        }
        let what = || format!("editing the tree at {}", paths::display(path));
        match state {
            GitState::Absent => {
                editor
                    .remove(components(path))
                    .map_err(git_err(&self.git_dir, what()))?;
            }
            GitState::Dir => {
                // A directory replaces whatever non-directory was there; its
                // entries (which have records of their own) stay.
                match editor.remove_leaf(components(path)) {
                    Ok(_) | Err(gix::objs::tree::editor::Error::CannotRemoveNonLeaf { .. }) => {}
                    Err(e) => return Err(git_err(&self.git_dir, what())(e)),
                }
            }
            GitState::Leaf(kind, id) => {
                editor
                    .upsert(components(path), kind, id)
                    .map_err(git_err(&self.git_dir, what()))?;
            }
        }
        Ok(())
    }

    fn write_tree(
        &mut self,
        editor: &mut gix::objs::tree::Editor<'_>,
    ) -> Result<ObjectId, ExportError> {
        let repo = self.repo;
        let mut n = 0u64;
        let id = editor
            .write(|tree| {
                n += 1;
                repo.write_object(tree).map(|id| id.detach())
            })
            .map_err(git_err(&self.git_dir, "writing trees"))?;
        self.objects += n;
        Ok(id)
    }

    fn commit(
        &mut self,
        tree: ObjectId,
        parent: Option<ObjectId>,
        message: String,
        time_ns: i64,
    ) -> Result<ObjectId, ExportError> {
        let sig = signature(time_ns);
        let commit = gix::objs::Commit {
            tree,
            parents: parent.into_iter().collect(),
            author: sig.clone(),
            committer: sig,
            encoding: None,
            message: message.into(),
            extra_headers: Vec::new(),
        };
        self.objects += 1;
        let id = self
            .repo
            .write_object(&commit)
            .map_err(git_err(&self.git_dir, "writing a commit"))?;
        Ok(id.detach())
    }

    fn set_refs(&self, names: &[&str], id: ObjectId, time_ns: i64) -> Result<(), ExportError> {
        let mut edits = Vec::new();
        for name in names {
            edits.push(RefEdit {
                change: Change::Update {
                    log: LogChange {
                        mode: RefLog::AndReference,
                        force_create_reflog: false,
                        message: "opfs export".into(),
                    },
                    expected: PreviousValue::Any,
                    new: Target::Object(id),
                },
                name: (*name)
                    .try_into()
                    .map_err(git_err(&self.git_dir, format!("ref name {name}")))?,
                deref: false,
            });
        }
        let sig = signature(time_ns);
        let mut buf = gix::date::parse::TimeBuf::default();
        self.repo
            .edit_references_as(edits, Some(sig.to_ref(&mut buf)))
            .map_err(git_err(&self.git_dir, "updating refs"))?;
        Ok(())
    }
}

fn signature(time_ns: i64) -> gix::actor::Signature {
    gix::actor::Signature {
        name: "opfs".into(),
        email: "opfs@localhost".into(),
        time: gix::date::Time {
            seconds: time_ns.div_euclid(1_000_000_000),
            offset: 0,
        },
    }
}

/// The commit message of a turn: `Turn N: label` (or `Turn N (kind)`),
/// then trailers naming the turn, its kind, id and rewind target.
fn turn_message(t: &Turn) -> String {
    let mut label_lines = t.label.as_deref().unwrap_or("").lines();
    let first = label_lines.next().unwrap_or("").trim();
    let mut m = if first.is_empty() {
        format!("Turn {} ({})", t.number, t.kind.as_str())
    } else {
        format!("Turn {}: {first}", t.number)
    };
    m.push_str("\n\n");
    let rest: Vec<&str> = label_lines.collect();
    if !rest.is_empty() {
        m.push_str(rest.join("\n").trim());
        m.push_str("\n\n");
    }
    m.push_str(&format!(
        "opfs-turn: {}\nopfs-kind: {}\n",
        t.number,
        t.kind.as_str()
    ));
    if let Some(id) = &t.external_id {
        m.push_str(&format!("opfs-id: {}\n", id.replace('\n', " ")));
    }
    if let Some(r) = t.rewound_to {
        m.push_str(&format!("opfs-rewound-to: {r}\n"));
    }
    m
}

/// The turn a commit of ours holds: `Some(n)` for `opfs-turn: n`,
/// `Some(f - 1)` for a baseline of turn f.
fn exported_turn(message: &[u8]) -> Option<u64> {
    for line in message.lines() {
        if let Some(n) = line.strip_prefix(b"opfs-turn: ") {
            return n.to_str().ok()?.trim().parse().ok();
        }
        if let Some(n) = line.strip_prefix(b"opfs-baseline: ") {
            let f: u64 = n.to_str().ok()?.trim().parse().ok()?;
            return Some(f.saturating_sub(1));
        }
    }
    None
}

/// Creates the bare repository at `git_dir` in a temporary sibling and
/// renames it into place, so two exports starting at once (the daemon's and
/// a manual one) cannot both initialize it: the loser finds it made.
fn init_atomically(git_dir: &Path) -> Result<(), ExportError> {
    let parent = git_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    let name = git_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "export.git".into());
    let tmp = parent.join(format!(".{name}.opfs-init-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    gix::init_bare(&tmp).map_err(git_err(git_dir, "creating the repository"))?;
    // rename(2) replaces an empty directory (one the user made for
    // --git-dir) and fails on a non-empty one (another export won).
    if let Err(e) = std::fs::rename(&tmp, git_dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        if !git_dir.join("HEAD").exists() {
            return Err(io_err(git_dir)(e));
        }
    }
    Ok(())
}

/// Opens (creating if needed) the bare repository at `git_dir`, marks it as
/// belonging to `project`, and refuses one made for another project.
fn open_repo(state: &StateDir, git_dir: &Path) -> Result<gix::Repository, ExportError> {
    let project = &state.project;
    // Resolve through the parent, which exists more often than the repo.
    let abs = match (git_dir.parent(), git_dir.file_name()) {
        (Some(p), Some(name)) if !p.as_os_str().is_empty() => crate::state::absolute(p).join(name),
        _ => crate::state::absolute(git_dir),
    };
    // Inside the project, or inside the mount (which writes to the project).
    let mountpoint = crate::control::recorded_mountpoint(state);
    if abs.starts_with(project) || mountpoint.is_some_and(|m| abs.starts_with(m)) {
        return Err(ExportError::InsideProject {
            git_dir: abs,
            project: project.to_path_buf(),
        });
    }
    if !git_dir.join("HEAD").exists() {
        init_atomically(git_dir)?;
    }
    let marker = git_dir.join("opfs-project");
    match std::fs::read(&marker) {
        Ok(other) if other != project.as_os_str().as_bytes() => {
            return Err(ExportError::Foreign {
                git_dir: git_dir.to_path_buf(),
                other: String::from_utf8_lossy(&other).into_owned(),
                project: project.to_path_buf(),
            })
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::write(&marker, project.as_os_str().as_bytes()).map_err(io_err(&marker))?;
        }
        Err(e) => return Err(io_err(&marker)(e)),
    }
    gix::open_opts(git_dir, gix::open::Options::isolated())
        .map_err(git_err(git_dir, "opening the repository"))
}

/// Exports `state`'s history into the bare repository `git_dir` (default:
/// [`default_git_dir`]): the baseline if missing, then every closed turn
/// not yet exported. The open turn is not exported (its end is unknown).
///
/// Works while a daemon runs: the index is read through its own
/// connection, the project directly (never through the mount, never its
/// `.git`). Concurrent exports into one repository are serialized by a lock
/// file in it.
///
/// After `Ok`, refs point at complete commits. After `Err`, the refs name
/// the last turn fully exported; objects written for a later turn may
/// remain unreferenced (a rerun writes the same ids and moves the refs).
///
/// `commit` makes every capture so far visible in the index; it is called
/// before records are re-read after reading the project (see `history`).
/// Outside the daemon pass [`crate::history::commit_through_daemon`].
pub fn export(
    state: &StateDir,
    git_dir: Option<&Path>,
    progress: &mut dyn FnMut(Progress),
    commit: &dyn Fn(),
) -> Result<ExportReport, ExportError> {
    let start = Instant::now();
    let git_dir = git_dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_git_dir(state));
    let repo = open_repo(state, &git_dir)?;
    let _lock = ExportLock::acquire(&git_dir)?;
    let index = Index::open_read_only(&state.index_path())?;
    let blobs = BlobStore::open(&state.blobs_dir(), false).map_err(|source| ExportError::Blob {
        path: state.blobs_dir().display().to_string(),
        source,
    })?;
    let backing = Backing::open(&state.project).map_err(|source| ExportError::Project {
        path: state.project.display().to_string(),
        source,
    })?;
    let resolved = crate::view::Resolved::default();
    let src = Sources {
        index: &index,
        blobs: &blobs,
        backing: &backing,
        commit,
        resolved: &resolved,
    };
    let mut ex = Exporter {
        repo: &repo,
        git_dir: git_dir.clone(),
        src,
        known: HashMap::new(),
        objects: 0,
        skipped: Vec::new(),
    };
    let mut report = ExportReport {
        git_dir: git_dir.clone(),
        baseline: false,
        baseline_entries: 0,
        turns: Vec::new(),
        last_turn: None,
        objects: 0,
        skipped: Vec::new(),
        elapsed_ms: 0,
    };
    let Some(first) = index.first_turn()? else {
        return Ok(report);
    };

    // Where the export stands: the branch tip and the turn it holds.
    let tip = repo
        .try_find_reference(BRANCH)
        .map_err(git_err(&git_dir, "reading refs/heads/opfs"))?
        .and_then(|r| r.try_id().map(|id| id.detach()));
    let (mut parent, mut tree, mut last) = match tip {
        Some(id) => {
            let commit = repo
                .find_commit(id)
                .map_err(git_err(&git_dir, "reading the branch tip"))?;
            let msg = commit
                .message_raw()
                .map_err(git_err(&git_dir, "reading the branch tip"))?
                .to_vec();
            let tree = commit
                .tree_id()
                .map_err(git_err(&git_dir, "reading the branch tip"))?
                .detach();
            let last = exported_turn(&msg).ok_or_else(|| ExportError::Git {
                git_dir: git_dir.clone(),
                what: format!("{BRANCH} does not point at an opfs commit"),
                source: "no opfs-turn trailer".into(),
            })?;
            (id, tree, last)
        }
        None => {
            let (id, tree, entries) = baseline(&mut ex, first, progress)?;
            report.baseline = true;
            report.baseline_entries = entries;
            (id, tree, first - 1)
        }
    };

    let closed: Vec<Turn> = {
        let mut t: Vec<Turn> = index
            .turns(None)?
            .into_iter()
            .filter(|t| t.ended_at.is_some() && t.number > last)
            .collect();
        t.sort_by_key(|t| t.number);
        t
    };
    if let Some(newest) = closed.last().map(|t| t.number) {
        // Current states first, records after (see `history`): a path read
        // here that has a newer record by the second load is taken from
        // that record instead.
        let before = Timeline::load(&index, last + 1)?;
        let mut current: HashMap<Vec<u8>, GitState> = HashMap::new();
        for p in before.paths_in(last + 1, newest) {
            if before.state_at(&p, newest + 1).is_none() && !excluded(&p, false) {
                let v = crate::view::current::read_version(&backing, &p).map_err(|source| {
                    ExportError::Project {
                        path: paths::display(&p),
                        source,
                    }
                })?;
                let g = ex.git_state(&p, &v)?;
                current.insert(p, g);
            }
        }
        (src.commit)();
        let timeline = src.timeline(last + 1)?;
        let by_turn = timeline.by_turn();
        let mut editor = repo
            .edit_tree(tree)
            .map_err(git_err(&git_dir, "loading the previous tree"))?
            .detach();
        for t in &closed {
            for p in by_turn.get(&t.number).map(Vec::as_slice).unwrap_or(&[]) {
                let g = match timeline.state_at(p, t.number + 1) {
                    Some(pre) => ex.git_state(
                        p,
                        &Version {
                            state: pre.clone(),
                            bytes: None,
                        },
                    )?,
                    None => match current.get(p) {
                        Some(g) => *g,
                        None => {
                            let v = crate::view::current::read_version(&backing, p).map_err(
                                |source| ExportError::Project {
                                    path: paths::display(p),
                                    source,
                                },
                            )?;
                            ex.git_state(p, &v)?
                        }
                    },
                };
                ex.apply(&mut editor, p, g)?;
            }
            tree = ex.write_tree(&mut editor)?;
            let time = t.ended_at.unwrap_or(t.started_at);
            let id = ex.commit(tree, Some(parent), turn_message(t), time)?;
            let turn_ref = format!("{TURN_REF_PREFIX}{}", t.number);
            ex.set_refs(&[&turn_ref, BRANCH], id, time)?;
            parent = id;
            last = t.number;
            report.turns.push(t.number);
            progress(Progress::Turn { turn: t.number });
        }
    }
    report.last_turn = (last >= first).then_some(last);
    report.objects = ex.objects;
    report.skipped = std::mem::take(&mut ex.skipped);
    report.elapsed_ms = start.elapsed().as_millis() as u64;
    Ok(report)
}

/// Writes the baseline commit: the project as it was when turn `first`
/// began. One walk of the project (paths with records are taken from their
/// earliest record instead), then the records applied on top, loaded after
/// the walk so that nothing the agent changed during the walk leaks in.
/// Returns (commit, tree, entries walked).
fn baseline(
    ex: &mut Exporter<'_>,
    first: u64,
    progress: &mut dyn FnMut(Progress),
) -> Result<(ObjectId, ObjectId, u64), ExportError> {
    let git_dir = ex.git_dir.clone();
    let repo = ex.repo;
    let recorded = Timeline::load(ex.src.index, first)?;
    let mut editor = repo
        .edit_tree(ObjectId::empty_tree(gix::hash::Kind::Sha1))
        .map_err(git_err(&git_dir, "starting the baseline tree"))?
        .detach();
    let mut entries = 0u64;
    let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(dir) = stack.pop() {
        let mut names = ex
            .src
            .backing
            .list_dir(&dir)
            .map_err(|source| ExportError::Project {
                path: paths::display(&dir),
                source,
            })?;
        names.sort();
        for name in names {
            let p = paths::join(&dir, &name);
            if paths::is_excluded(&p) {
                continue;
            }
            let rec = recorded.state_at(&p, first);
            let v = match rec {
                // Taken from the records after the walk.
                Some(pre) if !pre.is_dir() => continue,
                _ => match crate::view::current::read_version(ex.src.backing, &p) {
                    Ok(v) => v,
                    // Removed during the walk: its record (made before the
                    // removal) is applied below.
                    Err(e) if crate::backing::is_not_found(&e) => continue,
                    Err(source) => {
                        return Err(ExportError::Project {
                            path: paths::display(&p),
                            source,
                        })
                    }
                },
            };
            entries += 1;
            if entries % 1000 == 0 {
                progress(Progress::Baseline { entries });
            }
            if v.state.is_dir() {
                if !excluded(&p, false) {
                    stack.push(p);
                }
                continue;
            }
            if rec.is_some() {
                continue;
            }
            let g = ex.git_state(&p, &v)?;
            ex.apply(&mut editor, &p, g)?;
        }
    }
    progress(Progress::Baseline { entries });
    (ex.src.commit)();
    let after = ex.src.timeline(first)?;
    for (p, _) in after.iter() {
        if let Some(pre) = after.state_at(p, first) {
            let g = ex.git_state(
                p,
                &Version {
                    state: pre.clone(),
                    bytes: None,
                },
            )?;
            ex.apply(&mut editor, p, g)?;
        }
    }
    let tree = ex.write_tree(&mut editor)?;
    let started = ex.src.index.turn(first)?.map(|t| t.started_at).unwrap_or(0);
    let message = format!(
        "Baseline: the project as first seen\n\nThe project when turn {first} began.\n\nopfs-baseline: {first}\n"
    );
    let id = ex.commit(tree, None, message, started)?;
    ex.set_refs(&[BASELINE_REF, BRANCH], id, started)?;
    // HEAD names the branch, so `git --git-dir=... log` shows the history.
    let head = RefEdit {
        change: Change::Update {
            log: LogChange::default(),
            expected: PreviousValue::Any,
            new: Target::Symbolic(BRANCH.try_into().map_err(git_err(&git_dir, "ref name"))?),
        },
        name: "HEAD".try_into().map_err(git_err(&git_dir, "ref name"))?,
        deref: false,
    };
    let sig = signature(started);
    let mut buf = gix::date::parse::TimeBuf::default();
    repo.edit_references_as(Some(head), Some(sig.to_ref(&mut buf)))
        .map_err(git_err(&git_dir, "pointing HEAD at refs/heads/opfs"))?;
    Ok((id, tree, entries))
}

/// Starts the background exporter of a daemon: a thread that exports
/// `state`'s history into the default repository each time it is woken
/// through the returned sender (wake-ups arriving during an export are
/// merged into one more run). Failures are logged, never returned: the
/// export must not slow down or fail the request that closed the turn.
///
/// `commit` is the daemon's group commit of its capture log: it runs
/// before every export and wherever the export re-reads records.
///
/// The thread ends when every sender is dropped.
pub fn spawn_background(
    state: StateDir,
    commit: Box<dyn Fn() + Send>,
) -> crossbeam_channel::Sender<()> {
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    let spawned = std::thread::Builder::new()
        .name("opfs-export".into())
        .spawn(move || {
            for () in rx {
                commit();
                match export(&state, None, &mut |_| {}, &*commit) {
                    Ok(r) if r.baseline || !r.turns.is_empty() => log::info!(
                        "exported {} turn(s){} to {} in {} ms",
                        r.turns.len(),
                        if r.baseline { " and the baseline" } else { "" },
                        r.git_dir.display(),
                        r.elapsed_ms
                    ),
                    Ok(_) => {}
                    Err(e) => log::warn!("background export failed: {e}"),
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("cannot start the background exporter: {e}");
    }
    tx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_git_and_aliases_are_excluded() {
        assert!(excluded(b".git", false));
        assert!(excluded(b"sub/.git/config", false));
        assert!(excluded(b"sub/.GIT", false));
        assert!(excluded(b"git~1/x", false));
        assert!(excluded(b".gitmodules", true));
        assert!(!excluded(b".gitmodules", false));
        assert!(!excluded(b".github/workflows/x", false));
        assert!(!excluded(b"caf\xe9", false));
    }

    #[test]
    fn trailers_round_trip() {
        assert_eq!(
            exported_turn(b"Turn 3: x\n\nopfs-turn: 3\nopfs-kind: agent\n"),
            Some(3)
        );
        assert_eq!(exported_turn(b"Baseline\n\nopfs-baseline: 1\n"), Some(0));
        assert_eq!(exported_turn(b"something else"), None);
    }
}
