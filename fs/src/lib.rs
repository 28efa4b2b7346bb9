//! opfs-fs: a passthrough FUSE filesystem over a directory fd that calls a
//! [`MutationHook`] before every mutation. It knows nothing about turns,
//! SQLite or blobs.
//!
//! [`mount`] serves a backing directory at a mountpoint; the returned
//! [`Mount`] runs the session ([`Mount::run`]) and hands out a
//! [`Controller`] that the core uses to quiesce mutations, invalidate the
//! kernel's caches after changing the backing directory itself, and unmount.
#![deny(missing_docs)]

mod creds;
mod errno;
mod handle;
mod hook;
mod inode;
mod passthrough;
mod quiesce;
mod reply;
mod sys;

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use fuser::{Config, INodeNo, MountOption, Notifier, Session, SessionACL, SessionUnmounter};

pub use hook::{Errno, Mutation, MutationHook, NoHook};
pub use quiesce::QuiesceGuard;

use inode::ROOT;
use passthrough::{Passthrough, State};

/// How long [`Controller::invalidate`] waits for the kernel to take its
/// notifications before giving up on waiting (the notifications still go
/// out once the kernel is ready).
const INVALIDATE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`Controller::unmount_if_idle`] keeps retrying a busy mount.
pub const UNMOUNT_GRACE: Duration = Duration::from_secs(2);

/// The pause between two unmount attempts of a busy mount.
pub const UNMOUNT_POLL: Duration = Duration::from_millis(50);

/// Mount settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Threads serving FUSE requests (default 2; 0 is treated as 1).
    pub threads: usize,
    /// How long the kernel may cache attributes (default 1 s).
    pub attr_ttl: Duration,
    /// How long the kernel may cache name → inode lookups (default 1 s).
    pub entry_ttl: Duration,
    /// Let users other than the mounting one use the mount (`allow_other`;
    /// needs root or `user_allow_other` in `/etc/fuse.conf`).
    pub allow_other: bool,
    /// The source name shown in the mount table.
    pub fsname: String,
    /// Let the kernel keep a file's page cache across opens when the
    /// backing file did not change in between (`FOPEN_KEEP_CACHE`; default
    /// on). Off: every open drops the file's cached pages.
    pub keep_cache: bool,
    /// Let the kernel cache directory listings (`FOPEN_CACHE_DIR`) and keep
    /// them across opens while the directory is unchanged (default on).
    pub cache_dir: bool,
    /// Skip the `flush` round trip when a read-only handle is closed
    /// (`FOPEN_NOFLUSH`; default off: no measurable gain, docs/benchmarks.md).
    pub no_flush: bool,
    /// Most fds the inode table keeps open (one per inode the kernel has
    /// cached) before it closes some and reopens them by name when needed.
    /// `None` (default): the soft `RLIMIT_NOFILE` after raising it to the
    /// hard limit, minus an eighth of it (at least 256) kept for the rest of
    /// the process (open files, the index, the capture log, the control
    /// socket).
    pub inode_fds: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 2,
            attr_ttl: Duration::from_secs(1),
            entry_ttl: Duration::from_secs(1),
            allow_other: false,
            fsname: "opfs".to_string(),
            keep_cache: true,
            cache_dir: true,
            no_flush: false,
            inode_fds: None,
        }
    }
}

/// A mounted filesystem that is not yet (or no longer) served.
///
/// Dropping it without calling [`Mount::run`] unmounts.
pub struct Mount {
    session: Session<Passthrough>,
    controller: Controller,
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("mountpoint", &self.controller.inner.mountpoint)
            .finish()
    }
}

impl Mount {
    /// A handle for quiescing, invalidating and unmounting; it can be cloned
    /// and sent to other threads, and stays valid after `run` returns.
    pub fn controller(&self) -> Controller {
        self.controller.clone()
    }

    /// Serves requests until the filesystem is unmounted (by
    /// [`Controller::unmount`], `umount`, or `fusermount3 -u`).
    ///
    /// Returns `Err` if a worker thread failed to start or the FUSE device
    /// reported an error other than the unmount.
    pub fn run(self) -> io::Result<()> {
        self.session.run()
    }
}

