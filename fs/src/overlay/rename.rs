//! Renames in the merged view, lower files and whole lower directories
//! included (no `EXDEV`).
//!
//! The source is copied up first, a directory with everything below it
//! that shows from the lower layer (cost: the bytes of every lower file in
//! the subtree; a redirect scheme that moves a lower directory by reference
//! is a later optimisation). Then, in this order, each step safe to be the
//! last one before a crash:
//!
//! 1. if the destination shows a lower entry, its whiteout is made (and a
//!    merged destination directory's own whiteouts and opaque marker go);
//! 2. if the source shows a lower entry, its whiteout is made;
//! 3. a directory moving onto a path where the lower layer has a directory
//!    gets the opaque marker (it was copied up whole, so this hides
//!    nothing of its own);
//! 4. the upper rename (`Rename` with upper paths);
//! 5. the destination's whiteout is removed (the upper entry now covers it).
//!
//! `RENAME_NOREPLACE` is checked against the merged view. `RENAME_EXCHANGE`
//! copies both entries up (whole), marks a directory opaque where step 3
//! says so, and swaps them in the upper layer; no whiteout changes, since
//! both names stay occupied.

use std::os::fd::AsFd;

use fuser::{Errno, RenameFlags};

use super::lower::Kind;
use super::node::{kind_mode, Found};
use super::state::State;
use super::whiteout::{reserved, whiteout_name, OPAQUE};
use crate::errno::errno;
use crate::hook::Mutation;
use crate::inode::{child, InodeKey};
use crate::reply::Res;
use crate::report::Report;
use crate::sys;

/// The parts of a [`Found`] a rename decides on.
struct Side {
    /// The merged entry's `S_IFMT` bits; `None` when the name is free.
    kind: Option<u32>,
    upper: Option<InodeKey>,
    lower_origin: Option<u64>,
    lower_shows: bool,
}

fn side(f: &Found) -> Side {
    Side {
        kind: f
            .upper
            .as_ref()
            .map(|(_, st)| st.st_mode & libc::S_IFMT)
            .or_else(|| f.lower.as_ref().map(|l| kind_mode(l.kind))),
        upper: f.upper.as_ref().map(|(_, st)| InodeKey::of(st)),
        lower_origin: f.lower.as_ref().map(|l| l.origin),
        lower_shows: f.lower.is_some(),
    }
}

impl State {
    /// The node of `parent/name` (which the kernel looked up before the
    /// rename, so it is nearly always cached) and whether it was made here
    /// for the rename alone (then the caller forgets it once).
    fn node_for(&self, parent: u64, name: &[u8]) -> Res<(u64, bool)> {
        if let Some(ino) = self.nodes.child(parent, name) {
            return Ok((ino, false));
        }
        let found = self.resolve(parent, name)?;
        let ino = self
            .nodes
            .lookup(parent, name, found)
            .ok_or(Errno::ENOENT)?;
        Ok((ino, true))
    }

    /// True when the merged directory at `parent/name` (found as `f`) has
    /// no entries; also returns its reserved upper files.
    fn merged_empty(&self, parent: u64, name: &[u8], f: &Found) -> Res<(bool, Vec<Vec<u8>>)> {
        let path = self.child_path(parent, name)?;
        let up = f.upper.as_ref().map(|(fd, _)| fd.as_fd());
        let lower_visible = f.lower.as_ref().is_some_and(|l| l.kind == Kind::Dir)
            && match up {
                Some(fd) => !super::whiteout::opaque(fd)?,
                None => true,
            };
        let listing = self.listing(up, &path, lower_visible)?;
        Ok((listing.items.is_empty(), listing.reserved))
    }

