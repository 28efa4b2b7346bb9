//! Owner and extended attributes of a path in the project, read and
//! written through the same confined resolution as the rest of [`Dir`].
//!
//! A path's attributes are reached through a descriptor when one is open
//! (a regular file being captured, the root), else through
//! `/proc/self/fd/<parent>/<name>` with the `l*xattr` calls: the parent is
//! a directory fd opened beneath the root without following symlinks, and
//! the final name is not followed either, so a symlink's own attributes
//! are read, never its target's. A filesystem without extended attributes
//! (`ENOTSUP`) has an empty set.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use rustix::fs::{AtFlags, Gid, Uid};

use super::Dir;
use crate::record::Xattr;

/// Where a path's attributes are reached.
enum Target<'a> {
    /// An open descriptor of the inode.
    Fd(BorrowedFd<'a>),
    /// `/proc/self/fd/<parent>/<name>`, not following the final name.
    Path(CString),
}

/// True for "this filesystem has no extended attributes".
fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTSUP))
}

/// Calls `f` with a buffer until it fits (`ERANGE` when the list or value
/// grew between the size query and the read), starting with `guess` bytes.
fn read_sized(
    guess: usize,
    query: impl Fn() -> rustix::io::Result<usize>,
    f: impl Fn(&mut [u8]) -> rustix::io::Result<usize>,
) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; guess];
    for _ in 0..8 {
        match f(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(rustix::io::Errno::RANGE) => {
                let need = query()?;
                buf.resize(need.max(buf.len() * 2), 0);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other(
        "its extended attributes keep changing while they are read",
    ))
}

impl Target<'_> {
    fn list(&self) -> io::Result<Vec<u8>> {
        match self {
            Target::Fd(fd) => read_sized(
                256,
                || rustix::fs::flistxattr_query(fd),
                |b| rustix::fs::flistxattr(fd, b),
            ),
            Target::Path(p) => read_sized(
                256,
                || rustix::fs::llistxattr_query(p.as_c_str()),
                |b| rustix::fs::llistxattr(p.as_c_str(), b),
            ),
        }
    }

    fn get(&self, name: &CStr) -> io::Result<Vec<u8>> {
        match self {
            Target::Fd(fd) => read_sized(
                256,
                || rustix::fs::fgetxattr_query(fd, name),
                |b| rustix::fs::fgetxattr(fd, name, b),
            ),
            Target::Path(p) => read_sized(
                256,
                || rustix::fs::lgetxattr_query(p.as_c_str(), name),
                |b| rustix::fs::lgetxattr(p.as_c_str(), name, b),
            ),
        }
    }

    fn set(&self, name: &CStr, value: &[u8]) -> io::Result<()> {
        let flags = rustix::fs::XattrFlags::empty();
        Ok(match self {
            Target::Fd(fd) => rustix::fs::fsetxattr(fd, name, value, flags),
            Target::Path(p) => rustix::fs::lsetxattr(p.as_c_str(), name, value, flags),
        }?)
    }

    fn remove(&self, name: &CStr) -> io::Result<()> {
        Ok(match self {
            Target::Fd(fd) => rustix::fs::fremovexattr(fd, name),
            Target::Path(p) => rustix::fs::lremovexattr(p.as_c_str(), name),
        }?)
    }

    /// Every attribute the caller may read, sorted by name. An attribute
    /// removed between the list and its read is left out.
    fn all(&self) -> io::Result<Vec<Xattr>> {
        let list = match self.list() {
            Ok(l) => l,
            Err(e) if unsupported(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            let c = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            match self.get(&c) {
                Ok(v) => out.push((name.to_vec(), v)),
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
                Err(e) => return Err(named(name, e)),
            }
        }
        out.sort();
        Ok(out)
    }
}

/// `e` with the attribute's name in front.
fn named(name: &[u8], e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("extended attribute {}: {e}", String::from_utf8_lossy(name)),
    )
}

impl Dir {
    /// Runs `f` on where the attributes of `rel` are reached (`file`: that
    /// inode already open).
    fn with_target<R>(
        &self,
        rel: &[u8],
        file: Option<&File>,
        f: impl FnOnce(&Target<'_>) -> io::Result<R>,
    ) -> io::Result<R> {
        if let Some(file) = file {
            return f(&Target::Fd(file.as_fd()));
        }
        if rel.is_empty() {
            return f(&Target::Fd(self.root_fd()));
        }
        let (dir, name) = self.parent(rel)?;
        let mut p = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
        p.extend_from_slice(name.as_bytes());
        let p = CString::new(p).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // `dir` stays open while `f` runs: the path goes through it.
        let out = f(&Target::Path(p));
        drop(dir);
        out
    }

    /// The extended attributes of `rel` (not following a final symlink),
    /// sorted by name: every one this process may read (`trusted.*` only
    /// with `CAP_SYS_ADMIN`). `file`, when given, is that inode already
    /// open. Empty on a filesystem without extended attributes.
    ///
    /// Errors: the path cannot be reached, or an attribute cannot be read
    /// (the error names it).
    pub fn xattrs(&self, rel: &[u8], file: Option<&File>) -> io::Result<Vec<Xattr>> {
        self.with_target(rel, file, |t| t.all())
    }

    /// Gives `rel` (not following a final symlink) exactly the extended
    /// attributes `want`: removes the ones it has that `want` lacks, sets
    /// the ones that are missing or differ. `file`, when given, is that
    /// inode open.
    ///
    /// Errors: the first attribute that cannot be removed or set (the
    /// error names it; `EPERM` for `trusted.*` or `security.*` without the
    /// privilege, `ENOTSUP` where the filesystem has none); the others are
    /// still tried.
    pub fn set_xattrs(&self, rel: &[u8], file: Option<&File>, want: &[Xattr]) -> io::Result<()> {
        self.with_target(rel, file, |t| {
            let have = t.all()?;
            let mut first: Option<io::Error> = None;
            let mut keep = |r: io::Result<()>, name: &[u8]| {
                if let Err(e) = r {
                    first.get_or_insert(named(name, e));
                }
            };
            for (name, _) in have
                .iter()
                .filter(|(n, _)| !want.iter().any(|(w, _)| w == n))
            {
                let c = CString::new(name.as_slice())
                    .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
                keep(t.remove(&c), name);
            }
            for (name, value) in want {
                if have.iter().any(|(n, v)| n == name && v == value) {
                    continue;
                }
                let c = CString::new(name.as_slice())
                    .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
                keep(t.set(&c, value), name);
            }
            first.map_or(Ok(()), Err)
        })
    }

    /// Sets the owner of `rel` to `uid`:`gid` without following a final
    /// symlink (`fchownat(AT_SYMLINK_NOFOLLOW)`; the root through its fd).
    ///
    /// Errors: the kernel's; `EPERM` when this process may not give the
    /// path that owner (not root, and not the owner, or a group it is not
    /// in).
    pub fn set_owner(&self, rel: &[u8], uid: u32, gid: u32) -> io::Result<()> {
        let (uid, gid) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
        if rel.is_empty() {
            return Ok(rustix::fs::fchown(self.root_fd(), uid, gid)?);
        }
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::chownat(
            &dir,
            name.as_c_str(),
            uid,
            gid,
            AtFlags::SYMLINK_NOFOLLOW,
        )?)
    }
}