/// Serves `backing` at `mountpoint`, calling `hook` before every mutation.
///
/// The mount is established (kernel handshake done) when this returns `Ok`;
/// requests are answered once [`Mount::run`] is called. Raises the soft
/// `RLIMIT_NOFILE` to the hard limit: cached inodes hold fds, up to
/// [`Options::inode_fds`].
///
/// # Errors
///
/// Fails if `backing` is not a directory that can be opened, if `/dev/fuse`
/// is missing, or if the mount itself fails (not permitted, bad mountpoint).
/// Nothing is mounted after an `Err`.
pub fn mount(
    backing: &Path,
    mountpoint: &Path,
    hook: Arc<dyn MutationHook>,
    opts: &Options,
) -> io::Result<Mount> {
    let nofile = match sys::raise_nofile_limit() {
        Ok(n) => n,
        Err(err) => {
            log::warn!("cannot raise RLIMIT_NOFILE: {err}");
            1024
        }
    };
    let inode_fds = opts.inode_fds.unwrap_or_else(|| {
        let n = usize::try_from(nofile).unwrap_or(usize::MAX);
        n.saturating_sub((n / 8).max(256))
    });
    log::info!("inode table: at most {inode_fds} fds (RLIMIT_NOFILE {nofile})");
    let backing_c = CString::new(backing.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in backing path"))?;
    let root_fd = sys::open_dir(&backing_c)?;
    let st = sys::fstat(root_fd.as_fd())?;
    let state = Arc::new(State {
        inodes: inode::Inodes::new(root_fd, inode::InodeKey::of(&st), inode_fds),
        handles: handle::Handles::default(),
        gate: Arc::default(),
        hook,
        attr_ttl: opts.attr_ttl,
        entry_ttl: opts.entry_ttl,
        keep_cache: opts.keep_cache,
        cache_dir: opts.cache_dir,
        no_flush: opts.no_flush,
    });
    let fs = Passthrough {
        state: Arc::clone(&state),
    };

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype("opfs".to_string()),
        MountOption::DefaultPermissions,
    ];
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;

    let mut session = Session::new(fs, mountpoint, &config)?;
    let invalidations = spawn_invalidator(session.notifier())?;
    let controller = Controller {
        inner: Arc::new(ControlInner {
            state,
            invalidations: Mutex::new(invalidations),
            unmounter: Mutex::new(Some(session.unmount_callable())),
            mountpoint: mountpoint
                .canonicalize()
                .unwrap_or_else(|_| mountpoint.to_path_buf()),
        }),
    };
    Ok(Mount {
        session,
        controller,
    })
}

/// One kernel cache invalidation.
enum Inval {
    Entry(u64, Vec<u8>),
    Inode(u64),
}

struct InvalJob {
    ops: Vec<Inval>,
    done: mpsc::Sender<()>,
}

/// Notifications go out from their own thread: writing one can block while
/// the kernel holds a lock that an in-flight request also needs, and the
/// caller must never wait for that forever.
fn spawn_invalidator(notifier: Notifier) -> io::Result<mpsc::Sender<InvalJob>> {
    let (tx, rx) = mpsc::channel::<InvalJob>();
    std::thread::Builder::new()
        .name("opfs-inval".to_string())
        .spawn(move || {
            for job in rx {
                for op in &job.ops {
                    let res = match op {
                        Inval::Entry(parent, name) => {
                            notifier.inval_entry(INodeNo(*parent), OsStr::from_bytes(name))
                        }
                        Inval::Inode(ino) => notifier.inval_inode(INodeNo(*ino), 0, 0),
                    };
                    if let Err(err) = res {
                        log::debug!("invalidation failed: {err}");
                    }
                }
                let _ = job.done.send(());
            }
        })?;
    Ok(tx)
}

struct ControlInner {
    state: Arc<State>,
    invalidations: Mutex<mpsc::Sender<InvalJob>>,
    unmounter: Mutex<Option<SessionUnmounter>>,
    mountpoint: PathBuf,
}

/// Controls a running mount from other threads. Cheap to clone.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<ControlInner>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("mountpoint", &self.inner.mountpoint)
            .finish()
    }
}

impl Controller {
    /// Stops mutations: returns once no mutating callback is between its
    /// [`MutationHook::before`] call and the end of its backing mutation,
    /// and keeps new ones waiting until the guard is dropped. Read-only
    /// operations continue. Blocks while another guard is alive.
    pub fn quiesce(&self) -> QuiesceGuard {
        self.inner.state.gate.write()
    }

