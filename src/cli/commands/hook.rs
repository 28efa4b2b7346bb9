//! `opfs hook [--agent claude-code|codex|gemini]`: an agent's
//! prompt-submitted hook (`docs/integrations.md`). Reads the hook event
//! (JSON) on stdin and does what `opfs turn --label PROMPT --id SESSION`
//! does, in the project `-C` names, else the event's `cwd`, else the
//! current directory. The label is the prompt exactly as the agent sent
//! it (`opfs log --json` shows it whole; text output escapes control
//! characters).
//!
//! Exit 0 and nothing on stdout (`{}` for Gemini CLI) when the turn was
//! opened, unless a rewind stopped half way (`opfs rewind
//! --resume`/`--abort` pending): then that is said as a `systemMessage`
//! and in the model's context (`hookSpecificOutput.additionalContext`).
//! When no turn was opened (no daemon serves the project, a stale mount,
//! no project, bad input), the user must learn it in every mode, and hooks
//! have no terminal: the reason goes out as a `systemMessage` (shown by
//! the interactive agents) and into the model's context, with the fix,
//! so the model tells the user, and to stderr; exit 0 so the agent goes on
//! unprotected; with `OPFS_HOOK_STRICT=1` it exits 2 instead, which
//! blocks the prompt. When the session works in the backing directory of
//! a project an opfs daemon serves (the writes would go around the mount
//! and nothing would be recorded), the prompt is blocked
//! (`decision: "block"`) with a reason naming the mountpoint and `opfs
//! run`, and no turn is opened. Inside `opfs run`'s sandbox
//! (`OPFS_SANDBOX`), where the daemon is invisible, it asks the run's
//! narrow socket (`OPFS_MCP_SOCKET`) to open the turn, under the rules of
//! `docs/sandbox.md` ("Turns opened from inside"); when there is no such
//! socket or it refuses, the mount still records everything into the turn
//! that is open, and the hook says so in a `systemMessage` and the
//! model's context and exits 0, strict or not.

use std::io::{Read, Write};

use std::path::Path;

use opfs::integrate::hook::{self, MAX_EVENT_BYTES};
use opfs::integrate::Agent;

use crate::cli::args::{HookArgs, TurnArgs};
use crate::cli::error::CommandError;
use crate::cli::output::Format;
use crate::cli::Ctx;

