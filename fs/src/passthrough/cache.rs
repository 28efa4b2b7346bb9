//! The passthrough's side of [`crate::Controller::invalidate`] (a path
//! changed in the backing directory, resolved to what the kernel may have
//! cached for it through the (parent, name) index) and of
//! [`crate::Controller::write_back`] (the files open for writing), and what
//! the watch on the backing directory needs (`crate::watch::Target`: an
//! event at a name, or lost events).

use std::os::fd::AsFd;

use super::State;
use crate::controller::{walk, Inval, Invalidate};
use crate::handle::NO_EPOCH;
use crate::hook::Mutation;
use crate::inode::InodeKey;
use crate::sys;
use crate::watch::{Target, What};

impl Invalidate for State {
    fn written_files(&self) -> Vec<(u64, Vec<u8>)> {
        let mut inos: Vec<u64> = self.handles.writable().iter().map(|h| h.ino).collect();
        inos.sort_unstable();
        inos.dedup();
        inos.into_iter()
            .filter_map(|ino| Some((ino, self.inodes.path(ino)?)))
            .collect()
    }

    fn writers_untracked(&self) -> bool {
        self.no_open_active()
    }

    fn files_of(&self, inos: &[u64]) -> Vec<(u64, Vec<u8>)> {
        inos.iter()
            .filter(|&&ino| {
                self.inodes
                    .get(ino)
                    .is_some_and(|n| n.kind == libc::S_IFREG)
            })
            .filter_map(|&ino| Some((ino, self.inodes.path(ino)?)))
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
        let child = |dir: u64, name: &[u8]| self.inodes.child(dir, name);
        if let Some((parent, name)) = walk(path, child, out) {
            self.name_changed(parent, name, out);
        }
    }
}

impl State {
    /// The invalidations for a name created, removed or renamed behind the
    /// mount: the cached name (also a negative entry), the node it named
    /// (forgetting the mapping if the name now leads to another inode) and
    /// the directory's attributes and listing.
    fn name_changed(&self, parent: u64, name: &[u8], out: &mut Vec<Inval>) {
        let inodes = &self.inodes;
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

impl Target for State {
    fn changed(&self, dir: u64, name: Option<&[u8]>, what: What, out: &mut Vec<Inval>) {
        let Some(name) = name else {
            // The directory itself: its attributes (its listing changes
            // come as events on names).
            out.push(if what.content {
                Inval::Inode(dir)
            } else {
                Inval::Attr(dir)
            });
            return;
        };
        if what.entry {
            self.name_changed(dir, name, out);
            return;
        }
        if let Some(ino) = self.inodes.child(dir, name) {
            out.push(if what.content {
                Inval::Inode(ino)
            } else {
                Inval::Attr(ino)
            });
        }
    }

    fn everything(&self, out: &mut Vec<Inval>) {
        let crate::inode::Everything { names, nodes } = self.inodes.everything();
        for (parent, name) in &names {
            self.name_changed(*parent, name, out);
        }
        for (ino, kind) in nodes {
            out.push(Inval::Inode(ino));
            if kind != libc::S_IFDIR {
                continue;
            }
            // A name created while events were lost may be cached as a
            // miss: every name the directory holds now is invalidated.
            let Some(node) = self.inodes.get(ino) else {
                continue;
            };
            let Ok(fd) = sys::openat(
                node.fd.as_fd(),
                &std::ffi::CString::from(c"."),
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            ) else {
                continue;
            };
            let mut buf = vec![0u8; 32 * 1024];
            while let Ok(n) = sys::getdents(fd.as_fd(), &mut buf) {
                if n == 0 {
                    break;
                }
                for ent in sys::parse_dirents(&buf[..n]) {
                    if ent.name != b"." && ent.name != b".." {
                        out.push(Inval::Entry(ino, ent.name.to_vec()));
                    }
                }
            }
        }
    }
}
