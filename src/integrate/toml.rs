//! Codex CLI's `~/.codex/config.toml`, edited with `toml_edit` so that
//! comments, formatting and every other setting stay as they are: the
//! MCP server `[mcp_servers.opfs]` and one `UserPromptSubmit` handler in
//! `[[hooks.UserPromptSubmit]]` / `[[hooks.UserPromptSubmit.hooks]]`.

use toml_edit::{value, Array, ArrayOfTables, DocumentMut, Item, Table};

use super::config::is_opfs_hook;

/// The event Codex runs before it processes a user message.
const EVENT: &str = "UserPromptSubmit";

fn implicit_table() -> Item {
    let mut t = Table::new();
    t.set_implicit(true);
    Item::Table(t)
}

/// The `[mcp_servers.opfs]` table: the command, the variables Codex
/// passes through from its own environment
/// ([`super::config::CODEX_ENV_VARS`]), and `env` when the state is not in
/// its default place.
fn mcp_server(opfs: &str, env: &[(String, String)]) -> Table {
    let mut t = Table::new();
    t.insert("command", value(opfs));
    let mut args = Array::new();
    args.push("mcp");
    t.insert("args", value(args));
    let mut vars = Array::new();
    for v in super::config::CODEX_ENV_VARS {
        vars.push(v);
    }
    t.insert("env_vars", value(vars));
    if !env.is_empty() {
        let mut e = toml_edit::InlineTable::new();
        for (k, v) in env {
            e.insert(k, v.as_str().into());
        }
        t.insert("env", value(e));
    }
    t
}

