//! Rewind: plan, check, and restore the project to the start of a turn.
//!
//! The plan is computed from path states: for every path recorded in turn N
//! or later, its earliest record in that range is its state when turn N
//! began (`Index::states_at`). Each path whose current state differs gets
//! actions; paths never recorded since N are never touched (design §2.4).
//!
//! Execution order (see `docs/design.md`):
//! 1. record the current state of every planned path in the rewind's own
//!    turn (so the rewind can itself be rewound);
//! 2. removals, deepest path first (children before their directory);
//! 3. creations and rewrites, shallowest first, directories created
//!    owner-writable;
//! 4. directory permission bits, deepest first.
//!
//! A path whose step fails is reported with the reason; the others go on.
//! Regular files that exist on both sides are rewritten in place, which keeps
//! hard links to them intact.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Seek, Write};

use serde::Serialize;

use crate::backing::Backing;
use crate::failpoint::failpoint;
use crate::journal::{CaptureError, Journal};
use crate::paths;
use crate::record::{hex, PreImage, Special};
use crate::store::{IndexError, TurnKind};
use crate::view::current::{self, Current};
use crate::view::{check_turn, TurnError};

/// Errors that stop a rewind before it writes anything.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    /// The turn cannot be rewound to: it does not exist or was dropped by
    /// retention (`opfs gc`).
    #[error(transparent)]
    Turn(#[from] TurnError),
    /// The index failed or is corrupt.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The project directory was deleted while the daemon served it.
    #[error("project {0} was deleted while it was mounted; nothing was restored (unmount, recreate the directory, mount it again, then rewind)")]
    ProjectDeleted(std::path::PathBuf),
}

/// One planned step on one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Remove what is there now (a file, symlink, special file or an empty
    /// directory).
    Remove,
    /// Create the target (after a removal, or where nothing is).
    Create,
    /// Rewrite an existing regular file's bytes in place.
    Rewrite,
    /// Set the permission bits only.
    Chmod,
}

/// The plan for one path.
#[derive(Debug, Clone, Serialize)]
pub struct PathPlan {
    /// The path, rendered (`\xNN` for bytes that are not UTF-8).
    pub path: String,
    /// The path's raw bytes.
    #[serde(skip)]
    pub raw: Vec<u8>,
    /// What is there now: `absent`, `file`, `dir`, `symlink`, `special`.
    pub current: &'static str,
    /// What will be there: `absent`, `file`, `dir`, `symlink`, `fifo`, ...
    pub target: &'static str,
    /// The steps, in order.
    pub steps: Vec<Step>,
    #[serde(skip)]
    target_state: PreImage,
    #[serde(skip)]
    current_state: Current,
    /// For a file kept as ranges over the project's file: the runs to
    /// write back in place (the target is then `PreImage::Ranged`).
    #[serde(skip)]
    patch: Option<Vec<crate::view::ranges::Segment>>,
}

/// A path left unrestored and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Conflict {
    /// The path, rendered.
    pub path: String,
    /// Why it was not restored.
    pub reason: String,
}

/// The outcome of a rewind (or of its dry run).
#[derive(Debug, Clone, Serialize)]
pub struct RewindReport {
    /// The turn that records this rewind (for a dry run: the number it would
    /// get).
    pub turn: Option<u64>,
    /// The turn whose start was restored.
    pub rewound_to: u64,
    /// True for `--dry-run`: nothing was written.
    pub dry_run: bool,
    /// Paths brought back to their state at `rewound_to`'s start (for a dry
    /// run: the paths that would be).
    pub restored: Vec<String>,
    /// Paths left as they are, with the reason.
    pub conflicts: Vec<Conflict>,
    /// The plan that was (or would be) executed.
    pub plan: Vec<PathPlan>,
    /// The agent turn open after the rewind.
    pub open_turn: u64,
    /// Raw bytes of every path the rewind wrote (for cache invalidation).
    #[serde(skip)]
    pub touched: Vec<Vec<u8>>,
}

fn hash_file(backing: &Backing, path: &[u8]) -> io::Result<[u8; 32]> {
    let mut f = backing.open_file(path, libc::O_RDONLY, 0)?;
    let mut hasher = blake3::Hasher::new();
    io::copy(&mut f, &mut hasher)?;
    Ok(*hasher.finalize().as_bytes())
}

