//! `opfs integrate AGENT`: the user-level configuration that makes an
//! agent open an opfs turn per user message (its prompt-submitted hook
//! runs `opfs hook`) and registers `opfs mcp` as an MCP server
//! (`docs/integrations.md`).
//!
//! Each file is parsed (JSON keeping key order, TOML with `toml_edit`),
//! opfs's entries are put in or taken out, and the file is written only
//! if that changed anything: running twice changes nothing, and
//! `--remove` leaves the other settings as they were. Before a file is
//! rewritten, its previous content is saved next to it as
//! `FILE.opfs-bak` (the last change only), and the new content replaces
//! it atomically (a temp file renamed over it, with the old file's
//! permissions; a symlink is followed, so dotfile managers keep their
//! link). A file opfs cannot parse is never written.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use toml_edit::DocumentMut;

use super::json::{self, Json};
pub use super::toml::CodexTrust;
use super::{shell_quote, Agent};

/// Put opfs's entries in, or take them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `opfs integrate AGENT`.
    Install,
    /// `opfs integrate AGENT --remove`.
    Remove,
}

/// One configuration file and what the action does to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// The file (a symlink resolved to its target).
    pub path: PathBuf,
    /// What this file is for (`hooks`, `MCP servers`, ...).
    pub role: &'static str,
    /// Its content now; `None` if it does not exist.
    pub before: Option<String>,
    /// Its new content; `None` if it stays as it is.
    pub after: Option<String>,
}

/// Why a configuration file could not be planned or written. Nothing was
/// written to a file named in a planning error; a write error names the
/// file that was not written (files before it in the plan were).
#[derive(Debug, thiserror::Error)]
pub enum IntegrateError {
    /// The file exists but cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The file is not what its agent reads (bad JSON or TOML, or a key
    /// opfs needs with another shape); it is left untouched.
    #[error(
        "{}: {detail}; opfs left it untouched: fix it, or add by hand what \
         `opfs integrate {agent} --print` shows",
        path.display()
    )]
    Unparsable {
        /// The file.
        path: PathBuf,
        /// The agent.
        agent: Agent,
        /// What is wrong.
        detail: String,
    },
    /// Writing the file or its backup failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

/// Whether `command` is a hook command `opfs integrate` wrote: it runs a
/// program named `opfs` (any path, quoted or not) with `hook` as its first
/// argument, or one named `opfs-hook`.
pub fn is_opfs_hook(command: &str) -> bool {
    let command = command.trim_start();
    let (program, rest) = match command.strip_prefix('\'') {
        Some(quoted) => match quoted.find("' ") {
            Some(end) => (&quoted[..end], &quoted[end + 1..]),
            None => return false,
        },
        None => match command.split_once(char::is_whitespace) {
            Some((p, r)) => (p, r),
            None => return false,
        },
    };
    if Path::new(program)
        .file_name()
        .is_some_and(|n| n == "opfs-hook")
    {
        return true;
    }
    let mut words = rest.split_whitespace();
    is_opfs_binary(program)
        && match words.next() {
            Some("hook") => true,
            // Claude Code's worktree hooks (`--worktrees`).
            Some("worktree") => words.next() == Some("hook"),
            _ => false,
        }
}

/// The command of Claude Code's `WorktreeCreate` and `WorktreeRemove`
/// hooks, running the binary at `opfs`.
pub fn worktree_hook_command(opfs: &Path) -> String {
    format!("{} worktree hook", shell_quote(&opfs.to_string_lossy()))
}

/// The events of Claude Code's worktree hooks.
pub const WORKTREE_EVENTS: &[&str] = &["WorktreeCreate", "WorktreeRemove"];