/// The strings of array `key` of `t`, if it is an array of strings.
fn strings(t: &Table, key: &str) -> Option<Vec<String>> {
    t.get(key)?
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Brings an existing `[mcp_servers.opfs]` table up to what
/// [`mcp_server`] writes, in place: the command and args, the
/// pass-through variables added to the user's own, and `env` entries set;
/// every other key (a timeout, the user's own variables) stays.
fn update_server(t: &mut Table, opfs: &str, env: &[(String, String)]) {
    if t.get("command").and_then(Item::as_str) != Some(opfs) {
        t.insert("command", value(opfs));
    }
    if strings(t, "args") != Some(vec!["mcp".to_string()]) {
        let mut args = Array::new();
        args.push("mcp");
        t.insert("args", value(args));
    }
    let mut vars = strings(t, "env_vars").unwrap_or_default();
    let missing: Vec<_> = super::config::CODEX_ENV_VARS
        .iter()
        .filter(|v| !vars.iter().any(|have| have == *v))
        .collect();
    if !missing.is_empty() {
        vars.extend(missing.into_iter().map(|v| v.to_string()));
        let mut a = Array::new();
        for v in &vars {
            a.push(v.as_str());
        }
        t.insert("env_vars", value(a));
    }
    if env.is_empty() {
        return;
    }
    if !t.get("env").is_some_and(|e| e.is_table_like()) {
        t.insert("env", value(toml_edit::InlineTable::new()));
    }
    if let Some(table) = t.get_mut("env").and_then(Item::as_table_like_mut) {
        for (k, v) in env {
            if table.get(k).and_then(Item::as_str) != Some(v.as_str()) {
                table.insert(k, value(v.as_str()));
            }
        }
    }
}

/// The hook handler table.
fn handler(command: &str) -> Table {
    let mut t = Table::new();
    t.insert("type", value("command"));
    t.insert("command", value(command));
    t
}

/// Whether handler table `t` is one opfs wrote.
fn is_ours(t: &Table) -> bool {
    t.get("command")
        .and_then(Item::as_str)
        .is_some_and(is_opfs_hook)
}

/// Adds (or updates in place) opfs's MCP server and hook handler.
///
/// Errors: the text of what in the file has a shape opfs does not edit
/// (a key it needs that is not a table, or inline arrays of hooks).
pub(crate) fn install(
    doc: &mut DocumentMut,
    opfs: &str,
    env: &[(String, String)],
    hook: &str,
) -> Result<(), String> {
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(implicit_table)
        .as_table_mut()
        .ok_or("mcp_servers is not a table of [mcp_servers.NAME] sections")?;
    match servers.get_mut("opfs").and_then(Item::as_table_mut) {
        Some(t) => update_server(t, opfs, env),
        None => {
            servers.insert("opfs", Item::Table(mcp_server(opfs, env)));
        }
    }

    let groups = hook_groups(doc, true)?.ok_or("hooks is not a table")?;
    let mut placed = false;
    let mut emptied = Vec::new();
    for (i, group) in groups.iter_mut().enumerate() {
        let Some(handlers) = group
            .get_mut("hooks")
            .and_then(Item::as_array_of_tables_mut)
        else {
            continue;
        };
        let before = handlers.len();
        handlers.retain(|t| {
            if !is_ours(t) {
                return true;
            }
            !std::mem::replace(&mut placed, true)
        });
        for t in handlers.iter_mut().filter(|t| is_ours(t)) {
            if t.get("command").and_then(Item::as_str) != Some(hook) {
                t.insert("command", value(hook));
            }
        }
        if handlers.is_empty() && before > 0 {
            emptied.push(i);
        }
    }
    remove_groups(groups, &emptied);
    if !placed {
        let mut handlers = ArrayOfTables::new();
        handlers.push(handler(hook));
        let mut group = Table::new();
        group.insert("hooks", Item::ArrayOfTables(handlers));
        groups.push(group);
    }
    Ok(())
}

/// Takes out what [`install`] added: the `opfs` MCP server (if its
/// command is an `opfs`) and every opfs hook handler, then the sections
/// that only held them.
///
/// Errors: as [`install`].
pub(crate) fn remove(doc: &mut DocumentMut) -> Result<(), String> {
    if let Some(servers) = doc.get_mut("mcp_servers").and_then(Item::as_table_mut) {
        let ours = servers
            .get("opfs")
            .and_then(|s| s.get("command"))
            .and_then(Item::as_str)
            .is_some_and(super::config::is_opfs_binary);
        if ours {
            servers.remove("opfs");
        }
        if servers.is_empty() {
            doc.remove("mcp_servers");
        }
    }
    if let Some(groups) = hook_groups(doc, false)? {
        let mut emptied = Vec::new();
        for (i, group) in groups.iter_mut().enumerate() {
            if let Some(handlers) = group
                .get_mut("hooks")
                .and_then(Item::as_array_of_tables_mut)
            {
                let before = handlers.len();
                handlers.retain(|t| !is_ours(t));
                if handlers.is_empty() && before > 0 {
                    emptied.push(i);
                }
            }
        }
        remove_groups(groups, &emptied);
        let empty = groups.is_empty();
        if let Some(hooks) = doc.get_mut("hooks").and_then(Item::as_table_mut) {
            if empty {
                hooks.remove(EVENT);
            }
            if hooks.is_empty() {
                doc.remove("hooks");
            }
        }
    }
    Ok(())
}

/// `hooks.UserPromptSubmit` as an array of tables, created when `create`.
fn hook_groups(doc: &mut DocumentMut, create: bool) -> Result<Option<&mut ArrayOfTables>, String> {
    let hooks = if create {
        doc.entry("hooks").or_insert_with(implicit_table)
    } else {
        match doc.get_mut("hooks") {
            Some(h) => h,
            None => return Ok(None),
        }
    };
    let hooks = hooks
        .as_table_mut()
        .ok_or("hooks is not a table of [[hooks.EVENT]] sections")?;
    let groups = if create {
        hooks
            .entry(EVENT)
            .or_insert_with(|| Item::ArrayOfTables(ArrayOfTables::new()))
    } else {
        match hooks.get_mut(EVENT) {
            Some(g) => g,
            None => return Ok(None),
        }
    };
    groups.as_array_of_tables_mut().map(Some).ok_or_else(|| {
        format!("hooks.{EVENT} is not written as [[hooks.{EVENT}]] sections (inline arrays are not edited)")
    })
}

/// Whether Codex runs opfs's hook: Codex runs a hook of the user's
/// config only once the user has reviewed and trusted it (`/hooks` in
/// Codex), and records that as `[hooks.state."KEY"] trusted_hash =
/// "sha256:…"`, where KEY is `CONFIG:user_prompt_submit:GROUP:HANDLER`
/// (the file and the handler's place in it) and the hash is over the
/// handler's normalized form. A handler whose hash no longer matches
/// (edited since, e.g. a moved binary) is skipped as unreviewed, silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodexTrust {
    /// No opfs hook in the file.
    NoHook,
    /// Reviewed and trusted as it is now: Codex runs it.
    Trusted,
    /// Never reviewed: Codex skips it.
    Untrusted {
        /// The `[hooks.state]` key Codex would record.
        key: String,
    },
    /// Reviewed when it was different (or this Codex hashes it
    /// differently): Codex skips it until it is reviewed again.
    Changed {
        /// The key.
        key: String,
    },
    /// Turned off by the user (`enabled = false`).
    Disabled {
        /// The key.
        key: String,
    },
}

