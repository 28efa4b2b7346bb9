//! `opfs turn [--label L] [--id ID]`.

use std::io::Write;

use crate::cli::args::TurnArgs;
use crate::cli::error::CommandError;
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &TurnArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let turn = ctx.project()?.turn(a.label.as_deref(), a.id.as_deref())?;
    if ctx.format.is_json() {
        writeln!(out, "{}", serde_json::json!({ "turn": turn }))?;
    } else {
        writeln!(out, "{turn}")?;
    }
    Ok(())
}
