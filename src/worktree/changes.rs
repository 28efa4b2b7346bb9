//! What a worktree changed against its base: a walk of the upper layer
//! (proportional to what the worktree wrote, not to the project), each
//! entry compared with the lower layer.
//!
//! - An entry of the upper layer is the path's state in the worktree. It
//!   is a change unless the base holds the same (a directory copied up
//!   only to hold a child, a file copied up and written back unchanged).
//! - A whiteout `.wh.NAME` is the deletion of `NAME`; when `NAME` was a
//!   directory at the base, of everything under it too.
//! - An opaque directory hides the base's children, and so does a
//!   directory the upper layer made where the base had none: below it the
//!   worktree shows the upper layer alone, so every base entry beneath it
//!   that the upper layer does not hold again is deleted, at any depth.
//!
//! Paths under `.git` are left out, as everywhere in opfs: a merge never
//! writes the project's `.git`.

use std::collections::BTreeSet;
use std::io::{self, Read};

use opfs_fs::overlay::rules::{self, Name};
use opfs_fs::overlay::{Kind, Lower};

use crate::paths;
use crate::record::Hash;
use crate::tree::Dir;

/// One side of a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Nothing there.
    Absent,
    /// A regular file: its BLAKE3, length in bytes and permission bits.
    File {
        /// BLAKE3 of its bytes.
        hash: Hash,
        /// Length in bytes.
        size: u64,
        /// Permission bits (`mode & 0o7777`).
        perm: u32,
    },
    /// A directory with its permission bits.
    Dir {
        /// Permission bits.
        perm: u32,
    },
    /// A symbolic link with its target.
    Symlink {
        /// The target, bytes as stored.
        target: Vec<u8>,
    },
    /// A fifo, socket or device node.
    Special {
        /// Its type.
        kind: Kind,
        /// Permission bits.
        perm: u32,
        /// Device number (devices only).
        rdev: u64,
    },
}

impl Entry {
    /// `absent`, `file`, `dir`, `symlink` or `special`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Entry::Absent => "absent",
            Entry::File { .. } => "file",
            Entry::Dir { .. } => "dir",
            Entry::Symlink { .. } => "symlink",
            Entry::Special { .. } => "special",
        }
    }
}

/// One path the worktree changed: its state at the base and in the
/// worktree (different).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The path, relative to the worktree's root.
    pub path: Vec<u8>,
    /// At the base.
    pub before: Entry,
    /// In the worktree.
    pub after: Entry,
}

impl Change {
    /// True when the path is a directory in the worktree, or was one at
    /// the base and is gone.
    pub fn is_dir(&self) -> bool {
        matches!(
            (&self.before, &self.after),
            (_, Entry::Dir { .. }) | (Entry::Dir { .. }, Entry::Absent)
        )
    }
}

/// The ignore rules of a worktree's view, as the export decides them
/// ([`crate::export::ignore`]): its `.gitignore` files as the worktree
/// holds them now (from `upper` when it wrote them, none where it deleted
/// them, else from `base`), `.git/info/exclude` and the user's global
/// excludes. `root` is the directory the patterns are relative to.
pub fn view_ignore_rules<'a>(
    upper: &'a Dir,
    base: &'a dyn Lower,
    root: &std::path::Path,
) -> crate::export::ignore::IgnoreRules<'a> {
    let read = move |rel: &[u8]| -> Option<String> {
        if let Ok(Some(st)) = upper.lstat(rel) {
            return (st.file_type() == libc::S_IFREG)
                .then(|| read_upper(upper, rel))
                .flatten();
        }
        let (dir, name) = paths::split(rel).unwrap_or((b"", rel));
        if matches!(upper.lstat(&rules::whiteout_path(dir, name)), Ok(Some(_))) {
            return None;
        }
        base_bytes(base, rel)
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    crate::export::ignore::IgnoreRules::load_with(root, Box::new(read))
}

/// Removes from `found` (a worktree's [`changes`]) the paths the
/// worktree's own ignore rules ignore ([`view_ignore_rules`]). Returns
/// how many were removed.
pub fn drop_ignored(
    found: &mut Vec<Change>,
    upper: &Dir,
    base: &dyn Lower,
    root: &std::path::Path,
) -> usize {
    let mut rules = view_ignore_rules(upper, base, root);
    let before = found.len();
    found.retain(|c| !rules.is_ignored(&c.path, c.is_dir()));
    before - found.len()
}

