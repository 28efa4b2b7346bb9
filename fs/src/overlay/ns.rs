//! Names in the merged view (the overlay's [`crate::front::Names`]):
//! lookup and forget, create-like operations (mknod, mkdir, symlink, link;
//! `create` is in `io.rs`), unlink/rmdir, and rename (its steps are in
//! `rename.rs`).
//!
//! Every one takes the quiesce gate, then the namespace lock, checks the
//! merged view, copies the parent directory up if it is only in the lower
//! layer, and only then touches the upper layer, reporting each change of
//! it to the hook with its upper path.
//!
//! - **Create over a whiteout**: the new entry is made first, then (for a
//!   directory replacing a lower directory) the opaque marker inside it,
//!   then the whiteout is removed: at no point does the old lower entry
//!   show.
//! - **Removing a name the lower layer has**: the whiteout is made first,
//!   then the upper entry (if any) removed. `rmdir` of a merged directory
//!   needs it empty in the merged view; its whiteouts and opaque marker go
//!   just before it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use fuser::{Errno, RenameFlags};

use super::lower::Kind;
use super::node::kind_mode;
use super::state::State;
use super::whiteout::{self, reserved, whiteout_name, OPAQUE};
use crate::creds::{zero_umask_for_thread, AsCaller, Caller};
use crate::errno::errno;
use crate::front::Names;
use crate::hook::Mutation;
use crate::inode::child;
use crate::passthrough::attr::decode_dev;
use crate::reply::{Entry, Res};
use crate::report::Report;
use crate::sys;

impl State {
    /// Creates `parent/name` with `make` (run as the caller) in the upper
    /// layer after the hook agreed, replacing a whiteout of the name (see
    /// the module docs), then looks it up. `dir` says `make` makes a
    /// directory.
    fn create_entry(
        &self,
        caller: Caller,
        parent: u64,
        name: &[u8],
        dir: bool,
        make: impl FnOnce(BorrowedFd<'_>, &CString) -> io::Result<()>,
    ) -> Res<Entry> {
        Self::check_new_name(name)?;
        let cname = sys::cname(name).map_err(errno)?;
        zero_umask_for_thread().map_err(errno)?;
        {
            let _gate = self.gate.read();
            let _ns = self.ns.lock().unwrap_or_else(|e| e.into_inner());
            if self.exists(parent, name)? {
                return Err(Errno::EEXIST);
            }
            let (up, dir_path) = self.upper_dir(parent)?;
            let path = child(&dir_path, name);
            let wh = whiteout_name(name);
            let had_whiteout = whiteout::has(up.as_fd(), &wh)?;
            self.before(Mutation::Create { path: &path })?;
            {
                let _as = AsCaller::switch(caller).map_err(errno)?;
                make(up.as_fd(), &cname).map_err(errno)?;
            }
            let now = sys::stat_at(up.as_fd(), &cname).ok().flatten();
            self.after(Mutation::Create { path: &path }, now.as_ref());
            if had_whiteout {
                self.replace_whiteout(up.as_fd(), &dir_path, name, dir)?;
            }
        }
        // A positive entry or the error: a negative entry is no answer to
        // a creation (the kernel takes inode 0 there for EIO).
        self.lookup_entry(parent, name).map(|a| self.entry(a))
    }

    /// The upper `dir_path/name` was just made where a whiteout hid a lower
    /// entry: a directory over a lower directory becomes opaque, then the
    /// whiteout goes.
    pub(super) fn replace_whiteout(
        &self,
        up: BorrowedFd<'_>,
        dir_path: &[u8],
        name: &[u8],
        is_dir: bool,
    ) -> Res<()> {
        let path = child(dir_path, name);
        if is_dir && self.lower_has_dir(&path)? {
            let cname = sys::cname(name).map_err(errno)?;
            let fd = sys::open_path(up, &cname).map_err(errno)?;
            self.make_reserved(fd.as_fd(), &path, OPAQUE)?;
        }
        self.drop_reserved(up, dir_path, &whiteout_name(name))
    }

    /// True when the lower layer has a directory at `path`.
    pub(super) fn lower_has_dir(&self, path: &[u8]) -> Res<bool> {
        Ok(self
            .lower
            .getattr(path)
            .map_err(errno)?
            .is_some_and(|a| a.kind == Kind::Dir))
    }

    /// `EROFS` for a lower entry whose name starts with `.wh.` (it cannot
    /// be copied up).
    pub(super) fn check_lower_reserved(&self, ino: u64) -> Res<()> {
        let n = self.info(ino)?;
        if n.upper.is_none() && self.nodes.primary(ino).is_some_and(|(_, nm)| reserved(&nm)) {
            return Err(Errno::EROFS);
        }
        Ok(())
    }
}

impl Names for State {
    /// `lookup`: the entry `parent/name`; a name the merged view lacks is
    /// a negative entry (inode 0) cached for the negative TTL, or `ENOENT`
    /// when that is zero.
    ///
    /// A miss stays true until the worktree itself makes the name: through
    /// this mount (the kernel drops the negative entry when it creates,
    /// links or renames onto the name) or by a rewind of the worktree (its
    /// daemon invalidates every path it touched, a miss included: see
    /// `cache.rs`). The base never gains a name: the project's later
    /// creations are recorded as absent at the base first. Only a name
    /// made in the project behind its mount after the base (drift) can
    /// stay hidden for up to the TTL, as a cached positive entry hides
    /// drift (`docs/worktrees.md`).
    fn lookup(&self, parent: u64, name: &[u8]) -> Res<Entry> {
        match self.lookup_entry(parent, name) {
            Ok(a) => Ok(self.entry(a)),
            Err(e) if e == Errno::ENOENT && !self.negative_ttl.is_zero() => Ok(Entry {
                attr: crate::passthrough::attr::dot_attr(0),
                attr_ttl: self.negative_ttl,
                entry_ttl: self.negative_ttl,
            }),
            Err(e) => Err(e),
        }
    }

