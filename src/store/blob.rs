//! The content-addressed blob store.
//!
//! A blob is a file's bytes, named by their BLAKE3 digest and stored at
//! `blobs/<first 2 hex digits>/<remaining 62>`. Each blob is written to a
//! temporary file in `blobs/tmp/` and renamed into place, so a blob file that
//! exists under its name is complete (design §3). Identical content is stored
//! once however many paths and turns refer to it.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::record::{hex, Hash};

/// Content of at most this many bytes is hashed in memory before anything is
/// written, so content already stored costs no write at all.
pub(super) const IN_MEMORY_LIMIT: u64 = 8 << 20;

const CHUNK: usize = 1 << 20;

/// Errors from the blob store. Each names the blob or file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// Reading the source or writing the store failed.
    #[error("blob store {path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error (ENOSPC when the store's disk is full).
        source: io::Error,
    },
    /// The blob is not in the store.
    #[error("blob {0} is missing from the store")]
    Missing(String),
    /// The blob's bytes no longer hash to its name.
    #[error("blob {hash} is corrupt: its content hashes to {actual}")]
    Corrupt {
        /// The blob's name.
        hash: String,
        /// What its bytes hash to now.
        actual: String,
    },
}

/// The blob directory of one project's state dir.
#[derive(Debug)]
pub struct BlobStore {
    dir: PathBuf,
    sync: bool,
    tmp_seq: AtomicU64,
    /// While a sweep runs ([`BlobStore::begin_sweep`]): every hash a
    /// `put` handed out since it began. The sweep never removes those.
    fresh: Mutex<Option<HashSet<Hash>>>,
    /// Held for a sweep's whole run: one sweep at a time.
    sweeper: Mutex<()>,
}

/// A sweep of the blob store in progress: while it lives, every hash a
/// `put` of the same [`BlobStore`] hands out is marked fresh, and
/// [`Sweep::remove`] leaves fresh blobs alone. Dropping it ends the sweep.
#[must_use = "the sweep ends when this value is dropped"]
pub struct Sweep<'a> {
    store: &'a BlobStore,
    _one_at_a_time: MutexGuard<'a, ()>,
}

impl std::fmt::Debug for Sweep<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweep")
            .field("dir", &self.store.dir)
            .finish()
    }
}

impl Sweep<'_> {
    /// Removes the blob file of `hash` unless a `put` handed `hash` out
    /// since the sweep began. Returns whether it removed the file.
    ///
    /// Why this is safe beside running `put`s: `put` marks a hash before
    /// it looks whether the blob exists (and before it renames a new one
    /// into place), and this checks the mark and removes the file under
    /// the same lock. So either the mark came first (the file stays), or
    /// the removal did (the `put` then finds no file and writes it again).
    ///
    /// Errors: the file cannot be removed (`NotFound` when it is gone).
    pub fn remove(&self, hash: &Hash) -> io::Result<bool> {
        let fresh = self.store.fresh_lock();
        if fresh.as_ref().is_some_and(|f| f.contains(hash)) {
            return Ok(false);
        }
        fs::remove_file(self.store.path_of(hash))?;
        Ok(true)
    }
}

