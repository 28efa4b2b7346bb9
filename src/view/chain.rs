//! The ranged-chain resolver: a file's content at the start of a turn when
//! it is kept as ranges (see [`super::ranges`]).
//!
//! A path's records from turn N on may be [`PreImage::Ranged`] up to the
//! first whole file record (the *base*), or up to the project's file when
//! none follows. [`resolve`] walks that chain and either lays the saved
//! runs over the project's file in place ([`Resolved::InPlace`], the cost
//! being the bytes the turns overwrote) or puts the content together into a
//! blob ([`Resolved::Blob`]). It reads only what it is given (an index, a
//! blob store, the project's confined directory and the last fingerprint
//! opfs saw), so rewind and capture can both call it.
//!
//! [`resolve_records`] is the same walk over records already loaded (a
//! history timeline), in memory: each ranged record is laid over the
//! content of the record after it, or over the project's file for the
//! newest.
//!
//! [`lay_over`] is the one step all of them take: one record's saved
//! ranges over the content below it, kept in memory or written as a blob.
//! Capture calls it to make a ranged pre-image whole before a mutation
//! takes the file it is laid over away.

use std::io::{self, Read};

use crate::record::{Fingerprint, Hash, PreImage};
use crate::store::{BlobError, BlobStore, Index, IndexError};
use crate::tree::Dir;

use super::ranges::{self, Intervals, Segment};

