//! Copy-up: before the first change of a lower entry, it is copied into the
//! upper layer, parents first, and from then on the upper copy is the entry.
//!
//! - A directory is made with `mkdirat` (mode, owner and times of the lower
//!   one), reported as `Create`.
//! - A regular file is written into a temporary file in the work directory
//!   (holes stay holes), given the lower mode, owner and times, and only
//!   then, after `before(Create)`, renamed into place with
//!   `RENAME_NOREPLACE`. A crash never leaves a half-copied file visible: at
//!   worst a temporary file in the work directory, which the next mount
//!   deletes. The bytes come from a descriptor the lower layer lends
//!   ([`Lower::with_file`]): `FICLONE` shares its extents where the
//!   filesystem has reflinks (nothing is copied), else `copy_file_range`
//!   copies its data runs in the kernel; a layer without a descriptor for
//!   the file is read through [`Lower::read_at`] in 1 MiB chunks (all-zero
//!   chunks skipped).
//! - Symlinks, fifos, sockets and devices are made as such (one atomic
//!   call each), with owner and times.
//!
//! [`Lower::read_at`]: super::Lower::read_at
//! [`Lower::with_file`]: super::Lower::with_file

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{Errno, TimeOrNow};

use super::lower::{Attr, Kind, Lent};
use super::node::{kind_mode, Upper};
use super::state::State;
use super::whiteout::{self, reserved, whiteout_name, From};
use crate::creds::zero_umask_for_thread;
use crate::errno::errno;
use crate::hook::Mutation;
use crate::inode::{child, InodeKey};
use crate::passthrough::attr::timespec;
use crate::reply::Res;
use crate::report::Report;
use crate::sys;

/// Bytes read from the lower layer per call.
const CHUNK: usize = 1 << 20;

impl State {
    /// The upper entry of `ino`, copying it (and its parents) up first if
    /// it is only in the lower layer. `limit` caps the bytes copied (0 for
    /// a file about to be truncated to nothing); `None` copies everything.
    /// The caller holds the gate and the namespace lock.
    pub(super) fn copy_up(&self, ino: u64, limit: Option<u64>) -> Res<Arc<OwnedFd>> {
        let n = self.info(ino)?;
        if let Some(up) = n.upper {
            return Ok(up.fd);
        }
        let lower = n.lower.ok_or(Errno::ESTALE)?;
        let (parent, name) = self.nodes.primary(ino).ok_or(Errno::ENOENT)?;
        let parent_fd = self.copy_up(parent, None)?;
        let parent_path = self.path(parent)?;
        let up = self.copy_entry(parent_fd.as_fd(), &parent_path, &name, &lower, limit)?;
        let fd = Arc::clone(&up.fd);
        self.nodes.set_upper(ino, up);
        // The other names the kernel knows for a lower hard link become
        // links of the copy, so they stay one file.
        for (p, n) in self.nodes.names(ino).into_iter().skip(1) {
            if let Err(e) = self.link_known_name(fd.as_fd(), p, &n) {
                log::debug!("copy-up: name {n:?} of inode {ino} not linked: {e:?}");
                self.nodes.unlink_if(p, &n, ino);
            }
        }
        Ok(fd)
    }

    /// Links the upper file `fd` at `parent/name` (another lower name of
    /// the same file), reporting `Create`.
    fn link_known_name(&self, fd: BorrowedFd<'_>, parent: u64, name: &[u8]) -> Res<()> {
        if reserved(name) {
            return Err(Errno::EROFS);
        }
        let dir = self.copy_up(parent, None)?;
        let path = self.child_path(parent, name)?;
        self.link_at(fd, dir.as_fd(), &path, name).map(|_| ())
    }

    /// Links the upper file `fd` as `name` (at `path`) in the upper
    /// directory `dir`, reporting `Create`.
    fn link_at(
        &self,
        fd: BorrowedFd<'_>,
        dir: BorrowedFd<'_>,
        path: &[u8],
        name: &[u8],
    ) -> Res<Upper> {
        if whiteout::has(dir, name)? {
            return Err(Errno::EEXIST);
        }
        let cname = sys::cname(name).map_err(errno)?;
        self.before(Mutation::Create { path })?;
        sys::link_fd(fd, dir, &cname).map_err(errno)?;
        let made = sys::open_path(dir, &cname).map_err(errno)?;
        let st = sys::fstat(made.as_fd()).map_err(errno)?;
        self.after(Mutation::Create { path }, Some(&st));
        Ok(Upper {
            fd: Arc::new(made),
            key: InodeKey::of(&st),
        })
    }

