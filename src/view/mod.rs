//! The project at the start of turn N.
//!
//! A record (turn T, path P, X) says "P was X when T began". The state of P
//! at the start of turn N is therefore its earliest record with turn >= N
//! or, with none, what the project holds now. This module is the one place
//! that answers that question:
//!
//! - [`TurnError`] and [`check_turn`]: whether turn N can be looked at;
//! - [`chain`]: the one ranged-chain resolver (typed [`chain::RangeError`]);
//! - [`current`]: the one reader of a path's current state;
//! - [`ranges`]: the primitives that put a file kept as ranges back
//!   together.
//!
//! It is the future lower layer of worktrees: a worktree created from turn
//! N shows the project as this view sees it at N, without copying it.

pub mod chain;
pub mod current;
pub mod ranges;

use crate::record::PreImage;
use crate::store::{Index, IndexError, Turn};

/// A turn that cannot be looked at. The messages are part of the CLI's
/// contract (`docs/errors.md`); every operation that takes a turn number
/// (rewind, log, diff, show, export) reports them the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// The turn does not exist.
    #[error("turn {turn} does not exist (turns run from {first} to {last})")]
    Unknown {
        /// The turn asked for.
        turn: u64,
        /// The oldest turn kept.
        first: u64,
        /// The newest turn.
        last: u64,
    },
    /// The turn was dropped by retention (`opfs gc`).
    #[error("turn {turn} was dropped by retention (opfs gc); the oldest turn kept is {first}")]
    Dropped {
        /// The turn asked for.
        turn: u64,
        /// The oldest turn kept.
        first: u64,
    },
    /// No turn was ever recorded for this project.
    #[error("no turns are recorded for this project yet")]
    NoTurns,
}

/// Checks that `turn` exists in `index`; returns it.
///
/// Errors: the outer `Err` when the index fails; the inner one is
/// [`TurnError::NoTurns`] for an index with no turn,
/// [`TurnError::Dropped`] for a turn older than the oldest kept (retention
/// dropped it) and [`TurnError::Unknown`] for any other missing turn
/// (0 included).
pub fn check_turn(index: &Index, turn: u64) -> Result<Result<Turn, TurnError>, IndexError> {
    let Some(last) = index.last_turn()? else {
        return Ok(Err(TurnError::NoTurns));
    };
    let first = index.first_turn()?.unwrap_or(1);
    if turn >= 1 && turn < first {
        return Ok(Err(TurnError::Dropped { turn, first }));
    }
    Ok(index.turn(turn)?.ok_or(TurnError::Unknown {
        turn,
        first,
        last: last.number,
    }))
}

/// One path's state at some point, with the bytes of a regular file when
/// they were read from the project (files known from records are read from
/// the blob store on demand).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The state (a file's `blob` is the BLAKE3 of its bytes either way).
    pub state: PreImage,
    /// The bytes of a file read from the project; `None` for everything
    /// else.
    pub bytes: Option<Vec<u8>>,
}

impl Version {
    /// A state known from a record (no bytes held).
    pub fn recorded(state: PreImage) -> Version {
        Version { state, bytes: None }
    }
}
