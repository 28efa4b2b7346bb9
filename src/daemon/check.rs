//! Checking a mount request before anything is mounted: both paths, their
//! relation, what is already mounted, and whether the project is served.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::capture::OpenError;
use crate::state::holder;
use crate::state::lock::StateLock;
use crate::state::{self, mountinfo, registry};
use crate::store::StateDir;

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
    /// The daemon that holds this project's state dir is frozen (stopped,
    /// traced) or its mount is gone (`fusermount3 -uz`) while it lives:
    /// it serves nothing, yet a second daemon cannot take its place.
    #[error(
        "project {project} is still held by its daemon (pid {pid}), which is {state}{}: \
         it serves nothing; `opfs umount --force {}` ends it (what it captured is kept), \
         then mount again",
        if *unmounted { format!(" and whose mount at {} is gone", at.as_ref().map(|m| m.display().to_string()).unwrap_or_default()) } else { String::new() },
        at.as_ref().map_or_else(|| project.display().to_string(), |m| m.display().to_string())
    )]
    HeldByUnresponsive {
        /// The project.
        project: PathBuf,
        /// The daemon's pid.
        pid: u32,
        /// What the kernel says it is doing (`stopped (state T)`).
        state: String,
        /// The mountpoint its state dir records.
        at: Option<PathBuf>,
        /// True when that mountpoint is no longer mounted.
        unmounted: bool,
    },
    /// Another opfs daemon, keeping its records in another state dir (e.g.
    /// under another `OPFS_HOME`), already serves this project: two
    /// daemons would each record only the changes made through their own
    /// mount, and a rewind through one would undo what the other recorded
    /// behind its back.
    #[error(
        "project {project} is already served by another opfs daemon at {mountpoint} \
         (with another state dir, e.g. another OPFS_HOME): a project is served once; \
         work in {mountpoint}, or unmount it first (`opfs umount {mountpoint}` with that \
         daemon's OPFS_HOME, or `fusermount3 -u {mountpoint}`)"
    )]
    ServedElsewhere {
        /// The project.
        project: PathBuf,
        /// The mountpoint of the daemon serving it.
        mountpoint: PathBuf,
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
/// `ENOTCONN`) is detached ([`detach_mount`]) instead of refused.
/// When a dead mount was found (at the mountpoint, or where the state dir
/// says its daemon served) and the state dir's lock is still held, waits up
/// to [`DEAD_DAEMON_LOCK_WAIT`] for the dying daemon to release it before
/// answering [`MountError::AlreadyMounted`].
pub fn check(home: &Path, project: &Path, mountpoint: &Path) -> Result<MountPlan, MountError> {
    let project = canonical_dir(
        project,
        MountError::ProjectMissing,
        MountError::ProjectNotDir,
    )?;
    let probe = probe_mount(mountpoint);
    if probe == MountProbe::Silent {
        // A mount whose daemon is stopped or hung: nothing below may touch
        // it (resolving the path would wait for that daemon).
        let state = StateDir::for_project(&state::absolute(home), &project);
        if let Some(e) = held_by_unresponsive(&mountinfo::Table::read(), &state) {
            return Err(e);
        }
        return Err(MountError::MountpointBusy(state::lexically_absolute(
            mountpoint,
        )));
    }
    let found_dead = probe == MountProbe::Dead;
    if found_dead {
        let abs = state::absolute(mountpoint);
        log::warn!("cleaning up a stale mount at {}", abs.display());
        detach_mount(&abs).map_err(|e| MountError::Io {
            what: format!(
                "{} holds a dead opfs mount (its daemon is gone) that cannot be detached; \
                 `fusermount3 -uz {}` (package fuse3) or, as root, `umount -l {}` does it",
                abs.display(),
                abs.display(),
                abs.display()
            ),
            source: e,
        })?;
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
    // One read of the mount table for the three questions below (after the
    // stale mount above was cleaned up).
    let table = mountinfo::Table::read();
    if table.is_mount_point(&mountpoint) {
        // A stopped daemon of this very project still mounted there is
        // said as such (with how to end it), not as a busy mountpoint.
        let state = StateDir::for_project(&state::absolute(home), &project);
        if let Some(e) = held_by_unresponsive(&table, &state) {
            return Err(e);
        }
        return Err(MountError::MountpointBusy(mountpoint));
    }
    if let Some(mp) = table
        .opfs_mountpoints()
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
    if StateLock::is_held(&state) && !(daemon_died(&state, found_dead) && lock_released(&state)) {
        if let Some(e) = held_by_unresponsive(&table, &state) {
            return Err(e);
        }
        return Err(MountError::AlreadyMounted {
            at: registry::recorded_mountpoint(&state),
            project,
        });
    }
    if let Some(m) = mounts_in(&table, &project)
        .into_iter()
        .find(|m| !is_dead_mount(m))
    {
        return Err(MountError::ServedElsewhere {
            project,
            mountpoint: m,
        });
    }
    Ok(MountPlan { state, mountpoint })
}

/// [`MountError::HeldByUnresponsive`] when `state`'s lock is held by a
/// process that is frozen (stopped, traced), or by one whose recorded
/// mountpoint is no longer mounted (detached behind its back).
fn held_by_unresponsive(table: &mountinfo::Table, state: &StateDir) -> Option<MountError> {
    let pid = holder::lock_holder(state)?;
    let proc = holder::proc_state(pid);
    let at = registry::recorded_mountpoint(state);
    let unmounted = at.as_ref().is_some_and(|m| !table.is_mount_point(m));
    (proc.is_some_and(|p| p.is_frozen()) || unmounted).then(|| MountError::HeldByUnresponsive {
        project: state.project.clone(),
        pid,
        state: proc.map_or_else(|| "gone".to_string(), |p| p.to_string()),
        at,
        unmounted,
    })
}

/// Detaches the mount at `path` lazily: `fusermount3 -uz`, else (no
/// `fusermount3` on `PATH`, or it failed) `umount2(MNT_DETACH)`, which
/// root may always do. A mount left by a killed daemon must go even on a
/// machine without fuse3's helper, or the next mount of the project is
/// refused as "busy".
///
/// Errors: both failed (the error of the second; `EPERM` for a user
/// without `fusermount3`).
pub fn detach_mount(path: &Path) -> io::Result<()> {
    let helper = std::process::Command::new("fusermount3")
        .arg("-uz")
        .arg(path)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    if helper.is_ok_and(|s| s.success()) {
        return Ok(());
    }
    rustix::mount::unmount(path, rustix::mount::UnmountFlags::DETACH).map_err(io::Error::from)
}

/// How long [`check`] waits for the state lock of a daemon whose mount is
/// dead. A SIGKILLed daemon's mount reads as dead (`ENOTCONN`) as soon as
/// its `/dev/fuse` descriptor is closed, but its lock goes only when its
/// last thread has left the kernel, which can come a moment later (a
/// thread finishing a system call, the kernel closing the process's other
/// files); 5 s covers that on a loaded machine, and a live daemon never
/// has a dead mount, so the wait never delays a true "already mounted".
pub const DEAD_DAEMON_LOCK_WAIT: Duration = Duration::from_secs(5);

/// Whether the daemon that holds `state`'s lock has died: `found_dead` (the
/// requested mountpoint was a dead mount) or the mountpoint the state dir
/// records is one.
fn daemon_died(state: &StateDir, found_dead: bool) -> bool {
    found_dead || registry::recorded_mountpoint(state).is_some_and(|m| is_dead_mount(&m))
}

/// Polls `state`'s lock for up to [`DEAD_DAEMON_LOCK_WAIT`]; true once
/// nobody holds it.
fn lock_released(state: &StateDir) -> bool {
    let deadline = Instant::now() + DEAD_DAEMON_LOCK_WAIT;
    loop {
        if !StateLock::is_held(state) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The mountpoints of the opfs mounts serving `project` (a canonical path)
/// in this mount namespace, whatever state dir their daemons use, live or
/// stale (check each with [`is_dead_mount`]): every daemon names its mount
/// `opfs:<project>` (the source field of `/proc/self/mountinfo`), so this
/// finds them without writing anything, inside the project or out, and
/// without asking the mounts themselves. A mount whose source is another
/// path to the same directory (a bind mount: same device and inode)
/// counts too; the sources are `stat`ed, never the mounts. Mounts in other mount namespaces
/// (another container) are not seen. An unreadable mount table yields none.
pub fn mounts_of(project: &Path) -> Vec<PathBuf> {
    mounts_in(&mountinfo::Table::read(), project)
}

/// [`mounts_of`] in a mount table already read. A mount serves `project`
/// when its source names it, or names a directory with the same
/// identity (device and inode): a bind-mount alias of the project
/// (`mount --bind proj alias`) is the same directory under another path,
/// and a second daemon on it would record behind the first one's back.
fn mounts_in(table: &mountinfo::Table, project: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let id = std::fs::metadata(project).ok().map(|m| (m.dev(), m.ino()));
    table
        .opfs_mounts()
        .into_iter()
        .filter(|(_, source)| {
            source == project
                || id.is_some_and(|id| {
                    std::fs::metadata(source).is_ok_and(|m| (m.dev(), m.ino()) == id)
                })
        })
        .map(|(mp, _)| mp)
        .collect()
}

/// True when `path` is a FUSE mount whose daemon is gone (`ENOTCONN`, or
/// `ECONNABORTED`, which some kernels return for a connection whose daemon
/// died).
///
/// `stat` alone is not enough: for up to the attribute timeout after the
/// daemon died the kernel answers `stat` of the mount's root from its cache,
/// so the dead mount looks alive and a remount right after a crash would be
/// refused as busy. `statfs` always asks the daemon, so it sees the dead
/// connection at once. A daemon that is alive but stopped or hung never
/// answers: after [`MOUNT_PROBE_LIMIT`] the mount counts as not dead (the
/// probe is left behind on a thread of its own; see [`probe_mount`]).
pub fn is_dead_mount(path: &Path) -> bool {
    probe_mount(path) == MountProbe::Dead
}

/// How long [`probe_mount`] waits for a mount's daemon to answer.
pub const MOUNT_PROBE_LIMIT: Duration = Duration::from_secs(2);

/// What a `stat` and `statfs` of a path found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountProbe {
    /// It answered (a live mount, or no mount at all).
    Answers,
    /// A FUSE mount whose daemon is gone.
    Dead,
    /// No answer within [`MOUNT_PROBE_LIMIT`]: a FUSE mount whose daemon
    /// is stopped or hung.
    Silent,
}

/// Probes `path` as [`is_dead_mount`] says, on a thread of its own so the
/// caller waits at most [`MOUNT_PROBE_LIMIT`]: a request to a stopped
/// daemon's mount waits until the daemon runs again or dies (the thread
/// left behind ends then, or with the process).
pub fn probe_mount(path: &Path) -> MountProbe {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let p = path.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("opfs-mount-probe".into())
        .spawn(move || {
            let dead = match std::fs::metadata(&p) {
                Err(e) => is_dead_errno(&e),
                Ok(_) => match rustix::fs::statfs(&p) {
                    Ok(_) => false,
                    Err(e) => is_dead_errno(&e.into()),
                },
            };
            let _ = tx.send(dead);
        });
    if spawned.is_err() {
        return MountProbe::Answers;
    }
    match rx.recv_timeout(MOUNT_PROBE_LIMIT) {
        Ok(true) => MountProbe::Dead,
        Ok(false) => MountProbe::Answers,
        Err(_) => MountProbe::Silent,
    }
}

fn is_dead_errno(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED))
}
