//! The executor: writes a plan's target states into the project.
//!
//! Order (see `docs/design.md`): record the current state of every planned
//! path in the open turn; removals, deepest path first; creations and
//! rewrites, shallowest first, directories created owner-writable;
//! directory owners, attributes and permission bits, deepest first (each
//! other path gets its owner and extended attributes right after its own
//! step, then its permission bits again). Regular files that exist on
//! both sides are rewritten in place, which keeps hard links to them
//! intact; a file the turn moved to a name with other links is moved back
//! through a parked link (`moved_inode_pairs`); names that were hard links
//! of one inode become links again after the creations and rewrites
//! ([`Step::Link`], `super::links`). Failpoints
//! (`rewind-after-capture`, `rewind-patch-run`, `rewind-after-step`) let
//! the crash tests stop it anywhere.

use std::collections::BTreeSet;
use std::io::{self, Seek, Write};

use crate::capture::{CaptureError, Exclusive, Journal};
use crate::failpoint::{failpoint, failpoint_error};
use crate::record::{PreImage, Special};
use crate::tree::Dir;
use crate::view::current::Current;
use crate::view::ranges::Segment;

use super::conflict::{Conflict, ConflictReason, FailedStep};
use super::plan::{PathPlan, Step};

fn copy_blob(journal: &Journal, blob: &[u8; 32], out: &mut std::fs::File) -> io::Result<()> {
    let blob_err = |e: crate::store::BlobError| io::Error::other(e.to_string());
    if let Some(data) = journal.inline_blob(blob).map_err(blob_err)? {
        return out.write_all(&data);
    }
    let src = journal.blobs().open_verified(blob).map_err(blob_err)?;
    // Holes of the blob become holes of the file (punched where it held
    // bytes); the position ends at the end, as after a plain copy.
    let size = src.metadata()?.len();
    crate::store::copy_sparse(&src, size, out)?;
    out.seek(io::SeekFrom::Start(size))?;
    Ok(())
}

fn set_perm(file: &std::fs::File, perm: u32) -> io::Result<()> {
    Ok(rustix::fs::fchmod(
        file,
        rustix::fs::Mode::from_bits_retain(perm),
    )?)
}

fn remove(backing: &Dir, p: &PathPlan) -> io::Result<()> {
    match p.current_state {
        Current::Dir { .. } => backing.rmdir(&p.raw),
        Current::Absent => Ok(()),
        _ => backing.unlink(&p.raw),
    }
}

fn create(journal: &Journal, p: &PathPlan) -> io::Result<()> {
    let backing = journal.backing();
    match &p.target_state {
        PreImage::Absent => Ok(()),
        PreImage::File { blob, perm, .. } => {
            let mut f =
                backing.open_file(&p.raw, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)?;
            copy_blob(journal, blob, &mut f)?;
            set_perm(&f, *perm)
        }
        PreImage::Ranged { .. } => Err(io::Error::other(
            "a file kept as ranges must be put together before it is restored",
        )),
        PreImage::Unknown => Err(io::Error::other(
            "its state when the turn began is unknown (the planner never plans it)",
        )),
        // Created owner-writable; the real bits are set once its children exist.
        PreImage::Dir { .. } => backing.mkdir(&p.raw, 0o700),
        PreImage::Symlink { target } => backing.symlink(target, &p.raw),
        PreImage::Special { kind, perm, rdev } => {
            let rdev = if matches!(kind, Special::Char | Special::Block) {
                *rdev
            } else {
                0
            };
            backing.mknod(&p.raw, kind.type_bits() | perm, rdev)
        }
    }
}

