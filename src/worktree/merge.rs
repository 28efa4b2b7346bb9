//! Merging a worktree into its project as one turn of kind `merge`.
//!
//! The worktree's changes against its base ([`super::changes`]) become
//! target states for the project's restore engine, so a merge is captured
//! like a rewind (every path it writes has its pre-image recorded in the
//! merge turn first) and `opfs rewind <merge turn>` undoes it.
//!
//! A path is merged when the project still holds its base state (or
//! already holds the worktree's). A text file both sides changed is merged
//! three-way (`diffy`) when the changes do not overlap (listed in
//! `three_way`). It is a **conflict**, left as the project has it, when the
//! project changed it since the base too (and no clean three-way merge
//! exists), when its base
//! is not known (changed behind the project's mount: the drift list), or
//! for any reason a rewind would refuse it (changed behind the mount since
//! opfs last saw it, a directory holding unrecorded entries, a failed
//! step). `force` takes the worktree's side for the first three.
//!
//! A conflict found while planning **stops the merge** before it writes
//! anything ([`MergeReport::stopped_by_conflicts`]) unless `partial`
//! (merge the rest) is given; `markers` writes git-style conflict markers
//! into a text file whose two sides' changes overlap. Paths the
//! worktree's ignore rules ignore are left out unless `include_ignored`
//! ([`super::changes::drop_ignored`]).
//!
//! **Crash safety.** Before its first write a merge leaves a marker
//! (`merge.running` in the project's state dir, naming the merge turn);
//! it is removed once the merge is done. A merge found interrupted (the
//! marker is there) is rolled back, by rewinding to the start of its turn,
//! before anything else runs ([`roll_back_interrupted`]): a merge is
//! applied whole or not at all, and the rollback is itself a rewind turn
//! in the history.

use std::fs;
use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::capture::{CaptureError, Exclusive, Journal, NewTurn};
use crate::paths;
use crate::record::{PreImage, Special, TurnKind};
use crate::restore::apply::sync_project;
use crate::restore::conflict::ConflictReason;
use crate::restore::{self, Conflict, PathPlan};
use crate::rewind::{self, RewindError, RewindOptions};
use crate::store::{BlobError, IndexError, StateDir};
use crate::tree::Dir;
use crate::view::current;
use crate::view::Version;

use super::base::{read_drift, Base, BaseError};
use super::changes::{changes, Change, Entry};
use super::{Worktree, WorktreeError};
use opfs_fs::overlay::Kind;

/// How to merge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeOptions {
    /// Compute and return the plan; write nothing to the project (the
    /// worktree's new file contents may be put in the blob store, where
    /// `opfs gc` reclaims them).
    pub dry_run: bool,
    /// Take the worktree's side for paths the project changed too.
    pub force: bool,
    /// With conflicts left: merge the other paths and leave the conflicts
    /// as the project has them. Without it a merge with a conflict changes
    /// nothing ([`MergeReport::stopped_by_conflicts`]).
    pub partial: bool,
    /// A text file both sides changed whose changes overlap gets git-style
    /// conflict markers ([`crate::restore::markers::three_way`]) instead
    /// of being left as a conflict.
    pub markers: bool,
    /// Merge paths the project's ignore rules ignore too (without it they
    /// are left out, as the export leaves them: `ignored`).
    pub include_ignored: bool,
}

/// The outcome of a merge (or of its dry run).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergeReport {
    /// The worktree merged.
    pub worktree: String,
    /// The project turn that records the merge (absent for a dry run).
    pub turn: Option<u64>,
    /// The worktree's base turn.
    pub base_turn: u64,
    /// True for `--dry-run`.
    pub dry_run: bool,
    /// Paths the project now holds as the worktree has them (for a dry
    /// run: would hold), rendered.
    pub merged: Vec<String>,
    /// Text files both the worktree and the project changed since the
    /// base whose changes a three-way merge combined cleanly (also in
    /// `merged`).
    #[serde(default)]
    pub three_way: Vec<String>,
    /// Paths the project already held as the worktree has them (also in
    /// `merged`): nothing was (or would be) written for them.
    #[serde(default)]
    pub identical: Vec<String>,
    /// Paths left as the project has them, with the reason.
    pub conflicts: Vec<Conflict>,
    /// The plan that was (or would be) executed on the project.
    pub plan: Vec<PathPlan>,
    /// The agent turn open after the merge.
    pub open_turn: u64,
    /// Raw bytes of every path the merge wrote (for cache invalidation).
    #[serde(skip)]
    pub touched: Vec<Vec<u8>>,
    /// True when conflicts stopped it: nothing was written and no turn
    /// opened (for a dry run: would stop). `plan` is what it would have
    /// done to the other paths.
    #[serde(default)]
    pub stopped_by_conflicts: bool,
    /// Text files written with conflict markers (also in `merged`).
    #[serde(default)]
    pub marked: Vec<String>,
    /// How many changed paths of the worktree the project's ignore rules
    /// ignore, left out of the merge (0 with `include_ignored`).
    #[serde(default)]
    pub ignored: usize,
}

