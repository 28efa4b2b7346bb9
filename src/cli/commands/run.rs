//! `opfs run [--sandbox MODE] [--agent NAME] -- CMD...`: exits with the
//! command's status. An agent's command (`claude`, `codex`, `gemini`,
//! `aider`, or `--agent NAME`) gets its preset (`opfs::sandbox::preset`).

use std::io::Write;

use opfs::daemon::DaemonOptions;
use opfs::sandbox::preset::{self, Agent};
use opfs::sandbox::{self, RunError, RunOptions};
use opfs::state;

use crate::cli::args::RunArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &RunArgs, err: &mut dyn Write) -> Result<i32, CommandError> {
    let range_min = ctx.range_min()?;
    let config = match &ctx.env.config {
        Some(p) => sandbox::config::load(p).map_err(failure)?,
        None => Default::default(),
    };
    let mut opts = RunOptions {
        home: ctx.home().to_path_buf(),
        user_home: ctx.env.home.clone(),
        dir: ctx.dir(),
        mode: a.sandbox.into(),
        net: a.net,
        writable: a.writable.iter().map(|w| state::absolute(w)).collect(),
        turn: a.turn.clone(),
        turn_is_preset: false,
        worktree: a.worktree.clone(),
        writable_git_config: a.writable_git_config,
        command: a.command.clone(),
        config: config.sandbox,
        bwrap: ctx.env.bwrap.clone(),
        env: ctx.env.run.clone(),
        daemon: DaemonOptions {
            range_min,
            tuning: ctx.env.tuning.clone(),
            ..DaemonOptions::default()
        },
        verbose: ctx.verbose,
    };
    if let Some(agent) = agent_of(a) {
        apply_preset(ctx, a, agent, &mut opts, err)?;
    }
    match sandbox::run(&opts) {
        Ok(outcome) => {
            for w in &outcome.warnings {
                writeln!(err, "opfs: {w}")?;
            }
            // The command's writes failed from the moment the daemon
            // stopped: its own exit 0 is not reported as a success.
            if outcome.daemon_stopped && outcome.code == 0 {
                return Ok(1);
            }
            Ok(outcome.code)
        }
        Err(e @ RunError::Usage(_)) => Err(CommandError::usage(e.to_string())),
        Err(RunError::Worktree(e)) if e.is_usage() => Err(CommandError::usage(e.to_string())),
        Err(e) => Err(failure(e)),
    }
}

/// The preset `--agent` names, else the one the command's name tells.
fn agent_of(a: &RunArgs) -> Option<Agent> {
    match a.agent.as_deref() {
        Some("none") => None,
        Some(name) => Agent::from_name(name),
        None => a.command.first().and_then(|p| Agent::detect(p)),
    }
}

/// Puts `agent`'s preset into `opts` and says on stderr what it added.
fn apply_preset(
    ctx: &Ctx,
    a: &RunArgs,
    agent: Agent,
    opts: &mut RunOptions,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    let sandboxed = opts.mode != sandbox::Mode::DangerFullAccess;
    let home = if opts.mode == sandbox::Mode::WorkspaceWrite {
        ctx.env.home.as_deref()
    } else {
        None
    };
    // The project's root: a project opfs does not know yet is the folder
    // the run starts in (as `opfs run` takes it).
    let project = ctx
        .project_state()
        .map(|st| st.project)
        .unwrap_or_else(|_| state::absolute(&opts.dir));
    let p = preset::prepare(agent, &a.command, home, Some(&project)).map_err(failure)?;
    // Without our sandbox the agent keeps its own checks and sandbox.
    if sandboxed {
        opts.command = p.command;
    }
    for w in &p.writable {
        if !opts.writable.contains(w) {
            opts.writable.push(w.clone());
        }
    }
    let mut said = vec![format!("{} preset", agent.name())];
    if sandboxed && !opts.net {
        opts.net = true;
        said.push("network on".into());
    }
    if !p.writable.is_empty() {
        let names: Vec<String> = p.writable.iter().map(|w| w.display().to_string()).collect();
        said.push(format!("writable {}", names.join(", ")));
    }
    if opts.turn.is_none() {
        opts.turn_is_preset = true;
        match p.label {
            Some(label) => {
                opts.turn = Some(label);
                said.push("a turn labelled with the prompt".into());
            }
            None => {
                let name = agent.name();
                opts.turn = Some(format!("{name} session"));
                let hooked = home.is_some_and(|h| preset::hook_installed(agent, h));
                let unreachable = home.is_some_and(|h| preset::hook_unreachable_inside(agent, h));
                said.push(if !sandboxed {
                    format!(
                        "a turn \"{name} session\" (the agent's prompt hook, if installed, opens one per prompt)"
                    )
                } else if hooked && unreachable {
                    if agent == Agent::Claude {
                        tell_claude_one_turn(&mut opts.command);
                    }
                    format!(
                        "ONE turn \"{name} session\" for the whole session: opfs's prompt hook for {name} runs a program under /tmp, which is private inside the sandbox, so it cannot open turns there (nor can the opfs MCP server); install opfs elsewhere and run `opfs integrate {}` again, `opfs turn` outside starts the next",
                        integrate_name(agent)
                    )
                } else if hooked {
                    format!(
                        "a turn per prompt, labelled with it, opened by the agent's opfs hook (\"{name} session\" until the first prompt)"
                    )
                } else if agent == Agent::Aider {
                    format!(
                        "ONE turn \"{name} session\" for the whole session: aider has no hooks, so its prompts are not separate turns; `opfs turn` outside starts the next, or use --message"
                    )
                } else {
                    if agent == Agent::Claude {
                        tell_claude_one_turn(&mut opts.command);
                    }
                    format!(
                        "ONE turn \"{name} session\" for the whole session: opfs's prompt hook is not installed for {name}, so its prompts are not separate turns; `opfs integrate {}` installs it, `opfs turn` outside starts the next",
                        integrate_name(agent)
                    )
                });
            }
        }
    }
    writeln!(err, "opfs: {}", said.join("; "))?;
    Ok(())
}

/// The name `opfs integrate` takes for `agent`.
fn integrate_name(agent: Agent) -> &'static str {
    match agent {
        Agent::Claude => "claude-code",
        other => other.name(),
    }
}

/// What Claude Code's model is told (`--append-system-prompt`) when an
/// interactive session inside the sandbox is one turn because opfs's
/// prompt hook is not installed: so the model can tell the user, who may
/// not read the preset's stderr line.
const ONE_TURN_CONTEXT: &str = "[opfs] The user protects this project with opfs, which \
    records every file change so the user can rewind it. Here opfs's prompt hook \
    is not installed, so all of the session's messages are ONE turn: the user cannot rewind \
    one message's changes alone. If the user asks to undo a single message, or at the start \
    of your first reply, say this, and that `opfs integrate claude-code` (run outside this \
    session) installs the hook for a turn per message.";

/// Adds [`ONE_TURN_CONTEXT`] to Claude Code's system prompt, unless the
/// user's command sets `--append-system-prompt` itself.
fn tell_claude_one_turn(command: &mut Vec<std::ffi::OsString>) {
    if command.iter().any(|a| {
        a.to_str()
            .is_some_and(|a| a.starts_with("--append-system-prompt"))
    }) {
        return;
    }
    command.push("--append-system-prompt".into());
    command.push(ONE_TURN_CONTEXT.into());
}
