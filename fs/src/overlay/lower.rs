//! The lower layer of an overlay: a read-only tree addressed by path.
//!
//! **Paths** are project-relative byte strings, as in [`crate::Mutation`]:
//! components joined by `/`, with no leading or trailing `/` and no `.` or
//! `..` component; `b""` is the root. They are bytes, not UTF-8.
//!
//! **Absence is not an error.** Every method answers `Ok(None)` when the
//! path does not exist in the lower layer (including when a parent is
//! missing or is not a directory); the overlay then looks no further and,
//! for a name it also lacks, answers `ENOENT`. `Err` is for real failures
//! (an unreadable pre-image, a damaged index); the overlay turns it into an
//! errno with the crate's one mapping (an error carrying an OS code keeps
//! it, anything else becomes `EIO`).
//!
//! **A file's bytes by descriptor.** [`Lower::with_file`] lends the
//! overlay a read-only descriptor holding a file's bytes (the project's own
//! file, or a stored pre-image), so a copy-up can share its extents with
//! `FICLONE` instead of copying them; a layer that holds some bytes
//! elsewhere (in a database row, rebuilt from ranges) says so and the
//! overlay reads them with [`Lower::read_at`].
//!
//! Extended attributes are not part of this interface yet.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::SystemTime;

/// The type of a lower entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
}

impl Kind {
    /// The kind of a `st_mode` (its `S_IFMT` bits); `None` for a type
    /// Linux does not define.
    pub fn from_mode(mode: u32) -> Option<Kind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDevice,
            libc::S_IFBLK => Kind::BlockDevice,
            _ => return None,
        })
    }
}

/// What the overlay shows for a lower entry that was not copied up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// The entry's type.
    pub kind: Kind,
    /// Permission bits (`mode & 0o7777`).
    pub perm: u32,
    /// Bytes: a file's length, a symlink's target length, 0 otherwise.
    pub size: u64,
    /// Owner user id.
    pub uid: u32,
    /// Owner group id.
    pub gid: u32,
    /// Last content change. The overlay shows it as mtime and atime.
    pub mtime: SystemTime,
    /// Last status change (`st_ctime`). Tools that cache `stat` results,
    /// git's index among them, compare it: a lower layer that serves
    /// another directory's files should pass that directory's ctime on.
    pub ctime: SystemTime,
    /// Hard links to the entry within the lower layer (1 for most files).
    pub nlink: u32,
    /// The device number (`dev_t`) of a character or block device; 0
    /// otherwise.
    pub rdev: u64,
    /// The lower inode's identity, stable for the life of the [`Lower`]:
    /// two paths with equal origins are hard links of one file. The
    /// overlay's origin map keys on it, so an entry keeps its FUSE inode
    /// number across copy-up. An origin below 2^62 is also the inode
    /// number the overlay shows for the entry while that number is free
    /// (a lower layer over a real directory passes its inode numbers, so
    /// `st_ino` through the overlay equals the directory's own); a larger
    /// origin is shown as `2^63 | origin`.
    pub origin: u64,
}

/// What [`Lower::with_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lent {
    /// The callback ran on a descriptor of the file; the outcome of its
    /// last run is the answer (a layer may run it again, see
    /// [`Lower::with_file`]).
    Fd,
    /// The layer has no descriptor holding exactly these bytes: the caller
    /// reads them with [`Lower::read_at`]. The callback did not run.
    ReadAt,
}

/// A lower regular file opened once by [`Lower::open`] and read by offset
/// for as long as the overlay's handle on it lives.
pub trait LowerFile: Send + Sync {
    /// Reads the file's bytes in the lower layer from byte `offset` into
    /// `buf`; returns the bytes read, fewer than `buf.len()` only at the end
    /// of the file (0 at or past it). The bytes are the layer's, as
    /// [`Lower::read_at`] of the path would give them, even if the file the
    /// layer opened was changed since (a layer over a live directory checks
    /// and answers from elsewhere then).
    ///
    /// Errors: a failure reading the layer.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
}

