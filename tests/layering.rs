//! The module layering of the `opfs` crate, checked: every `crate::X` (and,
//! in the binary, `opfs::X`) reference in `src/` must be an edge the table
//! in `docs/architecture.md` allows. Cargo sees cycles between crates, not
//! between modules; this test is what keeps the layers pointing one way.
//! Two more rules of `docs/architecture.md` are checked the same way: the
//! state dir's file names are spelled only in `store/layout.rs`, and only
//! `cli::Env` reads the environment.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layer of each top-level module, lowest first. A module may use the
/// modules listed for it in `ALLOWED` and nothing else of the crate;
/// `@below` stands for every module of layers L0-L3 (`BELOW_PROCESSES`).
const BELOW_PROCESSES: &[&str] = &[
    "paths",
    "failpoint",
    "record",
    "tree",
    "store",
    "state",
    "view",
    "capture",
    "restore",
    "rewind",
    "history",
    "diff",
    "export",
    "gc",
    "verify",
    "worktree",
    "remote",
];

const ALLOWED: &[(&str, &[&str])] = &[
    // L0: leaves (pure data and helpers, no I/O of the project)
    ("paths", &[]),
    ("failpoint", &[]),
    ("integrate", &[]),
    ("record", &["paths"]),
    // L1: project access, storage, and where state lives
    ("tree", &["paths", "record"]),
    ("store", &["paths", "record"]),
    ("state", &["store", "record", "paths"]),
    // L2: the project at a turn, and capture
    ("view", &["store", "tree", "record", "paths"]),
    // capture: `Exclusive::unmounted` borrows the state lock
    (
        "capture",
        &[
            "view",
            "store",
            "state",
            "tree",
            "failpoint",
            "record",
            "paths",
        ],
    ),
    // L3: operations (restore, rewind) and the read side, which never
    // sees capture or the daemon
    (
        "restore",
        &[
            "capture",
            "view",
            "store",
            "tree",
            "failpoint",
            "record",
            "paths",
        ],
    ),
    (
        "rewind",
        &[
            "restore",
            "capture",
            "view",
            "store",
            "state",
            "tree",
            "failpoint",
            "record",
            "paths",
        ],
    ),
    ("history", &["view", "store", "tree", "record", "paths"]),
    (
        "diff",
        &["history", "view", "store", "tree", "record", "paths"],
    ),
    (
        "export",
        &[
            "history",
            "view",
            "store",
            "state",
            "tree",
            "failpoint",
            "record",
            "paths",
        ],
    ),
    (
        "gc",
        &[
            "export",
            "worktree",
            "capture",
            "view",
            "store",
            "failpoint",
            "state",
            "record",
            "paths",
        ],
    ),
    // worktrees: the lower layer (a view), the changes, the merge (a
    // restore), its history as its view and its branch of the export, its
    // life (the pins lock and the mount table are `state`'s; the daemons
    // it starts are reached through the `life::Daemons` seam)
    (
        "worktree",
        &[
            "export",
            "diff",
            "history",
            "rewind",
            "restore",
            "capture",
            "view",
            "store",
            "state",
            "tree",
            "failpoint",
            "record",
            "paths",
        ],
    ),
    ("verify", &["view", "store", "tree", "record", "paths"]),
    // checkpoint remotes: the export repository pushed, read back
    (
        "remote",
        &[
            "export",
            "worktree",
            "history",
            "store",
            "state",
            "failpoint",
            "paths",
        ],
    ),
    // L4: processes: anything of L0-L3, and the processes listed
    ("control", &["@below"]),
    ("daemon", &["control", "@below"]),
    // the agent tools over MCP: worktrees (daemon) and read-only history
    ("mcp", &["daemon", "control", "@below"]),
    (
        "sandbox",
        &[
            "mcp", "daemon", "control", "worktree", "state", "store", "record", "paths",
        ],
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for the crate
/// roots); the binaries' files (`main.rs`, `cli/`, and the small hook
/// binary `bin/opfs-hook.rs`) are the module `cli`.
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.as_str() {
        "lib.rs" => None,
        "main.rs" | "bin" => Some("cli".to_string()),
        name => Some(name.trim_end_matches(".rs").to_string()),
    }
}

/// Code with line comments (and so doc comments) removed: intra-doc links
/// are not dependencies.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every top-level module named after `prefix` (`crate::` or `opfs::`),
/// including each first name of a `prefix{a, b::c}` group.
fn references(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(i) = code[at..].find(prefix) {
        let start = at + i;
        at = start + prefix.len();
        // `opfs::` must not be the tail of another name (`opfs_fs::` is not it).
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let rest = &code[at..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            let mut first_of_item = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => first_of_item = true,
                    c if depth == 1 && first_of_item && (c.is_alphanumeric() || c == '_') => {
                        item.push(c);
                        continue;
                    }
                    _ => {}
                }
                if !item.is_empty() {
                    found.insert(std::mem::take(&mut item));
                    first_of_item = false;
                }
            }
            if !item.is_empty() {
                found.insert(item);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

#[test]
fn modules_use_only_the_layers_below_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, uses)| {
            let mut set: BTreeSet<&str> = uses.iter().copied().filter(|u| *u != "@below").collect();
            if uses.contains(&"@below") {
                set.extend(BELOW_PROCESSES.iter().copied());
            }
            (*m, set)
        })
        .collect();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let mut bad = Vec::new();
    let mut seen = BTreeSet::new();
    for file in &files {
        let rel = file.strip_prefix(&root).expect("under src");
        let Some(module) = module_of(rel) else {
            continue;
        };
        seen.insert(module.clone());
        let text = code(&std::fs::read_to_string(file).expect("read source"));
        let prefix = if module == "cli" { "opfs::" } else { "crate::" };
        for used in references(&text, prefix) {
            if used == module || (module == "cli" && used == "cli") {
                continue;
            }
            if module == "cli" {
                // The binary is the top layer: it may use every library module.
                if !allowed.contains_key(used.as_str()) {
                    bad.push(format!(
                        "{}: uses opfs::{used}, which is not a known module",
                        rel.display()
                    ));
                }
                continue;
            }
            match allowed.get(module.as_str()) {
                None => bad.push(format!(
                    "{}: module `{module}` has no row in the layering table (add it to tests/layering.rs and docs/architecture.md)",
                    rel.display()
                )),
                Some(ok) if !ok.contains(used.as_str()) => bad.push(format!(
                    "{}: `{module}` uses crate::{used}, an edge the layering table does not allow",
                    rel.display()
                )),
                Some(_) => {}
            }
        }
    }
    for (module, _) in ALLOWED {
        assert!(
            seen.contains(*module),
            "the layering table names `{module}`, which is not a module of src/ any more"
        );
    }
    assert!(bad.is_empty(), "layering violations:\n{}", bad.join("\n"));
}

