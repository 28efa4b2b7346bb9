//! The inode table: FUSE inode numbers ↔ backing inodes.
//!
//! Each node holds an `O_PATH | O_NOFOLLOW` fd on its backing inode, opened
//! relative to its parent's fd, so every operation is anchored inside the
//! backing directory and cannot be redirected by a symlink. Nodes are keyed
//! by the backing `(dev, ino)`, so hard links share one FUSE inode. The
//! kernel's lookup count decides a node's life: each successful entry reply
//! adds one, `forget` subtracts; at zero the node and its fd go away. The
//! root (FUSE inode 1) is never forgotten. A node's FUSE number is its
//! backing inode number where that is unambiguous (see `Table::fresh_ino`).
//!
//! The fds are bounded: past a budget (set from `RLIMIT_NOFILE`, see
//! [`Inodes::new`]) the table closes the fds of nodes it can find again by
//! name, and [`Inodes::get`] reopens such a node from its parent's fd and
//! its first name, checking that the name still leads to the same backing
//! inode. So the kernel may keep any number of inodes cached without the
//! daemon running out of descriptors.
//!
//! A node also remembers the names it is known by, as (parent inode, name)
//! pairs, so its path can be computed for the mutation hook and so a path
//! can be resolved to a cached inode in O(depth) for invalidation. Names are
//! learned from lookups and creations and updated on unlink and rename.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

/// FUSE inode number of the root.
pub(crate) const ROOT: u64 = 1;

/// First FUSE inode number handed out when a backing inode number cannot be
/// reused (another device, or already taken).
const SYNTHETIC_BASE: u64 = 1 << 62;

/// The smallest fd budget (enough for any path's chain of directories to be
/// reopened one step at a time).
pub(crate) const MIN_FD_BUDGET: usize = 16;

/// Longest parent chain followed when building a path (a cycle would be a
/// bug; the bound keeps it from hanging a callback).
const MAX_DEPTH: usize = 4096;

/// The backing identity of an inode: `(st_dev, st_ino)`.
pub(crate) type Key = (u64, u64);

struct Node {
    /// `None`: closed to stay within the budget; reopened by name.
    fd: Option<Arc<OwnedFd>>,
    key: Key,
    /// `st_mode & S_IFMT` at the time the node was created.
    kind: u32,
    lookups: u64,
    /// Known names, the first being the one used for the node's path.
    names: Vec<(u64, Vec<u8>)>,
    /// What the backing inode looked like when it was last opened through
    /// the mount (see [`Stamp`]).
    opened: Option<Stamp>,
}

/// The backing inode's change stamp: `(ctime s, ctime ns, mtime s, mtime
/// ns, size)`. Every change to the content, by anyone, moves the ctime, so
/// an equal stamp at two opens means the kernel's page cache of the first
/// is still exact.
pub(crate) type Stamp = (i64, i64, i64, i64, i64);

/// The stamp of `st`.
pub(crate) fn stamp(st: &libc::stat) -> Stamp {
    (
        st.st_ctime,
        st.st_ctime_nsec,
        st.st_mtime,
        st.st_mtime_nsec,
        st.st_size,
    )
}

#[derive(Default)]
struct Table {
    nodes: HashMap<u64, Node>,
    by_key: HashMap<Key, u64>,
    by_name: HashMap<(u64, Vec<u8>), u64>,
    /// Next number for inodes that cannot use their backing number.
    next_ino: u64,
    root_dev: u64,
    /// Nodes holding an fd now.
    fds: usize,
    /// Most fds the nodes may hold before some are closed.
    fd_budget: usize,
}

/// The inode table; every method takes the table's lock for a short,
/// system-call-free critical section.
pub(crate) struct Inodes {
    table: Mutex<Table>,
}

/// What a caller needs to operate on a node without holding the lock.
#[derive(Clone)]
pub(crate) struct NodeRef {
    pub(crate) fd: Arc<OwnedFd>,
    pub(crate) kind: u32,
}

impl Table {
    /// Over the budget, closes the fds of nodes that can be reopened by name
    /// (any but the root, `keep`, and nodes without a name) until a quarter
    /// of the budget is free. Returns the fds to close once the lock is
    /// released (an fd still in use by a request stays open until it ends).
    fn trim(&mut self, keep: u64) -> Vec<Arc<OwnedFd>> {
        let mut closed = Vec::new();
        if self.fds <= self.fd_budget {
            return closed;
        }
        let target = self.fd_budget - self.fd_budget / 4;
        for (ino, node) in self.nodes.iter_mut() {
            if self.fds <= target {
                break;
            }
            if *ino == ROOT || *ino == keep || node.names.is_empty() {
                continue;
            }
            if let Some(fd) = node.fd.take() {
                closed.push(fd);
                self.fds -= 1;
            }
        }
        closed
    }

