//! Edits behind the mount that a mutation through the mount is about to
//! overwrite: kept first (`docs/design.md`, "Edits behind the mount that
//! the agent overwrites").
//!
//! A path's first mutation in a turn records what it held then, edits from
//! outside included. A later mutation of the same path in the same turn
//! records nothing more, so an edit made behind the mount between the two
//! would be lost. Before such a mutation the journal compares the path
//! with what the mount last left there (its fingerprint, in memory); when
//! they differ, the current state is kept in the `outside_edits` table
//! (`Index::keep_outside_edit`) before the mutation runs.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;

use super::{CaptureError, Inner, Journal};
use crate::paths::PathContext;
use crate::record::{Fingerprint, PreImage, Special, Stat};
use crate::tree::Tree;

/// What the open turn kept per path: the fingerprint of the last state
/// kept, so a mutation that fails and is retried keeps it once.
pub(super) type Kept = HashMap<Vec<u8>, Fingerprint>;

impl<T: Tree> Journal<T> {
    /// Keeps what `path` holds now when it is not what the mount last left
    /// there, before mutation `by` (`write`, `metadata`, `remove`, `rename`,
    /// `replace`) changes it. Only for a path the open turn has recorded
    /// already (its record holds the state of the turn's start, not this
    /// one). `parent`: the directory holding the entry, when the layer gave
    /// it; `now`: the path's current state when the caller read it already
    /// (else one `lstat` reads it).
    ///
    /// Cost when nothing changed behind the mount: one `lstat` (or
    /// `fstat`), and nothing at all while the mount holds the file open
    /// for writing (its fingerprint is then unknown). When something did:
    /// the file is copied into the blob store and one row is written to
    /// the index before this returns.
    ///
    /// Errors: the path or the store cannot be read or written; the
    /// mutation is then refused (nothing is lost).
    pub(super) fn keep_outside_edit(
        &self,
        inner: &mut Inner,
        path: &[u8],
        parent: Option<BorrowedFd<'_>>,
        now: Option<Option<Stat>>,
        by: &'static str,
    ) -> Result<(), CaptureError> {
        let fp = match inner.fingerprints.get(path) {
            Some(Some(fp)) => fp,
            // The mount is changing the file (a write handle is open).
            Some(None) => return Ok(()),
            // Not in memory: this process has not seen the path change in
            // this turn (a restart); the stored one, if any.
            None => match inner.index.fingerprint(path).at(path)? {
                Some(fp) => fp,
                None => return Ok(()),
            },
        };
        let now = match now {
            Some(now) => now,
            // Through the layer's directory when given; else one quick
            // stat, confirmed by a confined one when it differs.
            None if parent.is_some() => self.tree.lstat_in(path, parent).at(path)?,
            None => match self.tree.lstat_hint(path) {
                Ok(hint) if fp.differs(hint.as_ref()).is_none() => return Ok(()),
                _ => self.tree.lstat_in(path, None).at(path)?,
            },
        };
        let Some(st) = now else {
            // Removed behind the mount: nothing left to keep.
            return Ok(());
        };
        if fp.differs(Some(&st)).is_none() {
            return Ok(());
        }
        let now_fp = Fingerprint::of(Some(&st));
        // A write through another name of the same file moved this name's
        // mtime: not a change made behind the mount.
        if st.ino == fp.ino && inner.fingerprints.left_under_some_name(&now_fp) {
            return Ok(());
        }
        if inner.turn.outside_kept.get(path) == Some(&now_fp) {
            return Ok(());
        }
        let pre = self.read_outside_state(path, parent)?;
        let Some(pre) = pre else { return Ok(()) };
        let turn = inner.turn.number;
        let (seq, added) = inner
            .index
            .keep_outside_edit(turn, path, &pre, by, crate::store::index::now_ns())
            .at(path)?;
        // The running total a byte budget reads (`Journal::stored_bytes`).
        if let Some(total) = inner.stored_bytes.as_mut() {
            *total = total.saturating_add(added);
        }
        log::warn!(
            "{} was changed behind the mount during turn {turn}; kept it before the mount's {by} \
             (opfs show {turn}:{} --outside={seq})",
            crate::paths::display(path),
            crate::paths::display(path),
        );
        inner.turn.outside_kept.insert(path.to_vec(), now_fp);
        Ok(())
    }

    /// What `path` holds now, a regular file's bytes stored as a blob file
    /// first; `None` when it is gone.
    fn read_outside_state(
        &self,
        path: &[u8],
        parent: Option<BorrowedFd<'_>>,
    ) -> Result<Option<PreImage>, CaptureError> {
        let Some((st, file, _)) = self.tree.lstat_open_born_in(path, parent).at(path)? else {
            return Ok(None);
        };
        Ok(Some(match st.file_type() {
            libc::S_IFREG => {
                let Some(mut f) = file else {
                    return Err(CaptureError::read(
                        path,
                        std::io::Error::other("regular file without a descriptor"),
                    ));
                };
                let (blob, size) = self.blobs.put(&mut f, st.size).at(path)?;
                PreImage::File {
                    blob,
                    size,
                    perm: st.perm(),
                    ino: st.ino,
                }
            }
            libc::S_IFDIR => PreImage::Dir { perm: st.perm() },
            libc::S_IFLNK => PreImage::Symlink {
                target: self.tree.read_link_in(path, parent).at(path)?,
            },
            t => PreImage::Special {
                kind: Special::from_type_bits(t).unwrap_or(Special::Block),
                perm: st.perm(),
                rdev: st.rdev,
            },
        }))
    }
}
