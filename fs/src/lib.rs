//! opfs-fs: a passthrough FUSE filesystem over a directory fd that calls a
//! [`MutationHook`] before every mutation. It knows nothing about turns,
//! SQLite or blobs.
//!
//! [`mount`] serves a backing directory at a mountpoint; the returned
//! [`Mount`] runs the session ([`Mount::run`]) and hands out a
//! [`Controller`] that the core uses to quiesce mutations, invalidate the
//! kernel's caches after changing the backing directory itself, and unmount.
#![deny(missing_docs)]
// The FUSE layer never prints: it logs through `log`.
#![cfg_attr(not(test), warn(clippy::print_stdout, clippy::print_stderr))]

mod controller;
mod creds;
mod errno;
mod front;
mod handle;
mod hook;
mod inode;
mod ioctl;
pub mod lease;
pub mod overlay;
mod passthrough;
mod quiesce;
mod reply;
mod report;
mod sys;
mod watch;

use std::ffi::CString;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, InitFlags, MountOption, Session, SessionACL};

pub use controller::{Controller, UNMOUNT_GRACE, UNMOUNT_POLL};
pub use hook::{Errno, Mutation, MutationHook, NoHook, Parents};
pub use quiesce::QuiesceGuard;
pub use watch::WatchMode;

/// The longest the kernel may cache anything without a working watch on
/// the backing directory (today's TTLs before the watch): a change behind
/// the mount's back then shows within this.
pub const UNWATCHED_TTL: Duration = Duration::from_secs(1);

/// The default entry, attribute and negative-entry TTL while the watch is
/// active: the cap on staleness for changes no event reports (stores
/// through a shared mapping of a backing file, a write through a hard link
/// outside every watched directory; `docs/coherence.md`).
pub const WATCHED_TTL: Duration = Duration::from_secs(60);

use front::Front;
use passthrough::State;

