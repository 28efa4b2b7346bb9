//! The project as the core sees it.
//!
//! [`Tree`] is the read side the capture needs: what is at a path
//! ([`Tree::lstat`], [`Tree::lstat_open`]), a symlink's target, a
//! directory's names, when an inode was born, and its owner and extended
//! attributes. [`Dir`] implements it
//! over the project directory itself, confined beneath its root (no
//! symlink is ever followed); it also carries the write side a restore
//! uses. A second implementation (a worktree's merged view) can stand
//! behind the same trait.
//!
//! Paths are project-relative raw bytes (see [`crate::paths`]); `""` is
//! the root.

mod dir;
mod xattr;

use std::fs::File;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

pub use dir::Dir;

use crate::record::{Meta, Stat};

/// True when the error means "no such path" (a missing name or a parent that
/// is not a directory).
pub fn is_not_found(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR))
}

/// Read access to a project tree, confined beneath its root: what the
/// journal reads before a mutation.
///
/// Errors are the system's (`io::Error` with its errno), and a path below
/// a symlink is never resolved through it.
pub trait Tree: Send + Sync + std::fmt::Debug {
    /// `lstat` of `rel`. `Ok(None)` when the path does not exist (missing
    /// name, or a parent that is not a directory, a symlink included).
    fn lstat(&self, rel: &[u8]) -> io::Result<Option<Stat>>;

    /// [`Tree::lstat`], and for a regular file also the file opened
    /// read-only; the stat of a file is that of the opened descriptor.
    fn lstat_open(&self, rel: &[u8]) -> io::Result<Option<(Stat, Option<File>)>>;

    /// [`Tree::lstat_open`] and [`Tree::born_ns`] of the same inode at
    /// once (what a capture needs); the default asks for them one after
    /// the other.
    #[allow(clippy::type_complexity)]
    fn lstat_open_born(&self, rel: &[u8]) -> io::Result<Option<(Stat, Option<File>, Option<i64>)>> {
        let Some((st, file)) = self.lstat_open(rel)? else {
            return Ok(None);
        };
        let born = self.born_ns(rel, file.as_ref())?;
        Ok(Some((st, file, born)))
    }

    /// [`Tree::lstat_open_born`] of the entry at `rel`, read through
    /// `parent` when given: a descriptor of the directory holding it, which
    /// the FUSE layer is about to change it in
    /// (`MutationHook::before_in`). A tree that reads the project
    /// directory itself reads the entry there, without resolving `rel`'s
    /// parent again; the default ignores `parent`.
    #[allow(clippy::type_complexity)]
    fn lstat_open_born_in(
        &self,
        rel: &[u8],
        parent: Option<BorrowedFd<'_>>,
    ) -> io::Result<Option<(Stat, Option<File>, Option<i64>)>> {
        let _ = parent;
        self.lstat_open_born(rel)
    }

    /// [`Tree::lstat`] through `parent` (as for
    /// [`Tree::lstat_open_born_in`]; the default ignores it).
    fn lstat_in(&self, rel: &[u8], parent: Option<BorrowedFd<'_>>) -> io::Result<Option<Stat>> {
        let _ = parent;
        self.lstat(rel)
    }

    /// A quick `lstat` of `rel` to decide whether to look closer: one
    /// system call where the tree can, at the price of following a symlink
    /// on the way (never the last component). Only for comparing with a
    /// known state; anything read from the project afterwards goes through
    /// the confined calls. The default is [`Tree::lstat`].
    fn lstat_hint(&self, rel: &[u8]) -> io::Result<Option<Stat>> {
        self.lstat(rel)
    }

    /// [`Tree::read_link`] through `parent` (as for
    /// [`Tree::lstat_open_born_in`]; the default ignores it).
    fn read_link_in(&self, rel: &[u8], parent: Option<BorrowedFd<'_>>) -> io::Result<Vec<u8>> {
        let _ = parent;
        self.read_link(rel)
    }

    /// When the inode at `rel` (or `file`, that inode already open) was
    /// born, ns since the Unix epoch; `Ok(None)` when the path is gone or
    /// birth times are not reported.
    fn born_ns(&self, rel: &[u8], file: Option<&File>) -> io::Result<Option<i64>>;

    /// The target of the symlink at `rel`, as bytes.
    fn read_link(&self, rel: &[u8]) -> io::Result<Vec<u8>>;

    /// The names in the directory at `rel`, without `.` and `..`, in no
    /// particular order.
    fn list_dir(&self, rel: &[u8]) -> io::Result<Vec<Vec<u8>>>;

    /// An `O_PATH` descriptor of the entry at `rel` itself (never followed)
    /// on this tree's own mount of the project. The journal links a kept
    /// inode into the state dir through it when the FUSE layer's
    /// descriptor of the same inode is on another vfsmount (its private
    /// clone of the project's mount), where `linkat` fails with `EXDEV`.
    /// The default: `Unsupported`.
    fn open_path(&self, rel: &[u8]) -> io::Result<OwnedFd> {
        let _ = rel;
        Err(io::ErrorKind::Unsupported.into())
    }

    /// The owner and extended attributes of `rel`, whose `lstat` is `st`
    /// (`file`: that inode already open). `Ok(None)` (the default) when
    /// this tree cannot tell: the pre-image then holds none and a rewind
    /// leaves the path's owner and attributes as they are.
    fn meta(&self, rel: &[u8], st: &Stat, file: Option<&File>) -> io::Result<Option<Meta>> {
        let _ = (rel, st, file);
        Ok(None)
    }
}

impl Tree for Dir {
    fn lstat(&self, rel: &[u8]) -> io::Result<Option<Stat>> {
        Dir::lstat(self, rel)
    }

    fn lstat_hint(&self, rel: &[u8]) -> io::Result<Option<Stat>> {
        Dir::lstat_hint(self, rel)
    }

    fn lstat_open(&self, rel: &[u8]) -> io::Result<Option<(Stat, Option<File>)>> {
        Dir::lstat_open(self, rel)
    }

    fn born_ns(&self, rel: &[u8], file: Option<&File>) -> io::Result<Option<i64>> {
        Dir::born_ns(self, rel, file)
    }

    fn lstat_open_born(&self, rel: &[u8]) -> io::Result<Option<(Stat, Option<File>, Option<i64>)>> {
        Dir::lstat_open_born(self, rel)
    }

    fn read_link(&self, rel: &[u8]) -> io::Result<Vec<u8>> {
        Dir::read_link(self, rel)
    }

    fn lstat_open_born_in(
        &self,
        rel: &[u8],
        parent: Option<BorrowedFd<'_>>,
    ) -> io::Result<Option<(Stat, Option<File>, Option<i64>)>> {
        Dir::lstat_open_born_in(self, rel, parent)
    }

    fn lstat_in(&self, rel: &[u8], parent: Option<BorrowedFd<'_>>) -> io::Result<Option<Stat>> {
        Dir::lstat_in(self, rel, parent)
    }

    fn read_link_in(&self, rel: &[u8], parent: Option<BorrowedFd<'_>>) -> io::Result<Vec<u8>> {
        Dir::read_link_in(self, rel, parent)
    }

    fn list_dir(&self, rel: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        Dir::list_dir(self, rel)
    }

    fn open_path(&self, rel: &[u8]) -> io::Result<OwnedFd> {
        Dir::open_path(self, rel)
    }

    fn meta(&self, rel: &[u8], st: &Stat, file: Option<&File>) -> io::Result<Option<Meta>> {
        let xattrs = self.xattrs(rel, file)?;
        Ok(Some(Meta::new(st.uid, st.gid, xattrs)))
    }
}