    fn unlink_name(&mut self, parent: u64, name: &[u8]) -> Option<u64> {
        let ino = self.by_name.remove(&(parent, name.to_vec()))?;
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.names
                .retain(|(p, n)| !(*p == parent && n.as_slice() == name));
        }
        Some(ino)
    }

    fn link_name(&mut self, ino: u64, parent: u64, name: &[u8]) {
        if let Some(old) = self.by_name.insert((parent, name.to_vec()), ino) {
            if old != ino {
                if let Some(node) = self.nodes.get_mut(&old) {
                    node.names
                        .retain(|(p, n)| !(*p == parent && n.as_slice() == name));
                }
            }
        }
        if let Some(node) = self.nodes.get_mut(&ino) {
            if !node
                .names
                .iter()
                .any(|(p, n)| *p == parent && n.as_slice() == name)
            {
                node.names.push((parent, name.to_vec()));
            }
        }
    }

    /// The FUSE inode number for a new node of backing inode `key`: the
    /// backing inode number itself when it lives on the root's device and no
    /// node uses that number (so `st_ino` through the mount is the backing
    /// one and stays the same after the kernel forgets the inode), else a
    /// number from a counter far above any real inode number.
    fn fresh_ino(&mut self, key: Key) -> u64 {
        let (dev, ino) = key;
        if dev == self.root_dev
            && ino > ROOT
            && ino < SYNTHETIC_BASE
            && !self.nodes.contains_key(&ino)
        {
            return ino;
        }
        loop {
            let ino = self.next_ino;
            self.next_ino += 1;
            if !self.nodes.contains_key(&ino) {
                return ino;
            }
        }
    }

    fn path(&self, ino: u64) -> Option<Vec<u8>> {
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut cur = ino;
        while cur != ROOT {
            if parts.len() > MAX_DEPTH {
                return None;
            }
            let (parent, name) = self.nodes.get(&cur)?.names.first()?;
            parts.push(name);
            cur = *parent;
        }
        Some(join(parts.iter().rev().copied()))
    }
}

fn join<'a>(parts: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        if !out.is_empty() {
            out.push(b'/');
        }
        out.extend_from_slice(part);
    }
    out
}

/// `parent_path/name`, or `name` at the root.
pub(crate) fn child(parent_path: &[u8], name: &[u8]) -> Vec<u8> {
    join([parent_path, name].into_iter().filter(|p| !p.is_empty()))
}