/// Decides the steps that turn `current` into `target`. Empty when they
/// already match (content compared by hash when the sizes agree).
fn steps_for(
    backing: &Backing,
    path: &[u8],
    current: &Current,
    target: &PreImage,
) -> io::Result<Vec<Step>> {
    use Step::*;
    Ok(match (current, target) {
        (Current::Absent, PreImage::Absent) => vec![],
        // Only planned over the file its ranges are laid over (see
        // `resolve_ranged`): written back in place.
        (Current::File { .. }, PreImage::Ranged { .. }) => vec![Rewrite],
        (Current::Absent, _) => vec![Create],
        (_, PreImage::Absent) => vec![Remove],
        // The path is now another name of a file with other links, and was
        // not that file when recorded (a hard link made since): writing in
        // place would change the other names too. Replace it instead.
        (Current::File { stat }, PreImage::File { ino, .. })
            if stat.nlink > 1 && *ino != 0 && stat.ino != *ino =>
        {
            vec![Remove, Create]
        }
        (
            Current::File { stat },
            PreImage::File {
                blob, size, perm, ..
            },
        ) => {
            let same_bytes = stat.size == *size && hash_file(backing, path)? == *blob;
            match (same_bytes, stat.perm() == *perm) {
                (true, true) => vec![],
                (true, false) => vec![Chmod],
                (false, _) => vec![Rewrite],
            }
        }
        (Current::Dir { perm: cur }, PreImage::Dir { perm }) => {
            if cur == perm {
                vec![]
            } else {
                vec![Chmod]
            }
        }
        (Current::Symlink { target: cur }, PreImage::Symlink { target }) => {
            if cur == target {
                vec![]
            } else {
                vec![Remove, Create]
            }
        }
        (
            Current::Special {
                type_bits,
                perm: cur_perm,
                rdev: cur_rdev,
            },
            PreImage::Special { kind, perm, rdev },
        ) => {
            if *type_bits != kind.type_bits() || cur_rdev != rdev {
                vec![Remove, Create]
            } else if cur_perm != perm {
                vec![Chmod]
            } else {
                vec![]
            }
        }
        _ => vec![Remove, Create],
    })
}

/// Computes the plan for rewinding to the start of `to` from the index and
/// the project's current state. Writes nothing.
///
/// Returns the plan and the paths that cannot even be planned (unreadable).
pub fn plan(
    journal: &Journal,
    to: u64,
    force: bool,
) -> Result<(Vec<PathPlan>, Vec<Conflict>), RewindError> {
    plan_until(journal, to, None, force)
}

fn check_rewind_turn(journal: &Journal, to: u64) -> Result<(), RewindError> {
    if journal.backing().is_deleted() {
        return Err(RewindError::ProjectDeleted(journal.project().to_path_buf()));
    }
    journal.with_index(|ix| check_turn(ix, to))??;
    Ok(())
}

fn plan_until(
    journal: &Journal,
    to: u64,
    until: Option<u64>,
    force: bool,
) -> Result<(Vec<PathPlan>, Vec<Conflict>), RewindError> {
    check_rewind_turn(journal, to)?;
    let states = journal.with_index(|ix| ix.states_at(to, until))?;
    let backing = journal.backing();
    let mut plan = Vec::new();
    let mut conflicts = Vec::new();
    // Symlinks this plan removes. States come sorted by path, so an
    // ancestor is planned before anything under it.
    let mut removed_links: BTreeSet<Vec<u8>> = BTreeSet::new();
    // Paths whose target is not a directory (absent, a file, ...): nothing
    // can be restored beneath them. A record beneath one can only come from
    // a change made outside the mount (say, a file created directly in the
    // project inside a directory the agent then removed through the mount).
    let mut not_dirs: BTreeMap<Vec<u8>, &'static str> = BTreeMap::new();
    for (path, target) in states {
        if paths::is_excluded(&path) {
            continue;
        }
        let under_not_dir =
            paths::ancestors(&path).find_map(|a| not_dirs.get(a).map(|kind| (a.to_vec(), *kind)));
        if !target.is_dir() {
            not_dirs.insert(path.clone(), target.kind_name());
        }
        if matches!(target, PreImage::Unknown) {
            conflicts.push(Conflict {
                path: paths::display(&path),
                reason: format!(
                    "it was created or replaced outside the mount after turn {to} began, so its state then is unknown; left as it is"
                ),
            });
            continue;
        }
        if let (Some((parent, kind)), false) = (&under_not_dir, matches!(target, PreImage::Absent))
        {
            let then = match *kind {
                "absent" => "absent".to_string(),
                "unknown" => "of unknown state".to_string(),
                k => format!("a {k}"),
            };
            conflicts.push(Conflict {
                path: paths::display(&path),
                reason: format!(
                    "its record says it existed when turn {to} began, but {} was then {then}: it was made outside the mount, so its state then is unknown; left as it is",
                    paths::display(parent),
                ),
            });
            continue;
        }
        let mut patch = None;
        let target = match target {
            PreImage::Ranged { .. } => match resolve_ranged(journal, &path, to) {
                Ok(Resolved::Blob(t)) => t,
                Ok(Resolved::InPlace(t, segments)) => {
                    patch = Some(segments);
                    t
                }
                Err(reason) => {
                    conflicts.push(Conflict {
                        path: paths::display(&path),
                        reason: format!("cannot restore its content: {reason}"),
                    });
                    continue;
                }
            },
            t => t,
        };
        let current = match current::read(backing, &path) {
            // An ancestor is a symlink now; if this plan removes it (to put
            // the directory back), the name will be free once removals ran.
            Err(e)
                if e.raw_os_error() == Some(libc::ELOOP)
                    && removed_links
                        .iter()
                        .any(|l| path.starts_with(l) && path.get(l.len()) == Some(&b'/')) =>
            {
                Ok(Current::Absent)
            }
            other => other,
        };
        let planned = current.and_then(|current| {
            let mut steps = steps_for(backing, &path, &current, &target)?;
            // Nothing saved and the same length: the bytes are the
            // turn-start bytes already.
            if let (Some(segments), Current::File { stat }, PreImage::Ranged { size, perm, .. }) =
                (&patch, &current, &target)
            {
                if segments.is_empty() && stat.size == *size {
                    steps = if stat.perm() == *perm {
                        vec![]
                    } else {
                        vec![Step::Chmod]
                    };
                }
            }
            Ok((current, steps))
        });
        let under_removed_link = |path: &[u8]| {
            removed_links
                .iter()
                .any(|l| path.starts_with(l) && path.get(l.len()) == Some(&b'/'))
        };
        match planned {
            Ok((_, steps)) if steps.is_empty() => {}
            // Something must be created under a directory that is a symlink
            // now (made so behind the mount's back; the plan does not remove
            // it): opfs never writes through a symlink.
            Ok((Current::Absent, _))
                if backing.parent_is_symlink(&path) && !under_removed_link(&path) =>
            {
                conflicts.push(Conflict {
                    path: paths::display(&path),
                    reason: "a directory on its path is a symbolic link now; opfs never writes through one, so it is left as it is".into(),
                })
            }
            // An ancestor is a symlink now (the agent replaced a directory by
            // one through the mount), so this name is not in the tree at all,
            // and the target is "absent": nothing to write, nothing to check.
            // (When the target is not absent, ELOOP stays a conflict: opfs
            // never writes through a symlink.)
            Err(e)
                if e.raw_os_error() == Some(libc::ELOOP) && matches!(target, PreImage::Absent) => {}
            Ok((current, steps)) => {
                if matches!(current, Current::Symlink { .. }) && steps.contains(&Step::Remove) {
                    removed_links.insert(path.clone());
                }
                plan.push(PathPlan {
                    path: paths::display(&path),
                    current: current.kind_name(),
                    target: target.kind_name(),
                    steps,
                    raw: path,
                    target_state: target,
                    current_state: current,
                    patch: patch.take(),
                })
            }
            Err(e) => conflicts.push(Conflict {
                path: paths::display(&path),
                reason: format!("cannot read its current state: {e}"),
            }),
        }
    }
    preflight(journal, &mut plan, &mut conflicts, force);
    Ok((plan, conflicts))
}

