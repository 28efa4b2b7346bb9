//! Range pre-images: putting a large file's turn-start bytes back together
//! from the ranges a turn saved and the file's later content.
//!
//! A [`crate::record::PreImage::Ranged`] record of path P in turn T says: when T began, P
//! was a regular file of `size` bytes; during T the mount saved the old
//! bytes of every range it was about to overwrite (the [`Piece`]s); every
//! other byte below `size` did not change during T. So P's content at the
//! start of T is its content at the start of P's *next* recorded state (the
//! next record of P in a later turn, or, with none, the project's file as
//! the mount left it), with the saved pieces laid over it and the length
//! set to `size`. Where two pieces overlap (a daemon restarted within the
//! turn), the earlier one holds the turn-start bytes. The design and its
//! limits are in `docs/ranges.md`.
//!
//! Costs: capture is proportional to the bytes overwritten; reading a
//! ranged pre-image back (rewind, diff, export) is proportional to the file.

use std::io::{self, Read};

use crate::record::Hash;
use crate::store::index::Piece;
use crate::store::{BlobError, BlobStore, Index};

/// One run of turn-start bytes taken from a piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// The piece's blob.
    pub blob: Hash,
    /// Where the run starts inside the piece.
    pub skip: u64,
    /// Where the piece's bytes are in a range pack (`None`: blob `blob`).
    pub at: Option<crate::store::index::Packed>,
}

/// The runs a chain of ranged records lays over the file below them, for
/// an in-place restore: `records` oldest first, each with its turn-start
/// length and its pieces in saving order. A byte takes the value of the
/// oldest record that saved it (a later record's pieces only count below
/// its own length); bytes no record saved keep the file's value. Cut to
/// the oldest record's length.
pub fn layout_chain(records: &[(u64, Vec<Piece>)]) -> Vec<Segment> {
    let Some((target, _)) = records.first() else {
        return Vec::new();
    };
    let mut all = Vec::new();
    for (size, pieces) in records {
        for p in pieces {
            if p.offset < *size {
                all.push(Piece {
                    len: p.len.min(size - p.offset),
                    ..*p
                });
            }
        }
    }
    layout(&all, *target)
}

/// The disjoint runs the pieces contribute below `size`, sorted by offset;
/// where pieces overlap the earlier one (first in `pieces`) wins.
fn layout(pieces: &[Piece], size: u64) -> Vec<Segment> {
    // Covered intervals so far.
    let mut covered = Intervals::new();
    let mut out = Vec::new();
    for p in pieces {
        let start = p.offset.min(size);
        let end = p.offset.saturating_add(p.len).min(size);
        for (a, b) in covered.gaps(start, end) {
            out.push(Segment {
                offset: a,
                len: b - a,
                blob: p.blob,
                skip: a - p.offset,
                at: p.at,
            });
        }
        covered.insert(start, end);
    }
    out.sort_by_key(|s| s.offset);
    out
}

/// A set of byte offsets kept as disjoint, non-adjacent half-open
/// intervals (start → end). Insertion and the gaps of a range cost
/// O(log n + k) for k intervals touched, so a turn that saves a million
/// scattered pages stays linear.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intervals(std::collections::BTreeMap<u64, u64>);

impl Intervals {
    /// An empty set.
    pub fn new() -> Intervals {
        Intervals::default()
    }

    /// The parts of `[start, end)` not in the set, sorted.
    pub fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = start;
        if let Some((_, &e)) = self.0.range(..=start).next_back() {
            at = at.max(e);
        }
        if at >= end {
            return out;
        }
        for (&a, &b) in self.0.range(at..end) {
            if a > at {
                out.push((at, a));
            }
            at = at.max(b);
            if at >= end {
                return out;
            }
        }
        if at < end {
            out.push((at, end));
        }
        out
    }

    /// True when `[start, end)` is wholly in the set.
    pub fn covers(&self, start: u64, end: u64) -> bool {
        start >= end || self.gaps(start, end).is_empty()
    }

    /// Adds `[start, end)`, merging what it overlaps or touches.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut a, mut b) = (start, end);
        if let Some((&s, &e)) = self.0.range(..=a).next_back() {
            if e >= a {
                a = s;
                b = b.max(e);
            }
        }
        let touched: Vec<u64> = self.0.range(a..=b).map(|(&s, _)| s).collect();
        for s in touched {
            if let Some(e) = self.0.remove(&s) {
                b = b.max(e);
            }
        }
        self.0.insert(a, b);
    }

    /// The intervals, sorted.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().map(|(&a, &b)| (a, b))
    }
}

