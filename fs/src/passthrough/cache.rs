//! The passthrough's side of [`crate::Controller::invalidate`] (a path
//! changed in the backing directory, resolved to what the kernel may have
//! cached for it through the (parent, name) index) and of
//! [`crate::Controller::write_back`] (the files open for writing).

use std::os::fd::AsFd;

use super::State;
use crate::controller::{Inval, Invalidate};
use crate::handle::NO_EPOCH;
use crate::hook::Mutation;
use crate::inode::{InodeKey, ROOT};
use crate::sys;

impl Invalidate for State {
    fn written_files(&self) -> Vec<(u64, Vec<u8>)> {
        let mut inos: Vec<u64> = self.handles.writable().iter().map(|h| h.ino).collect();
        inos.sort_unstable();
        inos.dedup();
        inos.into_iter()
            .filter_map(|ino| Some((ino, self.inodes.path(ino)?)))
            .collect()
    }

    fn written_back(&self, ino: u64) {
        // As at a close (`flush`): what the writeback left is reported, so
        // the path's fingerprint is the one the mount made.
        let mut dirty = false;
        for h in self.handles.writable() {
            if h.ino == ino && h.epoch() != NO_EPOCH && h.take_dirty() {
                dirty = true;
            }
        }
        if dirty {
            self.after_inode(ino, |path| Mutation::Content { path });
        }
    }

    fn invalidations(&self, path: &[u8], out: &mut Vec<Inval>) {
        let inodes = &self.inodes;
        let parts: Vec<&[u8]> = path
            .split(|&b| b == b'/')
            .filter(|p| !p.is_empty())
            .collect();
        let Some((name, dirs)) = parts.split_last() else {
            out.push(Inval::Inode(ROOT));
            return;
        };
        let mut parent = Some(ROOT);
        for dir in dirs {
            parent = parent.and_then(|p| inodes.child(p, dir));
        }
        // A directory the kernel never looked up has no cached children.
        let Some(parent) = parent else { return };
        let cached = inodes.child(parent, name);
        if let Some(ino) = cached {
            let now = inodes.get(parent).and_then(|dir| {
                let cname = sys::cname(name).ok()?;
                sys::stat_at(dir.fd.as_fd(), &cname).ok().flatten()
            });
            if now.map(|st| InodeKey::of(&st)) != inodes.key(ino) {
                inodes.unlink_if(parent, name, ino);
            }
        }
        out.push(Inval::Entry(parent, name.to_vec()));
        if let Some(ino) = cached {
            out.push(Inval::Inode(ino));
        }
        out.push(Inval::Inode(parent));
    }
}
