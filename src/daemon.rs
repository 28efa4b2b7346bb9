//! `opfs mount`: argument checks, the daemon's life, and stopping it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::capture::{Journal, OpenError};
use crate::control::{self, MountOps, Request, Response, StateLock};
use crate::rewind;
use crate::state;
use crate::store::StateDir;

/// How long a captured record may wait in the capture log before the
/// daemon commits it to the index (when fewer than
/// [`crate::capture::GROUP_MAX`] are pending).
pub const GROUP_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Why a mount was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The project directory does not exist.
    #[error("project {0} does not exist")]
    ProjectMissing(PathBuf),
    /// The project path is not a directory.
    #[error("project {0} is not a directory")]
    ProjectNotDir(PathBuf),
    /// The mountpoint does not exist.
    #[error("mountpoint {0} does not exist (create an empty directory first)")]
    MountpointMissing(PathBuf),
    /// The mountpoint is not a directory.
    #[error("mountpoint {0} is not a directory")]
    MountpointNotDir(PathBuf),
    /// The mountpoint has entries (the mount would hide them).
    #[error(
        "mountpoint {0} is not empty: the mount would hide what is in it; use an empty directory"
    )]
    MountpointNotEmpty(PathBuf),
    /// The project is served by opfs itself (it is, or lies inside, an opfs
    /// mountpoint): its history would be kept under the wrong name.
    #[error("project {project} is inside the opfs mountpoint {mountpoint}; mount the real project directory instead")]
    ProjectIsAMount {
        /// The project given.
        project: PathBuf,
        /// The opfs mountpoint it lies in.
        mountpoint: PathBuf,
    },
    /// The mountpoint lies inside the project (or is the project).
    #[error(
        "mountpoint {mountpoint} is inside the project {project}; choose a directory outside it"
    )]
    MountpointInsideProject {
        /// The mountpoint.
        mountpoint: PathBuf,
        /// The project.
        project: PathBuf,
    },
    /// The project lies inside the mountpoint: mounting would hide it.
    #[error("project {project} is inside the mountpoint {mountpoint}")]
    ProjectInsideMountpoint {
        /// The mountpoint.
        mountpoint: PathBuf,
        /// The project.
        project: PathBuf,
    },
    /// Something is already mounted at the mountpoint.
    #[error("mountpoint {0} is busy: something is already mounted there")]
    MountpointBusy(PathBuf),
    /// A daemon already serves this project.
    #[error("project {project} is already mounted{}", at.as_ref().map(|m| format!(" at {}", m.display())).unwrap_or_default())]
    AlreadyMounted {
        /// The project.
        project: PathBuf,
        /// Where, if known.
        at: Option<PathBuf>,
    },
    /// The state dir would be inside the project (zero intrusion, design §2.7).
    #[error("state dir {state} is inside the project {project}; set OPFS_HOME to a directory outside it")]
    StateInsideProject {
        /// The state dir.
        state: PathBuf,
        /// The project.
        project: PathBuf,
    },
    /// Opening the journal failed.
    #[error(transparent)]
    Journal(#[from] OpenError),
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the path.
        what: String,
        /// The cause.
        source: io::Error,
    },
}

/// The checked arguments of a mount.
#[derive(Debug, Clone)]
pub struct MountPlan {
    /// The project's state dir (its `project` field is canonical).
    pub state: StateDir,
    /// The canonical mountpoint.
    pub mountpoint: PathBuf,
}

fn canonical_dir(
    path: &Path,
    missing: fn(PathBuf) -> MountError,
    not_dir: fn(PathBuf) -> MountError,
) -> Result<PathBuf, MountError> {
    let c = std::fs::canonicalize(path).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            missing(path.to_path_buf())
        } else {
            MountError::Io {
                what: format!("cannot resolve {}", path.display()),
                source: e,
            }
        }
    })?;
    if !c.is_dir() {
        return Err(not_dir(path.to_path_buf()));
    }
    Ok(c)
}

