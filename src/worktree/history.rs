//! A worktree's own history as its user sees the worktree (`opfs -C
//! <worktree> log|diff|show`, and the worktree's export branch).
//!
//! The worktree's journal records its **upper layer**, a plain directory
//! where a deleted lower name is a whiteout `.wh.NAME` and a directory
//! removed and made again holds the opaque marker `.wh..wh..opq`
//! (`opfs_fs::overlay`). Rewinds restore that layer exactly, so they stay
//! as they are; only the read side is mapped here, through the worktree's
//! base (the lower layer, frozen):
//!
//! - the **view** of a path at a worktree turn is what the overlay shows
//!   for it when the upper layer is as the journal says it was then: the
//!   upper entry if there is one, else the lower entry unless a whiteout
//!   hides it or an ancestor stops the lower layer from showing (an opaque
//!   directory, a directory that is not one in the lower layer, or a
//!   hidden ancestor); names starting with `.wh.` in the upper layer are
//!   never shown. The rules are the overlay's own, called here:
//!   [`opfs_fs::overlay::rules`].
//! - the **paths a range of turns may have changed** in the view are those
//!   its upper records name, each whiteout read as the name it hides and
//!   each opaque marker as its directory, plus, for a directory whose lower
//!   children start or stop showing across the range (a whiteout or opaque
//!   marker made or removed, a lower directory replaced by a file), every
//!   path of the lower subtree beneath it. Cost: what the turns recorded
//!   times the depth of each path, plus the lower subtrees whose visibility
//!   flipped (what the user deleted or brought back), never the tree.
//!
//! A file of the lower layer has no blob in the worktree's store: its
//! state carries the BLAKE3 of its bytes (read once, cached; the base is
//! frozen) and its bytes are read from the base when a diff or an export
//! needs them ([`WorktreeHistory::content`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use opfs_fs::overlay::rules::needed_for;
use opfs_fs::overlay::{Kind, Lower};

use crate::history::{
    classify, perm_changed, ChangeKind, DirChange, HistoryError, LogEntry, PathChange, Shown,
    Sources,
};
use crate::paths;
use crate::record::{PreImage, Special};
use crate::view::{current, Timeline, Version, ViewError};

use super::changes::{base_bytes, base_hash};

mod view;

use view::view_of;

/// Which layer a path's view state comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The upper layer (its bytes are in the worktree's history or its
    /// upper directory), or nothing at all.
    Upper,
    /// The lower layer: the project at the worktree's base turn.
    Lower,
}

/// A path's state in the worktree's view at some point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The state; a lower file's `blob` is the BLAKE3 of its bytes.
    pub version: Version,
    /// Where it comes from.
    pub layer: Layer,
}

impl Seen {
    fn absent() -> Seen {
        Seen {
            version: Version::recorded(PreImage::Absent),
            layer: Layer::Upper,
        }
    }
}

/// The upper layer's states at one turn boundary, for the upper paths the
/// view of some paths needs.
type UpperAt = BTreeMap<Vec<u8>, Version>;

/// A worktree's history read as the worktree's view: its own journal (over
/// its upper layer) mapped through its base.
pub struct WorktreeHistory<'a> {
    src: Sources<'a>,
    base: &'a dyn Lower,
    /// The base's state per path (files hashed).
    base_states: RefCell<BTreeMap<Vec<u8>, PreImage>>,
    /// The base's state per path with files not hashed ([`UNHASHED`]).
    base_shapes: RefCell<BTreeMap<Vec<u8>, PreImage>>,
    /// The bytes of the base's files read so far (up to
    /// [`BASE_BYTES_KEPT`] in all): a diff reads a file the state above
    /// hashed once more for its old side, and the base is frozen.
    base_files: RefCell<BaseFiles>,
    /// Each upper path's state after the newest turn, read once per
    /// command ([`WorktreeHistory::fetch_ends`]).
    ends: RefCell<BTreeMap<Vec<u8>, Version>>,
}

/// The base's files read so far: their total size in bytes, and each
/// file's bytes by path.
type BaseFiles = (u64, BTreeMap<Vec<u8>, Vec<u8>>);

/// The `blob` of a base file state whose bytes were not read (see
/// `WorktreeHistory::base_state_of`): such a state is compared only with
/// itself (the base is frozen) or with a file of another size.
const UNHASHED: crate::record::Hash = [0; 32];

