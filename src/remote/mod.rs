//! Checkpoint remotes (`docs/remote.md`): the shadow history of a project
//! (the export repository, and so its worktrees' branches) pushed to a git
//! remote under a namespace that names the machine and the project,
//! `refs/opfs/<machine>/<project key>/`, so that many machines and
//! projects share one remote; and read back elsewhere (listed, a turn
//! materialised into a directory).
//!
//! Pushes run the `git` binary against the export repository (gix 0.87
//! cannot push), with a clean environment ([`GitEnv`]): credentials come
//! from the user's git configuration (credential helpers) and SSH agent,
//! and opfs stores none. The user's own repository, remotes and refs are
//! never read or written: only the export repository in the state dir is.
//!
//! Incremental: the state dir keeps, per remote, the refs the last push
//! left there ([`state::PushState`]); a push sends only refs that changed
//! since (and nothing, no process, when none did), each with a lease
//! (`--force-with-lease`) on what the last push left, so a ref someone
//! else wrote in between (another machine of the same name pushing a
//! project at the same path: a clash) is refused by the remote, never
//! overwritten ([`PushError::Clash`]), while opfs's own rewrites of its
//! history (gc, relabelling) go through.
//!
//! The pieces: [`push`] (this file), `names` (the namespace, the
//! machine's name, the checks and normal form of a remote's URL), `git`
//! (the command and its environment), `state` (`push.json`), `pusher` (the daemon's automatic
//! push thread), `fetch` (listing a remote and materialising a turn).

pub mod bucket;
mod fetch;
mod git;
mod names;
mod pointers;
mod pusher;
pub mod state;

pub use fetch::{
    checkout, list, parse_pointer, turns, BadObject, CheckoutReport, MissingObject, RemoteError,
    RemoteProject, RemoteTurn, SkippedEntry,
};
pub use git::{Cancel, GitEnv};
pub use names::{
    is_relative_path, machine_name, machine_problem, namespace, normalize_url, redact, redact_url,
    url_problem, Target, DEFAULT_TURN_BUDGET, MACHINE_MAX, NAMESPACE_ROOT,
};
pub use pusher::{spawn_pusher, AutoPush, DEFAULT_RETRY};

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::export;
use crate::state::lock::FileLock;
use crate::store::layout::key_of;
use crate::store::StateDir;

