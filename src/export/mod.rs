//! The shadow git export (design §8): the history as a bare git repository,
//! written with gix, outside the project.
//!
//! Layout (see `docs/export.md`): a baseline commit holding the project as
//! first seen (the start of the oldest turn kept), then one commit per
//! closed turn whose tree is the project at the end of that turn;
//! `refs/opfs/baseline`, `refs/opfs/turns/<N>` per turn, and the branch
//! `refs/heads/opfs` (which `HEAD` names) at the newest exported turn;
//! each worktree's history as `refs/opfs/worktrees/<NAME>` (`branch`).
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
//!
//! The pieces: [`export`] (this file) runs the steps; `repo` opens the
//! repository, `lock` serializes runs, `baseline` writes the first commit,
//! `tree_edit` the commit of each turn, `commit` the commits, messages and
//! refs; `ignore` the project's ignore rules; `prune` takes dropped turns
//! out and packs ([`prune`]); [`spawn_background`] is the daemon's
//! exporter thread.
//!
//! The export reads the index, the blob store and the project (through
//! `history`'s sources); it never talks to a daemon. A caller that runs
//! beside one passes its group commit as `commit`.

mod background;
mod baseline;
mod branch;
mod commit;
pub mod ignore;
mod lock;
mod prune;
mod regenerable;
mod relabel;
mod repo;
mod tree_edit;

pub use background::{spawn_background, spawn_background_then, spawn_worker, Pending, Worker};
pub use branch::{
    branch_ref, delete_branch, export_branch, BranchReport, BranchSource, BranchSpec,
    WORKTREE_REF_PREFIX,
};
pub use prune::{hold, prune, prune_held, ExportHold, Packed, PruneReport, AUTO_PACK_LOOSE};
pub use regenerable::{regenerable, regenerable_ignored, Regenerable, REGENERABLE};
pub use tree_edit::{pointer, POINTER_MAGIC, POINTER_MIN};

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use gix::ObjectId;
use serde::Serialize;

use crate::history::{self, HistoryError, Sources};
use crate::record::Hash;
use crate::record::PreImage;
use crate::record::Turn;
use crate::store::StateDir;
use crate::store::{BlobError, Index, IndexError};
use crate::view::ViewError;

use ignore::IgnoreRules;
use lock::ExportLock;

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
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file of the repository or state dir could not be used.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
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
    /// Retention (`opfs gc`) dropped turns the export was reading (turns
    /// `from` to `to`), so what it read may mix states from before and
    /// after the drop: nothing of it was committed to a ref. [`export`]
    /// starts over by itself (a few times), so callers see this only when
    /// gc keeps dropping turns under it; running the export again is the
    /// fix.
    #[error(
        "turns {from} to {to} were dropped by gc while the export read them; run the export again"
    )]
    Dropped {
        /// The first turn dropped under the export.
        from: u64,
        /// The last.
        to: u64,
    },
    /// Reading the history or the project failed: the project directory
    /// or the blob store cannot be opened ([`HistoryError::OpenProject`],
    /// [`HistoryError::OpenBlobs`]), a path in the project cannot be read,
    /// a recorded blob is missing or corrupt, a file kept as ranges cannot
    /// be put together, or the index failed (all [`HistoryError::Read`]).
    #[error(transparent)]
    History(#[from] HistoryError),
}

impl From<IndexError> for ExportError {
    fn from(e: IndexError) -> ExportError {
        ExportError::History(HistoryError::from(e))
    }
}

impl From<ViewError> for ExportError {
    fn from(e: ViewError) -> ExportError {
        ExportError::History(HistoryError::from(e))
    }
}

