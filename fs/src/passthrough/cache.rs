//! The passthrough's side of [`crate::Controller::invalidate`]: a path
//! changed in the backing directory, resolved to what the kernel may have
//! cached for it through the (parent, name) index.

use std::os::fd::AsFd;

use super::State;
use crate::controller::{Inval, Invalidate};
use crate::inode::{InodeKey, ROOT};
use crate::sys;

impl Invalidate for State {
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