impl Inodes {
    /// A table holding only the root, whose nodes hold at most about
    /// `fd_budget` fds (at least [`MIN_FD_BUDGET`]).
    pub(crate) fn new(root_fd: OwnedFd, root_key: Key, fd_budget: usize) -> Inodes {
        let mut table = Table {
            next_ino: SYNTHETIC_BASE,
            root_dev: root_key.0,
            fds: 1,
            fd_budget: fd_budget.max(MIN_FD_BUDGET),
            ..Table::default()
        };
        table.nodes.insert(
            ROOT,
            Node {
                fd: Some(Arc::new(root_fd)),
                key: root_key,
                kind: libc::S_IFDIR,
                lookups: 1,
                names: Vec::new(),
                opened: None,
            },
        );
        table.by_key.insert(root_key, ROOT);
        Inodes {
            table: Mutex::new(table),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Critical sections make no calls that can panic halfway.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

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
            let Some(&ino) = table.by_name.get(&(parent, name.to_vec())) else {
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
        if (st.st_dev, st.st_ino) != key {
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

    /// Records a successful lookup of `parent/name`, which resolved to the
    /// backing inode `key` through `fd`: reuses the node for that inode (a
    /// hard link, or a repeated lookup; `fd` is then closed) or creates one.
    /// Adds one to the lookup count and returns the FUSE inode number.
    pub(crate) fn remember(
        &self,
        parent: u64,
        name: &[u8],
        fd: OwnedFd,
        key: Key,
        kind: u32,
    ) -> u64 {
        let mut table = self.lock();
        let mut spare = None;
        let ino = match table.by_key.get(&key).copied() {
            Some(ino) => {
                let t = &mut *table;
                if let Some(node) = t.nodes.get_mut(&ino) {
                    node.lookups += 1;
                    if node.fd.is_none() {
                        node.fd = Some(Arc::new(fd));
                        t.fds += 1;
                    } else {
                        spare = Some(fd);
                    }
                }
                ino
            }
            None => {
                let ino = table.fresh_ino(key);
                table.fds += 1;
                table.nodes.insert(
                    ino,
                    Node {
                        fd: Some(Arc::new(fd)),
                        key,
                        kind,
                        lookups: 1,
                        names: Vec::new(),
                        opened: None,
                    },
                );
                table.by_key.insert(key, ino);
                ino
            }
        };
        table.link_name(ino, parent, name);
        let closed = table.trim(ino);
        drop(table);
        // Closed outside the lock.
        drop(closed);
        drop(spare);
        ino
    }

    /// Drops `n` lookups of `ino`; removes the node at zero.
    pub(crate) fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let mut table = self.lock();
        let Some(node) = table.nodes.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups > 0 {
            return;
        }
        if let Some(node) = table.nodes.remove(&ino) {
            if node.fd.is_some() {
                table.fds -= 1;
            }
            if table.by_key.get(&node.key) == Some(&ino) {
                table.by_key.remove(&node.key);
            }
            for (parent, name) in node.names {
                if table.by_name.get(&(parent, name.clone())) == Some(&ino) {
                    table.by_name.remove(&(parent, name));
                }
            }
        }
    }

    /// The path of `ino` relative to the backing root (empty for the root),
    /// or `None` if the node has no known name (it was unlinked) or a parent
    /// is missing.
    pub(crate) fn path(&self, ino: u64) -> Option<Vec<u8>> {
        self.lock().path(ino)
    }

    /// Every known path of `ino` (one per known hard link); the root has the
    /// single path `""`. Empty for an unlinked node.
    pub(crate) fn paths(&self, ino: u64) -> Vec<Vec<u8>> {
        if ino == ROOT {
            return vec![Vec::new()];
        }
        let table = self.lock();
        let Some(node) = table.nodes.get(&ino) else {
            return Vec::new();
        };
        node.names
            .iter()
            .filter_map(|(parent, name)| Some(child(&table.path(*parent)?, name)))
            .collect()
    }

    /// Forgets that `parent/name` names anything (after unlink or rmdir, or
    /// when the backing entry changed behind the layer's back).
    pub(crate) fn unlink(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.lock().unlink_name(parent, name)
    }

    /// Forgets `parent/name` only if it still names `ino`.
    pub(crate) fn unlink_if(&self, parent: u64, name: &[u8], ino: u64) {
        let mut table = self.lock();
        if table.by_name.get(&(parent, name.to_vec())) == Some(&ino) {
            table.unlink_name(parent, name);
        }
    }

    /// Applies a successful rename to the known names.
    pub(crate) fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        exchange: bool,
    ) {
        let mut table = self.lock();
        let moved = table.unlink_name(parent, name);
        let replaced = table.unlink_name(new_parent, new_name);
        if let Some(ino) = moved {
            table.link_name(ino, new_parent, new_name);
        }
        if exchange {
            if let Some(ino) = replaced {
                table.link_name(ino, parent, name);
            }
        }
    }

    /// Records that `ino` was opened with the backing inode at `now`;
    /// returns true if the previous open saw the same stamp (nothing changed
    /// the content in between, through the mount or behind its back).
    pub(crate) fn opened(&self, ino: u64, now: Stamp) -> bool {
        let mut table = self.lock();
        let Some(node) = table.nodes.get_mut(&ino) else {
            return false;
        };
        node.opened.replace(now) == Some(now)
    }

    /// The cached child `parent/name`, if any.
    pub(crate) fn child(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.lock().by_name.get(&(parent, name.to_vec())).copied()
    }

    /// The backing identity of `ino`.
    pub(crate) fn key(&self, ino: u64) -> Option<Key> {
        self.lock().nodes.get(&ino).map(|n| n.key)
    }

    /// The parent used for `ino`'s path.
    pub(crate) fn parent(&self, ino: u64) -> Option<u64> {
        let table = self.lock();
        table
            .nodes
            .get(&ino)
            .and_then(|n| n.names.first())
            .map(|(p, _)| *p)
    }
}