/// How a ranged target is restored.
enum Resolved {
    /// Put together into a blob: restored like any file pre-image.
    Blob(PreImage),
    /// Laid over the project's file, which is still the file the mount
    /// left: the target (`PreImage::Ranged`) and the runs to write back in
    /// place.
    InPlace(PreImage, Vec<crate::view::ranges::Segment>),
}

/// Decides how to restore the content `path` had when turn `to` began from
/// a chain of ranged records (see `crate::ranges`): the path's records from
/// `to` on are ranged up to the first whole file record, or up to the
/// project's file when none follows.
///
/// Over the project's file (a regular file with one link, the inode the
/// newest record names), only the saved runs are written back and the
/// length set ([`Resolved::InPlace`]): the cost is the bytes the turns
/// overwrote. Otherwise the content is put together into a blob
/// ([`Resolved::Blob`]).
///
/// Errors (a reason, for a conflict): a record in the chain is not a file,
/// a saved range or blob is missing or corrupt, the base is shorter than
/// the ranges need, or the chain ends at the project's file and that file
/// changed outside the mount (even with `--force`: the ranges only make
/// sense over the bytes the mount left).
fn resolve_ranged(journal: &Journal, path: &[u8], to: u64) -> Result<Resolved, String> {
    let mut chain = Vec::new();
    let mut at = to;
    let base = loop {
        match journal
            .with_index(|ix| ix.record_from(path, at))
            .map_err(|e| e.to_string())?
        {
            Some((t, PreImage::Ranged { size, perm, ino })) => {
                chain.push((t, size, perm, ino));
                at = t + 1;
            }
            Some((_, PreImage::File { blob, .. })) => break Some(blob),
            Some((t, other)) => {
                return Err(format!(
                    "its record in turn {t} is a {} where the file its ranges are laid over was expected",
                    other.kind_name()
                ))
            }
            None => break None,
        }
    };
    let (Some(&(_, size, perm, ino)), Some(&(_, _, _, newest_ino))) = (chain.first(), chain.last())
    else {
        return Err("no ranged record".into());
    };
    if base.is_none() {
        let seen = journal.last_seen(path);
        let now = journal
            .backing()
            .lstat(path)
            .map_err(|e| format!("cannot read the file its ranges are laid over: {e}"))?;
        if let Ok(Some(fp)) = seen {
            if let Some(what) = fp.differs(now.as_ref()) {
                return Err(format!(
                    "its turn-start bytes are kept as ranges over the file, which changed outside the mount ({what}), so they cannot be put back"
                ));
            }
        }
        let Some(st) = now.filter(|st| st.file_type() == libc::S_IFREG) else {
            return Err(
                "its turn-start bytes are kept as ranges over a file that is no longer there"
                    .into(),
            );
        };
        if newest_ino != 0 && st.ino != newest_ino {
            return Err(
                "its turn-start bytes are kept as ranges over a file that was replaced outside the mount"
                    .into(),
            );
        }
        if st.nlink == 1 {
            let mut records = Vec::new();
            for &(t, sz, _, _) in &chain {
                let pieces = journal
                    .with_index(|ix| ix.ranges_of(t, path))
                    .map_err(|e| e.to_string())?;
                records.push((sz, pieces));
            }
            let segments = crate::view::ranges::layout_chain(&records);
            // Bytes no record saved come from the file: it must hold them.
            let mut covered = crate::view::ranges::Intervals::new();
            for s in &segments {
                covered.insert(s.offset, s.offset + s.len);
            }
            if let Some(&(a, _)) = covered.gaps(st.size.min(size), size).first() {
                return Err(format!(
                    "the file its ranges are laid over ends at byte {a}, before bytes no saved range holds"
                ));
            }
            return Ok(Resolved::InPlace(
                PreImage::Ranged { size, perm, ino },
                segments,
            ));
        }
    }
    let mut below = base;
    let mut out = None;
    for &(turn, size, perm, ino) in chain.iter().rev() {
        let blob = journal
            .with_index(|ix| Ok(build_ranged(journal, ix, path, turn, size, below.as_ref())))
            .map_err(|e| e.to_string())??;
        below = Some(blob);
        out = Some(PreImage::File {
            blob,
            size,
            perm,
            ino,
        });
    }
    out.map(Resolved::Blob)
        .ok_or_else(|| "no ranged record".to_string())
}

