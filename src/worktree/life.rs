//! A worktree's life: `opfs worktree create|mount|discard|list|diff`,
//! its branch of the export, and the base the history commands show a
//! worktree's own history through.
//!
//! A worktree is served by a daemon of its own (the same `opfs mount`
//! process as a project's, with the overlay instead of the passthrough:
//! `daemon::worktree`), whose journal records the upper layer, so the
//! worktree has turns and rewinds of its own. The daemons live above this
//! layer: what a worktree's life asks of them (commit a project's pending
//! records, open a project turn, start or stop a worktree's daemon, tell
//! whether one answers) goes through [`Daemons`], [`Spawner`] and
//! [`ProjectTurns`], which `daemon::worktree` implements (the last for
//! `control::client::Project`). The lock that keeps gc from dropping a new
//! worktree's base is [`crate::state::lock::PinsLock`], below both gc and
//! this module.

use std::path::{Path, PathBuf};

use crate::state::lock::{PinsLock, PinsLockError};
use crate::state::mountinfo;
use crate::store::{index::now_ns, Index, IndexError, StateDir};
use crate::view::{check_turn, TurnError};

use super::base::{read_drift, Base, BaseError};
use super::{check_new_name, Creator, Meta, Worktree, WorktreeError};

/// Why a daemon did not do what a worktree's life asked of it: the
/// daemon's own error (talking to it, refusing the mount, not starting),
/// whose message says what happened.
pub type DaemonError = Box<dyn std::error::Error + Send + Sync>;

/// What a worktree's life asks of the running daemons, which live above
/// this layer (implemented by `daemon::worktree::Asked` and `Served`).
pub trait Daemons {
    /// The function that asks the daemon serving a state dir, if one
    /// runs, to commit the records pending in its capture log, ignoring
    /// every error (`control::client::commit_through_daemon`): the
    /// `commit` seam of [`Base::open`] and of the history readers. A plain
    /// function, because a base keeps it as long as it lives.
    fn commit(&self) -> fn(&StateDir);

    /// True while a daemon answers a status request on `state`'s control
    /// socket.
    fn answers(&self, state: &StateDir) -> bool;
}

/// [`Daemons`] that can also start and stop a worktree's daemon
/// (implemented by `daemon::worktree::Served`).
pub trait Spawner: Daemons {
    /// Starts the daemon of worktree `name` of `project`, serving its
    /// upper layer `upper` at `mountpoint`; returns the daemon's pid once
    /// the mount is ready.
    ///
    /// Errors: the mount is refused (already mounted, busy mountpoint) or
    /// the daemon did not start; nothing is left mounted then.
    fn start(
        &self,
        project: &StateDir,
        name: &str,
        upper: &Path,
        mountpoint: &Path,
    ) -> Result<u32, DaemonError>;

    /// Stops the daemon serving `state` at `mountpoint`: asks it to
    /// unmount and waits for it (at most 30 s).
    ///
    /// Errors: the daemon refused (a process still uses the mount), is
    /// frozen, or did not stop in time; the message names the mountpoint.
    fn stop(&self, state: &StateDir, mountpoint: &Path) -> Result<(), DaemonError>;
}

/// What making a worktree asks of its project: its daemon if one
/// answers, else the state dir directly (implemented by
/// `control::client::Project`).
pub trait ProjectTurns {
    /// The project's state dir.
    fn state(&self) -> &StateDir;

    /// Makes the records pending in the project's capture log visible in
    /// its index.
    ///
    /// Errors: the daemon did not answer, or the direct commit failed.
    fn commit_pending(&self) -> Result<(), DaemonError>;

    /// Closes the project's open turn and opens a new one labelled
    /// `label`; returns its number.
    ///
    /// Errors: the daemon refused or did not answer, or the direct turn
    /// switch failed.
    fn open_turn(&self, label: &str) -> Result<u64, DaemonError>;
}

/// What a worktree daemon serves, passed from `worktree create|mount` to
/// the daemon it starts (hidden flags of `opfs mount`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeSpec {
    /// The canonical project directory.
    pub project: PathBuf,
    /// The worktree's name.
    pub name: String,
}