/// [`CodexTrust`] of opfs's hook in `doc`, Codex's config file at
/// `config` (the path Codex names it by, as it opens it).
pub(crate) fn hook_trust(doc: &DocumentMut, config: &str) -> CodexTrust {
    let Some(groups) = doc
        .get("hooks")
        .and_then(|h| h.get(EVENT))
        .and_then(Item::as_array_of_tables)
    else {
        return CodexTrust::NoHook;
    };
    let found = groups.iter().enumerate().find_map(|(g, group)| {
        let handlers = group.get("hooks")?.as_array_of_tables()?;
        handlers
            .iter()
            .enumerate()
            .find(|(_, t)| is_ours(t))
            .map(|(h, t)| (g, h, t.clone()))
    });
    let Some((g, h, handler)) = found else {
        return CodexTrust::NoHook;
    };
    let key = format!("{config}:user_prompt_submit:{g}:{h}");
    let state = doc
        .get("hooks")
        .and_then(|h| h.get("state"))
        .and_then(|s| s.get(&key));
    if state.and_then(|s| s.get("enabled")).and_then(Item::as_bool) == Some(false) {
        return CodexTrust::Disabled { key };
    }
    match state
        .and_then(|s| s.get("trusted_hash"))
        .and_then(Item::as_str)
    {
        None => CodexTrust::Untrusted { key },
        Some(recorded) if recorded == trust_hash(&handler) => CodexTrust::Trusted,
        Some(_) => CodexTrust::Changed { key },
    }
}

