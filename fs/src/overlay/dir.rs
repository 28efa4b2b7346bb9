//! Directory I/O of the overlay ([`crate::front::Dirs`]): directory
//! handles, fsyncdir and merged listings (readdir and readdirplus), the
//! upper entries over the lower ones the rules let show through.
//!
//! **No OPENDIR** (`FUSE_NO_OPENDIR_SUPPORT`): READDIR then comes with
//! handle 0 and reads the listing kept in `State::listings` from offset 0
//! until the read reaches its end or the directory is forgotten.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};

use fuser::{
    Errno, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags, ReplyDirectory,
    ReplyDirectoryPlus,
};

use super::handle::{DirItem, OHandle};
use super::state::State;
use super::whiteout::From;
use crate::errno::errno;
use crate::front::Dirs;
use crate::inode::{Stamp, ROOT};
use crate::passthrough::attr::dot_attr;
use crate::reply::{Opened, Res};
use crate::sys;

/// A [`DirItem`] number not known yet: a lower entry the kernel has not
/// cached, numbered when `readdir` sends it.
const LOWER_UNKNOWN: u64 = u64::MAX - 1;

/// Lower entries looked up together for one READDIRPLUS reply (a 4 KiB
/// reply holds about 24 entries with short names).
const PLUS_BATCH: usize = 32;

impl State {
    /// The merged listing of directory `ino`, `.` and `..` first. A lower
    /// entry the kernel has not cached gets its number only when `readdir`
    /// sends it (`LOWER_UNKNOWN` until then): `readdirplus` looks each
    /// entry up anyway, and a lower lookup costs a look at the base.
    fn dir_items(&self, ino: u64) -> Res<Vec<DirItem>> {
        let n = self.info(ino)?;
        let path = self.path(ino)?;
        let visible = self.lower_visible(&n)?;
        let listing = self.listing(n.upper.as_ref().map(|u| u.fd.as_fd()), &path, visible)?;
        let parent = self.nodes.parent(ino).unwrap_or(ROOT);
        let mut out = Vec::with_capacity(listing.items.len() + 2);
        out.push(DirItem {
            name: b".".to_vec(),
            kind: FileType::Directory,
            ino,
        });
        out.push(DirItem {
            name: b"..".to_vec(),
            kind: FileType::Directory,
            ino: parent,
        });
        for (name, item) in listing.items {
            // The number `stat` shows when the entry is cached; else a
            // good guess (never 0, which some programs skip).
            let shown = match (self.nodes.child(ino, &name), item.from) {
                (Some(i), _) => i,
                (None, From::Upper(d_ino)) => d_ino,
                (None, From::Lower) => LOWER_UNKNOWN,
            };
            out.push(DirItem {
                name,
                kind: item.kind,
                ino: shown,
            });
        }
        Ok(out)
    }

    /// The listing of directory handle `fh` for a read from `offset`.
    ///
    /// Without a handle (`FUSE_NO_OPENDIR_SUPPORT`: handle 0) the listing
    /// taken at offset 0 is kept per directory in `listings` until a read
    /// reaches its end (`listing_read`) or the directory is forgotten, so
    /// the later chunks of one read continue the same sorted list (an
    /// offset is an index into it) instead of merging the directory again
    /// for each chunk.
    fn dir_entries(&self, ino: u64, fh: FileHandle, offset: u64) -> Res<Arc<Vec<DirItem>>> {
        if fh.0 == 0 && self.granted.has(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
            let mut listings = self.listings.lock().unwrap_or_else(|e| e.into_inner());
            if offset != 0 {
                if let Some(list) = listings.get(&ino) {
                    return Ok(Arc::clone(list));
                }
            }
            let list = Arc::new(self.dir_items(ino)?);
            listings.insert(ino, Arc::clone(&list));
            return Ok(list);
        }
        let h = self.handle(fh)?;
        let OHandle::Dir { entries, .. } = &*h else {
            return Err(Errno::EBADF);
        };
        let mut entries = entries.lock().unwrap_or_else(|e| e.into_inner());
        match &*entries {
            Some(list) if offset != 0 => Ok(Arc::clone(list)),
            _ => {
                let list = Arc::new(self.dir_items(ino)?);
                *entries = Some(Arc::clone(&list));
                Ok(list)
            }
        }
    }

    /// The number `readdir` shows for the lower entry `name` of directory
    /// `dir` (at `path`): the node's if the kernel cached it meanwhile, else
    /// the lower entry's (`u64::MAX` if it cannot be read).
    fn lower_number(&self, dir: u64, path: &[u8], name: &[u8]) -> u64 {
        if let Some(i) = self.nodes.child(dir, name) {
            return i;
        }
        self.lower
            .lookup(path, name)
            .ok()
            .flatten()
            .map_or(u64::MAX, |a| super::node::lower_number(a.origin))
    }

    /// The lower layer's answers for the lower entries of `list` from
    /// `start` on that the kernel has not cached, at most
    /// [`PLUS_BATCH`] (what a 4 KiB READDIRPLUS reply holds; a larger
    /// reply asks for the next batch when it gets there), asked in one
    /// [`Lower::lookup_all`]: a worktree's base checks the project's
    /// records once for all of them instead of once per entry. Empty when
    /// the lower children do not show or the layer fails (each entry is
    /// then looked up alone, and fails alone).
    fn lower_hints(
        &self,
        ino: u64,
        list: &[DirItem],
        start: usize,
    ) -> HashMap<Vec<u8>, Option<super::lower::Attr>> {
        let names: Vec<&[u8]> = list
            .iter()
            .skip(start)
            .filter(|item| item.ino == LOWER_UNKNOWN)
            .take(PLUS_BATCH)
            .map(|item| item.name.as_slice())
            .collect();
        if names.is_empty() {
            return HashMap::new();
        }
        let visible = self
            .info(ino)
            .and_then(|n| self.lower_visible(&n))
            .unwrap_or(false);
        let (true, Ok(path)) = (visible, self.path(ino)) else {
            return HashMap::new();
        };
        match self.lower.lookup_all(&path, &names) {
            Ok(attrs) if attrs.len() == names.len() => {
                names.into_iter().map(<[u8]>::to_vec).zip(attrs).collect()
            }
            _ => HashMap::new(),
        }
    }