/// Adds the repository and the step being done to a gix failure
/// ([`ExportError::Git`]).
trait GitContext<T> {
    /// `what`: the step, e.g. "writing a blob".
    fn git(self, git_dir: &Path, what: &str) -> Result<T, ExportError>;
    /// As [`GitContext::git`], the step described only on failure.
    fn git_with(self, git_dir: &Path, what: impl FnOnce() -> String) -> Result<T, ExportError>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> GitContext<T> for Result<T, E> {
    fn git(self, git_dir: &Path, what: &str) -> Result<T, ExportError> {
        self.git_with(git_dir, || what.to_owned())
    }

    fn git_with(self, git_dir: &Path, what: impl FnOnce() -> String) -> Result<T, ExportError> {
        self.map_err(|e| ExportError::Git {
            git_dir: git_dir.to_path_buf(),
            what: what(),
            source: Box::new(e),
        })
    }
}

/// Adds the file to an I/O failure on the repository or the state dir
/// ([`ExportError::Io`]).
trait IoContext<T> {
    fn at(self, path: &Path) -> Result<T, ExportError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T, ExportError> {
        self.map_err(|source| ExportError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Adds the project-relative path to a failure reading the project
/// ([`ViewError::Project`], in [`ExportError::History`]).
trait ProjectContext<T> {
    fn in_project(self, path: &[u8]) -> Result<T, ExportError>;
}

impl<T> ProjectContext<T> for io::Result<T> {
    fn in_project(self, path: &[u8]) -> Result<T, ExportError> {
        self.map_err(|source| {
            ViewError::Project {
                path: path.to_vec(),
                source,
            }
            .into()
        })
    }
}

/// Adds the project-relative path to a failure reading its recorded
/// content ([`ViewError::Blob`], in [`ExportError::History`]).
trait BlobContext<T> {
    fn blob_of(self, path: &[u8]) -> Result<T, ExportError>;
}

impl<T> BlobContext<T> for Result<T, BlobError> {
    fn blob_of(self, path: &[u8]) -> Result<T, ExportError> {
        self.map_err(|source| {
            ViewError::Blob {
                path: path.to_vec(),
                source,
            }
            .into()
        })
    }
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
    /// Turns exported before whose label changed since (`opfs label`):
    /// their commits were written again with the new message, oldest
    /// first.
    pub relabelled: Vec<u64>,
    /// The newest turn in the export after this run (`None`: only the
    /// baseline, or nothing).
    pub last_turn: Option<u64>,
    /// Git objects handed to the object database (blobs, trees, commits);
    /// ones already present are not written again.
    pub objects: u64,
    /// Paths left out because git cannot hold them (see `docs/export.md`).
    pub skipped: Vec<String>,
    /// Entries left out because the project's ignore rules ignore them
    /// (an ignored directory counts once; its contents are not read).
    pub ignored: u64,
    /// Whether this run followed the ignore rules (false: the repository
    /// exports ignored paths too, see [`ExportOptions::export_ignored`]).
    pub follows_ignore_rules: bool,
    /// Whether `git gc --auto` ran afterwards ([`Packed::No`] when nothing
    /// was written).
    pub packed: Packed,
    /// Wall time in ms.
    pub elapsed_ms: u64,
}

/// Choices for one export run.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// `Some(true)`: export ignored paths too; `Some(false)`: follow the
    /// project's ignore rules (the default). The choice is recorded in the
    /// repository (the file `opfs-export-ignored` in the git dir, present
    /// when on), so later runs, the daemon's included, keep it; it applies
    /// from the next path each turn changes (see `docs/export.md`). `None`
    /// keeps the recorded choice.
    pub export_ignored: Option<bool>,
}

/// The marker file that says a repository exports ignored paths too.
const EXPORT_IGNORED_MARKER: &str = "opfs-export-ignored";

/// The default repository: `export.git` in the project's state dir.
pub fn default_git_dir(state: &StateDir) -> PathBuf {
    state.export_dir()
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
/// Nothing is fsynced: the export can always be rebuilt.
///
/// `commit` makes every capture so far visible in the index; it is called
/// before records are re-read after reading the project (see `history`).
/// Outside the daemon pass [`crate::control::client::commit_through_daemon`].
///
/// Errors: [`ExportError::InsideProject`] / [`ExportError::Foreign`] for a
/// repository that is not this project's to use; [`ExportError::Git`] /
/// [`ExportError::Io`] when the repository cannot be written;
/// [`ExportError::History`] when the history or the project cannot be
/// read.
pub fn export(
    state: &StateDir,
    git_dir: Option<&Path>,
    progress: &mut dyn FnMut(Progress),
    commit: &dyn Fn(),
) -> Result<ExportReport, ExportError> {
    export_with(state, git_dir, &ExportOptions::default(), progress, commit)
}

/// [`export`] with `options` (see [`ExportOptions`]). Errors as
/// [`export`], and [`ExportError::Io`] when the choice of
/// [`ExportOptions::export_ignored`] cannot be recorded.
pub fn export_with(
    state: &StateDir,
    git_dir: Option<&Path>,
    options: &ExportOptions,
    progress: &mut dyn FnMut(Progress),
    commit: &dyn Fn(),
) -> Result<ExportReport, ExportError> {
    export_in(
        state,
        git_dir,
        options,
        progress,
        commit,
        &mut Warm::default(),
    )
}

/// What a long-lived exporter (the daemon's background export thread)
/// keeps between runs (`docs/design.md` "The export keeps its repository
/// open").
#[derive(Default)]
pub(super) struct Warm {
    /// The repository handle, while still valid ([`repo::Kept`]).
    kept: Option<repo::Kept>,
    /// The read-only connection to the index, after a run that succeeded.
    index: Option<Index>,
    /// The trees the export wrote ([`repo::Trees`]).
    trees: repo::Trees,
    /// The commits the export read or wrote, decoded (see `relabel`),
    /// kept whether or not the handle is: of the repository `commits_of`.
    commits: CommitCache,
    commits_of: PathBuf,
}

/// Above this many decoded commits the cache of [`Warm`] starts over.
const MAX_CACHED_COMMITS: usize = 100_000;

/// [`export_with`] through what the previous run left in `warm` (the
/// background exporter's): the repository handle ([`repo::Kept`]), used
/// when still valid and left for the next run after a run that
/// succeeded; likewise the read-only connection to the index; and the
/// trees the export wrote ([`repo::Trees`]) (`docs/design.md` "The
/// export keeps its repository open"). Errors as [`export_with`].
fn export_in(
    state: &StateDir,
    git_dir: Option<&Path>,
    options: &ExportOptions,
    progress: &mut dyn FnMut(Progress),
    commit: &dyn Fn(),
    warm: &mut Warm,
) -> Result<ExportReport, ExportError> {
    let start = Instant::now();
    let git_dir = git_dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_git_dir(state));
    repo::prepare(state, &git_dir)?;
    let lock = ExportLock::acquire(&git_dir)?;
    let (repo, stamp) = repo::Kept::take(warm.kept.take(), &git_dir)?;
    // Commits never change under their id; the cache is of one
    // repository, and bounded.
    if warm.commits_of != git_dir || warm.commits.len() > MAX_CACHED_COMMITS {
        warm.commits.clear();
        warm.commits_of.clone_from(&git_dir);
    }
    let trees = repo::TreeSource {
        trees: &warm.trees,
        objects: &repo.objects,
    };
    let report = export_locked(
        state,
        (&git_dir, &lock),
        (&repo, &trees),
        (&mut warm.commits, &mut warm.index),
        options,
        progress,
        commit,
        start,
    )?;
    warm.kept = repo::Kept::keep(&git_dir, repo, stamp);
    Ok(report)
}

/// The body of [`export_in`], under the export lock, with the repository
/// open; `commits` is the cache of decoded commits and `index` the index
/// connection kept from an earlier run, each taken and given back (the
/// connection only after a run that succeeded).
#[allow(clippy::too_many_arguments)]
fn export_locked(
    state: &StateDir,
    (git_dir, lock): (&Path, &ExportLock),
    repo: (&gix::Repository, &repo::TreeSource<'_>),
    (commits, index): (&mut CommitCache, &mut Option<Index>),
    options: &ExportOptions,
    progress: &mut dyn FnMut(Progress),
    commit: &dyn Fn(),
    start: Instant,
) -> Result<ExportReport, ExportError> {
    let opened = history::Opened::open_with(state, index.take(), Box::new(commit))?;
    let report = export_opened(
        state,
        (git_dir, lock),
        repo,
        commits,
        &opened,
        options,
        progress,
        start,
    );
    if report.is_ok() {
        *index = Some(opened.into_index());
    }
    report
}

/// [`export_locked`] with the history `opened`.
#[allow(clippy::too_many_arguments)]
fn export_opened(
    state: &StateDir,
    (git_dir, lock): (&Path, &ExportLock),
    (repo, trees): (&gix::Repository, &repo::TreeSource<'_>),
    commits: &mut CommitCache,
    opened: &history::Opened<'_>,
    options: &ExportOptions,
    progress: &mut dyn FnMut(Progress),
    start: Instant,
) -> Result<ExportReport, ExportError> {
    let git_dir = git_dir.to_path_buf();
    let marker = git_dir.join(EXPORT_IGNORED_MARKER);
    match options.export_ignored {
        Some(true) => std::fs::write(&marker, b"").at(&marker)?,
        Some(false) => match std::fs::remove_file(&marker) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e).at(&marker),
            _ => {}
        },
        None => {}
    }
    let export_ignored = marker.exists();
    let src = opened.sources();
    let mut ex = Exporter::new(repo, &git_dir, src, trees);
    ex.commits = std::mem::take(commits);
    if !export_ignored {
        ex.ignore = Some(IgnoreRules::load(src.backing));
    }
    // Like an ignore file, a list that cannot be read never stops an export.
    ex.exclude = state.record_exclude().unwrap_or_else(|e| {
        log::warn!("{e}");
        crate::paths::Exclude::none()
    });
    let mut report = ExportReport::empty(git_dir.clone());
    report.follows_ignore_rules = !export_ignored;
    // A gc that began before this repository existed does not wait for
    // it (there was no lock to take): when it drops turns the export is
    // reading, the run starts over from what is kept.
    let mut attempts = 0;
    let (first, tip, turns) = loop {
        attempts += 1;
        match bring_up_to_date(&mut ex, &mut report, progress) {
            Err(ExportError::Dropped { from, to }) if attempts < 4 => {
                log::info!(
                    "turns {from} to {to} were dropped by gc under the export: starting over"
                );
            }
            Err(e) => {
                // What this run wrote is unreachable (no ref moved to it):
                // a failed export (a full disk) cleans up after itself
                // rather than leave megabytes of loose objects behind.
                prune::drop_unreachable(&git_dir, lock);
                *commits = std::mem::take(&mut ex.commits);
                return Err(e);
            }
            Ok(None) => {
                *commits = std::mem::take(&mut ex.commits);
                return Ok(report);
            }
            Ok(Some(done)) => break done,
        }
    };
    // Given back for the next run (an id names its content: also what a
    // failed run read or wrote).
    *commits = std::mem::take(&mut ex.commits);
    report.turns = turns;
    if report.baseline {
        // The baseline is most of the objects the export will ever hold:
        // packed at once.
        report.packed = prune::pack(&git_dir, lock, false);
    } else if ex.objects > 0 {
        // Turns: once there are enough loose objects (git's `gc --auto`).
        report.packed = prune::pack(&git_dir, lock, true);
    }
    report.last_turn = (tip.turn >= first).then_some(tip.turn);
    report.objects = ex.objects;
    report.skipped = std::mem::take(&mut ex.skipped);
    report.ignored = ex.ignored;
    report.elapsed_ms = start.elapsed().as_millis() as u64;
    Ok(report)
}

impl ExportReport {
    /// The report of a run that did nothing (yet).
    fn empty(git_dir: PathBuf) -> ExportReport {
        ExportReport {
            git_dir,
            baseline: false,
            baseline_entries: 0,
            turns: Vec::new(),
            relabelled: Vec::new(),
            last_turn: None,
            objects: 0,
            skipped: Vec::new(),
            ignored: 0,
            follows_ignore_rules: true,
            packed: Packed::No,
            elapsed_ms: 0,
        }
    }
}

/// The baseline if there is none, then every closed turn not exported:
/// the oldest turn kept, the new tip and the turns exported. `None` when
/// no turn exists yet. An export whose tip is older than the turn before
/// the oldest kept one (turns dropped by gc before they were exported: a
/// `--git-dir` repository gc does not prune, or a gc that ran under the
/// first export) starts over with a new baseline, the old turns' refs
/// deleted.
///
/// Errors: as [`export`]; [`ExportError::Dropped`] when gc dropped turns
/// while they were read (no ref was moved for them).
fn bring_up_to_date(
    ex: &mut Exporter<'_>,
    report: &mut ExportReport,
    progress: &mut dyn FnMut(Progress),
) -> Result<Option<(u64, commit::Tip, Vec<u64>)>, ExportError> {
    let Some(first) = ex.src.index.first_turn()? else {
        return Ok(None);
    };
    let tip = match commit::branch_tip(ex.repo, &ex.git_dir, &mut ex.commits)? {
        Some(tip) if tip.turn + 1 < first => {
            log::info!(
                "{}: turns {} to {} were dropped before they were exported: a new baseline",
                ex.git_dir.display(),
                tip.turn + 1,
                first - 1
            );
            prune::delete_turn_refs_before(ex.repo, &ex.git_dir, first)?;
            None
        }
        tip => tip,
    };
    let tip = match tip {
        Some(tip) => {
            let (tip, relabelled) = relabel::relabel(ex, tip)?;
            report.relabelled = relabelled;
            tip
        }
        None => {
            let b = baseline::write(ex, first, progress)?;
            report.baseline = true;
            report.baseline_entries = b.entries;
            b.tip
        }
    };
    let closed = closed_after(ex.src.index, tip.turn)?;
    crate::failpoint::failpoint("export-before-turns");
    let (tip, turns) = tree_edit::export_turns(ex, tip, &closed, progress)?;
    Ok(Some((first, tip, turns)))
}

/// Fails with [`ExportError::Dropped`] when the oldest turn kept is now
/// after `needed`: records of turns from `needed` on that a caller loaded
/// may have been deleted under it. gc deletes a turn's records and its row
/// in one transaction, oldest turns first, so when turn `needed` still
/// exists after a load, every record the load looked for was there.
///
/// Errors: also the index.
fn check_kept(ex: &Exporter<'_>, needed: u64) -> Result<(), ExportError> {
    match ex.src.index.first_turn()? {
        Some(first) if first > needed => Err(ExportError::Dropped {
            from: needed,
            to: first - 1,
        }),
        _ => Ok(()),
    }
}

/// The closed turns after `last`, oldest first.
fn closed_after(index: &Index, last: u64) -> Result<Vec<Turn>, ExportError> {
    let mut closed: Vec<Turn> = index
        .turns(None)?
        .into_iter()
        .filter(|t| t.ended_at.is_some() && t.number > last)
        .collect();
    closed.sort_by_key(|t| t.number);
    Ok(closed)
}

/// One export run: the repository being written and what it reads.
struct Exporter<'a> {
    repo: &'a gix::Repository,
    git_dir: PathBuf,
    src: Sources<'a>,
    /// BLAKE3 of a recorded blob → its git blob id (a blob recorded in many
    /// turns is read once).
    known: HashMap<Hash, ObjectId>,
    /// Commits read so far, decoded, by id (see [`repo::Kept`]).
    commits: CommitCache,
    /// Where tree edits read trees: those the export wrote, remembered
    /// (see [`repo::Trees`]), else the repository.
    trees: &'a repo::TreeSource<'a>,
    /// Objects handed to the object database so far.
    objects: u64,
    /// Paths left out (see [`ExportReport::skipped`]).
    skipped: Vec<String>,
    /// The project's ignore rules, unless ignored paths are exported too.
    ignore: Option<IgnoreRules<'a>>,
    /// Entries left out by them (see [`ExportReport::ignored`]).
    ignored: u64,
    /// Where the bytes of a file state come from when they are not in the
    /// project's store (a branch's history: `branch`); `None`: the store.
    fetch: Option<&'a Fetch<'a>>,
    /// The `[record] exclude` list in effect: paths with no history are
    /// left out whatever `--export-ignored` says (`docs/design.md`
    /// "Excluded paths").
    exclude: crate::paths::Exclude,
}

/// Decoded commits by id.
type CommitCache = HashMap<ObjectId, gix::objs::Commit>;

/// Reads the bytes of a file state at a path (see [`Exporter`]'s `fetch`).
type Fetch<'a> = dyn Fn(&[u8], &PreImage) -> Result<Vec<u8>, ExportError> + 'a;

impl<'a> Exporter<'a> {
    fn new(
        repo: &'a gix::Repository,
        git_dir: &Path,
        src: Sources<'a>,
        trees: &'a repo::TreeSource<'a>,
    ) -> Exporter<'a> {
        Exporter {
            repo,
            trees,
            git_dir: git_dir.to_path_buf(),
            src,
            known: HashMap::new(),
            commits: CommitCache::new(),
            objects: 0,
            skipped: Vec::new(),
            ignore: None,
            ignored: 0,
            fetch: None,
            exclude: crate::paths::Exclude::none(),
        }
    }

