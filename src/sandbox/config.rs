//! The user's configuration file (defaults for `opfs run`, what a mount
//! does not record, and retention).
//!
//! Location (resolved by the CLI from the environment and passed to
//! [`load`]): `$OPFS_CONFIG` if set, else `$XDG_CONFIG_HOME/opfs/config.toml`,
//! else `~/.config/opfs/config.toml`. A missing file means "all defaults".
//! The file is never read from inside a project: the agent can write the
//! project, so nothing there may widen its own sandbox.
//!
//! ```toml
//! [sandbox]
//! writable = ["~/.cache/pip"]          # extra writable roots (workspace-write)
//! hide = ["~/.config/openai"]          # unreadable inside, added to the defaults
//! secret_env = ["OPENAI_API_KEY"]      # removed from the environment inside
//! net = false                          # network by default (`--net` turns it on)
//! writable_git_config = false          # git's config and hooks writable inside
//!
//! [record]
//! exclude = ["*.log"]                   # not recorded, never restored
//! skip_regenerable = true               # ignored target/, node_modules/, .venv/...: not recorded (default)
//!
//! [projects."~/code/app".record]        # one project's own settings
//! exclude = ["data/cache/"]             # added to [record] exclude
//! skip_regenerable = false              # record its build output after all
//! [projects."~/code/app".push]          # its checkpoint remote (docs/remote.md)
//! remote = "ssh://git@host/checkpoints.git"
//! [push]
//! machine = "ci-7"                      # this machine's name on remotes (default: host name)
//! [retention]
//! keep = 100                           # turns `opfs gc` keeps (default 100)
//! max_bytes = "10G"                    # and a byte budget (none by default)
//! auto = true                          # the daemon applies it after turns
//! ```
//!
//! `[record] exclude` is read when a project is mounted (`docs/design.md`
//! "Excluded paths"); a change takes effect at the next mount.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Why the configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause, with line and column.
        source: toml::de::Error,
    },
}

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The `[sandbox]` table.
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// The `[record]` table.
    #[serde(default)]
    pub record: RecordConfig,
    /// The `[retention]` table.
    #[serde(default)]
    pub retention: RetentionConfig,
    /// The `[push]` table: checkpoint remotes (`docs/remote.md`).
    #[serde(default)]
    pub push: PushConfig,
    /// Per-project settings: `[projects."PATH".record]`, keyed by the
    /// project's path (`~/` is the user's home), kept here, outside the
    /// project.
    #[serde(default)]
    pub projects: std::collections::BTreeMap<String, ProjectConfig>,
}

/// The settings of one project (`[projects."PATH"]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    /// Its `[projects."PATH".record]` table: added to, or overriding, the
    /// global `[record]` table for this project.
    #[serde(default)]
    pub record: RecordConfig,
    /// Its `[projects."PATH".push]` table: its checkpoint remote, over the
    /// global `[push]` table's.
    #[serde(default)]
    pub push: PushConfig,
}

/// Pushing the history to a checkpoint remote (the `[push]` table, and a
/// project's `[projects."PATH".push]`; `docs/remote.md`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushConfig {
    /// The git remote (a URL or path `git push` takes). A project's own
    /// wins over the global one.
    pub remote: Option<String>,
    /// Push after every turn while mounted. Unset: on when a remote is
    /// configured (a project's own setting wins).
    pub auto: Option<bool>,
    /// This machine's name in the remote's namespace (global only). Unset:
    /// the host name.
    pub machine: Option<String>,
    /// Seconds between the automatic pusher's attempts after a failure
    /// (global only). Unset: 60.
    pub retry_seconds: Option<u64>,
    /// Seconds one `git` run that talks to the remote (a push, a fetch of
    /// `opfs remote`), or one request to the bucket (a part or a range of
    /// at most 16 MiB), may take before it is stopped and counted as a
    /// failed push (global only). Unset: 600.
    pub timeout_seconds: Option<u64>,
    /// The bucket that receives the bytes behind pointer files
    /// (`s3://BUCKET[/PREFIX]`). A project's own wins.
    pub bucket: Option<String>,
    /// The bucket's endpoint, for an S3-compatible service other than AWS
    /// (`http://127.0.0.1:9000`). Unset: `$AWS_ENDPOINT_URL`, else AWS.
    pub bucket_endpoint: Option<String>,
    /// The bucket's region. Unset: `$AWS_REGION`, `$AWS_DEFAULT_REGION`,
    /// else `us-east-1`.
    pub bucket_region: Option<String>,
    /// The most bytes of objects one turn may send to the bucket: bytes
    /// (an integer) or a size with a suffix (`"2GiB"`); `0` or `"none"`:
    /// no limit. A project's own wins. Unset: 2 GiB
    /// (`docs/remote.md`, "The per-turn budget").
    pub bucket_turn_budget: Option<Size>,
}

impl Config {
    /// The `[projects."PATH"]` entry of `project` (a canonical path): the
    /// first whose key, `~/` expanded with `home` and canonicalized (when
    /// it exists), is `project`.
    pub fn project(&self, project: &Path, home: Option<&Path>) -> Option<&ProjectConfig> {
        self.projects.iter().find_map(|(k, v)| {
            let p = match home {
                Some(h) => expand_home(k, h),
                None => PathBuf::from(k),
            };
            let p = std::fs::canonicalize(&p).unwrap_or(p);
            (p == project).then_some(v)
        })
    }
}

/// What a mount records (the `[record]` table).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordConfig {
    /// Gitignore patterns of paths the mount does not record and a rewind
    /// never restores (`crate::paths::Exclude`), on top of `.git/`. A
    /// project's own list is added to the global one.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Leave the regenerable directories the project's ignore rules ignore
    /// (`crate::export::REGENERABLE`) out of recording. Unset: true (a
    /// project's own setting wins over the global one).
    pub skip_regenerable: Option<bool>,
}

