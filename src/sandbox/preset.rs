//! Agent presets for `opfs run` (`docs/integrations.md`, "One command
//! per agent"): what Claude Code, Codex CLI, Gemini CLI and aider need
//! inside the sandbox, so that `opfs run claude -p "$msg"` is the whole
//! command.
//!
//! A preset is chosen by `--agent NAME` or, without it, by the program's
//! file name (`claude`, `codex`, `gemini`, `aider`); `--agent none` turns
//! it off. It gives:
//!
//! - the network (each agent talks to its model's API);
//! - the agent's own state writable, created first when missing (a fresh
//!   `HOME`): a folder (`~/.claude`, `~/.codex`, `~/.gemini`, `~/.aider`)
//!   or a file (`~/.claude.json`, made as `{}`);
//! - arguments that make the agent's own checks fit ours: Codex's sandbox
//!   replaced by ours (`-c sandbox_mode="danger-full-access"`, since
//!   Codex's bubblewrap cannot start inside ours) and `codex exec
//!   --skip-git-repo-check` (Codex asks for git so that changes can be
//!   undone; opfs records them); Gemini CLI's `--skip-trust` (trust this
//!   folder for this run only: without it a new folder exits 55 headless
//!   and turns the settings' hooks off); Claude Code's `IS_SANDBOX=1`
//!   (its bypass-permissions mode refuses root outside a sandbox);
//! - the label of the run's turn: the prompt of a one-shot run
//!   (`claude -p MSG`, `codex exec MSG`, `gemini -p MSG`, `aider
//!   --message MSG`), so each prompt is its own turn labelled with it.
//!
//! Nothing here reads the environment or prints; [`prepare`] creates the
//! missing state paths and returns what the caller adds to the run.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// An agent opfs has a preset for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Claude Code (`claude`).
    Claude,
    /// Codex CLI (`codex`).
    Codex,
    /// Gemini CLI (`gemini`).
    Gemini,
    /// aider (`aider`).
    Aider,
}

/// The names `--agent` takes (besides `none`), in order.
pub const AGENT_NAMES: &[&str] = &["claude", "codex", "gemini", "aider"];

impl Agent {
    /// The agent called `name` (its program name), if any.
    pub fn from_name(name: &str) -> Option<Agent> {
        match name {
            "claude" => Some(Agent::Claude),
            "codex" => Some(Agent::Codex),
            "gemini" => Some(Agent::Gemini),
            "aider" => Some(Agent::Aider),
            _ => None,
        }
    }

    /// The agent whose program `program` runs (by its file name).
    pub fn detect(program: &OsStr) -> Option<Agent> {
        Path::new(program)
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(Agent::from_name)
    }

    /// Its name, as `--agent` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
            Agent::Aider => "aider",
        }
    }

    /// Folders (relative to the user's home) the agent writes its state in.
    fn state_dirs(self) -> &'static [&'static str] {
        match self {
            Agent::Claude => &[".claude"],
            Agent::Codex => &[".codex"],
            Agent::Gemini => &[".gemini"],
            Agent::Aider => &[".aider"],
        }
    }

    /// Files (relative to the user's home) the agent rewrites in place,
    /// with the content a missing one is created with.
    fn state_files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Agent::Claude => &[(".claude.json", "{}\n")],
            _ => &[],
        }
    }
}

/// Whether opfs's prompt hook (`opfs hook`, written by `opfs integrate`)
/// is in `agent`'s user settings under `user_home`: Claude Code's
/// `~/.claude/settings.json`, Codex's `~/.codex/config.toml`, Gemini
/// CLI's `~/.gemini/settings.json` (a handler whose command runs `opfs
/// hook` or the small binary `opfs-hook`); aider has no hooks. A file
/// that cannot be read has none.
pub fn hook_installed(agent: Agent, user_home: &Path) -> bool {
    hook_lines(agent, user_home).next().is_some()
}

/// True when every opfs prompt hook of `agent`'s user settings runs a
/// program under `/tmp`, which is private inside the sandbox: there the
/// hook cannot start, so it opens no turn (and the MCP entry, which runs
/// the same program, fails).
pub fn hook_unreachable_inside(agent: Agent, user_home: &Path) -> bool {
    let mut lines = hook_lines(agent, user_home).peekable();
    lines.peek().is_some() && lines.all(|l| l.contains("\"/tmp/"))
}