/// Claude Code's `~/.claude/settings.json` (`text`; `None` if absent) with
/// opfs's `WorktreeCreate` and `WorktreeRemove` hooks put in or taken out
/// (`opfs integrate claude-code --worktrees`); `None` if that changes
/// nothing. `Err` is what is wrong with the file.
pub fn claude_worktree_hooks(
    text: Option<&str>,
    opfs: &Path,
    action: Action,
) -> Result<Option<String>, String> {
    let original = match text {
        Some(t) if !t.trim().is_empty() => {
            json::parse(t).map_err(|e| format!("not valid JSON: {e}"))?
        }
        _ => Json::object(),
    };
    if !matches!(original, Json::Object(_)) {
        return Err("not a JSON object".into());
    }
    let mut root = original.clone();
    let command = worktree_hook_command(opfs);
    for event in WORKTREE_EVENTS {
        match action {
            Action::Install => put_hook(
                &mut root,
                event,
                obj(&[
                    ("type", Json::str("command")),
                    ("command", Json::str(&command)),
                ]),
            )?,
            Action::Remove => remove_hook(&mut root, event)?,
        }
    }
    if root == original {
        return Ok(None);
    }
    Ok(Some(json::to_text(&root)))
}

/// Whether `program` names a binary called `opfs`.
pub fn is_opfs_binary(program: &str) -> bool {
    Path::new(program).file_name().is_some_and(|n| n == "opfs")
}

/// What the agent runs: the `opfs` binary (by its absolute path) and the
/// environment its MCP server needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The `opfs` binary.
    pub opfs: PathBuf,
    /// The small hook binary `opfs-hook`, when it is installed beside
    /// `opfs` (`docs/design.md`, "A small hook binary"): the prompt hook
    /// runs it; `None`: the prompt hook runs `opfs hook`.
    pub hook: Option<PathBuf>,
    /// Variables written into the MCP server's `env` (name, value): where
    /// opfs keeps its state and configuration when that is not the
    /// default place (`OPFS_HOME`, `OPFS_CONFIG`). The MCP SDKs start a
    /// stdio server with only `HOME`, `PATH` and a few others, so a
    /// setting in the user's shell would not reach it. Empty when the
    /// defaults hold.
    pub env: Vec<(String, String)>,
}

/// The variables Codex passes from its own environment to `opfs mcp`
/// (`env_vars` of `[mcp_servers.opfs]`): Codex starts MCP servers with a
/// short fixed environment, and without these `opfs mcp` would look for
/// the state in the default place, and inside `opfs run`'s sandbox would
/// not find its socket.
pub const CODEX_ENV_VARS: [&str; 4] = [
    "OPFS_HOME",
    "OPFS_MCP_SOCKET",
    "OPFS_CONFIG",
    "XDG_DATA_HOME",
];

/// The hook command for `agent`, running the binary at `opfs`.
pub fn hook_command(opfs: &Path, agent: Agent) -> String {
    format!(
        "{} hook --agent {agent}",
        shell_quote(&opfs.to_string_lossy())
    )
}

/// The prompt hook command `server` installs for `agent`: its small hook
/// binary when it has one ([`Server::hook`]), else [`hook_command`].
pub fn server_hook_command(server: &Server, agent: Agent) -> String {
    match &server.hook {
        Some(hook) => format!("{} --agent {agent}", shell_quote(&hook.to_string_lossy())),
        None => hook_command(&server.opfs, agent),
    }
}

/// The files `agent`'s user-level configuration lives in under `home`,
/// with what each holds. Empty for aider (no configuration to write).
pub fn files(agent: Agent, home: &Path) -> Vec<(PathBuf, &'static str)> {
    match agent {
        Agent::ClaudeCode => vec![
            (home.join(".claude/settings.json"), "hooks"),
            (home.join(".claude.json"), "MCP servers"),
        ],
        Agent::Codex => vec![(home.join(".codex/config.toml"), "hooks and MCP servers")],
        Agent::Gemini => vec![(home.join(".gemini/settings.json"), "hooks and MCP servers")],
        Agent::Aider => Vec::new(),
    }
}

/// What `action` does to each of `agent`'s files under `home`, with the
/// binary at `opfs` as the command the agent runs. Reads the files and
/// writes nothing.
///
/// Errors: a file cannot be read or parsed, or has a shape opfs does not
/// edit ([`IntegrateError`]).
pub fn plan(
    agent: Agent,
    home: &Path,
    server: &Server,
    action: Action,
) -> Result<Vec<FileChange>, IntegrateError> {
    files(agent, home)
        .into_iter()
        .map(|(path, role)| {
            let path = follow_symlink(path);
            let before = read(&path)?;
            let after = edit(agent, role, server, action, before.as_deref()).map_err(|detail| {
                IntegrateError::Unparsable {
                    path: path.clone(),
                    agent,
                    detail,
                }
            })?;
            Ok(FileChange {
                path,
                role,
                before,
                after,
            })
        })
        .collect()
}