    /// Copies up `ino` and, for a directory, everything below it that
    /// shows from the lower layer (a rename moves the whole subtree, so
    /// nothing may be left behind). Costs the bytes of every lower file
    /// below it.
    pub(super) fn copy_up_tree(&self, ino: u64) -> Res<()> {
        let fd = self.copy_up(ino, None)?;
        let n = self.info(ino)?;
        if n.kind != libc::S_IFDIR || !self.lower_visible(&n)? {
            return Ok(());
        }
        let path = self.path(ino)?;
        let mut links = HashMap::new();
        self.copy_children(fd.as_fd(), &path, Some(ino), &mut links)
    }

    /// Copies up every lower entry below the merged directory `dir` at
    /// `path` (cached as node `cached`, if it is). A cached entry is copied
    /// up as its node (with the node's other known names); lower hard links
    /// met in the subtree become links of the first copy (`links`, by
    /// origin).
    fn copy_children(
        &self,
        dir: BorrowedFd<'_>,
        path: &[u8],
        cached: Option<u64>,
        links: &mut HashMap<u64, Arc<OwnedFd>>,
    ) -> Res<()> {
        let listing = self.listing(Some(dir), path, true)?;
        for (name, item) in listing.items {
            let cached_child = cached.and_then(|p| self.nodes.child(p, &name));
            let cpath = child(path, &name);
            match item.from {
                From::Lower => {
                    let cached_lower = cached_child
                        .filter(|ci| self.nodes.info(*ci).is_some_and(|n| n.upper.is_none()));
                    // Linked meanwhile as another known name of a file.
                    if whiteout::has(dir, &name)? {
                        continue;
                    }
                    let Some(la) = self.lower.lookup(path, &name).map_err(errno)? else {
                        continue;
                    };
                    let fd = match (cached_lower, links.get(&la.origin)) {
                        (Some(ci), _) => self.copy_up(ci, None)?,
                        (None, Some(first)) if la.kind != Kind::Dir => {
                            let first = Arc::clone(first);
                            self.link_at(first.as_fd(), dir, &cpath, &name)?.fd
                        }
                        _ => self.copy_entry(dir, path, &name, &la, None)?.fd,
                    };
                    if la.kind == Kind::Dir {
                        self.copy_children(fd.as_fd(), &cpath, cached_child, links)?;
                    } else if la.nlink > 1 {
                        links.entry(la.origin).or_insert(fd);
                    }
                }
                From::Upper(_) if item.kind == fuser::FileType::Directory => {
                    if whiteout::has(dir, &whiteout_name(&name))? {
                        continue;
                    }
                    let lower_dir = self
                        .lower
                        .lookup(path, &name)
                        .map_err(errno)?
                        .is_some_and(|a| a.kind == Kind::Dir);
                    if lower_dir {
                        let cname = sys::cname(&name).map_err(errno)?;
                        let fd = sys::open_path(dir, &cname).map_err(errno)?;
                        if !whiteout::opaque(fd.as_fd())? {
                            self.copy_children(fd.as_fd(), &cpath, cached_child, links)?;
                        }
                    }
                }
                From::Upper(_) => {}
            }
        }
        Ok(())
    }

