//! The overlay's nodes: FUSE inode numbers that stay the same across
//! copy-up.
//!
//! A node is what the kernel knows as one inode. It is found again by its
//! lower **origin** ([`Attr::origin`], so the lower hard links of one file
//! share a node) while it lives only in the lower layer, and by its upper
//! `(dev, ino)` once it has an upper entry (copied up, or created in the
//! upper layer). Copy-up moves a node from the first index to the second
//! and keeps its FUSE number: `st_ino` through the mount does not change.
//!
//! **FUSE numbers.** An upper entry gets its upper inode number when that is
//! free and below 2^62 (so it survives a `forget` and a remount); a lower
//! entry gets its origin when that is free and below 2^62 (a lower layer
//! over a real directory passes that directory's inode numbers, so a tool
//! that remembers `st_ino`, git's index among them, sees the same numbers
//! through the overlay), else `2^63 | origin` when free (stable across
//! remounts while it is not copied up); anything else a number from a
//! counter starting at 2^62.
//! After a remount a copied-up file shows its upper inode number (the
//! overlay keeps no persistent origin map; docs in `mod.rs`).
//!
//! The lookup-count contract is the passthrough's (`inode/mod.rs`): every
//! entry reply counts one lookup, `forget` takes them away, at zero the
//! node and its names go. Known names are (parent, name) pairs, kept in the
//! crate's [`Names`] index, so a node's path (which is both its merged path
//! and its upper-relative path) is computed in O(depth).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};

use super::lower::{Attr, Kind};
use std::os::fd::AsFd;

use crate::inode::{
    path_in, paths_in, trim_in, InodeKey, Names, Stamp, MAX_DEPTH, MIN_FD_BUDGET, ROOT,
};
use crate::sys;

/// First number handed out when an entry's preferred number is taken.
const SYNTHETIC_BASE: u64 = 1 << 62;

/// The bit set in the FUSE number of a lower entry (`2^63 | origin`).
const LOWER_BIT: u64 = 1 << 63;

/// A node's upper entry: an `O_PATH | O_NOFOLLOW` fd on it and its
/// identity.
#[derive(Clone)]
pub(super) struct Upper {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) key: InodeKey,
}

/// A node's upper entry as the table keeps it: the fd may be closed to
/// stay within the fd budget, then reopened by name ([`Nodes::info`]).
struct Slot {
    fd: Option<Arc<OwnedFd>>,
    key: InodeKey,
}

pub(super) struct Node {
    /// Entry replies the kernel got for this node minus what it forgot.
    lookups: u64,
    /// Known names as (parent inode, name), the first used for the path.
    names: Vec<(u64, Vec<u8>)>,
    /// `S_IFMT` bits.
    kind: u32,
    /// The upper entry, once there is one.
    upper: Option<Slot>,
    /// The lower entry shown at the node's path (for a lower-only node its
    /// attributes; for a merged directory, the lower directory whose
    /// children show through unless the upper one is opaque). `None` for an
    /// entry that exists only in the upper layer.
    lower: Option<Attr>,
    /// The lower origin the node is indexed by while it has no upper entry.
    origin: Option<u64>,
    /// The stamp at the previous open (for `FOPEN_KEEP_CACHE`).
    opened: Option<Stamp>,
    /// Without OPEN: the hook epoch the content was last reported in by a
    /// request without a handle, and whether as ranges (`io.rs`).
    reported: Option<(u64, bool)>,
}

/// What a lookup found at a name: the upper entry (fd and `stat`) and the
/// lower entry that shows through (not hidden by a whiteout or an opaque
/// directory).
pub(super) struct Found {
    pub(super) upper: Option<(OwnedFd, libc::stat)>,
    pub(super) lower: Option<Attr>,
}

/// A snapshot of what an operation needs of one node.
#[derive(Clone)]
pub(super) struct NodeInfo {
    pub(super) kind: u32,
    pub(super) upper: Option<Upper>,
    pub(super) lower: Option<Attr>,
}

#[derive(Default)]
struct Table {
    nodes: HashMap<u64, Node>,
    names: Names,
    by_upper: HashMap<InodeKey, u64>,
    by_origin: HashMap<u64, u64>,
    next_ino: u64,
    upper_dev: u64,
    /// Nodes holding an upper fd now.
    fds: usize,
    /// Most upper fds the nodes may hold before some are closed.
    fd_budget: usize,
}

/// The node table; every method takes its lock for a short critical
/// section without system calls.
pub(super) struct Nodes {
    table: Mutex<Table>,
}

fn mode_of(kind: Kind) -> u32 {
    match kind {
        Kind::File => libc::S_IFREG,
        Kind::Dir => libc::S_IFDIR,
        Kind::Symlink => libc::S_IFLNK,
        Kind::Fifo => libc::S_IFIFO,
        Kind::Socket => libc::S_IFSOCK,
        Kind::CharDevice => libc::S_IFCHR,
        Kind::BlockDevice => libc::S_IFBLK,
    }
}