/// What opfs adds to each of `agent`'s files, as it would be on its own
/// (`opfs integrate AGENT --print`).
pub fn fragments(agent: Agent, home: &Path, server: &Server) -> Vec<(PathBuf, String)> {
    files(agent, home)
        .into_iter()
        .filter_map(|(path, role)| {
            let text = edit(agent, role, server, Action::Install, None).ok()??;
            Some((path, text))
        })
        .collect()
}

/// Writes every changed file of `plan`: first `FILE.opfs-bak` with its old
/// content (if it existed), then the new content atomically. Returns the
/// files written (with their backups, if any).
///
/// Errors: [`IntegrateError::Write`] for the first file that could not be
/// written; the files before it were written, the rest were not.
pub fn apply(plan: &[FileChange]) -> Result<Vec<(PathBuf, Option<PathBuf>)>, IntegrateError> {
    let mut written = Vec::new();
    for change in plan {
        let Some(after) = &change.after else { continue };
        let write_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| IntegrateError::Write { path, source }
        };
        let backup = match &change.before {
            Some(before) => {
                let bak = backup_path(&change.path);
                write_atomic(&bak, before.as_bytes(), Some(&change.path))
                    .map_err(write_err(&bak))?;
                Some(bak)
            }
            None => None,
        };
        if let Some(dir) = change.path.parent() {
            fs::create_dir_all(dir).map_err(write_err(dir))?;
        }
        write_atomic(&change.path, after.as_bytes(), Some(&change.path))
            .map_err(write_err(&change.path))?;
        written.push((change.path.clone(), backup));
    }
    Ok(written)
}

/// Whether Codex runs the opfs hook in its configuration under `home`
/// (`~/.codex/config.toml`): see [`CodexTrust`]. `NoHook` when the file
/// is absent.
///
/// Errors: the file cannot be read, or is not valid TOML.
pub fn codex_hook_trust(home: &Path) -> Result<(PathBuf, CodexTrust), IntegrateError> {
    let path = home.join(".codex/config.toml");
    let Some(text) = read(&path)? else {
        return Ok((path, CodexTrust::NoHook));
    };
    let doc: DocumentMut = text.parse().map_err(|e| IntegrateError::Unparsable {
        path: path.clone(),
        agent: Agent::Codex,
        detail: format!("not valid TOML: {e}"),
    })?;
    let trust = super::toml::hook_trust(&doc, &path.to_string_lossy());
    Ok((path, trust))
}

/// What to tell the user about `trust` (`opfs doctor`, `opfs integrate
/// codex`): `None` when Codex runs the hook or there is none.
pub fn codex_trust_advice(config: &Path, trust: &CodexTrust) -> Option<String> {
    let why = match trust {
        CodexTrust::NoHook | CodexTrust::Trusted => return None,
        CodexTrust::Untrusted { .. } => "has not been reviewed in Codex yet",
        CodexTrust::Changed { .. } => {
            "changed since it was reviewed in Codex (or this Codex hashes hooks differently)"
        }
        CodexTrust::Disabled { .. } => "is turned off in Codex (enabled = false)",
    };
    let key = match trust {
        CodexTrust::Untrusted { key }
        | CodexTrust::Changed { key }
        | CodexTrust::Disabled { key } => key,
        _ => return None,
    };
    Some(format!(
        "Codex skips opfs's hook in {}, which {why}, so Codex opens no opfs turns and says \
         nothing: start `codex` in a terminal, type /hooks, select the opfs hook (`opfs-hook \
         --agent codex` or `opfs hook --agent codex`, UserPromptSubmit) and trust it; Codex then records it as \
         [hooks.state.\"{key}\"] trusted_hash",
        config.display()
    ))
}

/// `FILE.opfs-bak`.
pub fn backup_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".opfs-bak");
    PathBuf::from(s)
}

