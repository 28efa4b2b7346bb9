//! `opfs-hook [-C PATH] [--agent AGENT]`: the prompt hook `opfs integrate`
//! installs, a second, small binary beside `opfs` (`docs/design.md`, "A
//! small hook binary"). It does what `opfs hook` does, with the same
//! output, exit codes and refusals (`docs/integrations.md`), but starts in
//! a fraction of the time: it links only what a prompt's turn needs (the
//! project's registry, the control socket's client, the hook's replies),
//! not the command line, git, the sandbox or the MCP server, whose
//! relocations the dynamic loader applies before `opfs`'s `main` runs.
//!
//! The fast path is the common case: not in `opfs run`'s sandbox, the
//! event read and understood, the session's directory and `-C` inside a
//! registered mountpoint, and a daemon that opens the turn. Everything
//! else runs `opfs hook` (the `opfs` binary in the same directory) with
//! the same arguments and the event on its stdin, before any turn was
//! asked for, so that `opfs hook` says and does exactly what it always
//! does: a backing directory blocked, no project, no daemon, a stale
//! mount, bad input. A failure once the turn was asked for (the daemon
//! refused it or did not answer in time) is reported here, as `opfs hook`
//! reports it: asking `opfs hook` again could open a second turn. When
//! `opfs` cannot be run, the hook says so and no turn is opened.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use opfs::control::client::{ClientError, Project, HOOK_LIMIT};
use opfs::integrate::hook::{self, HookReply, MAX_EVENT_BYTES};
use opfs::integrate::Agent;
use opfs::state;

/// The arguments the fast path understands (as `opfs hook` takes them).
#[derive(Default)]
struct Args {
    dir: Option<PathBuf>,
    agent: Option<String>,
}

/// `-C PATH` and `--agent AGENT` (`--agent=AGENT`), each at most once,
/// the agent one `opfs hook` accepts; `None` for anything else (`opfs
/// hook` then parses them and says what is wrong).
fn parse_args(raw: &[OsString]) -> Option<Args> {
    let mut a = Args::default();
    let mut it = raw.iter();
    while let Some(arg) = it.next() {
        let text = arg.to_str();
        match text {
            Some("-C") if a.dir.is_none() => a.dir = Some(PathBuf::from(it.next()?)),
            Some("--agent") if a.agent.is_none() => a.agent = Some(it.next()?.to_str()?.into()),
            Some(t) if t.starts_with("--agent=") && a.agent.is_none() => {
                a.agent = Some(t["--agent=".len()..].into());
            }
            _ => return None,
        }
    }
    match a.agent.as_deref() {
        None | Some("claude-code" | "codex" | "gemini") => Some(a),
        Some(_) => None,
    }
}

fn main() -> ExitCode {
    let raw: Vec<OsString> = std::env::args_os().skip(1).collect();
    let var = |k: &str| std::env::var_os(k);
    // As `opfs` logs: warnings to stderr.
    env_logger::Builder::new()
        .filter_level(log::LevelFilter::Warn)
        .format_timestamp_millis()
        .init();
    opfs::failpoint::arm(std::env::var("OPFS_FAILPOINT").ok().as_deref());
    let Some(args) = parse_args(&raw) else {
        return delegate(&raw, None, None);
    };
    let agent = args.agent.as_deref().and_then(Agent::from_name);
    let strict = var("OPFS_HOOK_STRICT").is_some_and(|v| v == "1");
    // Inside `opfs run`'s sandbox the turn goes through the run's narrow
    // socket: `opfs hook`'s, the event still unread.
    if var("OPFS_SANDBOX").is_some_and(|m| m != "danger-full-access") {
        return delegate(&raw, None, agent);
    }
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin()
        .take(MAX_EVENT_BYTES as u64 + 1)
        .read_to_end(&mut input)
    {
        let reason = format!("cannot read the hook event on stdin: {e}");
        return reply(&hook::not_opened(agent, &reason, strict));
    }
    if input.len() > MAX_EVENT_BYTES {
        return delegate(&raw, Some(&input), agent);
    }
    let Ok(event) = hook::parse_event(&input, agent) else {
        return delegate(&raw, Some(&input), agent);
    };
    let home = state::home::resolve_home(
        var("OPFS_HOME").as_deref(),
        var("XDG_DATA_HOME").as_deref(),
        var("HOME").as_deref(),
    );
    let Some(st) = fast_project(&home, &args, event.cwd.as_deref()) else {
        return delegate(&raw, Some(&input), agent);
    };
    let project = Project::new(st).with_answer_limit(HOOK_LIMIT);
    let opened = project.turn_checked(
        None,
        event.prompt.as_deref(),
        event.session_id.as_deref(),
        false,
    );
    let agent = Some(event.agent);
    match opened {
        Ok((_, _, checked)) => {
            // An older daemon does not say: the index is read here then.
            let note = checked.unwrap_or_else(|| stopped_rewind(project.state()));
            match note {
                Some(note) => reply(&hook::opened_with_warning(agent, &note)),
                None => reply(&hook::opened(agent)),
            }
        }
        // No turn was opened: `opfs hook` finds out why and says it (a
        // stale mount, the way to serve the project).
        Err(ClientError::NotServed(_)) => delegate(&raw, Some(&input), agent),
        Err(e) => reply(&hook::not_opened(
            agent,
            &hook::for_the_hook(&e.to_string()),
            strict,
        )),
    }
}

