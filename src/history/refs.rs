//! Turns as a person names them, and what `opfs undo` rewinds to.
//!
//! A turn ref is a turn number (`3`), `@` (the open turn: the newest
//! one), `@-` (the turn before it) or `@-K` (K turns before it), like jj's
//! `@` and `@-`. A range is two refs joined by `..` (`@-2..@`). Numbers are
//! passed through as given (the command checks that the turn exists, with
//! its own message); a relative ref that points before the oldest turn
//! still kept is refused here, naming the range of refs that exist.

use crate::record::TurnKind;
use crate::store::Index;

use super::HistoryError;

/// Resolves a turn ref against `index`: a number as it is, `@` / `@-` /
/// `@-K` relative to the open turn.
///
/// Errors (all usage): [`HistoryError::BadTurnRef`] when `text` is neither
/// a number from 1 nor a relative ref, [`HistoryError::RefOutOfRange`]
/// when a relative ref points before the oldest turn kept (or there is no
/// turn yet), or the index cannot be read ([`HistoryError::Read`]).
pub fn resolve_turn_ref(index: &Index, text: &str) -> Result<u64, HistoryError> {
    let t = text.trim();
    let Some(rest) = t.strip_prefix('@') else {
        return match t.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(HistoryError::BadTurnRef(text.to_string())),
        };
    };
    let back = match rest {
        "" => 0,
        "-" => 1,
        r => match r.strip_prefix('-').map(str::parse::<u64>) {
            Some(Ok(k)) => k,
            _ => return Err(HistoryError::BadTurnRef(text.to_string())),
        },
    };
    let (Some(open), Some(first)) = (index.last_turn()?, index.first_turn()?) else {
        return Err(HistoryError::RefOutOfRange {
            text: text.to_string(),
            open: 0,
            first: 0,
        });
    };
    match open.number.checked_sub(back) {
        Some(n) if n >= first && n >= 1 => Ok(n),
        _ => Err(HistoryError::RefOutOfRange {
            text: text.to_string(),
            open: open.number,
            first,
        }),
    }
}

/// Resolves `N` or `N..M` where each end is a turn ref
/// ([`resolve_turn_ref`]) into an inclusive range.
///
/// Errors: as [`resolve_turn_ref`], [`HistoryError::BadRange`] for an
/// empty end (`3..`).
pub fn resolve_range_ref(index: &Index, text: &str) -> Result<(u64, u64), HistoryError> {
    match text.split_once("..") {
        Some((a, b)) if !a.trim().is_empty() && !b.trim().is_empty() => {
            Ok((resolve_turn_ref(index, a)?, resolve_turn_ref(index, b)?))
        }
        Some(_) => Err(HistoryError::BadRange(text.to_string())),
        None => {
            let n = resolve_turn_ref(index, text)?;
            Ok((n, n))
        }
    }
}

/// What `opfs undo` does, decided from the newest turns
/// ([`undo_target`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undo {
    /// The open turn has recorded changes: rewind to its start, which
    /// discards them.
    OpenTurn {
        /// The open turn.
        turn: u64,
    },
    /// The open turn has recorded nothing and the newest turn before it
    /// that did not record nothing is a rewind: rewind to that rewind
    /// turn's start, the state just before the rewind ran (redo).
    Rewind {
        /// The rewind turn.
        turn: u64,
        /// The turn that rewind had restored.
        rewound_to: u64,
    },
    /// The open turn has recorded nothing and the newest turn before it
    /// that recorded changes is an agent or merge turn (turns in between
    /// recorded nothing): rewind to that turn's start, which discards what
    /// it changed.
    LastTurn {
        /// The turn before the open one.
        turn: u64,
    },
    /// Nothing to undo: no turn recorded a change.
    Nothing,
}

impl Undo {
    /// The turn whose start `opfs undo` restores, if any.
    pub fn target(&self) -> Option<u64> {
        match *self {
            Undo::OpenTurn { turn } | Undo::Rewind { turn, .. } | Undo::LastTurn { turn } => {
                Some(turn)
            }
            Undo::Nothing => None,
        }
    }

    /// What it undoes, in words (`opfs undo` prints it).
    pub fn describe(&self) -> String {
        match *self {
            Undo::OpenTurn { turn } => {
                format!("undo the changes of the open turn {turn} (rewind to its start)")
            }
            Undo::Rewind { turn, rewound_to } => format!(
                "undo the rewind to turn {rewound_to} (rewind to the start of turn {turn}, \
                 just before that rewind ran)"
            ),
            Undo::LastTurn { turn } => {
                format!("undo the changes of turn {turn} (rewind to its start)")
            }
            Undo::Nothing => "nothing to undo: no turn has recorded a change".to_string(),
        }
    }

    /// A short name for `--json`: `open_turn`, `rewind`, `last_turn` or
    /// `nothing`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Undo::OpenTurn { .. } => "open_turn",
            Undo::Rewind { .. } => "rewind",
            Undo::LastTurn { .. } => "last_turn",
            Undo::Nothing => "nothing",
        }
    }
}

/// What `opfs undo` rewinds to. The records must be committed first (a
/// daemon's pending capture log): whether the open turn "recorded
/// changes" is read from the index.
///
/// Errors: the index cannot be read.
pub fn undo_target(index: &Index) -> Result<Undo, HistoryError> {
    let turns = index.turns(None)?;
    let Some(open) = turns.first() else {
        return Ok(Undo::Nothing);
    };
    if !index.paths_of_turn(open.number)?.is_empty() {
        return Ok(Undo::OpenTurn { turn: open.number });
    }
    // Agent turns that recorded nothing (opened and closed with no change)
    // are passed over: undoing them would change nothing.
    for t in &turns[1..] {
        if t.kind == TurnKind::Rewind {
            return Ok(Undo::Rewind {
                turn: t.number,
                rewound_to: t.rewound_to.unwrap_or(0),
            });
        }
        if !index.paths_of_turn(t.number)?.is_empty() {
            return Ok(Undo::LastTurn { turn: t.number });
        }
    }
    Ok(Undo::Nothing)
}
