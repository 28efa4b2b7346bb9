//! Fingerprints: what the mount (or a rewind) last left at each path, kept
//! in memory after each mutation and written to the index at each turn
//! switch, rewind and unmount, so a later check sees changes made behind
//! the mount's back.

use std::collections::HashMap;

use opfs_fs::Mutation;

use super::{Inner, Journal};
use crate::paths;
use crate::record::{Fingerprint, Stat};
use crate::store::IndexError;
use crate::tree::Tree;

/// Fingerprints not yet written to the index. `None`: the mount is in the
/// middle of changing the path (a write handle is open), so there is
/// nothing to compare against. Excluded paths (`.git/`, and the
/// `[record] exclude` list: the journal does not pass them) are never held.
///
/// `by_inode` keeps, for the life of the journal, the last fingerprint the
/// mount left for each regular file's inode under any name (never
/// dropped when a name goes): a write through one hard link moves the
/// inode's mtime under its other names too, which is not a change made
/// behind the mount ([`Journal::seen_under_some_name`]).
#[derive(Default)]
pub(super) struct Fingerprints(
    HashMap<Vec<u8>, Option<Fingerprint>>,
    HashMap<u64, Fingerprint>,
);

impl Fingerprints {
    /// Holds `fp` (or "changing", `None`) for `path`.
    fn set(&mut self, path: &[u8], fp: Option<Fingerprint>) {
        if let Some(f) = fp.filter(|f| f.file_type == libc::S_IFREG) {
            self.1.insert(f.ino, f);
        }
        self.0.insert(path.to_vec(), fp);
    }

    /// The mount is about to change `path`: nothing to compare against
    /// until it is done.
    pub(super) fn changing(&mut self, path: &[u8]) {
        if !paths::is_excluded(path) && !matches!(self.0.get(path), Some(None)) {
            self.0.insert(path.to_vec(), None);
        }
    }

    /// What the mount last left at `path`, as held in memory: `None` when
    /// not held, `Some(None)` while the mount is changing it.
    pub(super) fn get(&self, path: &[u8]) -> Option<Option<Fingerprint>> {
        self.0.get(path).copied()
    }

    /// True when the mount last left some name of `fp`'s inode exactly as
    /// `fp` says, as far as memory holds
    /// ([`Journal::seen_under_some_name`] without the index).
    pub(super) fn left_under_some_name(&self, fp: &Fingerprint) -> bool {
        self.1.get(&fp.ino) == Some(fp) || self.0.values().any(|f| f.as_ref() == Some(fp))
    }

    /// The mount left `fp` at `path`.
    pub(super) fn left(&mut self, path: &[u8], fp: Fingerprint) {
        if !paths::is_excluded(path) {
            self.set(path, Some(fp));
        }
    }
}

impl Inner {
    /// Commits the pending records, then writes the fingerprints held in
    /// memory to the index.
    pub(super) fn flush(&mut self) -> Result<(), IndexError> {
        // Pending records forget stored fingerprints; they must land before
        // the fresh fingerprints below, never after.
        self.apply_pending()?;
        if self.fingerprints.0.is_empty() {
            return Ok(());
        }
        self.index.put_fingerprints(
            self.fingerprints
                .0
                .iter()
                .map(|(p, f)| (p.as_slice(), f.as_ref())),
        )?;
        self.fingerprints.0.clear();
        Ok(())
    }
}

impl<T: Tree> Journal<T> {
    /// Writes the fingerprints remembered in memory to the index.
    pub fn flush(&self) -> Result<(), IndexError> {
        self.lock().flush()
    }

    /// Remembers what is at `path` now as what the mount (or a rewind) left
    /// there.
    pub fn remember(&self, path: &[u8]) {
        self.remember_is_dir(path);
    }

    /// [`Journal::remember`]; true when a directory is there now.
    pub(super) fn remember_is_dir(&self, path: &[u8]) -> bool {
        if self.excludes(path) {
            return false;
        }
        let st = self.tree.lstat(path).ok();
        let is_dir = matches!(&st, Some(Some(s)) if s.file_type() == libc::S_IFDIR);
        let fp = st.map(|st| Fingerprint::of(st.as_ref()));
        self.lock().fingerprints.set(path, fp);
        is_dir
    }

    /// True when the mount last left some name of `fp`'s inode exactly as
    /// `fp` says (the remembered fingerprints, then the stored ones): for a
    /// file with several hard links, a write through one name moves the
    /// inode's mtime under every other name, which is not a change made
    /// behind the mount.
    ///
    /// Errors: the index cannot be read.
    pub fn seen_under_some_name(&self, fp: &Fingerprint) -> Result<bool, IndexError> {
        let inner = self.lock();
        if inner.fingerprints.1.get(&fp.ino) == Some(fp)
            || inner
                .fingerprints
                .0
                .values()
                .any(|f| f.as_ref() == Some(fp))
        {
            return Ok(true);
        }
        inner.index.fingerprint_stored(fp)
    }

    /// What the mount last left at `path`, if known.
    pub fn last_seen(&self, path: &[u8]) -> Result<Option<Fingerprint>, IndexError> {
        let mut inner = self.lock();
        match inner.fingerprints.0.get(path) {
            Some(fp) => Ok(*fp),
            None => {
                inner.apply_pending()?;
                inner.index.fingerprint(path)
            }
        }
    }

    /// The [`opfs_fs::MutationHook::after`] half: remembers what
    /// `mutation` left. `now` is the layer's stat of the inode it holds
    /// for the path, when it has one.
    pub(super) fn remember_after(&self, mutation: &Mutation<'_>, now: Option<&libc::stat>) {
        match *mutation {
            Mutation::Content { path }
            | Mutation::Range { path, .. }
            | Mutation::Metadata { path }
            | Mutation::Create { path } => match now {
                // The layer's stat of the inode it holds for the path.
                Some(st) => {
                    if !self.excludes(path) {
                        let fp = Fingerprint::of(Some(&Stat::from_raw(st)));
                        self.lock().fingerprints.left(path, fp);
                    }
                }
                None => self.remember(path),
            },
            // The layer reports a removal only once it succeeded: the path
            // is absent now, no stat needed.
            Mutation::Remove { path } => {
                if !self.excludes(path) {
                    self.lock().fingerprints.left(path, Fingerprint::of(None));
                }
            }
            Mutation::Rename { from, to, exchange } => {
                self.remember_rename(from, to, exchange, now)
            }
        }
    }
}
