//! Kept inodes: a removed file's inode moved into the state dir instead of
//! copied (`docs/design.md`, "Removals keep the inode").
//!
//! When a large regular file loses its last name through the mount (an
//! unlink, or a rename over it), the capture can make the inode itself the
//! pre-image: it links the inode into this scope's `kept/` folder (mode
//! 0700, on the state dir's filesystem) under a number, and appends an
//! [`Op::Kept`](super::log::Op::Kept) record naming that number to the
//! capture log, before the removal runs. The record's hash is *pending*:
//! the bytes are hashed later, off the request path. A kept record never
//! reaches the index as such: the group commit (and a replay of the log
//! after a crash) first hashes the kept file, makes it a blob (a second
//! hard link in the blob store, [`BlobStore::adopt`]), and turns the
//! record into an ordinary file record. So everything that reads the index
//! (rewind, history, export, gc, verify, retention) only ever sees
//! resolved records; only the capture log and the journal's memory hold the
//! pending form.
//!
//! A kept file is removed from `kept/` once the record naming it is
//! committed (or superseded by a copy, [`resolve`]); replaying the log
//! empties the folder.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, CWD};

use super::blob::{BlobError, BlobStore};
use super::log::{Entry, Op};
use super::sparse::segments;
use crate::record::{Hash, PreImage};

/// Bytes read at a time when hashing a kept file.
const CHUNK: usize = 1 << 20;

/// The folder of one scope's kept inodes.
#[derive(Debug)]
pub struct KeptDir {
    dir: PathBuf,
    fd: OwnedFd,
    dev: u64,
}

