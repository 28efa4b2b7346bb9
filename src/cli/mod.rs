//! The `opfs` command line: parses arguments, reads the environment (the
//! only place that does), runs one command and maps its outcome to an exit
//! code. Routing between the daemon and the state dir is in
//! `opfs::control::client`, starting the daemon in `opfs::daemon`.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use opfs::control::Project;
use opfs::state;
use opfs::store::StateDir;

mod args;
mod commands;
mod error;
mod output;
mod pager;
mod pathspec;
mod progress;
mod refs;
mod vars;

use args::{Cli, Cmd};
use error::{CommandError, ErrorKind};
use output::Format;

/// What the commands read from the environment, read once in [`main`].
#[derive(Debug, Clone)]
pub struct Env {
    /// The opfs home (`$OPFS_HOME`, else from `$XDG_DATA_HOME` / `$HOME`).
    pub opfs_home: PathBuf,
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// `$OPFS_RANGE_MIN`, as given.
    pub range_min: Option<OsString>,
    /// The FUSE tuning the variables of [`vars::VARS`] set.
    pub tuning: opfs::daemon::FsTuning,
    /// `$OPFS_BWRAP`.
    pub bwrap: Option<PathBuf>,
    /// `$OPFS_HOOK_STRICT` is `1`: `opfs hook` fails when it cannot open a
    /// turn.
    pub hook_strict: bool,
    /// `$OPFS_SANDBOX`, which `opfs run` sets inside its sandbox to its
    /// mode.
    pub sandbox: Option<OsString>,
    /// `$OPFS_MCP_SOCKET` if not empty: the narrow socket `opfs run`
    /// names inside its sandbox.
    pub mcp_socket: Option<PathBuf>,
    /// `$SHELL`: what `opfs shell` starts without a command.
    pub shell: Option<OsString>,
    /// What `opfs run` needs besides.
    pub run: opfs::sandbox::RunEnv,
    /// The configuration file (`$OPFS_CONFIG`, else from
    /// `$XDG_CONFIG_HOME` / `$HOME`), if any can be named.
    pub config: Option<PathBuf>,
    /// The terminal: stdout a tty, the pager, `NO_COLOR`.
    pub term: pager::TermEnv,
    /// What `git` gets when it talks to a checkpoint remote
    /// ([`opfs::remote::GitEnv::NAMES`]).
    pub git: opfs::remote::GitEnv,
    /// The standard AWS variables set ([`AWS_VARS`]), for the bucket of
    /// big files.
    pub aws: std::collections::BTreeMap<&'static str, String>,
    /// `$OPFS_FAILPOINT`: the test hook's failpoints to arm
    /// ([`opfs::failpoint::arm`]).
    pub failpoint: Option<String>,
}

/// The AWS variables read for the bucket of big files
/// (`docs/remote.md`, "Big files").
pub const AWS_VARS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
];

impl Env {
    fn read() -> Env {
        let var = |k: &str| std::env::var_os(k);
        let nonempty = |k: &str| var(k).filter(|v| !v.is_empty());
        let config = nonempty("OPFS_CONFIG")
            .map(PathBuf::from)
            .or_else(|| {
                nonempty("XDG_CONFIG_HOME").map(|x| PathBuf::from(x).join("opfs/config.toml"))
            })
            .or_else(|| {
                nonempty("HOME").map(|h| PathBuf::from(h).join(".config/opfs/config.toml"))
            });
        Env {
            opfs_home: state::home::resolve_home(
                var("OPFS_HOME").as_deref(),
                var("XDG_DATA_HOME").as_deref(),
                var("HOME").as_deref(),
            ),
            home: var("HOME").map(PathBuf::from),
            range_min: var("OPFS_RANGE_MIN"),
            tuning: vars::tuning_from(|k| std::env::var(k).ok()),
            bwrap: var("OPFS_BWRAP").map(PathBuf::from),
            hook_strict: var("OPFS_HOOK_STRICT").is_some_and(|v| v == "1"),
            sandbox: var("OPFS_SANDBOX"),
            mcp_socket: nonempty("OPFS_MCP_SOCKET").map(PathBuf::from),
            shell: nonempty("SHELL"),
            run: opfs::sandbox::RunEnv {
                xdg_data_home: var("XDG_DATA_HOME").map(PathBuf::from),
                ssh_auth_sock: var("SSH_AUTH_SOCK").map(PathBuf::from),
                credential_files: opfs::sandbox::credential_files(nonempty),
                search_path: var("PATH"),
            },
            config,
            aws: AWS_VARS
                .iter()
                .filter_map(|k| {
                    std::env::var(k)
                        .ok()
                        .filter(|v| !v.is_empty())
                        .map(|v| (*k, v))
                })
                .collect(),
            git: opfs::remote::GitEnv {
                vars: opfs::remote::GitEnv::NAMES
                    .iter()
                    .filter_map(|k| var(k).map(|v| (OsString::from(k), v)))
                    .collect(),
                deadline: None,
                cancel: Default::default(),
            },
            failpoint: std::env::var("OPFS_FAILPOINT").ok(),
            term: pager::TermEnv {
                stdout_tty: std::io::IsTerminal::is_terminal(&io::stdout()),
                stderr_tty: std::io::IsTerminal::is_terminal(&io::stderr()),
                pager: std::env::var("OPFS_PAGER")
                    .or_else(|_| std::env::var("PAGER"))
                    .ok(),
                no_color: nonempty("NO_COLOR").is_some(),
                dumb: var("TERM").is_some_and(|t| t == "dumb"),
                less_set: var("LESS").is_some(),
            },
        }
    }
}

