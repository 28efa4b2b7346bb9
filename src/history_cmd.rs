//! Output of the history commands: `log`, `diff`, `show`, `export`.
//!
//! Each returns the exit code, or `(exit code, message)` on failure: 2 for
//! bad usage (unknown turn, bad range or path), 1 otherwise. A broken pipe
//! (`opfs diff 3 | head`) ends the output quietly.

use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use opfs::diff as patch;
use opfs::export::{self, Progress};
use opfs::history::{self, HistoryError, Opened, Shown};
use opfs::paths;
use opfs::store::StateDir;

type CmdResult = Result<i32, (i32, String)>;

fn hist_err(e: HistoryError) -> (i32, String) {
    (if e.is_usage() { 2 } else { 1 }, e.to_string())
}

fn io_done(r: io::Result<()>) -> CmdResult {
    match r {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err((1, format!("cannot write the output: {e}"))),
    }
}

fn rfc3339(ns: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `text` (a label or an external id) for a terminal: control characters
/// are escaped (`\n`, `\r`, `\t`, `\x1b`; `\u{9b}` beyond ASCII), so a
/// label cannot split a row or send escape sequences. JSON output keeps the
/// text exact.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && c.is_ascii() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `opfs log`.
pub fn log(st: &StateDir, json: bool, out: &mut dyn Write) -> CmdResult {
    let opened = Opened::open(st).map_err(hist_err)?;
    let entries = history::log(&opened.sources()).map_err(hist_err)?;
    if json {
        let v: Vec<_> = entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "turn": e.turn,
                    "kind": e.kind,
                    "label": e.label,
                    "external_id": e.external_id,
                    "started_at": rfc3339(e.started_at),
                    "ended_at": e.ended_at.map(rfc3339),
                    "started_at_ns": e.started_at,
                    "ended_at_ns": e.ended_at,
                    "rewound_to": e.rewound_to,
                    "added": e.added,
                    "modified": e.modified,
                    "deleted": e.deleted,
                    "paths": e.paths,
                    "bytes_stored": e.bytes_stored,
                })
            })
            .collect();
        return io_done(writeln!(out, "{}", serde_json::Value::Array(v)));
    }
    io_done((|| {
        for e in &entries {
            let kind = match e.rewound_to {
                Some(r) => format!("{} to {r}", e.kind),
                None => e.kind.to_string(),
            };
            writeln!(
                out,
                "turn {} ({kind}){}",
                e.turn,
                if e.ended_at.is_none() { " (open)" } else { "" }
            )?;
            if let Some(l) = &e.label {
                writeln!(out, "    label:   {}", printable(l))?;
            }
            if let Some(id) = &e.external_id {
                writeln!(out, "    id:      {}", printable(id))?;
            }
            writeln!(
                out,
                "    time:    {} .. {}",
                rfc3339(e.started_at),
                e.ended_at.map(rfc3339).unwrap_or_else(|| "now".into())
            )?;
            writeln!(
                out,
                "    changes: {} added, {} modified, {} deleted ({} paths recorded, {} bytes stored)",
                e.added, e.modified, e.deleted, e.paths, e.bytes_stored
            )?;
        }
        Ok(())
    })())
}

/// What `opfs diff` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffMode {
    /// A git-style patch.
    Patch,
    /// `--stat`.
    Stat,
    /// `--name-status`.
    NameStatus,
}

