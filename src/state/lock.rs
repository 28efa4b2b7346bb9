//! Advisory file locks: one RAII [`FileLock`] type, the [`StateLock`] a
//! daemon (or a direct CLI operation) holds on a state dir, and the
//! [`PinsLock`] that keeps gc's pins still.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

use crate::store::StateDir;

/// An exclusive `flock(2)` on a file, released when this is dropped (or the
/// process ends, so a killed holder never leaves a stale lock).
#[must_use = "the lock is released as soon as the FileLock is dropped"]
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

/// A [`FileLock`] whose file its holder may remove ([`RemovableLock::remove`]):
/// taken with [`FileLock::exclusive_removable`].
#[must_use = "the lock is released as soon as the RemovableLock is dropped"]
#[derive(Debug)]
pub struct RemovableLock {
    lock: FileLock,
    path: std::path::PathBuf,
}

impl RemovableLock {
    /// Removes the lock file, then releases the lock: a process waiting on
    /// it then finds its file gone and takes a new one
    /// ([`FileLock::exclusive_removable`]).
    ///
    /// Errors: the file cannot be removed (the lock is released anyway).
    pub fn remove(self) -> io::Result<()> {
        let r = std::fs::remove_file(&self.path);
        drop(self.lock);
        r
    }
}

impl FileLock {
    /// Opens `path` (creating it, never truncating) and takes an exclusive
    /// lock without waiting. `Ok(None)` when another open file holds it.
    ///
    /// Errors: the file cannot be opened or created, or `flock` fails for
    /// another reason than the lock being held.
    pub fn try_exclusive(path: &Path) -> io::Result<Option<FileLock>> {
        let file = open(path)?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(FileLock { _file: file })),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens `path` (creating it, never truncating) and waits until it holds
    /// an exclusive lock.
    ///
    /// Errors: the file cannot be opened or created, or `flock` fails.
    pub fn exclusive(path: &Path) -> io::Result<FileLock> {
        let file = open(path)?;
        flock(&file, FlockOperation::LockExclusive)?;
        Ok(FileLock { _file: file })
    }

    /// [`FileLock::exclusive`] on a lock file that a holder may remove
    /// ([`RemovableLock::remove`]): once locked, the file open must still
    /// be the one at `path` (same device and inode), else it was removed
    /// (or replaced) while this waited, and the lock is taken again on the
    /// file now there. So a lock file can be removed by its holder without
    /// two processes ever holding "the" lock at once.
    ///
    /// Errors: as [`FileLock::exclusive`].
    pub fn exclusive_removable(path: &Path) -> io::Result<RemovableLock> {
        loop {
            let file = open(path)?;
            flock(&file, FlockOperation::LockExclusive)?;
            let held = rustix::fs::fstat(&file)?;
            match rustix::fs::stat(path) {
                Ok(now) if now.st_dev == held.st_dev && now.st_ino == held.st_ino => {
                    return Ok(RemovableLock {
                        lock: FileLock { _file: file },
                        path: path.to_path_buf(),
                    });
                }
                Ok(_) => {}
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// [`FileLock::exclusive`], but never waiting on a holder that cannot
    /// let go: polls (every 50 ms) and gives up at once when the process
    /// holding the lock is stopped, traced or exited
    /// ([`crate::state::holder`]), and after `limit` in any case.
    ///
    /// Errors: as [`FileLock::exclusive`]; `WouldBlock` naming the holder's
    /// pid and state when it is frozen; `TimedOut` after `limit`.
    pub fn exclusive_within(path: &Path, limit: std::time::Duration) -> io::Result<FileLock> {
        let start = std::time::Instant::now();
        let mut checked = start;
        loop {
            if let Some(lock) = FileLock::try_exclusive(path)? {
                return Ok(lock);
            }
            if checked.elapsed() >= std::time::Duration::from_millis(250) || checked == start {
                checked = std::time::Instant::now();
                if let Some(pid) = super::holder::flock_holder(path) {
                    if let Some(st) = super::holder::proc_state(pid).filter(|s| s.is_frozen()) {
                        return Err(io::Error::new(
                            io::ErrorKind::WouldBlock,
                            format!(
                                "the lock is held by pid {pid}, which is {st}: it cannot let go \
                                 until it runs again (`kill -CONT {pid}`) or ends"
                            ),
                        ));
                    }
                }
            }
            if start.elapsed() >= limit {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("still held by another process after {} s", limit.as_secs()),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

fn open(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// An exclusive lock on a state dir, held by the daemon for its life or by a
/// CLI command that works on the state dir directly.
#[must_use = "the state dir is unlocked as soon as the StateLock is dropped"]
#[derive(Debug)]
pub struct StateLock {
    _lock: FileLock,
}

impl StateLock {
    /// Takes the lock (on [`StateDir::lock_path`]) without waiting.
    /// `Ok(None)` when someone else holds it (a daemon is running).
    ///
    /// Errors: the lock file cannot be opened or locked.
    pub fn try_acquire(state: &StateDir) -> io::Result<Option<StateLock>> {
        Ok(FileLock::try_exclusive(&state.lock_path())?.map(|l| StateLock { _lock: l }))
    }

    /// True when some process holds the lock.
    pub fn is_held(state: &StateDir) -> bool {
        if !state.lock_path().exists() {
            return false;
        }
        matches!(StateLock::try_acquire(state), Ok(None))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_second_lock_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let first = FileLock::try_exclusive(&path).unwrap().unwrap();
        assert!(FileLock::try_exclusive(&path).unwrap().is_none());
        drop(first);
        let _again = FileLock::exclusive(&path).unwrap();
    }
}

/// The lock on a project's pins ([`StateDir::pins_lock_path`]): gc holds
/// it from reading its pins (`crate::gc::pins`) until its deletions
/// commit, and whatever adds a pin that is not a running restore
/// (`worktree create`, from checking that its base turn exists until its
/// metadata is written) holds it too, so a new worktree's base is never
/// dropped under it. Restores need no lock: they run under the mount's
/// gate, which gc takes for its deletions, or under the state lock.
/// Released on drop. It lives here, below both gc and the worktrees,
/// which both take it.
#[must_use = "the lock is released when this value is dropped"]
#[derive(Debug)]
pub struct PinsLock {
    _lock: FileLock,
}

/// The lock on a project's pins could not be taken.
#[derive(Debug, thiserror::Error)]
#[error("cannot lock {path}: {source}")]
pub struct PinsLockError {
    /// The lock file.
    pub path: PathBuf,
    /// The cause.
    pub source: io::Error,
}

impl PinsLock {
    /// Waits for the lock on `state`'s pins: at most 10 min, and not at
    /// all while its holder is stopped (a gc in a stopped daemon).
    ///
    /// Errors: the lock file cannot be opened or locked, or its holder is
    /// frozen or did not let go in time.
    pub fn acquire(state: &StateDir) -> Result<PinsLock, PinsLockError> {
        let path = state.pins_lock_path();
        FileLock::exclusive_within(&path, std::time::Duration::from_secs(600))
            .map(|lock| PinsLock { _lock: lock })
            .map_err(|source| PinsLockError { path, source })
    }
}