/// Checks a mount request: both paths exist and are directories, neither
/// contains the other, nothing is mounted at the mountpoint, the project is
/// not already served, and the state dir is outside the project.
///
/// A stale opfs mount left by a killed daemon (the mountpoint answers
/// `ENOTCONN`) is cleaned up with `fusermount3 -uz` instead of refused.
pub fn check(home: &Path, project: &Path, mountpoint: &Path) -> Result<MountPlan, MountError> {
    let project = canonical_dir(
        project,
        MountError::ProjectMissing,
        MountError::ProjectNotDir,
    )?;
    if is_dead_mount(mountpoint) {
        let abs = state::absolute(mountpoint);
        log::warn!("cleaning up a stale mount at {}", abs.display());
        let _ = std::process::Command::new("fusermount3")
            .arg("-uz")
            .arg(&abs)
            .status();
    }
    let mountpoint = canonical_dir(
        mountpoint,
        MountError::MountpointMissing,
        MountError::MountpointNotDir,
    )?;
    if mountpoint.starts_with(&project) {
        return Err(MountError::MountpointInsideProject {
            mountpoint,
            project,
        });
    }
    if project.starts_with(&mountpoint) {
        return Err(MountError::ProjectInsideMountpoint {
            mountpoint,
            project,
        });
    }
    if control::is_mount_point(&mountpoint) {
        return Err(MountError::MountpointBusy(mountpoint));
    }
    if let Some(mp) = control::opfs_mountpoints()
        .into_iter()
        .find(|m| project.starts_with(m))
    {
        return Err(MountError::ProjectIsAMount {
            project,
            mountpoint: mp,
        });
    }
    if std::fs::read_dir(&mountpoint).is_ok_and(|mut d| d.next().is_some()) {
        return Err(MountError::MountpointNotEmpty(mountpoint));
    }
    let home_abs = state::absolute(home);
    if home_abs.starts_with(&project) {
        return Err(MountError::StateInsideProject {
            state: home_abs,
            project,
        });
    }
    let state = StateDir::for_project(&home_abs, &project);
    if StateLock::is_held(&state) {
        return Err(MountError::AlreadyMounted {
            at: control::recorded_mountpoint(&state),
            project,
        });
    }
    Ok(MountPlan { state, mountpoint })
}

/// True when `path` is a FUSE mount whose daemon is gone (`ENOTCONN`, or
/// `ECONNABORTED`, which some kernels return for a connection whose daemon
/// died).
///
/// `stat` alone is not enough: for up to the attribute timeout after the
/// daemon died the kernel answers `stat` of the mount's root from its cache,
/// so the dead mount looks alive and a remount right after a crash would be
/// refused as busy. `statfs` always asks the daemon, so it sees the dead
/// connection at once.
fn is_dead_mount(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    if let Err(e) = std::fs::metadata(path) {
        return is_dead_errno(&e);
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path; `buf` is a plain struct
    // the kernel fills in.
    let rc = unsafe {
        let mut buf: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut buf)
    };
    rc < 0 && is_dead_errno(&io::Error::last_os_error())
}

fn is_dead_errno(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED))
}

struct FsMount(opfs_fs::Controller, Option<crossbeam_channel::Sender<()>>);

impl MountOps for FsMount {
    fn quiesce(&self) -> Box<dyn std::any::Any> {
        Box::new(self.0.quiesce())
    }

    fn invalidate(&self, paths: &[Vec<u8>]) {
        self.0.invalidate(paths)
    }

    fn unmount(&self) -> io::Result<()> {
        self.0.unmount_if_idle()
    }

    fn turns_closed(&self) {
        if let Some(tx) = &self.1 {
            // Full means an export is already queued; it will see this turn.
            let _ = tx.try_send(());
        }
    }
}

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
    /// sets it from `opfs mount --range-min`, else [`default_range_min`].
    pub range_min: u64,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            sync: false,
            threads: default_threads(),
            export: true,
            range_min: crate::capture::DEFAULT_RANGE_MIN,
        }
    }
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

