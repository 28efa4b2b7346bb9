//! Files captured as ranges: a large file written in place keeps only the
//! turn-start bytes of the ranges it overwrites (`docs/ranges.md`), until a
//! mutation that would take the file away makes the record whole again.

use std::io;

use super::{CaptureError, Inner, Journal};
use crate::paths::PathContext;
use crate::record::PreImage;
use crate::store::log::Op;
use crate::store::{Entry, INLINE_MAX};
use crate::tree::Tree;
use crate::view::chain;

/// A saved range is stored in pieces of at most this many bytes, so
/// putting a file back together never holds more than one piece in memory.
const PIECE_MAX: u64 = 4 << 20;

/// What the open turn knows of a file it captures as ranges.
pub(super) struct RangeState {
    /// The file, opened at its first capture (`None` after a restart until
    /// the next write needs it).
    pub(super) file: Option<std::fs::File>,
    /// Its length when the turn began.
    pub(super) size: u64,
    /// Byte ranges below `size` whose turn-start bytes are saved.
    pub(super) covered: crate::view::ranges::Intervals,
}

impl<T: Tree> Journal<T> {
    /// Opens the file the open turn's ranges of `path` are laid over again
    /// (after a restart, the turn's first handle is gone).
    ///
    /// Errors: [`CaptureError::Read`] when it cannot be read or is no
    /// longer a regular file.
    fn reopen(&self, path: &[u8]) -> Result<std::fs::File, CaptureError> {
        match self.tree.lstat_open(path).at(path)? {
            Some((st, Some(f))) if st.file_type() == libc::S_IFREG => Ok(f),
            _ => Err(CaptureError::read(
                path,
                io::Error::other(
                    "the file captured as ranges in this turn is no longer a regular file",
                ),
            )),
        }
    }

    /// [`Journal::keep_outside_edit`] for a file the open turn captures as
    /// ranges: compared through the descriptor the ranges are laid over
    /// (an `fstat`), when the journal holds it.
    pub(super) fn keep_outside_ranged(
        &self,
        inner: &mut Inner,
        path: &[u8],
        by: &'static str,
    ) -> Result<(), CaptureError> {
        // Only when there is something to compare with: no `fstat` while
        // the mount holds the file open for writing.
        if matches!(inner.fingerprints.get(path), Some(None)) {
            return Ok(());
        }
        let now = inner
            .turn
            .ranged
            .get(path)
            .and_then(|s| s.file.as_ref())
            .and_then(|f| f.metadata().ok())
            .map(|m| Some(crate::record::Stat::from_metadata(&m)));
        self.keep_outside_edit(inner, path, None, now, by)
    }

    /// Records the current bytes of `ranges` (`(offset, len)`) of the file at
    /// `path` before a rewind writes them back in place: as ranges of the
    /// open turn when the file qualifies (a regular file of at least the
    /// range threshold with one link), else its whole state.
    pub fn capture_ranges(&self, path: &[u8], ranges: &[(u64, u64)]) -> Result<(), CaptureError> {
        let mut inner = self.lock();
        for &(offset, len) in ranges {
            self.capture_range(&mut inner, path, offset, len)?;
        }
        Ok(())
    }

    /// Saves the turn-start bytes of `[offset, offset + len)` of the file at
    /// `path` that the open turn has not saved yet, before the mount
    /// overwrites them (`len` may run past the end of the file: a
    /// truncation). At the file's first range in the turn, records it as
    /// [`PreImage::Ranged`] when it is a regular file of at least the range
    /// threshold with one link; anything else is captured whole. Cost: one
    /// read and one log record per piece of new bytes; nothing for bytes
    /// already saved or past the turn-start length.
    pub(super) fn capture_range(
        &self,
        inner: &mut Inner,
        path: &[u8],
        offset: u64,
        len: u64,
    ) -> Result<(), CaptureError> {
        if path.is_empty() || self.excludes(path) {
            return Ok(());
        }
        if inner.turn.captured.contains(path) {
            return self.keep_outside_edit(inner, path, None, None, "write");
        }
        if inner.turn.ranged.contains_key(path) {
            self.keep_outside_ranged(inner, path, "write")?;
        }
        // The common case of a file written again and again: nothing new
        // to save, no allocation.
        if let Some(state) = inner.turn.ranged.get(path) {
            let end = offset.saturating_add(len).min(state.size);
            if state.covered.covers(offset, end) {
                return Ok(());
            }
        }
        let turn = inner.turn.number;
        let mut state = match inner.turn.ranged.remove(path) {
            Some(state) => state,
            None => {
                let Some((st, file)) = self.tree.lstat_open(path).at(path)? else {
                    return self.capture_known(inner, path, Some(PreImage::Absent));
                };
                if self.note_birth(inner, path, file.as_ref())? {
                    return self.capture_known(inner, path, Some(PreImage::Unknown));
                }
                match file {
                    Some(file)
                        if st.file_type() == libc::S_IFREG
                            && st.nlink == 1
                            && st.size >= self.range_min =>
                    {
                        let pre = PreImage::Ranged {
                            size: st.size,
                            perm: st.perm(),
                            ino: st.ino,
                        };
                        let meta = self.tree.meta(path, &st, Some(&file)).at(path)?;
                        inner.append(
                            Entry::record(turn, path.to_vec(), pre, None).with_meta(meta),
                        )?;
                        RangeState {
                            file: Some(file),
                            size: st.size,
                            covered: crate::view::ranges::Intervals::new(),
                        }
                    }
                    _ => return self.capture_known(inner, path, None),
                }
            }
        };
        let saved = self.save_ranges(inner, path, &mut state, offset, len);
        inner.turn.ranged.insert(path.to_vec(), state);
        saved
    }