/// Why a worktree command failed.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeCmdError {
    /// A bad or taken name, no such worktree, its folder unreadable.
    #[error(transparent)]
    Worktree(#[from] WorktreeError),
    /// The base turn cannot be used.
    #[error("cannot make a worktree from turn {turn}: {source}")]
    Turn {
        /// The turn asked for.
        turn: u64,
        /// Why.
        source: TurnError,
    },
    /// The project's index cannot be read.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// Talking to the project's daemon or the worktree's, or the direct
    /// operation, failed; the mount was refused (already mounted, busy
    /// mountpoint); the daemon did not start ([`Daemons`]).
    #[error(transparent)]
    Daemon(DaemonError),
    /// Its base cannot be resolved.
    #[error("the base of worktree {name:?} cannot be resolved: {source}")]
    Base {
        /// The worktree.
        name: String,
        /// Why.
        source: Box<BaseError>,
    },
    /// The lock on the project's pins could not be taken.
    #[error(transparent)]
    Pins(#[from] PinsLockError),
    /// It is mounted and its daemon would not stop (a shell inside it):
    /// nothing was discarded. The daemon's reason names the mountpoint
    /// and, when a process holds it, what to do (said once).
    #[error("worktree {name:?} was not discarded: {reason}")]
    Busy {
        /// The worktree.
        name: String,
        /// Its mountpoint.
        mountpoint: PathBuf,
        /// What the daemon said.
        reason: String,
    },
    /// Its upper layer (what it changed) cannot be read.
    #[error("cannot read the changes of worktree {name:?} in {}: {source}", .upper.display())]
    Changes {
        /// The worktree.
        name: String,
        /// Its upper layer.
        upper: PathBuf,
        /// The cause (it names the path when a file could not be read).
        source: std::io::Error,
    },
    /// Its branch of the export cannot be written (or read: its history).
    #[error("worktree {name:?}: {source}")]
    Export {
        /// The worktree.
        name: String,
        /// Why.
        source: Box<crate::export::ExportError>,
    },
    /// A custom mountpoint is not usable.
    #[error("cannot use {} as the worktree's mountpoint: {why}", .path.display())]
    BadMountpoint {
        /// The path given.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

impl WorktreeCmdError {
    /// True when the request was wrong (exit 2): a bad or taken name, no
    /// such worktree, a turn that does not exist or was dropped.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            WorktreeCmdError::Worktree(
                WorktreeError::BadName { .. }
                    | WorktreeError::Exists(_)
                    | WorktreeError::Missing(_)
            ) | WorktreeCmdError::Turn { .. }
                | WorktreeCmdError::BadMountpoint { .. }
        )
    }
}

/// Opens a worktree's lower layer (the project at its base turn), asking
/// the project's daemon, if one runs, to commit its capture log whenever
/// the project's records move on (`commit`: [`Daemons::commit`]).
///
/// Errors: the project's index or directory cannot be read.
pub fn open_base(
    project: &StateDir,
    wt: &Worktree,
    meta: &Meta,
    commit: fn(&StateDir),
) -> Result<Base, WorktreeCmdError> {
    let st = project.clone();
    Base::open(
        project,
        meta.base_turn,
        meta.base_ns,
        Box::new(move || commit(&st)),
        Some(&wt.drift_path()),
    )
    .map_err(|source| WorktreeCmdError::Base {
        name: wt.name.clone(),
        source: Box::new(source),
    })
}

/// When `state` is the own history of a worktree (`-C <worktree path>`):
/// the worktree, its metadata and its base, for the history commands to
/// show the worktree as its user sees it
/// ([`super::history::WorktreeHistory`]); `commit` as for [`open_base`]. `None` for a
/// project's state dir.
///
/// Errors: the worktree's metadata or its base cannot be read.
pub fn history_base(
    state: &StateDir,
    commit: fn(&StateDir),
) -> Option<Result<(Worktree, Meta, Base), WorktreeCmdError>> {
    let (project, wt) = super::of_state(state)?;
    Some((|| {
        let meta = wt.meta()?;
        let base = open_base(&project, &wt, &meta, commit)?;
        Ok((wt, meta, base))
    })())
}