/// The `S_IFMT` bits of a lower kind.
pub(super) fn kind_mode(kind: Kind) -> u32 {
    mode_of(kind)
}

impl Table {
    /// Over the budget, closes the upper fds of nodes that can be reopened
    /// by name (any but the root, `keep` and nodes without a name) until a
    /// quarter of the budget is free; returns them, to be closed once the
    /// lock is released.
    fn trim(&mut self, keep: u64) -> Vec<Arc<OwnedFd>> {
        trim_in(&mut self.nodes, &mut self.fds, self.fd_budget, keep)
    }

    fn free(&self, ino: u64) -> bool {
        ino > ROOT && !self.nodes.contains_key(&ino)
    }

    fn counter(&mut self) -> u64 {
        loop {
            let ino = self.next_ino;
            self.next_ino += 1;
            if self.free(ino) {
                return ino;
            }
        }
    }

    fn fresh_upper(&mut self, key: InodeKey) -> u64 {
        if key.dev == self.upper_dev && key.ino < SYNTHETIC_BASE && self.free(key.ino) {
            return key.ino;
        }
        self.counter()
    }

    fn fresh_lower(&mut self, origin: u64) -> u64 {
        if origin < SYNTHETIC_BASE && self.free(origin) {
            return origin;
        }
        let ino = LOWER_BIT | origin;
        if self.free(ino) {
            return ino;
        }
        self.counter()
    }
}

/// The number a lower entry of `origin` is shown with when it is free (see
/// the module docs): what a listing reports for a lower entry the kernel
/// has not looked up yet.
pub(super) fn lower_number(origin: u64) -> u64 {
    if origin < SYNTHETIC_BASE && origin > ROOT {
        origin
    } else {
        LOWER_BIT | origin
    }
}

impl Table {
    fn path(&self, ino: u64) -> Option<Vec<u8>> {
        path_in(&self.nodes, ino)
    }

    fn unlink_name(&mut self, parent: u64, name: &[u8]) -> Option<u64> {
        self.names.unlink(&mut self.nodes, parent, name)
    }

    fn link_name(&mut self, ino: u64, parent: u64, name: &[u8]) {
        self.names.link(&mut self.nodes, ino, parent, name)
    }
}

impl crate::inode::Named for Node {
    fn names(&self) -> &[(u64, Vec<u8>)] {
        &self.names
    }

    fn take_fd(&mut self) -> Option<Arc<OwnedFd>> {
        self.upper.as_mut().and_then(|s| s.fd.take())
    }

    fn names_mut(&mut self) -> &mut Vec<(u64, Vec<u8>)> {
        &mut self.names
    }
}