/// Errors that stop a merge before it writes anything to the project.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The worktree does not exist or cannot be read.
    #[error(transparent)]
    Worktree(#[from] WorktreeError),
    /// Its base cannot be resolved from the project's records.
    #[error(
        "the base of worktree {name:?} (the project at turn {turn}) cannot be resolved: {source}"
    )]
    Base {
        /// The worktree.
        name: String,
        /// Its base turn.
        turn: u64,
        /// Why.
        source: Box<BaseError>,
    },
    /// The worktree's upper layer or the base cannot be read.
    #[error("cannot read worktree {name:?}: {source}")]
    Read {
        /// The worktree.
        name: String,
        /// Why.
        source: io::Error,
    },
    /// A new file's bytes cannot be put in the blob store.
    #[error("cannot store {} of worktree {name:?}: {source}", paths::display(.path))]
    Store {
        /// The worktree.
        name: String,
        /// The path.
        path: Vec<u8>,
        /// Why.
        source: BlobError,
    },
    /// The index failed.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// Opening the merge turn failed.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// Rolling back an interrupted merge failed.
    #[error("cannot roll back the interrupted merge recorded as turn {turn}: {source}")]
    RollBack {
        /// The merge turn.
        turn: u64,
        /// Why.
        source: RewindError,
    },
    /// The merge marker cannot be written or removed.
    #[error("cannot write {}: {source}", .path.display())]
    Marker {
        /// The marker file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl MergeError {
    /// True when the request itself was wrong (no such worktree).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            MergeError::Worktree(WorktreeError::Missing(_) | WorktreeError::BadName { .. })
        )
    }
}

/// The marker of a running merge.
fn marker(state: &StateDir) -> PathBuf {
    state.dir.join("merge.running")
}

/// Rolls back a merge a crash interrupted (its marker is there): rewinds
/// the project to the start of the merge turn, which the merge had
/// recorded every path's pre-image in before writing it. Returns a
/// sentence saying what was done, `None` when no merge was interrupted.
/// Runs under `excl` (no mutation through opfs in flight).
///
/// Errors: the rewind fails (the marker stays, so the next start tries
/// again); the marker cannot be removed.
pub fn roll_back_interrupted(
    journal: &Journal,
    excl: &Exclusive<'_>,
) -> Result<Option<String>, MergeError> {
    let path = marker(journal.state());
    let Ok(text) = fs::read_to_string(&path) else {
        return Ok(None);
    };
    let Some(turn) = text
        .split_whitespace()
        .next()
        .and_then(|t| t.parse::<u64>().ok())
    else {
        let _ = fs::remove_file(&path);
        return Ok(None);
    };
    let report = rewind::rewind(
        journal,
        excl,
        turn,
        RewindOptions {
            dry_run: false,
            force: true,
            pending: None,
            // Whatever cannot be put back stays listed; the rest is.
            partial: true,
            markers: false,
        },
    )
    .map_err(|source| MergeError::RollBack { turn, source })?;
    fs::remove_file(&path).map_err(|source| MergeError::Marker {
        path: path.clone(),
        source,
    })?;
    Ok(Some(format!(
        "rolled back the merge interrupted in turn {turn} (recorded as turn {}, {} paths restored)",
        report.turn.unwrap_or(0),
        report.restored.len()
    )))
}

/// True when the project's `current` state is `entry`.
fn holds(entry: &Entry, current: &Version) -> bool {
    match (entry, &current.state) {
        (Entry::Absent, PreImage::Absent) => true,
        (
            Entry::File { hash, size, perm },
            PreImage::File {
                blob,
                size: s,
                perm: p,
                ..
            },
        ) => hash == blob && size == s && perm == p,
        (Entry::Dir { perm }, PreImage::Dir { perm: p }) => perm == p,
        (Entry::Symlink { target }, PreImage::Symlink { target: t }) => target == t,
        (
            Entry::Special { kind, perm, rdev },
            PreImage::Special {
                kind: k,
                perm: p,
                rdev: r,
            },
        ) => special(*kind) == Some(*k) && perm == p && (rdev == r || *rdev == 0),
        _ => false,
    }
}

fn special(kind: Kind) -> Option<Special> {
    Some(match kind {
        Kind::Fifo => Special::Fifo,
        Kind::Socket => Special::Socket,
        Kind::CharDevice => Special::Char,
        Kind::BlockDevice => Special::Block,
        _ => return None,
    })
}