/// Writes a ranged target back in place: each saved run at its offset,
/// then the turn-start length and permission bits.
fn patch_in_place(journal: &Journal, p: &PathPlan, segments: &[Segment]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let PreImage::Ranged { size, perm, .. } = &p.target_state else {
        return Err(io::Error::other(
            "in-place restore of a target not kept as ranges",
        ));
    };
    let f = journal.backing().open_file(&p.raw, libc::O_WRONLY, 0)?;
    let blob_err = |e: crate::store::BlobError| io::Error::other(e.to_string());
    let mut loaded: Option<([u8; 32], Vec<u8>)> = None;
    for s in segments {
        if loaded.as_ref().map(|(h, _)| h) != Some(&s.blob) {
            let data = journal.read_piece(&s.blob, s.at).map_err(blob_err)?;
            loaded = Some((s.blob, data));
        }
        let data = loaded.as_ref().map(|(_, d)| d.as_slice()).unwrap_or(&[]);
        let run = data
            .get(s.skip as usize..(s.skip + s.len) as usize)
            .ok_or_else(|| io::Error::other("a saved range is shorter than its record"))?;
        f.write_all_at(run, s.offset)?;
        failpoint("rewind-patch-run");
    }
    f.set_len(*size)?;
    set_perm(&f, *perm)
}

fn rewrite(journal: &Journal, p: &PathPlan) -> io::Result<()> {
    if let Some(segments) = &p.patch {
        return patch_in_place(journal, p, segments);
    }
    let PreImage::File { blob, perm, .. } = &p.target_state else {
        return Err(io::Error::other("rewrite of a non-file target"));
    };
    // Check the blob before truncating anything.
    journal
        .verify_blob(blob)
        .map_err(|e| io::Error::other(e.to_string()))?;
    // Overwritten in place, then the tail cut: truncating to zero first
    // would free every block only to allocate it again (and on a filesystem
    // mounted with `discard`, wait for one synchronous discard per file).
    let mut f = journal.backing().open_file(&p.raw, libc::O_WRONLY, 0)?;
    copy_blob(journal, blob, &mut f)?;
    let len = f.stream_position()?;
    f.set_len(len)?;
    set_perm(&f, *perm)
}

/// Gives `p`'s path the owner and extended attributes of its target
/// (when its record holds them), then its permission bits again if that
/// changed them (a chown clears setuid and setgid; an access ACL sets the
/// group bits). Directories get their bits in the executor's last pass.
///
/// Errors: the first failure (a chown or attribute the process may not
/// set: `EPERM` without privilege); the other settings are still made.
fn restore_attrs(backing: &Dir, p: &PathPlan) -> io::Result<()> {
    let Some(want) = &p.target_meta else {
        return Ok(());
    };
    let perm = match &p.target_state {
        PreImage::Absent | PreImage::Unknown => return Ok(()),
        PreImage::File { perm, .. }
        | PreImage::Ranged { perm, .. }
        | PreImage::Special { perm, .. } => Some(*perm),
        PreImage::Dir { .. } | PreImage::Symlink { .. } => None,
    };
    let st = backing
        .lstat(&p.raw)?
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
    let mut first: Option<io::Error> = None;
    if st.uid != want.uid || st.gid != want.gid {
        if let Err(e) = backing.set_owner(&p.raw, want.uid, want.gid) {
            first = Some(io::Error::new(
                e.kind(),
                format!(
                    "chown to {}:{} (from {}:{}): {e}",
                    want.uid, want.gid, st.uid, st.gid
                ),
            ));
        }
    }
    if let Err(e) = backing.set_xattrs(&p.raw, None, &want.xattrs) {
        first.get_or_insert(e);
    }
    if let Some(perm) = perm {
        if backing.lstat(&p.raw)?.is_some_and(|now| now.perm() != perm) {
            backing.chmod(&p.raw, perm)?;
        }
    }
    first.map_or(Ok(()), Err)
}

