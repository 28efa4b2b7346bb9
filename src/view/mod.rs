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
//!   together;
//! - [`Timeline`] and [`Reader`]: the records from some turn on, and the
//!   handles (index, blobs, project) that resolve them into states;
//! - [`TurnView`]: all of it at one turn.
//!
//! It is the future lower layer of worktrees: a worktree created from turn
//! N shows the project as this view sees it at N, without copying it.

pub mod chain;
pub mod current;
pub mod ranges;
pub mod reader;
pub mod timeline;

pub use reader::{Reader, Resolved, ViewError};
pub use timeline::Timeline;

use std::collections::BTreeMap;

use crate::record::PreImage;
use crate::record::Turn;
use crate::store::{Index, IndexError};

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

/// The project as it was at the start of one turn: each path's state then
/// (its earliest record from that turn on, or what the project holds now)
/// and the content of its files.
///
/// This is the future lower layer of a worktree created from turn N: the
/// worktree shows `TurnView::at(reader, N)` without copying the project.
#[derive(Debug)]
pub struct TurnView<'a> {
    reader: Reader<'a>,
    turn: u64,
    timeline: Timeline,
}

impl<'a> TurnView<'a> {
    /// The view at the start of `turn`: checks the turn and loads (and
    /// resolves) every record from it on.
    ///
    /// Errors: [`ViewError::Turn`] for a turn that cannot be looked at; the
    /// index, a blob or the project cannot be read; [`ViewError::Ranges`]
    /// when a ranged record cannot be put together.
    pub fn at(reader: Reader<'a>, turn: u64) -> Result<TurnView<'a>, ViewError> {
        reader.turn(turn)?;
        let timeline = reader.timeline(turn)?;
        Ok(TurnView {
            reader,
            turn,
            timeline,
        })
    }

    /// The turn whose start this view shows.
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// The records this view was built from (every record from its turn
    /// on, ranged ones resolved).
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// Every path recorded at or after the view's turn, sorted: the paths
    /// whose state then may differ from the project now. Any other path is
    /// as the project holds it.
    pub fn affected(&self) -> Vec<Vec<u8>> {
        self.timeline.iter().map(|(p, _)| p.clone()).collect()
    }

    /// The state of `path` at the start of the view's turn.
    ///
    /// Errors: as [`TurnView::states`].
    pub fn state_of(&self, path: &[u8]) -> Result<Version, ViewError> {
        let mut states = self.states(&[path.to_vec()])?;
        Ok(states
            .remove(path)
            .unwrap_or(Version::recorded(PreImage::Absent)))
    }

    /// The state of every path in `wanted` at the start of the view's turn
    /// (see [`Reader::states_at`]).
    ///
    /// Errors: the index, a blob or the project cannot be read.
    pub fn states(&self, wanted: &[Vec<u8>]) -> Result<BTreeMap<Vec<u8>, Version>, ViewError> {
        self.reader.states_at(&self.timeline, wanted, self.turn)
    }

    /// The bytes of a file or symlink state of `path` (see
    /// [`Reader::content`]); `None` for anything else.
    ///
    /// Errors: the blob is missing or corrupt.
    pub fn open(&self, path: &[u8], v: &Version) -> Result<Option<Vec<u8>>, ViewError> {
        self.reader.content(path, v)
    }
}
