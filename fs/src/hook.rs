//! The seam between the FUSE layer and whatever journals its mutations.
//!
//! The filesystem calls [`MutationHook::before`] before any mutation reaches
//! the backing directory and performs the mutation only if the hook returns
//! `Ok`. It holds the read side of the mount's quiesce lock (see
//! [`crate::Controller::quiesce`]) from the call to `before` until the
//! mutation has been applied to the backing directory, so a holder of the
//! write side sees no mutation half done.
//!
//! Paths are raw bytes relative to the backing root: no leading `/`, no `.`
//! or `..` components, components joined by a single `/`. The root itself is
//! the empty path. Names are passed through byte for byte (non-UTF-8 names
//! are legal).

/// One mutation about to be applied to the backing directory.
///
/// Each variant names every path whose state (type, content, mode, target)
/// the mutation can change; the hook decides what to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation<'a> {
    /// The bytes or size of the regular file at `path` may change: an open
    /// for writing (`O_WRONLY`, `O_RDWR`, `O_TRUNC`), `setattr` of the size,
    /// `fallocate`, the destination of `copy_file_range`, or a `write` through
    /// a handle whose capture epoch is older than [`MutationHook::epoch`].
    /// Without OPEN (`Options::no_open`): the first of those requests on
    /// the file in each epoch.
    Content {
        /// The file's path.
        path: &'a [u8],
    },
    /// Only the bytes `[offset, offset + len)` of the regular file at `path`
    /// may change (and its length may grow past them); every other byte
    /// stays. Reported instead of [`Mutation::Content`] before each `write`,
    /// `copy_file_range` and `fallocate` through a handle the layer opened
    /// as ranged (see [`MutationHook::range_min`]), and for a truncation
    /// (`setattr` of the size) of such a file, as the range from the new
    /// size to `u64::MAX`. Offsets and lengths are in bytes; `offset + len`
    /// may exceed the file's length.
    Range {
        /// The file's path.
        path: &'a [u8],
        /// First byte that may change.
        offset: u64,
        /// Number of bytes that may change.
        len: u64,
    },
    /// The metadata of the entry at `path` may change: mode, owner,
    /// extended attributes. (A change of timestamps alone is not reported.)
    Metadata {
        /// The entry's path.
        path: &'a [u8],
    },
    /// A new entry is about to appear at `path` (create, mknod, mkdir,
    /// symlink, or the new name of a link).
    Create {
        /// The new entry's path.
        path: &'a [u8],
    },
    /// The entry at `path` is about to be removed (unlink, rmdir).
    Remove {
        /// The entry's path.
        path: &'a [u8],
    },
    /// The entry at `from` is about to move to `to`. Every path under `from`
    /// (if it is a directory) moves with it, and whatever `to` held is
    /// replaced. With `exchange` (`RENAME_EXCHANGE`) the two entries swap.
    Rename {
        /// The old path.
        from: &'a [u8],
        /// The new path.
        to: &'a [u8],
        /// True for `RENAME_EXCHANGE`.
        exchange: bool,
    },
}

/// An errno value (`libc::EIO`, `libc::ENOSPC`, ...).
pub type Errno = i32;

/// The backing directories a [`Mutation::Remove`] or [`Mutation::Rename`]
/// is about to be applied in, as the layer holds them open (`O_PATH`
/// descriptors, valid for the duration of the hook call): the mutation
/// runs as `unlinkat(from, last component of path)` or
/// `renameat2(from, last component of from, to, last component of to)`.
/// A hook that reads the entries through these reads exactly what the
/// mutation changes, without resolving the paths from the root again.
#[derive(Debug, Clone, Copy)]
pub struct Parents<'a> {
    /// The directory holding the removed entry, or the rename's source.
    pub from: std::os::fd::BorrowedFd<'a>,
    /// The directory holding the rename's target; `None` for a removal.
    pub to: Option<std::os::fd::BorrowedFd<'a>>,
}

