//! A model to compare with.
//!
//! A property test drives random sequences of file operations, turn
//! boundaries and rewinds through a real mount, and runs the same sequence
//! against an in-memory model: a `BTreeMap` from path to node, plus the
//! expected tree at the start of every turn. Every operation must succeed or
//! fail (with the same errno) on both sides; at every turn boundary, after
//! every rewind and at the end, the tree read through the mount and the tree
//! read from the backing directory must both equal the model's.
//!
//! Paths come from a tiny space (names `a`, `b`, `c`, depth ≤ 3) so that
//! operations collide: most of them hit existing entries or fail. Operations
//! are generated without looking at the model state (so that proptest can
//! shrink a failing sequence freely), and the model predicts the errno Linux
//! gives for each one. `docs/testing.md` says what is covered and how to run
//! long runs (`scripts/model`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsStr};
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Once;

use common::mmap::Mapping;
use common::{rewind_turn, show, Fixture};
use libc::{EEXIST, EINVAL, EISDIR, ENOENT, ENOTDIR, ENOTEMPTY, EPERM};
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, RngSeed, TestCaseError};

/// Cases per run when `PROPTEST_CASES` is not set (what CI runs).
const CI_CASES: u32 = 128;

/// The seed when `PROPTEST_RNG_SEED` is not set (what CI runs).
const CI_SEED: u64 = 1;

/// The names every path is built from.
const NAMES: [&str; 3] = ["a", "b", "c"];

/// Symlink targets. Every one dangles (`zz-nowhere` is never created), so a
/// path that goes through a symlink fails with `ENOENT` and the model never
/// has to follow one. One target is not UTF-8.
const TARGETS: [&[u8]; 4] = [
    b"zz-nowhere/x",
    b"zz-nowhere/../a",
    b"zz-nowhere/\xff\xfe",
    b"zz-nowhere/b/c",
];

/// Permission bits a file may be created or chmod-ed with.
const FILE_MODES: [u32; 6] = [0o644, 0o600, 0o755, 0o444, 0o700, 0o640];

/// Permission bits a directory may be created or chmod-ed with.
const DIR_MODES: [u32; 4] = [0o755, 0o700, 0o555, 0o750];

/// The umask the test runs under (set once for the whole test binary).
const UMASK: u32 = 0o022;

/// A path relative to the project root, e.g. `a/b`.
#[derive(Clone, PartialEq, Eq)]
struct P(String);

impl fmt::Debug for P {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// How a generated operation names a path; resolved against the model
/// just before the operation runs, so that most operations hit something
/// (and a shrunk sequence still resolves deterministically).
#[derive(Clone, Debug)]
enum Sel {
    /// A path from the fixed space (often absent).
    Any(P),
    /// The `k % n`-th of the `n` paths the model holds (`a` if none).
    Existing(u8),
    /// Name `NAMES[i]` inside the `k % n`-th of the model's directories
    /// (the root included).
    InDir(u8, usize),
}

impl Sel {
    fn resolve(&self, model: &Model) -> P {
        match self {
            Sel::Any(p) => p.clone(),
            Sel::Existing(k) => {
                let n = model.nodes.len();
                match model.nodes.keys().nth(usize::from(*k) % n.max(1)) {
                    Some(p) => P(p.clone()),
                    None => P(NAMES[0].to_owned()),
                }
            }
            Sel::InDir(k, i) => {
                let dirs: Vec<&String> = model
                    .nodes
                    .iter()
                    .filter(|(_, n)| matches!(n, Node::Dir(_)))
                    .map(|(p, _)| p)
                    .collect();
                let pick = usize::from(*k) % (dirs.len() + 1);
                match pick.checked_sub(1) {
                    None => P(NAMES[*i].to_owned()),
                    Some(d) => P(format!("{}/{}", dirs[d], NAMES[*i])),
                }
            }
        }
    }
}

/// One step of a sequence; `T` names paths (`Sel` when generated, `P` once
/// resolved).
#[derive(Clone, Debug)]
enum Op<T = P> {
    /// `open(O_CREAT | O_EXCL | O_WRONLY, mode)`, then write the bytes.
    Create(T, Vec<u8>, u32),
    /// `open(O_CREAT | O_TRUNC | O_WRONLY, 0644)`, then write the bytes.
    Overwrite(T, Vec<u8>),
    /// `open(O_WRONLY)`, `pwrite` at the offset.
    WriteAt(T, u64, Vec<u8>),
    /// `open(O_WRONLY | O_APPEND)`, write.
    Append(T, Vec<u8>),
    /// `truncate(2)` to the length (setattr size, no open).
    Truncate(T, u64),
    /// `unlink(2)`.
    Unlink(T),
    /// `mkdir(2)`.
    Mkdir(T, u32),
    /// `rmdir(2)`.
    Rmdir(T),
    /// `rename(2)`, also over existing targets.
    Rename(T, T),
    /// `renameat2(RENAME_EXCHANGE)`.
    Exchange(T, T),
    /// `symlink(TARGETS[i], path)`.
    Symlink(usize, T),
    /// `linkat(old, new, 0)` (a hard link; of a symlink too).
    Link(T, T),
    /// `chmod(2)` (follows symlinks).
    Chmod(T, u32),
    /// `open(O_RDWR)`, `mmap(MAP_SHARED)` of the whole file, close the fd,
    /// then a plain store of the bytes that fit inside the file at the
    /// offset (no `msync`): the mapping, and its dirty page, stay live until
    /// the next `opfs turn` or rewind has run (The store belongs
    /// to the turn before that boundary). Never extends the file.
    MapStore(T, u64, Vec<u8>),
    /// `opfs turn`.
    Turn,
    /// `opfs rewind N` with `N = 1 + k % open turn` (any turn so far,
    /// including rewind turns and the open one).
    Rewind(u8),
}

impl<T> Op<T> {
    /// The same operation with every path mapped by `f`.
    fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> Op<U> {
        match self {
            Op::Create(p, d, m) => Op::Create(f(p), d.clone(), *m),
            Op::Overwrite(p, d) => Op::Overwrite(f(p), d.clone()),
            Op::WriteAt(p, o, d) => Op::WriteAt(f(p), *o, d.clone()),
            Op::Append(p, d) => Op::Append(f(p), d.clone()),
            Op::Truncate(p, n) => Op::Truncate(f(p), *n),
            Op::Unlink(p) => Op::Unlink(f(p)),
            Op::Mkdir(p, m) => Op::Mkdir(f(p), *m),
            Op::Rmdir(p) => Op::Rmdir(f(p)),
            Op::Rename(a, b) => Op::Rename(f(a), f(b)),
            Op::Exchange(a, b) => Op::Exchange(f(a), f(b)),
            Op::Symlink(t, p) => Op::Symlink(*t, f(p)),
            Op::Link(a, b) => Op::Link(f(a), f(b)),
            Op::Chmod(p, m) => Op::Chmod(f(p), *m),
            Op::MapStore(p, o, d) => Op::MapStore(f(p), *o, d.clone()),
            Op::Turn => Op::Turn,
            Op::Rewind(k) => Op::Rewind(*k),
        }
    }
}

impl Op<Sel> {
    /// The operation with every path resolved against `model`.
    fn resolve(&self, model: &Model) -> Op {
        self.map(|s| s.resolve(model))
    }
}

/// Whether hard links are generated: on unless `MODEL_HARD_LINKS=0`.
/// (They were off while the hard-link bugs in docs/testing.md were open.)
fn hard_links() -> bool {
    std::env::var("MODEL_HARD_LINKS").map_or(true, |v| v != "0")
}

fn sel() -> impl Strategy<Value = Sel> {
    prop_oneof![
        2 => path().prop_map(Sel::Any),
        5 => any::<u8>().prop_map(Sel::Existing),
        3 => (any::<u8>(), 0..NAMES.len()).prop_map(|(k, i)| Sel::InDir(k, i)),
    ]
}

fn path() -> impl Strategy<Value = P> {
    let name = || 0..NAMES.len();
    let depth = prop_oneof![
        4 => prop::collection::vec(name(), 1..=1),
        4 => prop::collection::vec(name(), 2..=2),
        2 => prop::collection::vec(name(), 3..=3),
    ];
    depth.prop_map(|ix| P(ix.iter().map(|&i| NAMES[i]).collect::<Vec<_>>().join("/")))
}

/// One entry of the project as it is before the first mount. Parents are
/// created as needed (as directories `0755`); an entry whose path is taken,
/// or whose parent is not a directory, is skipped.
fn setup_entry() -> impl Strategy<Value = Op> {
    let file_mode = prop::sample::select(FILE_MODES.to_vec());
    let dir_mode = prop::sample::select(DIR_MODES.to_vec());
    prop_oneof![
        4 => (path(), data(), file_mode).prop_map(|(p, d, m)| Op::Create(p, d, m)),
        3 => (path(), dir_mode).prop_map(|(p, m)| Op::Mkdir(p, m)),
        1 => (0..TARGETS.len(), path()).prop_map(|(t, p)| Op::Symlink(t, p)),
        // A hard link that exists before the mount: the mount has never
        // seen its other name.
        // (Without hard links: an empty file instead.)
        2 => (path(), path()).prop_map(|(a, b)| if hard_links() {
            Op::Link(a, b)
        } else {
            Op::Create(b, Vec::new(), 0o644)
        }),
    ]
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..12)
}

