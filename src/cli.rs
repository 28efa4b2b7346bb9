//! Argument parsing and output for the `opfs` binary.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::{Parser, Subcommand};
use opfs::control::{self, FailureKind, Request, Response, StateLock, Status};
use opfs::daemon::{self, DaemonOptions};
use opfs::journal::Journal;
use opfs::rewind::{self, RewindError};
use opfs::state::{self, StateDir};
use opfs::store::{Index, Turn};
use opfs::{paths, store};

use crate::history_cmd;

/// Reversible workspaces for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "opfs", version, about)]
struct Cli {
    /// Run as if started in PATH (a project, a mountpoint, or inside one).
    #[arg(short = 'C', global = true, value_name = "PATH")]
    dir: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    json: bool,
    /// More log output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Serve PROJECT at MOUNTPOINT, recording every change.
    Mount {
        /// The project directory.
        project: PathBuf,
        /// An empty directory outside the project.
        mountpoint: PathBuf,
        /// Stay in the foreground.
        #[arg(short, long)]
        foreground: bool,
        /// fsync every record and blob (survives power loss; slower).
        #[arg(long)]
        sync: bool,
        /// FUSE worker threads (default: half the CPUs, at least 1).
        #[arg(long, default_value_t = opfs::daemon::default_threads())]
        threads: usize,
        /// Do not export each closed turn to the shadow git repository.
        #[arg(long)]
        no_export: bool,
        /// Files of at least BYTES written in place save only the bytes
        /// each write overwrites (docs/ranges.md); `off` saves whole files.
        /// Default: $OPFS_RANGE_MIN, else 1048576.
        #[arg(long, value_name = "BYTES|off", value_parser = parse_range_min)]
        range_min: Option<u64>,
    },
    /// Stop serving MOUNTPOINT, flushing everything.
    Umount {
        /// The mountpoint.
        mountpoint: PathBuf,
    },
    /// Show mount state, open turn and store size.
    Status,
    /// Close the open turn and open the next; prints its number.
    Turn {
        /// A label for the new turn (e.g. the user's message).
        #[arg(long)]
        label: Option<String>,
        /// An external id for the new turn (e.g. the agent's message id).
        #[arg(long)]
        id: Option<String>,
    },
    /// Without N: list rewind points. With N: restore the start of turn N.
    Rewind {
        /// The turn whose start to restore.
        turn: Option<String>,
        /// Select the turn by its external id instead.
        #[arg(long, conflicts_with = "turn")]
        id: Option<String>,
        /// List every rewind point, not just the newest 10.
        #[arg(long)]
        all: bool,
        /// Print the plan and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Restore paths even where they conflict.
        #[arg(long)]
        force: bool,
    },
    /// Run CMD in a sandbox with the project (through the mount) at its own path.
    Run {
        /// workspace-write (default), read-only, or danger-full-access (no sandbox).
        #[arg(long, value_name = "MODE", default_value = "workspace-write",
              value_parser = ["workspace-write", "read-only", "danger-full-access"])]
        sandbox: String,
        /// Give the command the network.
        #[arg(long)]
        net: bool,
        /// Make DIR writable inside too (repeatable).
        #[arg(long, value_name = "DIR")]
        writable: Vec<PathBuf>,
        /// Open a turn with this label before the command starts.
        #[arg(long, value_name = "LABEL")]
        turn: Option<String>,
        /// The command and its arguments.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD"
        )]
        command: Vec<std::ffi::OsString>,
    },
    /// List the turns, newest first, with what each changed.
    Log,
    /// Show what turn N (or turns N..M) changed, as a patch git can apply.
    Diff {
        /// A turn N, or a range N..M (the start of N to the end of M).
        range: String,
        /// Show a summary of changed lines per path instead of the patch.
        #[arg(long)]
        stat: bool,
        /// Show the status letter and path of each change instead.
        #[arg(long, conflicts_with = "stat")]
        name_status: bool,
        /// Limit to these paths (relative to the project root).
        paths: Vec<String>,
    },
    /// Print PATH as it was when turn N began (`N:PATH`).
    Show {
        /// `N:PATH`.
        spec: String,
    },
    /// Check the store against the index; exit 1 if anything is wrong.
    Verify,
    /// Apply retention: drop the oldest turns and the blobs only they use.
    Gc {
        /// Keep the newest N turns.
        #[arg(long, value_name = "N", default_value_t = opfs::gc::DEFAULT_KEEP,
              value_parser = clap::value_parser!(u64).range(1..))]
        keep: u64,
        /// Also drop old turns until the kept blobs take at most BYTES.
        #[arg(long, value_name = "BYTES")]
        max_bytes: Option<u64>,
        /// Report what would be removed and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Write the history as a shadow git repository (one commit per turn).
    Export {
        /// The bare repository to write (default: export.git in the state dir).
        #[arg(long, value_name = "DIR")]
        git_dir: Option<PathBuf>,
    },
}

