//! Descriptors of the project's directories the base read lately, by
//! project-relative path, so that a lookup, an open or a readlink in a
//! directory resolves one name relative to a held descriptor (one
//! `fstatat` or `openat`) instead of the whole path from the project's root
//! (an `openat2`, the call and a `close` each time).
//!
//! **Exactness.** A held descriptor names the directory that was at the
//! path when it was opened. Every change of the project through its mount
//! is captured first, which moves the records' mark, and the base then
//! reloads its records and drops every held descriptor ([`Dirs::clear`])
//! before it answers again: an answer computed through a descriptor that a
//! rename made stale is never given (`Core::fresh` computes it again).
//! A directory renamed or replaced *behind* the mount keeps being read
//! through the descriptor held on it (the old directory, which is what the
//! base had at that path) until the next reload or until the cache is
//! full: as with any change behind the mount, the worktree then shows the
//! project's state, not a recorded one (`docs/worktrees.md`).

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use crate::tree::Dir;

/// Most directory descriptors held at once; past it, all are dropped
/// (a tree walk reads one directory after the other, so the recent ones
/// come back at once).
const MAX_HELD: usize = 256;

/// The held directory descriptors (see the module docs).
#[derive(Default)]
pub(super) struct Dirs {
    held: Mutex<HashMap<Vec<u8>, Arc<OwnedFd>>>,
}

impl Dirs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Arc<OwnedFd>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A descriptor of the project's directory at `dir` (`""`: the root),
    /// opened confined (no symlink on the way, `Dir::open_dir`) the first
    /// time; `None` when there is no directory there (missing, a symlink on
    /// the way, or not a directory).
    ///
    /// Errors: any other failure to open it.
    pub(super) fn get(&self, project: &Dir, dir: &[u8]) -> io::Result<Option<Arc<OwnedFd>>> {
        if let Some(fd) = self.lock().get(dir) {
            return Ok(Some(Arc::clone(fd)));
        }
        let fd = match project.open_dir(dir) {
            Ok(fd) => Arc::new(fd),
            Err(e)
                if crate::tree::is_not_found(&e)
                    || matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let mut held = self.lock();
        if held.len() >= MAX_HELD {
            held.clear();
        }
        held.insert(dir.to_vec(), Arc::clone(&fd));
        Ok(Some(fd))
    }

    /// Drops every held descriptor (the records moved: a directory may
    /// have been renamed or removed through the mount).
    pub(super) fn clear(&self) {
        self.lock().clear();
    }
}