/// Reads `buf.len()` bytes (or fewer at its end) of the base at an offset.
pub type ReadAt<'a> = dyn FnMut(u64, &mut [u8]) -> io::Result<usize> + 'a;

/// The content under a ranged record, read at any offset: the base's
/// bytes (the content of the path's next state, itself possibly a
/// [`Layer`]) with the pieces laid over them, `size` bytes long. Layers
/// stack: a chain of ranged records is read as one layer per record over
/// the file below the newest, one piece of each in memory at a time, so
/// putting any version together costs memory bounded by the piece size
/// ([`Patched`] reads one from start to end).
pub struct Layer<'a> {
    base: Box<ReadAt<'a>>,
    index: &'a Index,
    blobs: &'a BlobStore,
    segments: Vec<Segment>,
    size: u64,
    loaded: Option<(Hash, Vec<u8>)>,
}

impl std::fmt::Debug for Layer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layer")
            .field("size", &self.size)
            .field("segments", &self.segments.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Layer<'a> {
    /// The turn-start content of a ranged record of `size` bytes whose
    /// saved ranges are `pieces` (in saving order), over `base`.
    pub fn new(
        base: Box<ReadAt<'a>>,
        index: &'a Index,
        blobs: &'a BlobStore,
        pieces: &[Piece],
        size: u64,
    ) -> Layer<'a> {
        Layer {
            base,
            index,
            blobs,
            segments: layout(pieces, size),
            size,
            loaded: None,
        }
    }

    /// Its length in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn piece(&mut self, blob: &Hash, at: Option<crate::store::index::Packed>) -> io::Result<&[u8]> {
        if self.loaded.as_ref().map(|(h, _)| h) != Some(blob) {
            let data = crate::store::read_piece(self.index, self.blobs, blob, at)
                .map_err(|e: BlobError| io::Error::other(format!("a saved range: {e}")))?;
            self.loaded = Some((*blob, data));
        }
        Ok(self
            .loaded
            .as_ref()
            .map(|(_, d)| d.as_slice())
            .unwrap_or(&[]))
    }

    /// Reads up to `buf.len()` bytes at `at`: 0 at or past the end only.
    ///
    /// Errors: a piece is missing or corrupt, or shorter than its record;
    /// the base ends before bytes no piece holds
    /// ([`io::ErrorKind::InvalidData`]); the base cannot be read.
    pub fn read_at(&mut self, at: u64, buf: &mut [u8]) -> io::Result<usize> {
        if at >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let i = self.segments.partition_point(|s| s.offset + s.len <= at);
        match self.segments.get(i).copied() {
            Some(s) if s.offset <= at => {
                let from = (s.skip + (at - s.offset)) as usize;
                let want = ((s.offset + s.len - at) as usize).min(buf.len());
                let data = self.piece(&s.blob, s.at)?;
                let src = data.get(from..from + want).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a saved range is shorter than its record",
                    )
                })?;
                buf[..want].copy_from_slice(src);
                Ok(want)
            }
            other => {
                let bound = other.map_or(self.size, |s| s.offset);
                let want = ((bound - at) as usize).min(buf.len());
                let n = (self.base)(at, &mut buf[..want])?;
                if n == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "the later content ends at byte {at} but the turn-start file had {} bytes there and no saved range covers them",
                            self.size
                        ),
                    ));
                }
                Ok(n)
            }
        }
    }

    /// The layer as a base for the layer of the record before it.
    pub fn into_base(mut self) -> Box<ReadAt<'a>> {
        Box::new(move |at, buf| self.read_at(at, buf))
    }
}