/// `opfs diff N[..M] [PATH...]`.
pub fn diff(
    st: &StateDir,
    range: &str,
    mode: DiffMode,
    paths: &[String],
    json: bool,
    out: &mut dyn Write,
) -> CmdResult {
    let (from, to) = history::parse_range(range).ok_or_else(|| {
        (
            2,
            format!("{range:?} is not a turn or a turn range (N or N..M, turns start at 1)"),
        )
    })?;
    let filter = paths
        .iter()
        .map(|p| history::parse_path(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(hist_err)?;
    let opened = Opened::open(st).map_err(hist_err)?;
    let src = opened.sources();
    let changes = history::changes(&src, from, to, &filter).map_err(hist_err)?;
    let diffs = patch::build(&src, &changes).map_err(hist_err)?;
    if json {
        let mut buf = Vec::new();
        let r = match mode {
            DiffMode::Stat => patch::write_stat(&diffs, &mut buf),
            DiffMode::NameStatus => patch::write_name_status(&diffs, &mut buf),
            DiffMode::Patch => patch::write_patch(&diffs, &mut buf),
        };
        r.map_err(|e| (1, e.to_string()))?;
        let v = serde_json::json!({
            "from": from,
            "to": to,
            "output": String::from_utf8_lossy(&buf),
        });
        return io_done(writeln!(out, "{v}"));
    }
    io_done(match mode {
        DiffMode::Stat => patch::write_stat(&diffs, out),
        DiffMode::NameStatus => patch::write_name_status(&diffs, out),
        DiffMode::Patch => patch::write_patch(&diffs, out),
    })
}

/// `opfs show N:PATH`: the raw bytes; with `--json` one object
/// (`docs/export.md`).
pub fn show(st: &StateDir, spec: &str, json: bool, out: &mut dyn Write) -> CmdResult {
    let (n, path) = spec
        .split_once(':')
        .ok_or_else(|| (2, format!("{spec:?} is not N:PATH")))?;
    let turn = match n.parse::<u64>() {
        Ok(t) if t >= 1 => t,
        _ => return Err((2, format!("{n:?} is not a turn number (turns start at 1)"))),
    };
    let path = history::parse_path(path).map_err(hist_err)?;
    let opened = Opened::open(st).map_err(hist_err)?;
    let shown = history::show_entry(&opened.sources(), turn, &path).map_err(hist_err)?;
    if !json {
        let bytes = match &shown {
            Shown::File { bytes, .. } => bytes,
            Shown::Symlink { target } => target,
        };
        return io_done(out.write_all(bytes));
    }
    let mut v = serde_json::json!({ "turn": turn, "path": paths::display(&path) });
    match &shown {
        Shown::File { bytes, perm } => {
            v["kind"] = "file".into();
            v["perm"] = format!("{perm:04o}").into();
            v["size"] = bytes.len().into();
            v["content_base64"] = base64(bytes).into();
        }
        Shown::Symlink { target } => {
            v["kind"] = "symlink".into();
            v["target"] = paths::display(target).into();
            v["target_base64"] = base64(target).into();
        }
    }
    io_done(writeln!(out, "{v}"))
}

/// Standard base64 (RFC 4648, with `=` padding).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `opfs export [--git-dir DIR]`. Progress goes to stderr.
pub fn export(st: &StateDir, git_dir: Option<&Path>, json: bool, out: &mut dyn Write) -> CmdResult {
    let mut last_shown = std::time::Instant::now();
    let mut progress = |p: Progress| {
        if json {
            return;
        }
        match p {
            Progress::Baseline { entries } => {
                if last_shown.elapsed() >= Duration::from_millis(500) {
                    eprintln!("opfs: baseline: {entries} entries of the project read");
                    last_shown = std::time::Instant::now();
                }
            }
            Progress::Turn { .. } => {}
        }
    };
    let commit = || history::commit_through_daemon(st);
    let report =
        export::export(st, git_dir, &mut progress, &commit).map_err(|e| (1, e.to_string()))?;
    if json {
        return io_done(writeln!(
            out,
            "{}",
            serde_json::to_string(&report).unwrap_or_default()
        ));
    }
    io_done((|| {
        if report.baseline {
            writeln!(
                out,
                "baseline written ({} entries of the project read)",
                report.baseline_entries
            )?;
        }
        match (report.turns.first(), report.turns.last()) {
            (Some(a), Some(b)) if a == b => writeln!(out, "exported turn {a}")?,
            (Some(a), Some(b)) => writeln!(out, "exported turns {a} to {b}")?,
            _ => writeln!(out, "nothing new to export")?,
        }
        if !report.skipped.is_empty() {
            writeln!(
                out,
                "{} paths left out (git cannot hold them), e.g. {}",
                report.skipped.len(),
                report.skipped[0]
            )?;
        }
        writeln!(
            out,
            "{} objects in {} ms -> {}",
            report.objects,
            report.elapsed_ms,
            report.git_dir.display()
        )
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }
}
