//! Directory I/O of the passthrough: opendir, fsyncdir, releasedir,
//! readdir and readdirplus.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use fuser::{
    Errno, FileHandle, FopenFlags, Generation, INodeNo, InitFlags, ReplyDirectory,
    ReplyDirectoryPlus,
};
use log::trace;

use super::attr::{dot_attr, dtype_kind};
use super::io::is_dot;
use super::ops::State;
use crate::errno::errno;
use crate::front::{Dirs, Names};
use crate::handle::{Handle, NO_EPOCH};
use crate::inode::ROOT;
use crate::reply::{Opened, Res};
use crate::sys;

impl State {
    /// A new read-only fd of directory `ino`, with its own position.
    fn open_dir(&self, ino: u64) -> Res<OwnedFd> {
        let node = self.node(ino)?;
        sys::openat(
            node.fd.as_fd(),
            &CString::from(c"."),
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )
        .map_err(errno)
    }

    /// Calls `emit` for each backing entry of directory handle `fh` from
    /// `offset` on, until `emit` answers true (the reply is full). Handle 0
    /// under `FUSE_NO_OPENDIR_SUPPORT` reads through an fd of its own,
    /// opened for this request: the offsets are the backing directory's
    /// own (`d_off`), valid for any fd of it, as with a kept handle.
    fn readdir_entries(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        emit: impl FnMut(&sys::Dirent<'_>) -> Res<bool>,
    ) -> Res<()> {
        if fh.0 == 0 && self.granted.has(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
            let fd = self.open_dir(ino)?;
            return dir_entries(fd.as_fd(), ino, offset, emit);
        }
        let h = self.handle(fh)?;
        let _lock = h.dir_lock.lock().unwrap_or_else(|e| e.into_inner());
        dir_entries(h.fd.as_fd(), ino, offset, emit)
    }
}

/// Calls `emit` for each entry of the directory open at `fd` from `offset`
/// on, until `emit` answers true (the reply is full). The caller owns the
/// fd's position for the call.
fn dir_entries(
    fd: BorrowedFd<'_>,
    ino: u64,
    offset: u64,
    mut emit: impl FnMut(&sys::Dirent<'_>) -> Res<bool>,
) -> Res<()> {
    let offset = i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    sys::lseek(fd, offset, libc::SEEK_SET).map_err(errno)?;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = sys::getdents(fd, &mut buf).map_err(errno)?;
        if n == 0 {
            return Ok(());
        }
        for ent in sys::parse_dirents(&buf[..n]) {
            if emit(&ent)? {
                trace!("readdir {ino}: buffer full");
                return Ok(());
            }
        }
    }
}

impl Dirs for State {
    /// `opendir` of `ino`. A directory's ctime moves with every entry added,
    /// removed or renamed, so an unchanged stamp means the kernel's cached
    /// listing is still exact (`FOPEN_KEEP_CACHE`).
    ///
    /// With `FUSE_NO_OPENDIR_SUPPORT` taken, `ENOSYS`: the kernel then sends
    /// no OPENDIR or RELEASEDIR again, and READDIR with handle 0.
    fn opendir(&self, ino: u64) -> Res<Opened> {
        if self.granted.has(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
            return Err(Errno::ENOSYS);
        }
        let fd = self.open_dir(ino)?;
        let mut flags = FopenFlags::FOPEN_CACHE_DIR;
        if self.unchanged_since_last_open(ino, fd.as_fd()) {
            flags |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        Ok(Opened {
            fh: self.handles.insert(Handle::new(fd, ino, NO_EPOCH)),
            flags,
        })
    }

    /// `readdir` of `ino` through handle `fh` from `offset`, into `reply`.
    fn readdir(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Res<()> {
        self.readdir_entries(ino, fh, offset, |ent| {
            let name = OsStr::from_bytes(ent.name);
            // Report the FUSE inode number (what stat shows) when the entry
            // is cached; the backing one otherwise (never 0, which some
            // programs treat as a deleted entry).
            let shown = match ent.name {
                b"." => ino,
                b".." => self.inodes.parent(ino).unwrap_or(ROOT),
                _ => self.inodes.child(ino, ent.name).unwrap_or(ent.ino),
            };
            Ok(reply.add(INodeNo(shown), ent.offset, dtype_kind(ent.kind), name))
        })
    }

    /// `readdirplus` of `ino` through handle `fh` from `offset`, into
    /// `reply`: each entry is looked up (one lookup the kernel owes a
    /// `forget` for), except `.` and `..`, and except an entry that did not
    /// fit, whose lookup is dropped again.
    fn readdirplus(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectoryPlus,
    ) -> Res<()> {
        let gen = self.gen(ino);
        self.readdir_entries(ino, fh, offset, |ent| {
            let name = OsStr::from_bytes(ent.name);
            if is_dot(ent.name) {
                // The kernel never links "." or ".." from readdirplus; only
                // the dirent part is used.
                let dot = if ent.name == b"." {
                    ino
                } else {
                    self.inodes.parent(ino).unwrap_or(ROOT)
                };
                return Ok(reply.add(
                    INodeNo(dot),
                    ent.offset,
                    name,
                    &self.ttls_since(ino, gen).entry,
                    &dot_attr(dot),
                    Generation(0),
                ));
            }
            let a = match self.lookup_entry(ino, ent.name) {
                Ok(a) => a,
                // Gone since getdents: skip it, as a later readdir would.
                Err(_) => return Ok(false),
            };
            // Read after the entry's lookup: an event handled meanwhile
            // makes it uncached.
            let ttl = self.ttls_since(ino, gen).entry;
            let full = reply.add(a.ino, ent.offset, name, &ttl, &a, Generation(0));
            if full {
                // Not sent: the kernel will not count this lookup.
                self.forget(a.ino.0, 1);
            }
            Ok(full)
        })
    }

    /// `releasedir` of the directory handle `fh`.
    fn releasedir(&self, fh: FileHandle) {
        self.handles.remove(fh.0);
    }

    /// `fsyncdir` of `ino` through handle `fh`, or through an fd of its
    /// own when there is no handle (`FUSE_NO_OPENDIR_SUPPORT`: handle 0).
    fn fsyncdir(&self, ino: u64, fh: FileHandle, datasync: bool) -> Res<()> {
        if fh.0 == 0 && self.granted.has(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
            let fd = self.open_dir(ino)?;
            return sys::fsync(fd.as_fd(), datasync).map_err(errno);
        }
        self.fsync(fh, datasync)
    }
}
