//! The passthrough filesystem: serves the backing directory as it is and
//! calls the mutation hook before every mutation.
//!
//! - `mod.rs` (here): what the passthrough asks of the kernel at init
//!   ([`Caps`]); the requests are decoded and answered by the crate's one
//!   front end (`front.rs`), which calls the operations below.
//! - `ops.rs`: [`State`] (inodes, handles, the quiesce gate, the hook, the
//!   cache settings) and the namespace and metadata operations
//!   ([`crate::front::Names`], [`crate::front::Meta`]).
//! - `io.rs`: file I/O ([`crate::front::Files`]); `dir.rs`: directory I/O,
//!   listings ([`crate::front::Dirs`]).
//! - `attr.rs`: `stat` ↔ FUSE conversions (attributes, times, devices).
//! - `cache.rs`: what [`crate::Controller::invalidate`] needs from the
//!   passthrough (the crate's `Invalidate` trait).
//!
//! Every mutating operation takes the read side of the quiesce gate, asks
//! the hook, and only then touches the backing directory; it holds the gate
//! until the backing call returned. Read-only operations never call the hook.

pub(crate) mod attr;
mod cache;
mod dir;
mod io;
mod ops;

use fuser::InitFlags;

pub(crate) use ops::{State, Ttls};

use crate::front::{Caps, Granted};

impl Caps for State {
    const TRACE: &'static str = "";
    /// READDIRPLUS only at the start of a listing or after a lookup in it;
    /// parallel lookups and readdirs in one directory. A symlink's target
    /// never changes for one inode (a rewind's `inval_inode` drops the
    /// cached target with the pages): `CACHE_SYMLINKS`. The kernel drops
    /// an inode's cached pages (and cached symlink target) when a
    /// refreshed mtime or size differs: `AUTO_INVAL_DATA`, a backstop for
    /// `FOPEN_KEEP_CACHE` and `CACHE_SYMLINKS`.
    const ALWAYS: InitFlags = InitFlags::FUSE_READDIRPLUS_AUTO
        .union(InitFlags::FUSE_DO_READDIRPLUS)
        .union(InitFlags::FUSE_PARALLEL_DIROPS)
        .union(InitFlags::FUSE_CACHE_SYMLINKS)
        .union(InitFlags::FUSE_AUTO_INVAL_DATA);

    /// No OPEN, RELEASE or FLUSH for files, every file's pages kept; no
    /// OPENDIR/RELEASEDIR, every listing cached: each only while the watch
    /// invalidates what changes behind the mount (docs/coherence.md).
    /// `FUSE_HANDLE_KILLPRIV_V2` where the options ask for it.
    fn wanted(&self) -> InitFlags {
        self.wanted
    }

    fn granted(&self) -> &Granted {
        &self.granted
    }
}