    /// Makes changes made directly in the backing directory at `paths`
    /// (relative, as in [`Mutation`]; `""` is the root) visible through the
    /// mount: drops the kernel's cached name, attributes and pages for each
    /// path and its parent directory, and forgets the layer's own mapping of
    /// a name whose backing inode changed, so the next lookup re-reads it.
    ///
    /// Costs O(depth) per path. Must be called without holding a
    /// [`QuiesceGuard`]. Waits at most a few seconds for the kernel; paths
    /// the kernel never cached are skipped silently.
    pub fn invalidate(&self, paths: &[Vec<u8>]) {
        let inodes = &self.inner.state.inodes;
        let mut ops = Vec::new();
        for path in paths {
            let parts: Vec<&[u8]> = path
                .split(|&b| b == b'/')
                .filter(|p| !p.is_empty())
                .collect();
            let Some((name, dirs)) = parts.split_last() else {
                ops.push(Inval::Inode(ROOT));
                continue;
            };
            let mut parent = Some(ROOT);
            for dir in dirs {
                parent = parent.and_then(|p| inodes.child(p, dir));
            }
            // A directory the kernel never looked up has no cached children.
            let Some(parent) = parent else { continue };
            let cached = inodes.child(parent, name);
            if let Some(ino) = cached {
                let now = inodes.get(parent).and_then(|dir| {
                    let cname = sys::cname(name).ok()?;
                    sys::stat_at(dir.fd.as_fd(), &cname).ok().flatten()
                });
                if now.map(|st| inode::InodeKey::of(&st)) != inodes.key(ino) {
                    inodes.unlink_if(parent, name, ino);
                }
            }
            ops.push(Inval::Entry(parent, name.to_vec()));
            if let Some(ino) = cached {
                ops.push(Inval::Inode(ino));
            }
            ops.push(Inval::Inode(parent));
        }
        if ops.is_empty() {
            return;
        }
        let (done_tx, done_rx) = mpsc::channel();
        let sent = self
            .inner
            .invalidations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(InvalJob { ops, done: done_tx });
        if sent.is_err() {
            log::warn!("invalidation thread is gone");
            return;
        }
        if done_rx.recv_timeout(INVALIDATE_TIMEOUT).is_err() {
            log::warn!("kernel did not take invalidations within {INVALIDATE_TIMEOUT:?}");
        }
    }

    /// Unmounts only if nothing uses the mount: no detaching. As root with
    /// `umount2(2)`, otherwise with `fusermount3 -u`. While the mount is
    /// busy it retries every [`UNMOUNT_POLL`] for up to [`UNMOUNT_GRACE`]:
    /// a process that is exiting, or a just-forked child that has not yet
    /// reached `exec` (and still holds copies of its parent's descriptors),
    /// keeps the mount busy for a moment. On success `run` returns.
    ///
    /// # Errors
    ///
    /// `EBUSY` (with the mountpoint in the message) when a process still has
    /// its working directory or an open file in the mount after the grace;
    /// the mount keeps serving. Any other `umount2` error as it is.
    pub fn unmount_if_idle(&self) -> io::Result<()> {
        let mp = &self.inner.mountpoint;
        let deadline = Instant::now() + UNMOUNT_GRACE;
        while self.try_unmount()? {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    format!(
                        "{} is busy: a process has its working directory or an open file in it \
                         (leave it, or see `fuser -vm {}`), then retry",
                        mp.display(),
                        mp.display()
                    ),
                ));
            }
            std::thread::sleep(UNMOUNT_POLL);
        }
        Ok(())
    }

    /// One unmount attempt without detaching; `Ok(true)` means busy.
    fn try_unmount(&self) -> io::Result<bool> {
        let mp = &self.inner.mountpoint;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let path = CString::new(mp.as_os_str().as_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in mountpoint"))?;
            // SAFETY: valid C string.
            if unsafe { libc::umount2(path.as_ptr(), 0) } < 0 {
                let err = io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::EBUSY) {
                    return Err(err);
                }
                return Ok(true);
            }
            Ok(false)
        } else {
            let status = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg(mp)
                .stderr(std::process::Stdio::null())
                .status()?;
            Ok(!status.success())
        }
    }

    /// Unmounts, which makes [`Mount::run`] return. Unmounting twice is a
    /// no-op. If the mount is busy, detaches it lazily instead.
    ///
    /// # Errors
    ///
    /// Returns the `umount2` error if even the lazy detach fails.
    pub fn unmount(&self) -> io::Result<()> {
        let mut guard = self
            .inner
            .unmounter
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(unmounter) = guard.as_mut() else {
            return Ok(());
        };
        match unmounter.unmount() {
            Ok(()) => Ok(()),
            Err(err) => {
                log::warn!("umount failed ({err}); detaching");
                let path =
                    CString::new(self.inner.mountpoint.as_os_str().as_bytes()).map_err(|_| {
                        io::Error::new(io::ErrorKind::InvalidInput, "NUL in mountpoint")
                    })?;
                // SAFETY: valid C string.
                if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            }
        }
    }
}

// The core shares the controller between threads and may hand a quiesce
// guard to another thread; the mount is moved to the thread that runs it.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    const fn send<T: Send>() {}
    send_sync::<Controller>();
    send_sync::<QuiesceGuard>();
    send::<Mount>();
};