/// Pairs of plan entries `(q, p)`: `q` is a path this plan removes whose
/// file has other names, `p` a path this plan creates as a regular file
/// that named that same inode when it was recorded. The turn moved the
/// file from `p` to `q`; it may have names opfs never saw (hard links made
/// before the mount). Instead of a fresh file at `p`, the executor moves the
/// inode back: it parks a link to it in the state dir before removing `q`,
/// links it in at `p` and rewrites it in place, so every name of the inode
/// gets the turn-start bytes and a later redo moves it back again.
pub(crate) fn moved_inode_pairs(plan: &[PathPlan]) -> Vec<(usize, usize)> {
    let mut removed: std::collections::HashMap<u64, usize> = Default::default();
    for (i, q) in plan.iter().enumerate() {
        if let Current::File { stat } = &q.current_state {
            if stat.nlink > 1 && q.steps.contains(&Step::Remove) {
                removed.insert(stat.ino, i);
            }
        }
    }
    let mut pairs = Vec::new();
    for (i, p) in plan.iter().enumerate() {
        if let PreImage::File { ino, .. } = &p.target_state {
            if *ino != 0 && p.steps.contains(&Step::Create) {
                if let Some(&q) = removed.get(ino) {
                    if q != i {
                        pairs.push((q, i));
                    }
                }
            }
        }
    }
    pairs
}

/// Applies the plan's steps; returns the conflicts met.
fn execute(journal: &Journal, plan: &[PathPlan], tick: &mut dyn FnMut()) -> Vec<Conflict> {
    let backing = journal.backing();
    let pairs = moved_inode_pairs(plan);
    // p index -> parked link to the inode that moves back to p.
    let mut parked: std::collections::HashMap<usize, std::path::PathBuf> = Default::default();
    let mut failed: BTreeSet<usize> = BTreeSet::new();
    let mut conflicts = Vec::new();
    let mut fail = |i: usize, step: FailedStep, source: io::Error, failed: &mut BTreeSet<usize>| {
        if failed.insert(i) {
            conflicts.push(Conflict::new(
                &plan[i].raw,
                ConflictReason::Step { step, source },
            ));
        }
    };
    // Removals, deepest first: in byte order a directory sorts before its
    // children, so reverse order visits children first.
    for (i, p) in plan.iter().enumerate().rev() {
        if p.steps.contains(&Step::Remove) {
            for &(q, target) in pairs.iter().filter(|(q, _)| *q == i) {
                let park = journal.state().blobs_dir().join("tmp").join(format!(
                    "park-{}-{}",
                    std::process::id(),
                    target
                ));
                let _ = std::fs::remove_file(&park);
                match backing.link_out(&plan[q].raw, &park) {
                    Ok(()) => {
                        parked.insert(target, park);
                    }
                    // Another filesystem: put the turn-start bytes into the
                    // inode through this name before it goes, so its other
                    // names are restored (the new file at p is separate).
                    Err(_) => {
                        if let PreImage::File { blob, .. } = &plan[target].target_state {
                            let _ = backing
                                .open_file(&plan[q].raw, libc::O_WRONLY | libc::O_TRUNC, 0)
                                .and_then(|mut f| copy_blob(journal, blob, &mut f));
                        }
                    }
                }
            }
            if let Err(e) = failpoint_error("rewind-write").and_then(|()| remove(backing, p)) {
                fail(i, FailedStep::Remove, e, &mut failed);
            }
            failpoint("rewind-after-step");
            tick();
        }
    }
    for (i, p) in plan.iter().enumerate() {
        tick();
        if failed.contains(&i) || p.steps.contains(&Step::Link) {
            continue;
        }
        let result = if let Err(e) = failpoint_error("rewind-write") {
            Err(e)
        } else if let Some(park) = parked.remove(&i) {
            let moved_back = backing
                .link_in(&park, &p.raw)
                .and_then(|()| rewrite(journal, p));
            let result = match moved_back {
                Ok(()) => Ok(()),
                Err(_) => {
                    // Restore the inode's other names through the parked
                    // link, then give p a file of its own.
                    if let PreImage::File { blob, .. } = &p.target_state {
                        let _ = std::fs::OpenOptions::new()
                            .write(true)
                            .truncate(true)
                            .open(&park)
                            .and_then(|mut f| copy_blob(journal, blob, &mut f));
                    }
                    create(journal, p)
                }
            };
            let _ = std::fs::remove_file(&park);
            result
        } else if p.steps.contains(&Step::Create) {
            create(journal, p)
        } else if p.steps.contains(&Step::Rewrite) {
            rewrite(journal, p)
        } else if p.steps.contains(&Step::Chmod) && !p.target_state.is_dir() {
            match &p.target_state {
                PreImage::File { perm, .. }
                | PreImage::Ranged { perm, .. }
                | PreImage::Special { perm, .. } => backing.chmod(&p.raw, *perm),
                _ => Ok(()),
            }
        } else {
            Ok(())
        };
        if let Err(e) = result {
            fail(i, FailedStep::Restore, e, &mut failed);
        } else if !p.target_state.is_dir() {
            if let Err(e) = restore_attrs(backing, p) {
                fail(i, FailedStep::Attrs, e, &mut failed);
            }
        }
        failpoint("rewind-after-step");
    }
    // Hard links, once every file they may link to exists (`links`):
    // the link, then the inode's bytes or bits when this name carries
    // them, then its owner and attributes.
    for (i, p) in plan.iter().enumerate() {
        let Some(to) = p.link_raw.as_deref() else {
            continue;
        };
        if failed.contains(&i) || !p.steps.contains(&Step::Link) {
            continue;
        }
        let result = backing.link(to, &p.raw).and_then(|()| {
            if p.steps.contains(&Step::Rewrite) {
                rewrite(journal, p)
            } else if p.steps.contains(&Step::Chmod) {
                match &p.target_state {
                    PreImage::File { perm, .. } => backing.chmod(&p.raw, *perm),
                    _ => Ok(()),
                }
            } else {
                Ok(())
            }
        });
        if let Err(e) = result {
            fail(i, FailedStep::Restore, e, &mut failed);
        } else if let Err(e) = restore_attrs(backing, p) {
            fail(i, FailedStep::Attrs, e, &mut failed);
        }
        failpoint("rewind-after-step");
    }
    for (i, p) in plan.iter().enumerate().rev() {
        if failed.contains(&i) {
            continue;
        }
        if let PreImage::Dir { perm } = p.target_state {
            if let Err(e) = restore_attrs(backing, p) {
                fail(i, FailedStep::Attrs, e, &mut failed);
            }
            if let Err(e) = backing.chmod(&p.raw, perm) {
                fail(i, FailedStep::Chmod, e, &mut failed);
            }
            failpoint("rewind-after-step");
        }
    }
    conflicts
}

