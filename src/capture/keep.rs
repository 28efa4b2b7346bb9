//! Removals keep the inode: a large regular file that loses its last name
//! through the mount (an unlink, or a rename over it) is linked into the
//! state dir's `kept/` folder instead of being read, hashed and copied on
//! the request path (`docs/design.md`, "Removals keep the inode").
//!
//! Guards, all checked before the record is written: the file is a regular
//! file of more than [`Keeper::min`] bytes with one link, on the kept
//! folder's filesystem; a write lease on the capture's read-only
//! descriptor is granted (nobody else has the inode open or mapped); after
//! the link the inode has exactly two links and the lease is unbroken.
//! Then the record "kept file N, hash pending" ([`Op::Kept`]) is appended
//! to the capture log, and the lease is held until the removal is done:
//!
//! - removal done, lease unbroken: the lease is released and the file is
//!   handed to the hashing thread. No name of it is left in the project
//!   and no descriptor of it outside the daemon.
//! - removal done, lease broken (someone opened the inode meanwhile; they
//!   wait for the lease), or the removal failed: the bytes are copied into
//!   the blob store now, an [`Op::Replace`] record naming the copy
//!   supersedes the kept one in the log, and only then is the lease (and
//!   the descriptor) given up.
//!
//! A kept record is resolved (hashed, made a blob, turned into an ordinary
//! record) at the latest by the group commit that moves it into the index,
//! and by a replay after a crash (`store::kept`).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{CaptureError, Inner, Journal};
use crate::paths::PathContext;
use crate::record::{Hash, PreImage, Stat};
use crate::store::kept::{copy_from_start, hash_file, resolve_one};
use crate::store::log::{Entry, Op};
use crate::store::IndexError;
use crate::tree::Tree;

/// Files of more than this many bytes are kept instead of copied when
/// removed, unless the daemon is told otherwise (`OPFS_KEEP_MIN`). Below
/// it a copy costs about what keeping costs (see `docs/bench/2026-12-02-cheaper-capture.md`).
pub const DEFAULT_KEEP_MIN: u64 = 256 << 10;

/// What the journal needs to keep inodes.
pub(super) struct Keeper {
    /// Files of more than this many bytes are kept.
    pub(super) min: u64,
    seq: AtomicU64,
    hasher: crossbeam_channel::Sender<(u64, File)>,
    hashed: Arc<Mutex<Hashed>>,
}

/// Results of the hashing thread.
#[derive(Default)]
pub(super) struct Hashed {
    done: HashMap<u64, (Hash, u64)>,
    /// Resolved by a commit before the thread got to them.
    gone: HashSet<u64>,
}

/// A kept file whose removal is under way: its lease is held.
pub(super) struct Leaving {
    file: File,
    id: u64,
    /// A group commit copied its bytes already (it could not wait).
    resolved: bool,
}

fn lock(m: &Mutex<Hashed>) -> MutexGuard<'_, Hashed> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Keeper {
    /// Keeps files of more than `min` bytes; starts the hashing thread
    /// (it ends when the keeper is dropped).
    pub(super) fn start(min: u64) -> Keeper {
        let (tx, rx) = crossbeam_channel::unbounded::<(u64, File)>();
        let hashed = Arc::new(Mutex::new(Hashed::default()));
        let out = Arc::clone(&hashed);
        let spawned = std::thread::Builder::new()
            .name("opfs-hash-kept".into())
            .spawn(move || {
                for (id, file) in rx {
                    let Ok(h) = hash_file(&file) else {
                        continue; // the commit hashes it again and reports
                    };
                    let mut out = lock(&out);
                    if !out.gone.remove(&id) {
                        out.done.insert(id, h);
                    }
                }
            });
        if let Err(e) = spawned {
            // Without the thread every kept file is hashed by the commit.
            log::warn!("cannot start the thread that hashes kept files: {e}");
        }
        Keeper {
            min,
            seq: AtomicU64::new(0),
            hasher: tx,
            hashed,
        }
    }
}

