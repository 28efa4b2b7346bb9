//! Whole pre-images: reading a path's state from the tree, appending its
//! record to the capture log, and the group commit that moves pending
//! records into the index.

use std::io::{self, Read};

use super::{CaptureError, Inner, Journal};
use crate::paths::PathContext;
use crate::record::{Meta, PreImage, Special};
use crate::store::{CaptureLog, Entry, Index, IndexError, INLINE_MAX};
use crate::tree::Tree;

/// With this many records pending and the index refusing them, captures
/// fail (the log would otherwise grow without bound).
const PENDING_HARD_MAX: usize = 1 << 20;

/// Records appended to the capture log and not yet committed to the
/// index, in log order.
pub(super) struct Pending {
    log: CaptureLog,
    entries: Vec<Entry>,
    /// Path and inline bytes of `entries`.
    bytes: usize,
}

impl Pending {
    /// Nothing pending; `log` is the open capture log (already replayed).
    pub(super) fn new(log: CaptureLog) -> Pending {
        Pending {
            log,
            entries: Vec::new(),
            bytes: 0,
        }
    }

    /// Commits the pending records to `index` in one transaction, then
    /// empties the log. After `Err` they stay pending and in the log.
    /// Returns the bytes of the blobs the index listed for the first time
    /// ([`Index::apply`]).
    fn apply(&mut self, index: &mut Index) -> Result<u64, IndexError> {
        if self.entries.is_empty() {
            return Ok(0);
        }
        let added = index.apply(&self.entries)?;
        self.entries.clear();
        self.bytes = 0;
        // If the truncation fails the log keeps records the index already
        // holds; replaying them changes nothing. The next group retries.
        if let Err(e) = self.log.truncate() {
            log::warn!("{e}");
        }
        Ok(added)
    }
}

impl Inner {
    /// The group commit: see [`Journal::apply_pending`].
    pub(super) fn apply_pending(&mut self) -> Result<(), IndexError> {
        let added = self.pending.apply(&mut self.index)?;
        if let Some(total) = self.stored_bytes.as_mut() {
            *total = total.saturating_add(added);
        }
        Ok(())
    }

    /// Appends `entry` to the capture log (durable when this returns) and
    /// queues it for the next group commit.
    pub(super) fn append(&mut self, entry: Entry) -> Result<(), CaptureError> {
        if self.pending.entries.len() >= PENDING_HARD_MAX {
            self.apply_pending().at(&entry.path)?;
        }
        self.pending.log.append(&entry).at(&entry.path)?;
        self.pending.bytes += entry.path.len() + entry.data.as_ref().map_or(0, Vec::len);
        self.pending.entries.push(entry);
        if self.pending.entries.len() >= super::GROUP_MAX
            || self.pending.bytes >= super::GROUP_MAX_BYTES
        {
            // The records are durable in the log; a failed commit only
            // leaves them pending.
            if let Err(e) = self.apply_pending() {
                log::warn!("group commit deferred: {e}");
            }
        }
        Ok(())
    }
}

impl<T: Tree> Journal<T> {
    /// Records the current state of `path` as its pre-image in the open turn,
    /// unless already recorded in this turn or excluded (`.git/` and the
    /// `[record] exclude` list: [`Journal::excludes`]).
    pub fn capture(&self, path: &[u8]) -> Result<(), CaptureError> {
        let mut inner = self.lock();
        self.capture_locked(&mut inner, path)
    }

    pub(super) fn capture_locked(
        &self,
        inner: &mut Inner,
        path: &[u8],
    ) -> Result<(), CaptureError> {
        self.capture_known(inner, path, None)
    }