/// What every command gets besides its own arguments.
#[derive(Debug)]
pub struct Ctx {
    /// `-C`, if given.
    pub dir: Option<PathBuf>,
    /// `--json` or not.
    pub format: Format,
    /// How many `-v`.
    pub verbose: u8,
    /// `--color`.
    pub color: args::ColorWhen,
    /// `--no-pager`.
    pub no_pager: bool,
    /// The environment.
    pub env: Env,
}

impl Ctx {
    /// The root of all state.
    pub fn home(&self) -> &Path {
        &self.env.opfs_home
    }

    /// `-C`, else the current directory.
    pub fn dir(&self) -> PathBuf {
        self.dir
            .clone()
            .unwrap_or_else(|| std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")))
    }

    /// The state dir of the project `-C` (or the current directory) names.
    ///
    /// Errors: the directory does not exist, or no project or mountpoint
    /// contains it.
    pub fn project_state(&self) -> Result<StateDir, CommandError> {
        let dir = self.dir();
        // Inside a registered mountpoint the project is found without a
        // `stat`, and the `stat` that checks `-C` is a directory is given
        // 2 s: a stopped daemon's mount would keep it waiting.
        let registered = state::resolve_registered(self.home(), &dir);
        let meta = match &registered {
            Some(_) => state::metadata_within(&dir, Duration::from_secs(2)),
            None => Some(std::fs::metadata(&dir)),
        };
        match meta {
            None => {}
            Some(Ok(m)) if !m.is_dir() => {
                return Err(CommandError::failure(format!(
                    "-C {}: not a directory (-C names a project, a mountpoint or a directory \
                     inside one)",
                    dir.display()
                )))
            }
            Some(Ok(_)) => {}
            // A dead mount (its daemon gone) still names its project.
            Some(Err(e)) if e.raw_os_error() == Some(libc::ENOTCONN) => {}
            Some(Err(_)) => {
                return Err(CommandError::failure(format!(
                    "-C {}: no such directory",
                    dir.display()
                )))
            }
        }
        if let Some(st) = registered {
            return Ok(st);
        }
        state::resolve(self.home(), &dir).ok_or_else(|| match self.former_mount() {
            Some((mp, st)) => CommandError::failure(format!(
                "{} is not mounted any more (`opfs umount` unmounted it): it served the project {}; \
                 use `-C {}`, or mount it again",
                mp.display(),
                st.project.display(),
                st.project.display()
            )),
            None => CommandError::failure(format!(
                "{} is not an opfs project or mountpoint (no state for it in {})",
                state::absolute(&dir).display(),
                self.home().display()
            )),
        })
    }

    /// The project `-C` (or the current directory) names.
    pub fn project(&self) -> Result<Project, CommandError> {
        Ok(Project::new(self.project_state()?))
    }

    /// [`Ctx::project_state`], except that a former mountpoint that
    /// `opfs umount` unmounted names the project it served; then also a
    /// note saying so.
    ///
    /// Errors: as [`Ctx::project_state`] for anything else.
    pub fn project_state_or_former(&self) -> Result<(StateDir, Option<String>), CommandError> {
        match self.project_state() {
            Ok(st) => Ok((st, None)),
            // Inside a mountpoint mounted now, a bad `-C` is just that.
            Err(e) if state::resolve_registered(self.home(), &self.dir()).is_some() => Err(e),
            Err(e) => match self.former_mount() {
                Some((mp, st)) => {
                    let note = format!(
                        "{} is not mounted any more (`opfs umount` unmounted it); it served the project {}, shown here",
                        mp.display(),
                        st.project.display()
                    );
                    Ok((st, Some(note)))
                }
                None => Err(e),
            },
        }
    }

    /// The former mountpoint `-C` lies in, and the project it served, if
    /// `opfs umount` left a record of it ([`former_mount_entry`]) and that
    /// project still has a state dir.
    fn former_mount(&self) -> Option<(PathBuf, StateDir)> {
        let start = state::absolute(&self.dir());
        start.ancestors().find_map(|p| {
            let project = std::fs::read(former_mount_entry(self.home(), p)).ok()?;
            let project = PathBuf::from(std::ffi::OsStr::from_bytes(&project));
            let st = StateDir::for_project(self.home(), &project);
            st.exists().then(|| (p.to_path_buf(), st))
        })
    }

    /// What `git` gets when it talks to a checkpoint remote: the
    /// environment's variables, and the configuration's `[push]
    /// timeout_seconds` as the deadline of each run.
    ///
    /// Errors: as [`Ctx::config`].
    pub fn git_env(&self) -> Result<opfs::remote::GitEnv, CommandError> {
        let mut git = self.env.git.clone();
        git.deadline = self
            .config()?
            .push
            .timeout_seconds
            .map(|s| Duration::from_secs(s.max(1)));
        Ok(git)
    }

    /// The user's configuration file ([`Env::config`]); defaults when
    /// there is none.
    ///
    /// Errors: it cannot be read or does not parse (exit 1, naming it).
    pub fn config(&self) -> Result<opfs::sandbox::config::Config, CommandError> {
        match &self.env.config {
            Some(p) => opfs::sandbox::config::load(p).map_err(error::failure),
            None => Ok(Default::default()),
        }
    }

    /// The checkpoint remote of `project` (canonical): `remote` if given,
    /// else `[projects."PATH".push] remote`, else `[push] remote`; with
    /// whether it is pushed automatically after turns (`auto`, default on
    /// when a remote is configured) and the retry interval. `None` when no
    /// remote is given or configured.
    ///
    /// Errors: as [`Ctx::config`].
    pub fn push_target(
        &self,
        project: &Path,
        remote: Option<&str>,
    ) -> Result<Option<(opfs::remote::Target, bool, Duration)>, CommandError> {
        let config = self.config()?;
        let own = config.project(project, self.env.home.as_deref());
        let url = remote.map(str::to_string).or_else(|| {
            own.and_then(|p| p.push.remote.clone())
                .or_else(|| config.push.remote.clone())
        });
        let Some(url) = url else {
            return Ok(None);
        };
        let file = self
            .env
            .config
            .as_deref()
            .unwrap_or(Path::new("the configuration"))
            .display()
            .to_string();
        let remote_key = if own.and_then(|p| p.push.remote.as_ref()).is_some() {
            format!("[projects.\"{}\".push] remote", project.display())
        } else {
            "[push] remote".to_string()
        };
        if let Some(problem) = opfs::remote::url_problem(&url) {
            let from = if remote.is_some() {
                "the REMOTE argument".to_string()
            } else {
                format!("{file}: {remote_key}")
            };
            return Err(CommandError::usage(format!("{from}: {problem}")));
        }
        // A relative path on the command line is the current directory's
        // (made absolute below); in the configuration it would be each
        // reader's (the daemon's, every command's): refused.
        if remote.is_none() && opfs::remote::is_relative_path(&url) {
            return Err(CommandError::usage(format!(
                "{file}: {remote_key} {url:?} is a relative path: it would be taken from the current directory of each command and of the daemon, so one setting would name several repositories; give an absolute path (or a URL)"
            )));
        }
        // One repository is one remote, as a path or a `file://` URL.
        let url = opfs::remote::normalize_url(&url);
        if let Some(problem) = config
            .push
            .machine
            .as_deref()
            .and_then(opfs::remote::machine_problem)
        {
            return Err(CommandError::usage(format!(
                "{file}: [push] machine {problem}"
            )));
        }
        let auto = own
            .and_then(|p| p.push.auto)
            .or(config.push.auto)
            .unwrap_or(true);
        let retry = config
            .push
            .retry_seconds
            .map(|s| Duration::from_secs(s.max(1)))
            .unwrap_or(opfs::remote::DEFAULT_RETRY);
        let own_bucket = own.and_then(|p| p.push.bucket.clone());
        let bucket = own_bucket.clone().or_else(|| config.push.bucket.clone());
        if let Some(problem) = bucket
            .as_deref()
            .and_then(opfs::remote::bucket::url_problem)
        {
            let key = if own_bucket.is_some() {
                format!("[projects.\"{}\".push] bucket", project.display())
            } else {
                "[push] bucket".to_string()
            };
            return Err(CommandError::usage(format!("{file}: {key}: {problem}")));
        }
        let own_budget = own.and_then(|p| p.push.bucket_turn_budget.clone());
        let budget_key = if own_budget.is_some() {
            format!(
                "[projects.\"{}\".push] bucket_turn_budget",
                project.display()
            )
        } else {
            "[push] bucket_turn_budget".to_string()
        };
        let turn_budget = turn_budget(
            own_budget.or_else(|| config.push.bucket_turn_budget.clone()),
        )
        .map_err(|problem| CommandError::usage(format!("{file}: {budget_key}: {problem}")))?;
        let target = opfs::remote::Target {
            url,
            machine: opfs::remote::machine_name(config.push.machine.as_deref()),
            bucket: match bucket {
                Some(b) => Some(self.bucket_config(&config, &b)?),
                None => None,
            },
            turn_budget,
        };
        Ok(Some((target, auto, retry)))
    }

    /// The bucket `url` with its endpoint and region (the configuration's
    /// `[push] bucket_endpoint` / `bucket_region`, else `AWS_ENDPOINT_URL`,
    /// `AWS_REGION`, `AWS_DEFAULT_REGION`) and credentials: the AWS
    /// variables, else the profile `AWS_PROFILE` (default `default`) of
    /// `AWS_SHARED_CREDENTIALS_FILE` (default `~/.aws/credentials`).
    ///
    /// Errors: the endpoint holds a credential
    /// ([`opfs::remote::bucket::endpoint_problem`], exit 2, naming the key
    /// or variable); the credentials file exists but cannot be read.
    pub fn bucket_config(
        &self,
        config: &opfs::sandbox::config::Config,
        url: &str,
    ) -> Result<opfs::remote::bucket::BucketConfig, CommandError> {
        let aws = &self.env.aws;
        let get = |k: &str| aws.get(k).cloned();
        let mut c = opfs::remote::bucket::BucketConfig {
            url: url.to_string(),
            endpoint: config
                .push
                .bucket_endpoint
                .clone()
                .or_else(|| get("AWS_ENDPOINT_URL")),
            region: config
                .push
                .bucket_region
                .clone()
                .or_else(|| get("AWS_REGION"))
                .or_else(|| get("AWS_DEFAULT_REGION")),
            access_key_id: get("AWS_ACCESS_KEY_ID"),
            secret_access_key: get("AWS_SECRET_ACCESS_KEY"),
            session_token: get("AWS_SESSION_TOKEN"),
            timeout: config
                .push
                .timeout_seconds
                .map(|s| Duration::from_secs(s.max(1))),
        };
        if let Some(problem) = c
            .endpoint
            .as_deref()
            .and_then(opfs::remote::bucket::endpoint_problem)
        {
            let from = match (&config.push.bucket_endpoint, &self.env.config) {
                (Some(_), Some(file)) => format!("{}: [push] bucket_endpoint", file.display()),
                (Some(_), None) => "[push] bucket_endpoint".to_string(),
                (None, _) => "AWS_ENDPOINT_URL".to_string(),
            };
            return Err(CommandError::usage(format!("{from}: {problem}")));
        }
        if c.access_key_id.is_none() {
            let file = get("AWS_SHARED_CREDENTIALS_FILE")
                .map(PathBuf::from)
                .or_else(|| self.env.home.as_ref().map(|h| h.join(".aws/credentials")));
            let profile = get("AWS_PROFILE").unwrap_or_else(|| "default".into());
            if let Some(file) = file {
                match std::fs::read_to_string(&file) {
                    Ok(text) => {
                        let p = aws_profile(&text, &profile);
                        c.access_key_id = p.get("aws_access_key_id").cloned();
                        c.secret_access_key = p.get("aws_secret_access_key").cloned();
                        c.session_token = p.get("aws_session_token").cloned();
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(CommandError::failure(format!(
                            "cannot read the AWS credentials {}: {e}",
                            file.display()
                        )))
                    }
                }
            }
        }
        Ok(c)
    }

    /// What a mount of `project` (canonical) does not record, ready to
    /// match: the configuration's `[record] exclude`, then the project's
    /// own (`[projects."PATH".record] exclude`), then, unless
    /// `skip_regenerable = false` (the project's setting winning), the
    /// regenerable directories the project's ignore rules ignore now
    /// (`opfs::export::regenerable_ignored`; `docs/design.md` "What opfs
    /// keeps by default").
    ///
    /// Errors: as [`Ctx::config`], or a pattern is not valid (exit 1,
    /// naming the file and the pattern).
    pub fn record_exclude(&self, project: &Path) -> Result<opfs::paths::Exclude, CommandError> {
        let patterns = self.record_patterns(project)?;
        opfs::paths::Exclude::new(&patterns).map_err(|e| {
            let file = self.env.config.as_deref().unwrap_or(Path::new("config"));
            CommandError::failure(format!("{}: [record] exclude: {e}", file.display()))
        })
    }

    /// The patterns of [`Ctx::record_exclude`], in that order, each once.
    ///
    /// Errors: as [`Ctx::config`].
    pub fn record_patterns(&self, project: &Path) -> Result<Vec<String>, CommandError> {
        let config = self.config()?;
        let own = config.project(project, self.env.home.as_deref());
        let mut patterns = config.record.exclude.clone();
        if let Some(p) = own {
            patterns.extend(p.record.exclude.iter().cloned());
        }
        let skip = own
            .and_then(|p| p.record.skip_regenerable)
            .or(config.record.skip_regenerable)
            .unwrap_or(true);
        if skip {
            patterns.extend(opfs::export::regenerable_ignored(project));
        }
        let mut seen = std::collections::HashSet::new();
        patterns.retain(|p| seen.insert(p.clone()));
        Ok(patterns)
    }

    /// The range minimum when `--range-min` is not given: `$OPFS_RANGE_MIN`,
    /// else the default. A bad value is bad usage, as it is for the option.
    pub fn range_min(&self) -> Result<u64, CommandError> {
        opfs::daemon::range_min_from(self.env.range_min.as_deref())
            .map_err(|e| CommandError::usage(format!("environment variable OPFS_RANGE_MIN: {e}")))
    }
}

/// `[push] bucket_turn_budget` as written: unset is
/// [`opfs::remote::DEFAULT_TURN_BUDGET`]; `0` or `"none"` is no limit
/// (`None`); else bytes or a size with a suffix (`"2GiB"`).
///
/// Errors: a negative number, or text that is no size nor `none` (the
/// reason, for the caller to prefix with the file and key).
fn turn_budget(v: Option<opfs::sandbox::config::Size>) -> Result<Option<u64>, String> {
    use opfs::sandbox::config::Size;
    let bytes = match v {
        None => return Ok(Some(opfs::remote::DEFAULT_TURN_BUDGET)),
        Some(Size::Bytes(n)) => u64::try_from(n).map_err(|_| {
            format!("{n} is negative; give bytes (2147483648), a size (\"2GiB\"), or 0 or \"none\" for no limit")
        })?,
        Some(Size::Text(t)) if t.trim().eq_ignore_ascii_case("none") => 0,
        Some(Size::Text(t)) => opfs::state::usage::parse_size(&t)
            .map_err(|e| format!("{e}; or 0 or \"none\" for no limit"))?,
    };
    Ok((bytes > 0).then_some(bytes))
}

/// The `key = value` pairs of section `[profile]` of an AWS credentials
/// file (INI: `#` and `;` comments, keys lower-cased).
fn aws_profile(text: &str, profile: &str) -> std::collections::BTreeMap<String, String> {
    let mut inside = false;
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim();
            inside = name == profile || name.strip_prefix("profile ") == Some(profile);
            continue;
        }
        if let (true, Some((k, v))) = (inside, line.split_once('=')) {
            out.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

/// Where `opfs umount` records which project `mountpoint` served, so that
/// `-C MOUNTPOINT` can still point to it afterwards:
/// `$OPFS_HOME/unmounted/<key of the mountpoint>` holds the project's path.
/// Outside the project, like all of opfs's state; a later mount at the same
/// place takes precedence (its registry entry is found first).
pub fn former_mount_entry(home: &Path, mountpoint: &Path) -> PathBuf {
    home.join("unmounted")
        .join(opfs::store::layout::key_of(mountpoint))
}

/// The log file stderr is (a background daemon's `daemon.log`), opened to
/// rotate; `None` when stderr is not a regular file.
fn stderr_log_file() -> Option<opfs::daemon::logfile::RotatingLog> {
    use opfs::daemon::logfile::{RotatingLog, LOG_CAP, LOG_KEEP};
    let path = std::fs::read_link("/proc/self/fd/2").ok()?;
    if !std::fs::metadata(&path).ok()?.is_file() {
        return None;
    }
    RotatingLog::open(&path, LOG_CAP, LOG_KEEP).ok()
}

/// Runs the command line; returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return refused(&e),
    };
    // A daemon started in the background leaves the caller's session
    // before anything else.
    let detached = match &cli.command {
        Cmd::Mount(m) if m.setsid => Some(opfs::daemon::spawn::detach_session()),
        _ => None,
    };
    let daemon = matches!(&cli.command, Cmd::Mount(m) if m.foreground);
    let level = match (cli.verbose, daemon) {
        (0, false) => log::LevelFilter::Warn,
        (0, true) | (1, _) => log::LevelFilter::Info,
        (2, _) => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    let mut logger = env_logger::Builder::new();
    logger.filter_level(level).format_timestamp_millis();
    // A daemon started in the background logs to `daemon.log`, its stderr:
    // through a writer that rotates it (`opfs::daemon::logfile`).
    if matches!(&cli.command, Cmd::Mount(m) if m.setsid) {
        if let Some(log) = stderr_log_file() {
            logger.target(env_logger::Target::Pipe(Box::new(log)));
        }
    }
    logger.init();
    if let Some(Err(e)) = detached {
        log::warn!("cannot start a new session: {e}");
    }
    let ctx = Ctx {
        dir: cli.dir.clone(),
        format: if cli.json {
            Format::Json
        } else {
            Format::Human
        },
        verbose: cli.verbose,
        color: cli.color,
        no_pager: cli.no_pager,
        env: Env::read(),
    };
    // Before any command can pass a failpoint.
    opfs::failpoint::arm(ctx.env.failpoint.as_deref());
    let mut out = io::stdout().lock();
    let mut err = io::stderr();
    let result = commands::run(&ctx, &cli.command, &mut out, &mut err);
    let flushed = out.flush().map_err(CommandError::from);
    match result.and_then(|code| flushed.map(|()| code)) {
        Ok(code) => code,
        Err(e) => {
            if e.kind == ErrorKind::BrokenPipe {
                return 0;
            }
            if let Some(message) = &e.message {
                if ctx.format.is_json() {
                    // Best effort: stdout may be what failed.
                    if print_json_error(&mut out, &e, message).is_err() {
                        log::debug!("cannot print the JSON error");
                    }
                    if out.flush().is_err() {
                        log::debug!("cannot flush stdout");
                    }
                }
                eprintln!("opfs: {message}");
            }
            e.exit_code()
        }
    }
}

/// clap refused the arguments (or printed help or the version).
fn refused(e: &clap::Error) -> i32 {
    // With stdout or stderr gone there is no one left to tell.
    e.print().ok();
    match e.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
        _ => {
            if json_requested(std::env::args_os()) {
                let first = e.to_string();
                let first = first.lines().next().unwrap_or("bad usage");
                let first = first.strip_prefix("error: ").unwrap_or(first);
                let err = CommandError::usage(first);
                if print_json_error(&mut io::stdout().lock(), &err, first).is_err() {
                    log::debug!("cannot print the JSON error");
                }
            }
            2
        }
    }
}

/// Whether `--json` appears among the arguments before a `--` (after it,
/// the arguments belong to `opfs run`'s command). Used only when clap
/// refused the arguments, so the parsed flag is not available.
fn json_requested(args: impl Iterator<Item = OsString>) -> bool {
    args.skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// With `--json`, a failed command still prints one JSON value on stdout:
/// `{"error": {"code": 1|2|3, "kind": "failure"|"usage", "message": "..."}}`
/// (the same message also goes to stderr).
fn print_json_error(out: &mut dyn Write, e: &CommandError, message: &str) -> io::Result<()> {
    let code = e.exit_code();
    let kind = if code == 2 { "usage" } else { "failure" };
    let v = serde_json::json!({
        "error": { "code": code, "kind": kind, "message": message }
    });
    writeln!(out, "{v}")
}