/// Mount settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Threads serving FUSE requests (default 2; 0 is treated as 1).
    pub threads: usize,
    /// How long the kernel may cache attributes while the watch keeps it
    /// coherent (default [`WATCHED_TTL`]). Without a working watch at
    /// most [`UNWATCHED_TTL`]. The overlay (no watch) takes it as given.
    pub attr_ttl: Duration,
    /// How long the kernel may cache name → inode lookups while the watch
    /// keeps it coherent (default [`WATCHED_TTL`]). Without a working
    /// watch at most [`UNWATCHED_TTL`]. The overlay (no watch) takes it
    /// as given.
    pub entry_ttl: Duration,
    /// How long the kernel may cache a name's absence (a negative entry)
    /// while the watch keeps it coherent (default [`WATCHED_TTL`]; zero:
    /// no negative entries). Never without a working watch. The overlay
    /// (no watch) takes it as given: its misses change only through its
    /// own mount and its rewinds, which invalidate them.
    pub negative_ttl: Duration,
    /// The watch on the backing directory that keeps the kernel's caches
    /// coherent with changes made behind the mount's back (default
    /// [`WatchMode::Auto`]).
    pub watch: WatchMode,
    /// Let users other than the mounting one use the mount (`allow_other`;
    /// needs root or `user_allow_other` in `/etc/fuse.conf`).
    pub allow_other: bool,
    /// The source name shown in the mount table.
    pub fsname: String,
    /// Ask the kernel for `FUSE_NO_OPENDIR_SUPPORT` while the watch is
    /// active (default on): OPENDIR is answered `ENOSYS` once, after which
    /// the kernel sends no OPENDIR or RELEASEDIR and caches every listing
    /// (`FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR`) until the watch's
    /// `inval_inode` of the directory, or a changed mtime, drops it.
    /// Without a working watch at mount time it is never asked for. The
    /// overlay asks for it whenever this is on (its listings change only
    /// through its own mount and its rewinds).
    pub no_opendir: bool,
    /// Ask the kernel for `FUSE_NO_OPEN_SUPPORT` while the watch is active
    /// (default on): OPEN is answered `ENOSYS` once, after which the kernel
    /// sends no OPEN, RELEASE or FLUSH for regular files (FLUSH is answered
    /// `ENOSYS` once too) and keeps every file's pages
    /// (`FOPEN_KEEP_CACHE`) until the watch's `inval_inode` of the file,
    /// or a changed mtime or size, drops them. Reads and writes then come
    /// with handle 0 and go through an fd opened for the request; a file's
    /// `Content` is reported at the first mutating request of each epoch
    /// (write, size `setattr`, `fallocate`, `copy_file_range`, a mapping's
    /// writeback) and what the mount left after each of them, and
    /// [`Controller::write_back`] syncs the whole mount (crate README,
    /// "No open"). `ATOMIC_O_TRUNC` is then not asked for, so an
    /// `O_TRUNC` open arrives as a size `setattr`. Without a working watch
    /// at mount time it is never asked for, nor by a daemon without
    /// `CAP_DAC_OVERRIDE` (an unprivileged one): each request reopens the
    /// file, and a file created or made read-only after the caller opened
    /// it for writing could then not be written. The overlay ignores it.
    pub no_open: bool,
    /// Ask the kernel for `FUSE_HANDLE_KILLPRIV_V2` when it took
    /// `FUSE_NO_OPEN_SUPPORT` (default on): the kernel then stops asking
    /// for `security.capability` (a GETXATTR round trip) before every
    /// write, and the daemon clears the set-user-ID bit and the
    /// group-executable set-group-ID bit itself when a caller without
    /// `CAP_FSETID` writes, truncates, allocates or copies into a file,
    /// as the kernel would (crate README, "Killing suid/sgid"). The
    /// overlay ignores it.
    pub killpriv_v2: bool,
    /// Serve the backing directory through a private clone of its mount
    /// tree whose writes the watch ignores (default on; fanotify only, so
    /// privileged): the daemon's own WRITEs then cost the watch thread no
    /// wake-up. Without it (or where the clone or the ignore mark is
    /// refused) the daemon works through the backing directory's own
    /// mount and its writes' events are dropped by pid
    /// (`docs/coherence.md`, "The daemon's own changes"). The overlay
    /// ignores it.
    pub own_mount: bool,
    /// Answer CREATE `ENOSYS` once the kernel took `FUSE_NO_OPEN_SUPPORT`
    /// (default on): the kernel then makes every new file with MKNOD
    /// (`fc->no_create`) and, having no OPEN to send, opens it without a
    /// request, so a new file costs one request instead of CREATE and the
    /// RELEASE of its handle. The birth is captured as for `mknod`
    /// ([`Mutation::Create`]), under the caller's credentials and umask
    /// as CREATE made it (crate README, "No create"). With OPEN (no
    /// `FUSE_NO_OPEN_SUPPORT`) CREATE is served as always. The overlay
    /// ignores it.
    pub no_create: bool,
    /// Answer LSEEK (`SEEK_DATA`/`SEEK_HOLE`) `ENOSYS` (default on). The
    /// kernel then sets `no_lseek` for the connection and answers every
    /// later `SEEK_DATA`/`SEEK_HOLE` itself from the file's cached size
    /// (`fuse_lseek`'s fallback, `generic_file_llseek`): one data run from
    /// 0 to the size, no holes. Bytes read through the mount stay exact
    /// (a hole reads as zeros either way) and the backing file stays
    /// sparse; what a caller loses is the map of the holes, so a sparse
    /// file copied out of the mount by a tool that asks for it (`cp`,
    /// `tar --sparse`) is copied as a dense one unless the tool finds the
    /// zeros itself. What it saves: `grep` probes each file larger than
    /// its buffer with `SEEK_HOLE`, one round trip per file per pass
    /// (docs/bench/2026-12-03-agent-requests-floor.md, "The agent session's requests"). Off: each
    /// LSEEK is answered from the backing file. The overlay keeps its
    /// own answer (lower files report no holes, upper files their own).
    pub no_lseek: bool,
    /// Most fds the inode table keeps open (one per inode the kernel has
    /// cached) before it closes some and reopens them by name when needed.
    /// `None` (default): the soft `RLIMIT_NOFILE` after raising it to the
    /// hard limit, minus an eighth of it (at least 256) kept for the rest of
    /// the process (open files, the index, the capture log, the control
    /// socket).
    pub inode_fds: Option<usize>,
    /// Run the watch's thread and the invalidation thread in the real-time
    /// class (`SCHED_FIFO` priority 1) while the watch is active (default
    /// on). It needs `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of at least 1;
    /// without, the threads stay in the normal class (logged at mount).
    /// Why: a woken thread of a daemon in its own session (autogroup) can
    /// wait hundreds of milliseconds for a CPU while another session keeps
    /// every CPU busy, and a change behind the mount shows only once both
    /// threads have run (`docs/coherence.md`, "What limits promptness").
    /// A batch of more than 4,096 invalidations (a checkout, an `rm -rf`
    /// in the project) runs in the normal class. The overlay ignores it.
    pub realtime: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 2,
            attr_ttl: WATCHED_TTL,
            entry_ttl: WATCHED_TTL,
            negative_ttl: WATCHED_TTL,
            watch: WatchMode::Auto,
            allow_other: false,
            fsname: "opfs".to_string(),
            no_opendir: true,
            no_open: true,
            killpriv_v2: true,
            no_create: true,
            no_lseek: true,
            own_mount: true,
            inode_fds: None,
            realtime: true,
        }
    }
}