impl Inner {
    /// Resolves every pending kept record (hash, blob, ordinary record)
    /// before a group commit; notes the kept files to remove once it is
    /// committed. A record whose removal is still under way is resolved
    /// from the capture's descriptor by a copy (its lease is held, so the
    /// bytes cannot change; opening the kept file would break the lease,
    /// and the inode must not become a blob while the removal can still
    /// fail).
    pub(super) fn resolve_kept(&mut self) -> Result<(), IndexError> {
        let p = &mut self.pending;
        for i in 0..p.entries.len() {
            let Op::Kept { id } = p.entries[i].op else {
                continue;
            };
            let err = |source| IndexError::Kept {
                path: p.kept.path_of(id),
                source,
            };
            let e = &mut p.entries[i];
            if let Some(l) = self.leaving.values_mut().find(|l| l.id == id) {
                let size = match e.pre {
                    PreImage::File { size, .. } => size,
                    _ => 0,
                };
                let (blob, got) = copy_from_start(&p.blobs, &l.file, size).map_err(err)?;
                if let PreImage::File {
                    blob: b, size: s, ..
                } = &mut e.pre
                {
                    *b = blob;
                    *s = got;
                }
                e.op = Op::Record;
                l.resolved = true;
            } else {
                let hashed = p.hashed.as_ref().and_then(|h| {
                    let mut h = lock(h);
                    let got = h.done.remove(&id);
                    if got.is_none() {
                        h.gone.insert(id);
                    }
                    got
                });
                resolve_one(e, id, &p.kept, &p.blobs, hashed).map_err(err)?;
            }
            p.kept_done.push(id);
        }
        Ok(())
    }
}

impl<T: Tree> Journal<T> {
    /// Keeps files of more than `bytes` bytes instead of copying them when
    /// they are removed or renamed over (`u64::MAX`: never, the default).
    /// Starts the thread that hashes kept files.
    ///
    /// The caller must keep `SIGIO` from killing the process first (its
    /// default action): an `open` of a file while its removal is under way
    /// breaks the journal's lease, and the kernel signals the holder
    /// (`opfs_fs::lease`). The daemon installs a handler.
    pub fn set_keep_min(&mut self, bytes: u64) {
        self.keeper = (bytes != u64::MAX).then(|| Keeper::start(bytes));
        let hashed = self.keeper.as_ref().map(|k| Arc::clone(&k.hashed));
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        inner.pending.hashed = hashed;
    }

