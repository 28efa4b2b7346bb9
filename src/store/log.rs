//! The capture log: an append-only file of pre-image records that are
//! durable but not yet in the index.
//!
//! Committing one SQLite transaction per captured path costs more than the
//! mutation it guards (a dozen `fcntl` locks and a WAL write per commit).
//! Instead the journal appends each record here with one `write(2)` before
//! the mutation runs, and moves records into the index in groups: one
//! transaction for up to a few thousand records ("group commit"), after
//! which the file is truncated to zero. A record that reached this file
//! survives a crash of the process (it is in the page cache); with `sync`
//! each append is followed by `fdatasync(2)`, so it also survives a power
//! loss. Opening the journal after a crash moves what the file holds into
//! the index before anything else reads it.
//!
//! Applying a record twice changes nothing (blob rows and records are
//! "insert or ignore", the first record of a (turn, path) wins), so a crash
//! between the index commit and the truncation is harmless.
//!
//! Small pre-images travel inside their record and are stored inline in the
//! index (design §3: "small blobs may live inside SQLite"), so capturing a
//! small file costs no blob file at all. The format is in `docs/format.md`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::paths;
use crate::record::{Hash, Meta, PreImage, Special};

/// Content of at most this many bytes is stored inline in the index
/// instead of as a blob file.
pub const INLINE_MAX: u64 = 16 * 1024;

/// The kind byte of an [`Op::Range`] entry.
const RANGE_CODE: u8 = 9;
/// The kind byte of an [`Op::Kept`] entry.
const KEPT_CODE: u8 = 11;
/// The kind byte of an [`Op::Replace`] entry is this plus the pre-image's code.
const REPLACE_BASE: u8 = 16;

/// The magic and version of the file: the first 8 bytes.
const MAGIC: &[u8; 8] = b"opfsLOG1";

/// What an [`Entry`] does to the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `pre` is `path`'s pre-image in `turn` unless the path already has
    /// one there (the first record of a turn wins).
    Record,
    /// `pre` replaces `path`'s [`PreImage::Ranged`] record in `turn`, whose
    /// saved ranges are dropped: the file's turn-start bytes were put
    /// together into one blob before a rename or removal took the file
    /// away (see `docs/ranges.md`).
    Replace,
    /// The bytes of `path` at `offset` when `turn` began, saved before the
    /// mount overwrote them: `pre` is a [`PreImage::File`] naming their blob
    /// and length (`perm` and `ino` 0). Belongs to the path's
    /// [`PreImage::Ranged`] record in `turn`; where two saved ranges
    /// overlap, the earlier one holds the turn-start bytes.
    Range {
        /// Byte offset in the file.
        offset: u64,
    },
    /// `path`'s pre-image in `turn` is the regular file kept as
    /// `kept/<id>` in the state dir (the inode itself, moved out of the
    /// project instead of copied; `store::kept`), its hash pending: `pre`
    /// is a [`PreImage::File`] whose `blob` is all zeros. Never reaches the
    /// index: the group commit and a replay first hash the file and turn
    /// the entry into an [`Op::Record`] ([`super::kept::resolve`]); a later
    /// [`Op::Replace`] of the same turn and path supersedes it.
    Kept {
        /// The kept file's number.
        id: u64,
    },
}

/// One record: `path`'s pre-image in `turn` (or one saved range of it),
/// with the content of a small file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The turn the pre-image belongs to.
    pub turn: u64,
    /// Project-relative path bytes.
    pub path: Vec<u8>,
    /// The pre-image.
    pub pre: PreImage,
    /// For a file pre-image of at most [`INLINE_MAX`] bytes: its bytes
    /// (their BLAKE3 is the pre-image's blob). `None`: the blob is a file
    /// in the blob store, written before the record.
    pub data: Option<Vec<u8>>,
    /// What the entry does.
    pub op: Op,
    /// The path's owner and extended attributes when recorded (`None`:
    /// not read, as for an absent path, or a log written before schema
    /// version 5).
    pub meta: Option<Meta>,
}

impl Entry {
    /// A plain record ([`Op::Record`]).
    pub fn record(turn: u64, path: Vec<u8>, pre: PreImage, data: Option<Vec<u8>>) -> Entry {
        Entry {
            turn,
            path,
            pre,
            data,
            op: Op::Record,
            meta: None,
        }
    }

    /// This entry with the path's owner and extended attributes.
    pub fn with_meta(mut self, meta: Option<Meta>) -> Entry {
        self.meta = meta;
        self
    }
}

