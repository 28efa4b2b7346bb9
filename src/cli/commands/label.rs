//! `opfs label TURN TEXT`: sets (or, with an empty TEXT, removes) the
//! label of a turn. Written straight to the index, whether or not a
//! daemon serves the project: one SQLite statement, which the daemon's
//! own writes wait for (and it for them); the daemon keeps no label in
//! memory.

use std::io::Write;

use opfs::store::Index;

use crate::cli::args::LabelArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::output::printable;
use crate::cli::{refs, Ctx};

pub fn run(ctx: &Ctx, a: &LabelArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let st = ctx.project_state()?;
    let turn = refs::turn(&st, &a.turn)?;
    let label = (!a.text.is_empty()).then_some(a.text.as_str());
    let mut ix = Index::open(&st.index_path(), false).map_err(failure)?;
    if !ix.set_label(turn, label).map_err(failure)? {
        let range = match (
            ix.first_turn().map_err(failure)?,
            ix.last_turn().map_err(failure)?,
        ) {
            (Some(f), Some(l)) => format!("turns run from {f} to {}", l.number),
            _ => "no turn has been recorded yet".to_string(),
        };
        return Err(CommandError::usage(format!(
            "turn {turn} does not exist ({range}); nothing was labelled"
        )));
    }
    if ctx.format.is_json() {
        writeln!(
            out,
            "{}",
            serde_json::json!({ "turn": turn, "label": label })
        )?;
    } else {
        match label {
            Some(l) => writeln!(out, "turn {turn}: {}", printable(l))?,
            None => writeln!(out, "turn {turn}: label removed")?,
        }
    }
    Ok(())
}
