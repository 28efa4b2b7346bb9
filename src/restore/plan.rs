//! The planner: from each path's target state and what the project holds
//! now, the steps that restore it ([`PathPlan`]).
//!
//! Paths whose target cannot be known or reached (recorded as unknown,
//! beneath a path that was not a directory, under a symlink, content kept
//! as ranges that cannot be put back, unreadable) become conflicts instead.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

use crate::capture::Journal;
use crate::paths;
use crate::record::{hex, Meta, PreImage};
use crate::store::Target;
use crate::tree::Dir;
use crate::view::chain::{self, RangeError, Resolved};
use crate::view::current::{self, Current};
use crate::view::ranges::Segment;

use super::conflict::{Conflict, ConflictReason};
use super::preflight::preflight;

/// One planned step on one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Set the owner and the extended attributes (exactly the recorded
    /// set: others are removed).
    Attrs,
    /// Make the path another name of the file at [`PathPlan::link_to`]
    /// (after the creations and rewrites): the two were hard links of one
    /// inode when the turn began (`restore::links`). A `rewrite` or `chmod`
    /// after it restores that inode through this name.
    Link,
}

impl Step {
    /// The word serialized: `remove`, `create`, `rewrite`, `chmod`,
    /// `attrs` (the CLI's dry run prints these too).
    pub fn as_str(&self) -> &'static str {
        match self {
            Step::Remove => "remove",
            Step::Create => "create",
            Step::Rewrite => "rewrite",
            Step::Chmod => "chmod",
            Step::Attrs => "attrs",
            Step::Link => "link",
        }
    }
}

/// The plan for one path.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathPlan {
    /// The path, rendered (`\xNN` for bytes that are not UTF-8).
    pub path: String,
    /// The path's raw bytes.
    #[serde(skip)]
    pub raw: Vec<u8>,
    /// What is there now: `absent`, `file`, `dir`, `symlink`, `special`.
    pub current: StateKind,
    /// What will be there: `absent`, `file`, `dir`, `symlink`, `fifo`, ...
    pub target: StateKind,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The target in words, as a dry run prints it after `->`: `file 12
    /// bytes 644 0a1b2c3d4e5f` (size, permission bits, the first 12 hex
    /// digits of its BLAKE3), `file 12 bytes 644 (ranges)`, `dir 755`,
    /// `symlink TARGET`, `fifo 644`, `absent`, `unknown`. Serialized, so
    /// a plan a daemon sent over the control socket prints as the one
    /// planned in this process does ([`describe`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// For a [`Step::Link`]: the path (rendered) whose file this path
    /// becomes another name of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_to: Option<String>,
    /// [`PathPlan::link_to`]'s raw bytes.
    #[serde(skip)]
    pub(crate) link_raw: Option<Vec<u8>>,
    /// The state to restore (not serialized: a deserialized plan holds
    /// `absent` here).
    #[serde(skip, default = "absent_target")]
    pub(crate) target_state: PreImage,
    /// The owner and extended attributes to restore (`None`: the record
    /// holds none; they are left as they are).
    #[serde(skip)]
    pub(crate) target_meta: Option<Meta>,
    /// What the planner found there (not serialized).
    #[serde(skip, default = "absent_current")]
    pub(crate) current_state: Current,
    /// For a file kept as ranges over the project's file: the runs to
    /// write back in place (the target is then `PreImage::Ranged`).
    #[serde(skip)]
    pub(crate) patch: Option<Vec<Segment>>,
}

impl PathPlan {
    /// The plan of `path` from `current` to `target` by `steps`, linked to
    /// nothing yet (`restore::links` sets `link_to`).
    fn new(
        path: Vec<u8>,
        current: Current,
        target: PreImage,
        target_meta: Option<Meta>,
        steps: Vec<Step>,
        patch: Option<Vec<Segment>>,
    ) -> PathPlan {
        PathPlan {
            path: paths::display(&path),
            current: StateKind::of_current(&current),
            target: StateKind::of_target(&target),
            detail: target_detail(&target),
            steps,
            link_to: None,
            link_raw: None,
            raw: path,
            target_state: target,
            target_meta,
            current_state: current,
            patch,
        }
    }
}

/// The kind of a path's state, as a plan reports it (`current` and
/// `target` in `opfs rewind --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateKind {
    /// Nothing there.
    Absent,
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A fifo, socket or device node as found in the project.
    Special,
    /// A fifo (target).
    Fifo,
    /// A socket (target).
    Socket,
    /// A character device (target).
    Char,
    /// A block device (target).
    Block,
    /// Unknown (target).
    Unknown,
}