/// [`DaemonOptions::range_min`] from `OPFS_RANGE_MIN` (bytes, or `off`),
/// else [`crate::capture::DEFAULT_RANGE_MIN`].
///
/// Errors: the variable is set to anything else (or is not UTF-8).
pub fn default_range_min() -> Result<u64, BadRangeMin> {
    match std::env::var_os("OPFS_RANGE_MIN") {
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

/// Applies the FUSE cache knobs that `scripts/bench` uses to measure each
/// performance lever on one build (docs/benchmarks.md): `OPFS_ATTR_TTL_MS`,
/// `OPFS_ENTRY_TTL_MS` (milliseconds), `OPFS_KEEP_CACHE`, `OPFS_CACHE_DIR` and
/// `OPFS_NO_FLUSH` (0 or 1).
/// Unset or unparsable values keep the defaults.
fn tune_from_env(mut o: opfs_fs::Options) -> opfs_fs::Options {
    let ms = |k: &str| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(std::time::Duration::from_millis)
    };
    if let Some(d) = ms("OPFS_ATTR_TTL_MS") {
        o.attr_ttl = d;
    }
    if let Some(d) = ms("OPFS_ENTRY_TTL_MS") {
        o.entry_ttl = d;
    }
    let flag = |k: &str| std::env::var(k).ok().map(|v| v != "0");
    if let Some(v) = flag("OPFS_KEEP_CACHE") {
        o.keep_cache = v;
    }
    if let Some(v) = flag("OPFS_CACHE_DIR") {
        o.cache_dir = v;
    }
    if let Some(v) = flag("OPFS_NO_FLUSH") {
        o.no_flush = v;
    }
    if let Some(n) = std::env::var("OPFS_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        o.threads = n;
    }
    if let Some(n) = std::env::var("OPFS_INODE_FDS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        o.inode_fds = Some(n);
    }
    o
}

/// Runs the daemon in this process until the mount is unmounted (by
/// `opfs umount`, `fusermount3 -u`, SIGTERM or SIGINT).
///
/// `ready` is called once the mount is visible and the control socket
/// answers. Before mounting, an interrupted rewind is finished (and logged).
pub fn run(
    home: &Path,
    plan: &MountPlan,
    opts: &DaemonOptions,
    ready: impl FnOnce(),
) -> Result<(), MountError> {
    let state = &plan.state;
    state.create().map_err(|source| MountError::Io {
        what: format!("cannot create state dir {}", state.dir.display()),
        source,
    })?;
    let lock = StateLock::try_acquire(state).map_err(|source| MountError::Io {
        what: format!("cannot lock {}", state.lock_path().display()),
        source,
    })?;
    let Some(_lock) = lock else {
        return Err(MountError::AlreadyMounted {
            project: state.project.clone(),
            at: control::recorded_mountpoint(state),
        });
    };
    let mut journal = Journal::open(state, opts.sync)?;
    journal.set_range_min(opts.range_min);
    let journal = Arc::new(journal);
    let recovered = match rewind::resume(&journal) {
        Ok(Some(r)) => {
            let msg = format!(
                "finished an interrupted rewind to turn {} (recorded as turn {}): {} paths restored, {} left unrestored",
                r.rewound_to,
                r.turn.unwrap_or(0),
                r.restored.len(),
                r.conflicts.len()
            );
            log::warn!("{msg}");
            Some(msg)
        }
        Ok(None) => match rewind::close_interrupted_rewind_turn(&journal) {
            Ok(msg) => {
                if let Some(m) = &msg {
                    log::warn!("{m}");
                }
                msg
            }
            Err(e) => {
                log::error!("cannot close an interrupted rewind turn: {e}");
                Some(format!(
                    "an interrupted rewind turn could not be closed: {e}"
                ))
            }
        },
        Err(e) => {
            log::error!("cannot finish an interrupted rewind: {e}");
            Some(format!("an interrupted rewind could not be finished: {e}"))
        }
    };
    let fs_opts = tune_from_env(opfs_fs::Options {
        threads: opts.threads,
        allow_other: unsafe_is_root(),
        fsname: format!("opfs:{}", plan.state.project.display()),
        ..Default::default()
    });
    let hook: Arc<dyn opfs_fs::MutationHook> = journal.clone();
    let mount =
        opfs_fs::mount(&state.project, &plan.mountpoint, hook, &fs_opts).map_err(|source| {
            MountError::Io {
                what: format!(
                    "cannot mount {} at {}",
                    state.project.display(),
                    plan.mountpoint.display()
                ),
                source,
            }
        })?;
    // Off the request path: a thread of its own, woken through a channel.
    // The first wake-up writes the baseline while the project is as first
    // seen, or catches up with turns closed while nothing was mounted.
    let exporter = opts.export.then(|| {
        let journal = journal.clone();
        crate::export::spawn_background(
            state.clone(),
            Box::new(move || {
                if let Err(e) = journal.apply_pending() {
                    log::warn!("group commit before the export deferred: {e}");
                }
            }),
        )
    });
    if let Some(tx) = &exporter {
        let _ = tx.try_send(());
    }
    let ops: Arc<dyn MountOps> = Arc::new(FsMount(mount.controller(), exporter));
    control::register_mount(home, state, &plan.mountpoint).map_err(|source| MountError::Io {
        what: format!("cannot register the mount in {}", home.display()),
        source,
    })?;
    let listener = control::bind(&state.socket_path()).map_err(|source| MountError::Io {
        what: format!("cannot bind {}", state.socket_path().display()),
        source,
    })?;
    {
        let journal = journal.clone();
        let ops = ops.clone();
        let mp = plan.mountpoint.clone();
        std::thread::spawn(move || control::serve(listener, journal, ops, mp, recovered));
    }
    {
        // On a signal the daemon must go even if the mount is in use: the
        // mount is detached and disappears once its last user leaves.
        let ctl = mount.controller();
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGHUP,
        ])
        .map_err(|source| MountError::Io {
            what: "cannot install signal handlers".into(),
            source,
        })?;
        std::thread::spawn(move || {
            for sig in signals.forever() {
                log::info!("signal {sig}: unmounting");
                if let Err(e) = ctl.unmount() {
                    log::error!("unmount on signal failed: {e}");
                }
            }
        });
    }
    // Group commits of the capture log happen on the capturing thread when
    // enough records are pending; this timer commits the rest, so history
    // commands in other processes see a capture within GROUP_INTERVAL.
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    let committer = {
        let journal = journal.clone();
        std::thread::spawn(move || {
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                stop_rx.recv_timeout(GROUP_INTERVAL)
            {
                if let Err(e) = journal.apply_pending() {
                    log::warn!("group commit deferred: {e}");
                }
            }
        })
    };
    ready();
    log::info!(
        "serving {} at {} (turn {})",
        state.project.display(),
        plan.mountpoint.display(),
        journal.open_turn()
    );
    let result = mount.run();
    drop(stop_tx);
    let _ = committer.join();
    if let Err(e) = journal.flush() {
        log::error!("cannot store fingerprints at unmount: {e}");
    }
    if let Err(e) = journal.with_index(|ix| ix.checkpoint()) {
        log::warn!("cannot checkpoint the index at unmount: {e}");
    }
    control::unregister_mount(home, state, &plan.mountpoint);
    log::info!("unmounted {}", plan.mountpoint.display());
    result.map_err(|source| MountError::Io {
        what: format!("serving {} failed", plan.mountpoint.display()),
        source,
    })
}

