//! `opfs worktree create|mount|discard|list`: a worktree's life around its
//! daemon. A worktree is served by a daemon of its own (the same `opfs
//! mount` process as a project's, with the overlay instead of the
//! passthrough: [`run_overlay`]), whose journal records the upper layer,
//! so the worktree has turns and rewinds of its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::control::client::{commit_through_daemon, ClientError, Project};
use crate::control::{Request, Response};
use crate::state::mountinfo;
use crate::store::{index::now_ns, Index, IndexError, StateDir};
use crate::view::{check_turn, TurnError};
use crate::worktree::base::{read_drift, Base, BaseError};
use crate::worktree::{check_name, Meta, Worktree, WorktreeError};

use super::{DaemonOptions, MountError, MountPlan, SpawnError};

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
    /// Talking to the project's daemon, or the direct operation, failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Its base cannot be resolved.
    #[error("the base of worktree {name:?} cannot be resolved: {source}")]
    Base {
        /// The worktree.
        name: String,
        /// Why.
        source: Box<BaseError>,
    },
    /// The mount was refused.
    #[error(transparent)]
    Mount(#[from] MountError),
    /// The daemon did not start.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// It is mounted and its daemon would not stop (a shell inside it).
    #[error("worktree {name:?} is in use at {}: {reason} (leave it, e.g. `cd` out of it in every shell, then try again)", .mountpoint.display())]
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
/// the project's records move on.
///
/// Errors: the project's index or directory cannot be read.
pub fn open_base(project: &StateDir, wt: &Worktree, meta: &Meta) -> Result<Base, WorktreeCmdError> {
    let st = project.clone();
    Base::open(
        project,
        meta.base_turn,
        meta.base_ns,
        Box::new(move || commit_through_daemon(&st)),
        Some(&wt.drift_path()),
    )
    .map_err(|source| WorktreeCmdError::Base {
        name: wt.name.clone(),
        source: Box::new(source),
    })
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
    project: &Project,
    name: &str,
    from: Option<u64>,
) -> Result<(u64, i64), WorktreeCmdError> {
    let st = project.state();
    let pending = std::fs::metadata(st.capture_log_path()).is_ok_and(|m| m.len() > 0);
    if from.is_none() && pending {
        project.commit_pending()?;
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
    let turn = project.turn(Some(&format!("worktree {name}")), None)?;
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
/// Errors: a bad or taken name, an unknown or dropped turn, an unusable
/// mountpoint, the project's records unreadable, the daemon not starting.
pub fn create(
    home: &Path,
    project: &Project,
    name: &str,
    from: Option<u64>,
    at: Option<&Path>,
    opts: &DaemonOptions,
    verbose: u8,
) -> Result<Meta, WorktreeCmdError> {
    check_name(name)?;
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
    let (base_turn, base_ns) = base_of(project, name, from)?;
    let meta = Meta {
        name: name.to_string(),
        base_turn,
        base_ns,
        created_ns: now_ns(),
        mountpoint,
    };
    wt.create(&meta)?;
    if let Err(e) = mount(home, st, name, opts, verbose) {
        let _ = wt.remove(home);
        return Err(e);
    }
    Ok(meta)
}

/// Mounts the existing worktree `name` at its mountpoint (a worktree
/// survives `umount`, a killed daemon and a reboot); returns the daemon's
/// pid once the mount is ready.
///
/// Errors: no such worktree; the mount refused (already mounted, busy
/// mountpoint); the daemon did not start.
pub fn mount(
    home: &Path,
    project: &StateDir,
    name: &str,
    opts: &DaemonOptions,
    verbose: u8,
) -> Result<u32, WorktreeCmdError> {
    let wt = Worktree::of(project, name);
    let meta = wt.meta()?;
    std::fs::create_dir_all(&meta.mountpoint).map_err(|e| WorktreeCmdError::BadMountpoint {
        path: meta.mountpoint.clone(),
        why: e.to_string(),
    })?;
    let plan = super::check(home, &wt.upper(), &meta.mountpoint)?;
    let opts = DaemonOptions {
        export: false,
        worktree: Some(WorktreeSpec {
            project: project.project.clone(),
            name: name.to_string(),
        }),
        ..opts.clone()
    };
    Ok(super::spawn::spawn(home, &plan, &opts, verbose)?)
}

/// True while a daemon serves worktree `wt` at `meta.mountpoint`.
pub fn is_mounted(home: &Path, wt: &Worktree, meta: &Meta) -> bool {
    mountinfo::is_mount_point(&meta.mountpoint)
        && matches!(
            crate::control::client::request(&wt.state(home).socket_path(), &Request::Status),
            Ok(Response::Status(_))
        )
}

/// Unmounts worktree `name` if it is mounted, then deletes it (its upper
/// layer and its history).
///
/// Errors: no such worktree; its daemon refused to unmount (a process
/// still uses the mount: [`WorktreeCmdError::Busy`]); a file cannot be
/// removed.
pub fn discard(home: &Path, project: &StateDir, name: &str) -> Result<(), WorktreeCmdError> {
    let wt = Worktree::of(project, name);
    let meta = wt.meta()?;
    if mountinfo::is_mount_point(&meta.mountpoint) {
        super::stop(&wt.state(home), &meta.mountpoint, Duration::from_secs(30)).map_err(|e| {
            WorktreeCmdError::Busy {
                name: name.to_string(),
                mountpoint: meta.mountpoint.clone(),
                reason: e.to_string(),
            }
        })?;
    }
    wt.remove(home)?;
    Ok(())
}

/// What worktree `name` of `project` changed against its base, as the
/// entries of a patch git can apply (render them with
/// [`crate::diff::write_patch`], `write_stat` or `write_name_status`);
/// returns its metadata too. Reads only: `opfs worktree diff` and the MCP
/// tool `worktree_diff`.
///
/// Errors: no such worktree; its base cannot be resolved
/// ([`WorktreeCmdError::Base`]); its upper layer or a file of either side
/// cannot be read ([`WorktreeCmdError::Changes`]).
pub fn diffs(
    project: &StateDir,
    name: &str,
) -> Result<(Meta, Vec<crate::diff::FileDiff>), WorktreeCmdError> {
    let wt = Worktree::of(project, name);
    let meta = wt.meta()?;
    let base = open_base(project, &wt, &meta)?;
    let changes_err = |source| WorktreeCmdError::Changes {
        name: name.to_string(),
        upper: wt.upper(),
        source,
    };
    let upper = crate::tree::Dir::open(&wt.upper()).map_err(changes_err)?;
    let found = crate::worktree::changes::changes(&upper, &base).map_err(changes_err)?;
    let diffs = crate::worktree::patch::file_diffs(&upper, &base, &found).map_err(changes_err)?;
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
}

/// Every worktree of `project`, with what it changed.
///
/// Errors: a worktree's base or upper layer cannot be read.
pub fn list(home: &Path, project: &StateDir) -> Result<Vec<Listed>, WorktreeCmdError> {
    let mut out = Vec::new();
    for (wt, meta) in crate::worktree::list(project) {
        let base = open_base(project, &wt, &meta)?;
        let upper = crate::tree::Dir::open(&wt.upper()).map_err(|e| WorktreeCmdError::Base {
            name: wt.name.clone(),
            source: Box::new(BaseError::Project {
                path: wt.upper(),
                source: e,
            }),
        })?;
        let changed = crate::worktree::changes::changes(&upper, &base)
            .map_err(|e| WorktreeCmdError::Base {
                name: wt.name.clone(),
                source: Box::new(BaseError::Project {
                    path: wt.upper(),
                    source: e,
                }),
            })?
            .len();
        let mut drift = read_drift(&wt.drift_path());
        drift.extend(base.drifted());
        out.push(Listed {
            name: wt.name.clone(),
            path: meta.mountpoint.clone(),
            base_turn: meta.base_turn,
            mounted: is_mounted(home, &wt, &meta),
            changed,
            drifted: drift.len(),
        });
    }
    Ok(out)
}

/// How long the kernel may cache a worktree's entries and attributes
/// unless `OPFS_ENTRY_TTL_MS` / `OPFS_ATTR_TTL_MS` say otherwise: 60 s.
///
/// A worktree's view changes only through its own mount: its base is
/// frozen (later captures do not show), its upper layer is a private
/// folder of the state dir, and what its daemon changes itself (a rewind
/// of the worktree) it invalidates in the kernel, as the main mount does.
/// The one change the daemon cannot see coming is drift (a project file
/// edited behind the project's mount after the base): the cap bounds how
/// long a cached entry hides it, and the drift is listed and stops a merge
/// either way (`docs/worktrees.md`). With the project mount's 1 s, `git
/// status` in a worktree re-looked-up every entry each second and cost
/// several times the main mount's (`docs/benchmarks.md`, "Worktrees").
pub const WORKTREE_TTL: Duration = Duration::from_secs(60);

/// The FUSE options of a worktree mount: the project mount's `fs`, with
/// [`WORKTREE_TTL`] where `tuning` sets no cache timeout.
pub(super) fn overlay_options(
    mut fs: opfs_fs::Options,
    tuning: &super::options::FsTuning,
) -> opfs_fs::Options {
    if tuning.attr_ttl.is_none() {
        fs.attr_ttl = WORKTREE_TTL;
    }
    if tuning.entry_ttl.is_none() {
        fs.entry_ttl = WORKTREE_TTL;
    }
    fs
}

/// Serves the worktree `spec` at `plan.mountpoint`: the overlay of its
/// upper layer over its base, with `hook` (the worktree's journal over the
/// upper layer) told every change of the upper layer.
///
/// Errors: the worktree or its base cannot be read; the mount fails.
pub(super) fn run_overlay(
    home: &Path,
    plan: &MountPlan,
    spec: &WorktreeSpec,
    hook: Arc<dyn opfs_fs::MutationHook>,
    fs: &opfs_fs::Options,
) -> Result<opfs_fs::Mount, MountError> {
    let project = StateDir::for_project(home, &spec.project);
    let wt = Worktree::of(&project, &spec.name);
    let failed = |what: String| {
        move |e: String| MountError::Io {
            what,
            source: std::io::Error::other(e),
        }
    };
    let meta = wt
        .meta()
        .map_err(|e| failed(format!("cannot read worktree {:?}", spec.name))(e.to_string()))?;
    let base = open_base(&project, &wt, &meta)
        .map_err(|e| failed(format!("cannot open worktree {:?}", spec.name))(e.to_string()))?;
    opfs_fs::mount_overlay(
        &wt.upper(),
        &wt.work(),
        Arc::new(base),
        &plan.mountpoint,
        hook,
        fs,
    )
    .map_err(|source| MountError::Io {
        what: format!(
            "cannot mount worktree {:?} at {}",
            spec.name,
            plan.mountpoint.display()
        ),
        source,
    })
}