impl StateKind {
    /// The kind of what the project holds now.
    pub fn of_current(c: &Current) -> StateKind {
        match c {
            Current::Absent => StateKind::Absent,
            Current::File { .. } => StateKind::File,
            Current::Dir { .. } => StateKind::Dir,
            Current::Symlink { .. } => StateKind::Symlink,
            Current::Special { .. } => StateKind::Special,
        }
    }

    /// The kind of a target state ([`PreImage::kind_name`]).
    pub fn of_target(p: &PreImage) -> StateKind {
        use crate::record::Special;
        match p {
            PreImage::Absent => StateKind::Absent,
            PreImage::Unknown => StateKind::Unknown,
            PreImage::File { .. } | PreImage::Ranged { .. } => StateKind::File,
            PreImage::Dir { .. } => StateKind::Dir,
            PreImage::Symlink { .. } => StateKind::Symlink,
            PreImage::Special { kind, .. } => match kind {
                Special::Fifo => StateKind::Fifo,
                Special::Socket => StateKind::Socket,
                Special::Char => StateKind::Char,
                Special::Block => StateKind::Block,
            },
        }
    }

    /// The word serialized: `absent`, `file`, `dir`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            StateKind::Absent => "absent",
            StateKind::File => "file",
            StateKind::Dir => "dir",
            StateKind::Symlink => "symlink",
            StateKind::Special => "special",
            StateKind::Fifo => "fifo",
            StateKind::Socket => "socket",
            StateKind::Char => "char",
            StateKind::Block => "block",
            StateKind::Unknown => "unknown",
        }
    }
}

impl fmt::Display for StateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn absent_target() -> PreImage {
    PreImage::Absent
}

fn absent_current() -> Current {
    Current::Absent
}

/// BLAKE3 of the regular file at `path`.
pub(super) fn hash_file(backing: &Dir, path: &[u8]) -> io::Result<[u8; 32]> {
    let mut f = backing.open_file(path, libc::O_RDONLY, 0)?;
    let mut hasher = blake3::Hasher::new();
    io::copy(&mut f, &mut hasher)?;
    Ok(*hasher.finalize().as_bytes())
}