#[test]
fn the_reference_scanner_sees_groups_and_paths() {
    let text = "use crate::{store::Index, view::{TurnView, chain}, paths};\nlet x = crate::record::Stat::default();\nuse opfs_fs::Errno;";
    let found = references(&code(text), "crate::");
    let want: BTreeSet<String> = ["store", "view", "paths", "record"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(found, want);
    assert!(references("use opfs_fs::x;", "opfs::").is_empty());
}

/// The non-test code of every file of `src/` (comments removed, a file's
/// inline `#[cfg(test)] mod tests` and `tests.rs` files left out), by path
/// relative to `src/`.
fn production_code() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|f| !f.ends_with("tests.rs"))
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("read source");
            // A file's inline test module comes last.
            let text = match text.find("#[cfg(test)]\nmod tests {") {
                Some(i) => text[..i].to_string(),
                None => text,
            };
            let rel = f.strip_prefix(&src).expect("under src").to_path_buf();
            (rel, code(&text))
        })
        .collect()
}

/// The names `store/layout.rs` gives files of a state dir: its `&str`
/// constants and the arguments of `scoped`/`shared`.
fn layout_names() -> BTreeSet<String> {
    let layout = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/layout.rs");
    let text = code(&std::fs::read_to_string(layout).expect("read layout.rs"));
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let at = [": &str = \"", ".scoped(\"", ".shared(\""]
            .iter()
            .find_map(|m| line.find(m).map(|i| i + m.len()));
        if let Some(start) = at {
            if let Some(len) = line[start..].find('"') {
                names.insert(line[start..start + len].to_string());
            }
        }
    }
    names
}

/// A state dir's file names are spelled in `src/store/layout.rs` only; the
/// rest of the code asks a `StateDir` or uses the layout's constants.
/// Checked are the names that cannot be an ordinary word (`export.git`,
/// `mount-sync`, ...) and `worktrees`; the latter also names git's own
/// folder and a JSON key, in the places listed.
#[test]
fn state_dir_names_live_in_the_layout() {
    let names: Vec<String> = layout_names()
        .into_iter()
        .filter(|n| n.contains('.') || n.contains('-') || n == "worktrees")
        .collect();
    for must in [
        "export.git",
        "mount-sync",
        "worktrees",
        "daemon.log",
        "index.db",
    ] {
        assert!(
            names.iter().any(|n| n == must),
            "store/layout.rs no longer names {must:?}: {names:?}"
        );
    }
    let other_meanings = [
        ("sandbox/git.rs", "worktrees"),
        ("cli/commands/export.rs", "worktrees"),
        ("mcp/tools/mod.rs", "worktrees"),
        ("mcp/tools/output.rs", "worktrees"),
    ];
    let mut found = Vec::new();
    for (rel, code) in production_code() {
        if rel == Path::new("store/layout.rs") {
            continue;
        }
        for name in &names {
            let quoted = format!("\"{name}\"");
            let byte_string = format!("b{quoted}");
            let hits = code.matches(&quoted).count() - code.matches(&byte_string).count();
            let allowed = other_meanings
                .iter()
                .any(|(f, n)| rel == Path::new(f) && n == name);
            if hits > 0 && !allowed {
                found.push(format!("{}: {quoted}", rel.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "state dir names spelled outside src/store/layout.rs (use its constants or \
         a StateDir method): {found:#?}"
    );
}

/// Only `cli::Env` (`src/cli/mod.rs`) reads environment variables, the
/// failpoint test hook's `OPFS_FAILPOINT` too (`opfs::failpoint::arm`);
/// and the small hook binary (`src/bin/opfs-hook.rs`), a command line of
/// its own, the few that `opfs hook` reads.
#[test]
fn only_the_cli_env_reads_the_environment() {
    let readers = ["env::var(", "env::var_os(", "env::vars(", "env::vars_os("];
    let mut found = Vec::new();
    for (rel, code) in production_code() {
        if rel == Path::new("cli/mod.rs") || rel == Path::new("bin/opfs-hook.rs") {
            continue;
        }
        for r in readers {
            if code.contains(r) {
                found.push(format!("{}: {r}", rel.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "environment read outside cli::Env (add the variable to src/cli/vars.rs \
         or cli::Env and pass the value down): {found:#?}"
    );
}