/// [`op`] with shared-mmap stores kept mapped across the next boundary
/// mixed in (a separate strategy, so the saved regressions of [`op`] keep
/// replaying the sequences they were found with).
fn op_with_mmap() -> impl Strategy<Value = Op<Sel>> {
    prop_oneof![
        12 => op(),
        2 => (sel(), 0u64..20, data()).prop_map(|(p, o, d)| Op::MapStore(p, o, d)),
    ]
}

fn op() -> impl Strategy<Value = Op<Sel>> {
    let file_mode = prop::sample::select(FILE_MODES.to_vec());
    let dir_mode = prop::sample::select(DIR_MODES.to_vec());
    let any_mode = prop::sample::select([&FILE_MODES[..], &DIR_MODES[..]].concat());
    prop_oneof![
        6 => (sel(), data(), file_mode).prop_map(|(p, d, m)| Op::Create(p, d, m)),
        3 => (sel(), data()).prop_map(|(p, d)| Op::Overwrite(p, d)),
        4 => (sel(), 0u64..20, data()).prop_map(|(p, o, d)| Op::WriteAt(p, o, d)),
        2 => (sel(), data()).prop_map(|(p, d)| Op::Append(p, d)),
        2 => (sel(), 0u64..20).prop_map(|(p, n)| Op::Truncate(p, n)),
        3 => sel().prop_map(Op::Unlink),
        5 => (sel(), dir_mode).prop_map(|(p, m)| Op::Mkdir(p, m)),
        2 => sel().prop_map(Op::Rmdir),
        5 => (sel(), sel()).prop_map(|(a, b)| Op::Rename(a, b)),
        3 => (sel(), sel()).prop_map(|(a, b)| Op::Exchange(a, b)),
        2 => (0..TARGETS.len(), sel()).prop_map(|(t, p)| Op::Symlink(t, p)),
        // (Without hard links: a rename instead.)
        3 => (sel(), sel()).prop_map(|(a, b)| if hard_links() {
            Op::Link(a, b)
        } else {
            Op::Rename(a, b)
        }),
        2 => (sel(), any_mode).prop_map(|(p, m)| Op::Chmod(p, m)),
        4 => Just(Op::Turn),
        3 => any::<u8>().prop_map(Op::Rewind),
    ]
}

/// What one path holds, as read back from a tree (or expected there).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    File { mode: u32, bytes: Vec<u8> },
    Dir { mode: u32 },
    Symlink { target: Vec<u8> },
}

/// A whole tree: path → what it holds.
type Tree = BTreeMap<String, Seen>;

/// A tree plus which of its files are names of one inode (path → group id;
/// two paths with the same id are hard links of each other).
#[derive(Clone, Debug, Default)]
struct Snapshot {
    tree: Tree,
    links: BTreeMap<String, u64>,
}

/// A node of the live model. Files point into the inode table so that a
/// write through one hard link shows under every name.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    File(u64),
    Dir(u32),
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
struct Inode {
    bytes: Vec<u8>,
    mode: u32,
}

/// The expected state: the live tree and the tree at the start of each turn.
#[derive(Debug)]
struct Model {
    nodes: BTreeMap<String, Node>,
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    /// Turn number → the tree when it began.
    starts: BTreeMap<u64, Snapshot>,
    /// The open turn.
    open: u64,
}

type Errno = i32;