/// Decides the steps that turn `current` into `target`. Empty when they
/// already match (content compared by hash when the sizes agree).
fn steps_for(
    backing: &Dir,
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

/// Plans the restore of `states` (each path's target state, sorted by
/// path, as `Index::states_at` returns them) as they were when turn `to`
/// began, against the project's current state, then runs the
/// [`preflight`](super::preflight::preflight) checks (`force` skips the
/// fingerprint check). Writes nothing to the project; a ranged target may
/// be put together into a blob in the store.
///
/// Returns the plan and the paths left out of it, with the reason.
pub(crate) fn plan(
    journal: &Journal,
    to: u64,
    states: Vec<(Vec<u8>, PreImage)>,
    force: bool,
) -> (Vec<PathPlan>, Vec<Conflict>) {
    let targets = states
        .into_iter()
        .map(|(path, pre)| Target {
            path,
            turn: to,
            pre,
            meta: None,
        })
        .collect();
    plan_targets(journal, to, targets, force)
}

/// True when the owner or the extended attributes of `path` differ from
/// `want` (a path that cannot be read differs).
fn attrs_differ(backing: &Dir, path: &[u8], want: &Meta) -> bool {
    let Ok(Some(st)) = backing.lstat(path) else {
        return true;
    };
    if st.uid != want.uid || st.gid != want.gid {
        return true;
    }
    !matches!(backing.xattrs(path, None), Ok(have) if have == want.xattrs)
}

/// [`plan`] over targets that carry their owner and extended attributes
/// (`Index::targets_at`): a path whose owner or attributes differ is
/// planned too (step `attrs`).
pub(crate) fn plan_targets(
    journal: &Journal,
    to: u64,
    targets: Vec<Target>,
    force: bool,
) -> (Vec<PathPlan>, Vec<Conflict>) {
    let backing = journal.backing();
    let mut plan = Vec::new();
    // File targets that need no step of their own (the right bytes), which
    // may still have to become a hard link of another target.
    let mut idle = Vec::new();
    let mut conflicts = Vec::new();
    // Every path with a target, and the turn of its record (where the
    // link count it had then is noted).
    let record_turns: BTreeMap<Vec<u8>, u64> =
        targets.iter().map(|t| (t.path.clone(), t.turn)).collect();
    // Symlinks this plan removes. States come sorted by path, so an
    // ancestor is planned before anything under it.
    let mut removed_links: BTreeSet<Vec<u8>> = BTreeSet::new();
    // Paths whose target is not a directory (absent, a file, ...): nothing
    // can be restored beneath them. A record beneath one can only come from
    // a change made outside the mount (say, a file created directly in the
    // project inside a directory the agent then removed through the mount).
    let mut not_dirs: BTreeMap<Vec<u8>, &'static str> = BTreeMap::new();
    for Target {
        path,
        pre: target,
        meta: target_meta,
        ..
    } in targets
    {
        if paths::is_excluded(&path) {
            continue;
        }
        let under_not_dir =
            paths::ancestors(&path).find_map(|a| not_dirs.get(a).map(|kind| (a.to_vec(), *kind)));
        if !target.is_dir() {
            not_dirs.insert(path.clone(), target.kind_name());
        }
        if matches!(target, PreImage::Unknown) {
            // Unknown because the mount took away a file kept as ranges
            // after an edit behind the mount: say where that edit is.
            let edited = journal
                .with_index(|ix| Ok(chain::check_edited_behind(ix, &path, to)))
                .map_err(RangeError::from)
                .and_then(|r| r);
            if let Err(e) = edited {
                conflicts.push(Conflict::new(&path, ConflictReason::Ranges(e)));
                continue;
            }
            conflicts.push(Conflict::new(
                &path,
                ConflictReason::UnknownAtTurnStart { turn: to },
            ));
            continue;
        }
        if let (Some((parent, kind)), false) = (&under_not_dir, matches!(target, PreImage::Absent))
        {
            conflicts.push(Conflict::new(
                &path,
                ConflictReason::MadeOutsideMount {
                    turn: to,
                    parent: parent.clone(),
                    parent_kind: kind,
                },
            ));
            continue;
        }
        let mut patch = None;
        let target = match target {
            PreImage::Ranged { .. } => {
                let seen = journal.last_seen(&path).ok().flatten();
                let resolved = journal.with_index(|ix| {
                    Ok(chain::resolve(
                        ix,
                        journal.blobs(),
                        backing,
                        &path,
                        to,
                        seen,
                    ))
                });
                match resolved.map_err(RangeError::from).and_then(|r| r) {
                    Ok(Resolved::Blob(t)) => t,
                    Ok(Resolved::InPlace(t, segments)) => {
                        patch = Some(segments);
                        t
                    }
                    Err(e) => {
                        conflicts.push(Conflict::new(&path, ConflictReason::Ranges(e)));
                        continue;
                    }
                }
            }
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
            // Owner and attributes: whatever else the path needs, unless it
            // is created (which sets them).
            if let Some(want) = &target_meta {
                if !steps.contains(&Step::Create)
                    && !matches!(target, PreImage::Absent)
                    && attrs_differ(backing, &path, want)
                {
                    steps.push(Step::Attrs);
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
            Ok((current, steps)) if steps.is_empty() => {
                if matches!(target, PreImage::File { ino, .. } if ino != 0) {
                    idle.push(PathPlan::new(
                        path,
                        current,
                        target,
                        target_meta,
                        steps,
                        None,
                    ))
                }
            }
            // Something must be created under a directory that is a symlink
            // now (made so behind the mount's back; the plan does not remove
            // it): opfs never writes through a symlink.
            Ok((Current::Absent, _))
                if backing.parent_is_symlink(&path) && !under_removed_link(&path) =>
            {
                conflicts.push(Conflict::new(&path, ConflictReason::UnderSymlink))
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
                plan.push(PathPlan::new(
                    path,
                    current,
                    target,
                    target_meta,
                    steps,
                    patch.take(),
                ))
            }
            Err(e) => conflicts.push(Conflict::new(&path, ConflictReason::ReadCurrent(e))),
        }
    }
    let targets: BTreeSet<Vec<u8>> = record_turns.keys().cloned().collect();
    let nlink_of = |p: &PathPlan| {
        let turn = record_turns.get(&p.raw).copied().unwrap_or(to);
        journal
            .with_index(|ix| ix.links_of(turn, &p.raw))
            .unwrap_or(1)
    };
    let mut plan = super::links::relink(journal, plan, idle, &targets, &nlink_of);
    preflight(journal, &mut plan, &mut conflicts, force);
    super::repo::keep_repositories(journal, to, &mut plan, &mut conflicts);
    (plan, conflicts)
}

/// `--markers` for a rewind or restore: of the paths `conflicts` leaves
/// because they changed outside the mount, each regular text file is
/// planned as its two-way marked file ([`super::markers::two_way`]: the
/// project's bytes now against the target's, the bits as they are now),
/// taken from `forced`, the plan made with `force`. Returns the plan (the
/// paths without a conflict and the marked ones, in `forced`'s order),
/// the conflicts left, and the marked paths.
pub(crate) fn with_markers(
    journal: &Journal,
    to: u64,
    (forced, _): (Vec<PathPlan>, Vec<Conflict>),
    conflicts: Vec<Conflict>,
) -> (Vec<PathPlan>, Vec<Conflict>, Vec<String>) {
    let conflicted: BTreeSet<Vec<u8>> = conflicts.iter().map(|c| c.path.clone()).collect();
    let markable: BTreeSet<Vec<u8>> = conflicts
        .iter()
        .filter(|c| matches!(c.reason, ConflictReason::ChangedOutsideMount { .. }))
        .map(|c| c.path.clone())
        .collect();
    let mut plan = Vec::new();
    let mut marked = Vec::new();
    let theirs = format!("turn {to}");
    for mut p in forced {
        if !conflicted.contains(&p.raw) {
            plan.push(p);
            continue;
        }
        if !markable.contains(&p.raw) || p.patch.is_some() || p.link_raw.is_some() {
            continue;
        }
        let (Current::File { stat }, PreImage::File { blob, .. }) =
            (&p.current_state, &p.target_state)
        else {
            continue;
        };
        let now = journal
            .backing()
            .open_file(&p.raw, libc::O_RDONLY, 0)
            .and_then(|mut f| {
                let mut v = Vec::new();
                io::Read::read_to_end(&mut f, &mut v).map(|_| v)
            });
        // A small pre-image is kept in the index, not as a blob file.
        let then = journal
            .inline_blob(blob)
            .and_then(|inline| inline.map_or_else(|| journal.blobs().read(blob), Ok));
        let (Ok(now), Ok(then)) = (now, then) else {
            continue;
        };
        let Some(bytes) = super::markers::two_way(&now, &then, "project now", &theirs) else {
            continue;
        };
        let Ok(target) = super::markers::file_target(journal.blobs(), &bytes, stat.perm()) else {
            continue;
        };
        p.detail = format!("{} (conflict markers)", target_detail(&target));
        p.target = StateKind::File;
        p.target_state = target;
        p.steps = vec![Step::Rewrite];
        marked.push(p.path.clone());
        plan.push(p);
    }
    let left = conflicts
        .into_iter()
        .filter(|c| {
            !marked
                .iter()
                .any(|m| m.as_bytes() == paths::display(&c.path).as_bytes())
        })
        .collect();
    (plan, left, marked)
}

/// [`PathPlan::detail`] of a target state.
fn target_detail(target: &PreImage) -> String {
    match target {
        PreImage::File {
            blob, size, perm, ..
        } => format!("file {size} bytes {perm:o} {}", &hex(blob)[..12]),
        PreImage::Ranged { size, perm, .. } => format!("file {size} bytes {perm:o} (ranges)"),
        PreImage::Dir { perm } => format!("dir {perm:o}"),
        PreImage::Symlink { target } => format!("symlink {}", paths::display(target)),
        PreImage::Special { perm, .. } => format!("{} {perm:o}", StateKind::of_target(target)),
        PreImage::Absent => "absent".to_string(),
        PreImage::Unknown => "unknown".to_string(),
    }
}

/// A human description of one planned path, e.g. `remove build (dir) ->
/// absent` or `rewrite src/main.rs (file) -> file 120 bytes 644
/// 0a1b2c3d4e5f`: the steps, the path, what is there now and
/// [`PathPlan::detail`] (the kind alone for a plan without one). The same
/// whether the plan was made in this process or sent by a daemon.
pub fn describe(p: &PathPlan) -> String {
    let steps: Vec<&str> = p.steps.iter().map(Step::as_str).collect();
    let detail = if p.detail.is_empty() {
        p.target.as_str()
    } else {
        p.detail.as_str()
    };
    let link = p
        .link_to
        .as_ref()
        .map(|to| format!(" (hard link of {to})"))
        .unwrap_or_default();
    format!(
        "{} {} ({}) -> {detail}{link}",
        steps.join("+"),
        p.path,
        p.current
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_prints_the_word_it_serializes_as() {
        for step in [
            Step::Remove,
            Step::Create,
            Step::Rewrite,
            Step::Chmod,
            Step::Attrs,
            Step::Link,
        ] {
            assert_eq!(
                serde_json::to_value(&step).expect("json"),
                serde_json::Value::from(step.as_str())
            );
        }
    }
}
