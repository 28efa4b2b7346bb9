//! The fd budget: the kernel decides how many inodes stay cached (until
//! `forget`), so one fd per node could exhaust `RLIMIT_NOFILE`. Past a
//! budget (set from `RLIMIT_NOFILE`, see [`Inodes::new`]) the table closes
//! the fds of nodes it can find again by name, and [`Inodes::get`] reopens
//! such a node from its parent's fd and its first name, checking that the
//! name still leads to the same backing inode. So the kernel may keep any
//! number of inodes cached without the daemon running out of descriptors.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::table::{trim_in, InodeKey, Inodes, NodeRef, Table};
use super::MAX_DEPTH;

/// The smallest fd budget (enough for any path's chain of directories to be
/// reopened one step at a time).
pub(crate) const MIN_FD_BUDGET: usize = 16;

impl Table {
    /// Over the budget, closes the fds of nodes that can be reopened by name
    /// (any but the root, `keep`, and nodes without a name) until a quarter
    /// of the budget is free. Returns the fds to close once the lock is
    /// released (an fd still in use by a request stays open until it ends).
    pub(super) fn trim(&mut self, keep: u64) -> Vec<Arc<OwnedFd>> {
        trim_in(&mut self.nodes, &mut self.fds, self.fd_budget, keep)
    }
}

impl Inodes {
    /// The node's fd and type, or `None` if the kernel asked about an inode
    /// the table no longer has. A node whose fd was closed (see the module
    /// docs) is reopened from its parent and first name, outside the lock;
    /// `None` too when that name no longer leads to the same backing inode
    /// (changed behind the mount's back, or the node has no name left): the
    /// caller answers `ESTALE` and the kernel looks the name up again.
    pub(crate) fn get(&self, ino: u64) -> Option<NodeRef> {
        self.get_at(ino, 0)
    }

    /// Makes sure the node cached for `parent/name`, if any, holds its fd
    /// (reopening it if the budget closed it), before the name goes away.
    /// One lookup under the lock when the fd is there, as it nearly always is.
    pub(crate) fn hold_fd_of(&self, parent: u64, name: &[u8]) {
        let ino = {
            let table = self.lock();
            let Some(ino) = table.names.get(parent, name) else {
                return;
            };
            match table.nodes.get(&ino) {
                Some(node) if node.fd.is_none() => ino,
                _ => return,
            }
        };
        let _ = self.get(ino);
    }

    fn get_at(&self, ino: u64, depth: usize) -> Option<NodeRef> {
        let (parent, name, key, kind) = {
            let table = self.lock();
            let node = table.nodes.get(&ino)?;
            if let Some(fd) = &node.fd {
                return Some(NodeRef {
                    fd: Arc::clone(fd),
                    kind: node.kind,
                });
            }
            let (parent, name) = node.names.first()?.clone();
            (parent, name, node.key, node.kind)
        };
        if depth >= MAX_DEPTH {
            return None;
        }
        let dir = self.get_at(parent, depth + 1)?;
        let fd = crate::sys::open_path(dir.fd.as_fd(), &crate::sys::cname(&name).ok()?).ok()?;
        let st = crate::sys::fstat(fd.as_fd()).ok()?;
        if InodeKey::of(&st) != key {
            return None;
        }
        let (fd, closed) = {
            let mut table = self.lock();
            let t = &mut *table;
            let node = t.nodes.get_mut(&ino)?;
            let fd = match &node.fd {
                Some(existing) => Arc::clone(existing),
                None => {
                    let fd = Arc::new(fd);
                    node.fd = Some(Arc::clone(&fd));
                    t.fds += 1;
                    fd
                }
            };
            (fd, t.trim(ino))
        };
        drop(closed);
        Some(NodeRef { fd, kind })
    }
}