/// Why a push failed. Each names the remote, the cause and the fix;
/// nothing local is lost in any case (the export and the history are
/// only read), and the automatic pusher tries again later.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The project has no export repository yet.
    #[error(
        "nothing to push: the project {project} has no exported history yet; mount it (the daemon exports each turn) or run `opfs export`"
    )]
    NotExported {
        /// The project.
        project: PathBuf,
    },
    /// The remote's URL cannot be used ([`url_problem`]).
    #[error("{0}")]
    BadUrl(String),
    /// `git` is not on `PATH`.
    #[error("cannot push to {remote}: the git program is not on PATH; install git")]
    GitNotFound {
        /// The remote.
        remote: String,
    },
    /// The remote could not be reached, or is no git repository that
    /// takes pushes.
    #[error(
        "cannot push to {remote}: the remote could not be reached or did not take the push: {cause}; check the URL, the network and your git credentials (a credential helper or SSH agent); nothing was lost locally; `opfs push` tries again (the daemon's automatic push retries by itself)"
    )]
    Unreachable {
        /// The remote.
        remote: String,
        /// git's message.
        cause: String,
    },
    /// Refs of this project's namespace on the remote hold commits this
    /// state dir never pushed there: another machine of the same name
    /// pushed a project at the same path.
    #[error(
        "push to {remote} rejected: {} on the remote hold{} history this machine did not push (another machine named {machine:?} pushed a project at the same path); give this machine a name of its own ([push] machine = \"NAME\" in the configuration), or, if the remote's copy is stale, delete all of {namespace}/ there: git ls-remote {} '{namespace}/*' | cut -f2 | sed 's/^/:/' | xargs git {} push {}; nothing was lost locally",
        refs.join(", "),
        if refs.len() == 1 { "s" } else { "" },
        crate::paths::shell_quote(remote),
        crate::paths::shell_quote(&format!("--git-dir={}", git_dir.display())),
        crate::paths::shell_quote(remote),
    )]
    Clash {
        /// The remote.
        remote: String,
        /// The refs the remote refused to move.
        refs: Vec<String>,
        /// This machine's name in the namespace.
        machine: String,
        /// The project's namespace on the remote.
        namespace: String,
        /// The export repository (any git repository can run the delete).
        git_dir: PathBuf,
    },
    /// The remote refused the refs for a reason of its own (permissions,
    /// a hook, a full disk).
    #[error(
        "push to {remote} refused by the remote: {cause}; check your permission to push there and the remote's log; nothing was lost locally; `opfs push` tries again (the daemon's automatic push retries by itself)"
    )]
    Refused {
        /// The remote.
        remote: String,
        /// The refs and the remote's reason.
        cause: String,
    },
    /// The bytes behind a pointer file could not be uploaded (the push
    /// is not made, so the remote never holds a pointer whose bytes are
    /// missing).
    #[error(
        "cannot push to {remote}: {source}; nothing was pushed or lost, the push is tried again"
    )]
    Bucket {
        /// The remote.
        remote: String,
        /// The bucket's error.
        #[source]
        source: Box<bucket::BucketError>,
    },
    /// The bytes behind a pointer file are not available locally any
    /// more (the version was dropped, or changed before it was captured).
    #[error("cannot push to {remote}: the bytes of {path} at the end of turn {turn} (BLAKE3 {hash}) are not in the blob store or the project any more; {cause}")]
    Unavailable {
        /// The remote.
        remote: String,
        /// The project-relative path.
        path: String,
        /// The turn whose end it is.
        turn: u64,
        /// The content's BLAKE3.
        hash: String,
        /// What was found instead.
        cause: String,
    },
    /// A version of a file written in place was being written through
    /// the mount while its bytes were read for the bucket, every time it
    /// was read: its bytes are still there (its saved ranges and the
    /// file), only moving. The push is not made, and is tried again.
    #[error(
        "cannot push to {remote} yet: {path} at the end of turn {turn} (BLAKE3 {hash}) is stored as ranges over the file, which is being written through the mount while its bytes are read for the bucket; nothing was pushed or lost, the push is tried again (it succeeds once the writes pause)"
    )]
    Busy {
        /// The remote.
        remote: String,
        /// The project-relative path.
        path: String,
        /// The turn whose end it is.
        turn: u64,
        /// The content's BLAKE3.
        hash: String,
    },
    /// The push was stopped before it ended: the daemon that ran it
    /// unmounted the project ([`Cancel`]). Retried at the next mount.
    #[error(
        "push to {remote} interrupted: the project was unmounted while it ran (its git was stopped); nothing was lost locally; the next mount pushes again (or `opfs push`)"
    )]
    Interrupted {
        /// The remote.
        remote: String,
    },
    /// A local git step failed (reading the export repository).
    #[error("push to {remote}: {what} in {git_dir} failed: {cause}")]
    Git {
        /// The remote.
        remote: String,
        /// The step.
        what: String,
        /// The export repository.
        git_dir: PathBuf,
        /// git's message.
        cause: String,
    },
    /// A file of the state dir could not be used.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl PushError {
    /// The kind, as `opfs status` and `push.json` name it: `unreachable`,
    /// `clash`, `refused`, `not_exported`, `bucket`, `interrupted` or
    /// `error`.
    pub fn kind(&self) -> &'static str {
        match self {
            PushError::Unreachable { .. } => "unreachable",
            PushError::Clash { .. } => "clash",
            PushError::Refused { .. } => "refused",
            PushError::NotExported { .. } => "not_exported",
            PushError::Bucket { .. } | PushError::Busy { .. } => "bucket",
            PushError::Interrupted { .. } => "interrupted",
            _ => "error",
        }
    }
}