    /// Records `path`'s pre-image: `known` when the caller already knows
    /// it (a `Create` is reported only after the FUSE layer checked, under
    /// the quiesce gate, that the name is absent), else read from the
    /// project.
    pub(super) fn capture_known(
        &self,
        inner: &mut Inner,
        path: &[u8],
        known: Option<PreImage>,
    ) -> Result<(), CaptureError> {
        if path.is_empty() || self.excludes(path) || inner.turn.captured.contains(path) {
            return Ok(());
        }
        if inner.turn.ranged.contains_key(path) {
            return self.materialize(inner, path);
        }
        let (pre, data, nlink, meta) = match known {
            Some(pre) => (pre, None, 0, None),
            None => self.read_state(inner, path)?,
        };
        if let PreImage::File { ino, .. } = pre {
            if nlink > 1 {
                self.backfill_other_names(inner, path, ino, nlink)?;
                // Written straight to the index (hard links are rare): a
                // rewind looks for the other names of this inode only when
                // it had more names than the rewind has records of.
                inner
                    .index
                    .note_links(inner.turn.number, path, nlink)
                    .at(path)?;
            }
        }
        // The entry also forgets the stored fingerprint (written at the
        // last turn switch, rewind or unmount): it describes the path
        // before the mutation about to run, and the new one lives in memory
        // until the next flush, so a crash before that flush leaves "not
        // known" (no check) instead of a false "changed behind the mount's
        // back".
        let turn = inner.turn.number;
        inner.append(Entry::record(turn, path.to_vec(), pre, data).with_meta(meta))?;
        crate::failpoint::failpoint("capture-after-record");
        inner.turn.captured.insert(path.to_vec());
        Ok(())
    }

    /// Reads `path`'s current state from the project. A regular file's
    /// bytes are returned for an inline record when they fit in
    /// [`INLINE_MAX`], else stored as a blob file first. Also returns the
    /// link count (0 when absent) and the owner and extended attributes.
    #[allow(clippy::type_complexity)]
    fn read_state(
        &self,
        inner: &mut Inner,
        path: &[u8],
    ) -> Result<(PreImage, Option<Vec<u8>>, u64, Option<Meta>), CaptureError> {
        let Some((st, file)) = self.tree.lstat_open(path).at(path)? else {
            return Ok((PreImage::Absent, None, 0, None));
        };
        let nlink = st.nlink;
        if self.note_birth(inner, path, file.as_ref())? {
            return Ok((PreImage::Unknown, None, nlink, None));
        }
        // One `flistxattr` (or `llistxattr`) when the set is empty.
        let mut meta = self.tree.meta(path, &st, file.as_ref()).at(path)?;
        let key = (st.dev, st.ino);
        let (pre, data) = match st.file_type() {
            libc::S_IFREG if st.nlink > 1 && inner.turn.linked.contains_key(&key) => {
                let (blob, size, perm, first_meta) = inner.turn.linked[&key].clone();
                meta = first_meta;
                let pre = PreImage::File {
                    blob,
                    size,
                    perm,
                    ino: st.ino,
                };
                (pre, None)
            }
            libc::S_IFREG => {
                let Some(mut f) = file else {
                    return Err(CaptureError::read(
                        path,
                        io::Error::other("regular file without a descriptor"),
                    ));
                };
                let mut head = Vec::new();
                if st.size <= INLINE_MAX {
                    (&mut f)
                        .take(INLINE_MAX + 1)
                        .read_to_end(&mut head)
                        .at(path)?;
                }
                let (blob, size, data) = if st.size <= INLINE_MAX && head.len() as u64 <= INLINE_MAX
                {
                    let blob = *blake3::hash(&head).as_bytes();
                    (blob, head.len() as u64, Some(head))
                } else {
                    // Large, or grew past the limit since the stat: a blob
                    // file, written (and renamed into place) before the
                    // record that names it.
                    let (blob, size) = if head.is_empty() {
                        // Holes are not read and stay holes in the blob.
                        self.blobs.put_file(&f, st.size).at(path)?
                    } else {
                        let mut src = io::Cursor::new(head).chain(f);
                        self.blobs.put(&mut src, st.size).at(path)?
                    };
                    (blob, size, None)
                };
                crate::failpoint::failpoint("capture-after-blob");
                if st.nlink > 1 {
                    inner
                        .turn
                        .linked
                        .insert(key, (blob, size, st.perm(), meta.clone()));
                }
                let pre = PreImage::File {
                    blob,
                    size,
                    perm: st.perm(),
                    ino: st.ino,
                };
                (pre, data)
            }
            libc::S_IFDIR => (PreImage::Dir { perm: st.perm() }, None),
            libc::S_IFLNK => (
                PreImage::Symlink {
                    target: self.tree.read_link(path).at(path)?,
                },
                None,
            ),
            t => (
                PreImage::Special {
                    kind: Special::from_type_bits(t).unwrap_or(Special::Block),
                    perm: st.perm(),
                    rdev: st.rdev,
                },
                None,
            ),
        };
        Ok((pre, data, nlink, meta))
    }
}