/// The three-way merge of a text file both sides changed: `None` when it
/// does not apply (not three text files, or the changes overlap and
/// `markers` is false), else the merged file as a target state (its bytes
/// put in the blob store); `with_markers` is set when it holds conflict
/// markers (worktree `name`'s side labelled `worktree NAME`). Its
/// permission bits are the worktree's when the worktree changed them, else
/// the project's.
///
/// Errors: a side cannot be read, or the merged bytes cannot be stored.
#[allow(clippy::too_many_arguments)]
fn three_way(
    base: &Base,
    upper: &Dir,
    journal: &Journal,
    path: &[u8],
    before: &Entry,
    after: &Entry,
    current: &Version,
    (name, markers, with_markers): (&str, bool, &mut bool),
) -> Result<Option<PreImage>, BlobError> {
    let (
        Entry::File {
            perm: base_perm, ..
        },
        Entry::File { perm: wt_perm, .. },
        PreImage::File {
            perm: project_perm, ..
        },
    ) = (before, after, &current.state)
    else {
        return Ok(None);
    };
    let io = |source| BlobError::Io {
        path: PathBuf::from(paths::display(path)),
        source,
    };
    let Some(ancestor) = super::changes::base_bytes(base, path).map_err(io)? else {
        return Ok(None);
    };
    let ours = match &current.bytes {
        Some(b) => b.clone(),
        None => return Ok(None),
    };
    let theirs = {
        let mut f = upper
            .open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)
            .map_err(io)?;
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut v).map_err(io)?;
        v
    };
    let theirs_label = format!("worktree {name}");
    let merged = match crate::restore::markers::three_way(
        &ancestor,
        &ours,
        &theirs,
        "project",
        &theirs_label,
    ) {
        Some(Ok(merged)) => merged,
        Some(Err(marked)) if markers => {
            *with_markers = true;
            marked
        }
        _ => return Ok(None),
    };
    let (blob, size) = journal
        .blobs()
        .put(&mut merged.as_slice(), merged.len() as u64)?;
    let perm = if wt_perm != base_perm {
        *wt_perm
    } else {
        *project_perm
    };
    Ok(Some(PreImage::File {
        blob,
        size,
        perm,
        ino: 0,
    }))
}

