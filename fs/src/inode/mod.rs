//! The inode table: FUSE inode numbers ↔ backing inodes.
//!
//! Each node holds an `O_PATH | O_NOFOLLOW` fd on its backing inode, opened
//! relative to its parent's fd, so every operation is anchored inside the
//! backing directory and cannot be redirected by a symlink. Nodes are keyed
//! by the backing identity ([`InodeKey`]), so hard links share one FUSE
//! inode. A node's FUSE number is its backing inode number where that is
//! unambiguous (see `Table::fresh_ino`).
//!
//! **The lookup-count contract** (fuser's `Filesystem::forget`): every
//! entry reply the kernel receives (lookup, mkdir, mknod, symlink, link,
//! create, each readdirplus entry) gives the node one lookup
//! ([`Inodes::lookup`]); `forget(ino, n)` takes `n` away
//! ([`Inodes::forget`]); at zero the node, its names and its fd go away. An
//! entry prepared but never sent (a readdirplus buffer that was full) is
//! forgotten at once by the layer itself. The root (FUSE inode 1) is never
//! forgotten.
//!
//! - `table.rs`: the nodes, their lookup counts and their known names.
//! - `fds.rs`: the fd budget, and reopening a node by name once its fd was
//!   closed to stay within it.
//!
//! A node also remembers the names it is known by, as (parent inode, name)
//! pairs, so its path can be computed for the mutation hook and so a path
//! can be resolved to a cached inode in O(depth) for invalidation. Names are
//! learned from lookups and creations and updated on unlink and rename.

mod fds;
mod table;

pub(crate) use fds::MIN_FD_BUDGET;
pub(crate) use table::{
    path_in, paths_in, trim_in, Everything, InodeKey, Inodes, Named, Names, NodeRef, Stamp,
};

/// FUSE inode number of the root.
pub(crate) const ROOT: u64 = 1;

/// Longest parent chain followed when building a path (a cycle would be a
/// bug; the bound keeps it from hanging a callback).
pub(crate) const MAX_DEPTH: usize = 4096;

pub(crate) fn join<'a>(parts: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use super::child;

    #[test]
    fn child_paths() {
        assert_eq!(child(b"", b"a"), b"a");
        assert_eq!(child(b"a/b", b"c"), b"a/b/c");
        assert_eq!(child(b"a", b""), b"a");
    }
}