/// Whether `inner` is strictly below `outer`.
fn is_under(inner: &str, outer: &str) -> bool {
    inner.len() > outer.len() && inner.starts_with(outer) && inner.as_bytes()[outer.len()] == b'/'
}

impl Model {
    fn new() -> Model {
        let mut starts = BTreeMap::new();
        starts.insert(1, Snapshot::default());
        Model {
            nodes: BTreeMap::new(),
            inodes: HashMap::new(),
            next_ino: 1,
            starts,
            open: 1,
        }
    }

    fn new_inode(&mut self, bytes: Vec<u8>, mode: u32) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(ino, Inode { bytes, mode });
        ino
    }

    /// Resolves every component but the last: `ENOENT` for a missing one or
    /// a symlink (every target dangles), `ENOTDIR` for a non-directory.
    fn walk_parent(&self, p: &str) -> Result<(), Errno> {
        let mut at = 0;
        while let Some(i) = p[at..].find('/') {
            let prefix = &p[..at + i];
            match self.nodes.get(prefix) {
                Some(Node::Dir(_)) => {}
                Some(Node::File(_)) => return Err(ENOTDIR),
                Some(Node::Symlink(_)) | None => return Err(ENOENT),
            }
            at += i + 1;
        }
        Ok(())
    }

    /// Looks `p` up without following a final symlink.
    fn lookup(&self, p: &str) -> Result<Option<&Node>, Errno> {
        self.walk_parent(p)?;
        Ok(self.nodes.get(p))
    }

    /// Resolves `p` for an operation that follows a final symlink and needs
    /// an existing regular file: its inode, or the errno.
    fn file_for_write(&self, p: &str) -> Result<u64, Errno> {
        match self.lookup(p)? {
            Some(Node::File(ino)) => Ok(*ino),
            Some(Node::Dir(_)) => Err(EISDIR),
            Some(Node::Symlink(_)) | None => Err(ENOENT),
        }
    }

    fn has_children(&self, p: &str) -> bool {
        let prefix = format!("{p}/");
        self.nodes
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&prefix))
    }

    /// Removes `p` and everything under it; returns them keyed by the part
    /// of the path after `p` (`""` for `p` itself).
    fn take_subtree(&mut self, p: &str) -> Vec<(String, Node)> {
        let prefix = format!("{p}/");
        let keys: Vec<String> = std::iter::once(p.to_owned())
            .filter(|k| self.nodes.contains_key(k))
            .chain(
                self.nodes
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, _)| k.clone()),
            )
            .collect();
        keys.into_iter()
            .map(|k| {
                let node = self.nodes.remove(&k).expect("key just listed");
                (k[p.len()..].to_owned(), node)
            })
            .collect()
    }

    fn put_subtree(&mut self, p: &str, items: Vec<(String, Node)>) {
        for (suffix, node) in items {
            self.nodes.insert(format!("{p}{suffix}"), node);
        }
    }

    /// Applies one file operation to the model: `Ok` or the errno Linux
    /// gives (checks in the kernel's order).
    fn apply(&mut self, op: &Op) -> Result<(), Errno> {
        match op {
            Op::Create(P(p), bytes, mode) => {
                if self.lookup(p)?.is_some() {
                    return Err(EEXIST);
                }
                let ino = self.new_inode(bytes.clone(), mode & !UMASK);
                self.nodes.insert(p.clone(), Node::File(ino));
            }
            Op::Overwrite(P(p), bytes) => match self.lookup(p)? {
                None => {
                    let ino = self.new_inode(bytes.clone(), 0o644 & !UMASK);
                    self.nodes.insert(p.clone(), Node::File(ino));
                }
                Some(_) => {
                    let ino = self.file_for_write(p)?;
                    self.inodes.get_mut(&ino).expect("inode").bytes = bytes.clone();
                }
            },
            Op::WriteAt(P(p), offset, bytes) => {
                let ino = self.file_for_write(p)?;
                let content = &mut self.inodes.get_mut(&ino).expect("inode").bytes;
                let offset = *offset as usize;
                if !bytes.is_empty() {
                    if content.len() < offset + bytes.len() {
                        content.resize(offset + bytes.len(), 0);
                    }
                    content[offset..offset + bytes.len()].copy_from_slice(bytes);
                }
            }
            Op::MapStore(P(p), offset, bytes) => {
                let ino = self.file_for_write(p)?;
                let content = &mut self.inodes.get_mut(&ino).expect("inode").bytes;
                let offset = (*offset as usize).min(content.len());
                let n = bytes.len().min(content.len() - offset);
                content[offset..offset + n].copy_from_slice(&bytes[..n]);
            }
            Op::Append(P(p), bytes) => {
                let ino = self.file_for_write(p)?;
                let content = &mut self.inodes.get_mut(&ino).expect("inode").bytes;
                content.extend_from_slice(bytes);
            }
            Op::Truncate(P(p), len) => {
                let ino = self.file_for_write(p)?;
                let content = &mut self.inodes.get_mut(&ino).expect("inode").bytes;
                content.resize(*len as usize, 0);
            }
            Op::Unlink(P(p)) => match self.lookup(p)? {
                None => return Err(ENOENT),
                Some(Node::Dir(_)) => return Err(EISDIR),
                Some(_) => {
                    self.nodes.remove(p);
                }
            },
            Op::Mkdir(P(p), mode) => {
                if self.lookup(p)?.is_some() {
                    return Err(EEXIST);
                }
                self.nodes.insert(p.clone(), Node::Dir(mode & !UMASK));
            }
            Op::Rmdir(P(p)) => match self.lookup(p)? {
                None => return Err(ENOENT),
                Some(Node::Dir(_)) if self.has_children(p) => return Err(ENOTEMPTY),
                Some(Node::Dir(_)) => {
                    self.nodes.remove(p);
                }
                Some(_) => return Err(ENOTDIR),
            },
            Op::Rename(P(src), P(dst)) => self.rename(src, dst, false)?,
            Op::Exchange(P(src), P(dst)) => self.rename(src, dst, true)?,
            Op::Symlink(t, P(p)) => {
                if self.lookup(p)?.is_some() {
                    return Err(EEXIST);
                }
                self.nodes
                    .insert(p.clone(), Node::Symlink(TARGETS[*t].to_vec()));
            }
            Op::Link(P(src), P(dst)) => {
                let node = self.lookup(src)?.cloned().ok_or(ENOENT)?;
                if self.lookup(dst)?.is_some() {
                    return Err(EEXIST);
                }
                if matches!(node, Node::Dir(_)) {
                    return Err(EPERM);
                }
                self.nodes.insert(dst.clone(), node);
            }
            Op::Chmod(P(p), mode) => match self.lookup(p)? {
                Some(Node::File(ino)) => {
                    let ino = *ino;
                    self.inodes.get_mut(&ino).expect("inode").mode = *mode;
                }
                Some(Node::Dir(_)) => {
                    self.nodes.insert(p.clone(), Node::Dir(*mode));
                }
                Some(Node::Symlink(_)) | None => return Err(ENOENT),
            },
            Op::Turn | Op::Rewind(_) => unreachable!("turns are not file operations"),
        }
        Ok(())
    }

    /// `rename(2)` or `renameat2(RENAME_EXCHANGE)`, in the order of the
    /// kernel's `do_renameat2` and `vfs_rename`.
    fn rename(&mut self, src: &str, dst: &str, exchange: bool) -> Result<(), Errno> {
        self.walk_parent(src)?;
        self.walk_parent(dst)?;
        let s = self.nodes.get(src).cloned().ok_or(ENOENT)?;
        let d = self.nodes.get(dst).cloned();
        if exchange && d.is_none() {
            return Err(ENOENT);
        }
        if is_under(dst, src) {
            return Err(EINVAL);
        }
        if is_under(src, dst) {
            return Err(if exchange { EINVAL } else { ENOTEMPTY });
        }
        if src == dst {
            return Ok(());
        }
        if let (Node::File(a), Some(Node::File(b))) = (&s, &d) {
            if a == b {
                // Two names of one inode: rename(2) does nothing.
                return Ok(());
            }
        }
        if exchange {
            let a = self.take_subtree(src);
            let b = self.take_subtree(dst);
            self.put_subtree(src, b);
            self.put_subtree(dst, a);
            return Ok(());
        }
        match (&s, &d) {
            (Node::Dir(_), Some(Node::File(_) | Node::Symlink(_))) => return Err(ENOTDIR),
            (Node::File(_) | Node::Symlink(_), Some(Node::Dir(_))) => return Err(EISDIR),
            (Node::Dir(_), Some(Node::Dir(_))) if self.has_children(dst) => return Err(ENOTEMPTY),
            _ => {}
        }
        let moved = self.take_subtree(src);
        self.take_subtree(dst);
        self.put_subtree(dst, moved);
        Ok(())
    }

    /// The live tree with file contents resolved, and its link groups.
    fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::default();
        for (p, node) in &self.nodes {
            let seen = match node {
                Node::File(ino) => {
                    let inode = &self.inodes[ino];
                    snap.links.insert(p.clone(), *ino);
                    Seen::File {
                        mode: inode.mode,
                        bytes: inode.bytes.clone(),
                    }
                }
                Node::Dir(mode) => Seen::Dir { mode: *mode },
                Node::Symlink(target) => Seen::Symlink {
                    target: target.clone(),
                },
            };
            snap.tree.insert(p.clone(), seen);
        }
        snap
    }

    /// Makes the live model hold `tree`, with files grouped into inodes as
    /// the real project groups them (`real_inos`: path → st_ino), which
    /// `check_links` has found to be the grouping of the rewind's target.
    fn reset_to(&mut self, tree: &Tree, real_inos: &BTreeMap<String, u64>) {
        self.nodes.clear();
        self.inodes.clear();
        let mut by_real: HashMap<u64, u64> = HashMap::new();
        for (p, seen) in tree {
            let node = match seen {
                Seen::File { mode, bytes } => {
                    let real = real_inos.get(p).copied();
                    let ino = match real.and_then(|r| by_real.get(&r).copied()) {
                        Some(ino) => ino,
                        None => {
                            let ino = self.new_inode(bytes.clone(), *mode);
                            if let Some(r) = real {
                                by_real.insert(r, ino);
                            }
                            ino
                        }
                    };
                    Node::File(ino)
                }
                Seen::Dir { mode } => Node::Dir(*mode),
                Seen::Symlink { target } => Node::Symlink(target.clone()),
            };
            self.nodes.insert(p.clone(), node);
        }
    }
}