    /// An editor of the tree `id`, reading trees through [`Exporter`]'s
    /// `trees` (those the last runs wrote are not read back).
    pub(super) fn edit_tree(
        &self,
        id: ObjectId,
    ) -> Result<gix::objs::tree::Editor<'a>, ExportError> {
        let source: &'a repo::TreeSource<'a> = self.trees;
        let root = if id == ObjectId::empty_tree(id.kind()) {
            // As gix reads it: whether or not the repository holds it.
            gix::objs::Tree::empty()
        } else {
            let mut buf = Vec::new();
            gix::objs::FindExt::find_tree(source, &id, &mut buf)
                .git(&self.git_dir, "loading the previous tree")?
                .to_owned()
        };
        Ok(gix::objs::tree::Editor::new(
            root,
            source,
            self.repo.object_hash(),
        ))
    }

    /// True when the ignore rules (if followed) leave `path` out of the
    /// export; `is_dir`: it is a directory.
    fn ignored(&mut self, path: &[u8], is_dir: bool) -> bool {
        if self.exclude.excludes(path) {
            return true;
        }
        match &mut self.ignore {
            Some(rules) => rules.is_ignored(path, is_dir),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::error::Error as _;

    #[test]
    fn errors_name_their_path_and_keep_their_source() {
        let denied = || io::Error::from_raw_os_error(libc::EACCES);
        let e = Err::<(), _>(denied()).in_project(b"d/caf\xe9").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot read d/caf\\xe9 in the project: {}", denied())
        );
        assert!(e.source().is_some());

        let e = Err::<(), _>(denied())
            .at(Path::new("/g/opfs-export.lock"))
            .unwrap_err();
        assert_eq!(e.to_string(), format!("/g/opfs-export.lock: {}", denied()));
        assert!(e.source().is_some());

        let e = Err::<(), _>(denied())
            .git(Path::new("/g"), "writing a blob")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("git repository /g: writing a blob: {}", denied())
        );
        assert!(e.source().is_some());
    }
}