/// What a push did.
#[derive(Debug, Clone, Serialize)]
pub struct PushReport {
    /// The remote.
    pub remote: String,
    /// The namespace pushed to.
    pub namespace: String,
    /// Refs created or moved on the remote.
    pub updated: usize,
    /// Refs deleted on the remote (turns gc dropped, worktrees discarded).
    pub deleted: usize,
    /// Refs the remote already held at the commit wanted (git: up to
    /// date), taken as pushed with nothing sent: after `push.json` was
    /// lost or set aside, or a push killed after the remote took it.
    pub adopted: usize,
    /// The newest turn the remote now holds.
    pub last_turn: Option<u64>,
    /// Bytes of the pack sent (git's count; 0 when nothing was sent).
    pub bytes_sent: u64,
    /// Pointer files whose bytes were uploaded to the bucket now.
    pub objects_uploaded: usize,
    /// Bytes uploaded to the bucket.
    pub object_bytes: u64,
    /// Pointer files sent whose bytes are gone for good (in no blob store,
    /// nor in the project): pushed without them, recorded in `push.json`
    /// and shown by `opfs status`; each checks out as its pointer file.
    pub objects_missing: Vec<state::Missing>,
    /// Pointer files sent whose objects did not fit their turn's budget
    /// (`[push] bucket_turn_budget`): not sent to the bucket, recorded in
    /// `push.json` and shown by `opfs status`; each checks out as its
    /// pointer file until the budget is raised and `opfs push --objects`
    /// sends it.
    pub objects_withheld: Vec<state::Withheld>,
    /// `push.json` was unreadable and set aside, and the push started
    /// afresh: what was done ([`state::load_or_set_aside`]).
    pub push_state_set_aside: Option<String>,
    /// Wall time of the push, ms.
    pub elapsed_ms: u64,
}

impl PushReport {
    /// True when the remote already held everything (no process ran).
    pub fn up_to_date(&self) -> bool {
        self.updated == 0
            && self.deleted == 0
            && self.adopted == 0
            && self.objects_uploaded == 0
            && self.objects_missing.is_empty()
            && self.objects_withheld.is_empty()
            && self.push_state_set_aside.is_none()
    }
}

/// The local export ref `local` as it is named on the remote under `ns`:
/// `refs/heads/opfs` is `<ns>/head`, `refs/opfs/<rest>` is `<ns>/<rest>`.
fn remote_ref(ns: &str, local: &str) -> Option<String> {
    if local == export::BRANCH {
        return Some(format!("{ns}/head"));
    }
    local
        .strip_prefix(NAMESPACE_ROOT)
        .map(|rest| format!("{ns}/{rest}"))
}

