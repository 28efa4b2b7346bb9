//! [`Reader`]: the handles a view reads through (index, blob store,
//! project), and the resolution of a timeline's ranged records into file
//! records.
//!
//! Reading the project races with a running agent. Every function that
//! reads a path's current state re-reads the records afterwards, after
//! asking the daemon to commit the records pending in its capture log
//! ([`Reader::commit`]): capture appends a record before the mutation it
//! guards runs, so a path that has no newer record after the read was read
//! before anything changed it.

use std::collections::BTreeMap;
use std::io;

use crate::record::Turn;
use crate::record::{Hash, PreImage};
use crate::store::{BlobError, BlobStore, Index, IndexError};
use crate::tree::Dir;

use super::chain::{self, RangeError};
use super::timeline::Timeline;
use super::{check_turn, current, TurnError, Version};

/// One path's records and the saved ranges of each ranged one.
type RecordsAndRanges = (Vec<(u64, PreImage)>, Vec<Vec<crate::store::index::Piece>>);

/// Contents put together from ranged records, by BLAKE3.
pub type Resolved = std::cell::RefCell<std::collections::HashMap<Hash, Vec<u8>>>;

/// Errors from reading a view. Each names the turn or path it concerns.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The turn cannot be looked at.
    #[error(transparent)]
    Turn(#[from] TurnError),
    /// Reading the project failed.
    #[error("cannot read {} in the project: {source}", crate::paths::display(.path))]
    Project {
        /// The path's raw bytes.
        path: Vec<u8>,
        /// The cause.
        source: io::Error,
    },
    /// A file's turn-start content, kept as ranges over its later content,
    /// cannot be put together (see [`super::ranges`]).
    #[error(
        "the recorded content of {} cannot be put together from its saved ranges: {reason}",
        crate::paths::display(.path)
    )]
    Ranges {
        /// The path's raw bytes.
        path: Vec<u8>,
        /// Why.
        #[source]
        reason: RangeError,
    },
    /// A pre-image's blob is missing or corrupt.
    #[error("the recorded content of {} cannot be read: {source}", crate::paths::display(.path))]
    Blob {
        /// The path's raw bytes.
        path: Vec<u8>,
        /// The cause.
        source: BlobError,
    },
    /// The index failed or is corrupt.
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// What a view reads: the index, the blob store and the project.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    /// The project's index.
    pub index: &'a Index,
    /// Its blob store.
    pub blobs: &'a BlobStore,
    /// Confined access to the project (for states no record covers).
    pub backing: &'a Dir,
    /// Makes every capture so far visible in `index` (a running daemon
    /// commits its pending records); called before records are re-read
    /// after reading the project.
    pub commit: &'a dyn Fn(),
    /// Contents put together from ranged records (see
    /// [`Reader::timeline`]), by BLAKE3: they are in no store.
    pub resolved: &'a Resolved,
}

impl std::fmt::Debug for Reader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("index", &self.index.path())
            .field("backing", &self.backing)
            .finish_non_exhaustive()
    }
}

