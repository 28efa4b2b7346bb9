//! Who holds a state dir's lock, and what the kernel says that process is
//! doing: how a command that finds a daemon not answering says why
//! ("the daemon of PROJECT (pid N) does not answer: stopped (state T)").
//!
//! The holder is read from `/proc/locks` (the `flock` on the state dir's
//! lock file, matched by device and inode), so it is known even for a
//! daemon that wrote nothing; its state is the third field of
//! `/proc/PID/stat`. Both are snapshots: the process may change state,
//! or exit, a moment later.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::store::StateDir;

/// What the kernel says a process is doing (`/proc/PID/stat`, field 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcState {
    /// `R`: running or runnable.
    Running,
    /// `S`: sleeping, waiting for something (an idle daemon waits so).
    Sleeping,
    /// `D`: waiting in the kernel, uninterruptibly (often on I/O).
    DiskWait,
    /// `T`: stopped by a signal (`SIGSTOP`, `SIGTSTP`): it does nothing
    /// until it gets `SIGCONT`.
    Stopped,
    /// `t`: stopped by a debugger.
    Traced,
    /// `Z` or `X`: exited; its parent has not collected it yet.
    Zombie,
    /// Any other letter.
    Other(char),
}

impl ProcState {
    /// Parses the state letter.
    pub fn from_letter(c: char) -> ProcState {
        match c {
            'R' => ProcState::Running,
            'S' | 'I' => ProcState::Sleeping,
            'D' => ProcState::DiskWait,
            'T' => ProcState::Stopped,
            't' => ProcState::Traced,
            'Z' | 'X' => ProcState::Zombie,
            c => ProcState::Other(c),
        }
    }

    /// The letter `ps` shows.
    pub fn letter(self) -> char {
        match self {
            ProcState::Running => 'R',
            ProcState::Sleeping => 'S',
            ProcState::DiskWait => 'D',
            ProcState::Stopped => 'T',
            ProcState::Traced => 't',
            ProcState::Zombie => 'Z',
            ProcState::Other(c) => c,
        }
    }

    /// True when the process cannot answer until someone else acts
    /// (`SIGCONT`, the debugger, its parent): stopped, traced or exited.
    /// A running, sleeping or disk-waiting process may still answer.
    pub fn is_frozen(self) -> bool {
        matches!(
            self,
            ProcState::Stopped | ProcState::Traced | ProcState::Zombie
        )
    }
}

impl std::fmt::Display for ProcState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self {
            ProcState::Running => "running",
            ProcState::Sleeping => "sleeping",
            ProcState::DiskWait => "waiting in the kernel",
            ProcState::Stopped => "stopped",
            ProcState::Traced => "stopped by a debugger",
            ProcState::Zombie => "exited",
            ProcState::Other(_) => "in an unknown state",
        };
        write!(f, "{what} (state {})", self.letter())
    }
}

/// The state of process `pid`, `None` when it does not exist (any more).
pub fn proc_state(pid: u32) -> Option<ProcState> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything,
    // spaces and parentheses too: the state follows the last ") ".
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.chars().next().map(ProcState::from_letter)
}

/// The pid of the process holding `state`'s lock (a daemon for its
/// life, or a command working on the state dir directly), `None` when
/// nobody holds it or `/proc/locks` cannot say.
pub fn lock_holder(state: &StateDir) -> Option<u32> {
    flock_holder(&state.lock_path())
}

/// The pid holding a `flock` on the file at `path` (as `/proc/locks`
/// lists it, in this pid namespace), `None` when none does or it cannot be
/// read.
pub fn flock_holder(path: &Path) -> Option<u32> {
    let meta = std::fs::metadata(path).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    holder_in(&locks, meta.dev(), meta.ino())
}

/// The pid of the `FLOCK` line on device `dev`, inode `ino` in `locks`
/// (the text of `/proc/locks`: `1: FLOCK  ADVISORY  WRITE 1234
/// fe:00:1002 0 EOF`, the device as hex major:minor).
fn holder_in(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let want = format!(
        "{:02x}:{:02x}:{ino}",
        rustix::fs::major(dev),
        rustix::fs::minor(dev)
    );
    locks.lines().find_map(|l| {
        // A waiter's line has "->" where a holder's has FLOCK.
        let mut f = l.split_whitespace().skip(1);
        if f.next()? != "FLOCK" {
            return None;
        }
        let (_, _, pid, id) = (f.next()?, f.next()?, f.next()?, f.next()?);
        (id == want).then(|| pid.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_the_flock_on_that_inode() {
        let locks = concat!(
            "1: POSIX  ADVISORY  READ 20480 fe:00:10011035 128 128\n",
            "2: FLOCK  ADVISORY  WRITE 20481 fe:00:10011028 0 EOF\n",
            "2: -> FLOCK  ADVISORY  WRITE 20999 fe:00:10011028 0 EOF\n",
            "3: FLOCK  ADVISORY  WRITE 777 08:01:10011028 0 EOF\n",
        );
        let dev = rustix::fs::makedev(0xfe, 0);
        assert_eq!(holder_in(locks, dev, 10011028), Some(20481));
        assert_eq!(holder_in(locks, dev, 10011035), None);
        assert_eq!(
            holder_in(locks, rustix::fs::makedev(8, 1), 10011028),
            Some(777)
        );
    }

    #[test]
    fn this_process_is_running_or_sleeping() {
        // The test harness's main thread (the pid) waits for this one.
        let st = proc_state(std::process::id());
        assert!(
            matches!(st, Some(ProcState::Running | ProcState::Sleeping)),
            "{st:?}"
        );
        assert_eq!(ProcState::Stopped.to_string(), "stopped (state T)");
        assert!(ProcState::Stopped.is_frozen() && !ProcState::Sleeping.is_frozen());
    }

    #[test]
    fn this_process_holding_a_lock_is_its_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lock");
        let lock = crate::state::lock::FileLock::try_exclusive(&path)
            .expect("lock")
            .expect("free");
        assert_eq!(flock_holder(&path), Some(std::process::id()));
        drop(lock);
        assert_eq!(flock_holder(&path), None);
    }
}