/// The text of the upper layer's file at `path` (`None`: unreadable).
fn read_upper(upper: &Dir, path: &[u8]) -> Option<String> {
    let mut f = upper
        .open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)
        .ok()?;
    let mut v = Vec::new();
    f.read_to_end(&mut v).ok()?;
    Some(String::from_utf8_lossy(&v).into_owned())
}

/// Every path the worktree changed against its base, sorted by path.
///
/// `upper` is the upper layer, `base` the lower one. Cost: one `lstat` per
/// upper entry, the bytes of each upper file (hashed) and of the base file
/// it replaces when their sizes agree, and a listing of each opaque or
/// deleted base directory.
///
/// Errors: the upper layer or the base cannot be read (the error names
/// the path).
pub fn changes(upper: &Dir, base: &dyn Lower) -> io::Result<Vec<Change>> {
    let mut out = Vec::new();
    walk(upper, base, b"", true, true, &mut out)?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup_by(|a, b| a.path == b.path);
    Ok(out)
}

fn at(path: &[u8]) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", paths::display(path)))
}

/// Compares the upper layer's directory `dir` with the base. `lower_shows`:
/// the base holds a directory at `dir` and it shows through in the
/// worktree (false below an opaque directory, or below a directory the
/// upper layer made over a base entry that was not a directory): with
/// `dir`'s own opaque marker, what [`rules::children_show`] decides.
/// Every upper entry is compared with the base's entry at the same path,
/// whatever shows: a change is the base's state against the worktree's.
/// `base_dir`: the base holds a directory at `dir`.
fn walk(
    upper: &Dir,
    base: &dyn Lower,
    dir: &[u8],
    lower_shows: bool,
    base_dir: bool,
    out: &mut Vec<Change>,
) -> io::Result<()> {
    let names = upper.list_dir(dir).map_err(at(dir))?;
    // Whether the base's children of `dir` show through where the upper
    // layer holds no entry of that name (`dir` is an upper directory).
    let lower_shows = rules::children_show(lower_shows, Some(true), || {
        Ok::<_, io::Error>(names.iter().any(|n| rules::classify(n) == Name::Opaque))
    })?;
    let mut shown: BTreeSet<Vec<u8>> = BTreeSet::new();
    for name in &names {
        match rules::classify(name) {
            Name::Opaque => continue,
            Name::Whiteout(hidden) => {
                let path = paths::join(dir, hidden);
                if !names.iter().any(|n| n.as_slice() == hidden) && !paths::is_excluded(&path) {
                    delete(base, &path, out)?;
                }
                continue;
            }
            Name::Plain => {}
        }
        let path = paths::join(dir, name);
        if paths::is_excluded(&path) {
            continue;
        }
        shown.insert(name.clone());
        let after = upper_entry(upper, &path)?;
        let before = base_entry(base, &path)?;
        let base_is_dir = matches!(before, Entry::Dir { .. });
        let is_dir = matches!(after, Entry::Dir { .. });
        if before != after && !same_file(base, &path, &before, &after)? {
            let before = with_hash(base, &path, before)?;
            if base_is_dir && !is_dir {
                // A base directory replaced by a file: its children go.
                delete_children(base, &path, out)?;
            }
            out.push(Change {
                path: path.clone(),
                before,
                after,
            });
        }
        if is_dir {
            walk(
                upper,
                base,
                &path,
                lower_shows && base_is_dir,
                base_is_dir,
                out,
            )?;
        }
    }
    if !lower_shows && base_dir {
        // Nothing of the base shows here but what the upper layer holds:
        // every other base child (and all beneath it) is gone.
        for child in base.readdir(dir).map_err(at(dir))?.unwrap_or_default() {
            if !shown.contains(&child.name) {
                let path = paths::join(dir, &child.name);
                if !paths::is_excluded(&path) {
                    delete(base, &path, out)?;
                }
            }
        }
    }
    Ok(())
}