/// Pushes the export repository of `state`'s project (its history and
/// every worktree branch) to `target`, under [`namespace`]: the refs that
/// changed since the last push to that remote, each with a lease on what
/// that push left there, in one atomic push; plus `<ns>/project`, a
/// commit whose message names the project and the machine (once).
/// Pushes of one project are serialized (a lock in the state dir). Only
/// what is exported is pushed: the caller exports first.
///
/// After `Ok`, the remote holds every pushed ref and `push.json` says so.
/// After `Err`, the remote holds all of them or none (atomic), the local
/// history and export are untouched, and `push.json` records the failure
/// (for `opfs status`) and keeps the leases of the last success; a push killed midway leaves the remote with all
/// or none of its refs too, and the next push finds them (a ref already
/// holding a commit of the export is taken as pushed).
///
/// Errors: see [`PushError`].
pub fn push(state: &StateDir, target: &Target, git: &GitEnv) -> Result<PushReport, PushError> {
    if let Some(problem) = url_problem(&target.url) {
        return Err(PushError::BadUrl(problem));
    }
    if let Some(problem) = machine_problem(&target.machine) {
        return Err(PushError::BadUrl(format!("the machine name {problem}")));
    }
    let started = Instant::now();
    let lock_path = state.push_lock_path();
    let _lock = FileLock::exclusive(&lock_path).map_err(|source| PushError::Io {
        path: lock_path,
        source,
    })?;
    let git_dir = export::default_git_dir(state);
    if !git_dir.join("HEAD").exists() {
        return Err(PushError::NotExported {
            project: state.project.clone(),
        });
    }
    // The URL as git will push to it and fetch from it (the user's
    // `url.<base>.insteadOf` and `pushInsteadOf` rules): no rule may turn
    // it into a `<transport>::` form, and the local receive-pack is given
    // only when the URL git pushes to is still local (a rule rewriting a
    // path to ssh:// must not send opfs's command to the server; one
    // rewriting an ssh:// URL to a path must not run the repository's
    // hooks).
    let rewrites = git::Rewrites::read(git, Some(&git_dir));
    // Recorded as the push's failure (below): a rule added after the
    // mount shows in `opfs status`.
    let rewrite_problem = rewrites.problem(&target.url, true);
    let push_url = rewrites.apply(&target.url, true).0;
    let ns = namespace(&target.machine, &state.project);
    let local = local_refs(&git_dir, target, git)?;
    let (mut all, set_aside) = state::load_or_set_aside(state).map_err(|source| PushError::Io {
        path: state.push_state_path(),
        source,
    })?;
    let rs = all.remotes.entry(target.url.clone()).or_default();
    if rs.namespace != ns {
        *rs = state::RemoteState {
            namespace: ns.clone(),
            ..Default::default()
        };
    }
    let mut wanted: BTreeMap<String, String> = local
        .iter()
        .filter_map(|(r, id)| remote_ref(&ns, r).map(|rr| (rr, id.clone())))
        .collect();
    let last_turn = local
        .keys()
        .filter_map(|r| r.strip_prefix(export::TURN_REF_PREFIX)?.parse::<u64>().ok())
        .max();
    let had_failure = rs.failure.is_some();
    let info_ref = format!("{ns}/project");
    let info = match rs.pushed.get(&info_ref) {
        Some(id) => id.clone(),
        None => info_commit(&git_dir, target, state, git)?,
    };
    wanted.insert(info_ref, info);
    // The leases as the last success left them: a failed attempt records
    // none of what it learnt ([`adopt`] may take a remote ref as pushed,
    // and a ref deleted on the remote since, as a clash's fix says, would
    // then never be pushed again).
    let leases = rs.pushed.clone();
    let mut uploaded = pointers::Uploaded::default();
    let mut result = Err(PushError::Unreachable {
        remote: target.url.clone(),
        cause: String::new(),
    });
    // A second round only after the leases were corrected from what the
    // remote holds (a push killed after the remote took it).
    for round in 0..2 {
        if let Some(problem) = &rewrite_problem {
            result = Err(PushError::BadUrl(problem.clone()));
            break;
        }
        let updates: Vec<(&String, &String)> = wanted
            .iter()
            .filter(|(r, id)| rs.pushed.get(*r) != Some(*id))
            .collect();
        let deletes: Vec<&String> = rs
            .pushed
            .keys()
            .filter(|r| !wanted.contains_key(*r))
            .collect();
        if updates.is_empty() && deletes.is_empty() {
            result = Ok((0, 0, 0));
            break;
        }
        let mut cmd = git.command(Some(&git_dir));
        cmd.args([
            "push",
            "--porcelain",
            "--atomic",
            "--progress",
            "--no-verify",
        ]);
        if git::is_local(&push_url) {
            cmd.arg(format!("--receive-pack={}", git::LOCAL_RECEIVE_PACK));
        }
        cmd.arg(&target.url);
        for (r, id) in &updates {
            let expect = rs.pushed.get(*r).map(String::as_str).unwrap_or("");
            cmd.arg(format!("--force-with-lease={r}:{expect}"));
            cmd.arg(format!("{id}:{r}"));
        }
        for r in &deletes {
            cmd.arg(format!("--force-with-lease={r}:{}", rs.pushed[*r]));
            cmd.arg(format!(":{r}"));
        }
        let (n_up, n_del) = (updates.len(), deletes.len());
        if round == 0 {
            if let Some(cfg) = &target.bucket {
                // The turns, the baseline and the worktree branches sent
                // (a branch's commits since what the remote held).
                let turns: Vec<(String, String)> = updates
                    .iter()
                    .filter(|(r, _)| !r.ends_with("/project") && !r.ends_with("/head"))
                    .map(|(r, id)| (r.to_string(), id.to_string()))
                    .collect();
                match pointers::upload(state, &git_dir, target, git, cfg, &turns, &rs.pushed) {
                    Ok(u) => uploaded = u,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        let out = match git::output(cmd, git) {
            Ok(out) => out,
            // Stopped at the deadline: a failed push like any other,
            // recorded and retried.
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                result = Err(PushError::Unreachable {
                    remote: target.url.clone(),
                    cause: e.to_string(),
                });
                break;
            }
            // The daemon unmounted: recorded, pushed again at the next
            // mount.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                result = Err(PushError::Interrupted {
                    remote: target.url.clone(),
                });
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(PushError::GitNotFound {
                    remote: target.url.clone(),
                })
            }
            Err(e) => {
                return Err(PushError::Io {
                    path: PathBuf::from("git"),
                    source: e,
                })
            }
        };
        if out.status.success() {
            crate::failpoint::failpoint("push-after-git");
            // `=` in git's porcelain output: the remote held it already.
            let held = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.starts_with("=\t"))
                .count()
                .min(n_up);
            result = Ok((n_up - held, n_del, bytes_written(&out.stderr)));
            break;
        }
        let err = classify(&out, target, &ns, &git_dir);
        if round == 0
            && matches!(err, PushError::Clash { .. })
            && adopt(&git_dir, &ns, target, git, rs, &wanted)?
        {
            continue;
        }
        result = Err(err);
        break;
    }
    // Stopped midway (a step that failed because its git was killed
    // reads as its own error): said as what it is.
    if result.is_err() && git.cancel.is_cancelled() {
        result = Err(PushError::Interrupted {
            remote: target.url.clone(),
        });
    }
    let now = state::now_ms();
    let out = match result {
        Ok((updated, deleted, bytes_sent)) => {
            // Each ref that changed since the last success and was not
            // sent now: the remote held it (found by [`adopt`] or said up
            // to date by git).
            let changed = wanted
                .iter()
                .filter(|(r, id)| leases.get(*r) != Some(*id))
                .count();
            let adopted = changed.saturating_sub(updated);
            rs.pushed = wanted;
            rs.last_success_ms = Some(now);
            rs.last_turn = last_turn;
            rs.failure = None;
            note_missing(rs, &uploaded.missing, &uploaded.sent, false);
            note_withheld(rs, &uploaded.withheld, &uploaded.sent, false);
            Ok(PushReport {
                remote: target.url.clone(),
                namespace: ns,
                updated,
                deleted,
                adopted,
                last_turn,
                bytes_sent,
                objects_uploaded: uploaded.n,
                object_bytes: uploaded.bytes,
                objects_missing: uploaded.missing.clone(),
                objects_withheld: uploaded.withheld.clone(),
                push_state_set_aside: set_aside.clone(),
                elapsed_ms: started.elapsed().as_millis() as u64,
            })
        }
        Err(e) => {
            rs.pushed = leases;
            let f = rs.failure.get_or_insert(state::Failure {
                since_ms: now,
                ..Default::default()
            });
            f.kind = e.kind().to_string();
            f.message = e.to_string();
            f.last_attempt_ms = now;
            f.attempts += 1;
            Err(e)
        }
    };
    if out
        .as_ref()
        .map_or(true, |r| !r.up_to_date() || had_failure)
    {
        state::save(state, &all).map_err(|source| PushError::Io {
            path: state.push_state_path(),
            source,
        })?;
    }
    out
}