/// With `--sync`, makes the executor's writes to the project durable
/// before the restore is marked done: otherwise a power loss could keep the
/// `done` mark and lose restored bytes, a half-restored project nobody
/// would be told about. Without `--sync` (process crashes only) the page
/// cache already holds them. A failure is logged: the restore stays correct
/// for process crashes.
pub(crate) fn sync_project(journal: &Journal) {
    if !journal.blobs().is_sync() {
        return;
    }
    if let Err(e) = journal.backing().syncfs() {
        log::warn!("cannot sync the project after a rewind: {e}");
    }
}

/// Executes `plan` as the open turn: first records the current state of
/// every planned path in that turn (so the restore can itself be rewound),
/// then runs the steps (removals deepest first, creations and rewrites
/// shallowest first, directory bits deepest first) and remembers the
/// fingerprints of what it wrote. The caller has opened the turn (a rewind
/// or merge turn); `excl` holds the project's mutations out.
///
/// Returns the rendered paths restored and the paths not restored, with
/// the reason: a path whose state cannot be recorded is never touched, and
/// a failed step leaves the other paths going on. Nothing here is an
/// error: what is durable is what the index's records say (each captured
/// path), and the project's bytes once [`sync_project`] ran.
pub(crate) fn apply(
    journal: &Journal,
    excl: &Exclusive<'_>,
    plan: &[PathPlan],
) -> (Vec<String>, Vec<Conflict>) {
    apply_with_progress(journal, excl, plan, &mut |_, _| {})
}

