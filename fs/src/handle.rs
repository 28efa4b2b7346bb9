//! Open file and directory handles.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// Epoch of a handle that was not opened for writing: never equal to a real
/// epoch, so a write through it (which the kernel should not send) is
/// still reported.
pub(crate) const NO_EPOCH: u64 = u64::MAX;

/// One open handle.
pub(crate) struct Handle {
    /// The real (non-`O_PATH`) fd.
    pub(crate) fd: OwnedFd,
    /// The FUSE inode the handle was opened on.
    pub(crate) ino: u64,
    /// The hook epoch in which the handle's content was last reported; a
    /// write compares it with the hook's current epoch (one atomic load).
    pub(crate) epoch: AtomicU64,
    /// Opened as ranged (see `MutationHook::range_min`): each write reports
    /// the range it overwrites instead of relying on the epoch.
    pub(crate) ranged: bool,
    /// Serialises seek + getdents on directory handles.
    pub(crate) dir_lock: Mutex<()>,
    /// The handle changed the file since the hook last heard about it
    /// (`after`): set by opening for writing and by every write.
    dirty: AtomicBool,
    /// Opened for writing (a real epoch at open): the kernel may write
    /// mmap-dirtied pages back through it.
    pub(crate) writable: bool,
    /// `fd` was opened with `O_DIRECT` (the caller's open asked for it).
    pub(crate) direct: bool,
    /// The same open with `O_DIRECT` flipped, made on the first read or
    /// write whose mode differs from the open's (a page-cache writeback
    /// through a direct handle, or `fcntl(F_SETFL)` on the caller's file);
    /// see the crate README, "Direct I/O".
    pub(crate) flipped: OnceLock<OwnedFd>,
}

impl Handle {
    pub(crate) fn new(fd: OwnedFd, ino: u64, epoch: u64) -> Handle {
        Handle {
            fd,
            ino,
            epoch: AtomicU64::new(epoch),
            ranged: false,
            dir_lock: Mutex::new(()),
            dirty: AtomicBool::new(epoch != NO_EPOCH),
            writable: epoch != NO_EPOCH,
            direct: false,
            flipped: OnceLock::new(),
        }
    }

    /// The handle, noting whether its fd was opened with `O_DIRECT`.
    pub(crate) fn with_direct(mut self, direct: bool) -> Handle {
        self.direct = direct;
        self
    }

    /// A handle opened as ranged (see `MutationHook::range_min`).
    pub(crate) fn new_ranged(fd: OwnedFd, ino: u64, epoch: u64) -> Handle {
        Handle {
            ranged: true,
            ..Handle::new(fd, ino, epoch)
        }
    }

    /// Notes that the handle changed the file.
    pub(crate) fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// True (once) when the handle changed the file since the last call.
    pub(crate) fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::AcqRel)
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub(crate) fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Release);
    }
}

/// The handle table: FUSE file handle numbers → handles (the passthrough's
/// [`Handle`], or another filesystem's own handle type `H`).
pub(crate) struct Handles<H = Handle> {
    map: RwLock<HashMap<u64, Arc<H>>>,
    next: AtomicU64,
}

impl<H> Default for Handles<H> {
    fn default() -> Self {
        Handles {
            map: RwLock::default(),
            next: AtomicU64::new(0),
        }
    }
}

impl<H> Handles<H> {
    /// Stores `handle`; returns its number (never 0).
    pub(crate) fn insert(&self, handle: H) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, Arc::new(handle));
        fh
    }

    pub(crate) fn get(&self, fh: u64) -> Option<Arc<H>> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh)
            .cloned()
    }

    pub(crate) fn remove(&self, fh: u64) -> Option<Arc<H>> {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh)
    }

    /// Every handle whose `pick` answers `Some`, mapped. O(open handles).
    pub(crate) fn filter_map<T>(&self, pick: impl Fn(&Arc<H>) -> Option<T>) -> Vec<T> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(pick)
            .collect()
    }
}

impl Handles<Handle> {
    /// The handles open for writing: their inodes are the only files that
    /// can hold dirty pages (a shared writable mapping keeps its handle open
    /// until it is unmapped, and unmapping writes back). O(open handles).
    pub(crate) fn writable(&self) -> Vec<Arc<Handle>> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|h| h.writable)
            .cloned()
            .collect()
    }
}