/// What [`upload_all_objects`] did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Backfill {
    /// Objects written (those already in the bucket are not counted).
    pub objects: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Pointer files whose bytes are gone for good (in no blob store, nor
    /// in the project): skipped, as [`push`] skips them, and recorded in
    /// `push.json`; each checks out as its pointer file.
    pub missing: Vec<state::Missing>,
    /// Pointer files whose objects do not fit their turn's budget: not
    /// sent, and recorded in `push.json` as the complete list of them.
    pub withheld: Vec<state::Withheld>,
}

/// Updates the versions whose bytes `rs` records as gone for good: drops
/// those whose object is now in the bucket (`sent`: uploaded, from the
/// same content written again, or found there) and adds `missing`; with
/// `all` (the whole export was considered, `opfs push --objects`),
/// `missing` replaces the list, so an entry of a turn gc dropped goes too.
fn note_missing(
    rs: &mut state::RemoteState,
    missing: &[state::Missing],
    sent: &[String],
    all: bool,
) {
    if all {
        rs.missing.clear();
    }
    rs.missing.retain(|m| !sent.contains(&m.hash));
    for m in missing {
        if !rs.missing.iter().any(|x| x.hash == m.hash) && !sent.contains(&m.hash) {
            rs.missing.push(m.clone());
        }
    }
}

/// Updates the withheld objects `rs` records: drops those now in the
/// bucket (`sent`) and adds `withheld`; with `all` (the whole export was
/// considered, `opfs push --objects`), `withheld` replaces the list.
fn note_withheld(
    rs: &mut state::RemoteState,
    withheld: &[state::Withheld],
    sent: &[String],
    all: bool,
) {
    if all {
        rs.withheld.clear();
    }
    rs.withheld.retain(|w| !sent.contains(&w.hash));
    for w in withheld {
        if !rs.withheld.iter().any(|x| x.hash == w.hash) {
            rs.withheld.push(w.clone());
        }
    }
}