/// Called by the filesystem before every mutation.
///
/// Implementations must not call back into the mounted filesystem (that
/// would deadlock on the kernel's locks): they work on the backing directory
/// directly.
pub trait MutationHook: Send + Sync + 'static {
    /// Called before `mutation` reaches the backing directory.
    ///
    /// Returning `Err(errno)` fails the operation with that errno and leaves
    /// the backing directory untouched by it (fail closed).
    fn before(&self, mutation: &Mutation<'_>) -> Result<(), Errno>;

    /// [`MutationHook::before`] for a [`Mutation::Remove`] or
    /// [`Mutation::Rename`] of the passthrough layer, which also hands over
    /// the backing directories the mutation runs in ([`Parents`]; their
    /// paths are the parents of the mutation's paths as far as the layer
    /// knows). The default ignores them.
    fn before_in(&self, mutation: &Mutation<'_>, parents: Parents<'_>) -> Result<(), Errno> {
        let _ = parents;
        self.before(mutation)
    }

    /// Called after `mutation` has been applied to the backing directory
    /// (still under the quiesce lock), so the hook can remember what the
    /// mount left there (its fingerprint). For a file handle opened for
    /// writing, [`Mutation::Content`] is reported here at each `flush`
    /// (every close of a descriptor) and when the handle is released, not
    /// after each write; without OPEN (`Options::no_open`, no handles)
    /// after each write, `fallocate`, `copy_file_range` and `create`. Not
    /// called when the mutation failed.
    ///
    /// `now` is what the layer read right after the mutation (an `fstat` of
    /// the inode it holds for the path, or an `fstatat` of a new entry) for
    /// [`Mutation::Content`], [`Mutation::Metadata`] and
    /// [`Mutation::Create`], and of the entry now at `to` for a
    /// [`Mutation::Rename`] without `exchange` (`from` is then absent), so
    /// the hook need not stat the path again; `None` when the layer could
    /// not read it, for removals and for exchanges.
    fn after(&self, mutation: &Mutation<'_>, now: Option<&libc::stat>) {
        let _ = (mutation, now);
    }

    /// Called instead of [`MutationHook::after`] when a [`Mutation::Remove`]
    /// or [`Mutation::Rename`] that `before` agreed to failed in the
    /// backing directory (still under the quiesce lock): the entries are
    /// where they were. A hook that took something over for the mutation
    /// (the journal keeps a removed file's inode) gives it back here.
    fn failed(&self, mutation: &Mutation<'_>) {
        let _ = mutation;
    }

    /// The current capture epoch. A file handle opened for writing records the
    /// epoch at open; a later `write` through it when the epoch has changed
    /// reports [`Mutation::Content`] again first. The journal bumps the epoch
    /// at every turn boundary.
    fn epoch(&self) -> u64;

    /// Regular files with at least this many bytes and a single link are
    /// opened for writing (without `O_TRUNC`) as *ranged* handles: no
    /// [`Mutation::Content`] at open, a [`Mutation::Range`] before each
    /// write instead, so a small write into a huge file costs the bytes it
    /// overwrites, not the file. `u64::MAX` (the default) turns this off.
    fn range_min(&self) -> u64 {
        u64::MAX
    }

    /// Called once at mount when the layer runs without OPEN
    /// (`Options::no_open` in effect): files opened through the mount then
    /// hold no descriptor of the backing inode, so a lease on it (or any
    /// other check of who has it open) cannot see them, and a write through
    /// such a descriptor after a removal reaches the removed inode. A hook
    /// that keeps removed inodes as pre-images must stop doing so.
    fn opens_unseen(&self) {}
}

/// A hook that records nothing: the mount is a plain passthrough.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHook;

impl MutationHook for NoHook {
    fn before(&self, _mutation: &Mutation<'_>) -> Result<(), Errno> {
        Ok(())
    }

    fn epoch(&self) -> u64 {
        0
    }
}