/// The units of work [`apply_with_progress`] counts for `plan`: one per
/// path recorded, one per removal, one per path restored.
pub(crate) fn work_units(plan: &[PathPlan]) -> u64 {
    let removals = plan
        .iter()
        .filter(|p| p.steps.contains(&Step::Remove))
        .count();
    (2 * plan.len() + removals) as u64
}

/// [`apply`], calling `progress(done, total)` as it goes: `total` is
/// [`work_units`] of `plan`, `done` grows by one per unit and ends at
/// `total` (the last call), whatever failed on the way.
pub(crate) fn apply_with_progress(
    journal: &Journal,
    excl: &Exclusive<'_>,
    plan: &[PathPlan],
    progress: &mut dyn FnMut(u64, u64),
) -> (Vec<String>, Vec<Conflict>) {
    let recorded = record(journal, excl, plan, progress);
    let (restored, mut conflicts) = execute_recorded(journal, excl, &recorded, progress);
    let mut all = recorded.conflicts;
    all.append(&mut conflicts);
    (restored, all)
}

/// What [`record`] did: the plan entries whose current state is recorded
/// (the ones the executor may change), the paths it could not record, and
/// the progress so far.
pub(crate) struct Recorded {
    /// The entries recorded, in plan order.
    pub runnable: Vec<PathPlan>,
    /// Paths not recorded, with the reason (never touched).
    pub conflicts: Vec<Conflict>,
    /// Names a link step makes this plan's paths share an inode with that
    /// the plan has no entry of (recorded too).
    anchors: Vec<Vec<u8>>,
    /// Units of work done, of `total` ([`work_units`]).
    done: u64,
    total: u64,
}

impl Recorded {
    /// The first failure to record that came from the state dir (storing
    /// the bytes, the capture log, the index: no room, an I/O error), not
    /// from the path itself: the restore must not go on.
    pub fn store_failure(&self) -> Option<&Conflict> {
        self.conflicts.iter().find(|c| {
            matches!(
                &c.reason,
                ConflictReason::Capture(
                    CaptureError::Blob { .. }
                        | CaptureError::Log { .. }
                        | CaptureError::Index { .. }
                )
            )
        })
    }
}

/// The first phase of [`apply`] (R2 in `docs/crash-model.md`): records the
/// current state of every planned path in the open turn, so the restore can
/// itself be rewound. Writes nothing to the project. The records are in
/// the capture log when it returns (the caller commits them to the index
/// before [`execute_recorded`] if it needs them there).
pub(crate) fn record(
    journal: &Journal,
    _excl: &Exclusive<'_>,
    plan: &[PathPlan],
    progress: &mut dyn FnMut(u64, u64),
) -> Recorded {
    let total = work_units(plan);
    let mut done = 0u64;
    let mut conflicts = Vec::new();
    let mut runnable = Vec::with_capacity(plan.len());
    // Names a link step makes this plan's paths share an inode with that
    // the plan has no entry of: a `rewrite` or `chmod` through the link
    // changes them too, so they are recorded in the turn (a redo puts them
    // back) and remembered after.
    let planned: BTreeSet<&[u8]> = plan.iter().map(|p| p.raw.as_slice()).collect();
    let anchors: BTreeSet<&[u8]> = plan
        .iter()
        .filter_map(|p| p.link_raw.as_deref())
        .filter(|a| !planned.contains(a))
        .collect();
    for p in plan {
        done += 1;
        progress(done, total);
        let capture = match (&p.patch, &p.target_state) {
            // Only what the restore overwrites, as ranges of the rewind turn.
            (Some(segments), PreImage::Ranged { size, .. }) => {
                let mut ranges: Vec<(u64, u64)> =
                    segments.iter().map(|s| (s.offset, s.len)).collect();
                ranges.push((*size, u64::MAX - size));
                journal.capture_ranges(&p.raw, &ranges)
            }
            _ => journal.capture(&p.raw),
        };
        let captured = match capture {
            // Under a symlink this plan removes (see `plan::plan`): the name
            // is not in the tree, its current state is "absent".
            Err(CaptureError::Read { source, .. })
                if source.raw_os_error() == Some(libc::ELOOP)
                    && p.current_state == Current::Absent =>
            {
                let turn = journal.open_turn();
                journal
                    .with_index(|ix| ix.add_preimage(turn, &p.raw, &PreImage::Absent))
                    .map(drop)
                    .map_err(|source| CaptureError::Index {
                        path: p.raw.clone(),
                        source,
                    })
            }
            other => other,
        };
        // A path that links to a name outside the plan records that name
        // first (once per turn: later captures of it are no-ops).
        let captured = captured.and_then(|()| match p.link_raw.as_deref() {
            Some(a) if anchors.contains(a) => journal.capture(a),
            _ => Ok(()),
        });
        failpoint("rewind-after-capture");
        match captured {
            Ok(()) => runnable.push(p.clone()),
            Err(e) => conflicts.push(Conflict::new(&p.raw, ConflictReason::Capture(e))),
        }
    }
    Recorded {
        runnable,
        conflicts,
        anchors: anchors.into_iter().map(<[u8]>::to_vec).collect(),
        done,
        total,
    }
}