/// The base turn and its start for a worktree made now (`from: None`) or
/// from the start of turn `from`.
///
/// From now: the project's open turn when nothing was recorded in it yet,
/// else a new turn, opened through the project's daemon (or directly when
/// none runs) and labelled `worktree NAME`: the open turn's records say
/// what paths were when *it* began, not now, so a base in the middle of a
/// turn could not be told from them.
///
/// Only records pending in the project's capture log can be missing from
/// the index, so the project's daemon is asked to commit them (a round
/// trip) only when the log holds some, and only for a base made now: a
/// base `from` a turn needs the turn's row, which a turn boundary commits.
fn base_of(
    project: &dyn ProjectTurns,
    name: &str,
    from: Option<u64>,
) -> Result<(u64, i64), WorktreeCmdError> {
    let st = project.state();
    let pending = std::fs::metadata(st.capture_log_path()).is_ok_and(|m| m.len() > 0);
    if from.is_none() && pending {
        project.commit_pending().map_err(WorktreeCmdError::Daemon)?;
    }
    let index = Index::open_read_only(&st.index_path());
    if let Some(turn) = from {
        let index = index?;
        let t =
            check_turn(&index, turn)?.map_err(|source| WorktreeCmdError::Turn { turn, source })?;
        return Ok((t.number, t.started_at));
    }
    if let Ok(index) = &index {
        if let Some(last) = index.last_turn()? {
            if index.records_of_turn(last.number)?.is_empty() {
                return Ok((last.number, last.started_at));
            }
        }
    }
    let turn = project
        .open_turn(&format!("worktree {name}"))
        .map_err(WorktreeCmdError::Daemon)?;
    let index = Index::open_read_only(&st.index_path())?;
    let started = index.turn(turn)?.map_or_else(now_ns, |t| t.started_at);
    Ok((turn, started))
}

/// Makes worktree `name` of `project` from the start of turn `from` (or
/// from now) and mounts it at `at` (default: its `tree/` folder in the
/// state dir); returns its metadata once the mount is ready.
///
/// Durable after `Ok`: the worktree's folder and metadata; the project may
/// have a new turn (see `base_of`). After `Err` nothing of the worktree is
/// left (a project turn opened for it stays, empty).
///
/// `created_by` is recorded in its metadata (the agent's tools merge and
/// discard only the agent's worktrees).
///
/// Errors: a bad or taken name, an unknown or dropped turn, an unusable
/// mountpoint, the project's records unreadable, the daemon not starting.
#[allow(clippy::too_many_arguments)]
pub fn create(
    home: &Path,
    project: &dyn ProjectTurns,
    name: &str,
    from: Option<u64>,
    at: Option<&Path>,
    created_by: Creator,
    daemons: &dyn Spawner,
) -> Result<Meta, WorktreeCmdError> {
    check_new_name(name)?;
    let st = project.state();
    let wt = Worktree::of(st, name);
    if wt.exists() {
        return Err(WorktreeError::Exists(name.to_string()).into());
    }
    let mountpoint = match at {
        Some(p) => {
            if !p.exists() {
                std::fs::create_dir_all(p).map_err(|e| WorktreeCmdError::BadMountpoint {
                    path: p.to_path_buf(),
                    why: e.to_string(),
                })?;
            }
            std::fs::canonicalize(p).map_err(|e| WorktreeCmdError::BadMountpoint {
                path: p.to_path_buf(),
                why: e.to_string(),
            })?
        }
        None => wt.default_mountpoint(),
    };
    // No gc drops the base turn between the check and the metadata that
    // pins it.
    let pins_lock = PinsLock::acquire(st)?;
    let (base_turn, base_ns) = base_of(project, name, from)?;
    crate::failpoint::failpoint("worktree-before-meta");
    let meta = Meta {
        name: name.to_string(),
        base_turn,
        base_ns,
        created_ns: now_ns(),
        mountpoint,
        created_by,
    };
    wt.create(&meta)?;
    drop(pins_lock);
    if let Err(e) = mount(st, name, daemons) {
        let _ = wt.remove(home);
        return Err(e);
    }
    Ok(meta)
}

/// Mounts the existing worktree `name` at its mountpoint (a worktree
/// survives `umount`, a killed daemon and a reboot); returns the daemon's
/// pid once the mount is ready ([`Daemons::start`]).
///
/// Errors: no such worktree; the mount refused (already mounted, busy
/// mountpoint); the daemon did not start.
pub fn mount(
    project: &StateDir,
    name: &str,
    daemons: &dyn Spawner,
) -> Result<u32, WorktreeCmdError> {
    let wt = Worktree::of(project, name);
    let meta = wt.meta()?;
    std::fs::create_dir_all(&meta.mountpoint).map_err(|e| WorktreeCmdError::BadMountpoint {
        path: meta.mountpoint.clone(),
        why: e.to_string(),
    })?;
    daemons
        .start(project, name, &wt.upper(), &meta.mountpoint)
        .map_err(WorktreeCmdError::Daemon)
}

/// True while a daemon serves worktree `wt` at `meta.mountpoint`.
pub fn is_mounted(home: &Path, wt: &Worktree, meta: &Meta, daemons: &dyn Daemons) -> bool {
    mountinfo::is_mount_point(&meta.mountpoint) && daemons.answers(&wt.state(home))
}