/// Why a ranged chain cannot be put back. The messages are the conflict
/// reasons `opfs rewind` reports after "cannot restore its content: ".
#[derive(Debug, thiserror::Error)]
pub enum RangeError {
    /// A record in the chain is neither ranged nor a whole file.
    #[error("its record in turn {turn} is a {kind} where the file its ranges are laid over was expected")]
    NotAFile {
        /// The turn of the offending record.
        turn: u64,
        /// What it records (`dir`, `symlink`, ...).
        kind: &'static str,
    },
    /// The path has no ranged record from that turn on.
    #[error("no ranged record")]
    NoRangedRecord,
    /// The project's file under the chain cannot be `lstat`ed.
    #[error("cannot read the file its ranges are laid over: {0}")]
    ReadBase(#[source] io::Error),
    /// The project's file under the chain changed outside the mount.
    #[error("its turn-start bytes are kept as ranges over the file, which changed outside the mount ({what}), so they cannot be put back")]
    BaseChanged {
        /// What changed, as [`Fingerprint::differs`] words it.
        what: String,
    },
    /// The file was changed behind the mount during a turn after that
    /// turn's record of it began (between two writes through the mount
    /// into a file kept as ranges): the bytes that edit changed were never
    /// saved, so the turn's start is not known in full.
    #[error(
        "it was changed behind the mount during turn {turn} after that turn began recording it, and turn {turn} kept only the bytes the mount overwrote, so the bytes that edit changed were never captured and its content when turn {turn} began is not known in full (--force cannot restore it); the file as it was just before the mount wrote over, removed or moved that edit is kept: opfs show {turn}:{} --outside={seq}",
        crate::paths::display(.path)
    )]
    EditedBehind {
        /// The turn whose ranged record met the edit.
        turn: u64,
        /// The path's raw bytes.
        path: Vec<u8>,
        /// The kept edit's sequence number in that turn (the first).
        seq: u64,
    },
    /// The project's file under the chain is gone (or not a regular file).
    #[error("its turn-start bytes are kept as ranges over a file that is no longer there")]
    BaseGone,
    /// The project's file under the chain is another inode now.
    #[error(
        "its turn-start bytes are kept as ranges over a file that was replaced outside the mount"
    )]
    BaseReplaced,
    /// The project's file is shorter than the bytes no saved range holds.
    #[error(
        "the file its ranges are laid over ends at byte {0}, before bytes no saved range holds"
    )]
    BaseShort(u64),
    /// A record below a ranged one (read with the path's other records) is
    /// not a file: the same condition as [`RangeError::NotAFile`], in the
    /// words history commands have always used.
    #[error("its record in turn {turn} is a {kind} where a file was expected")]
    BelowNotAFile {
        /// The turn of the offending record.
        turn: u64,
        /// What it records.
        kind: &'static str,
    },
    /// The newest record is ranged and the project holds no regular file
    /// to lay it over.
    #[error("the project holds no regular file at that path")]
    NoProjectFile,
    /// Putting the content together in memory failed (a piece is missing
    /// or corrupt, or the base is too short).
    #[error("{0}")]
    Patch(#[source] io::Error),
    /// The project's file under the chain cannot be opened.
    #[error("cannot read the file: {0}")]
    OpenBase(#[source] io::Error),
    /// A saved range or base blob is missing or corrupt.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// The index failed.
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// How a ranged target is restored.
#[derive(Debug)]
pub enum Resolved {
    /// Put together into a blob (now in the store): restored like any file
    /// pre-image.
    Blob(PreImage),
    /// Laid over the project's file, which is still the file the mount
    /// left: the target (`PreImage::Ranged`) and the runs to write back in
    /// place.
    InPlace(PreImage, Vec<Segment>),
}

/// Decides how to restore the content `path` had when turn `to` began from
/// its chain of ranged records (see the module docs).
///
/// Over the project's file (a regular file with one link, the inode the
/// newest record names) the result is [`Resolved::InPlace`]; otherwise the
/// content is put together and stored in `blobs` ([`Resolved::Blob`]).
/// `last_seen` is the fingerprint opfs last saw of the project's file.
///
/// Errors: a record in the chain is not a file ([`RangeError::NotAFile`]),
/// a saved range or blob is missing or corrupt, the base is shorter than
/// the ranges need, or the chain ends at the project's file and that file
/// changed outside the mount (even with `--force`: the ranges only make
/// sense over the bytes the mount left).
pub fn resolve(
    index: &Index,
    blobs: &BlobStore,
    backing: &Dir,
    path: &[u8],
    to: u64,
    last_seen: Option<Fingerprint>,
) -> Result<Resolved, RangeError> {
    let mut chain = Vec::new();
    let mut at = to;
    let base = loop {
        match index.record_from(path, at)? {
            Some((t, PreImage::Ranged { size, perm, ino })) => {
                edited_in(index, path, t)?;
                chain.push((t, size, perm, ino));
                at = t + 1;
            }
            Some((_, PreImage::File { blob, .. })) => break Some(blob),
            Some((turn, other)) => {
                return Err(RangeError::NotAFile {
                    turn,
                    kind: other.kind_name(),
                })
            }
            None => break None,
        }
    };
    let (Some(&(_, size, perm, ino)), Some(&(_, _, _, newest_ino))) = (chain.first(), chain.last())
    else {
        return Err(RangeError::NoRangedRecord);
    };
    if base.is_none() {
        let now = backing.lstat(path).map_err(RangeError::ReadBase)?;
        if let Some(fp) = last_seen {
            if let Some(what) = fp.differs(now.as_ref()) {
                return Err(RangeError::BaseChanged { what });
            }
        }
        let Some(st) = now.filter(|st| st.file_type() == libc::S_IFREG) else {
            return Err(RangeError::BaseGone);
        };
        if newest_ino != 0 && st.ino != newest_ino {
            return Err(RangeError::BaseReplaced);
        }
        if st.nlink == 1 {
            let mut records = Vec::new();
            for &(t, sz, _, _) in &chain {
                records.push((sz, index.ranges_of(t, path)?));
            }
            let segments = ranges::layout_chain(&records);
            // Bytes no record saved come from the file: it must hold them.
            let mut covered = Intervals::new();
            for s in &segments {
                covered.insert(s.offset, s.offset + s.len);
            }
            if let Some(&(a, _)) = covered.gaps(st.size.min(size), size).first() {
                return Err(RangeError::BaseShort(a));
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
        let blob = build(index, blobs, backing, path, turn, size, below.as_ref())?;
        below = Some(blob);
        out = Some(PreImage::File {
            blob,
            size,
            perm,
            ino,
        });
    }
    out.map(Resolved::Blob).ok_or(RangeError::NoRangedRecord)
}

/// Fails with [`RangeError::EditedBehind`] when a ranged record of `path`
/// that the content at the start of turn `to` is put together from (the
/// path's ranged records from `to` on, up to its first other record) met
/// an edit behind the mount in its turn (`outside_edits`), or the record
/// there is unknown and its turn kept such an edit: the bytes that edit
/// changed were never saved. `show` calls it before putting the
/// content together; [`resolve`] checks each record of its chain.
///
/// Errors: [`RangeError::EditedBehind`]; the index failed.
pub fn check_edited_behind(index: &Index, path: &[u8], to: u64) -> Result<(), RangeError> {
    let mut at = to;
    loop {
        match index.record_from(path, at)? {
            Some((t, PreImage::Ranged { .. })) => {
                edited_in(index, path, t)?;
                at = t + 1;
            }
            // A ranged record made unknown when the mount took the file
            // away after such an edit (`capture::ranges`, materialising).
            Some((t, PreImage::Unknown)) => return edited_in(index, path, t),
            _ => return Ok(()),
        }
    }
}

/// [`check_edited_behind`] for the one ranged record of `path` in `turn`.
fn edited_in(index: &Index, path: &[u8], turn: u64) -> Result<(), RangeError> {
    match index.outside_edit(turn, path, Some(1))? {
        Some(kept) => Err(RangeError::EditedBehind {
            turn,
            path: path.to_vec(),
            seq: kept.seq,
        }),
        None => Ok(()),
    }
}

/// One step of [`resolve`]: the content under `path`'s ranged record of
/// `size` bytes in `turn`, laid over blob `below` (or the project's file
/// when `None`), stored as a blob.
fn build(
    index: &Index,
    blobs: &BlobStore,
    backing: &Dir,
    path: &[u8],
    turn: u64,
    size: u64,
    below: Option<&Hash>,
) -> Result<Hash, RangeError> {
    let bytes;
    let file;
    let base = match below {
        Some(h) => match index.inline_blob(h)? {
            Some(_) => {
                bytes = crate::store::read_blob(index, blobs, h)?;
                Base::Bytes(&bytes)
            }
            None => {
                file = blobs.open_verified(h)?;
                Base::File(&file)
            }
        },
        None => {
            file = backing
                .open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)
                .map_err(RangeError::OpenBase)?;
            Base::File(&file)
        }
    };
    Ok(lay_over(index, blobs, path, turn, size, base, Keep::Store)?.blob)
}

/// What a ranged record's saved ranges are laid over in [`lay_over`]: the
/// content of the path's next state.
#[derive(Debug, Clone, Copy)]
pub enum Base<'a> {
    /// An open file, read with `pread(2)` (the project's file, or a blob).
    File(&'a std::fs::File),
    /// Bytes in memory.
    Bytes(&'a [u8]),
}

/// Where [`lay_over`] puts the content it puts together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Always into the blob store (durable once [`BlobStore::put`]
    /// returns; see its docs).
    Store,
    /// In memory, returned in [`Laid::bytes`], when it is at most this
    /// many bytes long; into the blob store otherwise.
    InlineUpTo(u64),
}

/// The content [`lay_over`] put together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Laid {
    /// Its BLAKE3.
    pub blob: Hash,
    /// Its bytes when kept in memory ([`Keep::InlineUpTo`]); `None` when
    /// it went into the blob store.
    pub bytes: Option<Vec<u8>>,
}

/// Lays the saved ranges of `path`'s ranged record in `turn` over `base`,
/// cut or extended to the record's `size` bytes: the path's content when
/// `turn` began (see [`super::ranges`]). `keep` says whether the result
/// is returned in memory or written to `blobs`. Cost: one pass over
/// `size` bytes, one saved piece in memory at a time.
///
/// Errors: [`RangeError::Index`] when the ranges cannot be read;
/// [`RangeError::Patch`] when, kept in memory, a piece is missing or
/// corrupt or `base` is shorter than the bytes no piece holds;
/// [`RangeError::Blob`] for the same causes (the blob store reports the
/// failed read) or a failed write when it goes into the store.
pub fn lay_over(
    index: &Index,
    blobs: &BlobStore,
    path: &[u8],
    turn: u64,
    size: u64,
    base: Base<'_>,
    keep: Keep,
) -> Result<Laid, RangeError> {
    let pieces = index.ranges_of(turn, path)?;
    let base = match base {
        Base::File(f) => ranges::file_base(f),
        Base::Bytes(b) => ranges::bytes_base(b),
    };
    let mut src = ranges::Patched::new(base, index, blobs, &pieces, size);
    match keep {
        Keep::InlineUpTo(max) if size <= max => {
            let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            src.read_to_end(&mut bytes).map_err(RangeError::Patch)?;
            Ok(Laid {
                blob: *blake3::hash(&bytes).as_bytes(),
                bytes: Some(bytes),
            })
        }
        _ => {
            let (blob, _) = blobs.put(&mut src, size)?;
            Ok(Laid { blob, bytes: None })
        }
    }
}

/// Replaces each ranged record in `recs` (one path's records, oldest
/// first) by the file record it stands for, newest first: each is laid over
/// the content of the record after it, or over `current` (the project's
/// file, read before the records were) for the newest. `blob` reads a
/// whole-file record's bytes; `resolved` is told the bytes of each record
/// put together, by their BLAKE3.
///
/// Errors: [`RangeError::BelowNotAFile`], [`RangeError::NoProjectFile`],
/// [`RangeError::Patch`] (a piece is missing or corrupt, or the base is too
/// short), [`RangeError::Index`] when the saved ranges cannot be read, or
/// [`RangeError::Blob`] when `blob` fails.
pub fn resolve_records(
    index: &Index,
    blobs: &BlobStore,
    path: &[u8],
    recs: &mut [(u64, PreImage)],
    current: Option<&[u8]>,
    blob: &dyn Fn(&Hash) -> Result<Vec<u8>, BlobError>,
    resolved: &mut dyn FnMut(Hash, &[u8]),
) -> Result<(), RangeError> {
    let mut above: Option<Vec<u8>> = None;
    for i in (0..recs.len()).rev() {
        let (turn, pre) = &recs[i];
        let PreImage::Ranged { size, perm, ino } = *pre else {
            above = None;
            continue;
        };
        let turn = *turn;
        let base = match (&above, recs.get(i + 1)) {
            (Some(b), _) => b.clone(),
            (None, Some((_, PreImage::File { blob: h, .. }))) => blob(h)?,
            (None, Some((t, other))) => {
                return Err(RangeError::BelowNotAFile {
                    turn: *t,
                    kind: other.kind_name(),
                })
            }
            (None, None) => match current {
                Some(c) => c.to_vec(),
                None => return Err(RangeError::NoProjectFile),
            },
        };
        let laid = lay_over(
            index,
            blobs,
            path,
            turn,
            size,
            Base::Bytes(&base),
            Keep::InlineUpTo(u64::MAX),
        )?;
        let (hash, bytes) = (laid.blob, laid.bytes.unwrap_or_default());
        recs[i].1 = PreImage::File {
            blob: hash,
            size,
            perm,
            ino,
        };
        resolved(hash, &bytes);
        above = Some(bytes);
    }
    Ok(())
}

/// What a chain of ranged records is laid over when it ends at a whole
/// file record: that record's blob.
#[derive(Debug)]
pub enum Bottom {
    /// Bytes in memory (a blob kept in the index, or put together from
    /// ranges earlier and small).
    Bytes(Vec<u8>),
    /// The blob's file in the store, checked against its hash.
    File(std::fs::File),
}

impl Bottom {
    /// The blob `hash` as a base: its file in `blobs` (checked, read in
    /// one pass, when opened), else its bytes kept in the index.
    ///
    /// Errors: as [`crate::store::read_blob`].
    pub fn of_blob(index: &Index, blobs: &BlobStore, hash: &Hash) -> Result<Bottom, BlobError> {
        if blobs.contains(hash) {
            Ok(Bottom::File(blobs.open_verified(hash)?))
        } else {
            Ok(Bottom::Bytes(crate::store::read_blob(index, blobs, hash)?))
        }
    }

    fn into_base<'a>(self) -> Box<ranges::ReadAt<'a>> {
        match self {
            Bottom::Bytes(b) => ranges::owned_bytes_base(b),
            Bottom::File(f) => ranges::owned_file_base(f),
        }
    }
}

/// The content of the first of `chain` (one path's ranged records as
/// `(turn, size)`, oldest first, each laid over the one after it and the
/// last over `bottom`), read at any offset: one [`ranges::Layer`] per
/// record, so memory holds one saved piece per record whatever the size.
///
/// Errors: [`RangeError::Index`] when the saved ranges cannot be read.
pub fn stack<'a>(
    index: &'a Index,
    blobs: &'a BlobStore,
    path: &[u8],
    chain: &[(u64, u64)],
    bottom: Box<ranges::ReadAt<'a>>,
) -> Result<Box<ranges::ReadAt<'a>>, RangeError> {
    let mut base = bottom;
    for &(turn, size) in chain.iter().rev() {
        let pieces = index.ranges_of(turn, path)?;
        base = ranges::Layer::new(base, index, blobs, &pieces, size).into_base();
    }
    Ok(base)
}

