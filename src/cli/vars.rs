//! Every `OPFS_*` environment variable opfs reads, declared once.
//!
//! [`VARS`] is the one list: [`super::Env::read`] parses the tuning
//! variables through it ([`tuning_from`]), and the tables in `docs/cli.md`
//! ("Environment") and `docs/benchmarks.md` ("Measurement levers") are
//! rendered from it ([`render`]; a test fails when a page differs and
//! prints the table to paste). The defaults shown come from the code
//! (`opfs_fs::Options::default()` and the core's constants), not from the
//! text. The library never sees a variable's name: it gets an
//! [`FsTuning`] and plain values.

use std::time::Duration;

use opfs::daemon::{parse_range_min, FsTuning};

/// Who a variable is for, and so which page documents it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A setting a user may change (`docs/cli.md`, "Environment").
    User,
    /// Set by opfs for a process it starts; read there (`docs/cli.md`).
    Passed,
    /// A kernel capability or cache policy that is on by default and can be
    /// turned off to measure or diagnose it (`docs/benchmarks.md`,
    /// "Measurement levers"). Not a product setting.
    Lever,
}

/// One environment variable. `kind`, `default` and `doc` feed the docs
/// tables, which the tests render and compare.
#[cfg_attr(not(test), allow(dead_code))]
pub struct Var {
    /// Its name.
    pub name: &'static str,
    /// Who it is for.
    pub kind: Kind,
    /// The value in effect when it is unset, as the docs show it.
    pub default: fn() -> String,
    /// What it does (one Markdown cell).
    pub doc: &'static str,
    /// How a value sets the FUSE tuning; `None`: [`super::Env::read`]
    /// reads it itself. A value that does not parse keeps the default.
    pub tune: Option<fn(&str, &mut FsTuning)>,
}

fn ms(v: &str) -> Option<Duration> {
    v.parse::<u64>().ok().map(Duration::from_millis)
}

/// A lever is on unless it is `0`.
fn flag(v: &str) -> bool {
    v != "0"
}

fn on_off(b: bool) -> String {
    if b { "1" } else { "0" }.to_string()
}

fn fs_default() -> opfs_fs::Options {
    opfs_fs::Options::default()
}