/// `path` (and, for a base directory, everything under it) is gone.
fn delete(base: &dyn Lower, path: &[u8], out: &mut Vec<Change>) -> io::Result<()> {
    let before = base_entry(base, path)?;
    if before == Entry::Absent {
        return Ok(());
    }
    if matches!(before, Entry::Dir { .. }) {
        delete_children(base, path, out)?;
    }
    let before = with_hash(base, path, before)?;
    out.push(Change {
        path: path.to_vec(),
        before,
        after: Entry::Absent,
    });
    Ok(())
}

fn delete_children(base: &dyn Lower, dir: &[u8], out: &mut Vec<Change>) -> io::Result<()> {
    for child in base.readdir(dir).map_err(at(dir))?.unwrap_or_default() {
        delete(base, &paths::join(dir, &child.name), out)?;
    }
    Ok(())
}

/// True when both sides are files of equal length and permission whose
/// bytes hash alike (the hash of the base side is not known up front).
fn same_file(base: &dyn Lower, path: &[u8], before: &Entry, after: &Entry) -> io::Result<bool> {
    match (before, after) {
        (
            Entry::File {
                size: s1, perm: p1, ..
            },
            Entry::File {
                size: s2,
                perm: p2,
                hash,
            },
        ) if s1 == s2 && p1 == p2 => Ok(base_hash(base, path)? == Some(*hash)),
        _ => Ok(false),
    }
}

/// The BLAKE3 of the base file at `path` (`None`: not a file there).
pub fn base_hash(base: &dyn Lower, path: &[u8]) -> io::Result<Option<Hash>> {
    let mut hasher = blake3::Hasher::new();
    let mut offset = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let Some(n) = base.read_at(path, offset, &mut buf).map_err(at(path))? else {
            return Ok(None);
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        offset += n as u64;
    }
    Ok(Some(*hasher.finalize().as_bytes()))
}

/// The bytes of the base file at `path` (`None`: not a file there).
pub fn base_bytes(base: &dyn Lower, path: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let Some(n) = base
            .read_at(path, out.len() as u64, &mut buf)
            .map_err(at(path))?
        else {
            return Ok(None);
        };
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    Ok(Some(out))
}

/// `entry` (the base's state of `path`) with a file's real hash.
fn with_hash(base: &dyn Lower, path: &[u8], entry: Entry) -> io::Result<Entry> {
    Ok(match entry {
        Entry::File { size, perm, .. } => Entry::File {
            hash: base_hash(base, path)?.unwrap_or([0; 32]),
            size,
            perm,
        },
        other => other,
    })
}

/// The base's state of `path`, without its bytes: a file's hash is left
/// zero (compared by [`same_file`]).
fn base_entry(base: &dyn Lower, path: &[u8]) -> io::Result<Entry> {
    let Some(a) = base.getattr(path).map_err(at(path))? else {
        return Ok(Entry::Absent);
    };
    Ok(match a.kind {
        Kind::File => Entry::File {
            hash: [0; 32],
            size: a.size,
            perm: a.perm,
        },
        Kind::Dir => Entry::Dir { perm: a.perm },
        Kind::Symlink => Entry::Symlink {
            target: base.readlink(path).map_err(at(path))?.unwrap_or_default(),
        },
        kind => Entry::Special {
            kind,
            perm: a.perm,
            rdev: a.rdev,
        },
    })
}

/// The upper layer's state of `path`, a file's bytes hashed.
fn upper_entry(upper: &Dir, path: &[u8]) -> io::Result<Entry> {
    let Some(st) = upper.lstat(path).map_err(at(path))? else {
        return Ok(Entry::Absent);
    };
    Ok(match st.file_type() {
        libc::S_IFREG => {
            let mut f = upper
                .open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)
                .map_err(at(path))?;
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut size = 0u64;
            loop {
                let n = f.read(&mut buf).map_err(at(path))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                size += n as u64;
            }
            Entry::File {
                hash: *hasher.finalize().as_bytes(),
                size,
                perm: st.perm(),
            }
        }
        libc::S_IFDIR => Entry::Dir { perm: st.perm() },
        libc::S_IFLNK => Entry::Symlink {
            target: upper.read_link(path).map_err(at(path))?,
        },
        _ => Entry::Special {
            kind: Kind::from_mode(st.mode).unwrap_or(Kind::Fifo),
            perm: st.perm(),
            rdev: st.rdev,
        },
    })
}