/// What [`Lower::open`] did.
pub enum LowerOpen {
    /// The file, opened: its reads cost no lookup of the path.
    File(Box<dyn LowerFile>),
    /// The layer keeps no open files: the caller reads the path with
    /// [`Lower::read_at`].
    ReadAt,
}

impl std::fmt::Debug for LowerOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LowerOpen::File(_) => "LowerOpen::File",
            LowerOpen::ReadAt => "LowerOpen::ReadAt",
        })
    }
}

/// One entry of a lower directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// A single path component (no `/`), never `.` or `..`.
    pub name: Vec<u8>,
    /// The entry's type.
    pub kind: Kind,
}

/// A read-only tree the overlay serves beneath its upper layer: for a
/// worktree, the project as it was at the start of a turn.
///
/// Implementations must be safe to call from several FUSE threads at once.
/// Answers must not change while the overlay is mounted: the lower layer is
/// a fixed snapshot, and the overlay caches what it read.
pub trait Lower: Send + Sync {
    /// The attributes of `path`, not following a final symlink; `Ok(None)`
    /// if it does not exist.
    ///
    /// Errors: a failure reading the layer (not absence).
    fn getattr(&self, path: &[u8]) -> io::Result<Option<Attr>>;

    /// The attributes of `name` (one component) in directory `dir`;
    /// `Ok(None)` if either does not exist. The default asks
    /// [`Lower::getattr`] for `dir/name`; an implementation with a cheaper
    /// per-directory lookup may override it.
    ///
    /// Errors: as [`Lower::getattr`].
    fn lookup(&self, dir: &[u8], name: &[u8]) -> io::Result<Option<Attr>> {
        self.getattr(&crate::inode::child(dir, name))
    }

    /// The attributes of each of `names` (single components) in directory
    /// `dir`, in their order, as [`Lower::lookup`] of each would answer.
    /// The default looks each up; a layer with a cost per call (not per
    /// name) may answer all at once. The overlay asks it for the entries
    /// of one `readdirplus` reply.
    ///
    /// Errors: as [`Lower::getattr`].
    fn lookup_all(&self, dir: &[u8], names: &[&[u8]]) -> io::Result<Vec<Option<Attr>>> {
        names.iter().map(|name| self.lookup(dir, name)).collect()
    }

    /// Reads the regular file `path` from byte `offset` into `buf`; returns
    /// the bytes read, fewer than `buf.len()` only at the end of the file
    /// (0 at or past it). `Ok(None)` if `path` does not exist.
    ///
    /// Errors: `EISDIR` for a directory, `EINVAL` for another non-file; a
    /// failure reading the layer.
    fn read_at(&self, path: &[u8], offset: u64, buf: &mut [u8]) -> io::Result<Option<usize>>;

    /// Opens the regular file `path` for the reads of one overlay handle
    /// (at the first read of an `open(2)` of a lower file that the kernel
    /// does not answer from its cache), or for one READ when the mount runs
    /// without OPEN (crate README, "No open"): the layer resolves the path
    /// and does any per-file checking once here instead of at every read.
    /// `Ok(None)` if `path` does not exist. The default keeps nothing open
    /// (`LowerOpen::ReadAt`).
    ///
    /// Errors: `EISDIR` for a directory, `EINVAL` for another non-file; a
    /// failure reading the layer.
    fn open(&self, path: &[u8]) -> io::Result<Option<LowerOpen>> {
        let _ = path;
        Ok(Some(LowerOpen::ReadAt))
    }