/// [`resolve_records`] without putting whole versions in memory: each
/// ranged record's content is read from start to end through a
/// [`stack`] of the ranged records from it on, over the blob of the file
/// record after them (`blob`) or the project's file `current` (read with
/// `pread(2)`), and hashed as it is read. `resolved` is told the bytes
/// of each version shorter than `keep_below` (only those are held, one
/// at a time); a longer one is known by its BLAKE3 alone. Memory: one
/// chunk and one saved piece per record in the chain, whatever the
/// file's size; time: one pass over each version, as before.
///
/// The caller makes sure `current` did not change while it was read
/// ([`crate::view::Reader`] compares the records before and after).
///
/// Errors: as [`resolve_records`].
#[allow(clippy::too_many_arguments)]
pub fn resolve_records_streamed(
    index: &Index,
    blobs: &BlobStore,
    path: &[u8],
    recs: &mut [(u64, PreImage)],
    current: Option<&std::fs::File>,
    blob: &dyn Fn(&Hash) -> Result<Bottom, BlobError>,
    keep_below: u64,
    resolved: &mut dyn FnMut(Hash, &[u8]),
) -> Result<(), RangeError> {
    let original = recs.to_vec();
    for i in (0..original.len()).rev() {
        let PreImage::Ranged { size, perm, ino } = original[i].1 else {
            continue;
        };
        let mut chain = Vec::new();
        let mut j = i;
        while let Some((t, PreImage::Ranged { size, .. })) = original.get(j) {
            chain.push((*t, *size));
            j += 1;
        }
        let bottom = match original.get(j) {
            Some((_, PreImage::File { blob: h, .. })) => blob(h)?.into_base(),
            Some((t, other)) => {
                return Err(RangeError::BelowNotAFile {
                    turn: *t,
                    kind: other.kind_name(),
                })
            }
            None => match current {
                Some(f) => ranges::file_base(f),
                None => return Err(RangeError::NoProjectFile),
            },
        };
        let top = stack(index, blobs, path, &chain, bottom)?;
        let (hash, _, bytes) =
            ranges::hash_stream(&mut ranges::Sequential::new(top, size), keep_below)
                .map_err(RangeError::Patch)?;
        recs[i].1 = PreImage::File {
            blob: hash,
            size,
            perm,
            ino,
        };
        if let Some(b) = bytes {
            resolved(hash, &b);
        }
    }
    Ok(())
}