/// The lines of `agent`'s user settings that run opfs's prompt hook:
/// `opfs hook --agent`, or the small binary `opfs-hook --agent` that
/// `opfs integrate` installs when it sits beside `opfs`.
fn hook_lines(agent: Agent, user_home: &Path) -> impl Iterator<Item = String> {
    let file = match agent {
        Agent::Claude => Some(".claude/settings.json"),
        Agent::Codex => Some(".codex/config.toml"),
        Agent::Gemini => Some(".gemini/settings.json"),
        Agent::Aider => None,
    };
    let text = file
        .and_then(|f| std::fs::read_to_string(user_home.join(f)).ok())
        .unwrap_or_default();
    text.lines()
        .filter(|l| runs_the_hook(l))
        .map(str::to_string)
        .collect::<Vec<_>>()
        .into_iter()
}

/// True when a settings line runs `opfs hook --agent` or `opfs-hook
/// --agent` (the program's path possibly quoted).
fn runs_the_hook(line: &str) -> bool {
    if line.contains("opfs") && line.contains(" hook --agent") {
        return true;
    }
    line.contains("--agent")
        && line.match_indices("opfs-hook").any(|(i, m)| {
            matches!(
                line[i + m.len()..].chars().next(),
                Some(' ' | '\'' | '"' | '\\')
            )
        })
}

/// What a preset adds to a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preset {
    /// The agent.
    pub agent: Agent,
    /// The command to run (the user's, with the preset's arguments put in).
    pub command: Vec<OsString>,
    /// Paths to make writable (they exist once [`prepare`] returns).
    pub writable: Vec<PathBuf>,
    /// The label of the run's turn: the prompt of a one-shot run.
    pub label: Option<String>,
}

/// Codex options that take a value (so the word after them is not the
/// prompt of `codex exec`).
const CODEX_VALUE_OPTIONS: &[&str] = &[
    "-c",
    "--config",
    "-i",
    "--image",
    "-m",
    "--model",
    "-s",
    "--sandbox",
    "-p",
    "--profile",
    "-C",
    "--cd",
    "--add-dir",
    "--output-schema",
    "--color",
    "-o",
    "--output-last-message",
    "--local-provider",
    "--enable",
    "--disable",
];

/// The preset of `agent` for `command` (the user's command, program
/// first), with the agent's state under `user_home` (`None`: no home is
/// known, and no state path is made writable). Creates the state folders
/// (0700) and files that are missing.
///
/// Errors: a state path cannot be created (the path and the cause).
pub fn prepare(
    agent: Agent,
    command: &[OsString],
    user_home: Option<&Path>,
    project: Option<&Path>,
) -> io::Result<Preset> {
    let mut writable = Vec::new();
    if let Some(home) = user_home {
        for d in agent.state_dirs() {
            let p = home.join(d);
            if !p.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&p)
                    .map_err(|e| annotate(&p, e))?;
            }
            writable.push(p);
        }
        for (f, initial) in agent.state_files() {
            let p = home.join(f);
            if !p.exists() {
                write_new(&p, initial).map_err(|e| annotate(&p, e))?;
            }
            writable.push(p);
        }
    }
    Ok(Preset {
        agent,
        command: arguments(agent, command, project.is_none_or(is_a_git_repository)),
        writable,
        label: prompt_of(agent, command),
    })
}

fn annotate(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "cannot create {}, the agent's own state, which its preset makes writable: {e}; \
             create it yourself, or run without the preset (--agent none)",
            path.display()
        ),
    )
}