pub fn run(
    ctx: &Ctx,
    a: &HookArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<i32, CommandError> {
    let strict = ctx.env.hook_strict;
    let agent = a.agent.as_deref().and_then(Agent::from_name);
    let sandboxed = ctx
        .env
        .sandbox
        .as_ref()
        .is_some_and(|m| m != "danger-full-access");
    let reply = if sandboxed {
        match ctx.env.mcp_socket.as_deref() {
            Some(socket) => sandbox_turn(socket, agent),
            None => {
                // Drain the event: the agent may wait for its hook to read it.
                let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
                hook::in_sandbox(agent, None)
            }
        }
    } else {
        match open_turn(ctx, agent) {
            Outcome::Opened(agent, Some(warning)) => hook::opened_with_warning(agent, &warning),
            Outcome::Opened(agent, None) => hook::opened(agent),
            Outcome::NotOpened(agent, reason) => hook::not_opened(agent, &reason, strict),
            Outcome::Blocked(reason) => hook::blocked(&reason),
        }
    };
    out.write_all(reply.stdout.as_bytes())?;
    err.write_all(reply.stderr.as_bytes())?;
    Ok(reply.code)
}

/// What the hook did.
enum Outcome {
    /// The turn was opened (the agent, and what the user must know of the
    /// project: a rewind that stopped half way).
    Opened(Option<Agent>, Option<String>),
    /// No turn was opened: the agent (if known) and why.
    NotOpened(Option<Agent>, String),
    /// The prompt must not go on: why, and what to do.
    Blocked(String),
}

/// Inside `opfs run`'s sandbox: opens the prompt's turn through the run's
/// narrow socket at `socket` (docs/sandbox.md, "Turns opened from
/// inside"); when that fails, says so (the mount still records the
/// changes, into the turn that is open), never blocking.
fn sandbox_turn(socket: &Path, agent: Option<Agent>) -> hook::HookReply {
    let event = match read_event(agent) {
        Ok(e) => e,
        Err(reason) => return hook::in_sandbox(agent, Some(&reason)),
    };
    // A little longer than the narrow socket's own bound on the daemon.
    let limit = opfs::control::client::HOOK_LIMIT + std::time::Duration::from_secs(2);
    match opfs::mcp::narrow::open_prompt_turn(
        socket,
        event.prompt.as_deref(),
        event.session_id.as_deref(),
        limit,
    ) {
        Ok(_) => hook::opened(Some(event.agent)),
        Err(reason) => hook::in_sandbox(Some(event.agent), Some(&reason)),
    }
}

/// Reads and parses the hook event on stdin.
fn read_event(agent: Option<Agent>) -> Result<hook::HookEvent, String> {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin()
        .take(MAX_EVENT_BYTES as u64 + 1)
        .read_to_end(&mut input)
    {
        return Err(format!("cannot read the hook event on stdin: {e}"));
    }
    if input.len() > MAX_EVENT_BYTES {
        return Err(format!(
            "the hook event on stdin is larger than {MAX_EVENT_BYTES} bytes"
        ));
    }
    hook::parse_event(&input, agent).map_err(|e| e.to_string())
}

/// Reads the event and opens the turn, or says why not.
fn open_turn(ctx: &Ctx, agent: Option<Agent>) -> Outcome {
    let event = match read_event(agent) {
        Ok(e) => e,
        Err(reason) => return Outcome::NotOpened(agent, reason),
    };
    let dir = ctx.dir.clone().or(event.cwd.clone());
    if let Some(reason) = backing_dir_mistake(ctx, event.cwd.as_deref(), event.agent) {
        return Outcome::Blocked(reason);
    }
    let turn_ctx = Ctx {
        dir,
        format: Format::Human,
        verbose: ctx.verbose,
        color: ctx.color,
        no_pager: true,
        env: ctx.env.clone(),
    };
    let args = TurnArgs {
        message: None,
        label: event.prompt,
        id: event.session_id,
        allow_unmounted: false,
    };
    let (mut number, mut notes) = (Vec::new(), Vec::new());
    // A short bound: a hung daemon must never hang the agent.
    let limit = Some(opfs::control::client::HOOK_LIMIT);
    match super::turn::run_within(&turn_ctx, &args, limit, &mut number, &mut notes) {
        // The turn's own look at the index for a stopped rewind: the
        // project is not resolved, nor the index opened, a second time.
        Ok(warning) => Outcome::Opened(Some(event.agent), warning),
        Err(e) => Outcome::NotOpened(
            Some(event.agent),
            hook::for_the_hook(
                &e.message
                    .unwrap_or_else(|| String::from_utf8_lossy(&notes).trim().to_string()),
            ),
        ),
    }
}

/// Why the prompt must be blocked, when the session's directory (the
/// event's `cwd`, else the hook's own working directory, which the agents
/// set to it; never `-C`, which names the project, not where the agent
/// works) lies in the backing directory of a project that a live opfs
/// mount serves, outside that mount: the agent's writes would go straight
/// to the disk, around the journal, and the turn would record nothing.
/// `None` in every other case (in a mountpoint or a worktree, nothing
/// mounted, no project).
fn backing_dir_mistake(ctx: &Ctx, cwd: Option<&Path>, agent: Agent) -> Option<String> {
    let dir = match cwd {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().ok()?,
    };
    let dir = opfs::state::absolute(&dir);
    if opfs::state::resolve_registered(ctx.home(), &dir).is_some() {
        return None;
    }
    let state = opfs::state::resolve(ctx.home(), &dir)?;
    let project = &state.project;
    let below = dir.strip_prefix(project).ok()?;
    let mountpoint = opfs::daemon::mounts_of(project)
        .into_iter()
        .find(|m| !dir.starts_with(m) && !opfs::daemon::is_dead_mount(m))?;
    let program = match agent {
        Agent::ClaudeCode => "claude",
        Agent::Codex => "codex",
        Agent::Gemini => "gemini",
        Agent::Aider => "aider",
    };
    let here = if below.as_os_str().is_empty() {
        mountpoint.clone()
    } else {
        mountpoint.join(below)
    };
    let place = if below.as_os_str().is_empty() {
        format!("{}, the backing directory", dir.display())
    } else {
        format!(
            "{}, inside {}, the backing directory",
            dir.display(),
            project.display()
        )
    };
    Some(format!(
        "this {agent} session works in {place} of a project opfs serves at {mountpoint}: \
         changes made here go around opfs and would NOT be recorded, so this message was not \
         sent. Start {program} in the mountpoint (cd {here}), or under opfs run, which shows \
         the project at its own path, recorded, a turn per prompt (opfs run -C {project_q} \
         {program})",
        mountpoint = mountpoint.display(),
        here = opfs::integrate::shell_quote(&here.to_string_lossy()),
        project_q = opfs::integrate::shell_quote(&project.to_string_lossy()),
    ))
}
