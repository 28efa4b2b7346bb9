//! `opfs rewind`: without N, list the rewind points; with N (or `--id`),
//! restore the start of turn N. Paths left unrestored exit 3.

use std::io::Write;

use opfs::paths;
use opfs::record::Turn;
use opfs::store::Index;
use opfs::store::StateDir;

use crate::cli::args::RewindArgs;
use crate::cli::error::{failure, CommandError, ErrorKind};
use crate::cli::output::{printable, rfc3339};
use crate::cli::Ctx;

pub fn run(
    ctx: &Ctx,
    a: &RewindArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    let project = ctx.project()?;
    let st = project.state();
    let target = match (&a.turn, &a.id) {
        (Some(t), _) => Some(parse_turn(t)?),
        (None, Some(id)) => {
            let ix = open_index(st)?;
            let t = ix
                .turn_by_external_id(id)
                .map_err(failure)?
                .ok_or_else(|| CommandError::usage(format!("no turn has the id {id:?}")))?;
            Some(t.number)
        }
        (None, None) => None,
    };
    let Some(n) = target else {
        project.commit_pending()?;
        return list_rewind_points(ctx, st, a.all, out);
    };
    let value = project.rewind(n, a.dry_run, a.force)?;
    let report = ReportView::of(&value)?;
    if ctx.format.is_json() {
        writeln!(out, "{value}")?;
    } else {
        print_human(&report, out)?;
        for (path, reason) in &report.conflicts {
            writeln!(err, "opfs: not restored: {path}: {reason}")?;
        }
    }
    if report.conflicts.is_empty() {
        Ok(())
    } else {
        Err(CommandError::reported(ErrorKind::Conflict))
    }
}

fn parse_turn(text: &str) -> Result<u64, CommandError> {
    match text.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n as u64),
        Ok(n) => Err(CommandError::usage(format!(
            "turn {n} does not exist: turn numbers start at 1"
        ))),
        Err(_) => Err(CommandError::usage(format!(
            "{text:?} is not a turn number"
        ))),
    }
}

fn open_index(st: &StateDir) -> Result<Index, CommandError> {
    Index::open(&st.index_path(), false).map_err(failure)
}

fn turn_json(t: &Turn, paths_changed: &[Vec<u8>]) -> serde_json::Value {
    serde_json::json!({
        "turn": t.number,
        "kind": t.kind.as_str(),
        "label": t.label,
        "external_id": t.external_id,
        "started_at": rfc3339(t.started_at),
        "ended_at": t.ended_at.map(rfc3339),
        "rewound_to": t.rewound_to,
        "paths": paths_changed.iter().map(|p| paths::display(p)).collect::<Vec<_>>(),
    })
}

fn list_rewind_points(
    ctx: &Ctx,
    st: &StateDir,
    all: bool,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let ix = open_index(st)?;
    let turns = ix
        .turns(if all { None } else { Some(10) })
        .map_err(failure)?;
    let mut rows = Vec::new();
    for t in turns {
        let p = ix.paths_of_turn(t.number).map_err(failure)?;
        rows.push((t, p));
    }
    if ctx.format.is_json() {
        let v: Vec<_> = rows.iter().map(|(t, p)| turn_json(t, p)).collect();
        writeln!(out, "{}", serde_json::Value::Array(v))?;
        return Ok(());
    }
    writeln!(
        out,
        "{:>5}  {:<6}  {:<20}  {:>5}  LABEL",
        "TURN", "KIND", "STARTED", "PATHS"
    )?;
    for (t, p) in &rows {
        let open = if t.ended_at.is_none() { " (open)" } else { "" };
        writeln!(
            out,
            "{:>5}  {:<6}  {:<20}  {:>5}  {}{}",
            t.number,
            t.kind.as_str(),
            rfc3339(t.started_at),
            p.len(),
            printable(t.label.as_deref().unwrap_or("")),
            open
        )?;
    }
    Ok(())
}

/// The parts of a rewind report the human output needs, read from the
/// report's JSON (the protocol carries it untyped for now).
struct ReportView {
    turn: Option<u64>,
    rewound_to: u64,
    dry_run: bool,
    restored: Vec<String>,
    conflicts: Vec<(String, String)>,
    plan: Vec<String>,
    open_turn: u64,
}

impl ReportView {
    fn of(v: &serde_json::Value) -> Result<ReportView, CommandError> {
        let strs = |key: &str| -> Vec<String> {
            v[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let conflicts = v["conflicts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| {
                        (
                            c["path"].as_str().unwrap_or("").to_string(),
                            c["reason"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let plan = v["plan"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|p| {
                        let steps: Vec<&str> = p["steps"]
                            .as_array()
                            .map(|s| s.iter().filter_map(|x| x.as_str()).collect())
                            .unwrap_or_default();
                        format!(
                            "{} {} ({} -> {})",
                            steps.join("+"),
                            p["path"].as_str().unwrap_or(""),
                            p["current"].as_str().unwrap_or(""),
                            p["target"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(ReportView {
            turn: v["turn"].as_u64(),
            rewound_to: v["rewound_to"]
                .as_u64()
                .ok_or_else(|| CommandError::failure("malformed rewind report"))?,
            dry_run: v["dry_run"].as_bool().unwrap_or(false),
            restored: strs("restored"),
            conflicts,
            plan,
            open_turn: v["open_turn"].as_u64().unwrap_or(0),
        })
    }
}

fn print_human(r: &ReportView, out: &mut dyn Write) -> std::io::Result<()> {
    if r.dry_run {
        writeln!(
            out,
            "dry run: rewinding to the start of turn {} would change {} paths:",
            r.rewound_to,
            r.plan.len()
        )?;
        for line in &r.plan {
            writeln!(out, "  {line}")?;
        }
    } else {
        writeln!(
            out,
            "rewound to the start of turn {} (recorded as turn {}); {} paths restored; turn {} is open",
            r.rewound_to,
            r.turn.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            r.restored.len(),
            r.open_turn
        )?;
    }
    Ok(())
}
