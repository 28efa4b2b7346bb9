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

/// The `[mcp_servers.opfs]` table.
fn mcp_server(opfs: &str) -> Table {
    let mut t = Table::new();
    t.insert("command", value(opfs));
    let mut args = Array::new();
    args.push("mcp");
    t.insert("args", value(args));
    t
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
pub(crate) fn install(doc: &mut DocumentMut, opfs: &str, hook: &str) -> Result<(), String> {
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(implicit_table)
        .as_table_mut()
        .ok_or("mcp_servers is not a table of [mcp_servers.NAME] sections")?;
    let current = servers.get("opfs").and_then(Item::as_table);
    let same = current.is_some_and(|t| {
        t.get("command").and_then(Item::as_str) == Some(opfs)
            && t.get("args")
                .and_then(Item::as_array)
                .is_some_and(|a| a.len() == 1 && a.get(0).and_then(|v| v.as_str()) == Some("mcp"))
    });
    if !same {
        servers.insert("opfs", Item::Table(mcp_server(opfs)));
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
        install(&mut doc, "/bin/opfs", "/bin/opfs hook --agent codex").expect("install");
        let once = doc.to_string();
        assert!(
            once.starts_with("# my settings\nmodel = \"o3\" # keep\n"),
            "{once}"
        );
        assert!(once.contains("command = \"audit.sh\""), "{once}");
        assert!(once.contains("[mcp_servers.opfs]"), "{once}");
        assert!(
            once.contains("command = \"/bin/opfs hook --agent codex\""),
            "{once}"
        );
        let mut again = parse(&once);
        install(&mut again, "/bin/opfs", "/bin/opfs hook --agent codex").expect("again");
        assert_eq!(again.to_string(), once);
        let mut back = parse(&once);
        remove(&mut back).expect("remove");
        assert_eq!(back.to_string(), USER);
    }

    #[test]
    fn a_moved_binary_is_updated_in_place() {
        let mut doc = parse("");
        install(&mut doc, "/old/opfs", "/old/opfs hook --agent codex").expect("install");
        install(&mut doc, "/new/opfs", "/new/opfs hook --agent codex").expect("update");
        let s = doc.to_string();
        assert!(!s.contains("/old/"), "{s}");
        assert_eq!(s.matches("hook --agent codex").count(), 1, "{s}");
        remove(&mut doc).expect("remove");
        assert_eq!(doc.to_string().trim(), "");
    }

    #[test]
    fn shapes_opfs_does_not_edit_are_refused() {
        let mut doc = parse("hooks = 3\n");
        assert!(install(&mut doc, "/o", "/o hook").is_err());
        let mut doc = parse("[hooks]\nUserPromptSubmit = [{ hooks = [] }]\n");
        assert!(install(&mut doc, "/o", "/o hook").is_err());
    }
}