/// An error with its exit code: 1 failure, 2 bad usage.
struct Fail {
    code: i32,
    message: String,
}

fn failure(message: impl Into<String>) -> Fail {
    Fail {
        code: 1,
        message: message.into(),
    }
}

fn usage(message: impl Into<String>) -> Fail {
    Fail {
        code: 2,
        message: message.into(),
    }
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => {
                    if json_requested(std::env::args_os()) {
                        let first = e.to_string();
                        let first = first.lines().next().unwrap_or("bad usage");
                        let first = first.strip_prefix("error: ").unwrap_or(first);
                        print_json_error(&mut std::io::stdout().lock(), &usage(first));
                    }
                    2
                }
            };
        }
    };
    let daemon = matches!(
        cli.command,
        Cmd::Mount {
            foreground: true,
            ..
        }
    );
    let level = match (cli.verbose, daemon) {
        (0, false) => log::LevelFilter::Warn,
        (0, true) | (1, _) => log::LevelFilter::Info,
        (2, _) => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    env_logger::Builder::new()
        .filter_level(level)
        .format_timestamp_millis()
        .init();
    let mut out = std::io::stdout().lock();
    match run(&cli, &mut out) {
        Ok(code) => code,
        Err(f) => {
            if cli.json {
                print_json_error(&mut out, &f);
            }
            let _ = out.flush();
            eprintln!("opfs: {}", f.message);
            f.code
        }
    }
}