    /// Makes the upper copy of the lower entry `lower` at `dir_path/name`
    /// in the upper directory `dir`, reporting `Create` before and after.
    fn copy_entry(
        &self,
        dir: BorrowedFd<'_>,
        dir_path: &[u8],
        name: &[u8],
        lower: &Attr,
        limit: Option<u64>,
    ) -> Res<Upper> {
        if reserved(name) {
            // Its copy would read as a whiteout.
            return Err(Errno::EROFS);
        }
        zero_umask_for_thread().map_err(errno)?;
        let path = child(dir_path, name);
        let cname = sys::cname(name).map_err(errno)?;
        let times = [
            timespec(Some(TimeOrNow::SpecificTime(lower.mtime))),
            timespec(Some(TimeOrNow::SpecificTime(lower.mtime))),
        ];
        let made = match lower.kind {
            Kind::File => {
                let tmp = self.copy_file(&path, lower, limit)?;
                let moved = self
                    .before(Mutation::Create { path: &path })
                    .and_then(|()| {
                        sys::renameat2(self.work.as_fd(), &tmp, dir, &cname, libc::RENAME_NOREPLACE)
                            .map_err(errno)
                    });
                if let Err(e) = moved {
                    let _ = sys::unlinkat(self.work.as_fd(), &tmp, 0);
                    return Err(e);
                }
                sys::open_path(dir, &cname).map_err(errno)?
            }
            kind => {
                let target = match kind {
                    Kind::Symlink => Some(
                        self.lower
                            .readlink(&path)
                            .map_err(errno)?
                            .ok_or(Errno::ENOENT)?,
                    ),
                    _ => None,
                };
                self.before(Mutation::Create { path: &path })?;
                match kind {
                    Kind::Dir => sys::mkdirat(dir, &cname, 0o700),
                    Kind::Symlink => {
                        let t =
                            sys::cname_any(target.as_deref().unwrap_or_default()).map_err(errno)?;
                        sys::symlinkat(&t, dir, &cname)
                    }
                    _ => sys::mknodat(dir, &cname, kind_mode(kind) | 0o600, lower.rdev),
                }
                .map_err(errno)?;
                let fd = sys::open_path(dir, &cname).map_err(errno)?;
                sys::chown_fd(fd.as_fd(), lower.uid, lower.gid).map_err(errno)?;
                if kind != Kind::Symlink {
                    sys::chmod_fd(fd.as_fd(), lower.perm & 0o7777).map_err(errno)?;
                }
                sys::utimens_fd(fd.as_fd(), &times).map_err(errno)?;
                fd
            }
        };
        let st = sys::fstat(made.as_fd()).map_err(errno)?;
        self.after(Mutation::Create { path: &path }, Some(&st));
        Ok(Upper {
            fd: Arc::new(made),
            key: InodeKey::of(&st),
        })
    }

    /// Writes the lower file `path` (at most `limit` bytes) into a new
    /// temporary file in the work directory with the lower mode, owner and
    /// times; returns its name there.
    fn copy_file(&self, path: &[u8], lower: &Attr, limit: Option<u64>) -> Res<CString> {
        let seq = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = CString::new(format!("copyup.{}.{seq}", std::process::id()))
            .map_err(|_| Errno::EINVAL)?;
        let fd = sys::openat(
            self.work.as_fd(),
            &tmp,
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NOFOLLOW,
            0o600,
        )
        .map_err(errno)?;
        let res = self.fill(fd.as_fd(), path, lower, limit);
        if res.is_err() {
            let _ = sys::unlinkat(self.work.as_fd(), &tmp, 0);
        }
        res.map(|()| tmp)
    }

    fn fill(&self, fd: BorrowedFd<'_>, path: &[u8], lower: &Attr, limit: Option<u64>) -> Res<()> {
        let want = limit.map_or(lower.size, |l| l.min(lower.size));
        let mut len = 0;
        let lent = if want == 0 {
            // Nothing to copy (a copy-up for a truncate to zero).
            Lent::Fd
        } else {
            let mut runs = 0;
            self.lower
                .with_file(path, &mut |src| {
                    runs += 1;
                    len = copy_from_fd(src, fd, want, runs > 1)?;
                    Ok(())
                })
                .map_err(errno)?
                .ok_or(Errno::ENOENT)?
        };
        let off = match lent {
            Lent::Fd => len,
            Lent::ReadAt => self.copy_read_at(fd, path, want)?,
        };
        sys::ftruncate(fd, off).map_err(errno)?;
        sys::chown_fd(fd, lower.uid, lower.gid).map_err(errno)?;
        sys::chmod_fd(fd, lower.perm & 0o7777).map_err(errno)?;
        let times = [
            timespec(Some(TimeOrNow::SpecificTime(lower.mtime))),
            timespec(Some(TimeOrNow::SpecificTime(lower.mtime))),
        ];
        sys::utimens_fd(fd, &times).map_err(errno)?;
        Ok(())
    }

    /// Copies the first `want` bytes of the lower file `path` into `fd`
    /// through [`Lower::read_at`] (the layer lent no descriptor); all-zero
    /// chunks are skipped, so holes stay holes. Returns the bytes copied
    /// (fewer when the file ends first).
    ///
    /// [`Lower::read_at`]: super::Lower::read_at
    fn copy_read_at(&self, fd: BorrowedFd<'_>, path: &[u8], want: u64) -> Res<u64> {
        let mut buf = vec![0u8; CHUNK.min(usize::try_from(want).unwrap_or(CHUNK)).max(1)];
        let mut off = 0u64;
        while off < want {
            let room = usize::try_from(want - off)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = self
                .lower
                .read_at(path, off, &mut buf[..room])
                .map_err(errno)?
                .ok_or(Errno::ENOENT)?;
            if n == 0 {
                break;
            }
            let data = &buf[..n];
            if data.iter().any(|&b| b != 0) {
                write_all_at(fd, data, off).map_err(errno)?;
            }
            off += n as u64;
        }
        Ok(off)
    }
}