/// The list, in the order the docs show it.
pub const VARS: &[Var] = &[
    Var {
        name: "OPFS_HOME",
        kind: Kind::User,
        default: || "`$XDG_DATA_HOME/opfs`, else `~/.local/share/opfs`".into(),
        doc: "where opfs keeps all state: one state dir per project, the mount registry, daemon logs (`docs/format.md`)",
        tune: None,
    },
    Var {
        name: "OPFS_CONFIG",
        kind: Kind::User,
        default: || "`$XDG_CONFIG_HOME/opfs/config.toml`, else `~/.config/opfs/config.toml`".into(),
        doc: "the configuration file (`[retention]`, `[record] exclude`, `[sandbox]`)",
        tune: None,
    },
    Var {
        name: "OPFS_PAGER",
        kind: Kind::User,
        default: || format!("`$PAGER`, else `{}`", super::pager::DEFAULT_PAGER),
        doc: "the pager for `diff` and `log` on a terminal; empty or `cat`: none (\"Pager and colour\")",
        tune: None,
    },
    Var {
        name: "OPFS_BWRAP",
        kind: Kind::User,
        default: || "`bwrap` on `PATH`".into(),
        doc: "the bubblewrap binary `opfs run` uses (`docs/sandbox.md`)",
        tune: None,
    },
    Var {
        name: "OPFS_HOOK_STRICT",
        kind: Kind::User,
        default: || "unset".into(),
        doc: "`1`: `opfs hook` exits 2 when it cannot open a turn, so the agent stops (\"opfs hook\")",
        tune: None,
    },
    Var {
        name: "OPFS_RANGE_MIN",
        kind: Kind::User,
        default: || opfs::capture::DEFAULT_RANGE_MIN.to_string(),
        doc: "bytes from which a file written in place is captured as ranges; `off`: never (`--range-min` overrides it; `docs/ranges.md`). Anything else is bad usage (exit 2)",
        tune: None,
    },
    Var {
        name: "OPFS_KEEP_MIN",
        kind: Kind::User,
        default: || opfs::capture::DEFAULT_KEEP_MIN.to_string(),
        doc: "files of more than this many bytes removed or renamed over through the mount are kept (the inode linked into the state dir) instead of copied; `off`: never (`docs/design.md`, \"Removals keep the inode\")",
        tune: Some(|v, t| t.keep_min = parse_range_min(v).ok().or(t.keep_min)),
    },
    Var {
        name: "OPFS_THREADS",
        kind: Kind::User,
        default: || "half the CPUs, at least 1".into(),
        doc: "FUSE worker threads (overrides `opfs mount --threads`; 0 is ignored)",
        tune: Some(|v, t| {
            if let Some(n) = v.parse::<usize>().ok().filter(|n| *n > 0) {
                t.threads = Some(n);
            }
        }),
    },
    Var {
        name: "OPFS_WATCH",
        kind: Kind::User,
        default: || "`auto`".into(),
        doc: "the watch that keeps the kernel's caches coherent with changes behind the mount: `auto` (fanotify when privileged, else inotify), `inotify`, `off` (1 s caches, no negative entries; `docs/coherence.md`)",
        tune: Some(|v, t| {
            let w = match v {
                "auto" => opfs_fs::WatchMode::Auto,
                "inotify" => opfs_fs::WatchMode::Inotify,
                "off" | "0" => opfs_fs::WatchMode::Off,
                _ => return,
            };
            t.watch = Some(w);
        }),
    },
    Var {
        name: "OPFS_ATTR_TTL_MS",
        kind: Kind::User,
        default: || fs_default().attr_ttl.as_millis().to_string(),
        doc: "how long the kernel caches attributes while the watch is active; without one at most 1000 (a worktree: 60000 unless set)",
        tune: Some(|v, t| t.attr_ttl = ms(v).or(t.attr_ttl)),
    },
    Var {
        name: "OPFS_ENTRY_TTL_MS",
        kind: Kind::User,
        default: || fs_default().entry_ttl.as_millis().to_string(),
        doc: "how long the kernel caches name lookups, as `OPFS_ATTR_TTL_MS`",
        tune: Some(|v, t| t.entry_ttl = ms(v).or(t.entry_ttl)),
    },
    Var {
        name: "OPFS_NEGATIVE_TTL_MS",
        kind: Kind::User,
        default: || fs_default().negative_ttl.as_millis().to_string(),
        doc: "how long the kernel caches a miss while the watch is active; 0: never; none without a watch",
        tune: Some(|v, t| t.negative_ttl = ms(v).or(t.negative_ttl)),
    },
    Var {
        name: "OPFS_INODE_FDS",
        kind: Kind::User,
        default: || "the soft `RLIMIT_NOFILE` minus an eighth (at least 256)".into(),
        doc: "most descriptors the inode table keeps open before it closes some and reopens them by name",
        tune: Some(|v, t| {
            if let Ok(n) = v.parse::<usize>() {
                t.inode_fds = Some(n);
            }
        }),
    },
    Var {
        name: "OPFS_SANDBOX",
        kind: Kind::Passed,
        default: || "unset".into(),
        doc: "set by `opfs run` inside its sandbox to the sandbox's mode; `opfs hook` there (unless `danger-full-access`) opens its turn through the run's narrow socket (`OPFS_MCP_SOCKET`), or says why it cannot, exit 0 (docs/sandbox.md, \"Turns opened from inside\")",
        tune: None,
    },
    Var {
        name: "OPFS_MCP_SOCKET",
        kind: Kind::Passed,
        default: || "unset".into(),
        doc: "set by `opfs run` inside its sandbox: the narrow socket `opfs mcp` talks to there (`docs/mcp.md`)",
        tune: None,
    },
    Var {
        name: "OPFS_WORKTREE",
        kind: Kind::Passed,
        default: || "unset".into(),
        doc: "set by `opfs run --worktree NAME` and `opfs shell --worktree NAME` to NAME: the worktree the project's path shows there (`docs/worktrees.md`, \"One path\")",
        tune: None,
    },
    Var {
        name: "OPFS_NO_OPEN",
        kind: Kind::Lever,
        default: || on_off(fs_default().no_open),
        doc: "`FUSE_NO_OPEN_SUPPORT` while the watch is active and the daemon has `CAP_DAC_OVERRIDE`: no OPEN, RELEASE or FLUSH of files (`fs/README.md`, \"No open\")",
        tune: Some(|v, t| t.no_open = Some(flag(v))),
    },
    Var {
        name: "OPFS_NO_OPENDIR",
        kind: Kind::Lever,
        default: || on_off(fs_default().no_opendir),
        doc: "`FUSE_NO_OPENDIR_SUPPORT` while the watch is active: no OPENDIR or RELEASEDIR, listings kept until invalidated",
        tune: Some(|v, t| t.no_opendir = Some(flag(v))),
    },
    Var {
        name: "OPFS_NO_CREATE",
        kind: Kind::Lever,
        default: || on_off(fs_default().no_create),
        doc: "CREATE answered `ENOSYS` once the kernel took `FUSE_NO_OPEN_SUPPORT`: a new file is one MKNOD (`fs/README.md`, \"No create\")",
        tune: Some(|v, t| t.no_create = Some(flag(v))),
    },
    Var {
        name: "OPFS_NO_LSEEK",
        kind: Kind::Lever,
        default: || on_off(fs_default().no_lseek),
        doc: "LSEEK answered `ENOSYS` once: the kernel answers `SEEK_DATA`/`SEEK_HOLE` from the size, reporting no holes (`fs/README.md`, \"No lseek\")",
        tune: Some(|v, t| t.no_lseek = Some(flag(v))),
    },
    Var {
        name: "OPFS_KILLPRIV_V2",
        kind: Kind::Lever,
        default: || on_off(fs_default().killpriv_v2),
        doc: "`FUSE_HANDLE_KILLPRIV_V2` once the kernel took `FUSE_NO_OPEN_SUPPORT`: the daemon clears suid/sgid itself, no GETXATTR before every write",
        tune: Some(|v, t| t.killpriv_v2 = Some(flag(v))),
    },
    Var {
        name: "OPFS_OWN_MOUNT",
        kind: Kind::Lever,
        default: || on_off(fs_default().own_mount),
        doc: "with the fanotify watch, the daemon's I/O through a private clone of the project's mount whose writes the watch ignores (`docs/coherence.md`)",
        tune: Some(|v, t| t.own_mount = Some(flag(v))),
    },
    Var {
        name: "OPFS_REALTIME",
        kind: Kind::Lever,
        default: || on_off(fs_default().realtime),
        doc: "the watch's and the invalidation thread in `SCHED_FIFO` 1 when permitted (`docs/coherence.md`, \"What limits promptness\")",
        tune: Some(|v, t| t.realtime = Some(flag(v))),
    },
];