/// Errors of the capture log. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Reading, appending or truncating failed.
    #[error("capture log {path}: {source}")]
    Io {
        /// The log file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The file holds bytes opfs could not have written (not a torn last
    /// record, which a crash can leave and which is dropped).
    #[error(
        "capture log {path} is damaged at byte {offset}: {what}; the records after it \
         cannot be read (move the file away to continue without them)"
    )]
    Corrupt {
        /// The log file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

/// The open log, for appending.
#[derive(Debug)]
pub struct CaptureLog {
    file: File,
    path: PathBuf,
    sync: bool,
    /// Bytes in the file (0 after a truncation).
    len: u64,
    buf: Vec<u8>,
}

impl CaptureLog {
    /// Opens (creating if needed) the log at `path` for appending. The
    /// caller must have read it with [`read`] and applied what it holds
    /// first; `open` does not truncate.
    pub fn open(path: &Path, sync: bool) -> Result<CaptureLog, LogError> {
        let io_err = |source| LogError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        Ok(CaptureLog {
            file,
            path: path.to_path_buf(),
            sync,
            len,
            buf: Vec::new(),
        })
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `entry` with one `write(2)` (plus `fdatasync(2)` when opened
    /// with `sync`). After `Ok` the record survives a crash of the process
    /// (and a power loss with `sync`). After `Err` nothing usable was
    /// written: a partial record is dropped as a torn tail when read.
    pub fn append(&mut self, entry: &Entry) -> Result<(), LogError> {
        self.buf.clear();
        if self.len == 0 {
            self.buf.extend_from_slice(MAGIC);
        }
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0u8; 12]);
        encode(entry, &mut self.buf);
        let payload_len = (self.buf.len() - start - 12) as u32;
        let sum = checksum(&self.buf[start + 12..]);
        self.buf[start..start + 4].copy_from_slice(&payload_len.to_le_bytes());
        self.buf[start + 4..start + 12].copy_from_slice(&sum);
        let done = self.file.write_all(&self.buf).and_then(|()| {
            if self.sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(source) = done {
            // Whatever part of the record landed is a torn tail; cut it off
            // so the next record starts clean.
            let _ = self.file.set_len(self.len);
            return Err(LogError::Io {
                path: self.path.clone(),
                source,
            });
        }
        self.len += self.buf.len() as u64;
        Ok(())
    }

    /// Empties the file once its records are committed to the index.
    pub fn truncate(&mut self) -> Result<(), LogError> {
        self.file
            .set_len(0)
            .and_then(|()| {
                if self.sync {
                    self.file.sync_data()
                } else {
                    Ok(())
                }
            })
            .map_err(|source| LogError::Io {
                path: self.path.clone(),
                source,
            })?;
        self.len = 0;
        Ok(())
    }
}

/// Reads every record of the log at `path` (none when the file does not
/// exist). A torn last record (a crash during an append) is dropped.
///
/// Errors: [`LogError::Io`] when the file cannot be read,
/// [`LogError::Corrupt`] when a record other than the last is damaged or
/// the file does not start with the magic.
pub fn read(path: &Path) -> Result<Vec<Entry>, LogError> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_end(&mut bytes).map(drop),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => Err(e),
    }
    .map_err(|source| LogError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let corrupt = |offset: usize, what: String| LogError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        what,
    };
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    if bytes.len() < MAGIC.len() {
        // A crash during the very first append.
        return Ok(Vec::new());
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err(corrupt(0, "not an opfs capture log (bad magic)".into()));
    }
    let mut at = MAGIC.len();
    let mut out = Vec::new();
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < 12 {
            break; // torn header
        }
        let len = u32::from_le_bytes(rest[..4].try_into().unwrap_or_default()) as usize;
        if rest.len() < 12 + len {
            break; // torn payload
        }
        let payload = &rest[12..12 + len];
        let last = at + 12 + len == bytes.len();
        if checksum(payload) != rest[4..12] {
            if last {
                break;
            }
            return Err(corrupt(at, "checksum mismatch".into()));
        }
        let entry = decode(payload).map_err(|what| corrupt(at, what))?;
        out.push(entry);
        at += 12 + len;
    }
    Ok(out)
}