/// Merges worktree `name` of the project `journal` records into the
/// project, as one turn of kind `merge` (see the module docs). Runs under
/// `excl` (no mutation of the project through opfs in flight); the caller
/// invalidates `report.touched` afterwards when mounted.
///
/// Errors, all before anything is written to the project: the worktree is
/// missing ([`MergeError::Worktree`]), its base or upper layer cannot be
/// read, a new file cannot be stored, the index fails, an interrupted
/// merge cannot be rolled back. Per-path failures are conflicts.
pub fn merge(
    journal: &Journal,
    excl: &Exclusive<'_>,
    name: &str,
    opts: MergeOptions,
) -> Result<MergeReport, MergeError> {
    let state = journal.state().clone();
    let wt = Worktree::of(&state, name);
    let meta = wt.meta()?;
    if !opts.dry_run {
        roll_back_interrupted(journal, excl)?;
    }
    // Everything the project's mount captured is in the index, so the base
    // read below is complete (the caller has quiesced the mount).
    journal.apply_pending()?;
    let base = Base::open(
        &state,
        meta.base_turn,
        meta.base_ns,
        Box::new(|| {}),
        Some(&wt.drift_path()),
    )
    .map_err(|source| MergeError::Base {
        name: name.to_string(),
        turn: meta.base_turn,
        source: Box::new(source),
    })?
    // Under `excl`: nothing is captured until this merge's own turn,
    // after the base was read.
    .quiesced(excl);
    let read_err = |source| MergeError::Read {
        name: name.to_string(),
        source,
    };
    let upper = Dir::open(&wt.upper()).map_err(read_err)?;
    let mut found = changes(&upper, &base).map_err(read_err)?;
    let ignored = if opts.include_ignored {
        0
    } else {
        super::changes::drop_ignored(&mut found, &upper, &base, journal.backing().path())
    };
    let mut drifted = read_drift(&wt.drift_path());
    drifted.extend(base.drifted());

    let mut conflicts = Vec::new();
    let mut already = Vec::new();
    let mut three_way_merged = Vec::new();
    let mut marked = Vec::new();
    let mut states: Vec<(Vec<u8>, PreImage)> = Vec::new();
    for Change {
        path,
        before,
        after,
    } in found
    {
        let current = match current::read_version(journal.backing(), &path) {
            Ok(v) => v,
            Err(e) => {
                conflicts.push(Conflict::new(&path, ConflictReason::ReadCurrent(e)));
                continue;
            }
        };
        if holds(&after, &current) {
            already.push(paths::display(&path));
            continue;
        }
        if !opts.force {
            if drifted.contains(&path) {
                conflicts.push(Conflict::new(
                    &path,
                    ConflictReason::DriftedBase {
                        base: meta.base_turn,
                    },
                ));
                continue;
            }
            if !holds(&before, &current) {
                let mut with_markers = false;
                let how = (name, opts.markers, &mut with_markers);
                match three_way(
                    &base, &upper, journal, &path, &before, &after, &current, how,
                ) {
                    Ok(Some(target)) => {
                        if with_markers {
                            marked.push(paths::display(&path));
                        } else {
                            three_way_merged.push(paths::display(&path));
                        }
                        states.push((path, target));
                    }
                    Ok(None) => conflicts.push(Conflict::new(
                        &path,
                        ConflictReason::ChangedInProject {
                            base: meta.base_turn,
                        },
                    )),
                    Err(source) => {
                        return Err(MergeError::Store {
                            name: name.to_string(),
                            path,
                            source,
                        })
                    }
                }
                continue;
            }
        }
        let target = match after {
            Entry::Absent => PreImage::Absent,
            Entry::File { size, perm, .. } => {
                let stored = upper
                    .open_file(&path, libc::O_RDONLY | libc::O_NONBLOCK, 0)
                    .map_err(|e| BlobError::Io {
                        path: wt.upper().join(paths::display(&path)),
                        source: e,
                    })
                    .and_then(|mut f| journal.blobs().put(&mut f, size));
                let (blob, size) = stored.map_err(|source| MergeError::Store {
                    name: name.to_string(),
                    path: path.clone(),
                    source,
                })?;
                PreImage::File {
                    blob,
                    size,
                    perm,
                    ino: 0,
                }
            }
            Entry::Dir { perm } => PreImage::Dir { perm },
            Entry::Symlink { target } => PreImage::Symlink { target },
            Entry::Special { kind, perm, rdev } => PreImage::Special {
                kind: special(kind).unwrap_or(Special::Fifo),
                perm,
                rdev,
            },
        };
        states.push((path, target));
    }
    states.sort_by(|a, b| a.0.cmp(&b.0));
    let (plan, plan_conflicts) = restore::plan::plan(journal, meta.base_turn, states, opts.force);
    conflicts.extend(plan_conflicts);
    conflicts.sort_by(|a, b| a.path.cmp(&b.path));
    let stopped_by_conflicts = !opts.partial && conflicts.iter().any(|c| rewind::stops(journal, c));

    if opts.dry_run || stopped_by_conflicts {
        let mut merged: Vec<String> = plan.iter().map(|p| p.path.clone()).collect();
        merged.extend(already.iter().cloned());
        merged.sort();
        return Ok(MergeReport {
            worktree: name.to_string(),
            turn: None,
            base_turn: meta.base_turn,
            dry_run: opts.dry_run,
            merged: if stopped_by_conflicts {
                Vec::new()
            } else {
                merged
            },
            three_way: three_way_merged,
            identical: already,
            conflicts,
            plan,
            open_turn: journal.open_turn(),
            touched: Vec::new(),
            stopped_by_conflicts,
            marked,
            ignored,
        });
    }
    let label = format!("merge worktree {name}");
    let turn = journal.next_turn(
        excl,
        NewTurn {
            kind: TurnKind::Merge,
            label: Some(&label),
            external_id: None,
            rewound_to: None,
            closing_label: None,
        },
    )?;
    let mark = marker(&state);
    fs::write(&mark, format!("{turn} {name}\n")).map_err(|source| MergeError::Marker {
        path: mark.clone(),
        source,
    })?;
    crate::failpoint::failpoint("merge-begin");
    let (mut merged, exec_conflicts) = restore::apply(journal, excl, &plan);
    conflicts.extend(exec_conflicts);
    sync_project(journal);
    crate::failpoint::failpoint("merge-before-done");
    fs::remove_file(&mark).map_err(|source| MergeError::Marker {
        path: mark.clone(),
        source,
    })?;
    let open_turn = journal.next_turn(excl, NewTurn::agent())?;
    merged.extend(already.iter().cloned());
    merged.sort();
    Ok(MergeReport {
        worktree: name.to_string(),
        turn: Some(turn),
        base_turn: meta.base_turn,
        dry_run: false,
        merged,
        three_way: three_way_merged,
        identical: already,
        conflicts,
        touched: plan.iter().map(|p| p.raw.clone()).collect(),
        plan,
        open_turn,
        stopped_by_conflicts: false,
        marked,
        ignored,
    })
}