/// One step of [`resolve_ranged`]: the content under `path`'s ranged record
/// of `size` bytes in `turn`, laid over blob `below` (or the project's file
/// when `None`), stored as a blob.
fn build_ranged(
    journal: &Journal,
    ix: &crate::store::Index,
    path: &[u8],
    turn: u64,
    size: u64,
    below: Option<&[u8; 32]>,
) -> Result<[u8; 32], String> {
    let pieces = ix.ranges_of(turn, path).map_err(|e| e.to_string())?;
    let blobs = journal.blobs();
    let bytes;
    let file;
    let base = match below {
        Some(h) => match ix.inline_blob(h).map_err(|e| e.to_string())? {
            Some(_) => {
                bytes = crate::store::read_blob(ix, blobs, h).map_err(|e| e.to_string())?;
                crate::view::ranges::bytes_base(&bytes)
            }
            None => {
                file = blobs.open_verified(h).map_err(|e| e.to_string())?;
                crate::view::ranges::file_base(&file)
            }
        },
        None => {
            file = journal
                .backing()
                .open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)
                .map_err(|e| format!("cannot read the file: {e}"))?;
            crate::view::ranges::file_base(&file)
        }
    };
    let mut src = crate::view::ranges::Patched::new(base, ix, blobs, &pieces, size);
    let (blob, _) = blobs.put(&mut src, size).map_err(|e| e.to_string())?;
    Ok(blob)
}

/// Checks, before anything is written, what would make a step fail or
/// clobber the user's work: a path changed behind the mount's back since
/// opfs last saw it (unless `force`), a missing or corrupt blob, a directory
/// to remove that holds entries opfs did not record (even with `force`:
/// such entries could never be brought back). Such paths are moved from the
/// plan to the conflicts.
fn preflight(
    journal: &Journal,
    plan: &mut Vec<PathPlan>,
    conflicts: &mut Vec<Conflict>,
    force: bool,
) {
    let removed: BTreeSet<Vec<u8>> = plan
        .iter()
        .filter(|p| p.steps.contains(&Step::Remove))
        .map(|p| p.raw.clone())
        .collect();
    let mut bad: BTreeSet<Vec<u8>> = BTreeSet::new();
    for p in plan.iter() {
        if !force {
            let seen = journal.last_seen(&p.raw);
            let now = journal.backing().lstat(&p.raw);
            if let (Ok(Some(fp)), Ok(now)) = (seen, now) {
                if let Some(what) = fp.differs(now.as_ref()) {
                    conflicts.push(Conflict {
                        path: p.path.clone(),
                        reason: format!(
                            "changed outside the mount since opfs last saw it ({what}); left as it is (--force restores it anyway)"
                        ),
                    });
                    bad.insert(p.raw.clone());
                    continue;
                }
            }
        }
        if let PreImage::File { blob, .. } = &p.target_state {
            if let Err(e) = journal.verify_blob(blob) {
                conflicts.push(Conflict {
                    path: p.path.clone(),
                    reason: format!("cannot restore its content: {e}"),
                });
                bad.insert(p.raw.clone());
                continue;
            }
        }
        if let Some(segments) = &p.patch {
            let blobs: BTreeSet<[u8; 32]> = segments.iter().map(|s| s.blob).collect();
            if let Some(e) = blobs.iter().find_map(|b| journal.verify_blob(b).err()) {
                conflicts.push(Conflict {
                    path: p.path.clone(),
                    reason: format!("cannot restore its content: a saved range: {e}"),
                });
                bad.insert(p.raw.clone());
                continue;
            }
        }
        if p.steps.contains(&Step::Remove) && matches!(p.current_state, Current::Dir { .. }) {
            match journal.backing().list_dir(&p.raw) {
                Ok(names) => {
                    let foreign: Vec<String> = names
                        .iter()
                        .map(|n| paths::join(&p.raw, n))
                        .filter(|child| !removed.contains(child))
                        .map(|child| paths::display(&child))
                        .collect();
                    if !foreign.is_empty() {
                        conflicts.push(Conflict {
                            path: p.path.clone(),
                            reason: format!(
                                "directory holds entries opfs did not record, left in place: {}",
                                foreign.join(", ")
                            ),
                        });
                        bad.insert(p.raw.clone());
                    }
                }
                Err(e) => {
                    conflicts.push(Conflict {
                        path: p.path.clone(),
                        reason: format!("cannot list the directory: {e}"),
                    });
                    bad.insert(p.raw.clone());
                }
            }
        }
    }
    plan.retain(|p| !bad.contains(&p.raw));
}