/// `size` bytes read from start to end out of a [`ReadAt`] (a file, or a
/// stack of [`Layer`]s): what a hasher or an uploader consumes. A source
/// that ends early is an error ([`io::ErrorKind::UnexpectedEof`]), never
/// a short stream.
pub struct Sequential<'a> {
    src: Box<ReadAt<'a>>,
    pos: u64,
    size: u64,
}

impl std::fmt::Debug for Sequential<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequential")
            .field("pos", &self.pos)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl<'a> Sequential<'a> {
    /// The first `size` bytes of `src`.
    pub fn new(src: Box<ReadAt<'a>>, size: u64) -> Sequential<'a> {
        Sequential { src, pos: 0, size }
    }
}

impl Read for Sequential<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let want = usize::try_from(self.size - self.pos)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = (self.src)(self.pos, &mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the content ends at byte {} of {}", self.pos, self.size),
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// The content under a ranged record, as a stream: one [`Layer`] read
/// from start to end.
pub struct Patched<'a>(Sequential<'a>);

impl std::fmt::Debug for Patched<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<'a> Patched<'a> {
    /// The turn-start content of a ranged record of `size` bytes whose
    /// saved ranges are `pieces` (in saving order), over `base`.
    pub fn new(
        base: Box<ReadAt<'a>>,
        index: &'a Index,
        blobs: &'a BlobStore,
        pieces: &[Piece],
        size: u64,
    ) -> Patched<'a> {
        let layer = Layer::new(base, index, blobs, pieces, size);
        Patched(Sequential::new(layer.into_base(), size))
    }
}

impl Read for Patched<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

/// The bytes read in one call while hashing a stream.
pub const CHUNK: usize = 1 << 20;

/// Reads `src` to its end in [`CHUNK`]s: its BLAKE3, its length, and its
/// bytes when it is shorter than `keep_below` (`None` otherwise: nothing
/// more than a chunk is held, whatever the length).
///
/// Errors: `src` failed.
pub fn hash_stream(
    src: &mut dyn Read,
    keep_below: u64,
) -> io::Result<(Hash, u64, Option<Vec<u8>>)> {
    let mut hasher = blake3::Hasher::new();
    let mut kept = Some(Vec::new());
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        total += n as u64;
        if total >= keep_below {
            kept = None;
        } else if let Some(k) = kept.as_mut() {
            k.extend_from_slice(&buf[..n]);
        }
    }
    Ok((
        *hasher.finalize().as_bytes(),
        total,
        kept.filter(|_| total < keep_below),
    ))
}

/// Reads `bytes` at `at` into `buf`: the count copied, 0 past the end.
fn read_bytes_at(bytes: &[u8], at: u64, buf: &mut [u8]) -> io::Result<usize> {
    let at = usize::try_from(at).unwrap_or(usize::MAX);
    let Some(rest) = bytes.get(at..) else {
        return Ok(0);
    };
    let n = rest.len().min(buf.len());
    buf[..n].copy_from_slice(&rest[..n]);
    Ok(n)
}

/// `pread(2)` of `file` at `at` into `buf`, again when interrupted.
fn pread_at(file: &std::fs::File, at: u64, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    loop {
        match file.read_at(buf, at) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// A base read from memory.
pub fn bytes_base(bytes: &[u8]) -> Box<ReadAt<'_>> {
    Box::new(move |at, buf| read_bytes_at(bytes, at, buf))
}

/// A base read from an open file with `pread(2)`.
pub fn file_base(file: &std::fs::File) -> Box<ReadAt<'_>> {
    Box::new(move |at, buf| pread_at(file, at, buf))
}

/// A base read from a file it owns with `pread(2)`.
pub fn owned_file_base<'a>(file: std::fs::File) -> Box<ReadAt<'a>> {
    Box::new(move |at, buf| pread_at(&file, at, buf))
}

/// A base read from bytes it owns.
pub fn owned_bytes_base<'a>(bytes: Vec<u8>) -> Box<ReadAt<'a>> {
    Box::new(move |at, buf| read_bytes_at(&bytes, at, buf))
}