/// Retention (the `[retention]` table): the defaults of `opfs gc`, and
/// whether the daemon applies them by itself after turns
/// (`docs/cli.md`, "gc"). Values are as written; the CLI checks them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// Keep at least the newest this many turns (signed, so that a
    /// negative value is reported by the CLI's check, not as a type error).
    pub keep: Option<i64>,
    /// Drop more old turns until the kept blobs take at most this: bytes
    /// (an integer) or a size with a suffix (`"10G"`).
    pub max_bytes: Option<Size>,
    /// Drop only turns that ended at least this many days ago (signed,
    /// for the CLI's check). Unset with no `keep` or `max_bytes` either:
    /// the default policy's 30 days.
    pub keep_days: Option<i64>,
    /// Apply the policy automatically after turns while mounted. Unset:
    /// on (with no other key set, the default policy: 100 turns and 30
    /// days).
    pub auto: Option<bool>,
}

/// A size in the configuration: bytes, or text such as `"512M"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Size {
    /// A number of bytes (signed, so that a negative value is reported
    /// by the CLI's check, not as a type error).
    Bytes(i64),
    /// A number with a suffix, as `opfs gc --max-bytes` takes it.
    Text(String),
}

/// Defaults for `opfs run` (the `[sandbox]` table).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// Extra writable roots in `workspace-write` mode (`~/` is the user's
    /// home). Roots that do not exist are skipped.
    #[serde(default)]
    pub writable: Vec<String>,
    /// Extra paths made unreadable inside the sandbox, on top of the
    /// built-in credential list.
    #[serde(default)]
    pub hide: Vec<String>,
    /// Environment variables removed inside the sandbox, on top of the
    /// built-in list.
    #[serde(default)]
    pub secret_env: Vec<String>,
    /// Give the sandbox the network by default.
    #[serde(default)]
    pub net: bool,
    /// Leave what git executes or trusts (`.git/config`, hooks, `info/`,
    /// includes...) writable inside, as `--writable-git-config` does.
    #[serde(default)]
    pub writable_git_config: bool,
}

/// Reads the configuration at `path`; a missing file gives the defaults.
/// Errors: the file exists but cannot be read, or does not parse (unknown
/// keys are errors, so a typo does not silently weaken the sandbox).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// `text` with a leading `~/` (or a lone `~`) replaced by `home`.
pub fn expand_home(text: &str, home: &Path) -> PathBuf {
    if text == "~" {
        home.to_path_buf()
    } else if let Some(rest) = text.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(text)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let c: Config = toml::from_str(
            "[sandbox]\nwritable = [\"~/.cache/pip\"]\nhide = [\"/x\"]\nsecret_env = [\"A\"]\nnet = true\n",
        )
        .unwrap();
        assert_eq!(c.sandbox.writable, vec!["~/.cache/pip"]);
        assert_eq!(c.sandbox.hide, vec!["/x"]);
        assert_eq!(c.sandbox.secret_env, vec!["A"]);
        assert!(c.sandbox.net);
    }

    #[test]
    fn per_project_record_settings() {
        let c: Config = toml::from_str(
            "[record]\nexclude = [\"*.log\"]\nskip_regenerable = true\n\n\
             [projects.\"~/code/app\".record]\nskip_regenerable = false\nexclude = [\"cache/\"]\n",
        )
        .unwrap();
        let own = c
            .project(Path::new("/home/u/code/app"), Some(Path::new("/home/u")))
            .unwrap();
        assert_eq!(own.record.skip_regenerable, Some(false));
        assert_eq!(own.record.exclude, ["cache/"]);
        assert!(c
            .project(Path::new("/home/u/code/other"), Some(Path::new("/home/u")))
            .is_none());
        assert!(toml::from_str::<Config>("[projects.\"/p\".record]\nexclud = []\n").is_err());
    }

    #[test]
    fn record_exclude_list() {
        let c: Config = toml::from_str("[record]\nexclude = [\"target/\", \"*.log\"]\n").unwrap();
        assert_eq!(c.record.exclude, vec!["target/", "*.log"]);
        assert!(toml::from_str::<Config>("[record]\nexclud = []\n").is_err());
    }

    #[test]
    fn parses_a_retention_table() {
        let c: Config =
            toml::from_str("[retention]\nkeep = 20\nmax_bytes = \"1G\"\nauto = false\n").unwrap();
        assert_eq!(c.retention.keep, Some(20));
        assert_eq!(c.retention.max_bytes, Some(Size::Text("1G".into())));
        assert_eq!(c.retention.auto, Some(false));
        let c: Config = toml::from_str("[retention]\nmax_bytes = 4096\n").unwrap();
        assert_eq!(c.retention.max_bytes, Some(Size::Bytes(4096)));
        assert!(toml::from_str::<Config>("[retention]\nkeeep = 1\n").is_err());
    }

    #[test]
    fn unknown_keys_are_errors() {
        assert!(toml::from_str::<Config>("[sandbox]\nwritabel = []\n").is_err());
    }

    #[test]
    fn missing_file_is_default() {
        let c = load(Path::new("/nonexistent/opfs/config.toml")).unwrap();
        assert!(c.sandbox.writable.is_empty() && !c.sandbox.net);
    }

    #[test]
    fn tilde_expands_to_home() {
        let h = Path::new("/home/u");
        assert_eq!(expand_home("~/.ssh", h), PathBuf::from("/home/u/.ssh"));
        assert_eq!(expand_home("~", h), PathBuf::from("/home/u"));
        assert_eq!(expand_home("/etc/x", h), PathBuf::from("/etc/x"));
    }
}