/// Whether `--json` appears among the arguments before a `--` (after it,
/// the arguments belong to `opfs run`'s command). Used only when clap
/// refused the arguments, so the parsed flag is not available.
fn json_requested(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// With `--json`, a failed command still prints one JSON value on stdout:
/// `{"error": {"code": 1|2, "kind": "failure"|"usage", "message": "..."}}`
/// (the same message also goes to stderr).
fn print_json_error(out: &mut dyn Write, f: &Fail) {
    let kind = if f.code == 2 { "usage" } else { "failure" };
    let v = serde_json::json!({
        "error": { "code": f.code, "kind": kind, "message": f.message }
    });
    let _ = writeln!(out, "{v}");
}

fn run(cli: &Cli, out: &mut dyn Write) -> Result<i32, Fail> {
    let home = state::opfs_home();
    match &cli.command {
        Cmd::Mount {
            project,
            mountpoint,
            foreground,
            sync,
            threads,
            no_export,
            range_min,
        } => mount(
            &home,
            project,
            mountpoint,
            *foreground,
            DaemonOptions {
                sync: *sync,
                threads: *threads,
                export: !*no_export,
                range_min: match range_min {
                    Some(n) => *n,
                    None => range_min_from_env()?,
                },
            },
            cli,
            out,
        ),
        Cmd::Umount { mountpoint } => {
            let mp = state::absolute(mountpoint);
            let st = state::resolve(&home, &mp).ok_or_else(|| {
                failure(format!(
                    "{} is not an opfs mountpoint (no opfs daemon serves it{})",
                    mp.display(),
                    if mp.exists() {
                        ""
                    } else {
                        "; it does not exist"
                    }
                ))
            })?;
            daemon::stop(&st, &mp, Duration::from_secs(60)).map_err(failure)?;
            if cli.json {
                let _ = writeln!(out, "{}", serde_json::json!({ "unmounted": mp }));
            }
            Ok(0)
        }
        Cmd::Status => {
            let st = project_state(&home, cli)?;
            let status = match ask(&st, &Request::Status)? {
                Some(Response::Status(s)) => s,
                Some(other) => return Err(unexpected(other)),
                None => {
                    let j = open_direct(&st)?;
                    control::status_of(&j.0, None, None)
                }
            };
            print_status(cli, &status, out);
            Ok(0)
        }
        Cmd::Turn { label, id } => {
            let st = project_state(&home, cli)?;
            let req = Request::Turn {
                label: label.clone(),
                id: id.clone(),
            };
            let turn = match ask(&st, &req)? {
                Some(Response::Turn { turn }) => turn,
                Some(Response::Error { kind, message }) => return Err(from_kind(kind, message)),
                Some(other) => return Err(unexpected(other)),
                None => {
                    let (j, _lock) = open_direct(&st)?;
                    j.next_turn(
                        store::TurnKind::Agent,
                        label.as_deref(),
                        id.as_deref(),
                        None,
                    )
                    .map_err(|e| failure(e.to_string()))?
                }
            };
            if cli.json {
                let _ = writeln!(out, "{}", serde_json::json!({ "turn": turn }));
            } else {
                let _ = writeln!(out, "{turn}");
            }
            Ok(0)
        }
        Cmd::Rewind {
            turn,
            id,
            all,
            dry_run,
            force,
        } => {
            let st = project_state(&home, cli)?;
            let target = match (turn, id) {
                (Some(t), _) => Some(parse_turn(t)?),
                (None, Some(id)) => {
                    let ix = open_index(&st)?;
                    let t = ix
                        .turn_by_external_id(id)
                        .map_err(|e| failure(e.to_string()))?
                        .ok_or_else(|| usage(format!("no turn has the id {id:?}")))?;
                    Some(t.number)
                }
                (None, None) => None,
            };
            match target {
                None => list_rewind_points(&st, *all, cli, out),
                Some(n) => do_rewind(&st, n, *dry_run, *force, cli, out),
            }
        }
        Cmd::Run {
            sandbox,
            net,
            writable,
            turn,
            command,
        } => run_sandboxed(&home, sandbox, *net, writable, turn, command, cli),
        Cmd::Log => {
            let st = project_state(&home, cli)?;
            commit_pending(&st)?;
            history_cmd::log(&st, cli.json, out).map_err(|(code, message)| Fail { code, message })
        }
        Cmd::Diff {
            range,
            stat,
            name_status,
            paths,
        } => {
            let st = project_state(&home, cli)?;
            commit_pending(&st)?;
            let mode = if *stat {
                history_cmd::DiffMode::Stat
            } else if *name_status {
                history_cmd::DiffMode::NameStatus
            } else {
                history_cmd::DiffMode::Patch
            };
            history_cmd::diff(&st, range, mode, paths, cli.json, out)
                .map_err(|(code, message)| Fail { code, message })
        }
        Cmd::Show { spec } => {
            let st = project_state(&home, cli)?;
            commit_pending(&st)?;
            history_cmd::show(&st, spec, cli.json, out)
                .map_err(|(code, message)| Fail { code, message })
        }
        Cmd::Verify => {
            let st = project_state(&home, cli)?;
            // A damaged capture log is one of the problems verify reports.
            let _ = commit_pending(&st);
            verify(&st, cli, out)
        }
        Cmd::Gc {
            keep,
            max_bytes,
            dry_run,
        } => {
            let st = project_state(&home, cli)?;
            let _lock = StateLock::try_acquire(&st)
                .map_err(|e| failure(format!("cannot lock {}: {e}", st.lock_path().display())))?
                .ok_or_else(|| {
                    failure(format!(
                        "{} is mounted: unmount it before `opfs gc` (a running daemon may be storing a blob its index does not name yet)",
                        st.project.display()
                    ))
                })?;
            let retention = opfs::gc::Retention {
                keep: *keep,
                max_bytes: *max_bytes,
            };
            let r = opfs::gc::gc(&st, retention, *dry_run).map_err(|e| failure(e.to_string()))?;
            if cli.json {
                let v = serde_json::to_value(&r).map_err(|e| failure(e.to_string()))?;
                let _ = writeln!(out, "{v}");
            } else {
                let dropped = match r.dropped_turns {
                    Some((a, b)) => format!("turns {a} to {b}"),
                    None => "no turns".to_string(),
                };
                let _ = writeln!(
                    out,
                    "{}{dropped} dropped ({} records), {} blobs removed ({} bytes)",
                    if r.dry_run { "dry run: " } else { "" },
                    r.records_deleted,
                    r.blobs_removed,
                    r.bytes_freed
                );
                if let Some(n) = &r.note {
                    let _ = writeln!(out, "{n}");
                }
            }
            Ok(0)
        }
        Cmd::Export { git_dir } => {
            let st = project_state(&home, cli)?;
            commit_pending(&st)?;
            history_cmd::export(&st, git_dir.as_deref(), cli.json, out)
                .map_err(|(code, message)| Fail { code, message })
        }
    }
}

fn verify(st: &StateDir, cli: &Cli, out: &mut dyn Write) -> Result<i32, Fail> {
    let report = opfs::verify::verify(st).map_err(|e| failure(e.to_string()))?;
    if cli.json {
        let mut v = serde_json::to_value(&report).map_err(|e| failure(e.to_string()))?;
        v["ok"] = serde_json::Value::Bool(report.ok());
        let _ = writeln!(out, "{v}");
    } else {
        for p in &report.problems {
            let _ = writeln!(out, "{}: {}", p.area, p.message);
        }
        let _ = writeln!(
            out,
            "{}: {} turns, {} records, {} blobs checked ({} unreferenced); {} problem(s)",
            if report.ok() { "ok" } else { "FAILED" },
            report.turns,
            report.records,
            report.blobs,
            report.unreferenced_blobs,
            report.problems.len()
        );
    }
    Ok(if report.ok() { 0 } else { 1 })
}

fn run_sandboxed(
    home: &Path,
    mode: &str,
    net: bool,
    writable: &[PathBuf],
    turn: &Option<String>,
    command: &[std::ffi::OsString],
    cli: &Cli,
) -> Result<i32, Fail> {
    use opfs::sandbox::{self, RunError, RunOptions};
    let range_min = range_min_from_env()?;
    let config = match opfs::config::config_path() {
        Some(p) => opfs::config::load(&p).map_err(|e| failure(e.to_string()))?,
        None => Default::default(),
    };
    let dir = cli
        .dir
        .clone()
        .unwrap_or_else(|| std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")));
    let opts = RunOptions {
        home: home.to_path_buf(),
        user_home: std::env::var_os("HOME").map(PathBuf::from),
        dir,
        mode: mode.parse().map_err(usage)?,
        net,
        writable: writable.iter().map(|w| state::absolute(w)).collect(),
        turn: turn.clone(),
        command: command.to_vec(),
        config: config.sandbox,
        bwrap: std::env::var_os("OPFS_BWRAP").map(PathBuf::from),
    };
    let mut start = |project: &Path, mp: &Path| {
        mount(
            home,
            project,
            mp,
            false,
            DaemonOptions {
                range_min,
                ..DaemonOptions::default()
            },
            cli,
            &mut std::io::sink(),
        )
        .map(|_| ())
        .map_err(|f| f.message)
    };
    match sandbox::run(&opts, &mut start) {
        Ok(outcome) => {
            for w in &outcome.warnings {
                eprintln!("opfs: {w}");
            }
            Ok(outcome.code)
        }
        Err(e @ RunError::Usage(_)) => Err(usage(e.to_string())),
        Err(e) => Err(failure(e.to_string())),
    }
}

fn parse_turn(text: &str) -> Result<u64, Fail> {
    match text.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n as u64),
        Ok(n) => Err(usage(format!(
            "turn {n} does not exist: turn numbers start at 1"
        ))),
        Err(_) => Err(usage(format!("{text:?} is not a turn number"))),
    }
}