    /// `forget`: the kernel dropped `n` lookups of `ino`; a directory it
    /// no longer holds loses its kept listing (`listings`).
    fn forget(&self, ino: u64, n: u64) {
        self.nodes.forget(ino, n);
        if self.nodes.info(ino).is_none() {
            let mut listings = self.listings.lock().unwrap_or_else(|e| e.into_inner());
            listings.remove(&ino);
        }
    }

    /// `mknod` of `parent/name`; `mode` carries the type, `rdev` is in the
    /// kernel's 32-bit encoding.
    fn mknod(&self, caller: Caller, parent: u64, name: &[u8], mode: u32, rdev: u32) -> Res<Entry> {
        self.create_entry(caller, parent, name, false, |dir, name| {
            sys::mknodat(dir, name, mode, decode_dev(rdev))
        })
    }

    /// `mkdir` of `parent/name` with permission bits `mode`.
    fn mkdir(&self, caller: Caller, parent: u64, name: &[u8], mode: u32) -> Res<Entry> {
        self.create_entry(caller, parent, name, true, |dir, name| {
            sys::mkdirat(dir, name, mode)
        })
    }

    /// `symlink`: `parent/name` pointing at `target`.
    fn symlink(&self, caller: Caller, parent: u64, name: &[u8], target: &[u8]) -> Res<Entry> {
        let target = sys::cname_any(target).map_err(errno)?;
        self.create_entry(caller, parent, name, false, |dir, name| {
            sys::symlinkat(&target, dir, name)
        })
    }

    /// `link`: a new name `new_parent/new_name` for `ino`, copied up first
    /// (a lower file gets its upper copy, which both names then share).
    fn link(&self, caller: Caller, ino: u64, new_parent: u64, new_name: &[u8]) -> Res<Entry> {
        let src = {
            let _gate = self.gate.read();
            let _ns = self.ns.lock().unwrap_or_else(|e| e.into_inner());
            self.check_lower_reserved(ino)?;
            self.copy_up(ino, None)?
        };
        self.create_entry(caller, new_parent, new_name, false, |dir, name| {
            sys::link_fd(src.as_fd(), dir, name)
        })
    }

    /// `unlink` (`rmdir` false) or `rmdir` of `parent/name`.
    fn remove(&self, parent: u64, name: &[u8], rmdir: bool) -> Res<()> {
        let cname = sys::cname(name).map_err(errno)?;
        let _gate = self.gate.read();
        let _ns = self.ns.lock().unwrap_or_else(|e| e.into_inner());
        let found = self.resolve(parent, name)?;
        let kind = match (&found.upper, &found.lower) {
            (Some((_, st)), _) => st.st_mode & libc::S_IFMT,
            (None, Some(l)) => kind_mode(l.kind),
            (None, None) => return Err(Errno::ENOENT),
        };
        if found.upper.is_none() && reserved(name) {
            return Err(Errno::EROFS);
        }
        if rmdir && kind != libc::S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        if !rmdir && kind == libc::S_IFDIR {
            return Err(Errno::EISDIR);
        }
        let dir_path = self.path(parent)?;
        let path = child(&dir_path, name);
        let inner = if rmdir {
            let up = found.upper.as_ref().map(|(fd, _)| fd.as_fd());
            let lower_visible = found.lower.as_ref().is_some_and(|l| l.kind == Kind::Dir)
                && match up {
                    Some(fd) => !whiteout::opaque(fd)?,
                    None => true,
                };
            let listing = self.listing(up, &path, lower_visible)?;
            if !listing.items.is_empty() {
                return Err(Errno::ENOTEMPTY);
            }
            listing.reserved
        } else {
            Vec::new()
        };
        let (up, _) = self.upper_dir(parent)?;
        if found.lower.is_some() {
            self.make_reserved(up.as_fd(), &dir_path, &whiteout_name(name))?;
        }
        if let Some((fd, _)) = &found.upper {
            // An open file keeps working once its name is gone only if its
            // node holds its fd (it may have been closed for the budget).
            if let Some(ino) = self.nodes.child(parent, name) {
                let _ = self.nodes.info(ino);
            }
            for r in &inner {
                self.drop_reserved(fd.as_fd(), &path, r)?;
            }
            self.before(Mutation::Remove { path: &path })?;
            let flags = if rmdir { libc::AT_REMOVEDIR } else { 0 };
            sys::unlinkat(up.as_fd(), &cname, flags).map_err(errno)?;
            self.after(Mutation::Remove { path: &path }, None);
        }
        self.nodes.unlink(parent, name);
        Ok(())
    }

    /// `rename` of `parent/name` to `new_parent/new_name` with `renameat2`
    /// flags (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`; `RENAME_WHITEOUT` is
    /// `EINVAL`).
    fn rename(&self, from: (u64, &[u8]), to: (u64, &[u8]), flags: RenameFlags) -> Res<()> {
        self.rename_merged(from, to, flags)
    }
}