fn checksum(payload: &[u8]) -> [u8; 8] {
    let h = blake3::hash(payload);
    let mut out = [0u8; 8];
    out.copy_from_slice(&h.as_bytes()[..8]);
    out
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Payload: turn u64, path (u32 length + bytes), kind u8, perm u32,
/// size u64, rdev u64, ino u64, blob [32], target (u32 length + bytes),
/// data flag u8 (1: u32 length + bytes follow), metadata flag u8 (1: uid
/// u32, gid u32, u32 length + the attributes as [`Meta::encode_xattrs`]
/// follow; absent in a log written before schema version 5). Integers
/// little-endian.
/// The kind byte is the pre-image's code ([`PreImage::code`]) for
/// [`Op::Record`], 16 + that code for [`Op::Replace`], and
/// [`RANGE_CODE`] for [`Op::Range`], whose offset travels in the rdev slot,
/// and [`KEPT_CODE`] for [`Op::Kept`] (a file pre-image whose blob is all
/// zeros), whose kept file's number travels in the rdev slot.
fn encode(e: &Entry, out: &mut Vec<u8>) {
    let (perm, size, rdev, ino, blob, target): (u32, u64, u64, u64, Hash, &[u8]) = match &e.pre {
        PreImage::Ranged { size, perm, ino } => (*perm, *size, 0, *ino, [0; 32], &[]),
        PreImage::Absent | PreImage::Unknown => (0, 0, 0, 0, [0; 32], &[]),
        PreImage::File {
            blob,
            size,
            perm,
            ino,
        } => (*perm, *size, 0, *ino, *blob, &[]),
        PreImage::Dir { perm } => (*perm, 0, 0, 0, [0; 32], &[]),
        PreImage::Symlink { target } => (0, 0, 0, 0, [0; 32], target),
        PreImage::Special { perm, rdev, .. } => (*perm, 0, *rdev, 0, [0; 32], &[]),
    };
    let (code, rdev) = match e.op {
        Op::Record => (e.pre.code(), rdev),
        Op::Replace => (REPLACE_BASE + e.pre.code(), rdev),
        Op::Range { offset } => (RANGE_CODE, offset),
        Op::Kept { id } => (KEPT_CODE, id),
    };
    out.extend_from_slice(&e.turn.to_le_bytes());
    put_bytes(out, &e.path);
    out.push(code);
    out.extend_from_slice(&perm.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&rdev.to_le_bytes());
    out.extend_from_slice(&ino.to_le_bytes());
    out.extend_from_slice(&blob);
    put_bytes(out, target);
    match &e.data {
        Some(d) => {
            out.push(1);
            put_bytes(out, d);
        }
        None => out.push(0),
    }
    match &e.meta {
        Some(m) => {
            out.push(1);
            out.extend_from_slice(&m.uid.to_le_bytes());
            out.extend_from_slice(&m.gid.to_le_bytes());
            put_bytes(out, &m.encode_xattrs().unwrap_or_default());
        }
        None => out.push(0),
    }
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("record ends early".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| "short")?,
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| "short")?,
        ))
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

