//! The daemon's options: what `opfs mount` asks for, plus the FUSE tuning
//! knobs `scripts/bench` sets through the environment. The library never
//! reads the environment; the CLI reads the variables and passes them in
//! (see [`FsTuning::from_vars`]).

use std::ffi::OsStr;
use std::time::Duration;

/// Options of the daemon.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// fsync blobs and use `synchronous=FULL` (power-loss safe).
    pub sync: bool,
    /// FUSE worker threads.
    pub threads: usize,
    /// Export each closed turn to the shadow git repository in the
    /// background (`opfs mount --no-export` turns it off).
    pub export: bool,
    /// Files of at least this many bytes (with one link) written in place
    /// are captured as ranges (`docs/ranges.md`); `u64::MAX` turns range
    /// capture off. Default [`crate::capture::DEFAULT_RANGE_MIN`]; the CLI
    /// sets it from `opfs mount --range-min`, else `$OPFS_RANGE_MIN`
    /// ([`range_min_from`]).
    pub range_min: u64,
    /// FUSE cache and threading overrides (benchmarking levers).
    pub tuning: FsTuning,
    /// Serve this worktree (an overlay over the project's base) instead of
    /// a project (`super::worktree`).
    pub worktree: Option<super::worktree::WorktreeSpec>,
    /// The `[record] exclude` list (`docs/design.md` "Excluded paths"):
    /// a project's mount makes it the list in effect for its state dir
    /// before it opens the journal. `None` keeps the list in effect.
    /// Ignored for a worktree.
    pub record_exclude: Option<crate::paths::Exclude>,
    /// Apply this retention policy by itself after turns (off the request
    /// path, when [`crate::gc::due`] says it has work); `None`: only
    /// `opfs gc` applies retention. The CLI sets it from the `[retention]`
    /// table of the configuration file.
    pub retention: Option<crate::gc::Retention>,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            sync: false,
            threads: default_threads(),
            export: true,
            range_min: crate::capture::DEFAULT_RANGE_MIN,
            tuning: FsTuning::default(),
            worktree: None,
            record_exclude: None,
            retention: None,
        }
    }
}

/// The file in a project's state dir that is present while the project's
/// last mount was started with `--sync` (`docs/worktrees.md`): the
/// worktrees' daemons, started later by `worktree create|mount`, run with
/// the durability the user chose for the project.
const SYNC_MARKER: &str = "mount-sync";

/// Records whether the project daemon of `state` runs with `sync`
/// ([`project_sync`] reads it): the marker is made or removed. Not
/// fsynced; a crash may leave the previous choice, which the next mount
/// overwrites.
///
/// Errors: the marker cannot be written or removed.
pub fn remember_sync(state: &crate::store::StateDir, sync: bool) -> std::io::Result<()> {
    let marker = state.dir.join(SYNC_MARKER);
    if sync {
        return std::fs::write(marker, b"");
    }
    match std::fs::remove_file(marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// True when the project of `state` was last mounted with `--sync`
/// ([`remember_sync`]): its worktrees' daemons then run with it too.
pub fn project_sync(state: &crate::store::StateDir) -> bool {
    state.dir.join(SYNC_MARKER).exists()
}

/// A `--range-min` or `OPFS_RANGE_MIN` value that is neither a number of
/// bytes nor `off`.
#[derive(Debug, thiserror::Error)]
#[error("{value:?} is neither a number of bytes nor `off`")]
pub struct BadRangeMin {
    /// The value as given.
    pub value: String,
}

/// Parses a range minimum: a number of bytes, or `off` (`u64::MAX`: range
/// capture off). Surrounding whitespace is ignored.
pub fn parse_range_min(text: &str) -> Result<u64, BadRangeMin> {
    match text.trim() {
        "off" => Ok(u64::MAX),
        v => v.parse().map_err(|_| BadRangeMin {
            value: text.to_string(),
        }),
    }
}

/// [`DaemonOptions::range_min`] from the value of `OPFS_RANGE_MIN` (bytes,
/// or `off`); [`crate::capture::DEFAULT_RANGE_MIN`] when it is unset.
///
/// Errors: the value is anything else (or is not UTF-8).
pub fn range_min_from(value: Option<&OsStr>) -> Result<u64, BadRangeMin> {
    match value {
        None => Ok(crate::capture::DEFAULT_RANGE_MIN),
        Some(v) => match v.to_str() {
            Some(text) => parse_range_min(text),
            None => Err(BadRangeMin {
                value: v.to_string_lossy().into_owned(),
            }),
        },
    }
}

/// The default number of FUSE worker threads: half the CPUs, at least 1.
/// The daemon shares the CPUs with the programs using the mount; on a
/// 2-CPU machine one worker costs less CPU than two for every workload of
/// the benchmark suite, `make -j2` included (`docs/benchmarks.md`).
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| (n.get() / 2).max(1))
        .unwrap_or(1)
}