    #[allow(clippy::type_complexity)]
    fn rename_nodes(
        &self,
        (parent, name, cname, src_ino, src): (u64, &[u8], &std::ffi::CString, u64, &Side),
        (np, nn, new_cname, dst_ino, dst): (u64, &[u8], &std::ffi::CString, Option<u64>, &Side),
        exchange: bool,
        noreplace: bool,
        dst_upper: Option<std::os::fd::BorrowedFd<'_>>,
        dst_reserved: &[Vec<u8>],
    ) -> Res<()> {
        self.copy_up_tree(src_ino)?;
        if let Some(d) = dst_ino {
            self.copy_up_tree(d)?;
        }
        let (pdir, from_dir) = self.upper_dir(parent)?;
        let (npdir, to_dir) = self.upper_dir(np)?;
        let from = child(&from_dir, name);
        let to = child(&to_dir, nn);
        if !exchange {
            if dst.lower_shows {
                self.make_reserved(npdir.as_fd(), &to_dir, &whiteout_name(nn))?;
            }
            if let Some(fd) = dst_upper {
                for r in dst_reserved {
                    self.drop_reserved(fd, &to, r)?;
                }
            }
            if src.lower_shows {
                self.make_reserved(pdir.as_fd(), &from_dir, &whiteout_name(name))?;
            }
        }
        if src.kind == Some(libc::S_IFDIR) && self.lower_has_dir(&to)? {
            let fd = self.copy_up(src_ino, None)?;
            self.make_reserved(fd.as_fd(), &from, OPAQUE)?;
        }
        if let (true, Some(d), Some(libc::S_IFDIR)) = (exchange, dst_ino, dst.kind) {
            if self.lower_has_dir(&from)? {
                let fd = self.copy_up(d, None)?;
                self.make_reserved(fd.as_fd(), &to, OPAQUE)?;
            }
        }
        let mutation = Mutation::Rename {
            from: &from,
            to: &to,
            exchange,
        };
        self.before(mutation)?;
        if !exchange {
            // The replaced node keeps its fd (an open file stays usable).
            if let Some(ino) = self.nodes.child(np, nn) {
                let _ = self.nodes.info(ino);
            }
        }
        let mut bits = 0;
        if exchange {
            bits |= libc::RENAME_EXCHANGE;
        }
        if noreplace {
            bits |= libc::RENAME_NOREPLACE;
        }
        sys::renameat2(pdir.as_fd(), cname, npdir.as_fd(), new_cname, bits).map_err(errno)?;
        self.nodes.rename(parent, name, np, nn, exchange);
        let now = match exchange {
            true => None,
            false => sys::stat_at(npdir.as_fd(), new_cname).ok().flatten(),
        };
        self.after(mutation, now.as_ref());
        self.nodes.drop_lower_below(src_ino);
        if let Some(d) = dst_ino {
            self.nodes.drop_lower_below(d);
        }
        if !exchange {
            self.drop_reserved(npdir.as_fd(), &to_dir, &whiteout_name(nn))?;
        }
        Ok(())
    }

    /// `rename` of `parent/name` to `new_parent/new_name` with `renameat2`
    /// flags (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`; `RENAME_WHITEOUT` is
    /// `EINVAL`).
    pub(super) fn rename_merged(
        &self,
        (parent, name): (u64, &[u8]),
        (new_parent, new_name): (u64, &[u8]),
        flags: RenameFlags,
    ) -> Res<()> {
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        if !(flags - RenameFlags::RENAME_EXCHANGE - RenameFlags::RENAME_NOREPLACE).is_empty() {
            return Err(Errno::EINVAL);
        }
        Self::check_new_name(new_name)?;
        let cname = sys::cname(name).map_err(errno)?;
        let new_cname = sys::cname(new_name).map_err(errno)?;
        let _gate = self.gate.read();
        let _ns = self.ns.lock().unwrap_or_else(|e| e.into_inner());
        let src_found = self.resolve(parent, name)?;
        let dst_found = self.resolve(new_parent, new_name)?;
        let src = side(&src_found);
        let dst = side(&dst_found);
        let Some(src_kind) = src.kind else {
            return Err(Errno::ENOENT);
        };
        if src.upper.is_none() && reserved(name) {
            return Err(Errno::EROFS);
        }
        if noreplace && dst.kind.is_some() {
            return Err(Errno::EEXIST);
        }
        if exchange && dst.kind.is_none() {
            return Err(Errno::ENOENT);
        }
        if exchange && dst.upper.is_none() && reserved(new_name) {
            return Err(Errno::EROFS);
        }
        // Two names of one file: nothing to do (rename(2)).
        let same_upper = src.upper.is_some() && src.upper == dst.upper;
        let same_lower = src.upper.is_none()
            && dst.upper.is_none()
            && src.lower_origin.is_some()
            && src.lower_origin == dst.lower_origin;
        if (parent == new_parent && name == new_name) || same_upper || same_lower {
            return Ok(());
        }
        let mut dst_reserved = Vec::new();
        if let (Some(dk), false) = (dst.kind, exchange) {
            let src_dir = src_kind == libc::S_IFDIR;
            let dst_dir = dk == libc::S_IFDIR;
            if src_dir && !dst_dir {
                return Err(Errno::ENOTDIR);
            }
            if !src_dir && dst_dir {
                return Err(Errno::EISDIR);
            }
            if dst_dir {
                let (empty, res) = self.merged_empty(new_parent, new_name, &dst_found)?;
                if !empty {
                    return Err(Errno::ENOTEMPTY);
                }
                dst_reserved = res;
            }
        }
        let dst_upper_fd = dst_found.upper.map(|(fd, _)| fd);
        drop(src_found);

        let (src_ino, src_temp) = self.node_for(parent, name)?;
        let dst_node = if exchange {
            Some(self.node_for(new_parent, new_name)?)
        } else {
            None
        };
        let res = self.rename_nodes(
            (parent, name, &cname, src_ino, &src),
            (
                new_parent,
                new_name,
                &new_cname,
                dst_node.map(|d| d.0),
                &dst,
            ),
            exchange,
            noreplace,
            dst_upper_fd.as_ref().map(|fd| fd.as_fd()),
            &dst_reserved,
        );
        if src_temp {
            self.nodes.forget(src_ino, 1);
        }
        if let Some((ino, true)) = dst_node {
            self.nodes.forget(ino, 1);
        }
        res
    }
}