/// Puts the turn-start content of `path`'s ranged record of `size` bytes in
/// `turn` together in memory over `base`.
///
/// Errors: a piece is missing or corrupt, or the base is shorter than the
/// uncovered bytes need (it is not the content the record was made over).
pub fn patch_in_memory(
    index: &Index,
    blobs: &BlobStore,
    turn: u64,
    path: &[u8],
    size: u64,
    base: &[u8],
) -> io::Result<Vec<u8>> {
    let pieces = index
        .ranges_of(turn, path)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut out = Vec::with_capacity(size as usize);
    Patched::new(bytes_base(base), index, blobs, &pieces, size).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(offset: u64, bytes: &[u8]) -> (Piece, Vec<u8>) {
        (
            Piece {
                offset,
                len: bytes.len() as u64,
                blob: *blake3::hash(bytes).as_bytes(),
                at: None,
            },
            bytes.to_vec(),
        )
    }

    #[test]
    fn gaps_and_insert_keep_intervals_disjoint() {
        let mut c = Intervals::new();
        c.insert(10, 20);
        c.insert(30, 40);
        assert_eq!(c.gaps(0, 50), vec![(0, 10), (20, 30), (40, 50)]);
        assert_eq!(c.gaps(12, 18), vec![]);
        assert_eq!(c.gaps(15, 35), vec![(20, 30)]);
        assert_eq!(c.gaps(40, 45), vec![(40, 45)]);
        assert!(c.covers(30, 40) && !c.covers(29, 31));
        c.insert(20, 30);
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![(10, 40)]);
        c.insert(0, 5);
        c.insert(45, 50);
        c.insert(4, 46);
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![(0, 50)]);
    }

    proptest::proptest! {
        /// The interval set agrees with a bitmap of the bytes inserted.
        #[test]
        fn intervals_agree_with_a_bitmap(
            ops in proptest::collection::vec((0u64..200, 0u64..40), 0..60),
            q in (0u64..200, 0u64..240),
        ) {
            let mut set = Intervals::new();
            let mut bits = [false; 256];
            for (a, n) in ops {
                set.insert(a, a + n);
                for b in &mut bits[a as usize..(a + n) as usize] {
                    *b = true;
                }
            }
            // Disjoint, sorted, never adjacent.
            let v: Vec<_> = set.iter().collect();
            for w in v.windows(2) {
                proptest::prop_assert!(w[0].1 < w[1].0);
            }
            let (start, len) = q;
            let end = (start + len).min(256);
            let mut want = Vec::new();
            let mut at = start;
            while at < end {
                if bits[at as usize] {
                    at += 1;
                    continue;
                }
                let s = at;
                while at < end && !bits[at as usize] {
                    at += 1;
                }
                want.push((s, at));
            }
            proptest::prop_assert_eq!(set.gaps(start, end), want);
        }
    }

    #[test]
    fn earlier_piece_wins_and_size_cuts_or_extends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let index = Index::open(&dir.path().join("index.sqlite"), false).expect("index");
        let blobs = BlobStore::open(&dir.path().join("blobs"), false).expect("blobs");
        let pieces = [piece(2, b"AAAA"), piece(4, b"bbbbbb"), piece(12, b"ZZ")];
        let mut entries = Vec::new();
        for (p, data) in &pieces {
            entries.push(crate::store::Entry {
                turn: 1,
                path: b"f".to_vec(),
                pre: crate::record::PreImage::File {
                    blob: p.blob,
                    size: p.len,
                    perm: 0,
                    ino: 0,
                },
                data: Some(data.clone()),
                op: crate::store::log::Op::Range { offset: p.offset },
                meta: None,
            });
        }
        let mut index = index;
        index.apply(&entries, &blobs).expect("apply");
        let got = patch_in_memory(&index, &blobs, 1, b"f", 14, b"0123456789xy").expect("patch");
        assert_eq!(got, b"01AAAAbbbbxyZZ");
        let got = patch_in_memory(&index, &blobs, 1, b"f", 5, b"0123456789").expect("cut");
        assert_eq!(got, b"01AAA");
        // Bytes neither saved nor in the base: the base is not what the
        // record was made over.
        let err = patch_in_memory(&index, &blobs, 1, b"f", 14, b"0123").expect_err("short");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