impl Nodes {
    /// A table holding the root (FUSE inode 1) on the upper root `upper`,
    /// over the lower root `lower` (if the lower layer has one).
    /// At most about `fd_budget` (at least [`MIN_FD_BUDGET`]) upper fds
    /// are held; past that, nodes that can be found again by name close
    /// theirs (the passthrough's scheme, `inode/fds.rs`).
    pub(super) fn new(upper: Upper, lower: Option<Attr>, fd_budget: usize) -> Nodes {
        let mut table = Table {
            next_ino: SYNTHETIC_BASE,
            upper_dev: upper.key.dev,
            fds: 1,
            fd_budget: fd_budget.max(MIN_FD_BUDGET),
            ..Table::default()
        };
        table.by_upper.insert(upper.key, ROOT);
        table.nodes.insert(
            ROOT,
            Node {
                lookups: 1,
                names: Vec::new(),
                kind: libc::S_IFDIR,
                upper: Some(Slot {
                    fd: Some(upper.fd),
                    key: upper.key,
                }),
                lower,
                origin: None,
                opened: None,
                reported: None,
            },
        );
        Nodes {
            table: Mutex::new(table),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Critical sections make no calls that can panic halfway.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one lookup of `parent/name`, which resolved to `found`;
    /// returns the node's FUSE number, or `None` if `found` is empty. Reuses
    /// the node of the same upper inode, or (for a lower-only entry) of the
    /// same origin; otherwise makes one.
    pub(super) fn lookup(&self, parent: u64, name: &[u8], found: Found) -> Option<u64> {
        let mut table = self.lock();
        let t = &mut *table;
        let ino = match found.upper {
            Some((fd, st)) => {
                let key = InodeKey::of(&st);
                let kind = st.st_mode & libc::S_IFMT;
                // A merged directory shows the lower one's children.
                let lower = found
                    .lower
                    .filter(|l| kind == libc::S_IFDIR && l.kind == Kind::Dir);
                match t.by_upper.get(&key).copied() {
                    Some(ino) => {
                        if let Some(node) = t.nodes.get_mut(&ino) {
                            node.lookups += 1;
                            node.lower = lower;
                            if let Some(slot) = node.upper.as_mut().filter(|s| s.fd.is_none()) {
                                slot.fd = Some(Arc::new(fd));
                                t.fds += 1;
                            }
                        }
                        ino
                    }
                    None => {
                        let ino = t.fresh_upper(key);
                        let slot = Slot {
                            fd: Some(Arc::new(fd)),
                            key,
                        };
                        t.nodes.insert(ino, new_node(kind, Some(slot), lower, None));
                        t.by_upper.insert(key, ino);
                        t.fds += 1;
                        ino
                    }
                }
            }
            None => {
                let lower = found.lower?;
                let reuse = t
                    .by_origin
                    .get(&lower.origin)
                    .copied()
                    .filter(|i| t.nodes.get(i).is_some_and(|n| n.upper.is_none()));
                match reuse {
                    Some(ino) => {
                        if let Some(node) = t.nodes.get_mut(&ino) {
                            node.lookups += 1;
                        }
                        ino
                    }
                    None => {
                        let ino = t.fresh_lower(lower.origin);
                        let origin = lower.origin;
                        let kind = mode_of(lower.kind);
                        t.nodes
                            .insert(ino, new_node(kind, None, Some(lower), Some(origin)));
                        t.by_origin.insert(origin, ino);
                        ino
                    }
                }
            }
        };
        t.link_name(ino, parent, name);
        let closed = t.trim(ino);
        drop(table);
        drop(closed);
        Some(ino)
    }

    /// Drops `n` lookups of `ino`; removes the node at zero.
    pub(super) fn forget(&self, ino: u64, n: u64) {
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
            if let Some(up) = &node.upper {
                if up.fd.is_some() {
                    table.fds -= 1;
                }
                if table.by_upper.get(&up.key) == Some(&ino) {
                    table.by_upper.remove(&up.key);
                }
            }
            if let Some(origin) = node.origin {
                if table.by_origin.get(&origin) == Some(&ino) {
                    table.by_origin.remove(&origin);
                }
            }
            for (parent, name) in node.names {
                if table.names.get(parent, &name) == Some(ino) {
                    table.names.remove(parent, &name);
                }
            }
        }
    }

    /// What operations need of `ino`; `None` if the table lacks it, or
    /// if its upper fd was closed for the budget and its first name no
    /// longer leads to the same upper inode (the caller answers `ESTALE`).
    /// A closed fd is reopened from the parent's and the first name.
    pub(super) fn info(&self, ino: u64) -> Option<NodeInfo> {
        self.info_at(ino, 0)
    }

    fn info_at(&self, ino: u64, depth: usize) -> Option<NodeInfo> {
        let (parent, name, key) = {
            let table = self.lock();
            let n = table.nodes.get(&ino)?;
            let info = |upper| NodeInfo {
                kind: n.kind,
                upper,
                lower: n.lower.clone(),
            };
            match &n.upper {
                None => return Some(info(None)),
                Some(Slot { fd: Some(fd), key }) => {
                    return Some(info(Some(Upper {
                        fd: Arc::clone(fd),
                        key: *key,
                    })))
                }
                Some(Slot { fd: None, key }) => {
                    let (parent, name) = n.names.first()?.clone();
                    (parent, name, *key)
                }
            }
        };
        if depth >= MAX_DEPTH {
            return None;
        }
        let dir = self.info_at(parent, depth + 1)?.upper?;
        let fd = sys::open_path(dir.fd.as_fd(), &sys::cname(&name).ok()?).ok()?;
        let st = sys::fstat(fd.as_fd()).ok()?;
        if InodeKey::of(&st) != key {
            return None;
        }
        let mut table = self.lock();
        let t = &mut *table;
        let n = t.nodes.get_mut(&ino)?;
        let slot = n.upper.as_mut()?;
        let fd = match &slot.fd {
            Some(existing) => Arc::clone(existing),
            None => {
                let fd = Arc::new(fd);
                slot.fd = Some(Arc::clone(&fd));
                t.fds += 1;
                fd
            }
        };
        let info = NodeInfo {
            kind: n.kind,
            upper: Some(Upper { fd, key }),
            lower: n.lower.clone(),
        };
        let closed = t.trim(ino);
        drop(table);
        drop(closed);
        Some(info)
    }

    /// The path of `ino` (merged and upper-relative alike; `""` for the
    /// root), or `None` for a node without a known name.
    pub(super) fn path(&self, ino: u64) -> Option<Vec<u8>> {
        self.lock().path(ino)
    }

    /// Every known path of `ino` (one per known hard link).
    pub(super) fn paths(&self, ino: u64) -> Vec<Vec<u8>> {
        paths_in(&self.lock().nodes, ino)
    }

    /// The first known name of `ino`.
    pub(super) fn primary(&self, ino: u64) -> Option<(u64, Vec<u8>)> {
        self.lock().nodes.get(&ino)?.names.first().cloned()
    }

    /// The parent used for `ino`'s path.
    pub(super) fn parent(&self, ino: u64) -> Option<u64> {
        self.primary(ino).map(|(p, _)| p)
    }

    /// The cached child `parent/name`.
    pub(super) fn child(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.lock().names.get(parent, name)
    }

    /// The cached children of `parent`.
    pub(super) fn children(&self, parent: u64) -> Vec<(Vec<u8>, u64)> {
        self.lock().names.children(parent)
    }

    /// `ino` now has the upper entry `upper` (copied up): it leaves the
    /// origin index, so later lookups of other lower names of the same file
    /// get a node of their own (the copy-up broke the hard link for names
    /// the kernel had not looked up; the known ones `copy_up` links).
    pub(super) fn set_upper(&self, ino: u64, upper: Upper) {
        let mut table = self.lock();
        let t = &mut *table;
        let Some(node) = t.nodes.get_mut(&ino) else {
            return;
        };
        let key = upper.key;
        let had_fd = node.upper.as_ref().is_some_and(|s| s.fd.is_some());
        node.upper = Some(Slot {
            fd: Some(upper.fd),
            key,
        });
        if node.kind != libc::S_IFDIR {
            node.lower = None;
        }
        if let Some(origin) = node.origin.take() {
            if t.by_origin.get(&origin) == Some(&ino) {
                t.by_origin.remove(&origin);
            }
        }
        t.by_upper.insert(key, ino);
        if !had_fd {
            t.fds += 1;
        }
        let closed = t.trim(ino);
        drop(table);
        drop(closed);
    }

    /// The known names of `ino`, the one its path uses first.
    pub(super) fn names(&self, ino: u64) -> Vec<(u64, Vec<u8>)> {
        self.lock()
            .nodes
            .get(&ino)
            .map(|n| n.names.clone())
            .unwrap_or_default()
    }

    /// Forgets the lower entry of `ino` and of every cached node below it:
    /// after a directory moved (fully copied up), nothing shows through.
    pub(super) fn drop_lower_below(&self, ino: u64) {
        let mut table = self.lock();
        let mut stack = vec![ino];
        let mut seen = 0usize;
        while let Some(cur) = stack.pop() {
            seen += 1;
            if seen > 1_000_000 {
                break;
            }
            if let Some(node) = table.nodes.get_mut(&cur) {
                node.lower = None;
            }
            stack.extend(table.names.children(cur).into_iter().map(|(_, i)| i));
        }
    }

    /// Forgets that `parent/name` names anything.
    pub(super) fn unlink(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.lock().unlink_name(parent, name)
    }

    /// Forgets `parent/name` only if it still names `ino`.
    pub(super) fn unlink_if(&self, parent: u64, name: &[u8], ino: u64) {
        let mut table = self.lock();
        if table.names.get(parent, name) == Some(ino) {
            table.unlink_name(parent, name);
        }
    }

    /// Applies a successful rename to the known names.
    pub(super) fn rename(&self, parent: u64, name: &[u8], np: u64, nn: &[u8], exchange: bool) {
        let mut table = self.lock();
        let moved = table.unlink_name(parent, name);
        let replaced = table.unlink_name(np, nn);
        if let Some(ino) = moved {
            table.link_name(ino, np, nn);
        }
        if exchange {
            if let Some(ino) = replaced {
                table.link_name(ino, parent, name);
            }
        }
    }

    /// The epoch `ino`'s content was last reported in without a handle,
    /// and whether as ranges.
    pub(super) fn reported(&self, ino: u64) -> Option<(u64, bool)> {
        self.lock().nodes.get(&ino)?.reported
    }

    /// Records that `ino`'s content was reported in `epoch` (`ranged`: as
    /// ranges).
    pub(super) fn set_reported(&self, ino: u64, epoch: u64, ranged: bool) {
        if let Some(node) = self.lock().nodes.get_mut(&ino) {
            node.reported = Some((epoch, ranged));
        }
    }

    /// Records an open of `ino` at `now`; true if the previous open saw the
    /// same stamp.
    pub(super) fn opened(&self, ino: u64, now: Stamp) -> bool {
        let mut table = self.lock();
        let Some(node) = table.nodes.get_mut(&ino) else {
            return false;
        };
        node.opened.replace(now) == Some(now)
    }
}

fn new_node(kind: u32, upper: Option<Slot>, lower: Option<Attr>, origin: Option<u64>) -> Node {
    Node {
        lookups: 1,
        names: Vec::new(),
        kind,
        upper,
        lower,
        origin,
        opened: None,
        reported: None,
    }
}