/// The content `path` had when turn `turn` began, as a stream of its
/// size, when its record from that turn on is ranged (`None` when it is
/// not): the ranged records from `turn` on laid over the blob of the file
/// record after them, or over the project's file when none follows,
/// each read as the stream reaches it (see [`stack`]). Nothing checks
/// that the project's file did not change meanwhile: the caller checks
/// the BLAKE3 of what it read.
///
/// Errors: [`RangeError::EditedBehind`] (its bytes were never all
/// saved); [`RangeError::NotAFile`]; [`RangeError::BaseGone`] (no regular
/// file in the project under the chain); [`RangeError::OpenBase`];
/// [`RangeError::Blob`]; [`RangeError::Index`].
pub fn open_ranged<'a>(
    index: &'a Index,
    blobs: &'a BlobStore,
    backing: &Dir,
    path: &[u8],
    turn: u64,
) -> Result<Option<(ranges::Sequential<'a>, u64)>, RangeError> {
    let mut chain = Vec::new();
    let mut at = turn;
    let bottom = loop {
        match index.record_from(path, at)? {
            Some((t, PreImage::Ranged { size, .. })) => {
                edited_in(index, path, t)?;
                chain.push((t, size));
                at = t + 1;
            }
            _ if chain.is_empty() => return Ok(None),
            Some((_, PreImage::File { blob, .. })) => {
                break Bottom::of_blob(index, blobs, &blob)?.into_base()
            }
            Some((turn, other)) => {
                return Err(RangeError::NotAFile {
                    turn,
                    kind: other.kind_name(),
                })
            }
            None => {
                let st = backing.lstat(path).map_err(RangeError::ReadBase)?;
                if st.is_none_or(|st| st.file_type() != libc::S_IFREG) {
                    return Err(RangeError::BaseGone);
                }
                let f = backing
                    .open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)
                    .map_err(RangeError::OpenBase)?;
                break ranges::owned_file_base(f);
            }
        }
    };
    let size = chain.first().map_or(0, |c| c.1);
    let top = stack(index, blobs, path, &chain, bottom)?;
    Ok(Some((ranges::Sequential::new(top, size), size)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One ranged record: its turn-start size and its pieces
    /// `(offset, bytes)` in saving order.
    type Rec = (u64, Vec<(u64, Vec<u8>)>);

    fn layouts() -> impl proptest::strategy::Strategy<Value = (Vec<u8>, Vec<Rec>, bool)> {
        use proptest::prelude::*;
        let piece = (0u64..300, proptest::collection::vec(any::<u8>(), 1..40));
        let rec = (0u64..300, proptest::collection::vec(piece, 0..5));
        (
            proptest::collection::vec(any::<u8>(), 0..300),
            proptest::collection::vec(rec, 1..4),
            any::<bool>(),
        )
    }

    proptest::proptest! {
        /// Put together as a stream, a chain of ranged records gives the
        /// same file records (the same BLAKE3) and bytes as in memory, and
        /// fails where it fails, over the project's file or a blob.
        #[test]
        fn streamed_chains_match_the_chains_put_together_in_memory(
            (base, chain, over_blob) in layouts()
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut index = Index::open(&dir.path().join("index.sqlite"), false).expect("index");
            let blobs = BlobStore::open(&dir.path().join("blobs"), false).expect("blobs");
            let mut entries = Vec::new();
            let mut recs = Vec::new();
            for (i, (size, pieces)) in chain.iter().enumerate() {
                let turn = i as u64 + 1;
                for (offset, data) in pieces {
                    entries.push(crate::store::Entry {
                        turn,
                        path: b"f".to_vec(),
                        pre: PreImage::File {
                            blob: *blake3::hash(data).as_bytes(),
                            size: data.len() as u64,
                            perm: 0,
                            ino: 0,
                        },
                        data: Some(data.clone()),
                        op: crate::store::log::Op::Range { offset: *offset },
                        meta: None,
                    });
                }
                recs.push((turn, PreImage::Ranged { size: *size, perm: 0o644, ino: 7 }));
            }
            index.apply(&entries, &blobs).expect("apply");
            let file = dir.path().join("current");
            std::fs::write(&file, &base).expect("write");
            let current = std::fs::File::open(&file).expect("open");
            if over_blob {
                let (h, _) = blobs.put(&mut &base[..], base.len() as u64).expect("put");
                recs.push((9, PreImage::File { blob: h, size: base.len() as u64, perm: 0, ino: 0 }));
            }
            let mut old = recs.clone();
            let mut old_bytes = std::collections::HashMap::new();
            let r_old = resolve_records(
                &index,
                &blobs,
                b"f",
                &mut old,
                (!over_blob).then_some(&base[..]),
                &|h| crate::store::read_blob(&index, &blobs, h),
                &mut |h, b| {
                    old_bytes.insert(h, b.to_vec());
                },
            );
            for keep_below in [0, u64::MAX] {
                let mut new = recs.clone();
                let mut new_bytes = std::collections::HashMap::new();
                let r_new = resolve_records_streamed(
                    &index,
                    &blobs,
                    b"f",
                    &mut new,
                    (!over_blob).then_some(&current),
                    &|h| Bottom::of_blob(&index, &blobs, h),
                    keep_below,
                    &mut |h, b| {
                        new_bytes.insert(h, b.to_vec());
                    },
                );
                proptest::prop_assert_eq!(r_old.is_ok(), r_new.is_ok(), "{:?} {:?}", r_old, r_new);
                if r_old.is_ok() {
                    proptest::prop_assert_eq!(&old, &new);
                    if keep_below == u64::MAX {
                        proptest::prop_assert_eq!(&old_bytes, &new_bytes);
                    } else {
                        proptest::prop_assert!(new_bytes.is_empty());
                    }
                }
            }
        }
    }
}