/// A mounted filesystem that is not yet (or no longer) served.
///
/// Dropping it without calling [`Mount::run`] unmounts.
pub struct Mount {
    session: Box<dyn Serve>,
    controller: Controller,
    /// Stops the watch's thread when the mount is done.
    watch_stop: Option<WatchStop>,
}

/// Stops a watch's event thread when dropped.
struct WatchStop(Arc<watch::Watch>);

impl Drop for WatchStop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// A mounted FUSE session of any of the crate's filesystems, so [`Mount`]
/// does not name which one it serves.
trait Serve: Send {
    /// Serves requests until the filesystem is unmounted.
    fn serve(self: Box<Self>) -> io::Result<()>;
}

impl<FS: fuser::Filesystem + Send + 'static> Serve for Session<FS> {
    fn serve(self: Box<Self>) -> io::Result<()> {
        self.run()
    }
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("mountpoint", &self.controller.mountpoint())
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
        self.session.serve()
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns how many
/// fds the inode table may keep: [`Options::inode_fds`], or the limit minus
/// an eighth of it (at least 256).
fn inode_budget(opts: &Options) -> usize {
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
    inode_fds
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
    let inode_fds = inode_budget(opts);
    let backing_c = CString::new(backing.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in backing path"))?;
    let root_fd = sys::open_dir(&backing_c)?;
    let st = sys::fstat(root_fd.as_fd())?;
    let root_key = inode::InodeKey::of(&st);
    let watch = watch::Watch::new(opts.watch, root_fd.as_fd());
    // The daemon's own I/O through a private clone of the project's mount
    // whose writes the watch ignores (`docs/coherence.md`, "The daemon's
    // own changes"): every node is opened below this root.
    let root_fd = match (&watch, opts.own_mount) {
        (Some(w), true) => w.own_mount(&backing_c, root_fd.as_fd()).unwrap_or(root_fd),
        _ => root_fd,
    };
    if let Some(w) = &watch {
        w.add(inode::ROOT, root_key, root_fd.as_fd());
    }
    let watched = watch.as_ref().is_some_and(|w| w.active());
    let mut wanted = InitFlags::empty();
    wanted.set(
        InitFlags::FUSE_NO_OPENDIR_SUPPORT,
        opts.no_opendir && watched,
    );
    // Without OPEN each request reopens the file by its mode: a daemon
    // that cannot override file modes would then fail a write through a
    // descriptor opened before the file became read-only (git writes its
    // objects into files it creates 0444).
    wanted.set(
        InitFlags::FUSE_NO_OPEN_SUPPORT,
        opts.no_open && watched && sys::overrides_file_modes(),
    );
    wanted.set(InitFlags::FUSE_HANDLE_KILLPRIV_V2, opts.killpriv_v2);
    let state = Arc::new(State {
        inodes: inode::Inodes::new(root_fd, root_key, inode_fds),
        handles: handle::Handles::default(),
        gate: Arc::default(),
        hook,
        watched: passthrough::Ttls {
            attr: opts.attr_ttl,
            entry: opts.entry_ttl,
            negative: opts.negative_ttl,
        },
        unwatched: passthrough::Ttls {
            attr: opts.attr_ttl.min(UNWATCHED_TTL),
            entry: opts.entry_ttl.min(UNWATCHED_TTL),
            negative: Duration::ZERO,
        },
        watch: watch.clone(),
        wanted,
        granted: front::Granted::default(),
        no_create: opts.no_create,
        no_lseek: opts.no_lseek,
        notifier: std::sync::OnceLock::new(),
    });
    if state.wanted.contains(InitFlags::FUSE_NO_OPEN_SUPPORT) {
        // Before the first request: a removal must not keep an inode that
        // a descriptor through the mount can still write.
        state.hook.opens_unseen();
    }
    let fs = Front {
        fs: Arc::clone(&state),
    };

    let gate = Arc::clone(&state.gate);
    let urgent = opts.realtime && watch.as_ref().is_some_and(|w| w.active());
    let mut mount = start(fs, Arc::clone(&state) as _, gate, mountpoint, opts, urgent)?;
    // Before the session serves its first request.
    let _ = state.notifier.set(mount.controller.notifier());
    match &watch {
        Some(w) if w.active() => {
            w.start(state, mount.controller.poster(), urgent)?;
            log::info!(
                "watching {} with {}: entries and attributes cached for {:?}, misses for {:?}",
                backing.display(),
                w.backend(),
                opts.entry_ttl.max(opts.attr_ttl),
                opts.negative_ttl
            );
            mount.watch_stop = Some(WatchStop(Arc::clone(w)));
        }
        _ => log::warn!(
            "not watching {} ({}): changes made behind the mount's back show within {:?}              (kernel caching capped at that)",
            backing.display(),
            match opts.watch {
                WatchMode::Off => "watch off",
                _ => "no watch could be set up",
            },
            UNWATCHED_TTL
        ),
    }
    mount.controller.set_watch(watch);
    Ok(mount)
}

/// Mounts `fs` at `mountpoint` with the crate's mount options and hands out
/// its [`Mount`]; `cache` and `gate` are what its [`Controller`] uses, and
/// `urgent` puts its invalidation thread in the real-time class
/// ([`Options::realtime`]).
fn start<FS: fuser::Filesystem + Send + 'static>(
    fs: FS,
    cache: Arc<dyn controller::Invalidate>,
    gate: Arc<quiesce::Gate>,
    mountpoint: &Path,
    opts: &Options,
    urgent: bool,
) -> io::Result<Mount> {
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
    let controller = Controller::new(
        cache,
        gate,
        session.notifier(),
        session.unmount_callable(),
        mountpoint,
        urgent,
    )?;
    Ok(Mount {
        session: Box::new(session),
        controller,
        watch_stop: None,
    })
}

