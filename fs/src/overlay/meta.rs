//! Metadata operations of the overlay: getattr, setattr (copy-up first for
//! a lower entry: mode, owner, times and size all change the upper copy
//! only), readlink, extended attributes (the lower layer has none: a lower
//! entry lists none, and setting one copies it up), statfs of the upper
//! filesystem, access.

use std::os::fd::AsFd;

use fuser::{Errno, FileHandle};

use super::state::State;
use crate::errno::errno;
use crate::front::{Meta, SetAttr};
use crate::hook::Mutation;
use crate::passthrough::attr::timespec;
use crate::reply::{Attr, Res, Xattr};
use crate::report::Report;
use crate::sys;

impl State {
    /// Copies `ino` up (under the namespace lock) for a change of its own;
    /// `limit` as in [`State::copy_up`]. The caller holds the gate.
    fn copy_up_for_change(
        &self,
        ino: u64,
        limit: Option<u64>,
    ) -> Res<std::sync::Arc<std::os::fd::OwnedFd>> {
        let _ns = self.ns.lock().unwrap_or_else(|e| e.into_inner());
        self.check_lower_reserved(ino)?;
        self.copy_up(ino, limit)
    }
}

impl Meta for State {
    /// `getattr` of `ino`.
    fn getattr(&self, ino: u64, _fh: Option<FileHandle>) -> Res<Attr> {
        Ok(Attr {
            attr: self.stat(ino)?,
            ttl: self.attr_ttl,
        })
    }

    /// `setattr`: mode, owner, size and times of `ino` (through the handle
    /// when it is an upper one); answers the attributes after the change.
    fn setattr(&self, ino: u64, a: &SetAttr) -> Res<Attr> {
        let handle = a.fh.and_then(|fh| self.handles.get(fh.0));
        let upper_handle = handle.as_ref().and_then(|h| h.upper());
        {
            let _gate = self.gate.read();
            let node_fd = self.copy_up_for_change(ino, a.size.filter(|&s| s == 0))?;
            if let Some(size) = a.size {
                if self.ranged(node_fd.as_fd()) {
                    self.before_range(ino, size, u64::MAX - size)?
                } else {
                    self.before_inode(ino, |path| Mutation::Content { path })?
                }
            }
            if a.mode.is_some() || a.uid.is_some() || a.gid.is_some() {
                self.before_inode(ino, |path| Mutation::Metadata { path })?;
            }
            let fd = match upper_handle {
                Some(h) => h.fd.as_fd(),
                None => node_fd.as_fd(),
            };
            if let Some(mode) = a.mode {
                sys::chmod_fd(fd, mode & 0o7777).map_err(errno)?;
            }
            if a.uid.is_some() || a.gid.is_some() {
                sys::chown_fd(
                    node_fd.as_fd(),
                    a.uid.unwrap_or(u32::MAX),
                    a.gid.unwrap_or(u32::MAX),
                )
                .map_err(errno)?;
            }
            if let Some(size) = a.size {
                match upper_handle {
                    Some(h) => sys::ftruncate(h.fd.as_fd(), size),
                    None => sys::truncate_path_fd(node_fd.as_fd(), size),
                }
                .map_err(errno)?;
            }
            if a.atime.is_some() || a.mtime.is_some() {
                sys::utimens_fd(fd, &[timespec(a.atime), timespec(a.mtime)]).map_err(errno)?;
            }
            if a.size.is_some() {
                self.after_inode(ino, |path| Mutation::Content { path });
            } else {
                self.after_inode(ino, |path| Mutation::Metadata { path });
            }
        }
        self.getattr(ino, None)
    }

    /// `readlink`: the target of the symlink `ino`.
    fn readlink(&self, ino: u64) -> Res<Vec<u8>> {
        let n = self.info(ino)?;
        if let Some(up) = &n.upper {
            return sys::readlink_fd(up.fd.as_fd()).map_err(errno);
        }
        let path = self.path(ino)?;
        self.lower
            .readlink(&path)
            .map_err(errno)?
            .ok_or(Errno::ENOENT)
    }

    /// `statfs`: the upper filesystem's.
    fn statfs(&self, _ino: u64) -> Res<libc::statvfs> {
        let root = self.info(crate::inode::ROOT)?;
        let up = root.upper.ok_or(Errno::EIO)?;
        sys::statvfs(up.fd.as_fd()).map_err(errno)
    }

    /// `access`: with `default_permissions` the kernel checks the mode bits
    /// itself; this only confirms the inode still exists.
    fn access(&self, ino: u64) -> Res<()> {
        self.stat(ino).map(|_| ())
    }

    /// `setxattr` of `name` on `ino` (copied up first).
    fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Res<()> {
        let name = sys::cname_any(name).map_err(errno)?;
        let _gate = self.gate.read();
        let fd = self.copy_up_for_change(ino, None)?;
        self.before_inode(ino, |path| Mutation::Metadata { path })?;
        sys::setxattr(fd.as_fd(), &name, value, flags).map_err(errno)?;
        self.after_inode(ino, |path| Mutation::Metadata { path });
        Ok(())
    }

    /// `getxattr` of `name` on `ino`; a lower entry has none (`ENODATA`).
    fn getxattr(&self, ino: u64, name: &[u8], size: u32) -> Res<Xattr> {
        let n = self.info(ino)?;
        let up = n.upper.ok_or(Errno::ENODATA)?;
        let name = sys::cname_any(name).map_err(errno)?;
        Xattr::read(size, |buf| sys::getxattr(up.fd.as_fd(), &name, buf))
    }

    /// `listxattr` of `ino`; empty for a lower entry.
    fn listxattr(&self, ino: u64, size: u32) -> Res<Xattr> {
        let n = self.info(ino)?;
        let Some(up) = n.upper else {
            return Xattr::read(size, |_| Ok(0));
        };
        Xattr::read(size, |buf| sys::listxattr(up.fd.as_fd(), buf))
    }

    /// `removexattr` of `name` on `ino`; `ENODATA` for a lower entry.
    fn removexattr(&self, ino: u64, name: &[u8]) -> Res<()> {
        let n = self.info(ino)?;
        if n.upper.is_none() {
            return Err(Errno::ENODATA);
        }
        let name = sys::cname_any(name).map_err(errno)?;
        let _gate = self.gate.read();
        let fd = self.copy_up_for_change(ino, None)?;
        self.before_inode(ino, |path| Mutation::Metadata { path })?;
        sys::removexattr(fd.as_fd(), &name).map_err(errno)?;
        self.after_inode(ino, |path| Mutation::Metadata { path });
        Ok(())
    }
}