/// Reads the whole tree under `root` (never following symlinks), and the
/// inode number of every regular file: the shared walk of `common`, in the
/// model's terms.
fn read_tree(root: &Path) -> io::Result<(Tree, BTreeMap<String, u64>)> {
    let mut tree = Tree::new();
    let mut inos = BTreeMap::new();
    for common::Found { rel, path, meta } in common::walk_tree(root, &[])? {
        let p = String::from_utf8_lossy(&rel).into_owned();
        let ft = meta.file_type();
        let mode = meta.permissions().mode() & 0o7777;
        let seen = if ft.is_symlink() {
            Seen::Symlink {
                target: common::link_target(&path)?,
            }
        } else if ft.is_dir() {
            Seen::Dir { mode }
        } else if ft.is_file() {
            inos.insert(p.clone(), meta.ino());
            Seen::File {
                mode,
                bytes: fs::read(&path)?,
            }
        } else {
            return Err(io::Error::other(format!(
                "{}: unexpected file type {ft:?}",
                path.display()
            )));
        };
        tree.insert(p, seen);
    }
    Ok((tree, inos))
}

/// The differences between two trees, one line per path (empty if equal).
fn tree_diff(expected: &Tree, actual: &Tree) -> Vec<String> {
    let mut lines = Vec::new();
    for (p, e) in expected {
        match actual.get(p) {
            None => lines.push(format!("  missing  {p}  (expected {})", brief(e))),
            Some(a) if a != e => lines.push(format!(
                "  differs  {p}: expected {}, found {}",
                brief(e),
                brief(a)
            )),
            Some(_) => {}
        }
    }
    for (p, a) in actual {
        if !expected.contains_key(p) {
            lines.push(format!("  extra    {p}  ({})", brief(a)));
        }
    }
    lines
}

fn brief(s: &Seen) -> String {
    match s {
        Seen::File { mode, bytes } => format!("file {mode:o} {:?}", show(bytes)),
        Seen::Dir { mode } => format!("dir {mode:o}"),
        Seen::Symlink { target } => format!("symlink -> {:?}", show(target)),
    }
}