/// Uploads to `target`'s bucket the bytes behind the pointer files of
/// every exported turn, the baseline and every worktree branch, not only of the turns a push
/// sends: what was pushed before the bucket was configured, or an object
/// deleted from the bucket, goes up again (`opfs push --objects`).
/// Objects already there are not written (create-only, as in [`push`]).
/// A version whose bytes are gone for good is skipped, reported in
/// [`Backfill::missing`] and added to the remote's entry of `push.json`
/// (`opfs status` warns), as [`push`] does. Each turn's objects are
/// chosen within `target`'s per-turn budget as a push chooses them: those
/// that do not fit are reported in [`Backfill::withheld`], and the
/// remote's entry of `push.json` then lists exactly them (a raised budget
/// sends those that now fit and drops them from it). Nothing is done with
/// no bucket.
///
/// Durable after `Ok`: every pointer of the export whose bytes this
/// machine holds has them in the bucket, and `push.json` lists the
/// others. After `Err` some may be written; nothing else changes.
///
/// Errors: [`PushError::BadUrl`], [`PushError::NotExported`], those of
/// the upload ([`PushError::Bucket`], [`PushError::Unavailable`],
/// [`PushError::Git`]), and [`PushError::Io`] (the push lock, `push.json`).
pub fn upload_all_objects(
    state: &StateDir,
    target: &Target,
    git: &GitEnv,
) -> Result<Backfill, PushError> {
    let Some(cfg) = &target.bucket else {
        return Ok(Backfill::default());
    };
    if let Some(problem) = url_problem(&target.url) {
        return Err(PushError::BadUrl(problem));
    }
    let git_dir = export::default_git_dir(state);
    if !git_dir.join("HEAD").exists() {
        return Err(PushError::NotExported {
            project: state.project.clone(),
        });
    }
    let ns = namespace(&target.machine, &state.project);
    let refs: Vec<(String, String)> = local_refs(&git_dir, target, git)?
        .iter()
        .filter_map(|(r, id)| remote_ref(&ns, r).map(|rr| (rr, id.clone())))
        .filter(|(r, _)| {
            r.contains("/turns/") || r.ends_with("/baseline") || r.contains("/worktrees/")
        })
        .collect();
    let u = pointers::upload(state, &git_dir, target, git, cfg, &refs, &BTreeMap::new())?;
    record_objects(state, target, &ns, &u)?;
    Ok(Backfill {
        objects: u.n,
        bytes: u.bytes,
        missing: u.missing,
        withheld: u.withheld,
    })
}

/// Makes `u`'s missing and withheld objects the lists of the `push.json`
/// entry of `target` under `ns` (`u` considered the whole export), under
/// the push lock.
fn record_objects(
    state: &StateDir,
    target: &Target,
    ns: &str,
    u: &pointers::Uploaded,
) -> Result<(), PushError> {
    let lock_path = state.push_lock_path();
    let _lock = FileLock::exclusive(&lock_path).map_err(|source| PushError::Io {
        path: lock_path,
        source,
    })?;
    let io = |source| PushError::Io {
        path: state.push_state_path(),
        source,
    };
    let mut all = state::load(state).map_err(io)?;
    let rs = all.remotes.entry(target.url.clone()).or_default();
    if rs.namespace != ns {
        *rs = state::RemoteState {
            namespace: ns.to_string(),
            ..Default::default()
        };
    }
    let before = (rs.missing.clone(), rs.withheld.clone());
    note_missing(rs, &u.missing, &u.sent, true);
    note_withheld(rs, &u.withheld, &u.sent, true);
    if (&rs.missing, &rs.withheld) != (&before.0, &before.1) {
        state::save(state, &all).map_err(io)?;
    }
    Ok(())
}

/// The export's refs: `refs/heads/opfs` and everything under
/// `refs/opfs/`, with their commit ids.
fn local_refs(
    git_dir: &Path,
    target: &Target,
    git: &GitEnv,
) -> Result<BTreeMap<String, String>, PushError> {
    let mut cmd = git.command(Some(git_dir));
    cmd.args([
        "for-each-ref",
        "--format=%(objectname) %(refname)",
        export::BRANCH,
        NAMESPACE_ROOT,
    ]);
    let out = run_local(cmd, git, git_dir, target, "listing the export's refs")?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(id, r)| (r.to_string(), id.to_string()))
        .collect())
}