fn from_kind(kind: FailureKind, message: String) -> Fail {
    match kind {
        FailureKind::Usage => usage(message),
        FailureKind::Failure => failure(message),
    }
}

fn unexpected(r: Response) -> Fail {
    match r {
        Response::Error { kind, message } => from_kind(kind, message),
        other => failure(format!("unexpected answer from the daemon: {other:?}")),
    }
}

fn project_state(home: &Path, cli: &Cli) -> Result<StateDir, Fail> {
    let dir = cli
        .dir
        .clone()
        .unwrap_or_else(|| std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")));
    if !dir.exists() && !is_enotconn(&dir) {
        return Err(failure(format!("-C {}: no such directory", dir.display())));
    }
    state::resolve(home, &dir).ok_or_else(|| {
        failure(format!(
            "{} is not an opfs project or mountpoint (no state for it in {})",
            state::absolute(&dir).display(),
            home.display()
        ))
    })
}

fn is_enotconn(p: &Path) -> bool {
    matches!(std::fs::metadata(p), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN))
}

fn is_cut_off(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset, UnexpectedEof};
    matches!(e.kind(), UnexpectedEof | ConnectionReset | BrokenPipe)
}

/// Asks the running daemon; `None` when no daemon runs for this project.
fn ask(st: &StateDir, req: &Request) -> Result<Option<Response>, Fail> {
    match control::request(&st.socket_path(), req) {
        Ok(r) => Ok(Some(r)),
        // Connected and sent, but no answer: the daemon died while handling
        // the request. Running it again directly could repeat half of it;
        // the next `opfs mount` finishes an interrupted rewind instead.
        // A status needs no answer from a dying daemon: once it is gone
        // the state dir answers.
        Err(e)
            if is_cut_off(&e)
                && matches!(req, Request::Status)
                && control::wait_for(Duration::from_secs(5), || !StateLock::is_held(st)) =>
        {
            Ok(None)
        }
        Err(e) if is_cut_off(&e) => Err(failure(format!(
            "the daemon for {} died while handling the request ({e}); \
             run `opfs mount` again: it cleans up the dead mount and finishes \
             an interrupted rewind (see {})",
            st.project.display(),
            st.log_path().display()
        ))),
        Err(e) => {
            if StateLock::is_held(st) {
                Err(failure(format!(
                    "the daemon for {} does not answer on {}: {e}",
                    st.project.display(),
                    st.socket_path().display()
                )))
            } else {
                Ok(None)
            }
        }
    }
}