/// The state dir of the project, when both the session's directory
/// (`cwd`, else this process's) and the directory the turn is asked in
/// (`-C`, else the session's) lie in a registered mountpoint: the
/// session cannot be working in a backing directory then, and `-C` is
/// a directory (or a dead mount, which `opfs hook` handles as it does).
/// `None` for anything else: `opfs hook` decides.
fn fast_project(home: &Path, args: &Args, cwd: Option<&Path>) -> Option<opfs::store::StateDir> {
    let session = match cwd {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().ok()?,
    };
    state::resolve_registered(home, &state::absolute(&session))?;
    let dir = match args.dir.as_deref().or(cwd) {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().ok()?,
    };
    let st = state::resolve_registered(home, &dir)?;
    // As `opfs hook` checks `-C`: a directory, given 2 s (a stopped
    // daemon's mount would keep it waiting; past that it goes on).
    match state::metadata_within(&dir, Duration::from_secs(2)) {
        None => Some(st),
        Some(Ok(m)) if m.is_dir() => Some(st),
        Some(Err(e)) if e.raw_os_error() == Some(libc::ENOTCONN) => Some(st),
        Some(_) => None,
    }
}

/// The note of a rewind that stopped half way, read from the index.
fn stopped_rewind(st: &opfs::store::StateDir) -> Option<String> {
    let ix = opfs::store::Index::open_read_only(&st.index_path()).ok()?;
    ix.stopped_restore().ok().flatten().map(|s| s.to_string())
}

/// Prints `r` and exits with its code.
fn reply(r: &HookReply) -> ExitCode {
    // With stdout or stderr gone there is no one left to tell.
    let _ = std::io::stdout().write_all(r.stdout.as_bytes());
    let _ = std::io::stderr().write_all(r.stderr.as_bytes());
    ExitCode::from(u8::try_from(r.code).unwrap_or(1))
}

/// Runs `opfs hook` with `raw` (the `opfs` beside this binary), its stdin
/// this one's when `input` is `None` (the event not read), else `input`;
/// exits as it exits. When it cannot be run, no turn was opened: says so,
/// as a hook says it (`agent`, if known).
fn delegate(raw: &[OsString], input: Option<&[u8]>, agent: Option<Agent>) -> ExitCode {
    let opfs = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name("opfs"),
        Err(e) => return cannot_delegate(agent, Path::new("opfs"), &e),
    };
    let mut cmd = Command::new(&opfs);
    cmd.arg("hook").args(raw);
    let Some(input) = input else {
        use std::os::unix::process::CommandExt;
        let e = cmd.exec();
        return cannot_delegate(agent, &opfs, &e);
    };
    let mut child = match cmd.stdin(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) => return cannot_delegate(agent, &opfs, &e),
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that stops reading early (a refusal) is no failure here.
        let _ = stdin.write_all(input);
    }
    match child.wait() {
        Ok(status) => match status.code() {
            Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            None => ExitCode::from(1),
        },
        Err(e) => cannot_delegate(agent, &opfs, &e),
    }
}

/// The hook's reply when `opfs` (at `opfs`) cannot be run: no turn.
fn cannot_delegate(agent: Option<Agent>, opfs: &Path, e: &std::io::Error) -> ExitCode {
    let reason = format!(
        "cannot run {}: {e}; opfs-hook runs the opfs binary of its own directory for \
         anything but a turn of a mounted project: reinstall opfs, or run `opfs integrate` \
         again to install hooks that run `opfs hook`",
        opfs.display()
    );
    let strict = std::env::var_os("OPFS_HOOK_STRICT").is_some_and(|v| v == "1");
    reply(&hook::not_opened(agent, &reason, strict))
}