    /// Lends `use_fd` a read-only descriptor of the regular file `path`
    /// whose bytes, from offset 0 to its end, are exactly the file's bytes
    /// in this layer (holes read as zeros); the descriptor is closed after
    /// the call. `Ok(None)` if `path` does not exist. A layer that must
    /// make sure the bytes did not change under the callback (it serves
    /// another directory that may be written meanwhile) may run `use_fd`
    /// again, on another descriptor: the callback must start from scratch
    /// each time. The default has no descriptors (`Lent::ReadAt`).
    ///
    /// Errors: as [`Lower::read_at`], and whatever `use_fd` returns.
    fn with_file(
        &self,
        path: &[u8],
        use_fd: &mut dyn FnMut(BorrowedFd<'_>) -> io::Result<()>,
    ) -> io::Result<Option<Lent>> {
        let _ = (path, use_fd);
        Ok(Some(Lent::ReadAt))
    }

    /// The entries of directory `path`, without `.` and `..`, in any order
    /// (the overlay merges them with the upper layer's and sorts); `Ok(None)`
    /// if it does not exist.
    ///
    /// Errors: `ENOTDIR` for a non-directory; a failure reading the layer.
    fn readdir(&self, path: &[u8]) -> io::Result<Option<Vec<DirEntry>>>;

    /// The target of the symlink `path`, as bytes; `Ok(None)` if it does
    /// not exist.
    ///
    /// Errors: `EINVAL` for a non-symlink (as readlink(2)); a failure
    /// reading the layer.
    fn readlink(&self, path: &[u8]) -> io::Result<Option<Vec<u8>>>;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn kinds_of_modes() {
        assert_eq!(Kind::from_mode(libc::S_IFREG | 0o644), Some(Kind::File));
        assert_eq!(Kind::from_mode(libc::S_IFDIR | 0o755), Some(Kind::Dir));
        assert_eq!(Kind::from_mode(libc::S_IFLNK | 0o777), Some(Kind::Symlink));
        assert_eq!(Kind::from_mode(libc::S_IFIFO), Some(Kind::Fifo));
        assert_eq!(Kind::from_mode(libc::S_IFSOCK), Some(Kind::Socket));
        assert_eq!(Kind::from_mode(libc::S_IFCHR), Some(Kind::CharDevice));
        assert_eq!(Kind::from_mode(libc::S_IFBLK), Some(Kind::BlockDevice));
        assert_eq!(Kind::from_mode(0o644), None);
    }

    /// Just enough of a lower layer to check the default `lookup`.
    struct Paths(BTreeMap<Vec<u8>, Attr>);

    impl Lower for Paths {
        fn getattr(&self, path: &[u8]) -> io::Result<Option<Attr>> {
            Ok(self.0.get(path).cloned())
        }
        fn read_at(&self, _: &[u8], _: u64, _: &mut [u8]) -> io::Result<Option<usize>> {
            Ok(None)
        }
        fn readdir(&self, _: &[u8]) -> io::Result<Option<Vec<DirEntry>>> {
            Ok(None)
        }
        fn readlink(&self, _: &[u8]) -> io::Result<Option<Vec<u8>>> {
            Ok(None)
        }
    }

    #[test]
    fn default_lookup_joins_dir_and_name() {
        let attr = |kind, origin| Attr {
            kind,
            perm: 0o644,
            size: 0,
            uid: 0,
            gid: 0,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            nlink: 1,
            rdev: 0,
            origin,
        };
        let lower = Paths(BTreeMap::from([
            (b"top".to_vec(), attr(Kind::File, 1)),
            (b"d".to_vec(), attr(Kind::Dir, 2)),
            (b"d/f".to_vec(), attr(Kind::File, 3)),
        ]));
        let origin = |dir: &[u8], name: &[u8]| {
            lower
                .lookup(dir, name)
                .ok()
                .flatten()
                .map(|a: Attr| a.origin)
        };
        assert_eq!(origin(b"", b"top"), Some(1));
        assert_eq!(origin(b"", b"d"), Some(2));
        assert_eq!(origin(b"d", b"f"), Some(3));
        assert_eq!(origin(b"d", b"missing"), None);
        assert_eq!(origin(b"nope", b"f"), None);
    }
}