/// The new content of one file (`before`: its content, `None` if absent),
/// or `None` if the action changes nothing in it. `Err` is what is wrong
/// with the file.
fn edit(
    agent: Agent,
    role: &str,
    server: &Server,
    action: Action,
    before: Option<&str>,
) -> Result<Option<String>, String> {
    let opfs_s = server.opfs.to_string_lossy();
    let hook = server_hook_command(server, agent);
    if agent == Agent::Codex {
        let text = before.unwrap_or("");
        let mut doc: DocumentMut = text.parse().map_err(|e| format!("not valid TOML: {e}"))?;
        match action {
            Action::Install => super::toml::install(&mut doc, &opfs_s, &server.env, &hook)?,
            Action::Remove => super::toml::remove(&mut doc)?,
        }
        let after = doc.to_string();
        return Ok((after != text).then_some(after));
    }
    let original = match before {
        Some(text) if !text.trim().is_empty() => {
            json::parse(text).map_err(|e| format!("not valid JSON: {e}"))?
        }
        _ => Json::object(),
    };
    if !matches!(original, Json::Object(_)) {
        return Err("not a JSON object".into());
    }
    let mut root = original.clone();
    let env = Json::Object(
        server
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Json::str(v)))
            .collect(),
    );
    let (event, handler, server) = match agent {
        Agent::ClaudeCode => (
            "UserPromptSubmit",
            obj(&[
                ("type", Json::str("command")),
                ("command", Json::str(&hook)),
            ]),
            obj(&[
                ("type", Json::str("stdio")),
                ("command", Json::str(&opfs_s)),
                ("args", Json::Array(vec![Json::str("mcp")])),
                ("env", env),
            ]),
        ),
        _ => (
            "BeforeAgent",
            obj(&[
                ("name", Json::str("opfs-turn")),
                ("type", Json::str("command")),
                ("command", Json::str(&hook)),
                (
                    "description",
                    Json::str("opfs: open a turn per user message, so it can be rewound"),
                ),
            ]),
            {
                let mut server = obj(&[
                    ("command", Json::str(&opfs_s)),
                    ("args", Json::Array(vec![Json::str("mcp")])),
                ]);
                if !env.is_empty_container() {
                    server.set("env", env);
                }
                server
            },
        ),
    };
    let hooks = role.contains("hooks");
    let servers = role.contains("MCP");
    match action {
        Action::Install => {
            if hooks {
                put_hook(&mut root, event, handler)?;
            }
            if servers {
                let list = root
                    .entry("mcpServers", Json::object())
                    .filter(|l| matches!(l, Json::Object(_)))
                    .ok_or("mcpServers is not an object")?;
                list.set("opfs", server);
            }
        }
        Action::Remove => {
            if hooks {
                remove_hook(&mut root, event)?;
            }
            if servers {
                if let Some(list) = root.get_mut("mcpServers") {
                    let ours = list
                        .get("opfs")
                        .and_then(|s| s.get("command"))
                        .and_then(Json::as_str)
                        .is_some_and(is_opfs_binary);
                    if ours {
                        list.remove("opfs");
                    }
                    if list.is_empty_container() {
                        root.remove("mcpServers");
                    }
                }
            }
        }
    }
    if root == original {
        return Ok(None);
    }
    Ok(Some(json::to_text(&root)))
}

fn obj(kv: &[(&str, Json)]) -> Json {
    Json::Object(kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

/// `hooks.EVENT` of `root`: a list of groups `{matcher?, hooks: [handler]}`
/// (the shape Claude Code and Gemini CLI share), created if `create`.
fn hook_groups<'a>(
    root: &'a mut Json,
    event: &str,
    create: bool,
) -> Result<Option<&'a mut Vec<Json>>, String> {
    if !create && root.get("hooks").is_none() {
        return Ok(None);
    }
    let hooks = root
        .entry("hooks", Json::object())
        .filter(|h| matches!(h, Json::Object(_)))
        .ok_or("hooks is not an object")?;
    if !create && hooks.get(event).is_none() {
        return Ok(None);
    }
    match hooks.entry(event, Json::Array(Vec::new())) {
        Some(Json::Array(groups)) => Ok(Some(groups)),
        _ => Err(format!("hooks.{event} is not a list")),
    }
}

