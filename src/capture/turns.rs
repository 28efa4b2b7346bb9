//! Turns: what the open turn has recorded, and the switch to the next one.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use super::links::Linked;
use super::ranges::RangeState;
use super::{Exclusive, Journal};
use crate::record::TurnKind;
use crate::store::IndexError;
use crate::tree::Tree;

/// Most paths [`TurnState::recent`] holds (about 100 MiB of paths at worst).
const RECENT_MAX: usize = 1 << 20;

/// The turn [`Journal::next_turn`] opens.
#[derive(Debug, Clone, Copy)]
pub struct NewTurn<'a> {
    /// Its kind.
    pub kind: TurnKind,
    /// The label shown in the history, if any.
    pub label: Option<&'a str>,
    /// The caller's own id for the turn (e.g. the agent's message id).
    pub external_id: Option<&'a str>,
    /// For a rewind turn: the turn it rewound to.
    pub rewound_to: Option<u64>,
    /// A label for the turn this closes (`opfs turn -m`); `Some("")`
    /// removes its label, `None` keeps it.
    pub closing_label: Option<&'a str>,
}

impl NewTurn<'static> {
    /// An agent turn with no label, no external id.
    pub fn agent() -> NewTurn<'static> {
        NewTurn {
            kind: TurnKind::Agent,
            label: None,
            external_id: None,
            rewound_to: None,
            closing_label: None,
        }
    }
}

/// What the journal knows of the open turn and of the turns before it.
pub(super) struct TurnState {
    /// The open turn's number.
    pub(super) number: u64,
    /// Paths recorded whole in the open turn.
    pub(super) captured: HashSet<Vec<u8>>,
    /// Multiply-linked files recorded in the open turn.
    pub(super) linked: Linked,
    /// Files captured as ranges in the open turn (a `Ranged` record is
    /// their pre-image; `captured` does not hold them).
    pub(super) ranged: HashMap<Vec<u8>, RangeState>,
    /// `(number, started_at)` of every turn, oldest first: which turn was
    /// open when an inode was born (see [`Journal::note_birth`]).
    starts: Vec<(u64, i64)>,
    /// How far (ns) a birth time may read behind the instant the inode was
    /// made, measured against the fine clock turn starts are taken with:
    /// one tick of the coarse clock the kernel stamps new inodes with (see
    /// [`Journal::note_birth`]).
    pub(super) birth_slack: i64,
    /// Paths recorded in the closed turns since this process opened the
    /// journal, with the newest such turn: answers most of
    /// [`Journal::note_birth`]'s questions without a query. Emptied when it
    /// holds [`RECENT_MAX`] paths.
    pub(super) recent: HashMap<Vec<u8>, u64>,
    /// Edits behind the mount kept in the open turn (`outside.rs`).
    pub(super) outside_kept: super::outside::Kept,
}

impl TurnState {
    /// Turn `number` open with nothing recorded yet; `starts` as
    /// [`TurnState::starts`].
    pub(super) fn new(number: u64, starts: Vec<(u64, i64)>) -> TurnState {
        TurnState {
            number,
            captured: HashSet::new(),
            linked: HashMap::new(),
            ranged: HashMap::new(),
            starts,
            birth_slack: coarse_clock_resolution_ns(),
            recent: HashMap::new(),
            outside_kept: HashMap::new(),
        }
    }

    /// The turn that was open at `ns` (since the Unix epoch), if it is one
    /// the index keeps.
    pub(super) fn open_at(&self, ns: i64) -> Option<u64> {
        let at = self.starts.partition_point(|&(_, started)| started <= ns);
        at.checked_sub(1)
            .and_then(|i| self.starts.get(i))
            .map(|&(j, _)| j)
    }

    /// Closes the open turn and opens `next`, begun at `started` (ns).
    fn switch(&mut self, next: u64, started: i64) {
        let open = self.number;
        self.starts.push((next, started));
        if self.recent.len() + self.captured.len() > RECENT_MAX {
            self.recent.clear();
        }
        for path in self.captured.drain().chain(self.ranged.keys().cloned()) {
            self.recent.insert(path, open);
        }
        self.number = next;
        self.linked.clear();
        self.ranged.clear();
        self.outside_kept.clear();
    }
}

impl<T: Tree> Journal<T> {
    /// Closes the open turn and opens the next one, `new`. Runs under
    /// `_excl` (no mutation in flight), so every mutation falls wholly in
    /// one turn.
    ///
    /// Returns the new turn's number. After `Ok` the switch is committed;
    /// after `Err` the old turn stays open.
    pub fn next_turn(&self, _excl: &Exclusive<'_>, new: NewTurn<'_>) -> Result<u64, IndexError> {
        let mut inner = self.lock();
        inner.flush()?;
        let open = inner.turn.number;
        let n = inner.index.next_turn_closing(
            Some(open),
            new.closing_label,
            new.kind,
            new.label,
            new.external_id,
            new.rewound_to,
        )?;
        let started = inner
            .index
            .turn(n)?
            .map(|t| t.started_at)
            .unwrap_or_else(crate::store::index::now_ns);
        inner.turn.switch(n, started);
        self.epoch.store(n, Ordering::Release);
        Ok(n)
    }
}

impl<T: Tree> Journal<T> {
    /// Opens a turn for a prompt sent from inside `opfs run`'s sandbox
    /// ([`crate::store::Index::sandbox_turn`]: an empty turn opened from
    /// inside, or the run's own `placeholder`, is relabelled; else the
    /// open turn is closed and a turn marked as opened from inside is
    /// opened). Runs under `_excl`, as [`Journal::next_turn`] does.
    ///
    /// Returns the open turn's number and whether it is new. After `Err`
    /// the old turn stays open, unchanged.
    pub fn sandbox_turn(
        &self,
        _excl: &Exclusive<'_>,
        label: Option<&str>,
        external_id: Option<&str>,
        placeholder: Option<u64>,
    ) -> Result<(u64, bool), IndexError> {
        let mut inner = self.lock();
        inner.flush()?;
        let open = inner.turn.number;
        let (n, new) = inner
            .index
            .sandbox_turn(open, label, external_id, placeholder)?;
        if new {
            let started = inner
                .index
                .turn(n)?
                .map(|t| t.started_at)
                .unwrap_or_else(crate::store::index::now_ns);
            inner.turn.switch(n, started);
            self.epoch.store(n, Ordering::Release);
        }
        Ok((n, new))
    }
}

/// The resolution of `CLOCK_REALTIME_COARSE` in ns (one scheduler tick),
/// at least 1 ms and at most 100 ms whatever the kernel reports.
fn coarse_clock_resolution_ns() -> i64 {
    let res = rustix::time::clock_getres(rustix::time::ClockId::RealtimeCoarse);
    let ns = res
        .tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(res.tv_nsec);
    ns.clamp(1_000_000, 100_000_000)
}