/// Makes every capture so far visible to the index readers (history,
/// export, verify): a running daemon commits the records pending in its
/// capture log; with none running, records a crash left there are moved
/// into the index (under the state lock, as a mount would).
fn commit_pending(st: &StateDir) -> Result<(), Fail> {
    if !st.exists() {
        return Ok(());
    }
    match ask(st, &Request::Commit)? {
        Some(Response::Committed) => return Ok(()),
        Some(Response::Error { message, .. }) => return Err(failure(message)),
        Some(other) => {
            return Err(failure(format!(
                "unexpected answer from the daemon: {other:?}"
            )))
        }
        None => {}
    }
    let log = st.capture_log_path();
    if std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) == 0 {
        return Ok(());
    }
    let Some(_lock) = StateLock::try_acquire(st)
        .map_err(|e| failure(format!("cannot lock {}: {e}", st.lock_path().display())))?
    else {
        return Ok(()); // a daemon started meanwhile; it replays the log
    };
    let mut index = open_index(st)?;
    opfs::store::replay_capture_log(&mut index, &log, false)
        .map(drop)
        .map_err(|e| failure(e.to_string()))
}

fn open_direct(st: &StateDir) -> Result<(Journal, StateLock), Fail> {
    let lock = StateLock::try_acquire(st)
        .map_err(|e| failure(format!("cannot lock {}: {e}", st.lock_path().display())))?
        .ok_or_else(|| {
            failure(format!(
                "{} is busy: a daemon holds its lock",
                st.dir.display()
            ))
        })?;
    let j = Journal::open(st, false).map_err(|e| failure(e.to_string()))?;
    Ok((j, lock))
}

fn open_index(st: &StateDir) -> Result<Index, Fail> {
    Index::open(&st.index_path(), false).map_err(|e| failure(e.to_string()))
}

