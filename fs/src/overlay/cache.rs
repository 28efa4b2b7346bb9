//! The overlay's side of [`crate::Controller::invalidate`] and
//! [`crate::Controller::write_back`] (the crate's `Invalidate` trait).
//!
//! The core rewinds the upper directory as a plain tree and then passes the
//! upper-relative paths it changed. A path maps to the merged name it
//! affects: `d/x` and the whiteout `d/.wh.x` to `d/x`, the opaque marker
//! `d/.wh..wh..opq` to every cached child of `d` and every lower name of
//! `d` (which the kernel may cache as a miss); a path under a directory
//! the kernel never looked up to that directory's name (a cached miss). For each, the overlay
//! forgets its own mapping of the name if the name now resolves to another
//! entry (so the next lookup builds the right node), and the kernel drops
//! its cached name, the inode's attributes and pages, and the parent's.

use fuser::InitFlags;

use super::state::State;
use super::whiteout::{reserved, OPAQUE, PREFIX};
use crate::controller::{walk, Inval, Invalidate};
use crate::handle::NO_EPOCH;
use crate::hook::Mutation;
use crate::inode::InodeKey;

impl State {
    /// True when `parent/name` still resolves to the node `ino`.
    fn still_matches(&self, parent: u64, name: &[u8], ino: u64) -> bool {
        let (Ok(found), Some(n)) = (self.resolve(parent, name), self.nodes.info(ino)) else {
            return false;
        };
        match (&found.upper, &n.upper) {
            (Some((_, st)), Some(up)) => InodeKey::of(st) == up.key,
            (None, None) => found.lower.map(|l| l.origin) == n.lower.as_ref().map(|l| l.origin),
            _ => false,
        }
    }

    /// Invalidates the cached name `parent/name`.
    fn inval_name(&self, parent: u64, name: &[u8], out: &mut Vec<Inval>) {
        let cached = self.nodes.child(parent, name);
        if let Some(ino) = cached {
            if !self.still_matches(parent, name, ino) {
                self.nodes.unlink_if(parent, name, ino);
            }
        }
        out.push(Inval::Entry(parent, name.to_vec()));
        if let Some(ino) = cached {
            out.push(Inval::Inode(ino));
        }
    }
}

impl Invalidate for State {
    fn written_files(&self) -> Vec<(u64, Vec<u8>)> {
        let mut inos: Vec<u64> = self
            .handles
            .filter_map(|h| h.upper().filter(|h| h.writable).map(|h| h.ino));
        inos.sort_unstable();
        inos.dedup();
        inos.into_iter()
            .filter_map(|ino| Some((ino, self.nodes.path(ino)?)))
            .collect()
    }

    fn writers_untracked(&self) -> bool {
        self.granted.has(InitFlags::FUSE_NO_OPEN_SUPPORT)
    }

    fn files_of(&self, inos: &[u64]) -> Vec<(u64, Vec<u8>)> {
        inos.iter()
            .filter(|&&ino| {
                self.nodes
                    .info(ino)
                    .is_some_and(|n| n.kind == libc::S_IFREG)
            })
            .filter_map(|&ino| Some((ino, self.nodes.path(ino)?)))
            .collect()
    }

    fn written_back(&self, ino: u64) {
        let dirty = self.handles.filter_map(|h| {
            let h = h.upper()?;
            (h.ino == ino && h.epoch() != NO_EPOCH && h.take_dirty()).then_some(())
        });
        if !dirty.is_empty() {
            self.after_inode(ino, |path| Mutation::Content { path });
        }
    }

    fn invalidations(&self, path: &[u8], out: &mut Vec<Inval>) {
        let child = |dir: u64, name: &[u8]| self.nodes.child(dir, name);
        let Some((parent, name)) = walk(path, child, out) else {
            return;
        };
        if name == OPAQUE {
            for (child, _) in self.nodes.children(parent) {
                self.inval_name(parent, &child, out);
            }
            // The lower children that the marker hid (or now hides) may be
            // cached as misses: each lower name is invalidated too (only a
            // rewind adds or removes a marker behind the kernel's back).
            let lower = self
                .nodes
                .path(parent)
                .and_then(|p| self.lower.readdir(&p).ok().flatten());
            for e in lower.unwrap_or_default() {
                if self.nodes.child(parent, &e.name).is_none() {
                    out.push(Inval::Entry(parent, e.name));
                }
            }
        } else if reserved(name) {
            self.inval_name(parent, &name[PREFIX.len()..], out);
        } else {
            self.inval_name(parent, name, out);
        }
        out.push(Inval::Inode(parent));
    }
}
