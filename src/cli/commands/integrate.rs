//! `opfs integrate AGENT [--print] [--remove]`: merges into (or takes out
//! of) the agent's user-level configuration a prompt-submitted hook that
//! runs `opfs hook` and the MCP server `opfs mcp`, both naming this very
//! binary by its absolute path (`docs/integrations.md`). Never writes
//! inside a project or mountpoint opfs knows. For aider, which has no
//! hooks, it prints the recipe instead.

use std::io::Write;
use std::path::{Path, PathBuf};

use opfs::integrate::config::{self, Action, FileChange};
use opfs::integrate::Agent;

use crate::cli::args::IntegrateArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

/// What aider users do instead (aider has no hook and no MCP client).
const AIDER_RECIPE: &str = "\
aider has no hook mechanism and no MCP client, so there is nothing to write.
Open one turn per message from outside instead, with aider in the sandbox:

  opfs run -C ~/code/app aider --yes-always --message \"$msg\"

(the aider preset of opfs run gives it the network and ~/.aider, and
labels the run's turn with the message; add --turn \"$msg\" to name it
yourself)

or, for an interactive aider session in a mountpoint, open a turn from a
second terminal before each message you may want to undo on its own:

  opfs -C ~/code/app turn --label \"refactor the parser\"

See docs/integrations.md.
";

pub fn run(ctx: &Ctx, a: &IntegrateArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let agent = Agent::from_name(&a.agent)
        .ok_or_else(|| CommandError::usage(format!("unknown agent {:?}", a.agent)))?;
    if agent == Agent::Aider {
        if a.remove {
            writeln!(
                out,
                "opfs integrate aider wrote nothing, so there is nothing to remove."
            )?;
        } else {
            out.write_all(AIDER_RECIPE.as_bytes())?;
        }
        return Ok(());
    }
    let home = ctx
        .env
        .home
        .clone()
        .filter(|h| h.is_absolute())
        .ok_or_else(|| {
            CommandError::failure(
                "HOME is not set (or not absolute): opfs integrate writes the agent's user-level \
             configuration under it; set HOME",
            )
        })?;
    if a.worktrees && agent != Agent::ClaudeCode {
        return Err(CommandError::usage(
            "--worktrees is for claude-code: only Claude Code has worktree hooks",
        ));
    }
    let opfs = this_binary()?;
    // The small hook binary, when it was installed beside this one.
    let hook = Some(opfs.with_file_name("opfs-hook")).filter(|h| h.is_file());
    let server = config::Server {
        opfs,
        hook,
        env: server_env(ctx, &home),
    };
    if a.print {
        for (path, text) in config::fragments(agent, &home, &server) {
            writeln!(out, "# {}: opfs merges in", path.display())?;
            out.write_all(text.as_bytes())?;
            writeln!(out)?;
        }
        if a.worktrees {
            if let Ok(Some(text)) =
                config::claude_worktree_hooks(None, &server.opfs, Action::Install)
            {
                writeln!(out, "# with --worktrees, also in ~/.claude/settings.json:")?;
                out.write_all(text.as_bytes())?;
                writeln!(out)?;
            }
        }
        return Ok(());
    }
    let action = if a.remove {
        Action::Remove
    } else {
        Action::Install
    };
    let mut plan = config::plan(agent, &home, &server, action).map_err(failure)?;
    // Claude Code's worktree hooks: put in with --worktrees, always taken
    // out by --remove.
    if agent == Agent::ClaudeCode && (a.worktrees || action == Action::Remove) {
        if let Some(change) = plan.iter_mut().find(|c| c.role == "hooks") {
            let base = change.after.clone().or_else(|| change.before.clone());
            let edited = config::claude_worktree_hooks(base.as_deref(), &server.opfs, action)
                .map_err(|detail| {
                    CommandError::failure(format!("{}: {detail}", change.path.display()))
                })?;
            if edited.is_some() {
                change.after = edited;
            }
        }
    }
    for change in &plan {
        refuse_inside_a_project(ctx, change)?;
    }
    let written = config::apply(&plan).map_err(failure)?;
    report(ctx, agent, action, &plan, &written, out)?;
    if a.worktrees && !ctx.format.is_json() {
        writeln!(
            out,
            "claude --worktree (and its EnterWorktree tool) now makes opfs worktrees of a project \
             opfs serves (docs/integrations.md)."
        )?;
    }
    Ok(())
}