/// Overrides of [`opfs_fs::Options`] that `scripts/bench` uses to measure
/// each performance lever on one build (`docs/benchmarks.md`). `None`
/// keeps the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsTuning {
    /// `OPFS_ATTR_TTL_MS`: the attribute cache timeout.
    pub attr_ttl: Option<Duration>,
    /// `OPFS_ENTRY_TTL_MS`: the entry cache timeout.
    pub entry_ttl: Option<Duration>,
    /// `OPFS_NEGATIVE_TTL_MS`: how long a miss is cached (0: never).
    pub negative_ttl: Option<Duration>,
    /// `OPFS_WATCH` (`auto`, `inotify` or `off`): the watch on the project
    /// that keeps long TTLs coherent (`docs/coherence.md`). Unset: the
    /// [`opfs_fs::Options`] default, `auto`.
    pub watch: Option<opfs_fs::WatchMode>,
    /// `OPFS_KEEP_CACHE` (0 or 1): keep the page cache across opens.
    pub keep_cache: Option<bool>,
    /// `OPFS_CACHE_DIR` (0 or 1): cache directory listings.
    pub cache_dir: Option<bool>,
    /// `OPFS_NO_FLUSH` (0 or 1): skip the flush on close.
    pub no_flush: Option<bool>,
    /// `OPFS_READDIRPLUS_AUTO` (0 or 1): `FUSE_READDIRPLUS_AUTO` on top of
    /// `DO_READDIRPLUS`.
    pub readdirplus_auto: Option<bool>,
    /// `OPFS_NO_OPENDIR` (0 or 1): `FUSE_NO_OPENDIR_SUPPORT` while the
    /// watch is active.
    pub no_opendir: Option<bool>,
    /// `OPFS_NO_OPEN` (0 or 1): `FUSE_NO_OPEN_SUPPORT` while the watch is
    /// active.
    pub no_open: Option<bool>,
    /// `OPFS_KILLPRIV_V2` (0 or 1): `FUSE_HANDLE_KILLPRIV_V2` when the
    /// kernel took `FUSE_NO_OPEN_SUPPORT`.
    pub killpriv_v2: Option<bool>,
    /// `OPFS_NO_CREATE` (0 or 1): CREATE answered `ENOSYS` (new files by
    /// MKNOD) when the kernel took `FUSE_NO_OPEN_SUPPORT`.
    pub no_create: Option<bool>,
    /// `OPFS_NO_LSEEK` (0 or 1): LSEEK answered `ENOSYS`, so the kernel
    /// answers `SEEK_DATA`/`SEEK_HOLE` itself (no holes reported).
    pub no_lseek: Option<bool>,
    /// `OPFS_OWN_MOUNT` (0 or 1): the daemon's I/O through a private clone
    /// of the project's mount whose writes the fanotify watch ignores.
    pub own_mount: Option<bool>,
    /// `OPFS_THREADS`: FUSE worker threads (overrides `--threads`; 0 is
    /// ignored).
    pub threads: Option<usize>,
    /// `OPFS_INODE_FDS`: how many inodes keep an open fd.
    pub inode_fds: Option<usize>,
    /// `OPFS_REALTIME` (0 or 1): the watch's and the invalidation thread
    /// in the real-time class when permitted (`docs/coherence.md`, "What
    /// limits promptness").
    pub realtime: Option<bool>,
    /// `OPFS_KEEP_MIN` (bytes, or `off`): files of more than this many
    /// bytes are kept instead of copied when removed (`docs/design.md`,
    /// "Removals keep the inode"). Not an `opfs_fs::Options` field: the
    /// daemon hands it to the journal. Unset:
    /// [`crate::capture::DEFAULT_KEEP_MIN`].
    pub keep_min: Option<u64>,
}