fn handler_is_ours(h: &Json) -> bool {
    h.get("command")
        .and_then(Json::as_str)
        .is_some_and(is_opfs_hook)
}

/// Drops opfs's handlers from every group but the first one found, which
/// becomes `keep` (if given); drops the groups that only held opfs's
/// handlers. Returns whether one was kept.
fn sweep(groups: &mut Vec<Json>, keep: Option<&Json>) -> bool {
    let mut placed = false;
    groups.retain_mut(|group| {
        let Some(Json::Array(handlers)) = group.get_mut("hooks") else {
            return true;
        };
        let before = handlers.len();
        handlers.retain_mut(|h| {
            if !handler_is_ours(h) {
                return true;
            }
            match keep {
                Some(new) if !placed => {
                    placed = true;
                    if h != new {
                        *h = new.clone();
                    }
                    true
                }
                _ => false,
            }
        });
        !(handlers.is_empty() && before > 0)
    });
    placed
}

fn put_hook(root: &mut Json, event: &str, handler: Json) -> Result<(), String> {
    let groups = hook_groups(root, event, true)?.ok_or("hooks is not an object")?;
    if !sweep(groups, Some(&handler)) {
        groups.push(obj(&[("hooks", Json::Array(vec![handler]))]));
    }
    Ok(())
}

fn remove_hook(root: &mut Json, event: &str) -> Result<(), String> {
    let Some(groups) = hook_groups(root, event, false)? else {
        return Ok(());
    };
    sweep(groups, None);
    let empty = groups.is_empty();
    if let Some(hooks) = root.get_mut("hooks") {
        if empty {
            hooks.remove(event);
        }
        if hooks.is_empty_container() {
            root.remove("hooks");
        }
    }
    Ok(())
}

/// `path`, or the file it links to (so the link stays a link).
fn follow_symlink(path: PathBuf) -> PathBuf {
    match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => fs::canonicalize(&path).unwrap_or(path),
        _ => path,
    }
}

