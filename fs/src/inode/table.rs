//! The nodes: their backing identity, lookup counts and known names.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};

use super::fds::MIN_FD_BUDGET;
use super::{child, join, MAX_DEPTH, ROOT};

/// First FUSE inode number handed out when a backing inode number cannot be
/// reused (another device, or already taken).
const SYNTHETIC_BASE: u64 = 1 << 62;

/// The backing identity of an inode: its `st_dev` and `st_ino`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct InodeKey {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

impl InodeKey {
    /// The identity of the inode `st` describes.
    pub(crate) fn of(st: &libc::stat) -> InodeKey {
        InodeKey {
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

/// The backing inode's change stamp. Every change to the content, by
/// anyone, moves the ctime, so an equal stamp at two opens means the
/// kernel's page cache of the first is still exact. The default (all zero)
/// stands for "never changes" (an overlay directory only in the lower layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Stamp {
    ctime_sec: i64,
    ctime_nsec: i64,
    mtime_sec: i64,
    mtime_nsec: i64,
    /// Bytes.
    size: i64,
}

impl Stamp {
    /// The stamp of `st`.
    pub(crate) fn of(st: &libc::stat) -> Stamp {
        Stamp {
            ctime_sec: st.st_ctime,
            ctime_nsec: st.st_ctime_nsec,
            mtime_sec: st.st_mtime,
            mtime_nsec: st.st_mtime_nsec,
            size: st.st_size,
        }
    }
}

pub(super) struct Node {
    /// `None`: closed to stay within the budget; reopened by name.
    pub(super) fd: Option<Arc<OwnedFd>>,
    pub(super) key: InodeKey,
    /// `st_mode & S_IFMT` at the time the node was created.
    pub(super) kind: u32,
    /// Entry replies the kernel got for this node minus what it forgot.
    lookups: u64,
    /// Known names as (parent inode, name), the first being the one used
    /// for the node's path.
    pub(super) names: Vec<(u64, Vec<u8>)>,
    /// What the backing inode looked like when it was last opened through
    /// the mount (see [`Stamp`]).
    opened: Option<Stamp>,
    /// Without handles (`FUSE_NO_OPEN_SUPPORT`): the hook epoch in which
    /// the file's content was last reported, and whether it is written as
    /// ranges in that epoch; `None` until its first mutating request.
    reported: Option<(u64, bool)>,
    /// What the backing inode looked like right after the layer last
    /// reported what a change through the mount left in it (the hook's
    /// `after`): a different stamp at the next request without a handle
    /// means something changed it behind the mount since.
    left: Option<Stamp>,
}

/// A node that keeps its own list of the (parent, name) pairs naming it,
/// in step with [`Names`] ([`Names::link`], [`Names::unlink`]), and may
/// hold an fd within the table's budget. What the passthrough's table and
/// the overlay's share is written once on it: paths ([`path_in`],
/// [`paths_in`]) and the fd budget ([`trim_in`]).
pub(crate) trait Named {
    /// The (parent, name) pairs naming the node, the first the one used
    /// for its path.
    fn names(&self) -> &[(u64, Vec<u8>)];
    /// The same, to change.
    fn names_mut(&mut self) -> &mut Vec<(u64, Vec<u8>)>;
    /// Takes the node's fd, to close it (`None` when it holds none).
    fn take_fd(&mut self) -> Option<Arc<OwnedFd>>;
}

impl Named for Node {
    fn names(&self) -> &[(u64, Vec<u8>)] {
        &self.names
    }

    fn names_mut(&mut self) -> &mut Vec<(u64, Vec<u8>)> {
        &mut self.names
    }

    fn take_fd(&mut self) -> Option<Arc<OwnedFd>> {
        self.fd.take()
    }
}

/// The path of `ino` through the first name of each node up to the root
/// (`""` for the root), or `None` if a node on the way has no known name
/// or is missing, or the chain is deeper than [`MAX_DEPTH`].
pub(crate) fn path_in<N: Named>(nodes: &HashMap<u64, N>, ino: u64) -> Option<Vec<u8>> {
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut cur = ino;
    while cur != ROOT {
        if parts.len() > MAX_DEPTH {
            return None;
        }
        let (parent, name) = nodes.get(&cur)?.names().first()?;
        parts.push(name);
        cur = *parent;
    }
    Some(join(parts.iter().rev().copied()))
}

/// Every known path of `ino` (one per known name); the root has the single
/// path `""`. Empty for a node without a name.
pub(crate) fn paths_in<N: Named>(nodes: &HashMap<u64, N>, ino: u64) -> Vec<Vec<u8>> {
    if ino == ROOT {
        return vec![Vec::new()];
    }
    let Some(node) = nodes.get(&ino) else {
        return Vec::new();
    };
    node.names()
        .iter()
        .filter_map(|(parent, name)| Some(child(&path_in(nodes, *parent)?, name)))
        .collect()
}

/// Over the budget (`*fds` held, at most `budget`), takes the fds of nodes
/// that can be reopened by name (any but the root, `keep` and nodes
/// without a name) until a quarter of the budget is free. Returns them, to
/// be closed once the table's lock is released (an fd still in use by a
/// request stays open until it ends).
pub(crate) fn trim_in<N: Named>(
    nodes: &mut HashMap<u64, N>,
    fds: &mut usize,
    budget: usize,
    keep: u64,
) -> Vec<Arc<OwnedFd>> {
    let mut closed = Vec::new();
    if *fds <= budget {
        return closed;
    }
    let target = budget - budget / 4;
    for (ino, node) in nodes.iter_mut() {
        if *fds <= target {
            break;
        }
        if *ino == ROOT || *ino == keep || node.names().is_empty() {
            continue;
        }
        if let Some(fd) = node.take_fd() {
            closed.push(fd);
            *fds -= 1;
        }
    }
    closed
}

/// The (parent, name) → FUSE inode index. Keyed by parent first, so finding
/// a name takes a borrowed `&[u8]` and allocates nothing; only adding one
/// copies the name.
#[derive(Default)]
pub(crate) struct Names {
    by_parent: HashMap<u64, HashMap<Vec<u8>, u64>>,
}

impl Names {
    /// The node `parent/name` names, if known.
    pub(crate) fn get(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.by_parent.get(&parent)?.get(name).copied()
    }

    /// Makes `parent/name` name `ino`; returns the node it named before.
    pub(crate) fn insert(&mut self, parent: u64, name: &[u8], ino: u64) -> Option<u64> {
        let names = self.by_parent.entry(parent).or_default();
        match names.get_mut(name) {
            Some(old) => Some(std::mem::replace(old, ino)),
            None => {
                names.insert(name.to_vec(), ino);
                None
            }
        }
    }

    /// Forgets `parent/name`; returns the node it named.
    pub(crate) fn remove(&mut self, parent: u64, name: &[u8]) -> Option<u64> {
        let names = self.by_parent.get_mut(&parent)?;
        let ino = names.remove(name)?;
        if names.is_empty() {
            self.by_parent.remove(&parent);
        }
        Some(ino)
    }

    /// Forgets `parent/name` here and in its node's own name list; returns
    /// the node it named.
    pub(crate) fn unlink<N: Named>(
        &mut self,
        nodes: &mut HashMap<u64, N>,
        parent: u64,
        name: &[u8],
    ) -> Option<u64> {
        let ino = self.remove(parent, name)?;
        if let Some(node) = nodes.get_mut(&ino) {
            node.names_mut()
                .retain(|(p, n)| !(*p == parent && n.as_slice() == name));
        }
        Some(ino)
    }

    /// Makes `parent/name` name `ino`, here and in the node's own name list
    /// (taking the name from the node it named before, if another).
    pub(crate) fn link<N: Named>(
        &mut self,
        nodes: &mut HashMap<u64, N>,
        ino: u64,
        parent: u64,
        name: &[u8],
    ) {
        if let Some(old) = self.insert(parent, name, ino) {
            if old != ino {
                if let Some(node) = nodes.get_mut(&old) {
                    node.names_mut()
                        .retain(|(p, n)| !(*p == parent && n.as_slice() == name));
                }
            }
        }
        if let Some(node) = nodes.get_mut(&ino) {
            let names = node.names_mut();
            if !names
                .iter()
                .any(|(p, n)| *p == parent && n.as_slice() == name)
            {
                names.push((parent, name.to_vec()));
            }
        }
    }

    /// The known children of `parent`, as (name, node).
    pub(crate) fn children(&self, parent: u64) -> Vec<(Vec<u8>, u64)> {
        self.by_parent
            .get(&parent)
            .map(|names| names.iter().map(|(n, i)| (n.clone(), *i)).collect())
            .unwrap_or_default()
    }
}

#[derive(Default)]
pub(super) struct Table {
    pub(super) nodes: HashMap<u64, Node>,
    by_key: HashMap<InodeKey, u64>,
    pub(super) names: Names,
    /// Next number for inodes that cannot use their backing number.
    next_ino: u64,
    root_dev: u64,
    /// Nodes holding an fd now.
    pub(super) fds: usize,
    /// Most fds the nodes may hold before some are closed.
    pub(super) fd_budget: usize,
}

/// What [`Inodes::everything`] lists.
pub(crate) struct Everything {
    /// Each known name as (parent, name).
    pub(crate) names: Vec<(u64, Vec<u8>)>,
    /// Each node as (FUSE inode, `S_IFMT` type).
    pub(crate) nodes: Vec<(u64, u32)>,
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
    fn unlink_name(&mut self, parent: u64, name: &[u8]) -> Option<u64> {
        let ino = self.names.unlink(&mut self.nodes, parent, name)?;
        // A node without a name may come back for another file that got
        // the same backing inode number (made behind the mount): it must
        // report that file's content afresh.
        if let Some(node) = self.nodes.get_mut(&ino) {
            if node.names.is_empty() {
                node.reported = None;
                node.left = None;
            }
        }
        Some(ino)
    }

    fn link_name(&mut self, ino: u64, parent: u64, name: &[u8]) {
        self.names.link(&mut self.nodes, ino, parent, name)
    }

    /// The FUSE inode number for a new node of backing inode `key`: the
    /// backing inode number itself when it lives on the root's device and no
    /// node uses that number (so `st_ino` through the mount is the backing
    /// one and stays the same after the kernel forgets the inode), else a
    /// number from a counter far above any real inode number.
    fn fresh_ino(&mut self, key: InodeKey) -> u64 {
        let InodeKey { dev, ino } = key;
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
        path_in(&self.nodes, ino)
    }
}

impl Inodes {
    /// A table holding only the root, whose nodes hold at most about
    /// `fd_budget` fds (at least [`MIN_FD_BUDGET`]).
    pub(crate) fn new(root_fd: OwnedFd, root_key: InodeKey, fd_budget: usize) -> Inodes {
        let mut table = Table {
            next_ino: SYNTHETIC_BASE,
            root_dev: root_key.dev,
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
                reported: None,
                left: None,
            },
        );
        table.by_key.insert(root_key, ROOT);
        Inodes {
            table: Mutex::new(table),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Table> {
        // Critical sections make no calls that can panic halfway.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one lookup of `parent/name`, which resolved to the backing
    /// inode `key` through `fd`: reuses the node for that inode (a hard
    /// link, or a repeated lookup; `fd` is then closed) or creates one, and
    /// records the name. Returns the FUSE inode number, and whether the
    /// node is new. The caller sends the entry reply, or calls
    /// [`Inodes::forget`] once if it cannot.
    pub(crate) fn lookup(
        &self,
        parent: u64,
        name: &[u8],
        fd: OwnedFd,
        key: InodeKey,
        kind: u32,
    ) -> (u64, bool) {
        let mut table = self.lock();
        let mut spare = None;
        let created = !table.by_key.contains_key(&key);
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
                        reported: None,
                        left: None,
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
        (ino, created)
    }

    /// Drops `n` lookups of `ino`; removes the node at zero. Returns the
    /// backing identity of a directory node removed (its watch mark goes).
    pub(crate) fn forget(&self, ino: u64, n: u64) -> Option<InodeKey> {
        if ino == ROOT {
            return None;
        }
        let mut table = self.lock();
        let node = table.nodes.get_mut(&ino)?;
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups > 0 {
            return None;
        }
        let mut removed_dir = None;
        if let Some(node) = table.nodes.remove(&ino) {
            if node.kind == libc::S_IFDIR {
                removed_dir = Some(node.key);
            }
            if node.fd.is_some() {
                table.fds -= 1;
            }
            if table.by_key.get(&node.key) == Some(&ino) {
                table.by_key.remove(&node.key);
            }
            for (parent, name) in node.names {
                if table.names.get(parent, &name) == Some(ino) {
                    table.names.remove(parent, &name);
                }
            }
        }
        removed_dir
    }

    /// Everything the kernel may hold: each known name as (parent, name),
    /// and each node with its type.
    pub(crate) fn everything(&self) -> Everything {
        let table = self.lock();
        let mut names = Vec::new();
        let mut nodes = Vec::with_capacity(table.nodes.len());
        for (ino, node) in &table.nodes {
            nodes.push((*ino, node.kind));
            for (parent, name) in &node.names {
                names.push((*parent, name.clone()));
            }
        }
        Everything { names, nodes }
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
        paths_in(&self.lock().nodes, ino)
    }

    /// Forgets that `parent/name` names anything (after unlink or rmdir, or
    /// when the backing entry changed behind the layer's back).
    pub(crate) fn unlink(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.lock().unlink_name(parent, name)
    }

    /// Forgets `parent/name` only if it still names `ino`.
    pub(crate) fn unlink_if(&self, parent: u64, name: &[u8], ino: u64) {
        let mut table = self.lock();
        if table.names.get(parent, name) == Some(ino) {
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

    /// The hook epoch in which `ino`'s content was last reported by a
    /// request without a handle, and whether it is written as ranges then
    /// (see `Node::reported`); `None` if never, or the node is gone.
    pub(crate) fn reported(&self, ino: u64) -> Option<(u64, bool)> {
        self.lock().nodes.get(&ino).and_then(|n| n.reported)
    }

    /// The stamp the backing inode of `ino` had right after the layer last
    /// reported a change of it ([`Inodes::set_left`]).
    pub(crate) fn left(&self, ino: u64) -> Option<Stamp> {
        self.lock().nodes.get(&ino).and_then(|n| n.left)
    }

    /// Records the stamp the backing inode of `ino` has right after the
    /// layer reported what a change through the mount left in it.
    pub(crate) fn set_left(&self, ino: u64, now: Stamp) {
        if let Some(node) = self.lock().nodes.get_mut(&ino) {
            node.left = Some(now);
        }
    }

    /// Records that `ino`'s content was reported in `epoch`, as ranges or
    /// whole.
    pub(crate) fn set_reported(&self, ino: u64, epoch: u64, ranged: bool) {
        if let Some(node) = self.lock().nodes.get_mut(&ino) {
            node.reported = Some((epoch, ranged));
        }
    }

    /// The cached child `parent/name`, if any.
    pub(crate) fn child(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.lock().names.get(parent, name)
    }

    /// The backing identity of `ino`.
    pub(crate) fn key(&self, ino: u64) -> Option<InodeKey> {
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

#[cfg(test)]
mod tests {
    use super::Names;

    #[test]
    fn names_insert_replace_remove() {
        let mut names = Names::default();
        assert_eq!(names.insert(1, b"a", 10), None);
        assert_eq!(names.insert(1, b"b", 11), None);
        assert_eq!(names.insert(2, b"a", 12), None);
        assert_eq!(names.get(1, b"a"), Some(10));
        assert_eq!(names.get(2, b"a"), Some(12));
        assert_eq!(names.get(3, b"a"), None);
        // Renaming over a name hands back what it named.
        assert_eq!(names.insert(1, b"a", 13), Some(10));
        assert_eq!(names.get(1, b"a"), Some(13));
        assert_eq!(names.remove(1, b"a"), Some(13));
        assert_eq!(names.remove(1, b"a"), None);
        assert_eq!(names.remove(1, b"b"), Some(11));
        // A parent with no names left takes no room.
        assert!(!names.by_parent.contains_key(&1));
        assert_eq!(names.get(2, b"a"), Some(12));
    }
}