fn rfc3339(ns: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
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
    st: &StateDir,
    all: bool,
    cli: &Cli,
    out: &mut dyn Write,
) -> Result<i32, Fail> {
    commit_pending(st)?;
    let ix = open_index(st)?;
    let turns = ix
        .turns(if all { None } else { Some(10) })
        .map_err(|e| failure(e.to_string()))?;
    let mut rows = Vec::new();
    for t in turns {
        let p = ix
            .paths_of_turn(t.number)
            .map_err(|e| failure(e.to_string()))?;
        rows.push((t, p));
    }
    if cli.json {
        let v: Vec<_> = rows.iter().map(|(t, p)| turn_json(t, p)).collect();
        let _ = writeln!(out, "{}", serde_json::Value::Array(v));
    } else {
        let _ = writeln!(
            out,
            "{:>5}  {:<6}  {:<20}  {:>5}  LABEL",
            "TURN", "KIND", "STARTED", "PATHS"
        );
        for (t, p) in &rows {
            let open = if t.ended_at.is_none() { " (open)" } else { "" };
            let _ = writeln!(
                out,
                "{:>5}  {:<6}  {:<20}  {:>5}  {}{}",
                t.number,
                t.kind.as_str(),
                rfc3339(t.started_at),
                p.len(),
                history_cmd::printable(t.label.as_deref().unwrap_or("")),
                open
            );
        }
    }
    Ok(0)
}

fn do_rewind(
    st: &StateDir,
    n: u64,
    dry_run: bool,
    force: bool,
    cli: &Cli,
    out: &mut dyn Write,
) -> Result<i32, Fail> {
    let req = Request::Rewind {
        to: n,
        dry_run,
        force,
    };
    let value = match ask(st, &req)? {
        Some(Response::Rewind(v)) => v,
        Some(other) => return Err(unexpected(other)),
        None => {
            let (j, _lock) = open_direct(st)?;
            let report = rewind::rewind(&j, n, rewind::RewindOptions { dry_run, force }).map_err(
                |e| match e {
                    RewindError::Turn(_) => usage(e.to_string()),
                    other => failure(other.to_string()),
                },
            )?;
            serde_json::to_value(&report).map_err(|e| failure(e.to_string()))?
        }
    };
    let report = serde_json_to_report(&value)?;
    if cli.json {
        let _ = writeln!(out, "{value}");
    } else {
        print_rewind(&report, out);
    }
    Ok(if report.conflicts.is_empty() { 0 } else { 3 })
}

/// The parts of a rewind report the human output needs.
struct ReportView {
    turn: Option<u64>,
    rewound_to: u64,
    dry_run: bool,
    restored: Vec<String>,
    conflicts: Vec<(String, String)>,
    plan: Vec<String>,
    open_turn: u64,
}

fn serde_json_to_report(v: &serde_json::Value) -> Result<ReportView, Fail> {
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
            .ok_or_else(|| failure("malformed rewind report"))?,
        dry_run: v["dry_run"].as_bool().unwrap_or(false),
        restored: strs("restored"),
        conflicts,
        plan,
        open_turn: v["open_turn"].as_u64().unwrap_or(0),
    })
}

fn print_rewind(r: &ReportView, out: &mut dyn Write) {
    if r.dry_run {
        let _ = writeln!(
            out,
            "dry run: rewinding to the start of turn {} would change {} paths:",
            r.rewound_to,
            r.plan.len()
        );
        for line in &r.plan {
            let _ = writeln!(out, "  {line}");
        }
    } else {
        let _ = writeln!(
            out,
            "rewound to the start of turn {} (recorded as turn {}); {} paths restored; turn {} is open",
            r.rewound_to,
            r.turn.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            r.restored.len(),
            r.open_turn
        );
    }
    for (path, reason) in &r.conflicts {
        eprintln!("opfs: not restored: {path}: {reason}");
    }
}

fn print_status(cli: &Cli, s: &Status, out: &mut dyn Write) {
    if cli.json {
        let _ = writeln!(out, "{}", serde_json::to_string(s).unwrap_or_default());
        return;
    }
    let _ = writeln!(out, "project:    {}", s.project.display());
    match &s.mountpoint {
        Some(m) => {
            let _ = writeln!(
                out,
                "mounted:    {} (daemon pid {})",
                m.display(),
                s.pid.unwrap_or(0)
            );
        }
        None => {
            let _ = writeln!(out, "mounted:    no");
        }
    }
    let _ = writeln!(out, "open turn:  {}", s.turn);
    let _ = writeln!(
        out,
        "store:      {} bytes in blobs, {} pre-image records ({})",
        s.store_bytes,
        s.records,
        s.state_dir.display()
    );
    if s.project_deleted {
        let _ = writeln!(
            out,
            "warning:    the project directory was deleted while mounted; changes through the mount fail and rewinds are refused (unmount it)"
        );
    }
    if let Some(r) = &s.recovered {
        let _ = writeln!(out, "recovered:  {r}");
    }
}