fn errno_name(r: &Result<(), Errno>) -> String {
    match r {
        Ok(()) => "Ok".to_owned(),
        Err(e) => format!("Err({})", io::Error::from_raw_os_error(*e)),
    }
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in test paths")
}

fn errno_of(e: io::Error) -> Errno {
    e.raw_os_error().unwrap_or(-1)
}

fn check_libc(rc: libc::c_int) -> Result<(), Errno> {
    if rc == 0 {
        Ok(())
    } else {
        Err(errno_of(io::Error::last_os_error()))
    }
}

/// Runs one file operation on the real filesystem under `root` (the
/// mountpoint). Every fd is closed before it returns.
fn exec(root: &Path, op: &Op) -> Result<(), Errno> {
    let at = |p: &P| root.join(&p.0);
    match op {
        Op::Create(p, bytes, mode) => fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(*mode)
            .open(at(p))
            .and_then(|mut f| f.write_all(bytes))
            .map_err(errno_of),
        Op::Overwrite(p, bytes) => fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(at(p))
            .and_then(|mut f| f.write_all(bytes))
            .map_err(errno_of),
        Op::WriteAt(p, offset, bytes) => fs::OpenOptions::new()
            .write(true)
            .open(at(p))
            .and_then(|f| f.write_all_at(bytes, *offset))
            .map_err(errno_of),
        Op::Append(p, bytes) => fs::OpenOptions::new()
            .append(true)
            .open(at(p))
            .and_then(|mut f| f.write_all(bytes))
            .map_err(errno_of),
        Op::Truncate(p, len) => {
            let c = cpath(&at(p));
            // SAFETY: `c` is a NUL-terminated path that outlives the call.
            check_libc(unsafe { libc::truncate(c.as_ptr(), *len as libc::off_t) })
        }
        Op::Unlink(p) => fs::remove_file(at(p)).map_err(errno_of),
        Op::Mkdir(p, mode) => fs::DirBuilder::new()
            .mode(*mode)
            .create(at(p))
            .map_err(errno_of),
        Op::Rmdir(p) => fs::remove_dir(at(p)).map_err(errno_of),
        Op::Rename(a, b) => fs::rename(at(a), at(b)).map_err(errno_of),
        Op::Exchange(a, b) => {
            let (ca, cb) = (cpath(&at(a)), cpath(&at(b)));
            // SAFETY: both are NUL-terminated paths that outlive the call.
            check_libc(unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    ca.as_ptr(),
                    libc::AT_FDCWD,
                    cb.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            })
        }
        Op::Symlink(t, p) => {
            std::os::unix::fs::symlink(OsStr::from_bytes(TARGETS[*t]), at(p)).map_err(errno_of)
        }
        Op::Link(a, b) => {
            let (ca, cb) = (cpath(&at(a)), cpath(&at(b)));
            // SAFETY: both are NUL-terminated paths that outlive the call.
            check_libc(unsafe {
                libc::linkat(libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), 0)
            })
        }
        Op::Chmod(p, mode) => {
            fs::set_permissions(at(p), fs::Permissions::from_mode(*mode)).map_err(errno_of)
        }
        Op::MapStore(..) | Op::Turn | Op::Rewind(_) => {
            unreachable!("not a plain file operation")
        }
    }
}

/// Runs [`Op::MapStore`] under `root`: the mapping (`None` for an empty
/// file or an empty store) is returned live, its fd closed.
fn map_store(at: &Path, offset: u64, bytes: &[u8]) -> Result<Option<Mapping>, Errno> {
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(at)
        .map_err(errno_of)?;
    let len = usize::try_from(file.metadata().map_err(errno_of)?.len()).expect("len");
    let offset = (offset as usize).min(len);
    let n = bytes.len().min(len - offset);
    if n == 0 {
        return Ok(None);
    }
    let map = Mapping::of(file).map_err(errno_of)?;
    map.store(offset, &bytes[..n]);
    Ok(Some(map))
}

/// Checks that the project and the mountpoint both hold `expected`; returns
/// the project's inode numbers.
fn check_trees(
    fx: &Fixture,
    ctx: &str,
    expected: &Tree,
) -> Result<BTreeMap<String, u64>, TestCaseError> {
    let (project, inos) = read_tree(&fx.project)
        .map_err(|e| TestCaseError::fail(format!("{ctx}: reading the project: {e}")))?;
    let (mounted, _) = read_tree(&fx.mnt)
        .map_err(|e| TestCaseError::fail(format!("{ctx}: reading the mountpoint: {e}")))?;
    let mut report = Vec::new();
    for (side, actual) in [("project", &project), ("mountpoint", &mounted)] {
        let diff = tree_diff(expected, actual);
        if !diff.is_empty() {
            report.push(format!(
                "{side} differs from the model:\n{}",
                diff.join("\n")
            ));
        }
    }
    if report.is_empty() {
        Ok(inos)
    } else {
        Err(TestCaseError::fail(format!("{ctx}: {}", report.join("\n"))))
    }
}

/// Checks the project alone (reading the backing directory teaches the
/// mount no names, unlike a walk through the mountpoint).
fn check_project(fx: &Fixture, ctx: &str, expected: &Tree) -> Result<(), TestCaseError> {
    let (project, _) = read_tree(&fx.project)
        .map_err(|e| TestCaseError::fail(format!("{ctx}: reading the project: {e}")))?;
    let diff = tree_diff(expected, &project);
    if diff.is_empty() {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "{ctx}: project differs from the model:\n{}",
            diff.join("\n")
        )))
    }
}

