//! Whiteouts and opaque directories as the FUSE overlay keeps them: plain
//! empty files in the upper layer (the aufs / fuse-overlayfs unprivileged
//! convention: no `mknod`, no trusted xattrs), made and removed through the
//! hook, and the merged directory listing they shape. What they mean (the
//! names, what shows) is `rules.rs`, shared with the core.
//!
//! A whiteout hides only the lower entry: an upper entry of the same name
//! shows whether or not the whiteout is there. That makes every multi-step
//! change crash-safe in the order the overlay takes them (the whiteout is
//! made before an upper entry is removed, and removed only after the entry
//! that replaces it exists), so a kill at any point never lets a deleted
//! lower name reappear.
//!
//! A lower name of more than 251 bytes has no room for its whiteout
//! (`NAME_MAX` is 255): removing or renaming it away fails with
//! `ENAMETOOLONG`; names made in the upper layer have no such limit.
//!
//! The merged view never shows an upper name starting with `.wh.`; users
//! cannot create one (`EINVAL`). Lower names starting with `.wh.` show, read
//! only (`EROFS` for any change: a copy-up would turn them into whiteouts).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};

use fuser::{Errno, FileType};

use super::lower::Kind;
use super::rules::{self, Shown};
use super::state::State;
use crate::errno::errno;
use crate::hook::Mutation;
use crate::inode::child;
use crate::reply::Res;
use crate::report::Report;
use crate::sys;

pub(super) use super::rules::{reserved, whiteout_name, OPAQUE, PREFIX};

/// The longest name the upper filesystem takes (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// True when `dir` (an upper directory) holds the entry `name`. A name
/// longer than `NAME_MAX` (the whiteout of a name of more than 251 bytes)
/// cannot be there.
pub(super) fn has(dir: BorrowedFd<'_>, name: &[u8]) -> Res<bool> {
    if name.len() > NAME_MAX {
        return Ok(false);
    }
    let cname = sys::cname(name).map_err(errno)?;
    Ok(sys::stat_at(dir, &cname).map_err(errno)?.is_some())
}

/// True when the upper directory `dir` is opaque.
pub(super) fn opaque(dir: BorrowedFd<'_>) -> Res<bool> {
    has(dir, OPAQUE)
}

/// Where a merged entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum From {
    /// The upper layer; the upper `d_ino`.
    Upper(u64),
    /// The lower layer.
    Lower,
}

/// One entry of a merged listing.
#[derive(Debug, Clone)]
pub(super) struct Item {
    pub(super) kind: FileType,
    pub(super) from: From,
}

/// A merged directory listing.
#[derive(Default)]
pub(super) struct Listing {
    /// The entries, sorted by name, without `.`, `..` and reserved names.
    pub(super) items: BTreeMap<Vec<u8>, Item>,
    /// The reserved entries of the upper directory (whiteouts and the
    /// opaque marker): what must go before the directory can be removed.
    pub(super) reserved: Vec<Vec<u8>>,
}

pub(super) fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDevice => FileType::CharDevice,
        Kind::BlockDevice => FileType::BlockDevice,
    }
}

impl State {
    /// The merged listing of the directory at `path`, whose upper directory
    /// is `upper` (if any) and whose lower directory shows through when
    /// `lower_visible` (and the upper one is not opaque).
    pub(super) fn listing(
        &self,
        upper: Option<BorrowedFd<'_>>,
        path: &[u8],
        lower_visible: bool,
    ) -> Res<Listing> {
        let mut names: Vec<(Vec<u8>, Item)> = Vec::new();
        if let Some(dir) = upper {
            let fd = sys::openat(
                dir,
                &CString::from(c"."),
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            )
            .map_err(errno)?;
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                let n = sys::getdents(fd.as_fd(), &mut buf).map_err(errno)?;
                if n == 0 {
                    break;
                }
                for ent in sys::parse_dirents(&buf[..n]) {
                    if ent.name == b"." || ent.name == b".." {
                        continue;
                    }
                    names.push((
                        ent.name.to_vec(),
                        Item {
                            kind: crate::passthrough::attr::dtype_kind(ent.kind),
                            from: From::Upper(ent.ino),
                        },
                    ));
                }
            }
        }
        let merged = rules::merge(names, lower_visible, || -> Res<Vec<(Vec<u8>, Item)>> {
            let entries = self.lower.readdir(path).map_err(errno)?.unwrap_or_default();
            Ok(entries
                .into_iter()
                .map(|ent| {
                    let item = Item {
                        kind: file_type(ent.kind),
                        from: From::Lower,
                    };
                    (ent.name, item)
                })
                .collect())
        })?;
        let items = merged
            .items
            .into_iter()
            .filter_map(|(name, shown)| match shown {
                Shown::Upper(item) | Shown::Lower(item) => Some((name, item)),
                Shown::Absent => None,
            })
            .collect();
        let out = Listing {
            items,
            reserved: merged.reserved,
        };
        Ok(out)
    }

    /// Creates the empty reserved file `name` (a whiteout or the opaque
    /// marker) in the upper directory `dir` at `dir_path`, reporting
    /// `Create`; nothing if it is there already.
    pub(super) fn make_reserved(
        &self,
        dir: BorrowedFd<'_>,
        dir_path: &[u8],
        name: &[u8],
    ) -> Res<()> {
        if has(dir, name)? {
            return Ok(());
        }
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let cname = sys::cname(name).map_err(errno)?;
        let path = child(dir_path, name);
        self.before(Mutation::Create { path: &path })?;
        let fd = sys::openat(
            dir,
            &cname,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW,
            0o644,
        )
        .map_err(errno)?;
        let now = sys::fstat(fd.as_fd()).ok();
        drop(fd);
        self.after(Mutation::Create { path: &path }, now.as_ref());
        Ok(())
    }

    /// Removes the reserved file `name` from the upper directory `dir` at
    /// `dir_path`, reporting `Remove`; nothing if it is not there.
    pub(super) fn drop_reserved(
        &self,
        dir: BorrowedFd<'_>,
        dir_path: &[u8],
        name: &[u8],
    ) -> Res<()> {
        if !has(dir, name)? {
            return Ok(());
        }
        let cname = sys::cname(name).map_err(errno)?;
        let path = child(dir_path, name);
        self.before(Mutation::Remove { path: &path })?;
        sys::unlinkat(dir, &cname, 0).map_err(errno)?;
        self.after(Mutation::Remove { path: &path }, None);
        Ok(())
    }

    /// Refuses a name users may not create (`EINVAL`).
    pub(super) fn check_new_name(name: &[u8]) -> Res<()> {
        if reserved(name) {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }
}
