//! `opfs hook [--agent claude-code|codex|gemini]`: an agent's
//! prompt-submitted hook (`docs/integrations.md`). Reads the hook event
//! (JSON) on stdin and does what `opfs turn --label PROMPT --id SESSION`
//! does, in the project `-C` names, else the event's `cwd`, else the
//! current directory. The label is the prompt exactly as the agent sent
//! it (`opfs log --json` shows it whole; text output escapes control
//! characters).
//!
//! Exit 0 and nothing on stdout when the turn was opened, unless a rewind
//! stopped half way (`opfs rewind --resume`/`--abort` pending): then that
//! is said as a `systemMessage`, on stderr and on the terminal. When it was not
//! (no daemon serves the project, a stale mount, no project, bad input),
//! the user must see it: the reason goes to stderr, to the terminal
//! (`/dev/tty`, if the hook has one) and as `{"systemMessage": ...}` on
//! stdout, with exit 0 so the agent goes on unprotected; with
//! `OPFS_HOOK_STRICT=1` it exits 2 instead, which blocks the prompt.
//! Inside `opfs run`'s sandbox (`OPFS_SANDBOX`), where no turn can be
//! opened but the mount records everything into the turn opened outside,
//! it says so in a `systemMessage` and exits 0.

use std::io::{Read, Write};

use opfs::integrate::hook::{self, HookReply, MAX_EVENT_BYTES};
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
    // Read here, not in `cli::Env`: it is this command's alone, and the
    // agents document it as the hook's own switch.
    let strict = std::env::var_os("OPFS_HOOK_STRICT").is_some_and(|v| v == "1");
    let agent = a.agent.as_deref().and_then(Agent::from_name);
    let sandboxed = std::env::var_os("OPFS_SANDBOX").is_some_and(|m| m != "danger-full-access");
    let reply = if sandboxed {
        // Drain the event: the agent may wait for its hook to read it.
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        hook::in_sandbox()
    } else {
        match open_turn(ctx, agent) {
            Ok((_, Some(warning))) => {
                let reply = hook::opened_with_warning(&warning);
                tell_terminal(&reply);
                reply
            }
            Ok((agent, None)) => hook::opened(agent),
            Err(reason) => {
                let reply = hook::not_opened(&reason, strict);
                tell_terminal(&reply);
                reply
            }
        }
    };
    out.write_all(reply.stdout.as_bytes())?;
    err.write_all(reply.stderr.as_bytes())?;
    Ok(reply.code)
}

/// Reads the event and opens the turn; the agent it came from and what
/// the user must know of the project (a rewind that stopped half way), or
/// why no turn was opened.
fn open_turn(ctx: &Ctx, agent: Option<Agent>) -> Result<(Option<Agent>, Option<String>), String> {
    let mut input = Vec::new();
    std::io::stdin()
        .take(MAX_EVENT_BYTES as u64 + 1)
        .read_to_end(&mut input)
        .map_err(|e| format!("cannot read the hook event on stdin: {e}"))?;
    if input.len() > MAX_EVENT_BYTES {
        return Err(format!(
            "the hook event on stdin is larger than {MAX_EVENT_BYTES} bytes"
        ));
    }
    let event = hook::parse_event(&input, agent).map_err(|e| e.to_string())?;
    let turn_ctx = Ctx {
        dir: ctx.dir.clone().or(event.cwd.clone()),
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
        Ok(()) => {
            let warning = turn_ctx
                .project()
                .ok()
                .and_then(|p| super::rewind::pending_note(p.state()));
            Ok((Some(event.agent), warning))
        }
        Err(e) => Err(e
            .message
            .unwrap_or_else(|| String::from_utf8_lossy(&notes).trim().to_string())),
    }
}

/// Writes the reason to the controlling terminal, if there is one (seen
/// even when the agent hides hook output).
fn tell_terminal(reply: &HookReply) {
    if let Ok(mut tty) = std::fs::OpenOptions::new().write(true).open("/dev/tty") {
        // Best effort: the message is on stderr and stdout too.
        let _ = tty.write_all(reply.stderr.as_bytes());
    }
}