/// After a rewind to `n`: files are hard links of one inode exactly when
/// they were when turn `n` began. Two separate files must not have become
/// links of each other (a later write through one name would change the
/// other), and names of one inode must be one inode again (A
/// write through one must show under all).
fn check_links(
    ctx: &str,
    start: &Snapshot,
    real_inos: &BTreeMap<String, u64>,
) -> Result<(), TestCaseError> {
    let mut first_name: HashMap<u64, &String> = HashMap::new();
    let mut by_group: HashMap<u64, (&String, u64)> = HashMap::new();
    for (p, ino) in real_inos {
        match first_name.get(ino) {
            None => {
                first_name.insert(*ino, p);
            }
            Some(q) => {
                if start.links.get(p) != start.links.get(*q) {
                    return Err(TestCaseError::fail(format!(
                        "{ctx}: {q} and {p} were separate files when the turn began, \
                         but are hard links of one inode after the rewind"
                    )));
                }
            }
        }
        if let Some(group) = start.links.get(p) {
            match by_group.get(group) {
                None => {
                    by_group.insert(*group, (p, *ino));
                }
                Some((q, q_ino)) if q_ino != ino => {
                    return Err(TestCaseError::fail(format!(
                        "{ctx}: {q} and {p} were hard links of one inode when the turn \
                         began, but are separate files after the rewind"
                    )));
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// Builds the project before the mount: runs each setup entry (after
/// `mkdir` of its missing parents) on the plain backing directory and on the
/// model. Failures are expected (taken paths), but both sides must agree, so
/// this also checks the model's errno predictions against plain Linux.
fn populate(fx: &Fixture, model: &mut Model, setup: &[Op]) -> Result<(), TestCaseError> {
    for entry in setup {
        let target = match entry {
            Op::Create(p, ..) | Op::Mkdir(p, _) | Op::Symlink(_, p) | Op::Link(_, p) => &p.0,
            _ => unreachable!("setup entries create one path"),
        };
        let mut ops: Vec<Op> = target
            .match_indices('/')
            .map(|(i, _)| Op::Mkdir(P(target[..i].to_owned()), 0o755))
            .collect();
        ops.push(entry.clone());
        for op in &ops {
            let expected = model.apply(op);
            let real = exec(&fx.project, op);
            prop_assert_eq!(
                errno_name(&real),
                errno_name(&expected),
                "setup {:?} on the plain project: Linux and the model disagree",
                op
            );
        }
    }
    Ok(())
}

/// Runs one sequence on a fresh fixture.
/// `ranged`: the daemon captures every file written in place as ranges
/// (`OPFS_RANGE_MIN=0`), so each write saves only the bytes it overwrites.
fn run_case(setup: &[Op], ops: &[Op<Sel>], ranged: bool) -> Result<(), TestCaseError> {
    static UMASK_ONCE: Once = Once::new();
    UMASK_ONCE.call_once(|| {
        // SAFETY: umask has no memory-safety preconditions.
        unsafe { libc::umask(UMASK as libc::mode_t) };
    });
    let fx = Fixture::new();
    if ranged {
        fx.set_env("OPFS_RANGE_MIN", "0");
    }
    let mut model = Model::new();
    populate(&fx, &mut model, setup)?;
    model.starts.insert(1, model.snapshot());
    // No walk through the mount here: names the mount has not looked up
    // (the second name of a hard link made before the mount) stay unknown.
    fx.mount();
    let mut succeeded = 0;
    // The resolved operations so far, for failure messages.
    let mut trace: Vec<String> = Vec::new();
    // Live mappings of `Op::MapStore`: unmapped once a boundary has run.
    let mut maps: Vec<Mapping> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let op = &op.resolve(&model);
        trace.push(format!("{op:?}"));
        let ctx = format!(
            "op #{i} {op:?} (open turn {})\nsetup (before the mount): {setup:?}\nresolved ops: [\n  {}\n]\nfailure",
            model.open,
            trace.join(",\n  ")
        );
        match op {
            Op::Turn => {
                let n = fx.turn("model");
                maps.clear();
                prop_assert_eq!(n, model.open + 1, "{}: turn number", ctx);
                let snap = model.snapshot();
                check_project(&fx, &ctx, &snap.tree)?;
                model.starts.insert(n, snap);
                model.open = n;
            }
            Op::Rewind(k) => {
                let n = 1 + u64::from(*k) % model.open;
                let before = model.snapshot();
                let v = fx.rewind(n);
                maps.clear();
                let r = rewind_turn(&v);
                prop_assert_eq!(r, model.open + 1, "{}: rewind turn number: {:#}", ctx, v);
                let target = model.starts[&n].clone();
                let ctx = format!("{ctx}: after rewind {n} (recorded as turn {r})");
                let inos = check_trees(&fx, &ctx, &target.tree)?;
                check_links(&ctx, &target, &inos)?;
                model.reset_to(&target.tree, &inos);
                model.starts.insert(r, before);
                model.open = r + 1;
                model.starts.insert(model.open, model.snapshot());
            }
            Op::MapStore(p, offset, bytes) => {
                let expected = model.apply(op);
                let real = map_store(&fx.mnt.join(&p.0), *offset, bytes);
                succeeded += usize::from(real.is_ok());
                let real = real.map(|m| maps.extend(m));
                prop_assert_eq!(
                    errno_name(&real),
                    errno_name(&expected),
                    "{}: the mount and the model disagree",
                    ctx
                );
            }
            _ => {
                let expected = model.apply(op);
                let real = exec(&fx.mnt, op);
                succeeded += usize::from(real.is_ok());
                prop_assert_eq!(
                    errno_name(&real),
                    errno_name(&expected),
                    "{}: the mount and the model disagree",
                    ctx
                );
            }
        }
    }
    drop(maps);
    check_trees(&fx, "at the end", &model.snapshot().tree)?;
    fx.umount();
    if std::env::var_os("MODEL_VERBOSE").is_some() {
        eprintln!(
            "case: {} ops, {} succeeded, {} turns, {} rewinds, {} paths at the end",
            ops.len(),
            succeeded,
            ops.iter().filter(|o| matches!(o, Op::Turn)).count(),
            ops.iter().filter(|o| matches!(o, Op::Rewind(_))).count(),
            model.nodes.len()
        );
    }
    Ok(())
}

/// Proptest's defaults and variables, except: `CI_CASES` cases unless
/// `PROPTEST_CASES` is set, and seed `CI_SEED` unless `PROPTEST_RNG_SEED` is
/// set, so CI replays the same sequences every run (a red CI means a change
/// broke something) while `scripts/model` explores other seeds.
fn config() -> ProptestConfig {
    let default = ProptestConfig::default();
    let set = |var| std::env::var_os(var).is_some();
    ProptestConfig {
        cases: if set("PROPTEST_CASES") {
            default.cases
        } else {
            CI_CASES
        },
        rng_seed: if set("PROPTEST_RNG_SEED") {
            default.rng_seed
        } else {
            RngSeed::Fixed(CI_SEED)
        },
        // Failures are saved in tests/model.proptest-regressions and
        // replayed first by later runs (the default location needs a lib.rs
        // or main.rs above the test file).
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..default
    }
}

/// Replays a fixed sequence (paths given literally) through [`run_case`]:
/// the regression tests below are minimal sequences the property test
/// found.
fn replay(setup: &[Op], ops: &[Op]) {
    let ops: Vec<Op<Sel>> = ops
        .iter()
        .map(|op| op.map(|p| Sel::Any(p.clone())))
        .collect();
    for ranged in [false, true] {
        if let Err(e) = run_case(setup, &ops, ranged) {
            panic!("{e}");
        }
    }
}

fn p(s: &str) -> P {
    P(s.to_owned())
}

/// Found by the model: `RENAME_EXCHANGE` of a directory with a symlink
/// failed with ELOOP, because capturing the directory's grandchildren under
/// their new names (`e/s/sub/g`) looked their parent up through the
/// symlink.
#[test]
fn exchange_of_a_directory_and_a_symlink() {
    replay(
        &[
            Op::Create(p("d/f"), b"f".to_vec(), 0o644),
            Op::Create(p("d/sub/g"), b"g".to_vec(), 0o600),
            Op::Symlink(0, p("e/s")),
        ],
        &[
            Op::Exchange(p("d"), p("e/s")),
            Op::Append(p("e/s/f"), b"+".to_vec()),
            Op::Turn,
            Op::Exchange(p("e/s"), p("d")),
            Op::Rewind(1),
            Op::Rewind(0),
            Op::Rewind(3),
        ],
    );
}

/// A hard link made before the mount, whose second name the mount has not
/// looked up when the first name is written: the second name's pre-image
/// must still be the bytes at the turn's start.
#[test]
fn unknown_hard_link_written_then_unlinked() {
    replay(
        &[
            Op::Create(p("x"), b"AAAA".to_vec(), 0o644),
            Op::Link(p("x"), p("y")),
        ],
        &[
            Op::WriteAt(p("x"), 0, b"B".to_vec()),
            Op::Unlink(p("y")),
            Op::Rewind(0),
        ],
    );
}

/// A file replaced by a hard link of another file: the rewind must not
/// write the replaced file's bytes into the other file's inode.
#[test]
fn file_replaced_by_a_hard_link_of_another() {
    replay(
        &[
            Op::Create(p("x"), b"AAAA".to_vec(), 0o644),
            Op::Create(p("y"), b"BB".to_vec(), 0o600),
        ],
        &[Op::Unlink(p("y")), Op::Link(p("x"), p("y")), Op::Rewind(0)],
    );
}

/// Found by `scripts/model 150 20261201`: three names of one
/// empty file (none looked up by the mount), one of them moved over a
/// separate file and written there. The rewind must give the three names
/// one inode again (the moved one back in place), and the redo the byte
/// under all of them, with the separate file gone.
#[test]
fn hard_link_moved_over_a_file_written_then_rewound_and_redone() {
    replay(
        &[
            Op::Create(p("b/c"), Vec::new(), 0o644),
            Op::Link(p("b/c"), p("b/b/a")),
            Op::Link(p("b/c"), p("a/a/a")),
            Op::Create(p("a/b"), Vec::new(), 0o644),
        ],
        &[
            Op::Mkdir(p("c/b"), 0o755),
            Op::Rename(p("b/b/a"), p("a/b")),
            Op::WriteAt(p("a/b"), 0, b"x".to_vec()),
            Op::Rewind(0),
            Op::Rewind(1),
        ],
    );
}

/// Three names of one file whose bits the turn changed through
/// one name, then split up (one unlinked and made again, one moved away):
/// the rewind gives the bits back to one inode with three names.
#[test]
fn linked_names_split_and_chmodded_come_back_as_one_file() {
    replay(
        &[
            Op::Create(p("a"), b"ab".to_vec(), 0o444),
            Op::Link(p("a"), p("b")),
            Op::Link(p("a"), p("c/a")),
        ],
        &[
            Op::Chmod(p("b"), 0o644),
            Op::Unlink(p("b")),
            Op::Create(p("b"), b"ab".to_vec(), 0o444),
            Op::Rename(p("c/a"), p("c/b")),
            Op::Turn,
            Op::Rewind(0),
            Op::Rewind(1),
            Op::Rewind(0),
        ],
    );
}

/// A store through a shared mapping that is still live (its page
/// dirty) when `opfs turn` runs belongs to the turn that closes; one still
/// live at a rewind is not written back over the restored bytes.
#[test]
fn mmap_store_kept_mapped_across_a_turn_and_a_rewind() {
    replay(
        &[Op::Create(p("a"), b"original".to_vec(), 0o644)],
        &[
            Op::Turn,
            Op::MapStore(p("a"), 0, b"A".to_vec()),
            Op::Turn,
            Op::WriteAt(p("a"), 1, b"B".to_vec()),
            Op::Turn,
            Op::Rewind(2),
            Op::MapStore(p("a"), 2, b"C".to_vec()),
            Op::Rewind(0),
        ],
    );
}

/// Cases of the worktree property test per run when `PROPTEST_CASES` is
/// not set (each case starts two daemons).
const CI_WORKTREE_CASES: u32 = 24;

/// Reads the tree at `root` and compares it with `expected`.
fn check_tree_at(root: &Path, ctx: &str, side: &str, expected: &Tree) -> Result<(), TestCaseError> {
    let (actual, _) = read_tree(root)
        .map_err(|e| TestCaseError::fail(format!("{ctx}: reading the {side}: {e}")))?;
    let diff = tree_diff(expected, &actual);
    if diff.is_empty() {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "{ctx}: the {side} differs from the model:\n{}",
            diff.join("\n")
        )))
    }
}

/// The sequence through a worktree of the project instead of the project
/// (`docs/worktrees.md`): the worktree starts as the project (the model
/// after `setup`), the project is then emptied through its mount (the
/// worktree must not see it: its base is frozen), every operation, turn and
/// rewind runs in the worktree and must agree with the model, and at the
/// end the project, rewound to the worktree's base, gets the worktree
/// merged: it must then hold the model's tree exactly, and rewinding the
/// merge turn gives the base back.
///
/// Hard links made before the worktree are left out of `setup` (a copy-up
/// of one name of a lower hard link breaks the link, as in overlayfs
/// without `index`: `docs/worktrees.md`); links made in the worktree are
/// kept.
fn run_case_worktree(setup: &[Op], ops: &[Op<Sel>]) -> Result<(), TestCaseError> {
    static UMASK_ONCE: Once = Once::new();
    UMASK_ONCE.call_once(|| {
        // SAFETY: umask has no memory-safety preconditions.
        unsafe { libc::umask(UMASK as libc::mode_t) };
    });
    let setup: Vec<Op> = setup
        .iter()
        .map(|op| match op {
            Op::Link(_, b) => Op::Create(b.clone(), Vec::new(), 0o644),
            other => other.clone(),
        })
        .collect();
    let fx = Fixture::new();
    let mut model = Model::new();
    populate(&fx, &mut model, &setup)?;
    let base_tree = model.snapshot().tree;
    model.starts.insert(1, model.snapshot());
    fx.mount();
    let created = fx
        .opfs_p(&["worktree", "create", "w", "--json"])
        .ok()
        .json();
    let w = std::path::PathBuf::from(created["path"].as_str().expect("path"));
    let base_turn = created["base_turn"].as_u64().expect("base_turn");
    let in_w = |args: &[&str]| {
        let mut all = vec!["-C", w.to_str().expect("utf8 path")];
        all.extend(args);
        fx.opfs(&all)
    };
    // The project moves on through its mount; the worktree must not see it.
    fx.sh("find . -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {} +");
    check_tree_at(&w, "after emptying the project", "worktree", &base_tree)?;
    let mut trace: Vec<String> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let op = &op.resolve(&model);
        trace.push(format!("{op:?}"));
        let ctx = format!(
            "worktree op #{i} {op:?} (open turn {})\nsetup: {setup:?}\nresolved ops: [\n  {}\n]\nfailure",
            model.open,
            trace.join(",\n  ")
        );
        match op {
            Op::Turn => {
                let run = in_w(&["turn", "--label", "model"]).ok();
                let n: u64 = run.stdout.trim().parse().expect("turn number");
                prop_assert_eq!(n, model.open + 1, "{}: turn number", ctx);
                let snap = model.snapshot();
                model.starts.insert(n, snap);
                model.open = n;
            }
            Op::Rewind(k) => {
                let n = 1 + u64::from(*k) % model.open;
                let before = model.snapshot();
                let v = in_w(&["rewind", &n.to_string(), "--json"]);
                prop_assert_eq!(
                    v.code,
                    Some(0),
                    "{}: rewind {} in the worktree: {}",
                    ctx,
                    n,
                    v
                );
                let v = v.json();
                let r = rewind_turn(&v);
                prop_assert_eq!(r, model.open + 1, "{}: rewind turn number: {:#}", ctx, v);
                let target = model.starts[&n].clone();
                let ctx = format!("{ctx}: after rewind {n} (recorded as turn {r})");
                check_tree_at(&w, &ctx, "worktree", &target.tree)?;
                let (_, inos) = read_tree(&w)
                    .map_err(|e| TestCaseError::fail(format!("{ctx}: reading: {e}")))?;
                model.reset_to(&target.tree, &inos);
                model.starts.insert(r, before);
                model.open = r + 1;
                model.starts.insert(model.open, model.snapshot());
            }
            Op::MapStore(..) => {}
            _ => {
                let expected = model.apply(op);
                let real = exec(&w, op);
                prop_assert_eq!(
                    errno_name(&real),
                    errno_name(&expected),
                    "{}: the worktree and the model disagree",
                    ctx
                );
            }
        }
    }
    let end = model.snapshot().tree;
    check_tree_at(&w, "at the end", "worktree", &end)?;
    // Merge into the project as it was at the worktree's base.
    let back = fx.rewind(base_turn);
    let _ = back;
    check_tree_at(
        &fx.project,
        "the project rewound to the base",
        "project",
        &base_tree,
    )?;
    let merged = fx.opfs_p(&["worktree", "merge", "w", "--json"]);
    prop_assert_eq!(merged.code, Some(0), "merge: {}", merged);
    let turn = merged.json()["turn"].as_u64().expect("merge turn");
    check_tree_at(&fx.project, "after the merge", "project", &end)?;
    check_tree_at(&fx.mnt, "after the merge", "project mount", &end)?;
    fx.rewind(turn);
    check_tree_at(
        &fx.project,
        "after rewinding the merge",
        "project",
        &base_tree,
    )?;
    fx.opfs_p(&["worktree", "discard", "w"]).ok();
    fx.umount();
    Ok(())
}