fn decode(payload: &[u8]) -> Result<Entry, String> {
    let mut c = Cursor(payload);
    let turn = c.u64()?;
    let path = c.bytes()?.to_vec();
    paths::validate(&path).map_err(|w| format!("path {:?}: {w}", paths::display(&path)))?;
    if path.is_empty() {
        return Err("a record names the project root".into());
    }
    let raw_code = c.u8()?;
    let (op, code) = match raw_code {
        RANGE_CODE => (Op::Range { offset: 0 }, 1),
        KEPT_CODE => (Op::Kept { id: 0 }, 1),
        c if c >= REPLACE_BASE => (Op::Replace, c - REPLACE_BASE),
        c => (Op::Record, c),
    };
    let perm = c.u32()?;
    let size = c.u64()?;
    let rdev = c.u64()?;
    let ino = c.u64()?;
    let blob: Hash = c.take(32)?.try_into().map_err(|_| "short")?;
    let target = c.bytes()?.to_vec();
    let data = match c.u8()? {
        0 => None,
        1 => Some(c.bytes()?.to_vec()),
        f => return Err(format!("bad data flag {f}")),
    };
    // A log written before schema version 5 ends here.
    let meta = match if c.0.is_empty() { 0 } else { c.u8()? } {
        0 => None,
        1 => {
            let uid = c.u32()?;
            let gid = c.u32()?;
            let xattrs = Meta::decode_xattrs(Some(c.bytes()?))?;
            Some(Meta { uid, gid, xattrs })
        }
        f => return Err(format!("bad metadata flag {f}")),
    };
    if !c.0.is_empty() {
        return Err("trailing bytes in a record".into());
    }
    if perm > 0o7777 {
        return Err(format!("bad permission bits {perm:o}"));
    }
    let pre = match code {
        0 => PreImage::Absent,
        1 => PreImage::File {
            blob,
            size,
            perm,
            ino,
        },
        2 => PreImage::Dir { perm },
        3 => PreImage::Symlink { target },
        4..=7 => PreImage::Special {
            kind: Special::from_code(code).ok_or("bad kind")?,
            perm,
            rdev,
        },
        8 => PreImage::Ranged { size, perm, ino },
        10 => PreImage::Unknown,
        _ => return Err(format!("unknown record kind {raw_code}")),
    };
    let op = match op {
        Op::Range { .. } => {
            if size == 0 {
                return Err("empty saved range".into());
            }
            Op::Range { offset: rdev }
        }
        Op::Kept { .. } => {
            if data.is_some() || blob != [0; 32] {
                return Err("a kept record with content".into());
            }
            Op::Kept { id: rdev }
        }
        op => op,
    };
    if let Some(d) = &data {
        let ok = matches!(&pre, PreImage::File { blob, size, .. }
            if *size == d.len() as u64 && blake3::hash(d).as_bytes() == blob);
        if !ok {
            return Err("inline content does not match its record".into());
        }
    }
    Ok(Entry {
        turn,
        path,
        pre,
        data,
        op,
        meta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<Entry> {
        let data = b"hello\n".to_vec();
        vec![
            Entry {
                turn: 3,
                path: b"a/b.txt".to_vec(),
                pre: PreImage::File {
                    blob: *blake3::hash(&data).as_bytes(),
                    size: 6,
                    perm: 0o644,
                    ino: 77,
                },
                data: Some(data),
                op: Op::Record,
                meta: Some(Meta::new(0, 0, vec![])),
            },
            Entry {
                turn: 3,
                path: b"l".to_vec(),
                pre: PreImage::Symlink {
                    target: b"../x\xff".to_vec(),
                },
                data: None,
                op: Op::Record,
                meta: Some(Meta::new(
                    1000,
                    100,
                    vec![(b"trusted.x".to_vec(), b"v\0".to_vec())],
                )),
            },
            Entry {
                turn: 4,
                path: b"d".to_vec(),
                pre: PreImage::Absent,
                data: None,
                op: Op::Record,
                meta: None,
            },
            Entry {
                turn: 5,
                path: b"big".to_vec(),
                pre: PreImage::Ranged {
                    size: 1 << 30,
                    perm: 0o600,
                    ino: 9,
                },
                data: None,
                op: Op::Record,
                meta: None,
            },
            Entry {
                turn: 5,
                path: b"big".to_vec(),
                pre: PreImage::File {
                    blob: *blake3::hash(b"old").as_bytes(),
                    size: 3,
                    perm: 0,
                    ino: 0,
                },
                data: Some(b"old".to_vec()),
                op: Op::Range { offset: 4096 },
                meta: None,
            },
            Entry {
                turn: 5,
                path: b"big".to_vec(),
                pre: PreImage::File {
                    blob: [7; 32],
                    size: 1 << 30,
                    perm: 0o600,
                    ino: 9,
                },
                data: None,
                op: Op::Replace,
                meta: None,
            },
            Entry {
                turn: 6,
                path: b"big".to_vec(),
                pre: PreImage::File {
                    blob: [0; 32],
                    size: 1 << 20,
                    perm: 0o640,
                    ino: 12,
                },
                data: None,
                op: Op::Kept { id: 42 },
                meta: Some(Meta::new(1000, 100, vec![])),
            },
        ]
    }

    #[test]
    fn round_trip_and_truncate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("capture.log");
        let mut log = CaptureLog::open(&p, false).expect("open");
        for e in entries() {
            log.append(&e).expect("append");
        }
        assert_eq!(read(&p).expect("read"), entries());
        log.truncate().expect("truncate");
        assert_eq!(read(&p).expect("read"), Vec::new());
        log.append(&entries()[2]).expect("append after truncate");
        assert_eq!(read(&p).expect("read"), vec![entries()[2].clone()]);
    }

    #[test]
    fn a_record_without_metadata_reads_as_before_version_5() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("capture.log");
        let e = entries()[2].clone();
        let mut payload = Vec::new();
        encode(&e, &mut payload);
        assert_eq!(payload.pop(), Some(0), "the metadata flag ends the record");
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        file.extend_from_slice(&checksum(&payload));
        file.extend_from_slice(&payload);
        std::fs::write(&p, &file).expect("write");
        assert_eq!(read(&p).expect("read"), vec![e]);
    }

    #[test]
    fn torn_tail_is_dropped_damage_in_the_middle_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("capture.log");
        let mut log = CaptureLog::open(&p, false).expect("open");
        for e in entries() {
            log.append(&e).expect("append");
        }
        let full = std::fs::read(&p).expect("read");
        for cut in 1..30 {
            std::fs::write(&p, &full[..full.len() - cut]).expect("write");
            assert_eq!(
                read(&p).expect("torn tail").len(),
                entries().len() - 1,
                "cut {cut}"
            );
        }
        let mut bad = full.clone();
        bad[MAGIC.len() + 14] ^= 0xff; // inside the first record's payload
        std::fs::write(&p, &bad).expect("write");
        let err = read(&p).expect_err("damage in the middle");
        assert!(err.to_string().contains("capture.log"), "{err}");
        assert!(err.to_string().contains("byte 8"), "{err}");
    }
}