fn report(
    ctx: &Ctx,
    agent: Agent,
    action: Action,
    plan: &[FileChange],
    written: &[(PathBuf, Option<PathBuf>)],
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    if ctx.format.is_json() {
        let files: Vec<_> = plan
            .iter()
            .map(|c| {
                let bak = written
                    .iter()
                    .find(|(p, _)| p == &c.path)
                    .and_then(|(_, b)| b.as_ref());
                serde_json::json!({
                    "path": c.path,
                    "role": c.role,
                    "changed": c.after.is_some(),
                    "backup": bak,
                })
            })
            .collect();
        let mut v = serde_json::json!({ "agent": agent.name(), "removed": action == Action::Remove, "files": files });
        if action == Action::Install {
            if let Some(advice) = codex_advice(agent, ctx) {
                v["warning"] = advice.into();
            }
        }
        writeln!(out, "{v}")?;
        return Ok(());
    }
    for c in plan {
        let verb = match (c.after.is_some(), action) {
            (false, _) => "unchanged",
            (true, Action::Install) if c.before.is_none() => "created",
            (true, Action::Install) => "updated",
            (true, Action::Remove) => "opfs's entries removed from",
        };
        write!(out, "{verb} {} ({})", c.path.display(), c.role)?;
        match written
            .iter()
            .find(|(p, _)| p == &c.path)
            .and_then(|(_, b)| b.as_ref())
        {
            Some(bak) => writeln!(out, "; the previous version is {}", bak.display())?,
            None => writeln!(out)?,
        }
    }
    if action == Action::Install {
        writeln!(
            out,
            "{agent} now opens an opfs turn per user message in a project mounted by opfs, and \
             can use `opfs mcp`; restart it to load the change (docs/integrations.md)."
        )?;
        if let Some(advice) = codex_advice(agent, ctx) {
            writeln!(out, "warning: {advice}")?;
        }
    }
    Ok(())
}

/// For Codex: what the user must do before Codex runs the hook (review
/// and trust it), if anything.
fn codex_advice(agent: Agent, ctx: &Ctx) -> Option<String> {
    if agent != Agent::Codex {
        return None;
    }
    let home = ctx.env.home.as_deref()?;
    let (path, trust) = config::codex_hook_trust(home).ok()?;
    config::codex_trust_advice(&path, &trust)
}

/// What the MCP server's `env` must say for `opfs mcp` to find this
/// state and configuration: `OPFS_HOME` when the state dir is not the
/// default one under `home` (`$OPFS_HOME` or `$XDG_DATA_HOME` set),
/// `OPFS_CONFIG` when the configuration file is not the default one;
/// absolute paths (the agent starts the server in another directory).
fn server_env(ctx: &Ctx, home: &Path) -> Vec<(String, String)> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let absolute = |p: &Path| cwd.join(p).to_string_lossy().into_owned();
    let mut env = Vec::new();
    let default_home = opfs::state::home::resolve_home(None, None, Some(home.as_os_str()));
    if ctx.home() != default_home {
        env.push(("OPFS_HOME".to_string(), absolute(ctx.home())));
    }
    let default_config = home.join(".config/opfs/config.toml");
    if let Some(config) = ctx.env.config.as_deref().filter(|c| *c != default_config) {
        env.push(("OPFS_CONFIG".to_string(), absolute(config)));
    }
    env
}

/// The running `opfs`, by its absolute path: the agents run hooks with
/// their own `$PATH`, which may not have it.
fn this_binary() -> Result<PathBuf, CommandError> {
    std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| {
            CommandError::failure(format!(
                "cannot find the path of this opfs binary to write into the agent's \
                 configuration: {e}"
            ))
        })
}

/// Guarantee 7: no write lands inside a project (or mountpoint) opfs
/// knows, even when `HOME` lies in one.
fn refuse_inside_a_project(ctx: &Ctx, change: &FileChange) -> Result<(), CommandError> {
    if change.after.is_none() {
        return Ok(());
    }
    let dir = existing_ancestor(&change.path);
    match opfs::state::resolve(ctx.home(), &dir) {
        Some(st) => Err(CommandError::failure(format!(
            "{} lies inside the opfs project {} (or its mountpoint), and opfs never writes \
             inside a project: point HOME elsewhere, or add by hand what `opfs integrate \
             --print` shows",
            change.path.display(),
            st.project.display()
        ))),
        None => Ok(()),
    }
}

fn existing_ancestor(path: &Path) -> PathBuf {
    path.ancestors()
        .skip(1)
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}