/// Unmounts worktree `name` if it is mounted, then deletes it (its upper
/// layer and its history), and its branch `refs/opfs/worktrees/NAME` from
/// the project's default export repository and from every other
/// repository its branch was exported to (`opfs export --git-dir`,
/// [`Worktree::export_repos`]); best effort: a failure there is logged,
/// the worktree is gone all the same.
///
/// Errors: no such worktree; its daemon refused to unmount (a process
/// still uses the mount: [`WorktreeCmdError::Busy`]); a file cannot be
/// removed.
pub fn discard(
    home: &Path,
    project: &StateDir,
    name: &str,
    daemons: &dyn Spawner,
) -> Result<(), WorktreeCmdError> {
    let wt = Worktree::of(project, name);
    let meta = wt.meta()?;
    if mountinfo::is_mount_point(&meta.mountpoint) {
        daemons
            .stop(&wt.state(home), &meta.mountpoint)
            .map_err(|e| WorktreeCmdError::Busy {
                name: name.to_string(),
                mountpoint: meta.mountpoint.clone(),
                reason: e.to_string(),
            })?;
    }
    let repos = wt.export_repos();
    wt.remove(home)?;
    // Its branch of the export goes with it (`docs/export.md`): a later
    // worktree of the same name starts a branch of its own.
    let defaults = std::iter::once(None);
    for git_dir in defaults.chain(repos.iter().map(|r| Some(r.as_path()))) {
        if let Err(e) = crate::export::delete_branch(project, git_dir, name) {
            log::warn!(
                "worktree {name:?} was discarded, but its export branch could not be deleted: {e}"
            );
        }
    }
    Ok(())
}

/// Exports worktree `name`'s closed turns not on its branch yet
/// (`refs/opfs/worktrees/NAME`) into `git_dir` (default: the project's
/// export repository); `wt_commit` makes the worktree's pending records
/// visible (its daemon's group commit, or [`Daemons::commit`] of its
/// state dir); `commit` makes the project's visible ([`Daemons::commit`]).
///
/// Errors: no such worktree; its base cannot be resolved; the export
/// fails ([`WorktreeCmdError::Export`]).
pub fn export_branch(
    home: &Path,
    project: &StateDir,
    name: &str,
    git_dir: Option<&Path>,
    wt_commit: Box<dyn Fn() + '_>,
    commit: fn(&StateDir),
) -> Result<crate::export::BranchReport, WorktreeCmdError> {
    let wt = Worktree::of(project, name);
    let meta = wt.meta()?;
    let base = open_base(project, &wt, &meta, commit)?;
    let failed = |e: crate::export::ExportError| WorktreeCmdError::Export {
        name: name.to_string(),
        source: Box::new(e),
    };
    let opened =
        crate::history::Opened::open(&wt.state(home), wt_commit).map_err(|e| failed(e.into()))?;
    // A repository other than the default is listed before anything is
    // written to it, so a discard finds the branch whatever happens next.
    if let Some(dir) = git_dir {
        let abs = crate::state::absolute(dir);
        if abs != crate::export::default_git_dir(project) {
            wt.add_export_repo(&abs)?;
        }
    }
    let pst = project.clone();
    super::branch::export(
        project,
        &wt,
        &meta,
        opened.sources(),
        &base,
        git_dir,
        &move || commit(&pst),
    )
    .map_err(failed)
}

/// Calls `f` with the files of worktree `name`'s view at the end of its
/// turns ([`super::branch::TurnEnds`]) and the blobs of its own history
/// (a version kept whole there, by BLAKE3): what the bytes behind its
/// branch's pointer files are read from. Reads only; no group commit is
/// asked of either daemon, so a caller checks the bytes it gets against
/// the hash it wants.
///
/// Errors: no such worktree; its base or its history cannot be opened.
pub fn with_turn_ends<R>(
    home: &Path,
    project: &StateDir,
    name: &str,
    f: &mut dyn FnMut(&super::branch::TurnEnds<'_>, &crate::history::Sources<'_>) -> R,
) -> Result<R, WorktreeCmdError> {
    let wt = Worktree::of(project, name);
    let meta = wt.meta()?;
    let base = open_base(project, &wt, &meta, |_| {})?;
    let opened = crate::history::Opened::open(&wt.state(home), Box::new(|| {})).map_err(|e| {
        WorktreeCmdError::Export {
            name: name.to_string(),
            source: Box::new(e.into()),
        }
    })?;
    let src = opened.sources();
    let ends = super::branch::TurnEnds::new(src, &base);
    Ok(f(&ends, &src))
}