/// `--range-min`: a number of bytes, or `off`.
fn parse_range_min(s: &str) -> Result<u64, String> {
    daemon::parse_range_min(s).map_err(|e| e.to_string())
}

/// The range minimum when `--range-min` is not given: `$OPFS_RANGE_MIN`,
/// else the default. A bad value is bad usage, as it is for the option.
fn range_min_from_env() -> Result<u64, Fail> {
    daemon::default_range_min()
        .map_err(|e| usage(format!("environment variable OPFS_RANGE_MIN: {e}")))
}

fn mount(
    home: &Path,
    project: &Path,
    mountpoint: &Path,
    foreground: bool,
    opts: DaemonOptions,
    cli: &Cli,
    out: &mut dyn Write,
) -> Result<i32, Fail> {
    let plan = daemon::check(home, project, mountpoint).map_err(|e| failure(e.to_string()))?;
    let (sync, threads) = (opts.sync, opts.threads);
    if foreground {
        // With --json, the same object as a background mount, once ready.
        let ready = || {
            if cli.json {
                let _ = writeln!(out, "{}", mounted_json(&plan, std::process::id()));
                let _ = out.flush();
            }
        };
        daemon::run(home, &plan, &opts, ready).map_err(|e| failure(e.to_string()))?;
        return Ok(0);
    }
    plan.state
        .create()
        .map_err(|e| failure(format!("cannot create {}: {e}", plan.state.dir.display())))?;
    let log_path = plan.state.log_path();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| failure(format!("cannot open {}: {e}", log_path.display())))?;
    let log_len = log.metadata().map(|m| m.len()).unwrap_or(0);
    let exe =
        std::env::current_exe().map_err(|e| failure(format!("cannot find opfs itself: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg("-f")
        .arg(&plan.state.project)
        .arg(&plan.mountpoint)
        .arg("--threads")
        .arg(threads.to_string())
        .arg("--range-min")
        .arg(match opts.range_min {
            u64::MAX => "off".to_string(),
            n => n.to_string(),
        })
        .env("OPFS_HOME", state::absolute(home))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    if sync {
        cmd.arg("--sync");
    }
    if !opts.export {
        cmd.arg("--no-export");
    }
    for _ in 0..cli.verbose {
        cmd.arg("-v");
    }
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| failure(format!("cannot start the daemon: {e}")))?;
    let mut exited = None;
    let ready = control::wait_for(Duration::from_secs(30), || {
        if let Ok(Some(status)) = child.try_wait() {
            exited = Some(status);
            return true;
        }
        control::is_mount_point(&plan.mountpoint)
            && matches!(
                control::request(&plan.state.socket_path(), &Request::Status),
                Ok(Response::Status(_))
            )
    });
    if let Some(status) = exited {
        let text = std::fs::read(&log_path).unwrap_or_default();
        let tail = String::from_utf8_lossy(&text[(log_len as usize).min(text.len())..]).to_string();
        return Err(failure(format!(
            "the daemon exited ({status}) before the mount was ready:\n{}",
            tail.trim_end()
        )));
    }
    if !ready {
        let _ = child.kill();
        return Err(failure(format!(
            "the mount at {} did not become ready within 30 s (log: {})",
            plan.mountpoint.display(),
            log_path.display()
        )));
    }
    if cli.json {
        let _ = writeln!(out, "{}", mounted_json(&plan, child.id()));
    }
    Ok(0)
}

/// What `opfs mount --json` prints once the mount is ready.
fn mounted_json(plan: &daemon::MountPlan, pid: u32) -> serde_json::Value {
    serde_json::json!({
        "project": plan.state.project,
        "mountpoint": plan.mountpoint,
        "pid": pid,
        "state_dir": plan.state.dir,
    })
}