/// Runs a local git step in `git_dir`; its stdout.
fn run_local(
    cmd: std::process::Command,
    git: &GitEnv,
    git_dir: &Path,
    target: &Target,
    what: &str,
) -> Result<Vec<u8>, PushError> {
    let out = git::output(cmd, git).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => PushError::GitNotFound {
            remote: target.url.clone(),
        },
        _ => PushError::Git {
            remote: target.url.clone(),
            what: what.to_string(),
            git_dir: git_dir.to_path_buf(),
            cause: e.to_string(),
        },
    })?;
    if !out.status.success() {
        return Err(PushError::Git {
            remote: target.url.clone(),
            what: what.to_string(),
            git_dir: git_dir.to_path_buf(),
            cause: git::stderr_line(&out),
        });
    }
    Ok(out.stdout)
}

/// The message of the `<ns>/project` commit: which project and machine
/// the namespace holds (read back by [`list`]).
fn info_message(state: &StateDir, machine: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    format!(
        "opfs project {}\n\nopfs-project: {}\nopfs-machine: {machine}\nopfs-key: {}\n",
        crate::paths::display(state.project.as_os_str().as_bytes()),
        crate::paths::display(state.project.as_os_str().as_bytes()),
        key_of(&state.project)
    )
}

/// Writes the `<ns>/project` commit (an empty tree; fixed author and
/// time, so it is the same commit every time) into the export repository;
/// its id.
fn info_commit(
    git_dir: &Path,
    target: &Target,
    state: &StateDir,
    git: &GitEnv,
) -> Result<String, PushError> {
    let mut cmd = git.command(Some(git_dir));
    cmd.args(["hash-object", "-w", "-t", "tree", "/dev/null"]);
    let tree = run_local(cmd, git, git_dir, target, "writing the empty tree")?;
    let tree = String::from_utf8_lossy(&tree).trim().to_string();
    let mut cmd = git.command(Some(git_dir));
    cmd.args([
        "commit-tree",
        &tree,
        "-m",
        &info_message(state, &target.machine),
    ])
    .env("GIT_AUTHOR_NAME", "opfs")
    .env("GIT_AUTHOR_EMAIL", "opfs@localhost")
    .env("GIT_AUTHOR_DATE", "@0 +0000")
    .env("GIT_COMMITTER_NAME", "opfs")
    .env("GIT_COMMITTER_EMAIL", "opfs@localhost")
    .env("GIT_COMMITTER_DATE", "@0 +0000");
    let id = run_local(
        cmd,
        git,
        git_dir,
        target,
        "writing the project's description",
    )?;
    Ok(String::from_utf8_lossy(&id).trim().to_string())
}

/// The error a failed `git push --porcelain` stands for: refs refused for
/// a stale lease are a clash, refs the remote refused are
/// [`PushError::Refused`], and a push that reported no ref never reached
/// the remote.
fn classify(
    out: &std::process::Output,
    target: &Target,
    namespace: &str,
    git_dir: &Path,
) -> PushError {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rejected: Vec<(&str, &str)> = stdout
        .lines()
        .filter(|l| l.starts_with('!'))
        .filter_map(|l| {
            let mut f = l.split('\t');
            let _flag = f.next()?;
            let refs = f.next()?;
            let summary = f.next().unwrap_or("");
            Some((refs.rsplit(':').next().unwrap_or(refs), summary))
        })
        .collect();
    let stale: Vec<String> = rejected
        .iter()
        .filter(|(_, s)| {
            s.contains("stale info") || s.contains("fetch first") || s.contains("non-fast-forward")
        })
        .map(|(r, _)| r.to_string())
        .collect();
    if !stale.is_empty() {
        return PushError::Clash {
            remote: target.url.clone(),
            refs: stale,
            machine: target.machine.clone(),
            namespace: namespace.to_string(),
            git_dir: git_dir.to_path_buf(),
        };
    }
    let refused: Vec<String> = rejected
        .iter()
        .filter(|(_, s)| s.contains("remote rejected"))
        .map(|(r, s)| format!("{r} {s}"))
        .collect();
    if !refused.is_empty() {
        let mut cause = refused.join(", ");
        let more = git::stderr_line(out);
        if !more.is_empty() {
            cause = format!("{cause} ({more})");
        }
        return PushError::Refused {
            remote: target.url.clone(),
            cause,
        };
    }
    PushError::Unreachable {
        remote: target.url.clone(),
        cause: git::stderr_line(out),
    }
}