/// The hash Codex records for a trusted `UserPromptSubmit` command
/// handler: SHA-256 of the compact JSON, keys sorted, of
/// `{"event_name": "user_prompt_submit", "hooks": [{"type": "command",
/// "command": …, "timeout": SECONDS (default 600), "async": …,
/// "statusMessage": … (if set)}]}` (no matcher: Codex ignores it for this
/// event), as `sha256:HEX`.
fn trust_hash(handler: &Table) -> String {
    use sha2::{Digest, Sha256};
    let command = handler.get("command").and_then(Item::as_str).unwrap_or("");
    let timeout = handler
        .get("timeout")
        .and_then(Item::as_integer)
        .unwrap_or(600)
        .max(1);
    let is_async = handler
        .get("async")
        .and_then(Item::as_bool)
        .unwrap_or(false);
    let mut h = serde_json::Map::new();
    h.insert("async".into(), is_async.into());
    h.insert("command".into(), command.into());
    if let Some(m) = handler.get("statusMessage").and_then(Item::as_str) {
        h.insert("statusMessage".into(), m.into());
    }
    h.insert("timeout".into(), timeout.into());
    h.insert("type".into(), "command".into());
    let mut identity = serde_json::Map::new();
    identity.insert("event_name".into(), "user_prompt_submit".into());
    identity.insert("hooks".into(), vec![serde_json::Value::Object(h)].into());
    let text = canonical_json(&serde_json::Value::Object(identity));
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `v` as compact JSON with every object's keys sorted, whatever order
/// `serde_json` keeps them in.
fn canonical_json(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => {
            let mut keys: Vec<_> = m.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        serde_json::Value::String(k.clone()),
                        canonical_json(&m[k])
                    )
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        serde_json::Value::Array(a) => {
            let items: Vec<String> = a.iter().map(canonical_json).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

fn remove_groups(groups: &mut ArrayOfTables, indices: &[usize]) {
    for &i in indices.iter().rev() {
        groups.remove(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = "# my settings\nmodel = \"o3\" # keep\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\n\n[[hooks.UserPromptSubmit]]\n[[hooks.UserPromptSubmit.hooks]]\ntype = \"command\"\ncommand = \"audit.sh\"\n";

    fn parse(s: &str) -> DocumentMut {
        s.parse().expect("toml")
    }

    #[test]
    fn install_keeps_the_rest_and_is_idempotent_and_remove_restores() {
        let mut doc = parse(USER);
        install(&mut doc, "/bin/opfs", &[], "/bin/opfs hook --agent codex").expect("install");
        let once = doc.to_string();
        assert!(
            once.starts_with("# my settings\nmodel = \"o3\" # keep\n"),
            "{once}"
        );
        assert!(once.contains("command = \"audit.sh\""), "{once}");
        assert!(once.contains("[mcp_servers.opfs]"), "{once}");
        assert!(
            once.contains(
                r#"env_vars = ["OPFS_HOME", "OPFS_MCP_SOCKET", "OPFS_CONFIG", "XDG_DATA_HOME"]"#
            ),
            "{once}"
        );
        assert!(!once.contains("env ="), "{once}");
        assert!(
            once.contains("command = \"/bin/opfs hook --agent codex\""),
            "{once}"
        );
        let mut again = parse(&once);
        install(&mut again, "/bin/opfs", &[], "/bin/opfs hook --agent codex").expect("again");
        assert_eq!(again.to_string(), once);
        let mut back = parse(&once);
        remove(&mut back).expect("remove");
        assert_eq!(back.to_string(), USER);
    }

    #[test]
    fn a_moved_binary_is_updated_in_place() {
        let mut doc = parse("");
        install(&mut doc, "/old/opfs", &[], "/old/opfs hook --agent codex").expect("install");
        install(&mut doc, "/new/opfs", &[], "/new/opfs hook --agent codex").expect("update");
        let s = doc.to_string();
        assert!(!s.contains("/old/"), "{s}");
        assert_eq!(s.matches("hook --agent codex").count(), 1, "{s}");
        remove(&mut doc).expect("remove");
        assert_eq!(doc.to_string().trim(), "");
    }

    #[test]
    fn an_older_server_table_gets_the_variables_and_keeps_the_users_keys() {
        let old = "[mcp_servers.opfs]\ncommand = \"/bin/opfs\"\nargs = [\"mcp\"]\nstartup_timeout_sec = 30\nenv_vars = [\"MINE\"]\n";
        let mut doc = parse(old);
        install(&mut doc, "/bin/opfs", &[], "/bin/opfs hook --agent codex").expect("install");
        let s = doc.to_string();
        assert!(s.contains("startup_timeout_sec = 30"), "{s}");
        assert!(
            s.contains(r#"env_vars = ["MINE", "OPFS_HOME", "OPFS_MCP_SOCKET", "OPFS_CONFIG", "XDG_DATA_HOME"]"#),
            "{s}"
        );
    }

    #[test]
    fn a_state_elsewhere_is_written_as_env_and_updated() {
        let mut doc = parse("");
        install(&mut doc, "/bin/opfs", &[], "/bin/opfs hook --agent codex").expect("install");
        let env = [("OPFS_HOME".to_string(), "/srv/opfs".to_string())];
        install(&mut doc, "/bin/opfs", &env, "/bin/opfs hook --agent codex").expect("update");
        let s = doc.to_string();
        assert!(s.contains(r#"env = { OPFS_HOME = "/srv/opfs" }"#), "{s}");
        let mut again = parse(&s);
        install(
            &mut again,
            "/bin/opfs",
            &env,
            "/bin/opfs hook --agent codex",
        )
        .expect("again");
        assert_eq!(again.to_string(), s);
    }

    #[test]
    fn codex_trust_is_read_with_codexs_own_hash() {
        // A hash Codex recorded for this handler (a published fixture of
        // another tool whose hook Codex trusted; same normalization).
        let cmd = r#"gwt_bin="${GWT_BIN_PATH:-/Applications/GWT.app/Contents/MacOS/gwtd}"; "$gwt_bin" hook event UserPromptSubmit"#;
        let mut t = Table::new();
        t.insert("type", value("command"));
        t.insert("command", value(cmd));
        assert_eq!(
            trust_hash(&t),
            "sha256:1a86ba6796c5b5bf1601fd1af1d6094846287ec85e9f1ad4d39335c6b306e2fa"
        );

        let mut doc = parse(USER);
        assert_eq!(
            hook_trust(&doc, "/h/.codex/config.toml"),
            CodexTrust::NoHook
        );
        install(&mut doc, "/bin/opfs", &[], "/bin/opfs hook --agent codex").expect("install");
        // opfs's handler is the first of the second group (the user's
        // audit.sh group comes first).
        let key = "/h/.codex/config.toml:user_prompt_submit:1:0".to_string();
        assert_eq!(
            hook_trust(&doc, "/h/.codex/config.toml"),
            CodexTrust::Untrusted { key: key.clone() }
        );
        let ours = doc["hooks"][EVENT]
            .as_array_of_tables()
            .expect("groups")
            .get(1)
            .expect("g")["hooks"]
            .as_array_of_tables()
            .expect("handlers")
            .get(0)
            .expect("h")
            .clone();
        let trusted = format!(
            "{}\n[hooks.state.\"{key}\"]\ntrusted_hash = \"{}\"\n",
            doc,
            trust_hash(&ours)
        );
        assert_eq!(
            hook_trust(&parse(&trusted), "/h/.codex/config.toml"),
            CodexTrust::Trusted
        );
        let changed = trusted.replace("/bin/opfs hook", "/usr/bin/opfs hook");
        assert_eq!(
            hook_trust(&parse(&changed), "/h/.codex/config.toml"),
            CodexTrust::Changed { key: key.clone() }
        );
        let off = format!("{trusted}enabled = false\n");
        assert_eq!(
            hook_trust(&parse(&off), "/h/.codex/config.toml"),
            CodexTrust::Disabled { key }
        );
    }

    #[test]
    fn shapes_opfs_does_not_edit_are_refused() {
        let mut doc = parse("hooks = 3\n");
        assert!(install(&mut doc, "/o", &[], "/o hook").is_err());
        let mut doc = parse("[hooks]\nUserPromptSubmit = [{ hooks = [] }]\n");
        assert!(install(&mut doc, "/o", &[], "/o hook").is_err());
    }
}
