//! The daemon's options: what `opfs mount` asks for, plus the FUSE tuning
//! overrides ([`FsTuning`]). The library never reads the environment and
//! knows no variable's name: the CLI declares its variables in one table
//! (`src/cli/vars.rs`), parses them and passes the values in.

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
    /// sets it from `opfs mount --range-min`, else from its environment
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
    /// Push the export to this checkpoint remote after each export (off
    /// the request path, retried on failure: `crate::remote::spawn_pusher`);
    /// `None`: only `opfs push` pushes. Needs [`DaemonOptions::export`].
    /// For a worktree it is the project's remote: after each export of
    /// its branch the worktree's daemon pushes the project's export (which
    /// carries the branch), as the project's daemon does.
    pub push: Option<crate::remote::AutoPush>,
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
            push: None,
        }
    }
}

/// Records whether the project daemon of `state` runs with `sync`
/// ([`project_sync`] reads it): the marker
/// ([`crate::store::StateDir::sync_marker_path`]) is made or removed, so
/// the worktrees' daemons, started later by `worktree create|mount`, run
/// with the durability the user chose for the project
/// (`docs/worktrees.md`). Not
/// fsynced; a crash may leave the previous choice, which the next mount
/// overwrites.
///
/// Errors: the marker cannot be written or removed.
pub fn remember_sync(state: &crate::store::StateDir, sync: bool) -> std::io::Result<()> {
    let marker = state.sync_marker_path();
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
    state.sync_marker_path().exists()
}

/// A range minimum (`--range-min` or its variable) that is neither a
/// number of bytes nor `off`.
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

/// [`DaemonOptions::range_min`] from a value given by the environment
/// (bytes, or `off`); [`crate::capture::DEFAULT_RANGE_MIN`] when it is
/// unset.
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

/// Overrides of [`opfs_fs::Options`] that measurements and tests set
/// (the CLI's variables, `docs/cli.md` "Environment" and
/// `docs/benchmarks.md` "Measurement levers"). `None` keeps the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsTuning {
    /// The attribute cache timeout.
    pub attr_ttl: Option<Duration>,
    /// The entry cache timeout.
    pub entry_ttl: Option<Duration>,
    /// How long a miss is cached (0: never).
    pub negative_ttl: Option<Duration>,
    /// The watch on the project that keeps long TTLs coherent
    /// (`docs/coherence.md`). Unset: the [`opfs_fs::Options`] default,
    /// `auto`.
    pub watch: Option<opfs_fs::WatchMode>,
    /// `FUSE_NO_OPENDIR_SUPPORT` while the watch is active.
    pub no_opendir: Option<bool>,
    /// `FUSE_NO_OPEN_SUPPORT` while the watch is active.
    pub no_open: Option<bool>,
    /// `FUSE_HANDLE_KILLPRIV_V2` when the kernel took
    /// `FUSE_NO_OPEN_SUPPORT`.
    pub killpriv_v2: Option<bool>,
    /// CREATE answered `ENOSYS` (new files by MKNOD) when the kernel took
    /// `FUSE_NO_OPEN_SUPPORT`.
    pub no_create: Option<bool>,
    /// LSEEK answered `ENOSYS`, so the kernel answers
    /// `SEEK_DATA`/`SEEK_HOLE` itself (no holes reported).
    pub no_lseek: Option<bool>,
    /// The daemon's I/O through a private clone of the project's mount
    /// whose writes the fanotify watch ignores.
    pub own_mount: Option<bool>,
    /// FUSE worker threads (overrides `--threads`).
    pub threads: Option<usize>,
    /// How many inodes keep an open fd.
    pub inode_fds: Option<usize>,
    /// The watch's and the invalidation thread in the real-time class when
    /// permitted (`docs/coherence.md`, "What limits promptness").
    pub realtime: Option<bool>,
    /// Files of more than this many bytes are kept instead of copied when
    /// removed (`docs/design.md`, "Removals keep the inode"). Not an
    /// `opfs_fs::Options` field: the daemon hands it to the journal.
    /// Unset: [`crate::capture::DEFAULT_KEEP_MIN`].
    pub keep_min: Option<u64>,
}

impl FsTuning {
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