fn read(path: &Path) -> Result<Option<String>, IntegrateError> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(IntegrateError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Writes `bytes` to `path` through a temp file in the same directory,
/// fsynced and renamed over it, with the permissions of `like` if it
/// exists (else 0600: these files may hold API keys).
fn write_atomic(path: &Path, bytes: &[u8], like: Option<&Path>) -> io::Result<()> {
    let mode = like
        .and_then(|p| fs::metadata(p).ok())
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o600);
    let mut tmp = backup_path(path).into_os_string();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        // Best effort: the temp file is ours and useless now.
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn opfs_hook_commands_are_recognised() {
        assert!(is_opfs_hook("/usr/bin/opfs hook --agent codex"));
        assert!(is_opfs_hook("opfs hook"));
        assert!(is_opfs_hook("'/a b/opfs' hook --agent gemini"));
        assert!(!is_opfs_hook("opfs turn --label x"));
        assert!(!is_opfs_hook("/x/notopfs hook"));
        assert!(!is_opfs_hook("audit.sh"));
        assert!(!is_opfs_hook("OPFS_PROJECT=/m /x/turn-hook.sh"));
        assert!(is_opfs_hook("/usr/bin/opfs worktree hook"));
        assert!(is_opfs_hook("/usr/bin/opfs-hook --agent codex"));
        assert!(is_opfs_hook("'/a b/opfs-hook' --agent gemini"));
        assert!(!is_opfs_hook("/x/opfs-hooks --agent codex"));
        assert!(!is_opfs_hook("/usr/bin/opfs worktree create x"));
    }

    #[test]
    fn claude_worktree_hooks_go_in_and_out_keeping_the_rest() {
        let opfs = Path::new("/usr/bin/opfs");
        let before = r#"{"theme": "dark", "hooks": {"WorktreeCreate": [{"hooks": [{"type": "command", "command": "mine.sh"}]}]}}"#;
        let after = claude_worktree_hooks(Some(before), opfs, Action::Install)
            .unwrap()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&after).unwrap();
        assert_eq!(v["theme"], "dark");
        assert_eq!(
            v["hooks"]["WorktreeCreate"][0]["hooks"][0]["command"],
            "mine.sh"
        );
        assert_eq!(
            v["hooks"]["WorktreeCreate"][1]["hooks"][0]["command"],
            "/usr/bin/opfs worktree hook"
        );
        assert_eq!(
            v["hooks"]["WorktreeRemove"][0]["hooks"][0]["command"],
            "/usr/bin/opfs worktree hook"
        );
        assert_eq!(
            claude_worktree_hooks(Some(&after), opfs, Action::Install).unwrap(),
            None,
            "idempotent"
        );
        let removed = claude_worktree_hooks(Some(&after), opfs, Action::Remove)
            .unwrap()
            .unwrap();
        let r: serde_json::Value = serde_json::from_str(&removed).unwrap();
        assert_eq!(
            r["hooks"]["WorktreeCreate"][0]["hooks"][0]["command"],
            "mine.sh"
        );
        assert!(r["hooks"].get("WorktreeRemove").is_none());
    }

    fn server(opfs: &str) -> Server {
        Server {
            opfs: PathBuf::from(opfs),
            hook: None,
            env: Vec::new(),
        }
    }

    #[test]
    fn the_state_location_goes_into_the_servers_env() {
        let s = Server {
            opfs: PathBuf::from("/bin/opfs"),
            hook: None,
            env: vec![("OPFS_HOME".into(), "/srv/opfs state".into())],
        };
        for (agent, role) in [
            (Agent::ClaudeCode, "MCP servers"),
            (Agent::Gemini, "hooks and MCP servers"),
        ] {
            let text = edit(agent, role, &s, Action::Install, None)
                .expect("install")
                .expect("changed");
            let v = json::parse(&text).expect("json");
            let env = v
                .get("mcpServers")
                .and_then(|l| l.get("opfs"))
                .and_then(|o| o.get("env"))
                .and_then(|e| e.get("OPFS_HOME"))
                .and_then(Json::as_str);
            assert_eq!(env, Some("/srv/opfs state"), "{agent}: {text}");
        }
        // The defaults: Gemini gets no env, Claude Code an empty one.
        let text = edit(
            Agent::Gemini,
            "hooks and MCP servers",
            &server("/bin/opfs"),
            Action::Install,
            None,
        )
        .expect("install")
        .expect("changed");
        assert!(!text.contains("\"env\""), "{text}");
    }

    const CLAUDE: &str = r#"{
  "model": "opus",
  "hooks": {
    "UserPromptSubmit": [
      { "matcher": "", "hooks": [ { "type": "command", "command": "audit.sh" } ] }
    ],
    "Stop": []
  },
  "permissions": { "allow": ["Bash(ls:*)"] }
}"#;

    #[test]
    fn json_install_is_idempotent_and_remove_restores() {
        let opfs = &server("/bin/opfs");
        let role = "hooks";
        let a = Agent::ClaudeCode;
        let once = edit(a, role, opfs, Action::Install, Some(CLAUDE))
            .expect("install")
            .expect("changed");
        assert!(
            once.contains("audit.sh") && once.contains("\"Stop\": []"),
            "{once}"
        );
        assert!(
            once.contains("/bin/opfs hook --agent claude-code"),
            "{once}"
        );
        assert!(
            once.find("\"model\"") < once.find("\"permissions\""),
            "{once}"
        );
        assert_eq!(edit(a, role, opfs, Action::Install, Some(&once)), Ok(None));
        let back = edit(a, role, opfs, Action::Remove, Some(&once))
            .expect("remove")
            .expect("changed");
        assert_eq!(
            json::parse(&back).expect("back"),
            json::parse(CLAUDE).expect("orig")
        );
        assert_eq!(edit(a, role, opfs, Action::Remove, Some(CLAUDE)), Ok(None));
    }

    #[test]
    fn bad_files_are_refused() {
        let opfs = &server("/bin/opfs");
        for bad in [
            "{",
            "[1]",
            r#"{"hooks": []}"#,
            r#"{"hooks": {"BeforeAgent": {}}}"#,
        ] {
            assert!(
                edit(
                    Agent::Gemini,
                    "hooks and MCP servers",
                    opfs,
                    Action::Install,
                    Some(bad)
                )
                .is_err(),
                "{bad}"
            );
        }
    }
}