impl Reader<'_> {
    fn project_err(path: &[u8]) -> impl FnOnce(io::Error) -> ViewError + '_ {
        move |source| ViewError::Project {
            path: path.to_vec(),
            source,
        }
    }

    /// Checks that `turn` exists; returns it.
    ///
    /// Errors: [`ViewError::Turn`] (see [`check_turn`]) or the index.
    pub fn turn(&self, turn: u64) -> Result<Turn, ViewError> {
        Ok(check_turn(self.index, turn)??)
    }

    /// The bytes of blob `hash`: put together from ranges earlier, or from
    /// the store (checked against the hash).
    ///
    /// Errors: as [`crate::store::read_blob`].
    pub fn blob(&self, hash: &Hash) -> Result<Vec<u8>, BlobError> {
        if let Some(b) = self.resolved.borrow().get(hash) {
            return Ok(b.clone());
        }
        crate::store::read_blob(self.index, self.blobs, hash)
    }

    /// Loads every record with turn >= `from` and puts each ranged record
    /// together into a file record (its bytes kept in
    /// [`Reader::resolved`]). A ranged record that is its path's newest is
    /// laid over the project's file: that file is read first, then the
    /// daemon commits and the path's records are read again, so bytes the
    /// agent overwrote meanwhile come from their saved ranges (see the
    /// module docs).
    ///
    /// Errors: the index, a blob or the project cannot be read;
    /// [`ViewError::Ranges`] when a ranged record cannot be put together.
    pub fn timeline(&self, from: u64) -> Result<Timeline, ViewError> {
        let mut timeline = Timeline::load(self.index, from)?;
        self.resolve(&mut timeline, None, true)?;
        Ok(timeline)
    }

    /// [`Reader::timeline`] for a timeline already loaded; only for `only`
    /// when given. With `keep_bytes` false only the file records (their
    /// hashes) are kept, not the bytes: for a caller that compares states
    /// and never reads content (`opfs log`), so many turns of a huge file
    /// never sit in memory at once.
    pub fn resolve(
        &self,
        timeline: &mut Timeline,
        only: Option<&[u8]>,
        keep_bytes: bool,
    ) -> Result<(), ViewError> {
        self.resolve_with(timeline, only, keep_bytes, u64::MAX)
    }

    /// [`Reader::timeline`] in bounded memory: a path whose project file
    /// or one of whose ranged records is `stream_from` bytes or more is
    /// put together as a stream ([`chain::resolve_records_streamed`]):
    /// each version hashed as it is read, and its bytes kept in
    /// [`Reader::resolved`] only when it is shorter than `stream_from`.
    /// For a reader that needs only the hash of a big version (the
    /// export: files of 8 MiB or more are pointer files).
    ///
    /// Errors: as [`Reader::timeline`].
    pub fn timeline_bounded(&self, from: u64, stream_from: u64) -> Result<Timeline, ViewError> {
        let mut timeline = Timeline::load(self.index, from)?;
        self.resolve_with(&mut timeline, None, true, stream_from)?;
        Ok(timeline)
    }

    /// [`Reader::resolve`], a path whose project file or ranged record is
    /// `stream_from` bytes or more put together as a stream (see
    /// [`Reader::timeline_bounded`]; `u64::MAX`: every path in memory).
    ///
    /// Errors: as [`Reader::timeline`].
    pub fn resolve_with(
        &self,
        timeline: &mut Timeline,
        only: Option<&[u8]>,
        keep_bytes: bool,
        stream_from: u64,
    ) -> Result<(), ViewError> {
        let from = timeline.from;
        let ranged: Vec<Vec<u8>> = timeline
            .by_path
            .iter()
            .filter(|(p, _)| only.is_none_or(|o| o == p.as_slice()))
            .filter(|(_, recs)| {
                recs.iter()
                    .any(|(_, p)| matches!(p, PreImage::Ranged { .. }))
            })
            .map(|(p, _)| p.clone())
            .collect();
        for path in ranged {
            if stream_from != u64::MAX && self.big(timeline, &path, stream_from)? {
                self.resolve_streamed(timeline, &path, keep_bytes, stream_from)?;
                continue;
            }
            let last_ranged = matches!(
                timeline.by_path.get(&path).and_then(|r| r.last()),
                Some((_, PreImage::Ranged { .. }))
            );
            let current = if last_ranged {
                let v =
                    current::read_version(self.backing, &path).map_err(Self::project_err(&path))?;
                (self.commit)();
                let recs = self.index.records_of_path(&path, from)?;
                timeline.by_path.insert(path.clone(), recs);
                v.bytes
            } else {
                None
            };
            let mut recs = timeline.by_path.remove(&path).unwrap_or_default();
            self.resolve_path(&path, &mut recs, current.as_deref(), keep_bytes)?;
            timeline.by_path.insert(path, recs);
        }
        Ok(())
    }

    /// True when one of `path`'s ranged records in `timeline`, or the
    /// project's file there, is `at_least` bytes or more.
    fn big(&self, timeline: &Timeline, path: &[u8], at_least: u64) -> Result<bool, ViewError> {
        let recs = timeline.by_path.get(path).map(Vec::as_slice).unwrap_or(&[]);
        if recs
            .iter()
            .any(|(_, p)| matches!(p, PreImage::Ranged { size, .. } if *size >= at_least))
        {
            return Ok(true);
        }
        let st = self.backing.lstat(path).map_err(Self::project_err(path))?;
        Ok(st.is_some_and(|st| st.file_type() == libc::S_IFREG && st.size >= at_least))
    }

    /// The project's regular file at `path`, open for reading (`None`:
    /// no regular file there).
    fn open_current(&self, path: &[u8]) -> Result<Option<std::fs::File>, ViewError> {
        let current::Current::File { .. } =
            current::read(self.backing, path).map_err(Self::project_err(path))?
        else {
            return Ok(None);
        };
        let f = match self
            .backing
            .open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)
        {
            Ok(f) => f,
            Err(e) if crate::tree::is_not_found(&e) => return Ok(None),
            Err(e) => return Err(Self::project_err(path)(e)),
        };
        let regular = f
            .metadata()
            .map_err(Self::project_err(path))?
            .file_type()
            .is_file();
        Ok(regular.then_some(f))
    }

    /// `path`'s records from `from` on, with the saved ranges of each
    /// ranged one: what must not change while the project's file under
    /// them is read.
    fn records_and_ranges(&self, path: &[u8], from: u64) -> Result<RecordsAndRanges, ViewError> {
        let recs = self.index.records_of_path(path, from)?;
        let mut pieces = Vec::new();
        for (t, p) in &recs {
            if matches!(p, PreImage::Ranged { .. }) {
                pieces.push(self.index.ranges_of(*t, path)?);
            }
        }
        Ok((recs, pieces))
    }

    /// Tries of [`Reader::resolve_streamed`] that read the project's file
    /// in place before it reads a copy of it.
    const IN_PLACE_TRIES: usize = 3;

    /// Puts `path`'s ranged records in `timeline` together as streams
    /// ([`chain::resolve_records_streamed`]). When its newest record is
    /// ranged, the chain is laid over the project's file, read in place
    /// while the agent may write to it: the daemon commits and the path's
    /// records and saved ranges are read before and after; the same
    /// before and after means no write through the mount was captured
    /// meanwhile (capture appends its record before the write runs), so
    /// every byte read was as the records say. Otherwise it tries again;
    /// after [`Reader::IN_PLACE_TRIES`] tries it copies the file into the
    /// blob store's temporary folder (an unnamed file, streamed), then
    /// commits and reads the records, and lays them over the copy: as
    /// [`Reader::resolve`] does over the bytes it read, on disk instead of
    /// in memory.
    fn resolve_streamed(
        &self,
        timeline: &mut Timeline,
        path: &[u8],
        keep_bytes: bool,
        keep_below: u64,
    ) -> Result<(), ViewError> {
        let from = timeline.from;
        let mut keep = |hash: Hash, bytes: &[u8]| {
            if keep_bytes {
                self.resolved.borrow_mut().insert(hash, bytes.to_vec());
            }
        };
        let blob = |h: &Hash| -> Result<chain::Bottom, BlobError> {
            if let Some(b) = self.resolved.borrow().get(h) {
                return Ok(chain::Bottom::Bytes(b.clone()));
            }
            chain::Bottom::of_blob(self.index, self.blobs, h)
        };
        let last_ranged = matches!(
            timeline.by_path.get(path).and_then(|r| r.last()),
            Some((_, PreImage::Ranged { .. }))
        );
        let mut recs = match last_ranged {
            false => timeline.by_path.remove(path).unwrap_or_default(),
            true => {
                let mut tries = 0;
                loop {
                    tries += 1;
                    let file = self.open_current(path)?;
                    let file = match file {
                        Some(f) if tries > Self::IN_PLACE_TRIES => Some(self.copy_of(path, f)?),
                        f => f,
                    };
                    (self.commit)();
                    let before = self.records_and_ranges(path, from)?;
                    let mut recs = before.0.clone();
                    let r = chain::resolve_records_streamed(
                        self.index,
                        self.blobs,
                        path,
                        &mut recs,
                        file.as_ref(),
                        &blob,
                        keep_below,
                        &mut keep,
                    );
                    if tries <= Self::IN_PLACE_TRIES {
                        (self.commit)();
                        if self.records_and_ranges(path, from)? != before {
                            continue;
                        }
                    }
                    r.map_err(|e| Self::range_err(path, e))?;
                    timeline.by_path.insert(path.to_vec(), recs);
                    return Ok(());
                }
            }
        };
        chain::resolve_records_streamed(
            self.index, self.blobs, path, &mut recs, None, &blob, keep_below, &mut keep,
        )
        .map_err(|e| Self::range_err(path, e))?;
        timeline.by_path.insert(path.to_vec(), recs);
        Ok(())
    }

    /// A copy of `file` (the project's file at `path`) in an unnamed file
    /// of the blob store's temporary folder, streamed.
    fn copy_of(&self, path: &[u8], mut file: std::fs::File) -> Result<std::fs::File, ViewError> {
        let dir = self.blobs.tmp_dir();
        let blob_err = |source: io::Error| ViewError::Blob {
            path: path.to_vec(),
            source: BlobError::Io {
                path: dir.clone(),
                source,
            },
        };
        let mut copy = tempfile::tempfile_in(&dir).map_err(blob_err)?;
        io::copy(&mut file, &mut copy).map_err(Self::project_err(path))?;
        Ok(copy)
    }

    fn range_err(path: &[u8], e: RangeError) -> ViewError {
        match e {
            RangeError::Blob(source) => ViewError::Blob {
                path: path.to_vec(),
                source,
            },
            reason => ViewError::Ranges {
                path: path.to_vec(),
                reason,
            },
        }
    }

    /// Replaces each ranged record in `recs` (one path's records, oldest
    /// first) by the file record it stands for, newest first: each is laid
    /// over the content of the record after it, or over `current` (the
    /// project's file, read before the records were) for the newest.
    /// `keep_bytes`: keep each version's bytes in [`Reader::resolved`].
    pub(crate) fn resolve_path(
        &self,
        path: &[u8],
        recs: &mut [(u64, PreImage)],
        current: Option<&[u8]>,
        keep_bytes: bool,
    ) -> Result<(), ViewError> {
        let mut keep = |hash: Hash, bytes: &[u8]| {
            if keep_bytes {
                self.resolved.borrow_mut().insert(hash, bytes.to_vec());
            }
        };
        chain::resolve_records(
            self.index,
            self.blobs,
            path,
            recs,
            current,
            &|h| self.blob(h),
            &mut keep,
        )
        .map_err(|e| match e {
            RangeError::Blob(source) => ViewError::Blob {
                path: path.to_vec(),
                source,
            },
            reason => ViewError::Ranges {
                path: path.to_vec(),
                reason,
            },
        })
    }

    /// The bytes of a file or symlink version: a recorded file's blob
    /// (checked against its hash), a file read from the project, or a
    /// symlink's target. Everything else has no bytes (`None`).
    pub fn content(&self, path: &[u8], v: &Version) -> Result<Option<Vec<u8>>, ViewError> {
        match (&v.state, &v.bytes) {
            (PreImage::File { .. }, Some(b)) => Ok(Some(b.clone())),
            (PreImage::File { blob, .. }, None) => {
                self.blob(blob).map(Some).map_err(|source| ViewError::Blob {
                    path: path.to_vec(),
                    source,
                })
            }
            (PreImage::Symlink { target }, _) => Ok(Some(target.clone())),
            _ => Ok(None),
        }
    }

    /// The state of every path in `wanted` at the start of turn `turn`:
    /// from the timeline (which must hold every record with turn >= `turn`)
    /// where a record covers it, else read from the project. Paths read
    /// from the project are checked against records made meanwhile (see the
    /// module docs), so a concurrent agent cannot leak a later state in.
    pub fn states_at(
        &self,
        timeline: &Timeline,
        wanted: &[Vec<u8>],
        turn: u64,
    ) -> Result<BTreeMap<Vec<u8>, Version>, ViewError> {
        let mut out = BTreeMap::new();
        let mut read = Vec::new();
        for p in wanted {
            match timeline.state_at(p, turn) {
                Some(pre) => {
                    out.insert(p.clone(), Version::recorded(pre.clone()));
                }
                None => {
                    let v = current::read_version(self.backing, p).map_err(Self::project_err(p))?;
                    out.insert(p.clone(), v);
                    read.push(p.clone());
                }
            }
        }
        if !read.is_empty() {
            (self.commit)();
            let newer = Timeline::load(self.index, turn)?;
            for p in read {
                let Some(recs) = newer.by_path.get(&p) else {
                    continue;
                };
                // A ranged record made meanwhile is laid over the bytes
                // read above (its saved ranges hold what was overwritten).
                let mut recs = recs.clone();
                let current = out.get(&p).and_then(|v| v.bytes.clone());
                self.resolve_path(&p, &mut recs, current.as_deref(), true)?;
                if let Some((_, pre)) = recs.iter().find(|(t, _)| *t >= turn) {
                    out.insert(p, Version::recorded(pre.clone()));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::log::Op;
    use crate::store::Entry;
    use std::cell::{Cell, RefCell};
    use std::os::unix::fs::FileExt;

    fn piece(offset: u64, bytes: &[u8]) -> Entry {
        Entry {
            turn: 1,
            path: b"big".to_vec(),
            pre: PreImage::File {
                blob: *blake3::hash(bytes).as_bytes(),
                size: bytes.len() as u64,
                perm: 0,
                ino: 0,
            },
            data: Some(bytes.to_vec()),
            op: Op::Range { offset },
            meta: None,
        }
    }

    /// The agent writes into the file under a ranged record while the
    /// export reads it in place: right after the commits `writes_at` lists
    /// (each group commit the reader asks for, counted from 1), a write is
    /// captured (its turn-start bytes saved as a piece in the log, in the
    /// index at the next commit) and then made.
    /// Whatever it overlaps, the version put together as a stream is the
    /// turn-start content, read in place again or, when the file keeps
    /// changing, over a copy.
    fn turn_start_survives_writes_at(writes_at: &[u32]) {
        let dir = tempfile::tempdir().expect("tempdir");
        let proj = dir.path().join("proj");
        std::fs::create_dir(&proj).expect("mkdir");
        let ix_path = dir.path().join("index.sqlite");
        let mut writer = Index::open(&ix_path, false).expect("index");
        let blobs = BlobStore::open(&dir.path().join("blobs"), false).expect("blobs");
        let start: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        // Turn 1 began with `start`; bytes 100..120 were overwritten.
        let mut now = start.clone();
        now[100..120].fill(b'x');
        std::fs::write(proj.join("big"), &now).expect("write");
        let size = start.len() as u64;
        writer
            .apply(
                &[
                    Entry::record(
                        1,
                        b"big".to_vec(),
                        PreImage::Ranged {
                            size,
                            perm: 0o644,
                            ino: 0,
                        },
                        None,
                    ),
                    piece(100, &start[100..120]),
                ],
                &blobs,
            )
            .expect("apply");
        let writer = RefCell::new(writer);
        let calls = Cell::new(0u32);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(proj.join("big"))
            .expect("open");
        // Captured, not committed yet: in the daemon's log.
        let pending = RefCell::new(Vec::new());
        let commit = || {
            let n = calls.get() + 1;
            calls.set(n);
            let done: Vec<Entry> = pending.borrow_mut().drain(..).collect();
            writer.borrow_mut().apply(&done, &blobs).expect("commit");
            if !writes_at.contains(&n) {
                return;
            }
            // Right after this commit: captured (its piece saved in the
            // log), then written.
            let at = 1000 + 50 * u64::from(n);
            let mut old = vec![0u8; 10];
            file.read_exact_at(&mut old, at).expect("read");
            pending.borrow_mut().push(piece(at, &old));
            file.write_all_at(b"ZZZZZZZZZZ", at).expect("write");
        };
        let index = Index::open(&ix_path, false).expect("reader's index");
        let backing = Dir::open(&proj).expect("dir");
        let resolved = Resolved::default();
        let reader = Reader {
            index: &index,
            blobs: &blobs,
            backing: &backing,
            commit: &commit,
            resolved: &resolved,
        };
        let timeline = reader.timeline_bounded(1, 16).expect("timeline");
        assert_eq!(
            timeline.state_at(b"big", 1),
            Some(&PreImage::File {
                blob: *blake3::hash(&start).as_bytes(),
                size,
                perm: 0o644,
                ino: 0,
            }),
            "commits {writes_at:?}"
        );
        // Nothing big was kept in memory.
        assert!(resolved.borrow().is_empty());
    }

    #[test]
    fn a_write_during_the_in_place_read_makes_it_read_again() {
        turn_start_survives_writes_at(&[1]);
    }

    #[test]
    fn a_file_written_during_every_read_is_put_together_over_a_copy() {
        turn_start_survives_writes_at(&[1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