/// How many bytes of base files [`WorktreeHistory`] keeps in memory.
const BASE_BYTES_KEPT: u64 = 64 << 20;

impl std::fmt::Debug for WorktreeHistory<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorktreeHistory")
            .field("src", &self.src)
            .finish_non_exhaustive()
    }
}

pub use opfs_fs::overlay::rules::view_path_of;

fn present(up: &UpperAt, p: &[u8]) -> bool {
    up.get(p)
        .is_some_and(|v| !matches!(v.state, PreImage::Absent | PreImage::Unknown))
}

fn lower_err(path: &[u8]) -> impl FnOnce(std::io::Error) -> HistoryError + '_ {
    move |source| {
        HistoryError::Read(ViewError::Project {
            path: path.to_vec(),
            source,
        })
    }
}

impl<'a> WorktreeHistory<'a> {
    /// The history of a worktree: `src` reads its own journal (the state
    /// dir of its upper layer), `base` is its lower layer.
    pub fn new(src: Sources<'a>, base: &'a dyn Lower) -> WorktreeHistory<'a> {
        WorktreeHistory {
            src,
            base,
            base_states: RefCell::new(BTreeMap::new()),
            base_shapes: RefCell::new(BTreeMap::new()),
            base_files: RefCell::new((0, BTreeMap::new())),
            ends: RefCell::new(BTreeMap::new()),
        }
    }

    /// The worktree's own history (its index, blobs, upper layer).
    pub fn sources(&self) -> Sources<'a> {
        self.src
    }

    /// The base's state of `path` (a file's blob is the BLAKE3 of its
    /// bytes, read once).
    fn base_state(&self, path: &[u8]) -> Result<PreImage, HistoryError> {
        self.base_state_of(path, true)
    }

    /// The base's state of `path`; with `hash` false a file's `blob` is
    /// [`UNHASHED`] unless it was hashed already (its attributes only: a
    /// `getattr`, no read), for a caller that compares files of one size
    /// only ([`WorktreeHistory::log`]).
    fn base_state_of(&self, path: &[u8], hash: bool) -> Result<PreImage, HistoryError> {
        if let Some(s) = self.base_states.borrow().get(path) {
            return Ok(s.clone());
        }
        if !hash {
            if let Some(s) = self.base_shapes.borrow().get(path) {
                return Ok(s.clone());
            }
        }
        let err = lower_err(path);
        let state = match self.base.getattr(path) {
            Err(e) => return Err(err(e)),
            Ok(None) => PreImage::Absent,
            Ok(Some(a)) => match a.kind {
                Kind::File if !hash => PreImage::File {
                    blob: UNHASHED,
                    size: a.size,
                    perm: a.perm,
                    ino: 0,
                },
                Kind::File => match self.base_file(path, a.size) {
                    Ok(Some(blob)) => PreImage::File {
                        blob,
                        size: a.size,
                        perm: a.perm,
                        ino: 0,
                    },
                    Ok(None) => PreImage::Absent,
                    Err(e) => return Err(err(e)),
                },
                Kind::Dir => PreImage::Dir { perm: a.perm },
                Kind::Symlink => match self.base.readlink(path) {
                    Ok(t) => PreImage::Symlink {
                        target: t.unwrap_or_default(),
                    },
                    Err(e) => return Err(err(e)),
                },
                kind => PreImage::Special {
                    kind: match kind {
                        Kind::Socket => Special::Socket,
                        Kind::CharDevice => Special::Char,
                        Kind::BlockDevice => Special::Block,
                        _ => Special::Fifo,
                    },
                    perm: a.perm,
                    rdev: a.rdev,
                },
            },
        };
        let cache = if hash {
            &self.base_states
        } else {
            &self.base_shapes
        };
        cache.borrow_mut().insert(path.to_vec(), state.clone());
        Ok(state)
    }

    /// The BLAKE3 of the base's file at `path` (`size` bytes by its
    /// attributes), read once in a buffer of its size; its bytes are kept
    /// for [`WorktreeHistory::content`] while they fit in
    /// [`BASE_BYTES_KEPT`]. `None`: not a file in the base.
    fn base_file(&self, path: &[u8], size: u64) -> std::io::Result<Option<crate::record::Hash>> {
        if size > BASE_BYTES_KEPT / 16 {
            // Large: hashed in pieces, read again when its bytes are needed.
            return base_hash(self.base, path);
        }
        let mut out = vec![0u8; size as usize + 1];
        let mut len = 0;
        loop {
            if len == out.len() {
                out.resize(len * 2, 0);
            }
            let Some(n) = self.base.read_at(path, len as u64, &mut out[len..])? else {
                return Ok(None);
            };
            len += n;
            // A read that stops short of the room it had, at the size the
            // attributes gave, ended at the end of the file: no read of 0
            // bytes is needed to see it (one base read per file).
            if n == 0 || (len as u64 == size && len < out.len()) {
                break;
            }
        }
        out.truncate(len);
        let hash = *blake3::hash(&out).as_bytes();
        let mut kept = self.base_files.borrow_mut();
        if kept.0 + len as u64 <= BASE_BYTES_KEPT {
            kept.0 += len as u64;
            kept.1.insert(path.to_vec(), out);
        }
        Ok(Some(hash))
    }

    /// The bytes of a file or symlink state of the view (`None` for
    /// anything else): a lower file read from the base, an upper one from
    /// the worktree's history or its upper layer.
    ///
    /// Errors: the base or a recorded blob cannot be read.
    pub fn content(&self, path: &[u8], seen: &Seen) -> Result<Option<Vec<u8>>, HistoryError> {
        match (&seen.layer, &seen.version.state) {
            (Layer::Lower, PreImage::File { .. }) => {
                if let Some(b) = self.base_files.borrow().1.get(path) {
                    return Ok(Some(b.clone()));
                }
                base_bytes(self.base, path)
                    .map_err(lower_err(path))
                    .map(|b| Some(b.unwrap_or_default()))
            }
            _ => Ok(self.src.content(path, &seen.version)?),
        }
    }

    /// Reads the state after the newest turn of each of `upper` (upper
    /// paths) not read yet: what [`WorktreeHistory::upper_at`] falls back
    /// on where no record covers a turn boundary. One group commit and one
    /// query of the open turn's records, whatever the number of paths and
    /// boundaries (the project's `log` reads its current states once the
    /// same way):
    ///
    /// - a path recorded in the open turn: what the upper layer holds now;
    /// - any other: what the upper layer holds now, unless the worktree's
    ///   daemon recorded the path in the open turn after `timeline` was
    ///   loaded, when it is that record (the state when the open turn
    ///   began): a concurrent change never leaks into an earlier boundary
    ///   ([`Sources::states_at`]).
    fn fetch_ends(
        &self,
        timeline: &Timeline,
        upper: &BTreeSet<Vec<u8>>,
    ) -> Result<(), HistoryError> {
        let open = self.src.index.last_turn()?.map_or(0, |t| t.number);
        let (in_open, others): (Vec<Vec<u8>>, Vec<Vec<u8>>) = {
            let ends = self.ends.borrow();
            upper
                .iter()
                .filter(|p| !ends.contains_key(*p))
                .cloned()
                .partition(|p| timeline.record(p, open).is_some())
        };
        let mut read = BTreeMap::new();
        // Their records already say what they were when the open turn
        // began; after it, the upper layer now: nothing to check.
        for p in in_open {
            let v = current::read_version(self.src.backing, &p).map_err(|source| {
                HistoryError::Read(ViewError::Project {
                    path: p.clone(),
                    source,
                })
            })?;
            read.insert(p, v);
        }
        if !others.is_empty() {
            read.extend(self.src.states_at(timeline, &others, open)?);
        }
        self.ends.borrow_mut().extend(read);
        Ok(())
    }

    /// The upper states at the start of `turn` of every upper path the
    /// views of `views` need (see [`needed_for`]): each from `timeline`
    /// where a record covers it, else as read by
    /// [`WorktreeHistory::fetch_ends`] (done here for the paths not read
    /// yet).
    fn upper_at(
        &self,
        timeline: &Timeline,
        views: &BTreeSet<Vec<u8>>,
        turn: u64,
    ) -> Result<UpperAt, HistoryError> {
        let mut needed = BTreeSet::new();
        for q in views {
            needed_for(q, &mut needed);
        }
        self.fetch_ends(timeline, &needed)?;
        let ends = self.ends.borrow();
        let mut out = UpperAt::new();
        for p in needed {
            let v = match timeline.state_at(&p, turn) {
                Some(pre) => Version::recorded(pre.clone()),
                None => match ends.get(&p) {
                    Some(v) => v.clone(),
                    None => continue,
                },
            };
            out.insert(p, v);
        }
        Ok(out)
    }

    /// Reads at once the upper states every view path the turns in
    /// `turns` recorded needs (see [`WorktreeHistory::fetch_ends`]), so a
    /// command over many turns reads the upper layer and asks the daemon
    /// to commit once, not once per turn boundary.
    pub(super) fn prefetch(
        &self,
        timeline: &Timeline,
        recorded: &[Vec<u8>],
    ) -> Result<(), HistoryError> {
        let mut needed = BTreeSet::new();
        for q in recorded.iter().filter_map(|p| view_path_of(p)) {
            if !paths::is_excluded(&q) {
                needed_for(&q, &mut needed);
            }
        }
        self.fetch_ends(timeline, &needed)
    }

    /// The view of `q` (not the root) when the upper layer is `up`, and
    /// whether the lower children of `q` show (it is a directory of both
    /// layers, or of the lower one only, and not opaque).
    fn view(&self, up: &UpperAt, q: &[u8]) -> Result<(Seen, bool), HistoryError> {
        self.view_hashed(up, q, true)
    }

    /// [`WorktreeHistory::view`], lower files hashed only when `hash`
    /// (else see [`WorktreeHistory::base_state_of`]).
    fn view_hashed(
        &self,
        up: &UpperAt,
        q: &[u8],
        hash: bool,
    ) -> Result<(Seen, bool), HistoryError> {
        view_of(up, q, &mut |p| self.base_state_of(p, hash))
    }

    /// Every path of the base beneath directory `dir` (not `dir`).
    fn lower_subtree(&self, dir: &[u8], out: &mut BTreeSet<Vec<u8>>) -> Result<(), HistoryError> {
        let mut stack = vec![dir.to_vec()];
        while let Some(d) = stack.pop() {
            let entries = self
                .base
                .readdir(&d)
                .map_err(lower_err(&d))?
                .unwrap_or_default();
            for e in entries {
                let p = paths::join(&d, &e.name);
                if e.kind == Kind::Dir {
                    stack.push(p.clone());
                }
                out.insert(p);
            }
        }
        Ok(())
    }

    /// Each view path that may differ between the start of `from` and the
    /// start of `to_next`, with its view at both points, given the upper
    /// paths recorded between them (`recorded`) and a `timeline` holding
    /// every record from `from` on.
    fn compare(
        &self,
        timeline: &Timeline,
        recorded: &[Vec<u8>],
        from: u64,
        to_next: u64,
    ) -> Result<BTreeMap<Vec<u8>, (Seen, Seen)>, HistoryError> {
        self.compare_hashed(timeline, recorded, from, to_next, true)
    }

    /// [`WorktreeHistory::compare`], lower files hashed only when `hash`
    /// (else see [`WorktreeHistory::base_state_of`]).
    fn compare_hashed(
        &self,
        timeline: &Timeline,
        recorded: &[Vec<u8>],
        from: u64,
        to_next: u64,
        hash: bool,
    ) -> Result<BTreeMap<Vec<u8>, (Seen, Seen)>, HistoryError> {
        let mut views: BTreeSet<Vec<u8>> = recorded
            .iter()
            .filter_map(|p| view_path_of(p))
            .filter(|q| !paths::is_excluded(q))
            .collect();
        let mut out = BTreeMap::new();
        let mut round = 0;
        while !views.is_empty() {
            round += 1;
            let before = self.upper_at(timeline, &views, from)?;
            let after = self.upper_at(timeline, &views, to_next)?;
            let mut more = BTreeSet::new();
            for q in &views {
                let (old, old_lower) = self.view_hashed(&before, q, hash)?;
                let (new, new_lower) = self.view_hashed(&after, q, hash)?;
                // Lower children start or stop showing: each may change
                // with no record of its own. (The first round only: the
                // subtree walk is whole.)
                if round == 1 && old_lower != new_lower {
                    self.lower_subtree(q, &mut more)?;
                }
                out.insert(q.clone(), (old, new));
            }
            more.retain(|q| !out.contains_key(q) && !paths::is_excluded(q));
            views = more;
        }
        Ok(out)
    }

    /// [`crate::history::changes`] for the worktree's view: each path
    /// whose view at the start of `from` differs (as git sees it) from its
    /// view at the end of `to`, within one of `filter` (all when empty),
    /// sorted by path, both sides with their bytes (ready for
    /// [`crate::diff::build`]). Also the directories created or removed
    /// (absent at one end, a directory at the other), as
    /// [`crate::history::dir_changes`].
    ///
    /// Errors: an unknown turn or empty range (usage); the worktree's
    /// history, its upper layer or its base cannot be read.
    pub fn changes(
        &self,
        from: u64,
        to: u64,
        filter: &[Vec<u8>],
    ) -> Result<(Vec<PathChange>, Vec<DirChange>), HistoryError> {
        if from > to {
            return Err(HistoryError::EmptyRange { from, to });
        }
        self.src.turn(from)?;
        self.src.turn(to)?;
        let timeline = self.src.timeline(from)?;
        let recorded = timeline.paths_in(from, to);
        let compared = self.compare(&timeline, &recorded, from, to + 1)?;
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        for (path, (old, new)) in compared {
            if !(filter.is_empty() || filter.iter().any(|f| paths::is_within(&path, f))) {
                continue;
            }
            match (&old.version.state, &new.version.state) {
                (PreImage::Absent, PreImage::Dir { .. }) => dirs.push(DirChange {
                    path: path.clone(),
                    added: true,
                }),
                (PreImage::Dir { .. }, PreImage::Absent) => dirs.push(DirChange {
                    path: path.clone(),
                    added: false,
                }),
                _ => {}
            }
            if classify(&old.version.state, &new.version.state).is_none()
                && !perm_changed(&old.version.state, &new.version.state)
            {
                continue;
            }
            let old = self.with_bytes(&path, old)?;
            let new = self.with_bytes(&path, new)?;
            files.push(PathChange { path, old, new });
        }
        Ok((files, dirs))
    }

    /// `seen`'s version with a file's bytes in it (a lower file's read
    /// from the base; an upper one as the history holds it).
    fn with_bytes(&self, path: &[u8], seen: Seen) -> Result<Version, HistoryError> {
        if seen.layer == Layer::Lower && matches!(seen.version.state, PreImage::File { .. }) {
            let bytes = self.content(path, &seen)?;
            return Ok(Version {
                state: seen.version.state,
                bytes,
            });
        }
        Ok(seen.version)
    }

    /// What one closed or open turn changed in the view: each path that
    /// may differ between the turn's start and its end, with its view at
    /// its end (for the export branch: a path whose end state equals its
    /// start state is harmless to set again). `timeline` holds every record
    /// from `turn` on.
    ///
    /// Errors: the worktree's history, its upper layer or its base cannot
    /// be read.
    pub fn turn_end_states(
        &self,
        timeline: &Timeline,
        turn: u64,
    ) -> Result<Vec<(Vec<u8>, Seen)>, HistoryError> {
        let recorded = timeline.by_turn().remove(&turn).unwrap_or_default();
        let compared = self.compare(timeline, &recorded, turn, turn + 1)?;
        Ok(compared
            .into_iter()
            .filter(|(_, (old, new))| old != new)
            .map(|(p, (_, new))| (p, new))
            .collect())
    }

    /// [`crate::history::log`] for the worktree's view: the entries of the
    /// worktree's own log (turn, kind, label, times, bytes stored), with
    /// `added`, `modified` and `deleted` counted in the view, and `paths`
    /// the view paths its records name (a whiteout counts as the name it
    /// hides, an opaque marker as its directory).
    ///
    /// Errors: the worktree's history, its upper layer or its base cannot
    /// be read.
    pub fn log(&self) -> Result<Vec<LogEntry>, HistoryError> {
        self.log_counting(&mut |_| true)
    }

    /// [`WorktreeHistory::log`], counting in `added`, `modified` and
    /// `deleted` only the paths `counted` keeps (the others go to
    /// `ignored`), as [`crate::history::log_counting`].
    ///
    /// Errors: as [`WorktreeHistory::log`].
    pub fn log_counting(
        &self,
        counted: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Vec<LogEntry>, HistoryError> {
        let mut entries = crate::history::log_turns(&self.src)?;
        let Some(first) = entries.iter().map(|e| e.turn).min() else {
            return Ok(entries);
        };
        let timeline = self.src.timeline(first)?;
        let all: Vec<Vec<u8>> = timeline.iter().map(|(p, _)| p.clone()).collect();
        self.prefetch(&timeline, &all)?;
        let by_turn = timeline.by_turn();
        for e in &mut entries {
            let recorded = by_turn.get(&e.turn).cloned().unwrap_or_default();
            let named: BTreeSet<Vec<u8>> = recorded
                .iter()
                .filter_map(|p| view_path_of(p))
                .filter(|q| !paths::is_excluded(q))
                .collect();
            e.paths = named.len() as u64;
            e.added = 0;
            e.modified = 0;
            e.deleted = 0;
            // Lower files unhashed: a file changed against the base mostly
            // changes its size, and then its bytes need not be read.
            for (q, (old, new)) in
                self.compare_hashed(&timeline, &recorded, e.turn, e.turn + 1, false)?
            {
                let kind = self.classify_seen(&q, &old, &new)?;
                if kind.is_some() && !counted(&q) {
                    e.ignored += 1;
                    continue;
                }
                match kind {
                    Some(ChangeKind::Added) => e.added += 1,
                    Some(ChangeKind::Modified) => e.modified += 1,
                    Some(ChangeKind::Deleted) => e.deleted += 1,
                    None => {}
                }
            }
        }
        Ok(entries)
    }

    /// [`classify`] of two views of `q` whose lower files may be
    /// [`UNHASHED`]: a lower file compared with an upper file of the same
    /// size is hashed first; otherwise the kinds, modes and sizes decide
    /// (files of two sizes differ; a lower file compared with itself is
    /// the same, the base being frozen).
    ///
    /// Errors: the base cannot be read.
    fn classify_seen(
        &self,
        q: &[u8],
        old: &Seen,
        new: &Seen,
    ) -> Result<Option<ChangeKind>, HistoryError> {
        let same_size_vs_upper = |a: &Seen, b: &Seen| {
            a.layer == Layer::Lower
                && b.layer == Layer::Upper
                && matches!(
                    (&a.version.state, &b.version.state),
                    (PreImage::File { size: x, .. }, PreImage::File { size: y, .. }) if x == y
                )
        };
        if same_size_vs_upper(old, new) || same_size_vs_upper(new, old) {
            let base = self.base_state(q)?;
            let state = |s: &Seen| match s.layer {
                Layer::Lower => base.clone(),
                Layer::Upper => s.version.state.clone(),
            };
            return Ok(classify(&state(old), &state(new)));
        }
        Ok(classify(&old.version.state, &new.version.state))
    }

    /// The bytes of the regular file at `path` in the worktree's view as
    /// it is now (the upper layer as it is, over the base), `None` when
    /// the view holds no file there: what the worktree's branch reads its
    /// ignore files with. No group commit: nothing is compared with the
    /// records.
    ///
    /// Errors: the upper layer or the base cannot be read.
    pub fn file_now(&self, path: &[u8]) -> Result<Option<Vec<u8>>, HistoryError> {
        let mut needed = BTreeSet::new();
        needed_for(path, &mut needed);
        let mut up = UpperAt::new();
        for p in needed {
            let v = current::read_version(self.src.backing, &p).map_err(|source| {
                HistoryError::Read(ViewError::Project {
                    path: p.clone(),
                    source,
                })
            })?;
            up.insert(p, v);
        }
        let (seen, _) = self.view(&up, path)?;
        match seen.version.state {
            PreImage::File { .. } => self.content(path, &seen),
            _ => Ok(None),
        }
    }

    /// The view of `path` at the start of `turn`.
    ///
    /// Errors: unknown turn (usage); the worktree's history, its upper
    /// layer or its base cannot be read.
    pub fn seen_at(&self, turn: u64, path: &[u8]) -> Result<Seen, HistoryError> {
        self.src.turn(turn)?;
        if path.is_empty() {
            return Ok(Seen {
                version: Version::recorded(PreImage::Dir { perm: 0o755 }),
                layer: Layer::Upper,
            });
        }
        let timeline = self.src.timeline(turn)?;
        let views: BTreeSet<Vec<u8>> = std::iter::once(path.to_vec()).collect();
        let up = self.upper_at(&timeline, &views, turn)?;
        Ok(self.view(&up, path)?.0)
    }

    /// [`crate::history::show_entry`] for the worktree's view: the file or
    /// symlink at `path` when worktree turn `turn` began.
    ///
    /// Errors: as [`crate::history::show_entry`].
    pub fn show_entry(&self, turn: u64, path: &[u8]) -> Result<Shown, HistoryError> {
        if paths::is_excluded(path) {
            return Err(HistoryError::Excluded(path.to_vec()));
        }
        let seen = self.seen_at(turn, path)?;
        crate::history::shown(path, turn, &seen.version.state, || {
            self.content(path, &seen)
        })
    }
}
