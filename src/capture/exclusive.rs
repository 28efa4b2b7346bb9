//! [`Exclusive`]: the proof that no mutation of the project is in flight.
//!
//! Every operation that must run with the project's mutations held out
//! takes an `&Exclusive`: a turn boundary ([`super::Journal::next_turn`],
//! [`super::Journal::sandbox_turn`]), a rewind and `opfs restore`
//! (`crate::rewind`, and recovery of an interrupted one), the restore
//! executor (`crate::restore::apply`), a worktree merge and its crash
//! rollback (`crate::worktree::merge`), and each step of gc inside the
//! daemon (`crate::gc::gc_served`). Calling one without holding the lock
//! does not compile. There are two ways to hold it:
//!
//! - [`Exclusive::quiesced`]: the mount's quiesce gate taken for writing
//!   (`control::server::MountOps::quiesce` returns one), while mounted;
//! - [`Exclusive::unmounted`]: the state lock held by a process that does
//!   not serve a mount (a CLI command working on the state dir directly,
//!   or the daemon before it mounts), so nothing can mutate the project
//!   through opfs.
//!
//! What changes behind the mount (another process writing the project's
//! directory directly) is never held out by either: those edits are the
//! fingerprints' business (`docs/design.md`, "Changes behind the mount").
//!
//! With the lock, a turn switch, a rewind and a merge compile:
//!
//! ```no_run
//! use opfs::capture::{Exclusive, Journal, NewTurn};
//! use opfs::state::lock::StateLock;
//!
//! fn under_the_lock(journal: &Journal, lock: &StateLock) {
//!     let excl = Exclusive::unmounted(lock);
//!     let _ = journal.next_turn(&excl, NewTurn::agent());
//!     let _ = opfs::rewind::rewind(journal, &excl, 1, Default::default());
//!     let _ = opfs::worktree::merge::merge(journal, &excl, "w", Default::default());
//! }
//! ```
//!
//! Without it, none does (E0061: an argument is missing):
//!
//! ```compile_fail,E0061
//! fn no_lock(journal: &opfs::capture::Journal) {
//!     let _ = journal.next_turn(opfs::capture::NewTurn::agent());
//! }
//! ```
//!
//! ```compile_fail,E0061
//! fn no_lock(journal: &opfs::capture::Journal) {
//!     let _ = opfs::rewind::rewind(journal, 1, Default::default());
//! }
//! ```
//!
//! ```compile_fail,E0061
//! fn no_lock(journal: &opfs::capture::Journal) {
//!     let _ = opfs::worktree::merge::merge(journal, "w", Default::default());
//! }
//! ```
//!
//! And an `Exclusive` made from the state lock cannot outlive it (E0515:
//! it borrows a lock dropped on return):
//!
//! ```compile_fail,E0515
//! use opfs::capture::Exclusive;
//! use opfs::state::lock::StateLock;
//!
//! fn outlives(state: &opfs::store::StateDir) -> Option<Exclusive<'static>> {
//!     let lock = StateLock::try_acquire(state).ok()??;
//!     Some(Exclusive::unmounted(&lock))
//! }
//! ```

use crate::state::lock::StateLock;

/// Held while no mutation through opfs is in flight and none can start.
/// Released on drop (dropping a quiesced one lets the waiting mutations
/// go on). The lifetime is that of the borrowed [`StateLock`] for an
/// [`Exclusive::unmounted`] one, `'static` for a quiesced one.
#[must_use = "mutations resume as soon as the Exclusive is dropped"]
pub struct Exclusive<'a> {
    _held: Held<'a>,
}

/// What an [`Exclusive`] holds.
enum Held<'a> {
    /// The mount's quiesce gate, taken for writing.
    Gate { _guard: opfs_fs::QuiesceGuard },
    /// The state lock, with nothing mounted by its holder.
    Unmounted { _lock: &'a StateLock },
}

impl Exclusive<'static> {
    /// Holds `gate`, the mount's quiesce gate taken for writing
    /// ([`opfs_fs::Controller::quiesce`]), until this value is dropped.
    pub fn quiesced(gate: opfs_fs::QuiesceGuard) -> Exclusive<'static> {
        Exclusive {
            _held: Held::Gate { _guard: gate },
        }
    }
}

impl<'a> Exclusive<'a> {
    /// Exclusive access from holding `lock`, the project's state lock,
    /// in a process that serves no mount of the project: no daemon runs
    /// (it would hold the lock), so nothing mutates the project through
    /// opfs. A daemon uses this only before it mounts (its recovery);
    /// once mounted, it quiesces.
    pub fn unmounted(lock: &'a StateLock) -> Exclusive<'a> {
        Exclusive {
            _held: Held::Unmounted { _lock: lock },
        }
    }
}

impl std::fmt::Debug for Exclusive<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self._held {
            Held::Gate { .. } => "Exclusive(quiesced)",
            Held::Unmounted { .. } => "Exclusive(unmounted)",
        })
    }
}