/// Serves the copy-on-write overlay of `upper` over `lower` at
/// `mountpoint`, calling `hook` before every change of `upper` (with
/// upper-relative paths, exactly as [`mount`] reports changes of its
/// backing directory). The returned [`Mount`] and its [`Controller`] work
/// as for [`mount`]; [`Controller::invalidate`] takes upper-relative
/// paths (a whiteout `d/.wh.x` invalidates `d/x`, an opaque marker
/// `d/.wh..wh..opq` every child of `d`).
///
/// Raises the soft `RLIMIT_NOFILE` to the hard limit: cached nodes with an
/// upper entry hold fds, up to [`Options::inode_fds`].
///
/// `upper` and `work` are directories on one filesystem; `work` is scratch
/// for atomic copy-up, and everything in it is deleted here (leftovers of a
/// copy-up cut short by a crash). The lower layer's answers must not change
/// while mounted. Whiteouts and opaque directories are plain files in
/// `upper` (`.wh.NAME`, `.wh..wh..opq`; see the crate README, "Overlay").
///
/// # Errors
///
/// `upper` or `work` is not a directory that can be opened; `EXDEV` when
/// they are on different filesystems (copy-up renames from `work` into
/// `upper`); a failure reading the lower root or emptying `work`; and
/// everything [`mount`] can fail with. Nothing is mounted after an `Err`.
pub fn mount_overlay(
    upper: &Path,
    work: &Path,
    lower: Arc<dyn overlay::Lower>,
    mountpoint: &Path,
    hook: Arc<dyn MutationHook>,
    opts: &Options,
) -> io::Result<Mount> {
    let inode_fds = inode_budget(opts);
    let named = |what: &str, path: &Path, err: io::Error| {
        io::Error::new(
            err.kind(),
            format!("overlay {what} {}: {err}", path.display()),
        )
    };
    let c = |path: &Path| {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in overlay path"))
    };
    let upper_fd = sys::open_dir(&c(upper)?).map_err(|e| named("upper dir", upper, e))?;
    let work_fd = sys::openat(
        sys::open_dir(&c(work)?)
            .map_err(|e| named("work dir", work, e))?
            .as_fd(),
        &CString::from(c"."),
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
    )
    .map_err(|e| named("work dir", work, e))?;
    let (up_st, work_st) = (sys::fstat(upper_fd.as_fd())?, sys::fstat(work_fd.as_fd())?);
    if up_st.st_dev != work_st.st_dev {
        return Err(io::Error::new(
            io::ErrorKind::CrossesDevices,
            format!(
                "overlay work dir {} is not on the filesystem of the upper dir {} \
                 (copy-up renames from one into the other): put both in one filesystem",
                work.display(),
                upper.display()
            ),
        ));
    }
    for entry in std::fs::read_dir(work).map_err(|e| named("work dir", work, e))? {
        let entry = entry?;
        let path = entry.path();
        let res = if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        res.map_err(|e| named("work dir leftover", &path, e))?;
    }
    // No watch: the overlay's view changes only through its own mount, so
    // its TTLs are taken as given (the daemon picks them).
    let settings = overlay::Settings {
        inode_fds,
        attr_ttl: opts.attr_ttl,
        entry_ttl: opts.entry_ttl,
        negative_ttl: opts.negative_ttl,
        no_opendir: opts.no_opendir,
        // As for the passthrough: each request without a handle reopens
        // the upper file by its mode.
        no_open: opts.no_open && sys::overrides_file_modes(),
    };
    if settings.no_open {
        // Before the first request, as for the passthrough.
        hook.opens_unseen();
    }
    let state = Arc::new(overlay::State::new(
        upper_fd, work_fd, lower, hook, &settings,
    )?);
    let fs = Front {
        fs: Arc::clone(&state),
    };
    let gate = Arc::clone(&state.gate);
    start(fs, state, gate, mountpoint, opts, false)
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