impl FsTuning {
    /// The tuning given by the variables that `var` looks up (the CLI
    /// passes the process environment). Unset or unparsable values keep
    /// the defaults; a flag is on unless it is `0`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> FsTuning {
        let ms = |k: &str| {
            var(k)
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_millis)
        };
        let flag = |k: &str| var(k).map(|v| v != "0");
        let count = |k: &str| var(k).and_then(|v| v.parse::<usize>().ok());
        FsTuning {
            attr_ttl: ms("OPFS_ATTR_TTL_MS"),
            entry_ttl: ms("OPFS_ENTRY_TTL_MS"),
            negative_ttl: ms("OPFS_NEGATIVE_TTL_MS"),
            watch: var("OPFS_WATCH").and_then(|v| match v.as_str() {
                "auto" => Some(opfs_fs::WatchMode::Auto),
                "inotify" => Some(opfs_fs::WatchMode::Inotify),
                "off" | "0" => Some(opfs_fs::WatchMode::Off),
                _ => None,
            }),
            keep_cache: flag("OPFS_KEEP_CACHE"),
            cache_dir: flag("OPFS_CACHE_DIR"),
            no_flush: flag("OPFS_NO_FLUSH"),
            readdirplus_auto: flag("OPFS_READDIRPLUS_AUTO"),
            no_opendir: flag("OPFS_NO_OPENDIR"),
            no_open: flag("OPFS_NO_OPEN"),
            killpriv_v2: flag("OPFS_KILLPRIV_V2"),
            no_create: flag("OPFS_NO_CREATE"),
            no_lseek: flag("OPFS_NO_LSEEK"),
            own_mount: flag("OPFS_OWN_MOUNT"),
            threads: count("OPFS_THREADS").filter(|n| *n > 0),
            inode_fds: count("OPFS_INODE_FDS"),
            realtime: flag("OPFS_REALTIME"),
            keep_min: var("OPFS_KEEP_MIN").and_then(|v| parse_range_min(&v).ok()),
        }
    }

    /// `o` with these overrides applied.
    pub fn apply(&self, mut o: opfs_fs::Options) -> opfs_fs::Options {
        if let Some(d) = self.attr_ttl {
            o.attr_ttl = d;
        }
        if let Some(d) = self.entry_ttl {
            o.entry_ttl = d;
        }
        if let Some(d) = self.negative_ttl {
            o.negative_ttl = d;
        }
        if let Some(w) = self.watch {
            o.watch = w;
        }
        if let Some(v) = self.keep_cache {
            o.keep_cache = v;
        }
        if let Some(v) = self.cache_dir {
            o.cache_dir = v;
        }
        if let Some(v) = self.no_flush {
            o.no_flush = v;
        }
        if let Some(v) = self.readdirplus_auto {
            o.readdirplus_auto = v;
        }
        if let Some(v) = self.no_opendir {
            o.no_opendir = v;
        }
        if let Some(v) = self.no_open {
            o.no_open = v;
        }
        if let Some(v) = self.killpriv_v2 {
            o.killpriv_v2 = v;
        }
        if let Some(v) = self.no_create {
            o.no_create = v;
        }
        if let Some(v) = self.no_lseek {
            o.no_lseek = v;
        }
        if let Some(v) = self.own_mount {
            o.own_mount = v;
        }
        if let Some(n) = self.threads {
            o.threads = n;
        }
        if let Some(n) = self.inode_fds {
            o.inode_fds = Some(n);
        }
        if let Some(v) = self.realtime {
            o.realtime = v;
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_reads_only_what_parses() {
        let t = FsTuning::from_vars(|k| match k {
            "OPFS_ATTR_TTL_MS" => Some("250".into()),
            "OPFS_ENTRY_TTL_MS" => Some("soon".into()),
            "OPFS_KEEP_CACHE" => Some("0".into()),
            "OPFS_THREADS" => Some("0".into()),
            "OPFS_INODE_FDS" => Some("8".into()),
            "OPFS_WATCH" => Some("inotify".into()),
            "OPFS_NEGATIVE_TTL_MS" => Some("0".into()),
            "OPFS_KEEP_MIN" => Some("off".into()),
            "OPFS_REALTIME" => Some("0".into()),
            _ => None,
        });
        assert_eq!(t.realtime, Some(false));
        assert!(!t.apply(opfs_fs::Options::default()).realtime);
        assert!(opfs_fs::Options::default().realtime);
        assert_eq!(t.keep_min, Some(u64::MAX));
        assert_eq!(t.watch, Some(opfs_fs::WatchMode::Inotify));
        assert_eq!(t.negative_ttl, Some(Duration::ZERO));
        assert_eq!(t.attr_ttl, Some(Duration::from_millis(250)));
        assert_eq!(t.entry_ttl, None);
        assert_eq!(t.keep_cache, Some(false));
        assert_eq!(t.cache_dir, None);
        assert_eq!(t.threads, None);
        assert_eq!(t.inode_fds, Some(8));
    }

    #[test]
    fn the_watch_is_on_unless_turned_off() {
        let none = FsTuning::from_vars(|_| None);
        assert_eq!(
            none.apply(opfs_fs::Options::default()).watch,
            opfs_fs::WatchMode::Auto
        );
        let off = FsTuning::from_vars(|k| (k == "OPFS_WATCH").then(|| "off".into()));
        assert_eq!(
            off.apply(opfs_fs::Options::default()).watch,
            opfs_fs::WatchMode::Off
        );
    }

    #[test]
    fn range_min_is_bytes_or_off() {
        assert_eq!(parse_range_min(" 4096 ").ok(), Some(4096));
        assert_eq!(parse_range_min("off").ok(), Some(u64::MAX));
        assert!(parse_range_min("big").is_err());
        assert_eq!(
            range_min_from(None).ok(),
            Some(crate::capture::DEFAULT_RANGE_MIN)
        );
    }
}