fn worktree_config() -> ProptestConfig {
    let mut c = config();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = CI_WORKTREE_CASES;
    }
    c
}

proptest! {
    #![proptest_config(worktree_config())]

    /// Random operation sequences through a worktree agree with the model,
    /// its rewinds restore the model's tree for its turns, its base is
    /// frozen against the project's changes, and merging it gives the
    /// project the model's tree (`docs/worktrees.md`).
    #[test]
    fn worktree_agrees_with_model(
        setup in prop::collection::vec(setup_entry(), 0..16),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        run_case_worktree(&setup, &ops)?;
    }
}

proptest! {
    #![proptest_config(config())]

    /// Random operation sequences through a real mount agree with the model,
    /// and every rewind restores the model's tree for its turn.
    #[test]
    fn mount_agrees_with_model(
        setup in prop::collection::vec(setup_entry(), 0..16),
        ops in prop::collection::vec(op(), 1..48),
    ) {
        run_case(&setup, &ops, false)?;
    }

    /// The same with every file written in place captured as ranges
    /// (`docs/ranges.md`): rewinds put the turn-start bytes together from
    /// the saved ranges and the file's later content.
    #[test]
    fn mount_agrees_with_model_ranged(
        setup in prop::collection::vec(setup_entry(), 0..16),
        ops in prop::collection::vec(op(), 1..48),
    ) {
        run_case(&setup, &ops, true)?;
    }

    /// The same with shared-mmap stores whose mapping (and dirty page) is
    /// still live when the next turn or rewind runs: each store lands in
    /// the turn before that boundary.
    #[test]
    fn mount_agrees_with_model_mmap_across_boundaries(
        setup in prop::collection::vec(setup_entry(), 0..16),
        ops in prop::collection::vec(op_with_mmap(), 1..48),
    ) {
        run_case(&setup, &ops, false)?;
    }

    /// [`mount_agrees_with_model_mmap_across_boundaries`] on the ranged
    /// capture path.
    #[test]
    fn mount_agrees_with_model_mmap_across_boundaries_ranged(
        setup in prop::collection::vec(setup_entry(), 0..16),
        ops in prop::collection::vec(op_with_mmap(), 1..48),
    ) {
        run_case(&setup, &ops, true)?;
    }
}