impl KeptDir {
    /// Opens (creating if needed) the folder `dir`, mode 0700 (a kept file
    /// must not be opened by anyone but the daemon).
    ///
    /// Errors: the folder cannot be created, opened or made 0700.
    pub fn open(dir: &Path) -> io::Result<KeptDir> {
        match fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(named(dir, e)),
        }
        let meta = fs::symlink_metadata(dir).map_err(|e| named(dir, e))?;
        if meta.permissions().mode() & 0o7777 != 0o700 {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| named(dir, e))?;
        }
        let fd = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| named(dir, e.into()))?;
        let dev = rustix::fs::fstat(&fd)
            .map_err(|e| named(dir, e.into()))?
            .st_dev;
        Ok(KeptDir {
            dir: dir.to_path_buf(),
            fd,
            dev,
        })
    }

    /// The device the folder lives on: only a file on the same device can
    /// be linked here.
    pub fn dev(&self) -> u64 {
        self.dev
    }

    /// The path of kept file `id`.
    pub fn path_of(&self, id: u64) -> PathBuf {
        self.dir.join(id.to_string())
    }

    /// Makes `kept/<id>` another name of the open file `file` (any
    /// descriptor, `O_PATH` included; `linkat` through `/proc/self/fd`,
    /// which names the inode, not a path that could have been replaced).
    /// With `sync` the folder is fsynced after.
    ///
    /// Errors: the kernel's (`EXDEV` for another filesystem, or for a
    /// descriptor on another mount of it; `EEXIST` when the number is
    /// taken).
    pub fn link(&self, file: impl AsFd, id: u64, sync: bool) -> io::Result<()> {
        let proc = format!("/proc/self/fd/{}", file.as_fd().as_raw_fd());
        let name = id.to_string();
        rustix::fs::linkat(
            CWD,
            proc.as_str(),
            &self.fd,
            name.as_str(),
            AtFlags::SYMLINK_FOLLOW,
        )?;
        if sync {
            rustix::fs::fsync(&self.fd)?;
        }
        Ok(())
    }

    /// Removes kept file `id`; a missing one is not an error.
    pub fn remove(&self, id: u64) {
        match rustix::fs::unlinkat(&self.fd, id.to_string().as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => log::warn!(
                "cannot remove kept file {}: {}",
                self.path_of(id).display(),
                io::Error::from(e)
            ),
        }
    }

    /// Removes every kept file (after a replay: no record names one).
    pub fn clear(&self) {
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
    }

    /// Opens kept file `id` for reading.
    ///
    /// Errors: the kernel's (`NotFound` when it is gone).
    pub fn open_file(&self, id: u64) -> io::Result<File> {
        let fd = rustix::fs::openat(
            &self.fd,
            id.to_string().as_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(File::from(fd))
    }
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The BLAKE3 and length of everything `file` holds now, read at offsets
/// (its position is not moved); holes are hashed as zeros without being
/// read.
///
/// Errors: the file cannot be read.
pub fn hash_file(file: &File) -> io::Result<(Hash, u64)> {
    let size = file.metadata()?.len();
    let mut hasher = blake3::Hasher::new();
    let zeros = vec![0u8; CHUNK];
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    for (offset, len) in segments(file, size)? {
        feed_zeros(&mut hasher, &zeros, offset - at);
        let mut pos = offset;
        while pos < offset + len {
            let n = (offset + len - pos).min(CHUNK as u64) as usize;
            file.read_exact_at(&mut buf[..n], pos)?;
            hasher.update(&buf[..n]);
            pos += n as u64;
        }
        at = offset + len;
    }
    feed_zeros(&mut hasher, &zeros, size - at);
    Ok((*hasher.finalize().as_bytes(), size))
}

fn feed_zeros(hasher: &mut blake3::Hasher, zeros: &[u8], mut len: u64) {
    while len > 0 {
        let n = len.min(zeros.len() as u64) as usize;
        hasher.update(&zeros[..n]);
        len -= n as u64;
    }
}

impl BlobStore {
    /// Makes the file `file` (open, named `path` in the state dir) the blob
    /// `hash`, whose bytes it holds: a second hard link under the blob's
    /// name when the file has no other name (`nlink` 1) and lies on the
    /// blob store's filesystem, else a copy. Nothing is done when the blob
    /// is stored already. Marks `hash` handed out first (see
    /// [`super::Sweep::remove`]).
    ///
    /// After `Ok` the blob is complete under its name (durable with
    /// `sync`); after `Err` nothing is stored under the name.
    ///
    /// Errors: linking, copying or fsyncing failed.
    pub fn adopt(&self, path: &Path, file: &File, hash: &Hash, size: u64) -> Result<(), BlobError> {
        self.mark_fresh(hash);
        if self.contains(hash) {
            return Ok(());
        }
        let only_name = file.metadata().is_ok_and(|m| m.nlink() == 1);
        if only_name {
            let dest = self.path_of(hash);
            let parent = dest.parent().map(Path::to_path_buf);
            if let Some(parent) = &parent {
                fs::create_dir_all(parent).map_err(|source| BlobError::Io {
                    path: parent.clone(),
                    source,
                })?;
            }
            match fs::hard_link(path, &dest) {
                Ok(()) => {
                    if self.is_sync() {
                        file.sync_all().map_err(|source| BlobError::Io {
                            path: dest.clone(),
                            source,
                        })?;
                        if let Some(parent) = &parent {
                            File::open(parent)
                                .and_then(|d| d.sync_all())
                                .map_err(|source| BlobError::Io {
                                    path: parent.clone(),
                                    source,
                                })?;
                        }
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
                // Another filesystem (a blob dir moved elsewhere): copy.
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {}
                Err(source) => return Err(BlobError::Io { path: dest, source }),
            }
        }
        let (copied, _) = copy_from_start(self, file, size)?;
        if &copied != hash {
            return Err(BlobError::Corrupt {
                hash: crate::record::hex(hash),
                actual: crate::record::hex(&copied),
            });
        }
        Ok(())
    }
}

/// [`BlobStore::put_file`] of `file` from its first byte: a small file is
/// read from the descriptor's position, which [`hash_file`]'s
/// `SEEK_DATA` walk moved.
///
/// Errors: as [`BlobStore::put_file`].
pub fn copy_from_start(
    blobs: &BlobStore,
    file: &File,
    size: u64,
) -> Result<(Hash, u64), BlobError> {
    use std::io::{Seek, SeekFrom};
    (&*file)
        .seek(SeekFrom::Start(0))
        .map_err(|source| BlobError::Io {
            path: PathBuf::from("<kept file>"),
            source,
        })?;
    blobs.put_file(file, size)
}

/// What became of one kept record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// Hashed and made a blob.
    Blob,
    /// Superseded by a later [`Op::Replace`] of the same turn and path in
    /// the log (the bytes were copied instead): dropped.
    Superseded,
    /// The kept file is gone or unreadable: the record became
    /// [`PreImage::Unknown`] (a rewind reports the path instead of
    /// restoring a guess).
    Lost,
}

/// Resolves the kept records of `entries` (a capture log read back, in
/// log order) in place: each becomes an ordinary [`Op::Record`] of its
/// file's hash (the kept file adopted as a blob, [`BlobStore::adopt`]),
/// or is dropped when a later [`Op::Replace`] of the same turn and path
/// supersedes it, or becomes [`PreImage::Unknown`] when its file is gone.
/// Returns the ids of the kept files the resolved records named (remove
/// them once the records are committed).
///
/// Errors: a blob could not be stored (the entries are then partly
/// resolved; the log and the kept files are untouched, so a later replay
/// starts over).
pub fn resolve(
    entries: &mut Vec<Entry>,
    kept: &KeptDir,
    blobs: &BlobStore,
) -> Result<Vec<u64>, BlobError> {
    let replaced: HashSet<(u64, Vec<u8>)> = entries
        .iter()
        .filter(|e| e.op == Op::Replace)
        .map(|e| (e.turn, e.path.clone()))
        .collect();
    let mut ids = Vec::new();
    let mut out = Vec::with_capacity(entries.len());
    for mut e in entries.drain(..) {
        let Op::Kept { id } = e.op else {
            out.push(e);
            continue;
        };
        ids.push(id);
        if replaced.contains(&(e.turn, e.path.clone())) {
            continue;
        }
        resolve_one(&mut e, id, kept, blobs, None)?;
        out.push(e);
    }
    *entries = out;
    Ok(ids)
}

/// Resolves one kept record `e` of kept file `id` in place (see
/// [`resolve`]); `hashed` is the file's hash and length when already
/// known. Returns what became of it.
///
/// Errors: the blob could not be stored.
pub fn resolve_one(
    e: &mut Entry,
    id: u64,
    kept: &KeptDir,
    blobs: &BlobStore,
    hashed: Option<(Hash, u64)>,
) -> Result<Resolved, BlobError> {
    let path = kept.path_of(id);
    let lost = |e: &mut Entry, why: io::Error| {
        log::warn!(
            "the kept file {} of {:?} (turn {}) cannot be read: {why}; its pre-image is \
             recorded as unknown",
            path.display(),
            crate::paths::display(&e.path),
            e.turn
        );
        e.op = Op::Record;
        e.pre = PreImage::Unknown;
        e.data = None;
        e.meta = None;
        Resolved::Lost
    };
    let file = match kept.open_file(id) {
        Ok(f) => f,
        Err(why) => return Ok(lost(e, why)),
    };
    let (hash, size) = match hashed {
        Some(h) => h,
        None => match hash_file(&file) {
            Ok(h) => h,
            Err(why) => return Ok(lost(e, why)),
        },
    };
    blobs.adopt(&path, &file, &hash, size)?;
    let PreImage::File {
        size: recorded,
        perm,
        ino,
        ..
    } = e.pre
    else {
        return Ok(lost(
            e,
            io::Error::other("a kept record that is not a file"),
        ));
    };
    if recorded != size {
        log::warn!(
            "the kept file of {:?} (turn {}) holds {size} bytes, {recorded} when it was kept",
            crate::paths::display(&e.path),
            e.turn
        );
    }
    e.op = Op::Record;
    e.pre = PreImage::File {
        blob: hash,
        size,
        perm,
        ino,
    };
    e.data = None;
    Ok(Resolved::Blob)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn kept_entry(turn: u64, path: &[u8], id: u64, size: u64) -> Entry {
        let mut e = Entry::record(
            turn,
            path.to_vec(),
            PreImage::File {
                blob: [0; 32],
                size,
                perm: 0o644,
                ino: 7,
            },
            None,
        );
        e.op = Op::Kept { id };
        e
    }

    #[test]
    fn resolve_links_supersedes_and_loses() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kept = KeptDir::open(&dir.path().join("kept")).expect("kept dir");
        let blobs = BlobStore::open(&dir.path().join("blobs"), false).expect("blobs");
        let mode = fs::metadata(dir.path().join("kept")).expect("stat").mode();
        assert_eq!(mode & 0o7777, 0o700, "kept/ is the daemon's own");
        // Kept file 0: only name, becomes the blob itself.
        let bytes = vec![5u8; 100_000];
        let mut f = File::create(kept.path_of(0)).expect("create");
        f.write_all(&bytes).expect("write");
        let ino = f.metadata().expect("stat").ino();
        drop(f);
        // Kept file 1: superseded by a later replacement.
        File::create(kept.path_of(1)).expect("create");
        let mut replaced = Entry::record(
            3,
            b"b".to_vec(),
            PreImage::File {
                blob: *blake3::hash(b"copy").as_bytes(),
                size: 4,
                perm: 0o644,
                ino: 8,
            },
            Some(b"copy".to_vec()),
        );
        replaced.op = Op::Replace;
        // Kept file 2: gone.
        let mut entries = vec![
            kept_entry(3, b"a", 0, bytes.len() as u64),
            kept_entry(3, b"b", 1, 4),
            replaced.clone(),
            kept_entry(3, b"c", 2, 10),
        ];
        let ids = resolve(&mut entries, &kept, &blobs).expect("resolve");
        assert_eq!(ids, vec![0, 1, 2]);
        assert_eq!(entries.len(), 3, "the superseded record is dropped");
        let hash = *blake3::hash(&bytes).as_bytes();
        assert_eq!(entries[0].op, Op::Record);
        assert_eq!(
            entries[0].pre,
            PreImage::File {
                blob: hash,
                size: bytes.len() as u64,
                perm: 0o644,
                ino: 7
            }
        );
        assert_eq!(
            fs::metadata(blobs.path_of(&hash)).expect("blob").ino(),
            ino,
            "the kept inode is the blob, not a copy"
        );
        assert_eq!(entries[1], replaced);
        assert_eq!(entries[2].op, Op::Record);
        assert_eq!(entries[2].pre, PreImage::Unknown, "a lost kept file");
    }

    #[test]
    fn a_kept_file_with_another_name_is_copied() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kept = KeptDir::open(&dir.path().join("kept")).expect("kept dir");
        let blobs = BlobStore::open(&dir.path().join("blobs"), false).expect("blobs");
        let bytes = vec![9u8; 50_000];
        fs::write(dir.path().join("project-file"), &bytes).expect("write");
        fs::hard_link(dir.path().join("project-file"), kept.path_of(4)).expect("link");
        let mut entries = vec![kept_entry(1, b"p", 4, bytes.len() as u64)];
        resolve(&mut entries, &kept, &blobs).expect("resolve");
        let hash = *blake3::hash(&bytes).as_bytes();
        assert_ne!(
            fs::metadata(blobs.path_of(&hash)).expect("blob").ino(),
            fs::metadata(dir.path().join("project-file"))
                .expect("stat")
                .ino(),
            "a file the project still names must be copied"
        );
        assert_eq!(blobs.read(&hash).expect("read"), bytes);
    }
}
