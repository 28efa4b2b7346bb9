//! Edits made behind the mount that a mutation through the mount then
//! overwrote, removed or moved: kept by the capture (`outside_edits`),
//! listed by `log`, `diff` and `status`, shown by `show N:PATH --outside`.

use serde_json::{json, Value};

use crate::paths;
use crate::record::PreImage;
use crate::store::index::OutsideEdit;

use super::{HistoryError, Shown, Sources};

/// The edits kept from turn `from` on (every turn with `None`), by turn,
/// path and number.
///
/// Errors: the index cannot be read.
pub fn outside_edits(
    src: &Sources<'_>,
    from: Option<u64>,
) -> Result<Vec<OutsideEdit>, HistoryError> {
    Ok(src.index.outside_edits(from)?)
}

/// `opfs show N:PATH --outside[=K]`: the edit of `path` made behind the
/// mount that was kept in turn `turn` as number `seq` (the last one kept
/// in that turn with `None`).
///
/// Errors: [`HistoryError::NoOutsideEdit`] when there is none;
/// [`HistoryError::NoContent`] for a directory or special file (kept
/// without content); the blob cannot be read.
pub fn show_outside(
    src: &Sources<'_>,
    turn: u64,
    path: &[u8],
    seq: Option<u64>,
) -> Result<(OutsideEdit, Shown), HistoryError> {
    let Some(e) = src.index.outside_edit(turn, path, seq)? else {
        return Err(HistoryError::NoOutsideEdit {
            path: path.to_vec(),
            turn,
            seq,
        });
    };
    let shown = match &e.pre {
        PreImage::File { blob, perm, .. } => Shown::File {
            bytes: src.blob(blob).map_err(|source| {
                HistoryError::Read(crate::view::ViewError::Blob {
                    path: path.to_vec(),
                    source,
                })
            })?,
            perm: *perm,
        },
        PreImage::Symlink { target } => Shown::Symlink {
            target: target.clone(),
        },
        other => {
            return Err(HistoryError::NoContent {
                path: path.to_vec(),
                turn,
                kind: other.kind_name(),
            })
        }
    };
    Ok((e, shown))
}

/// What the agent's mutation did to the edit, in words.
fn what(by: &str) -> &'static str {
    match by {
        "remove" => "removed",
        "rename" => "moved away",
        "replace" => "replaced by a rename",
        "metadata" => "changed (mode or owner)",
        _ => "overwritten",
    }
}

/// The command that prints a kept edit.
fn command(e: &OutsideEdit) -> String {
    format!(
        "opfs show {}:{} --outside={}",
        e.turn,
        paths::display(&e.path),
        e.seq
    )
}

/// One line for people: `PATH: an edit made behind the mount was
/// overwritten through the mount in turn N; kept: opfs show N:PATH
/// --outside=K`.
pub fn outside_line(e: &OutsideEdit) -> String {
    format!(
        "{}: an edit made behind the mount was {} through the mount in turn {}; kept: {}",
        paths::display(&e.path),
        what(&e.by),
        e.turn,
        command(e)
    )
}

/// The JSON object of a kept edit: `turn`, `path`, `seq`, `kind`, `size`
/// (files), `by` (the mutation that met it: `write`, `metadata`,
/// `remove`, `rename`, `replace`), `kept_at` (RFC 3339) and `show` (the
/// command that prints it).
pub fn outside_json(e: &OutsideEdit) -> Value {
    let size = match &e.pre {
        PreImage::File { size, .. } => Some(*size),
        _ => None,
    };
    json!({
        "turn": e.turn,
        "path": paths::display(&e.path),
        "seq": e.seq,
        "kind": e.pre.kind_name(),
        "size": size,
        "by": e.by,
        "kept_at": super::rfc3339(e.kept_at),
        "show": command(e),
    })
}
