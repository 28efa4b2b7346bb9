//! The overlay's open handles: an upper file (the passthrough's
//! [`Handle`], with its capture epoch and ranged flag), a lower file opened
//! read-only, or a directory with its merged listing.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use fuser::FileType;

use crate::handle::Handle;

/// One entry of a directory handle's listing.
pub(super) struct DirItem {
    pub(super) name: Vec<u8>,
    pub(super) kind: FileType,
    /// The inode number `readdir` shows (`dir.rs`'s `LOWER_UNKNOWN` for a
    /// lower entry numbered when it is sent).
    pub(super) ino: u64,
}

/// Where a lower handle's reads go.
pub(super) enum LowerSource {
    /// Not asked yet.
    Unopened,
    /// The file [`super::Lower::open`] opened.
    File(Arc<dyn super::LowerFile>),
    /// The layer keeps no files open: [`super::Lower::read_at`] of the
    /// path.
    ReadAt,
}

/// One open handle.
pub(super) enum OHandle {
    /// A file with an upper entry (every handle that may write is one).
    Upper(Handle),
    /// A lower file opened read-only. Reads come from the lower layer until
    /// the node is copied up (through another handle), then from the upper
    /// copy, so the handle sees the writes made since.
    Lower {
        ino: u64,
        /// The lower path at open.
        path: Vec<u8>,
        /// The lower file, opened at the handle's first read that reaches
        /// the lower layer (an open whose pages the kernel holds costs the
        /// lower layer nothing).
        file: Mutex<LowerSource>,
        /// The upper copy, opened read-only once the node has one.
        upper: Mutex<Option<Arc<OwnedFd>>>,
    },
    /// A directory: the merged listing, taken at the first `readdir` from
    /// offset 0 (so `rewinddir` sees changes), with `.` and `..` first;
    /// the offset of entry `i` is `i + 1`.
    Dir {
        entries: Mutex<Option<Arc<Vec<DirItem>>>>,
    },
}

impl OHandle {
    /// The upper file handle, if this is one.
    pub(super) fn upper(&self) -> Option<&Handle> {
        match self {
            OHandle::Upper(h) => Some(h),
            _ => None,
        }
    }
}