    /// A read without a handle reached the end of `ino`'s listing: it is
    /// dropped (the next read from offset 0 merges the directory again).
    fn listing_read(&self, ino: u64, fh: FileHandle) {
        if fh.0 == 0 {
            let mut listings = self.listings.lock().unwrap_or_else(|e| e.into_inner());
            listings.remove(&ino);
        }
    }
}

impl Dirs for State {
    /// `opendir` of `ino`. With `FUSE_NO_OPENDIR_SUPPORT` taken, `ENOSYS`:
    /// the kernel then sends no OPENDIR or RELEASEDIR again, READDIR with
    /// handle 0, and keeps each listing it read until it is invalidated.
    /// That is coherent because a merged listing changes only through this
    /// mount (the kernel drops its cached listing of a directory it
    /// changes) or by a rewind of the worktree (its daemon invalidates
    /// each directory it touched: `cache.rs`); the base never changes.
    fn opendir(&self, ino: u64) -> Res<Opened> {
        if self.granted.has(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
            return Err(Errno::ENOSYS);
        }
        let n = self.info(ino)?;
        if n.kind != libc::S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        // The merged listing changes only with the upper dir (whose ctime
        // moves with every entry, whiteout or marker added or removed in
        // it) or when a lower-only dir gets its upper twin; the lower layer
        // never changes. So an unchanged stamp keeps the kernel's listing.
        let mut flags = FopenFlags::FOPEN_CACHE_DIR;
        let stamp = match &n.upper {
            Some(up) => sys::fstat(up.fd.as_fd()).ok().map(|st| Stamp::of(&st)),
            None => Some(Stamp::default()),
        };
        if stamp.is_some_and(|s| self.nodes.opened(ino, s)) {
            flags |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        let fh = self.handles.insert(OHandle::Dir {
            entries: Mutex::new(None),
        });
        Ok(Opened { fh, flags })
    }

    /// `readdir` of `ino` through handle `fh` from `offset`, into `reply`.
    fn readdir(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Res<()> {
        let list = self.dir_entries(ino, fh, offset)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let mut path = None;
        for (i, item) in list.iter().enumerate().skip(start) {
            let name = OsStr::from_bytes(&item.name);
            let shown = match item.ino {
                LOWER_UNKNOWN => {
                    if path.is_none() {
                        path = Some(self.path(ino)?);
                    }
                    self.lower_number(ino, path.as_deref().unwrap_or_default(), &item.name)
                }
                n => n,
            };
            if reply.add(INodeNo(shown), i as u64 + 1, item.kind, name) {
                return Ok(());
            }
        }
        self.listing_read(ino, fh);
        Ok(())
    }

    /// `readdirplus`: as `readdir`, each entry but `.` and `..` looked up
    /// (one lookup the kernel owes a `forget` for, dropped again for an
    /// entry that did not fit).
    fn readdirplus(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectoryPlus,
    ) -> Res<()> {
        let list = self.dir_entries(ino, fh, offset)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let mut hints = self.lower_hints(ino, &list, start);
        for (i, item) in list.iter().enumerate().skip(start) {
            if item.ino == LOWER_UNKNOWN && !hints.contains_key(item.name.as_slice()) {
                // The reply holds more than the batch: the next one.
                hints = self.lower_hints(ino, &list, i);
            }
            let name = OsStr::from_bytes(&item.name);
            let off = i as u64 + 1;
            if item.name == b"." || item.name == b".." {
                let full = reply.add(
                    INodeNo(item.ino),
                    off,
                    name,
                    &self.entry_ttl,
                    &dot_attr(item.ino),
                    Generation(0),
                );
                if full {
                    return Ok(());
                }
                continue;
            }
            let hint = hints.get(item.name.as_slice());
            let Ok(a) = self.lookup_entry_hinted(ino, &item.name, hint) else {
                // Gone since the listing: skip it, as a later readdir would.
                continue;
            };
            if reply.add(a.ino, off, name, &self.entry_ttl, &a, Generation(0)) {
                self.nodes.forget(a.ino.0, 1);
                return Ok(());
            }
        }
        self.listing_read(ino, fh);
        Ok(())
    }

    /// `releasedir` of the directory handle `fh`.
    fn releasedir(&self, fh: FileHandle) {
        self.handles.remove(fh.0);
    }

    /// `fsyncdir` of `ino` through handle `fh`; handle 0 (no OPENDIR):
    /// the upper directory's own fd, if it has one.
    fn fsyncdir(&self, ino: u64, fh: FileHandle, datasync: bool) -> Res<()> {
        if fh.0 != 0 || !self.granted.has(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
            return self.fsync(fh, datasync);
        }
        match self.info(ino)?.upper {
            Some(up) => {
                let fd = sys::openat(
                    up.fd.as_fd(),
                    &std::ffi::CString::from(c"."),
                    libc::O_RDONLY | libc::O_DIRECTORY,
                    0,
                )
                .map_err(errno)?;
                sys::fsync(fd.as_fd(), datasync).map_err(errno)
            }
            None => Ok(()),
        }
    }
}