fn unsafe_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Stops the daemon serving `state`'s project: asks it to unmount and waits
/// (up to `limit`) until it has released the state lock.
///
/// Errors name the mountpoint: the daemon refused (busy mountpoint), or it
/// did not stop in time. A daemon that died and left a stale mount is
/// cleaned up with `fusermount3 -uz`.
pub fn stop(state: &StateDir, mountpoint: &Path, limit: Duration) -> Result<(), String> {
    match control::request(&state.socket_path(), &Request::Unmount) {
        Ok(Response::Unmounting) => {}
        Ok(Response::Error { message, .. }) => return Err(message),
        Ok(other) => return Err(format!("unexpected answer from the daemon: {other:?}")),
        Err(e) => {
            if StateLock::is_held(state) {
                return Err(format!(
                    "the daemon serving {} does not answer on {}: {e}",
                    mountpoint.display(),
                    state.socket_path().display()
                ));
            }
            // No daemon: clean up whatever mount is left.
            if control::is_mount_point(mountpoint) {
                let st = std::process::Command::new("fusermount3")
                    .arg("-uz")
                    .arg(mountpoint)
                    .status();
                if !matches!(st, Ok(s) if s.success()) {
                    return Err(format!(
                        "cannot unmount stale mount {}",
                        mountpoint.display()
                    ));
                }
            }
            return Ok(());
        }
    }
    if control::wait_for(limit, || !StateLock::is_held(state)) {
        Ok(())
    } else {
        Err(format!(
            "the daemon serving {} did not stop within {} s",
            mountpoint.display(),
            limit.as_secs()
        ))
    }
}
