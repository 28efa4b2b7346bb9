//! A worktree's daemon: the overlay mode of `opfs mount` ([`run_overlay`])
//! and its background exporter ([`start_exporter`]), and [`Served`], what
//! a worktree's life (`crate::worktree::life`: create, mount, discard,
//! list...) asks of the daemons. The daemon serves the overlay of the
//! worktree's upper layer over its base; its journal records the upper
//! layer, so the worktree has turns and rewinds of its own, and its
//! exporter writes the worktree's branch of the project's export.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::control::client::{commit_through_daemon, Project};
use crate::control::{Request, Response};
use crate::store::{Index, StateDir};
use crate::worktree::life::{self, DaemonError, Daemons, ProjectTurns, Spawner};
use crate::worktree::Worktree;

pub use crate::worktree::life::WorktreeSpec;

use super::{DaemonOptions, MountError, MountPlan};

/// The daemons as a worktree's life reaches them: started with `opts`
/// (and `--sync` when `opts` asks for it or the project was last mounted
/// with it: [`super::options::project_sync`]) and `verbose`, the state
/// dirs found under `home`.
#[derive(Debug, Clone, Copy)]
pub struct Served<'a> {
    /// The opfs home.
    pub home: &'a Path,
    /// The options a worktree's daemon starts with.
    pub opts: &'a DaemonOptions,
    /// The verbosity a worktree's daemon logs with.
    pub verbose: u8,
}

/// The running daemons as the read side of a worktree's life reaches
/// them: through their control sockets.
#[derive(Debug, Clone, Copy)]
pub struct Asked;

impl Daemons for Asked {
    fn commit(&self) -> fn(&StateDir) {
        commit_through_daemon
    }

    fn answers(&self, state: &StateDir) -> bool {
        matches!(
            crate::control::client::request(state, &Request::Status),
            Ok(Response::Status(_))
        )
    }
}

impl Daemons for Served<'_> {
    fn commit(&self) -> fn(&StateDir) {
        Asked.commit()
    }

    fn answers(&self, state: &StateDir) -> bool {
        Asked.answers(state)
    }
}

impl Spawner for Served<'_> {
    fn start(
        &self,
        project: &StateDir,
        name: &str,
        upper: &Path,
        mountpoint: &Path,
    ) -> Result<u32, DaemonError> {
        let plan = super::check(self.home, upper, mountpoint)?;
        let opts = DaemonOptions {
            worktree: Some(WorktreeSpec {
                project: project.project.clone(),
                name: name.to_string(),
            }),
            // The durability the user chose for the project (`opfs mount
            // --sync`) holds for its worktrees too.
            sync: self.opts.sync || super::options::project_sync(project),
            ..self.opts.clone()
        };
        Ok(super::spawn::spawn(self.home, &plan, &opts, self.verbose)?)
    }

    fn stop(&self, state: &StateDir, mountpoint: &Path) -> Result<(), DaemonError> {
        Ok(super::stop(state, mountpoint, Duration::from_secs(30))?)
    }
}

impl ProjectTurns for Project {
    fn state(&self) -> &StateDir {
        Project::state(self)
    }

    fn commit_pending(&self) -> Result<(), DaemonError> {
        Ok(Project::commit_pending(self)?)
    }

    fn open_turn(&self, label: &str) -> Result<u64, DaemonError> {
        Ok(self.turn(Some(label), None)?)
    }
}

/// Starts a worktree daemon's background exporter: after every request
/// that closes a turn of the worktree (woken like the project's, off the
/// request path), its branch of the project's export is brought up to
/// date. Woken once at start, to catch up with turns closed while it was
/// not mounted; a worktree with no closed turn writes nothing (the branch
/// appears with its first closed turn), nor one whose project has no
/// export repository yet (a project mounted with `--no-export`).
///
/// With `push` (the project's remote, automatic pushes on), each export
/// that succeeded wakes a pusher of the project's export
/// ([`crate::remote::spawn_pusher`], a thread of its own, retrying as the
/// project's does), so the branch reaches the remote after the
/// worktree's turn without waiting for the project's next push.
pub(super) fn start_exporter(
    home: &Path,
    spec: &WorktreeSpec,
    state: &StateDir,
    journal: &Arc<crate::capture::Journal>,
    push: Option<crate::remote::AutoPush>,
) -> crate::export::Worker {
    let project = StateDir::for_project(home, &spec.project);
    let pusher = push.map(|p| crate::remote::spawn_pusher(project.clone(), p));
    let home = home.to_path_buf();
    let name = spec.name.clone();
    let state = state.clone();
    let journal = journal.clone();
    let worker = crate::export::spawn_worker(
        "opfs-export",
        Box::new(move || {
            let j = journal.clone();
            let commit = move || {
                if let Err(e) = j.apply_pending() {
                    log::warn!("group commit before the export deferred: {e}");
                }
            };
            commit();
            let any_closed = Index::open_read_only(&state.index_path())
                .and_then(|ix| ix.turns(Some(2)))
                .map(|ts| ts.iter().any(|t| t.ended_at.is_some()))
                .unwrap_or(false);
            // Only into a repository the project's export made: a project
            // mounted with `--no-export` never gets one behind its back (`opfs
            // export` then writes the project's history and the branches).
            let repo_made = crate::export::default_git_dir(&project)
                .join("HEAD")
                .exists();
            if !any_closed || !repo_made {
                return;
            }
            match life::export_branch(
                &home,
                &project,
                &name,
                None,
                Box::new(commit),
                commit_through_daemon,
            ) {
                Ok(r) => {
                    if !r.turns.is_empty() || r.rewritten {
                        log::info!(
                            "exported turn(s) {:?} of worktree {name:?} to {} in {} ms",
                            r.turns,
                            r.branch,
                            r.elapsed_ms
                        );
                    }
                    // Full means a push is already queued; it will see this
                    // export. A push with nothing new starts no transfer.
                    if let Some(tx) = &pusher {
                        let _ = tx.try_send(());
                    }
                }
                Err(e) => log::warn!("background export of worktree {name:?} failed: {e}"),
            }
        }),
    );
    worker.wake();
    worker
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
/// several times the main mount's (`docs/bench/2026-12-02-worktrees.md`, "Worktrees").
pub const WORKTREE_TTL: Duration = Duration::from_secs(60);

/// The FUSE options of a worktree mount: the project mount's `fs`, with
/// [`WORKTREE_TTL`] where `tuning` sets no cache timeout (entries,
/// attributes and misses).
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
    if tuning.negative_ttl.is_none() {
        fs.negative_ttl = WORKTREE_TTL;
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
    let base = life::open_base(&project, &wt, &meta, commit_through_daemon)
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
