//! Whole pre-images: reading a path's state from the tree, appending its
//! record to the capture log, and the group commit that moves pending
//! records into the index.

use std::io::{self, Read};
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};

use super::keep::Hashed;
use super::{CaptureError, Inner, Journal};
use crate::paths::PathContext;
use crate::record::{Meta, PreImage, Special};
use crate::store::log::Op;
use crate::store::{BlobStore, CaptureLog, Entry, Index, IndexError, KeptDir, INLINE_MAX};
use crate::tree::Tree;

/// With this many records pending and the index refusing them, captures
/// fail (the log would otherwise grow without bound).
const PENDING_HARD_MAX: usize = 1 << 20;

/// Records appended to the capture log and not yet committed to the
/// index, in log order.
pub(super) struct Pending {
    log: CaptureLog,
    pub(super) entries: Vec<Entry>,
    /// Path and inline bytes of `entries`.
    bytes: usize,
    /// The scope's kept files (`store::kept`).
    pub(super) kept: Arc<KeptDir>,
    /// The blob store kept files become blobs of.
    pub(super) blobs: Arc<BlobStore>,
    /// What the thread hashing kept files has done, when one runs.
    pub(super) hashed: Option<Arc<Mutex<Hashed>>>,
    /// Kept files whose records are resolved in `entries`: removed once
    /// they are committed.
    pub(super) kept_done: Vec<u64>,
    /// When the oldest of `entries` was appended.
    oldest: Option<std::time::Instant>,
    /// A record was appended since the timer last looked
    /// ([`Pending::streaming`]).
    fresh: bool,
}

impl Pending {
    /// Nothing pending; `log` is the open capture log (already replayed).
    pub(super) fn new(log: CaptureLog, kept: Arc<KeptDir>, blobs: Arc<BlobStore>) -> Pending {
        Pending {
            log,
            entries: Vec::new(),
            bytes: 0,
            kept,
            blobs,
            hashed: None,
            kept_done: Vec::new(),
            oldest: None,
            fresh: false,
        }
    }

    /// True while captures keep arriving: a record was appended since the
    /// last call, and the oldest pending one is younger than `max_wait`.
    /// The timer's group commit then waits, so a stream of captures is
    /// committed in a few large transactions instead of one per tick
    /// (each transaction rewrites the index pages its records touch).
    pub(super) fn streaming(&mut self, max_wait: std::time::Duration) -> bool {
        let fresh = std::mem::take(&mut self.fresh);
        fresh && self.oldest.is_some_and(|t| t.elapsed() < max_wait)
    }

    /// Commits the pending records to `index` in one transaction, then
    /// empties the log. After `Err` they stay pending and in the log.
    /// Returns the bytes of the blobs the index listed for the first time
    /// ([`Index::apply`]).
    fn apply(&mut self, index: &mut Index) -> Result<u64, IndexError> {
        if self.entries.is_empty() {
            return Ok(0);
        }
        let added = index.apply(&self.entries, &self.blobs)?;
        self.entries.clear();
        self.bytes = 0;
        self.oldest = None;
        self.fresh = false;
        // If the truncation fails the log keeps records the index already
        // holds; replaying them changes nothing. The next group retries.
        if let Err(e) = self.log.truncate() {
            log::warn!("{e}");
        }
        // Only now: a crash before the truncation replays kept records,
        // which need their files.
        for id in self.kept_done.drain(..) {
            self.kept.remove(id);
        }
        Ok(added)
    }
}

impl Inner {
    /// The group commit: see [`Journal::apply_pending`].
    pub(super) fn apply_pending(&mut self) -> Result<(), IndexError> {
        self.resolve_kept()?;
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
        if self.pending.entries.is_empty() {
            self.pending.oldest = Some(std::time::Instant::now());
        }
        self.pending.fresh = true;
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
        self.capture_by(inner, path, "write")
    }

    /// [`Journal::capture_locked`] before mutation `by` (named in what an
    /// edit behind the mount is kept with: `outside.rs`).
    pub(super) fn capture_by(
        &self,
        inner: &mut Inner,
        path: &[u8],
        by: &'static str,
    ) -> Result<(), CaptureError> {
        self.capture_as(inner, path, None, false, None, by)
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
        self.capture_as(inner, path, known, false, None, "create")
    }

    /// [`Journal::capture_locked`], reading the entry through `parent` (a
    /// descriptor of the directory holding it, from the FUSE layer:
    /// [`Tree::lstat_open_born_in`]) when given.
    pub(super) fn capture_in(
        &self,
        inner: &mut Inner,
        path: &[u8],
        parent: Option<BorrowedFd<'_>>,
    ) -> Result<(), CaptureError> {
        self.capture_as(inner, path, None, false, parent, "rename")
    }