/// The tuning that the variables `var` looks up set (the CLI passes the
/// process environment). Unset or unparsable values keep the defaults.
pub fn tuning_from(var: impl Fn(&str) -> Option<String>) -> FsTuning {
    let mut t = FsTuning::default();
    for v in VARS {
        if let (Some(tune), Some(value)) = (v.tune, var(v.name)) {
            tune(&value, &mut t);
        }
    }
    t
}

/// The Markdown table of the variables of `kind`.
#[cfg(test)]
pub fn render(kind: Kind) -> String {
    let mut out = String::from("| variable | default | what it does |\n| --- | --- | --- |\n");
    for v in VARS.iter().filter(|v| v.kind == kind) {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            v.name,
            (v.default)(),
            v.doc
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuning(pairs: &[(&str, &str)]) -> FsTuning {
        tuning_from(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn tuning_reads_only_what_parses() {
        let t = tuning(&[
            ("OPFS_ATTR_TTL_MS", "250"),
            ("OPFS_ENTRY_TTL_MS", "soon"),
            ("OPFS_THREADS", "0"),
            ("OPFS_INODE_FDS", "8"),
            ("OPFS_WATCH", "inotify"),
            ("OPFS_NEGATIVE_TTL_MS", "0"),
            ("OPFS_KEEP_MIN", "off"),
            ("OPFS_REALTIME", "0"),
            ("OPFS_NO_OPEN", "yes"),
        ]);
        assert_eq!(t.realtime, Some(false));
        assert!(!t.apply(opfs_fs::Options::default()).realtime);
        assert!(opfs_fs::Options::default().realtime);
        assert_eq!(t.keep_min, Some(u64::MAX));
        assert_eq!(t.watch, Some(opfs_fs::WatchMode::Inotify));
        assert_eq!(t.negative_ttl, Some(Duration::ZERO));
        assert_eq!(t.attr_ttl, Some(Duration::from_millis(250)));
        assert_eq!(t.entry_ttl, None);
        assert_eq!(t.no_open, Some(true));
        assert_eq!(t.no_create, None);
        assert_eq!(t.threads, None);
        assert_eq!(t.inode_fds, Some(8));
    }

    #[test]
    fn the_watch_is_on_unless_turned_off() {
        let none = tuning(&[]);
        assert_eq!(none, FsTuning::default());
        assert_eq!(
            none.apply(opfs_fs::Options::default()).watch,
            opfs_fs::WatchMode::Auto
        );
        let off = tuning(&[("OPFS_WATCH", "off")]);
        assert_eq!(
            off.apply(opfs_fs::Options::default()).watch,
            opfs_fs::WatchMode::Off
        );
        assert_eq!(tuning(&[("OPFS_WATCH", "sometimes")]).watch, None);
    }

    #[test]
    fn each_name_is_declared_once_and_user_facing_ones_stay_few() {
        let mut names: Vec<&str> = VARS.iter().map(|v| v.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a variable is declared twice");
        assert!(VARS.iter().all(|v| v.name.starts_with("OPFS_")));
        let user = VARS.iter().filter(|v| v.kind == Kind::User).count();
        assert!(user <= 13, "{user} user-facing variables: keep them few");
    }

    /// The block of `page` between `<!-- NAME -->` and `<!-- /NAME -->`.
    fn block(page: &str, name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{page}: {e}"));
        let open = format!("<!-- {name} -->\n");
        let close = format!("<!-- /{name} -->");
        let start = text
            .find(&open)
            .unwrap_or_else(|| panic!("{page} has no {open:?} marker"))
            + open.len();
        let end = text[start..]
            .find(&close)
            .unwrap_or_else(|| panic!("{page} has no {close:?} marker"))
            + start;
        text[start..end].to_string()
    }

    /// Where each kind's table is.
    const TABLES: [(&str, &str, Kind); 3] = [
        ("docs/cli.md", "vars:user", Kind::User),
        ("docs/cli.md", "vars:passed", Kind::Passed),
        ("docs/benchmarks.md", "vars:lever", Kind::Lever),
    ];

    #[test]
    fn the_docs_tables_are_the_declared_variables() {
        for (page, name, kind) in TABLES {
            let want = render(kind);
            assert_eq!(
                block(page, name),
                want,
                "{page}: the table between the {name} markers is not what \
                 src/cli/vars.rs declares; run `cargo test --bin opfs \
                 write_the_docs_tables -- --ignored`, or paste:\n{want}"
            );
        }
    }

    /// Writes the tables into the pages (run by hand after editing [`VARS`]).
    #[test]
    #[ignore = "a generator, not a check: it rewrites docs/cli.md and docs/benchmarks.md; run by hand after editing VARS"]
    fn write_the_docs_tables() {
        for (page, name, kind) in TABLES {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
            let text = std::fs::read_to_string(&path).expect("read the page");
            let old = block(page, name);
            let at = text.find(&format!("<!-- {name} -->\n")).expect("marker") + name.len() + 10;
            let new = format!("{}{}{}", &text[..at], render(kind), &text[at + old.len()..]);
            std::fs::write(&path, new).expect("write the page");
        }
    }
}
