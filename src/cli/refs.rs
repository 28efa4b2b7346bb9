//! Turn refs on the command line (`3`, `@`, `@-`, `@-2`, and ranges
//! `@-2..@`): resolved against the project's index
//! ([`opfs::history::resolve_turn_ref`]). A plain number is passed through
//! untouched, so each command keeps its own message for an unknown turn.

use opfs::history;
use opfs::store::{Index, StateDir};

use crate::cli::error::{failure, CommandError};

/// Whether `text` is a relative ref (`@...`), which needs the index.
fn relative(text: &str) -> bool {
    text.contains('@')
}

fn index(st: &StateDir) -> Result<Index, CommandError> {
    Index::open_read_only(&st.index_path()).map_err(failure)
}

/// The turn `text` names, or `Ok(None)` when `text` is not a relative ref
/// (the caller parses numbers itself).
///
/// Errors: a malformed or out-of-range ref (usage, exit 2); the index
/// cannot be read (exit 1).
pub fn relative_turn(st: &StateDir, text: &str) -> Result<Option<u64>, CommandError> {
    if !relative(text) {
        return Ok(None);
    }
    Ok(Some(history::resolve_turn_ref(&index(st)?, text)?))
}

/// The turn `text` names: a number from 1 or a relative ref.
///
/// Errors: as [`relative_turn`]; a number below 1 or anything else is
/// usage.
pub fn turn(st: &StateDir, text: &str) -> Result<u64, CommandError> {
    match relative_turn(st, text)? {
        Some(n) => Ok(n),
        None => match text.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(history::HistoryError::BadTurnRef(text.to_string()).into()),
        },
    }
}

/// A range `A..B` or one turn, each end a number or a relative ref; with
/// no ref at all, [`history::parse_range_arg`] (the one message for a bad
/// range).
///
/// Errors: as [`relative_turn`], or a bad range (usage).
pub fn range(st: &StateDir, text: &str) -> Result<(u64, u64), CommandError> {
    if !relative(text) {
        return Ok(history::parse_range_arg(text)?);
    }
    Ok(history::resolve_range_ref(&index(st)?, text)?)
}