    /// [`Journal::capture_in`] of a path whose entry is about to lose this
    /// name (an unlink, or the target of a rename over it): a large file
    /// may be kept instead of copied (`keep.rs`). `by`: `remove` or
    /// `replace` (the target of a rename).
    pub(super) fn capture_leaving(
        &self,
        inner: &mut Inner,
        path: &[u8],
        parent: Option<BorrowedFd<'_>>,
        by: &'static str,
    ) -> Result<(), CaptureError> {
        self.capture_as(inner, path, None, true, parent, by)
    }

    fn capture_as(
        &self,
        inner: &mut Inner,
        path: &[u8],
        known: Option<PreImage>,
        leaving: bool,
        parent: Option<BorrowedFd<'_>>,
        by: &'static str,
    ) -> Result<(), CaptureError> {
        if path.is_empty() || self.excludes(path) {
            return Ok(());
        }
        if inner.turn.captured.contains(path) {
            // Recorded in this turn already: only an edit made behind the
            // mount since is kept (`outside.rs`). A creation (`known`)
            // found the name free.
            if known.is_none() {
                return self.keep_outside_edit(inner, path, parent, None, by);
            }
            return Ok(());
        }
        if inner.turn.ranged.contains_key(path) {
            self.keep_outside_ranged(inner, path, by)?;
            return self.materialize(inner, path);
        }
        let (pre, data, nlink, meta, kept) = match known {
            Some(pre) => (pre, None, 0, None, None),
            None => self.read_state(inner, path, leaving, parent)?,
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
        let mut entry = Entry::record(turn, path.to_vec(), pre, data).with_meta(meta);
        if let Some((id, leaving)) = kept {
            entry.op = Op::Kept { id };
            // Known as under way before the append, which may run a group
            // commit: that commit must resolve the record from the
            // lease-holding descriptor, never open the kept file (an open
            // would wait for the lease this thread holds).
            inner.leaving.insert(path.to_vec(), leaving);
            if let Err(e) = inner.append(entry) {
                // Not recorded: the file goes back to one name (dropping
                // `leaving` closes the descriptor and so the lease).
                inner.leaving.remove(path);
                self.kept.remove(id);
                return Err(e);
            }
        } else {
            inner.append(entry)?;
        }
        crate::failpoint::failpoint("capture-after-record");
        inner.turn.captured.insert(path.to_vec());
        Ok(())
    }

    /// Reads `path`'s current state from the project. A regular file's
    /// bytes are returned for an inline record when they fit in
    /// [`INLINE_MAX`], else stored as a blob file first. Also returns the
    /// link count (0 when absent) and the owner and extended attributes.
    /// With `leaving` (the entry is about to lose this name) a large file
    /// may be kept instead ([`Journal::try_keep`]): the pre-image's blob is
    /// then all zeros (pending) and the kept file's number and lease are
    /// returned too. `parent`: as for [`Journal::capture_in`].
    #[allow(clippy::type_complexity)]
    fn read_state(
        &self,
        inner: &mut Inner,
        path: &[u8],
        leaving: bool,
        parent: Option<BorrowedFd<'_>>,
    ) -> Result<
        (
            PreImage,
            Option<Vec<u8>>,
            u64,
            Option<Meta>,
            Option<(u64, super::keep::Leaving)>,
        ),
        CaptureError,
    > {
        let Some((st, file, born)) = self.tree.lstat_open_born_in(path, parent).at(path)? else {
            return Ok((PreImage::Absent, None, 0, None, None));
        };
        let nlink = st.nlink;
        if self.note_born(inner, path, born)? {
            return Ok((PreImage::Unknown, None, nlink, None, None));
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
                if leaving {
                    if let Some(kept) = self.try_keep(path, &f, &st) {
                        let pre = PreImage::File {
                            blob: [0; 32],
                            size: st.size,
                            perm: st.perm(),
                            ino: st.ino,
                        };
                        return Ok((pre, None, nlink, meta, Some(kept)));
                    }
                }
                let mut head = Vec::new();
                if st.size <= INLINE_MAX {
                    head = read_small(&mut f, st.size).at(path)?;
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
                    target: self.tree.read_link_in(path, parent).at(path)?,
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
        Ok((pre, data, nlink, meta, None))
    }
}

/// The bytes of a file the stat said holds `size` (at most [`INLINE_MAX`])
/// bytes, read from `f`'s position to its end, or past [`INLINE_MAX`] when
/// it grew since. One `read` of `size + 1` bytes answers in the common
/// case: a regular file reads short only at its end, so getting exactly
/// `size` bytes means that is all it holds (the usual end-of-file probe
/// would be a second system call). Anything else goes on reading as
/// `read_to_end` does.
fn read_small(f: &mut std::fs::File, size: u64) -> io::Result<Vec<u8>> {
    let want = size as usize + 1;
    let mut head = vec![0u8; want];
    let n = loop {
        match f.read(&mut head) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    head.truncate(n);
    if n as u64 != size {
        // Shorter or longer than the stat said: changed meanwhile, or a
        // short read; read on to the end (or past the inline limit).
        f.take(INLINE_MAX + 1 - n as u64).read_to_end(&mut head)?;
    }
    Ok(head)
}