/// After a clash: reads the remote's refs of the namespace and takes as
/// pushed every one that holds what this push wants or a commit the
/// export holds (its own, left by a push killed after the remote took it,
/// or by a rewrite since). True when a lease changed, so a second round
/// can succeed.
fn adopt(
    git_dir: &Path,
    ns: &str,
    target: &Target,
    git: &GitEnv,
    rs: &mut state::RemoteState,
    wanted: &BTreeMap<String, String>,
) -> Result<bool, PushError> {
    let mut cmd = git.command(Some(git_dir));
    cmd.args(["ls-remote", &target.url, &format!("{ns}/*")]);
    let Ok(out) = run_local(cmd, git, git_dir, target, "listing the remote's refs") else {
        return Ok(false);
    };
    let remote: BTreeMap<String, String> = String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(_, r)| r.starts_with(&format!("{ns}/")))
        .map(|(id, r)| (r.to_string(), id.to_string()))
        .collect();
    let mut changed = false;
    for r in wanted.keys().chain(rs.pushed.clone().keys()) {
        let expected = rs.pushed.get(r).cloned();
        let actual = remote.get(r).cloned();
        if expected == actual {
            continue;
        }
        let ours = match &actual {
            None => true,
            Some(id) => wanted.get(r) == Some(id) || has_commit(git_dir, git, id),
        };
        if !ours {
            continue;
        }
        match actual {
            Some(id) => rs.pushed.insert(r.clone(), id),
            None => rs.pushed.remove(r),
        };
        changed = true;
    }
    Ok(changed)
}

/// True when the export repository holds commit `id`.
fn has_commit(git_dir: &Path, git: &GitEnv, id: &str) -> bool {
    let mut cmd = git.command(Some(git_dir));
    cmd.args(["cat-file", "-e", &format!("{id}^{{commit}}")]);
    git::output(cmd, git).is_ok_and(|o| o.status.success())
}

/// The pack size git reports on its `Writing objects: ... , <size>` line
/// (`--progress`), in bytes; 0 when it wrote none.
fn bytes_written(stderr: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(stderr);
    let Some(line) = text
        .split(['\r', '\n'])
        .rfind(|l| l.contains("Writing objects:") && l.contains("done"))
    else {
        return 0;
    };
    // "Writing objects: 100% (4/4), 1.23 KiB | 1.23 MiB/s, done."
    let Some(size) = line.split(", ").nth(1) else {
        return 0;
    };
    let size = size.split(" |").next().unwrap_or(size).trim();
    let mut parts = size.split(' ');
    let (Some(n), Some(unit)) = (parts.next(), parts.next()) else {
        return 0;
    };
    let n: f64 = n.parse().unwrap_or(0.0);
    let mult = match unit {
        "bytes" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => 0.0,
    };
    (n * mult) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_map_into_the_namespace() {
        assert_eq!(
            remote_ref("refs/opfs/m/k", "refs/heads/opfs").as_deref(),
            Some("refs/opfs/m/k/head")
        );
        assert_eq!(
            remote_ref("refs/opfs/m/k", "refs/opfs/turns/3").as_deref(),
            Some("refs/opfs/m/k/turns/3")
        );
    }

    #[test]
    fn the_clash_command_quotes_the_remote_and_the_export() {
        let e = PushError::Clash {
            remote: "https://h/x.git?a&b".into(),
            refs: vec!["refs/opfs/m/k/head".into()],
            machine: "m".into(),
            namespace: "refs/opfs/m/k".into(),
            git_dir: PathBuf::from("/tmp/my project/export.git"),
        }
        .to_string();
        assert!(
            e.contains(
                "git ls-remote 'https://h/x.git?a&b' 'refs/opfs/m/k/*' | cut -f2 | sed 's/^/:/' \
                 | xargs git '--git-dir=/tmp/my project/export.git' push 'https://h/x.git?a&b';"
            ),
            "{e}"
        );
    }

    #[test]
    fn pack_size_is_read_from_gits_progress() {
        let e = b"Enumerating objects: 5, done.\nWriting objects:  50% (2/4)\rWriting objects: 100% (4/4), 1.50 KiB | 1.50 MiB/s, done.\n";
        assert_eq!(bytes_written(e), 1536);
        assert_eq!(
            bytes_written(b"Writing objects: 100% (3/3), 250 bytes | 250.00 KiB/s, done."),
            250
        );
    }
}