impl Drop for Sweep<'_> {
    fn drop(&mut self) {
        *self.store.fresh_lock() = None;
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> BlobError + '_ {
    move |source| BlobError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The folder inside the blob directory where blobs are written before
/// they are renamed into place (never a blob name: those are two hex
/// digits).
pub const TMP_DIR: &str = "tmp";

/// The folder inside the blob directory holding the range packs: one file
/// per turn, `packs/<turn>`, the small saved pieces of that turn's ranged
/// records back to back (`docs/format.md`, "Range packs"; never a blob name).
pub const PACKS_DIR: &str = "packs";

impl BlobStore {
    /// Opens (creating if needed) the blob store at `dir`. With `sync`, every
    /// blob is fsynced before it is renamed into place and the directory
    /// after, so blobs survive power loss (design §2.3).
    pub fn open(dir: &Path, sync: bool) -> Result<BlobStore, BlobError> {
        let tmp = dir.join(TMP_DIR);
        fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        Ok(BlobStore {
            dir: dir.to_path_buf(),
            sync,
            tmp_seq: AtomicU64::new(0),
            fresh: Mutex::new(None),
            sweeper: Mutex::new(()),
        })
    }

    /// The blob store at `dir` as it is, creating nothing (for read-only
    /// checks such as `opfs verify`).
    pub fn open_existing(dir: &Path) -> BlobStore {
        BlobStore {
            dir: dir.to_path_buf(),
            sync: false,
            tmp_seq: AtomicU64::new(0),
            fresh: Mutex::new(None),
            sweeper: Mutex::new(()),
        }
    }

    /// Begins a sweep (see [`Sweep`]); waits for a sweep already running
    /// to end. Begin it before deciding which blobs are unreferenced: a
    /// blob a `put` hands out after that is never removed by this sweep.
    pub fn begin_sweep(&self) -> Sweep<'_> {
        let one = self.sweeper.lock().unwrap_or_else(|p| p.into_inner());
        *self.fresh_lock() = Some(HashSet::new());
        Sweep {
            store: self,
            _one_at_a_time: one,
        }
    }

    fn fresh_lock(&self) -> MutexGuard<'_, Option<HashSet<Hash>>> {
        // The set only ever grows during a sweep; a panic elsewhere cannot
        // leave it in a state that matters.
        self.fresh.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `hash` as handed out (see [`Sweep::remove`]); called by every
    /// `put` before it looks whether the blob exists.
    pub(super) fn mark_fresh(&self, hash: &Hash) {
        if let Some(f) = self.fresh_lock().as_mut() {
            f.insert(*hash);
        }
    }

    /// Where the blob named `hash` lives.
    pub fn path_of(&self, hash: &Hash) -> PathBuf {
        let h = hex(hash);
        self.dir.join(&h[..2]).join(&h[2..])
    }

    /// The folder where blobs are written before they are renamed into
    /// place ([`TMP_DIR`]); cleared by [`BlobStore::clear_tmp`]. Readers
    /// put a temporary copy there too (an unnamed file, gone when closed).
    pub fn tmp_dir(&self) -> PathBuf {
        self.dir.join(TMP_DIR)
    }

    /// True when the blob is present (its content is not checked).
    pub fn contains(&self, hash: &Hash) -> bool {
        self.path_of(hash).exists()
    }

    /// Stores everything `src` yields (`size_hint` bytes expected) and
    /// returns the digest and the byte count.
    ///
    /// After `Ok` the blob is complete under its name (and on stable storage
    /// when the store was opened with `sync`). After `Err` nothing is stored
    /// under any name; a temporary file may remain in `tmp/` until the next
    /// `open` of the state dir clears it.
    pub fn put(&self, src: &mut dyn Read, size_hint: u64) -> Result<(Hash, u64), BlobError> {
        if size_hint <= IN_MEMORY_LIMIT {
            let mut data = Vec::with_capacity(size_hint as usize);
            src.read_to_end(&mut data).map_err(|source| BlobError::Io {
                path: PathBuf::from("<source file>"),
                source,
            })?;
            let hash = *blake3::hash(&data).as_bytes();
            self.mark_fresh(&hash);
            if !self.contains(&hash) {
                self.write_new(&hash, |f| f.write_all(&data))?;
            }
            return Ok((hash, data.len() as u64));
        }
        let tmp = self.tmp_path();
        let result = (|| {
            let mut out = File::create(&tmp).map_err(io_err(&tmp))?;
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; CHUNK];
            let mut total = 0u64;
            loop {
                let n = src.read(&mut buf).map_err(|source| BlobError::Io {
                    path: PathBuf::from("<source file>"),
                    source,
                })?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                out.write_all(&buf[..n]).map_err(io_err(&tmp))?;
                total += n as u64;
            }
            let hash = *hasher.finalize().as_bytes();
            if self.sync {
                out.sync_all().map_err(io_err(&tmp))?;
            }
            Ok((hash, total))
        })();
        match result {
            Ok((hash, total)) => {
                self.mark_fresh(&hash);
                if self.contains(&hash) {
                    let _ = fs::remove_file(&tmp);
                } else {
                    self.install(&tmp, &hash)?;
                }
                Ok((hash, total))
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    pub(super) fn tmp_path(&self) -> PathBuf {
        let n = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        self.dir
            .join(TMP_DIR)
            .join(format!("{}.{}", std::process::id(), n))
    }

    fn write_new(
        &self,
        hash: &Hash,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> Result<(), BlobError> {
        let tmp = self.tmp_path();
        let written = (|| {
            let mut out = File::create(&tmp)?;
            fill(&mut out)?;
            if self.sync {
                out.sync_all()?;
            }
            Ok(())
        })();
        if let Err(source) = written {
            let _ = fs::remove_file(&tmp);
            return Err(BlobError::Io { path: tmp, source });
        }
        self.install(&tmp, hash)
    }

    pub(super) fn install(&self, tmp: &Path, hash: &Hash) -> Result<(), BlobError> {
        let dest = self.path_of(hash);
        let parent = dest.parent().unwrap_or(&self.dir).to_path_buf();
        let new_parent = !parent.is_dir();
        let done = fs::create_dir_all(&parent).and_then(|()| fs::rename(tmp, &dest));
        if let Err(source) = done {
            let _ = fs::remove_file(tmp);
            return Err(BlobError::Io { path: dest, source });
        }
        if self.sync {
            File::open(&parent)
                .and_then(|d| d.sync_all())
                .map_err(io_err(&parent))?;
            // A fan-out directory made just now is itself an entry of the
            // blob directory: without this its blobs could vanish with it.
            if new_parent {
                File::open(&self.dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io_err(&self.dir))?;
            }
        }
        Ok(())
    }

    /// True when the store was opened with `sync` (`opfs mount --sync`):
    /// callers that must order their own writes before an index commit
    /// (the rewind executor) make them durable too.
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// Checks that the blob exists and hashes to its name, reading it once.
    ///
    /// Errors: [`BlobError::Missing`], [`BlobError::Corrupt`], or I/O.
    pub fn verify(&self, hash: &Hash) -> Result<u64, BlobError> {
        let path = self.path_of(hash);
        let mut f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(BlobError::Missing(hex(hash)))
            }
            Err(source) => return Err(BlobError::Io { path, source }),
        };
        let mut hasher = blake3::Hasher::new();
        let n = io::copy(&mut f, &mut hasher).map_err(io_err(&path))?;
        let actual = *hasher.finalize().as_bytes();
        if &actual != hash {
            return Err(BlobError::Corrupt {
                hash: hex(hash),
                actual: hex(&actual),
            });
        }
        Ok(n)
    }

    /// Opens the blob for reading after checking its content against its
    /// name, so a caller never copies wrong bytes into the project.
    pub fn open_verified(&self, hash: &Hash) -> Result<File, BlobError> {
        self.verify(hash)?;
        let path = self.path_of(hash);
        File::open(&path).map_err(io_err(&path))
    }

    /// Reads the whole blob after checking it.
    pub fn read(&self, hash: &Hash) -> Result<Vec<u8>, BlobError> {
        let path = self.path_of(hash);
        let data = match fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(BlobError::Missing(hex(hash)))
            }
            Err(source) => return Err(BlobError::Io { path, source }),
        };
        let actual = *blake3::hash(&data).as_bytes();
        if &actual != hash {
            return Err(BlobError::Corrupt {
                hash: hex(hash),
                actual: hex(&actual),
            });
        }
        Ok(data)
    }

    /// The range pack of `turn` (see [`PACKS_DIR`]).
    pub fn pack_path(&self, turn: u64) -> PathBuf {
        self.dir.join(PACKS_DIR).join(turn.to_string())
    }

    /// Appends `bytes` to the range pack of `turn` with one `write(2)`
    /// (creating the pack, and the packs folder, if needed) and returns the
    /// byte offset they start at. With `sync` the pack (and the folder
    /// when the pack was created) is fsynced before this returns. After
    /// `Err` the pack may end with a part of `bytes` no row refers to:
    /// harmless, the next append starts after it.
    ///
    /// Errors: [`BlobError::Io`] naming the pack (ENOSPC when the disk is
    /// full).
    pub fn append_pack(&self, turn: u64, bytes: &[u8]) -> Result<u64, BlobError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.pack_path(turn);
        let open = || {
            fs::OpenOptions::new()
                .append(true)
                .create(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(&path)
        };
        let mut f = match open() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let dir = self.dir.join(PACKS_DIR);
                fs::create_dir_all(&dir).map_err(io_err(&dir))?;
                open()
            }
            other => other,
        }
        .map_err(io_err(&path))?;
        let at = f.metadata().map_err(io_err(&path))?.len();
        f.write_all(bytes).map_err(io_err(&path))?;
        if self.sync {
            f.sync_data().map_err(io_err(&path))?;
            if at == 0 {
                let dir = self.dir.join(PACKS_DIR);
                File::open(&dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io_err(&dir))?;
            }
        }
        Ok(at)
    }

    /// The `len` bytes at `offset` of the range pack of `turn`, checked
    /// against `hash`.
    ///
    /// Errors: [`BlobError::Missing`] when the pack is gone or shorter,
    /// [`BlobError::Corrupt`] when the bytes do not hash to `hash`,
    /// [`BlobError::Io`] naming the pack when it cannot be read.
    pub fn read_packed(
        &self,
        turn: u64,
        offset: u64,
        len: u64,
        hash: &Hash,
    ) -> Result<Vec<u8>, BlobError> {
        use std::os::unix::fs::FileExt;
        let path = self.pack_path(turn);
        let missing = || {
            BlobError::Missing(format!(
                "{} (the {len} bytes at {offset} of range pack {})",
                hex(hash),
                path.display()
            ))
        };
        let f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(missing()),
            Err(source) => return Err(BlobError::Io { path, source }),
        };
        let mut data = vec![0u8; usize::try_from(len).map_err(|_| missing())?];
        match f.read_exact_at(&mut data, offset) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(missing()),
            Err(source) => return Err(BlobError::Io { path, source }),
        }
        let actual = *blake3::hash(&data).as_bytes();
        if &actual != hash {
            return Err(BlobError::Corrupt {
                hash: hex(hash),
                actual: hex(&actual),
            });
        }
        Ok(data)
    }

    /// Removes (or, with `dry_run`, counts) the range packs of the turns
    /// before `cut` (after gc dropped their rows); returns `(files,
    /// bytes)`. Packs that cannot be removed are left for the next gc;
    /// names that are not turn numbers are left alone (`opfs verify`
    /// reports them).
    pub fn remove_packs_before(&self, cut: u64, dry_run: bool) -> (u64, u64) {
        let mut removed = (0, 0);
        let Ok(entries) = fs::read_dir(self.dir.join(PACKS_DIR)) else {
            return removed;
        };
        for e in entries.flatten() {
            let Some(turn) = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            if turn < cut {
                let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                if dry_run || fs::remove_file(e.path()).is_ok() {
                    removed.0 += 1;
                    removed.1 += len;
                }
            }
        }
        removed
    }

    /// Total bytes of all blob files (a walk of the blob directory).
    pub fn disk_usage(&self) -> u64 {
        let mut total = 0;
        if let Ok(dirs) = fs::read_dir(&self.dir) {
            for d in dirs.flatten() {
                if let Ok(files) = fs::read_dir(d.path()) {
                    for f in files.flatten() {
                        total += f.metadata().map(|m| m.len()).unwrap_or(0);
                    }
                }
            }
        }
        total
    }

    /// Removes leftover temporary files (from a crash during `put`).
    pub fn clear_tmp(&self) {
        if let Ok(entries) = fs::read_dir(self.dir.join(TMP_DIR)) {
            for e in entries.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_dedups_and_verifies() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = BlobStore::open(dir.path(), false).expect("open");
        let (h1, n1) = store.put(&mut &b"hello"[..], 5).expect("put");
        let (h2, _) = store.put(&mut &b"hello"[..], 5).expect("put again");
        assert_eq!(h1, h2);
        assert_eq!(n1, 5);
        assert_eq!(store.read(&h1).expect("read"), b"hello");
        // Corrupt it: reads and verify must refuse.
        fs::write(store.path_of(&h1), b"HELLO").expect("corrupt");
        assert!(matches!(store.read(&h1), Err(BlobError::Corrupt { .. })));
        assert!(matches!(store.verify(&h1), Err(BlobError::Corrupt { .. })));
        let missing = [7u8; 32];
        assert!(matches!(store.read(&missing), Err(BlobError::Missing(_))));
    }

    #[test]
    fn a_sweep_never_removes_a_blob_a_put_handed_out_since_it_began() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = BlobStore::open(dir.path(), false).expect("open");
        let big: Vec<u8> = (0..(IN_MEMORY_LIMIT as usize + 10))
            .map(|i| (i % 253) as u8)
            .collect();
        let (old, _) = store.put(&mut &b"old"[..], 3).expect("put");
        let (gone, _) = store.put(&mut &b"gone"[..], 4).expect("put");
        let (old_big, _) = store.put(&mut &big[..], big.len() as u64).expect("put big");
        let sweep = store.begin_sweep();
        // A capture dedups against a blob the sweep thinks unreferenced:
        // it is handed out again, so the sweep leaves it.
        assert_eq!(store.put(&mut &b"old"[..], 3).expect("put").0, old);
        assert_eq!(
            store
                .put(&mut &big[..], big.len() as u64)
                .expect("put big")
                .0,
            old_big
        );
        assert!(!sweep.remove(&old).expect("remove"));
        assert!(!sweep.remove(&old_big).expect("remove"));
        assert!(store.contains(&old) && store.contains(&old_big));
        // What no put handed out goes; a put after that writes it again.
        assert!(sweep.remove(&gone).expect("remove"));
        assert!(!store.contains(&gone));
        store.put(&mut &b"gone"[..], 4).expect("put again");
        assert!(store.contains(&gone));
        drop(sweep);
        // The next sweep starts with nothing marked.
        let sweep = store.begin_sweep();
        assert!(sweep.remove(&old).expect("remove"));
        assert!(!store.contains(&old));
    }

    #[test]
    fn large_put_streams() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = BlobStore::open(dir.path(), true).expect("open");
        let data: Vec<u8> = (0..(IN_MEMORY_LIMIT as usize + 12345))
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let (h, n) = store
            .put(&mut &data[..], IN_MEMORY_LIMIT + 1)
            .expect("put big");
        assert_eq!(n as usize, data.len());
        assert_eq!(h, *blake3::hash(&data).as_bytes());
        assert_eq!(store.verify(&h).expect("verify"), n);
        assert_eq!(
            fs::read_dir(dir.path().join("tmp")).expect("tmp").count(),
            0
        );
    }
}