/// Creates `path` with `content`, mode 0600, unless it exists by then.
fn write_new(path: &Path, content: &str) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => f.write_all(content.as_bytes()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// True when the project's root holds a `.git` (a folder, or the file of
/// a linked worktree or submodule). A repository around the project, in
/// a folder above it, does not count: its `.git` is outside what opfs
/// records and read-only inside the sandbox.
fn is_a_git_repository(project: &Path) -> bool {
    std::fs::symlink_metadata(project.join(".git")).is_ok()
}

/// The command with the preset's arguments (and environment) put in;
/// `in_git` says whether the project is a git repository.
fn arguments(agent: Agent, command: &[OsString], in_git: bool) -> Vec<OsString> {
    let Some((program, args)) = command.split_first() else {
        return Vec::new();
    };
    let mut out: Vec<OsString> = Vec::new();
    match agent {
        Agent::Claude => {
            // Claude Code refuses --dangerously-skip-permissions (and the
            // bypassPermissions mode) to root unless it is told it runs
            // in a sandbox, which it does here.
            out.extend(["env".into(), "IS_SANDBOX=1".into(), program.clone()]);
            out.extend(args.iter().cloned());
        }
        Agent::Codex => {
            // Codex's own sandbox (bubblewrap) cannot start inside ours:
            // ours replaces it. A root `-c` applies to every subcommand;
            // an explicit `--sandbox` of the user's still wins.
            out.push(program.clone());
            out.extend(["-c".into(), "sandbox_mode=\"danger-full-access\"".into()]);
            let mut seen_exec = false;
            for a in args {
                out.push(a.clone());
                if !seen_exec && codex_subcommand(a) {
                    seen_exec = true;
                    if !args.iter().any(|x| x == "--skip-git-repo-check") {
                        out.push("--skip-git-repo-check".into());
                    }
                }
            }
        }
        Agent::Gemini => {
            out.push(program.clone());
            if !args.iter().any(|x| x == "--skip-trust") {
                out.push("--skip-trust".into());
            }
            out.extend(args.iter().cloned());
        }
        Agent::Aider => {
            out.push(program.clone());
            // In a project that is not a git repository aider runs `git
            // init` (or uses a repository above the project) and commits
            // its edits: a `.git` opfs never records, so a rewind would
            // leave it. The user's own `--git`/`--no-git` wins.
            let chosen = args.iter().any(|x| x == "--git" || x == "--no-git");
            if !in_git && !chosen {
                out.push("--no-git".into());
            }
            out.extend(args.iter().cloned());
        }
    }
    out
}

fn codex_subcommand(a: &OsStr) -> bool {
    a == "exec" || a == "e"
}

/// Claude Code options that take a value (`--model M`), as
/// `claude --help` of 2.1.197 lists them.
const CLAUDE_VALUE_OPTIONS: &[&str] = &[
    "--agent",
    "--agents",
    "--append-system-prompt",
    "--append-system-prompt-file",
    "--debug-file",
    "--effort",
    "--fallback-model",
    "--input-format",
    "--json-schema",
    "--max-budget-usd",
    "--max-turns",
    "--model",
    "-n",
    "--name",
    "--output-format",
    "--permission-mode",
    "--plugin-dir",
    "--plugin-url",
    "--remote-control-session-name-prefix",
    "--session-id",
    "--setting-sources",
    "--settings",
    "--system-prompt",
    "--system-prompt-file",
];

/// Claude Code options whose value is optional (`-r [value]`): they take
/// the next word unless it starts with `-`.
const CLAUDE_OPTIONAL_VALUE_OPTIONS: &[&str] = &[
    "-d",
    "--debug",
    "--from-pr",
    "--prompt-suggestions",
    "--remote-control",
    "-r",
    "--resume",
    "-w",
    "--worktree",
];

/// Claude Code options that take a list (`--add-dir A B`): every next
/// word up to one that starts with `-`.
const CLAUDE_LIST_OPTIONS: &[&str] = &[
    "--add-dir",
    "--allowedTools",
    "--allowed-tools",
    "--betas",
    "--disallowedTools",
    "--disallowed-tools",
    "--file",
    "--mcp-config",
    "--tools",
];

/// The prompt of `claude -p`: `-p` (`--print`) is a switch and the prompt
/// is Claude Code's positional argument, wherever it stands (`claude -p
/// --output-format json MSG`, `claude MSG -p`); the words options take are
/// skipped as Claude Code's parser takes them.
fn claude_prompt(args: &[&str]) -> Option<String> {
    if !args.iter().any(|a| *a == "-p" || *a == "--print") {
        return None;
    }
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        i += 1;
        if a == "--" {
            return args.get(i).map(|s| s.to_string());
        }
        if CLAUDE_VALUE_OPTIONS.contains(&a) {
            i += 1;
        } else if CLAUDE_OPTIONAL_VALUE_OPTIONS.contains(&a) {
            if args.get(i).is_some_and(|n| !n.starts_with('-')) {
                i += 1;
            }
        } else if CLAUDE_LIST_OPTIONS.contains(&a) {
            while args.get(i).is_some_and(|n| !n.starts_with('-')) {
                i += 1;
            }
        } else if !a.starts_with('-') {
            return Some(a.to_string());
        }
    }
    None
}