/// What worktree `name` of `project` changed against its base, as the
/// entries of a patch git can apply (render them with
/// [`crate::diff::write_patch`], `write_stat` or `write_name_status`);
/// returns its metadata too. Paths the worktree's ignore rules ignore are
/// left out unless `include_ignored` (as a merge leaves them:
/// [`super::changes::drop_ignored`]). Reads only: `opfs worktree
/// diff` and the MCP tool `worktree_diff`.
///
/// Errors: no such worktree; its base cannot be resolved
/// ([`WorktreeCmdError::Base`]); its upper layer or a file of either side
/// cannot be read ([`WorktreeCmdError::Changes`]).
pub fn diffs(
    project: &StateDir,
    name: &str,
    include_ignored: bool,
    commit: fn(&StateDir),
) -> Result<(Meta, Vec<crate::diff::FileDiff>), WorktreeCmdError> {
    let wt = Worktree::of(project, name);
    let meta = wt.meta()?;
    let base = open_base(project, &wt, &meta, commit)?;
    let changes_err = |source| WorktreeCmdError::Changes {
        name: name.to_string(),
        upper: wt.upper(),
        source,
    };
    let upper = crate::tree::Dir::open(&wt.upper()).map_err(changes_err)?;
    let mut found = super::changes::changes(&upper, &base).map_err(changes_err)?;
    if !include_ignored {
        super::changes::drop_ignored(&mut found, &upper, &base, &project.project);
    }
    let diffs = super::patch::file_diffs(&upper, &base, &found).map_err(changes_err)?;
    Ok((meta, diffs))
}

/// One row of `worktree list`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listed {
    /// Its name.
    pub name: String,
    /// Its mountpoint.
    pub path: PathBuf,
    /// The project turn whose start is its base.
    pub base_turn: u64,
    /// True while a daemon serves it.
    pub mounted: bool,
    /// Paths changed against the base.
    pub changed: usize,
    /// Paths whose base is not known (changed behind the project's mount
    /// after the base turn began: `worktree merge` reports them).
    pub drifted: usize,
    /// Who made it: `user` (the CLI) or `agent` (the MCP tools).
    pub created_by: Creator,
}

/// Every worktree of `project`, with what it changed.
///
/// Errors: a worktree's base or upper layer cannot be read.
pub fn list(
    home: &Path,
    project: &StateDir,
    daemons: &dyn Daemons,
) -> Result<Vec<Listed>, WorktreeCmdError> {
    super::list(project)
        .into_iter()
        .map(|(wt, meta)| listed(home, project, &wt, &meta, daemons))
        .collect()
}

/// The row of `worktree list` for the worktree whose own history `state`
/// is (`opfs -C <worktree path> status`), with its project's state dir;
/// `None` for a project's state dir.
///
/// Errors: its metadata, base or upper layer cannot be read.
pub fn describe(
    home: &Path,
    state: &StateDir,
    daemons: &dyn Daemons,
) -> Option<Result<(StateDir, Listed), WorktreeCmdError>> {
    let (project, wt) = super::of_state(state)?;
    Some((|| {
        let meta = wt.meta()?;
        let row = listed(home, &project, &wt, &meta, daemons)?;
        Ok((project, row))
    })())
}

/// One row of `worktree list`.
fn listed(
    home: &Path,
    project: &StateDir,
    wt: &Worktree,
    meta: &Meta,
    daemons: &dyn Daemons,
) -> Result<Listed, WorktreeCmdError> {
    let base = open_base(project, wt, meta, daemons.commit())?;
    let unreadable = |e| WorktreeCmdError::Base {
        name: wt.name.clone(),
        source: Box::new(BaseError::Project {
            path: wt.upper(),
            source: e,
        }),
    };
    let upper = crate::tree::Dir::open(&wt.upper()).map_err(unreadable)?;
    let changed = super::changes::changes(&upper, &base)
        .map_err(unreadable)?
        .len();
    let mut drift = read_drift(&wt.drift_path());
    drift.extend(base.drifted());
    Ok(Listed {
        name: wt.name.clone(),
        path: meta.mountpoint.clone(),
        base_turn: meta.base_turn,
        mounted: is_mounted(home, wt, meta, daemons),
        changed,
        drifted: drift.len(),
        created_by: meta.created_by,
    })
}