    /// Tries to keep the inode of `file` (open read-only, stat `st`, now
    /// at `path`, about to lose that name): lease, link into `kept/`,
    /// check. Returns the kept file's number and the lease-holding state,
    /// or `None` when a guard fails (the caller copies as before; nothing
    /// is left behind).
    pub(super) fn try_keep(&self, path: &[u8], file: &File, st: &Stat) -> Option<(u64, Leaving)> {
        let keeper = self.keeper.as_ref()?;
        if self.opens_unseen.load(Ordering::Acquire) {
            return None;
        }
        if st.size <= keeper.min || st.nlink != 1 || st.dev != self.kept.dev() {
            return None;
        }
        match opfs_fs::lease::take_write(file.as_fd()) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                log::debug!("no lease on {:?}: {e}", crate::paths::display(path));
                return None;
            }
        }
        let id = keeper.seq.fetch_add(1, Ordering::Relaxed);
        let give_up = |linked: bool| {
            if linked {
                self.kept.remove(id);
            }
            let _ = opfs_fs::lease::release(file.as_fd());
            None
        };
        // Numbers start over with each journal; a leftover of a crash was
        // removed by the replay, so a taken number is a foreign file.
        if let Err(e) = self.link_kept(path, file, st, id) {
            log::debug!("cannot keep {:?}: {e}", crate::paths::display(path));
            return give_up(false);
        }
        let two_links = file.metadata().is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.nlink() == 2
        });
        if !two_links || !opfs_fs::lease::write_held(file.as_fd()).unwrap_or(false) {
            return give_up(true);
        }
        let file = match file.try_clone() {
            Ok(f) => f,
            Err(_) => return give_up(true),
        };
        Some((
            id,
            Leaving {
                file,
                id,
                resolved: false,
            },
        ))
    }

    /// Links the inode of `file` (stat `st`, at `path`) into `kept/` as
    /// number `id`. The FUSE layer's descriptors (which `file` was opened
    /// through) may be on its private clone of the project's mount
    /// (`opfs_fs::Options::own_mount`), from which a link into the state
    /// dir fails with `EXDEV` even on one filesystem: then the same inode
    /// is linked through an `O_PATH` descriptor on the project's own mount
    /// (taking no open, so the lease stays unbroken), once its path is
    /// checked to still name that inode.
    ///
    /// Errors: the link fails, or the path names another inode now.
    fn link_kept(&self, path: &[u8], file: &File, st: &Stat, id: u64) -> std::io::Result<()> {
        let sync = self.blobs.is_sync();
        match self.kept.link(file, id, sync) {
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                let here = self.tree.open_path(path)?;
                let now = rustix::fs::fstat(&here)?;
                if now.st_dev != st.dev || now.st_ino != st.ino {
                    return Err(std::io::Error::other(
                        "the path names another inode on the project's mount",
                    ));
                }
                self.kept.link(&here, id, sync)
            }
            other => other,
        }
    }

    /// The removal (or rename over) of `path` is done (`done`) or failed:
    /// ends the keeping of its file, if it was kept. See the module docs.
    pub(super) fn end_leaving(&self, path: &[u8], done: bool) {
        let mut inner = self.lock();
        let Some(l) = inner.leaving.remove(path) else {
            return;
        };
        if l.resolved {
            return; // a commit copied it; dropping the fd releases the lease
        }
        if done && opfs_fs::lease::write_held(l.file.as_fd()).unwrap_or(false) {
            if let Some(k) = &self.keeper {
                if opfs_fs::lease::release(l.file.as_fd()).is_ok() {
                    crate::failpoint::failpoint("kept-after-removal");
                    let _ = k.hasher.send((l.id, l.file));
                }
                return;
            }
        }
        // Opened meanwhile, or still in the project: the bytes go into the
        // blob store now, before the lease (and so the opener) is let go.
        if let Err(e) = self.copy_kept(&mut inner, path, &l) {
            log::error!(
                "cannot copy the kept file {} of {:?}: {e}; it stays kept",
                self.kept.path_of(l.id).display(),
                crate::paths::display(path)
            );
        }
    }

    /// Copies kept file `l` into the blob store and supersedes its pending
    /// kept record with an [`Op::Replace`] naming the copy (appended to the
    /// log), then removes the kept file.
    fn copy_kept(&self, inner: &mut Inner, path: &[u8], l: &Leaving) -> Result<(), CaptureError> {
        let Some(i) = inner
            .pending
            .entries
            .iter()
            .position(|e| e.op == (Op::Kept { id: l.id }))
        else {
            return Ok(());
        };
        let PreImage::File {
            size, perm, ino, ..
        } = inner.pending.entries[i].pre
        else {
            return Ok(());
        };
        let (blob, size) = copy_from_start(&self.blobs, &l.file, size).at(path)?;
        // Out of the pending list before the append, which may commit: a
        // commit must not open the kept file while its lease is held.
        let kept = inner.pending.entries.remove(i);
        let mut entry = Entry::record(
            kept.turn,
            kept.path.clone(),
            PreImage::File {
                blob,
                size,
                perm,
                ino,
            },
            None,
        )
        .with_meta(kept.meta.clone());
        entry.op = Op::Replace;
        if let Err(e) = inner.append(entry) {
            let at = i.min(inner.pending.entries.len());
            inner.pending.entries.insert(at, kept);
            return Err(e);
        }
        self.kept.remove(l.id);
        Ok(())
    }
}
