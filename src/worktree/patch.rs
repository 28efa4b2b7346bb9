//! A worktree's changes as a patch git can apply (`opfs worktree diff`),
//! rendered by [`crate::diff`] like the diffs of turns: files and symlinks
//! only (git cannot represent directories or special files); a file
//! replaced by a symlink (or the other way) is a type change.

use std::io::{self, Read};

use opfs_fs::overlay::Lower;

use crate::diff::{FileDiff, Side};
use crate::history::git_file_mode;
use crate::paths;
use crate::tree::Dir;

use super::changes::{base_bytes, Change, Entry};

/// The patch entries of `changes` (sorted by path): the base side read
/// from `base`, the worktree side from `upper`.
///
/// Errors: a file of either side cannot be read (the error names it).
pub fn file_diffs(upper: &Dir, base: &dyn Lower, changes: &[Change]) -> io::Result<Vec<FileDiff>> {
    let mut out = Vec::new();
    for c in changes {
        let old = match &c.before {
            Entry::File { perm, .. } => Some(Side {
                mode: git_file_mode(*perm),
                data: base_bytes(base, &c.path)?.unwrap_or_default(),
                perm: *perm & 0o7777,
            }),
            Entry::Symlink { target } => Some(Side {
                mode: 0o120000,
                data: target.clone(),
                perm: 0,
            }),
            _ => None,
        };
        let new = match &c.after {
            Entry::File { perm, .. } => Some(Side {
                mode: git_file_mode(*perm),
                data: read_upper(upper, &c.path)?,
                perm: *perm & 0o7777,
            }),
            Entry::Symlink { target } => Some(Side {
                mode: 0o120000,
                data: target.clone(),
                perm: 0,
            }),
            _ => None,
        };
        let path = c.path.clone();
        out.push(match (old, new) {
            (None, None) => continue,
            (None, Some(new)) => FileDiff::Added { path, new },
            (Some(old), None) => FileDiff::Deleted { path, old },
            (Some(old), Some(new)) if (old.mode == 0o120000) != (new.mode == 0o120000) => {
                FileDiff::TypeChanged { path, old, new }
            }
            (Some(old), Some(new)) => {
                if old == new {
                    continue;
                }
                FileDiff::Modified { path, old, new }
            }
        });
    }
    Ok(out)
}

fn read_upper(upper: &Dir, path: &[u8]) -> io::Result<Vec<u8>> {
    let mut f = upper
        .open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", paths::display(path))))?;
    let mut data = Vec::new();
    f.read_to_end(&mut data)?;
    Ok(data)
}