fn copy_blob(journal: &Journal, blob: &[u8; 32], out: &mut std::fs::File) -> io::Result<()> {
    let blob_err = |e: crate::store::BlobError| io::Error::other(e.to_string());
    if let Some(data) = journal.inline_blob(blob).map_err(blob_err)? {
        return out.write_all(&data);
    }
    let mut src = journal.blobs().open_verified(blob).map_err(blob_err)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = src.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
    }
    Ok(())
}

fn set_perm(file: &std::fs::File, perm: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: valid fd.
    if unsafe { libc::fchmod(file.as_raw_fd(), perm as libc::mode_t) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn remove(backing: &Backing, p: &PathPlan) -> io::Result<()> {
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
fn patch_in_place(
    journal: &Journal,
    p: &PathPlan,
    segments: &[crate::view::ranges::Segment],
) -> io::Result<()> {
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
            let data = match journal.inline_blob(&s.blob).map_err(blob_err)? {
                Some(d) => d,
                None => journal.blobs().read(&s.blob).map_err(blob_err)?,
            };
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

/// Applies the plan's steps; returns the conflicts met.
/// Pairs of plan entries `(q, p)`: `q` is a path this plan removes whose
/// file has other names, `p` a path this plan creates as a regular file
/// that named that same inode when it was recorded. The turn moved the
/// file from `p` to `q`; it may have names opfs never saw (hard links made
/// before the mount). Instead of a fresh file at `p`, the executor moves the
/// inode back: it parks a link to it in the state dir before removing `q`,
/// links it in at `p` and rewrites it in place, so every name of the inode
/// gets the turn-start bytes and a later redo moves it back again.
fn moved_inode_pairs(plan: &[PathPlan]) -> Vec<(usize, usize)> {
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

fn execute(journal: &Journal, plan: &[PathPlan]) -> Vec<Conflict> {
    let backing = journal.backing();
    let pairs = moved_inode_pairs(plan);
    // p index -> parked link to the inode that moves back to p.
    let mut parked: std::collections::HashMap<usize, std::path::PathBuf> = Default::default();
    let mut failed: BTreeSet<usize> = BTreeSet::new();
    let mut conflicts = Vec::new();
    let mut fail = |i: usize, what: &str, e: io::Error, failed: &mut BTreeSet<usize>| {
        if failed.insert(i) {
            conflicts.push(Conflict {
                path: plan[i].path.clone(),
                reason: format!("{what} failed: {e}"),
            });
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
            if let Err(e) = remove(backing, p) {
                fail(i, "remove", e, &mut failed);
            }
            failpoint("rewind-after-step");
        }
    }
    for (i, p) in plan.iter().enumerate() {
        if failed.contains(&i) {
            continue;
        }
        let result = if let Some(park) = parked.remove(&i) {
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
            fail(i, "restore", e, &mut failed);
        }
        failpoint("rewind-after-step");
    }
    for (i, p) in plan.iter().enumerate().rev() {
        if failed.contains(&i) {
            continue;
        }
        if let PreImage::Dir { perm } = p.target_state {
            if let Err(e) = backing.chmod(&p.raw, perm) {
                fail(i, "chmod", e, &mut failed);
            }
            failpoint("rewind-after-step");
        }
    }
    conflicts
}

/// Rewinds the project to the start of turn `to`.
///
/// With `dry_run`, returns the plan and writes nothing. Otherwise: opens a
/// rewind turn, records the current state of every planned path in it,
/// marks the restore as running in the index, executes the plan, marks it
/// done and opens a new agent turn. The caller must hold the mount's
/// quiesce guard (if mounted) and invalidate `report.touched` afterwards.
///
/// Errors: [`RewindError::UnknownTurn`] for a turn that does not exist,
/// [`RewindError::Index`] when the index fails; in both cases nothing has
/// been written to the project. Per-path failures are not errors: they are
/// listed in `conflicts` and the other paths are restored.
pub fn rewind(
    journal: &Journal,
    to: u64,
    dry_run: bool,
    force: bool,
) -> Result<RewindReport, RewindError> {
    if !dry_run {
        // Only reachable without a daemon (a daemon resumes at start): finish
        // a rewind a crash interrupted before starting another, so that
        // one's plan can never be replayed over this one's result later.
        if let Some(r) = resume(journal)? {
            log::warn!(
                "finished an interrupted rewind to turn {} (recorded as turn {}) first",
                r.rewound_to,
                r.turn.unwrap_or(0)
            );
        }
    }
    let (plan, mut conflicts) = plan(journal, to, force)?;
    if dry_run {
        return Ok(RewindReport {
            turn: Some(journal.open_turn() + 1),
            rewound_to: to,
            dry_run,
            // What the real run would restore if no step fails.
            restored: plan.iter().map(|p| p.path.clone()).collect(),
            conflicts,
            plan,
            open_turn: journal.open_turn(),
            touched: Vec::new(),
        });
    }
    let rewind_turn = journal.next_turn(
        TurnKind::Rewind,
        Some(&format!("rewind to turn {to}")),
        None,
        Some(to),
    )?;
    failpoint("rewind-begin");
    journal.with_index(|ix| ix.begin_restore(rewind_turn, to))?;
    let (restored, exec_conflicts) = apply(journal, &plan);
    conflicts.extend(exec_conflicts);
    sync_project(journal);
    failpoint("rewind-before-done");
    journal.with_index(|ix| ix.finish_restore(rewind_turn))?;
    failpoint("rewind-after-done");
    let open_turn = journal.next_turn(TurnKind::Agent, None, None, None)?;
    Ok(RewindReport {
        turn: Some(rewind_turn),
        rewound_to: to,
        dry_run,
        restored,
        conflicts,
        touched: plan.iter().map(|p| p.raw.clone()).collect(),
        plan,
        open_turn,
    })
}

/// With `--sync`, makes the executor's writes to the project durable
/// before the restore is marked done: otherwise a power loss could keep the
/// `done` mark and lose restored bytes, a half-restored project nobody
/// would be told about. Without `--sync` (process crashes only) the page
/// cache already holds them. A failure is logged: the restore stays correct
/// for process crashes.
fn sync_project(journal: &Journal) {
    if !journal.blobs().is_sync() {
        return;
    }
    use std::os::fd::AsRawFd;
    let synced = std::fs::File::open(journal.project()).and_then(|dir| {
        // SAFETY: a valid open fd.
        if unsafe { libc::syncfs(dir.as_raw_fd()) } < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    });
    if let Err(e) = synced {
        log::warn!("cannot sync the project after a rewind: {e}");
    }
}

/// Records pre-images in the open (rewind) turn, then executes.
fn apply(journal: &Journal, plan: &[PathPlan]) -> (Vec<String>, Vec<Conflict>) {
    let mut conflicts = Vec::new();
    let mut runnable = Vec::with_capacity(plan.len());
    for p in plan {
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
            // Under a symlink this plan removes (see `plan_until`): the name
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
                        path: p.path.clone(),
                        source,
                    })
            }
            other => other,
        };
        failpoint("rewind-after-capture");
        match captured {
            Ok(()) => runnable.push(p.clone()),
            Err(e) => conflicts.push(Conflict {
                path: p.path.clone(),
                reason: format!("not restored: its current state could not be recorded: {e}"),
            }),
        }
    }
    let exec = execute(journal, &runnable);
    for p in &runnable {
        journal.remember(&p.raw);
    }
    if let Err(e) = journal.flush() {
        log::warn!("cannot store fingerprints after the rewind: {e}");
    }
    let failed: BTreeSet<&str> = exec.iter().map(|c| c.path.as_str()).collect();
    let restored = runnable
        .iter()
        .filter(|p| !failed.contains(p.path.as_str()))
        .map(|p| p.path.clone())
        .collect();
    conflicts.extend(exec);
    (restored, conflicts)
}

/// Finishes a restore that a crash interrupted, if there is one: recomputes
/// the plan from the records before the rewind turn (the rewind's own
/// records keep the pre-rewind states, so nothing is lost), executes it and
/// opens a new agent turn. Returns the report, or `None` when nothing was
/// pending. The caller must hold the quiesce guard if mounted.
pub fn resume(journal: &Journal) -> Result<Option<RewindReport>, RewindError> {
    let Some((rewind_turn, to)) = journal.with_index(|ix| ix.unfinished_restore())? else {
        return Ok(None);
    };
    // The interrupted run checked fingerprints already; the paths it wrote
    // before the crash have none yet, so they are not checked again.
    let (plan, mut conflicts) = plan_until(journal, to, Some(rewind_turn), true)?;
    let (restored, exec_conflicts) = apply(journal, &plan);
    conflicts.extend(exec_conflicts);
    // Paths the interrupted run already restored are not in this plan (they
    // need nothing), but the crash lost what it remembered of them: without
    // this, their old fingerprints would report them as changed behind the
    // mount's back on the next rewind.
    for path in journal.with_index(|ix| ix.paths_of_turn(rewind_turn))? {
        journal.remember(&path);
    }
    if let Err(e) = journal.flush() {
        log::warn!("cannot store fingerprints after finishing the rewind: {e}");
    }
    sync_project(journal);
    journal.with_index(|ix| ix.finish_restore(rewind_turn))?;
    let open_turn = if journal.open_turn() == rewind_turn {
        journal.next_turn(TurnKind::Agent, None, None, None)?
    } else {
        journal.open_turn()
    };
    Ok(Some(RewindReport {
        turn: Some(rewind_turn),
        rewound_to: to,
        dry_run: false,
        restored,
        conflicts,
        touched: plan.iter().map(|p| p.raw.clone()).collect(),
        plan,
        open_turn,
    }))
}

/// Closes a rewind turn that a crash left open without a running restore,
/// and opens a new agent turn, so agent work never lands in a rewind turn.
/// Call after [`resume`] returned `None`.
///
/// Two crash points leave this: before the restore was marked running (the
/// rewind wrote nothing: the project is as it was before it, i.e. rolled
/// back) and after it was marked done (the rewind is complete; only the next
/// agent turn was missing). Returns a description of what was found, or
/// `None` when the open turn is not a rewind turn.
pub fn close_interrupted_rewind_turn(journal: &Journal) -> Result<Option<String>, RewindError> {
    let open = journal.open_turn();
    let Some(turn) = journal.with_index(|ix| ix.turn(open))? else {
        return Ok(None);
    };
    if turn.kind != TurnKind::Rewind {
        return Ok(None);
    }
    let to = turn.rewound_to.unwrap_or(0);
    let started = journal.with_index(|ix| ix.restore_started(open))?;
    let next = journal.next_turn(TurnKind::Agent, None, None, None)?;
    Ok(Some(if started {
        format!("a finished rewind to turn {to} (turn {open}) had not opened the next turn; opened turn {next}")
    } else {
        format!(
            "a rewind to turn {to} (turn {open}) was interrupted before it changed anything: \
             the project is as it was before that rewind (rolled back); opened turn {next}"
        )
    }))
}

/// A human description of one planned path, e.g. `remove dir build` or
/// `rewrite file src/main.rs (0644)`.
pub fn describe(p: &PathPlan) -> String {
    let steps: Vec<&str> = p
        .steps
        .iter()
        .map(|s| match s {
            Step::Remove => "remove",
            Step::Create => "create",
            Step::Rewrite => "rewrite",
            Step::Chmod => "chmod",
        })
        .collect();
    let detail = match &p.target_state {
        PreImage::File {
            blob, size, perm, ..
        } => {
            format!(" -> file {size} bytes {:o} {}", perm, &hex(blob)[..12])
        }
        PreImage::Ranged { size, perm, .. } => format!(" -> file {size} bytes {perm:o} (ranges)"),
        PreImage::Dir { perm } => format!(" -> dir {perm:o}"),
        PreImage::Symlink { target } => format!(" -> symlink {}", paths::display(target)),
        PreImage::Special { perm, .. } => format!(" -> {} {perm:o}", p.target),
        PreImage::Absent => " -> absent".to_string(),
        PreImage::Unknown => " -> unknown".to_string(),
    };
    format!("{} {} ({}){}", steps.join("+"), p.path, p.current, detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateDir;
    use opfs_fs::{Mutation, MutationHook};
    use std::collections::BTreeMap;
    use std::fs;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::Path;

    fn manifest(root: &Path) -> BTreeMap<Vec<u8>, String> {
        let mut out = BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir).expect("read_dir") {
                let e = e.expect("entry");
                let p = e.path();
                let rel = p
                    .strip_prefix(root)
                    .expect("prefix")
                    .as_os_str()
                    .as_bytes()
                    .to_vec();
                let md = fs::symlink_metadata(&p).expect("lstat");
                let desc = if md.file_type().is_symlink() {
                    format!("link {:?}", fs::read_link(&p).expect("readlink"))
                } else if md.is_dir() {
                    stack.push(p.clone());
                    format!("dir {:o}", md.permissions().mode() & 0o7777)
                } else {
                    format!(
                        "file {:o} {}",
                        md.permissions().mode() & 0o7777,
                        blake3::hash(&fs::read(&p).expect("read")).to_hex()
                    )
                };
                out.insert(rel, desc);
            }
        }
        out
    }

    struct Setup {
        _tmp: tempfile::TempDir,
        project: std::path::PathBuf,
        journal: Journal,
    }

    fn setup() -> Setup {
        let tmp = tempfile::tempdir().expect("tempdir");
        let project = tmp.path().join("project");
        fs::create_dir_all(project.join("src/deep")).expect("mkdir");
        fs::write(project.join("src/main.rs"), b"fn main() {}\n").expect("write");
        fs::write(project.join("src/deep/x.txt"), b"x").expect("write");
        fs::write(project.join("run.sh"), b"#!/bin/sh\n").expect("write");
        fs::set_permissions(project.join("run.sh"), fs::Permissions::from_mode(0o755))
            .expect("chmod");
        symlink("src/main.rs", project.join("link")).expect("symlink");
        fs::create_dir(project.join("empty")).expect("mkdir");
        let project = fs::canonicalize(&project).expect("canon");
        let state = StateDir::for_project(&tmp.path().join("home"), &project);
        let journal = Journal::open(&state, false).expect("journal");
        Setup {
            _tmp: tmp,
            project,
            journal,
        }
    }

    #[test]
    fn planner_restores_every_kind_of_change() {
        let s = setup();
        let before = manifest(&s.project);
        let j = &s.journal;
        let p = &s.project;
        // Modify a file in place.
        j.before(&Mutation::Content {
            path: b"src/main.rs",
        })
        .expect("hook");
        fs::write(p.join("src/main.rs"), b"changed").expect("write");
        // chmod.
        j.before(&Mutation::Metadata { path: b"run.sh" })
            .expect("hook");
        fs::set_permissions(p.join("run.sh"), fs::Permissions::from_mode(0o600)).expect("chmod");
        // Symlink retargeted.
        j.before(&Mutation::Remove { path: b"link" }).expect("hook");
        fs::remove_file(p.join("link")).expect("rm");
        j.before(&Mutation::Create { path: b"link" }).expect("hook");
        symlink("elsewhere", p.join("link")).expect("symlink");
        // Empty dir removed.
        j.before(&Mutation::Remove { path: b"empty" })
            .expect("hook");
        fs::remove_dir(p.join("empty")).expect("rmdir");
        // Directory renamed.
        j.before(&Mutation::Rename {
            from: b"src",
            to: b"lib",
            exchange: false,
        })
        .expect("hook");
        fs::rename(p.join("src"), p.join("lib")).expect("mv");
        // New tree.
        j.before(&Mutation::Create { path: b"new" }).expect("hook");
        fs::create_dir(p.join("new")).expect("mkdir");
        j.before(&Mutation::Create { path: b"new/f" })
            .expect("hook");
        fs::write(p.join("new/f"), b"f").expect("write");
        let after = manifest(p);
        assert_ne!(before, after);

        let dry = rewind(j, 1, true, false).expect("dry run");
        assert_eq!(dry.turn, Some(2));
        assert_eq!(manifest(p), after, "a dry run writes nothing");

        let report = rewind(j, 1, false, false).expect("rewind");
        assert!(report.conflicts.is_empty(), "{:?}", report.conflicts);
        assert_eq!(report.turn, Some(2));
        assert_eq!(report.open_turn, 3);
        assert_eq!(dry.plan.len(), report.plan.len());
        assert_eq!(manifest(p), before);

        // Redo: rewinding to the rewind's own turn restores the state before it.
        let redo = rewind(j, 2, false, false).expect("redo");
        assert!(redo.conflicts.is_empty(), "{:?}", redo.conflicts);
        assert_eq!(manifest(p), after);
        // And a no-op rewind to the turn just opened changes nothing.
        let open = j.open_turn();
        let noop = rewind(j, open, false, false).expect("noop");
        assert!(noop.restored.is_empty());
        assert_eq!(manifest(p), after);
    }

    #[test]
    fn foreign_entries_and_bad_turns_are_reported() {
        let s = setup();
        let j = &s.journal;
        j.before(&Mutation::Create { path: b"made" }).expect("hook");
        fs::create_dir(s.project.join("made")).expect("mkdir");
        // Created behind opfs's back:
        fs::write(s.project.join("made/user-file"), b"mine").expect("write");
        let report = rewind(j, 1, false, false).expect("rewind");
        assert_eq!(report.conflicts.len(), 1, "{:?}", report.conflicts);
        assert!(report.conflicts[0].reason.contains("made/user-file"));
        assert!(s.project.join("made/user-file").exists());
        assert!(matches!(
            rewind(j, 0, false, false),
            Err(RewindError::Turn(TurnError::Unknown { .. }))
        ));
        assert!(matches!(
            rewind(j, 99, true, false),
            Err(RewindError::Turn(TurnError::Unknown { .. }))
        ));
    }

    #[test]
    fn corrupt_blob_is_a_conflict_and_never_written() {
        let s = setup();
        let j = &s.journal;
        let big = vec![b'#'; crate::store::INLINE_MAX as usize + 1];
        fs::write(s.project.join("big"), &big).expect("write");
        j.before(&Mutation::Content { path: b"run.sh" })
            .expect("hook");
        j.before(&Mutation::Content { path: b"big" }).expect("hook");
        fs::write(s.project.join("run.sh"), b"new content").expect("write");
        fs::write(s.project.join("big"), b"new content").expect("write");
        // A blob file with other bytes, and inline content with other bytes.
        let blob = *blake3::hash(&big).as_bytes();
        fs::write(j.blobs().path_of(&blob), b"garbage!!!").expect("corrupt");
        j.apply_pending().expect("commit");
        let small = *blake3::hash(b"#!/bin/sh\n").as_bytes();
        let conn = rusqlite::Connection::open(j.state().index_path()).expect("db");
        let n = conn
            .execute(
                "UPDATE blobs SET data = X'00' WHERE hash = ?1",
                [&small[..]],
            )
            .expect("corrupt inline");
        assert_eq!(n, 1, "the small pre-image is stored inline");
        let report = rewind(j, 1, false, false).expect("rewind");
        assert_eq!(report.conflicts.len(), 2, "{:?}", report.conflicts);
        for c in &report.conflicts {
            assert!(c.reason.contains("corrupt"), "{:?}", report.conflicts);
        }
        for f in ["run.sh", "big"] {
            assert_eq!(fs::read(s.project.join(f)).expect("read"), b"new content");
        }
    }
}