/// The second phase of [`apply`] (R4, R5): runs the steps of the recorded
/// entries and remembers the fingerprints of what it wrote. Returns the
/// rendered paths restored and the paths whose step failed (the others
/// went on).
pub(crate) fn execute_recorded(
    journal: &Journal,
    _excl: &Exclusive<'_>,
    recorded: &Recorded,
    progress: &mut dyn FnMut(u64, u64),
) -> (Vec<String>, Vec<Conflict>) {
    let (total, mut done) = (recorded.total, recorded.done);
    let runnable = &recorded.runnable;
    let exec = execute(journal, runnable, &mut || {
        done += 1;
        progress(done.min(total), total);
    });
    progress(total, total);
    for p in runnable {
        journal.remember(&p.raw);
    }
    for a in &recorded.anchors {
        journal.remember(a);
    }
    if let Err(e) = journal.flush() {
        log::warn!("cannot store fingerprints after the rewind: {e}");
    }
    let failed: BTreeSet<&[u8]> = exec.iter().map(|c| c.path.as_slice()).collect();
    let restored = runnable
        .iter()
        .filter(|p| !failed.contains(p.raw.as_slice()))
        .map(|p| p.path.clone())
        .collect();
    (restored, exec)
}

/// Runs `plan`'s steps without recording anything first: for putting back
/// states the open turn recorded already (a restore rolling back what it
/// wrote). Remembers the fingerprints of what it wrote. Returns the
/// rendered paths restored and the paths whose step failed.
pub(crate) fn execute_unrecorded(
    journal: &Journal,
    excl: &Exclusive<'_>,
    plan: &[PathPlan],
) -> (Vec<String>, Vec<Conflict>) {
    let recorded = Recorded {
        runnable: plan.to_vec(),
        conflicts: Vec::new(),
        anchors: Vec::new(),
        done: 0,
        total: work_units(plan),
    };
    execute_recorded(journal, excl, &recorded, &mut |_, _| {})
}

/// True when a step failed for a reason that is not the path's own: the
/// filesystem is full, over quota, read-only or failing (`ENOSPC`,
/// `EDQUOT`, `EROFS`, `EIO`). The restore then stops and rolls back
/// instead of leaving a half-restored project.
pub(crate) fn is_hard_failure(c: &Conflict) -> bool {
    match &c.reason {
        ConflictReason::Step { source, .. } => matches!(
            source.raw_os_error(),
            Some(libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EIO)
        ),
        _ => false,
    }
}