    /// The part of [`Journal::capture_range`] after the record: reads and
    /// logs the unsaved bytes in pieces of at most [`PIECE_MAX`].
    fn save_ranges(
        &self,
        inner: &mut Inner,
        path: &[u8],
        state: &mut RangeState,
        offset: u64,
        len: u64,
    ) -> Result<(), CaptureError> {
        let end = offset.saturating_add(len).min(state.size);
        if offset >= end {
            return Ok(());
        }
        let gaps = state.covered.gaps(offset, end);
        if gaps.is_empty() {
            return Ok(());
        }
        if state.file.is_none() {
            // After a restart: the file the turn's record was made over.
            state.file = Some(self.reopen(path)?);
        }
        let turn = inner.turn.number;
        for (a, b) in gaps {
            let mut at = a;
            while at < b {
                let n = (b - at).min(PIECE_MAX);
                let mut buf = vec![0u8; n as usize];
                if let Some(f) = &state.file {
                    use std::os::unix::fs::FileExt;
                    f.read_exact_at(&mut buf, at)
                        .map_err(|e| {
                            io::Error::new(
                                e.kind(),
                                format!(
                                    "reading the {n} bytes at {at} before they are overwritten: {e}"
                                ),
                            )
                        })
                        .at(path)?;
                }
                let blob = *blake3::hash(&buf).as_bytes();
                let data = if n <= INLINE_MAX {
                    Some(buf)
                } else {
                    self.blobs.put(&mut buf.as_slice(), n).at(path)?;
                    None
                };
                crate::failpoint::failpoint("capture-after-blob");
                let piece = PreImage::File {
                    blob,
                    size: n,
                    perm: 0,
                    ino: 0,
                };
                inner.append(Entry {
                    turn,
                    path: path.to_vec(),
                    pre: piece,
                    data,
                    op: Op::Range { offset: at },
                    meta: None,
                })?;
                crate::failpoint::failpoint("capture-after-record");
                state.covered.insert(at, at + n);
                at += n;
            }
        }
        Ok(())
    }

    /// Replaces the open turn's ranged record of `path` by a whole one: its
    /// turn-start bytes put together from the file and the saved ranges,
    /// before a mutation (rename, removal, truncating open) that would take
    /// the file the ranges are laid over away. Cost: one read of the file.
    pub(super) fn materialize(&self, inner: &mut Inner, path: &[u8]) -> Result<(), CaptureError> {
        let Some(state) = inner.turn.ranged.remove(path) else {
            return Ok(());
        };
        match self.materialize_state(inner, path, &state) {
            Ok(()) => {
                inner.turn.captured.insert(path.to_vec());
                Ok(())
            }
            Err(e) => {
                inner.turn.ranged.insert(path.to_vec(), state);
                Err(e)
            }
        }
    }

    fn materialize_state(
        &self,
        inner: &mut Inner,
        path: &[u8],
        state: &RangeState,
    ) -> Result<(), CaptureError> {
        // The pieces are read back from the index.
        inner.apply_pending().at(path)?;
        let turn = inner.turn.number;
        let Some(PreImage::Ranged { size, perm, ino }) =
            inner.index.preimage(turn, path).at(path)?
        else {
            // Another record came first (before a restart): it is the
            // pre-image, and the ranges were never needed.
            return Ok(());
        };
        // Changed behind the mount since the turn saved its first range
        // (kept by `keep_outside_ranged`, always before this): the bytes
        // that edit changed were never saved, so laying the ranges over
        // the file would give the edit's bytes as the turn's start. What
        // the path held then is unknown (`docs/ranges.md`, "Limits").
        if inner
            .index
            .outside_edit(turn, path, Some(1))
            .at(path)?
            .is_some()
        {
            return inner.append(Entry {
                turn,
                path: path.to_vec(),
                pre: PreImage::Unknown,
                data: None,
                op: Op::Replace,
                meta: None,
            });
        }
        let reopened;
        let file = match &state.file {
            Some(f) => f,
            None => {
                reopened = self.reopen(path)?;
                &reopened
            }
        };
        let laid = chain::lay_over(
            &inner.index,
            &self.blobs,
            path,
            turn,
            size,
            chain::Base::File(file),
            chain::Keep::InlineUpTo(INLINE_MAX),
        )
        .at(path)?;
        let (blob, data) = (laid.blob, laid.bytes);
        let meta = inner.index.meta_of(turn, path).at(path)?;
        let pre = PreImage::File {
            blob,
            size,
            perm,
            ino,
        };
        inner.append(Entry {
            turn,
            path: path.to_vec(),
            pre,
            data,
            op: Op::Replace,
            meta,
        })
    }
}