/// Makes the empty `dst` hold the first `want` bytes of `src` (`again`:
/// `dst` may hold an earlier attempt's bytes, a lower layer ran this once
/// more, so it is emptied first); returns the length `dst` must be cut to,
/// `min(want, length of src)`.
///
/// First `FICLONE`: `dst` then shares `src`'s extents and nothing is
/// copied (XFS with reflink, btrfs, bcachefs; both on one filesystem).
/// Where that fails (ext4, tmpfs, two filesystems) the data runs of `src`
/// (`SEEK_DATA`/`SEEK_HOLE`, so holes stay holes) are copied in the kernel
/// with `copy_file_range`, and with `pread`/`pwrite` where even that is
/// refused or the file is at most one [`CHUNK`].
fn copy_from_fd(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    want: u64,
    again: bool,
) -> std::io::Result<u64> {
    if again {
        sys::ftruncate(dst, 0)?;
    }
    let size = u64::try_from(sys::fstat(src)?.st_size).unwrap_or(0);
    let len = size.min(want);
    match sys::ficlone(dst, src) {
        Ok(()) => return Ok(len),
        Err(e) => log::trace!("copy-up: no reflink ({e}); copying the bytes"),
    }
    // A file of at most one chunk costs less through one `pread` and one
    // `pwrite` than through `copy_file_range`'s splice.
    let mut in_kernel = len > CHUNK as u64;
    for (start, run) in data_runs(src, len)? {
        let end = start + run;
        let mut at = start;
        while at < end {
            let n = if in_kernel {
                match sys::copy_file_range(src, at, dst, at, end - at, 0) {
                    Ok(n) => n as u64,
                    Err(e)
                        if at == start
                            && matches!(
                                e.raw_os_error(),
                                Some(libc::EXDEV | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
                            ) =>
                    {
                        in_kernel = false;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            } else {
                let mut buf = vec![0u8; CHUNK.min(usize::try_from(end - at).unwrap_or(CHUNK))];
                let n = sys::pread(src, &mut buf, at)?;
                // All zeros: left a hole, as the read_at path does.
                if buf[..n].iter().any(|&b| b != 0) {
                    write_all_at(dst, &buf[..n], at)?;
                }
                n as u64
            };
            if n == 0 {
                // `src` ended early (it shrank): `dst` holds what there was.
                return Ok(at);
            }
            at += n;
        }
    }
    Ok(len)
}

/// The data runs `(offset, length)` of the first `len` bytes of `fd`; a
/// filesystem without `SEEK_DATA` gives one run of everything, and so does
/// a file of at most one [`CHUNK`] (two `lseek`s would cost more than its
/// holes save).
fn data_runs(fd: BorrowedFd<'_>, len: u64) -> std::io::Result<Vec<(u64, u64)>> {
    if len <= CHUNK as u64 {
        return Ok(vec![(0, len)]);
    }
    let mut out = Vec::new();
    let mut at = 0u64;
    while at < len {
        let pos = i64::try_from(at).unwrap_or(i64::MAX);
        let data = match sys::lseek(fd, pos, libc::SEEK_DATA) {
            Ok(d) => d as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => break,
            Err(e)
                if at == 0 && matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) =>
            {
                return Ok(vec![(0, len)]);
            }
            Err(e) => return Err(e),
        };
        if data >= len {
            break;
        }
        let hole = match sys::lseek(fd, data as i64, libc::SEEK_HOLE) {
            Ok(h) => (h as u64).min(len),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => len,
            Err(e) => return Err(e),
        };
        if hole <= data {
            break;
        }
        out.push((data, hole - data));
        at = hole;
    }
    Ok(out)
}

/// `pwrite` of all of `data` at `off`.
fn write_all_at(fd: BorrowedFd<'_>, data: &[u8], off: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        done += sys::pwrite(fd, &data[done..], off + done as u64)?;
    }
    Ok(())
}