/// The prompt of a one-shot run of `agent`, if `command` is one.
pub fn prompt_of(agent: Agent, command: &[OsString]) -> Option<String> {
    let args: Vec<&str> = command.iter().skip(1).filter_map(|a| a.to_str()).collect();
    if args.len() + 1 != command.len() {
        return None;
    }
    let value_of = |short: &str, long: &str| -> Option<String> {
        let eq = format!("{long}=");
        for (i, a) in args.iter().enumerate() {
            if *a == short || *a == long {
                return args.get(i + 1).map(|s| s.to_string());
            }
            if let Some(v) = a.strip_prefix(&eq) {
                return Some(v.to_string());
            }
        }
        None
    };
    let prompt = match agent {
        Agent::Claude => claude_prompt(&args),
        Agent::Gemini => value_of("-p", "--prompt"),
        Agent::Aider => value_of("-m", "--message"),
        Agent::Codex => {
            let start = args.iter().position(|a| *a == "exec" || *a == "e")?;
            let mut i = start + 1;
            let mut found = None;
            while i < args.len() {
                let a = args[i];
                if a == "--" {
                    found = args.get(i + 1).map(|s| s.to_string());
                    break;
                }
                if CODEX_VALUE_OPTIONS.contains(&a) {
                    i += 2;
                    continue;
                }
                if a.starts_with('-') {
                    i += 1;
                    continue;
                }
                found = Some(a.to_string());
                break;
            }
            // `codex exec -` reads the prompt from stdin.
            found.filter(|p| p != "-")
        }
    };
    prompt.filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cmd(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_agent_is_told_by_the_program_name() {
        assert_eq!(
            Agent::detect(OsStr::new("/usr/local/bin/claude")),
            Some(Agent::Claude)
        );
        assert_eq!(Agent::detect(OsStr::new("codex")), Some(Agent::Codex));
        assert_eq!(Agent::detect(OsStr::new("make")), None);
    }

    #[test]
    fn the_prompt_of_a_one_shot_run_is_found() {
        let p = |a, w: &[&str]| prompt_of(a, &cmd(w));
        assert_eq!(
            p(Agent::Claude, &["claude", "-p", "fix it", "--model", "x"]),
            Some("fix it".into())
        );
        assert_eq!(p(Agent::Claude, &["claude"]), None);
        // The prompt is Claude Code's positional argument, after options
        // and their values, or before `-p`.
        assert_eq!(
            p(
                Agent::Claude,
                &[
                    "claude",
                    "-p",
                    "--output-format",
                    "json",
                    "-r",
                    "--model",
                    "m",
                    "fix"
                ]
            ),
            Some("fix".into())
        );
        assert_eq!(
            p(Agent::Claude, &["claude", "fix", "--print"]),
            Some("fix".into())
        );
        assert_eq!(
            p(
                Agent::Claude,
                &["claude", "-p", "--add-dir", "a", "b", "--verbose", "fix"]
            ),
            Some("fix".into())
        );
        assert_eq!(p(Agent::Claude, &["claude", "-p", "-w", "name"]), None);
        assert_eq!(
            p(Agent::Claude, &["claude", "-p", "--", "-x"]),
            Some("-x".into())
        );
        // Without -p, a positional prompt starts an interactive session.
        assert_eq!(p(Agent::Claude, &["claude", "fix"]), None);
        assert_eq!(
            p(
                Agent::Codex,
                &["codex", "exec", "-m", "gpt", "-s", "x", "do it"]
            ),
            Some("do it".into())
        );
        assert_eq!(p(Agent::Codex, &["codex", "exec", "-"]), None);
        assert_eq!(p(Agent::Codex, &["codex"]), None);
        assert_eq!(
            p(Agent::Gemini, &["gemini", "--prompt=hi there"]),
            Some("hi there".into())
        );
        assert_eq!(
            p(Agent::Aider, &["aider", "--yes-always", "-m", "x\ny"]),
            Some("x\ny".into())
        );
    }

    #[test]
    fn codex_gets_our_sandbox_and_no_git_check() {
        let c = arguments(Agent::Codex, &cmd(&["codex", "exec", "hi"]), false);
        assert_eq!(
            c,
            cmd(&[
                "codex",
                "-c",
                "sandbox_mode=\"danger-full-access\"",
                "exec",
                "--skip-git-repo-check",
                "hi"
            ])
        );
        let g = arguments(Agent::Gemini, &cmd(&["gemini", "-p", "x"]), false);
        assert_eq!(g, cmd(&["gemini", "--skip-trust", "-p", "x"]));
    }

    #[test]
    fn a_hook_under_tmp_cannot_run_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        std::fs::create_dir(home.join(".claude")).unwrap();
        let settings = |program: &str| {
            let text = format!(
                "{{\"hooks\": {{\"UserPromptSubmit\": [{{\"hooks\": [\n  {{\"type\": \"command\", \"command\": \"{program} hook --agent claude-code\"}}]}}]}}}}\n"
            );
            std::fs::write(home.join(".claude/settings.json"), text).unwrap();
        };
        assert!(!hook_installed(Agent::Claude, home));
        assert!(!hook_unreachable_inside(Agent::Claude, home));
        settings("/usr/local/bin/opfs");
        assert!(hook_installed(Agent::Claude, home));
        assert!(!hook_unreachable_inside(Agent::Claude, home));
        settings("/tmp/build/opfs");
        assert!(hook_installed(Agent::Claude, home));
        assert!(hook_unreachable_inside(Agent::Claude, home));
        // The small hook binary `opfs integrate` installs beside `opfs`.
        let small = |program: &str| {
            let text = format!(
                "{{\"hooks\": {{\"UserPromptSubmit\": [{{\"hooks\": [\n  {{\"type\": \"command\", \"command\": \"{program} --agent claude-code\"}}]}}]}}}}\n"
            );
            std::fs::write(home.join(".claude/settings.json"), text).unwrap();
        };
        small("/usr/local/bin/opfs-hook");
        assert!(hook_installed(Agent::Claude, home));
        assert!(!hook_unreachable_inside(Agent::Claude, home));
        small("'/a b/opfs-hook'");
        assert!(hook_installed(Agent::Claude, home));
        small("/tmp/build/opfs-hook");
        assert!(hook_unreachable_inside(Agent::Claude, home));
        small("/usr/local/bin/opfs-hooks");
        assert!(!hook_installed(Agent::Claude, home));
    }

    #[test]
    fn aider_outside_a_git_repository_makes_none() {
        let a = |args: &[&str], in_git| arguments(Agent::Aider, &cmd(args), in_git);
        assert_eq!(a(&["aider", "f"], false), cmd(&["aider", "--no-git", "f"]));
        assert_eq!(a(&["aider", "f"], true), cmd(&["aider", "f"]));
        assert_eq!(
            a(&["aider", "--git", "f"], false),
            cmd(&["aider", "--git", "f"])
        );
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("a/b");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir(tmp.path().join("a/.git")).unwrap();
        assert!(!is_a_git_repository(&project), "a repository above");
        std::fs::write(project.join(".git"), "gitdir: ../.git/worktrees/b\n").unwrap();
        assert!(is_a_git_repository(&project));
    }

    #[test]
    fn missing_state_is_created_and_existing_state_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        std::fs::write(home.join(".claude.json"), "{\"a\":1}").unwrap();
        let p = prepare(Agent::Claude, &cmd(&["claude"]), Some(home), Some(home)).unwrap();
        assert!(home.join(".claude").is_dir());
        assert_eq!(
            std::fs::read_to_string(home.join(".claude.json")).unwrap(),
            "{\"a\":1}"
        );
        assert_eq!(
            p.writable,
            vec![home.join(".claude"), home.join(".claude.json")]
        );
        let a = prepare(Agent::Aider, &cmd(&["aider"]), Some(home), Some(home)).unwrap();
        assert!(home.join(".aider").is_dir());
        assert_eq!(a.writable, vec![home.join(".aider")]);
    }
}
