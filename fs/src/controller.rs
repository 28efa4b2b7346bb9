//! The [`Controller`]: quiesce, invalidate and unmount a running mount from
//! other threads.
//!
//! It is the same for every filesystem this crate serves. What differs, how
//! a changed path maps to the kernel's cached inodes, a filesystem provides
//! through the small [`Invalidate`] trait; the quiesce gate is the crate's
//! one [`Gate`], and unmounting is fuser's.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fuser::{INodeNo, Notifier, SessionUnmounter};

use crate::quiesce::{Gate, QuiesceGuard};
use crate::sys::SyncOutcome;
use crate::watch::Watch;

/// How long [`Controller::invalidate`] waits for the kernel to take its
/// notifications before giving up on waiting (the notifications still go
/// out once the kernel is ready).
const INVALIDATE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`Controller::unmount_if_idle`] keeps retrying a busy mount.
pub const UNMOUNT_GRACE: Duration = Duration::from_secs(2);

/// The pause between two unmount attempts of a busy mount.
pub const UNMOUNT_POLL: Duration = Duration::from_millis(50);

/// One kernel cache invalidation, by FUSE inode number.
#[derive(Clone)]
pub(crate) enum Inval {
    /// Drop the cached name `name` in directory `parent`.
    Entry(u64, Vec<u8>),
    /// Drop the cached attributes and pages of an inode.
    Inode(u64),
    /// Drop the cached attributes of an inode, keeping its pages.
    Attr(u64),
}

/// The directory and the last name that `path` (relative, `""` the root)
/// leads to through the names the kernel may cache (`child(dir, name)`:
/// the node `dir/name` when the filesystem holds it). `None` after
/// appending what alone is to be invalidated: the root itself for `""`;
/// for a path under a directory the kernel never looked up, that
/// directory's name (it has no cached children, but the kernel may cache
/// its absence, which the change may have ended).
pub(crate) fn walk<'p>(
    path: &'p [u8],
    child: impl Fn(u64, &[u8]) -> Option<u64>,
    out: &mut Vec<Inval>,
) -> Option<(u64, &'p [u8])> {
    let parts: Vec<&[u8]> = path
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    let Some((name, dirs)) = parts.split_last() else {
        out.push(Inval::Inode(crate::inode::ROOT));
        return None;
    };
    let mut parent = crate::inode::ROOT;
    for dir in dirs {
        match child(parent, dir) {
            Some(ino) => parent = ino,
            None => {
                out.push(Inval::Entry(parent, dir.to_vec()));
                return None;
            }
        }
    }
    Some((parent, name))
}

/// Posts invalidations to the controller's invalidation thread without
/// waiting for the kernel to take them (the watch's thread uses it).
pub(crate) struct Poster {
    tx: mpsc::Sender<InvalJob>,
}

impl Poster {
    /// Queues `ops`; false once the invalidation thread is gone (the
    /// mount's controller was dropped).
    pub(crate) fn post(&self, ops: Vec<Inval>) -> bool {
        self.tx.send(InvalJob { ops, done: None }).is_ok()
    }
}

/// What a served filesystem lets its [`Controller`] do to the kernel's
/// caches: find what the kernel may have cached for a path.
pub(crate) trait Invalidate: Send + Sync {
    /// Appends to `out` the notifications that make a change made directly
    /// in the backing store at `path` (relative, as in
    /// [`crate::Mutation`]; `""` is the root) visible through the mount:
    /// the cached name, its inode and its parent directory. Forgets the
    /// filesystem's own mapping of the name first if it now leads to a
    /// different inode, so the next lookup re-reads it. For a path under a
    /// directory the kernel never looked up, only that directory's name
    /// (the kernel may cache it as a miss). Costs O(depth); must not wait
    /// for the quiesce gate.
    fn invalidations(&self, path: &[u8], out: &mut Vec<Inval>);

    /// Each file that has a handle open for writing, by FUSE inode number
    /// and one known path (relative, as in [`crate::Mutation`]): the files
    /// that may have dirty pages in the kernel. Costs O(open handles ×
    /// depth); must not wait for the quiesce gate.
    fn written_files(&self) -> Vec<(u64, Vec<u8>)>;

    /// The kernel has written `ino`'s dirty pages back: reports what its
    /// writers left through [`crate::MutationHook::after`], as a close does.
    /// Must not wait for the quiesce gate.
    fn written_back(&self, ino: u64);

    /// True when the filesystem cannot tell which files may hold dirty
    /// pages (no OPEN, so no handles open for writing: see
    /// `Options::no_open`); [`Controller::write_back`] then looks for the
    /// files some process maps shared, and each writeback WRITE reports
    /// what it left itself.
    fn writers_untracked(&self) -> bool {
        false
    }

    /// One known path (relative, as in [`crate::Mutation`]) of each of
    /// `inos` (FUSE inode numbers) that has one and is a regular file.
    /// Must not wait for the quiesce gate.
    fn files_of(&self, inos: &[u64]) -> Vec<(u64, Vec<u8>)> {
        let _ = inos;
        Vec::new()
    }
}

struct InvalJob {
    ops: Vec<Inval>,
    /// Told when the ops went out; `None` when nobody waits.
    done: Option<mpsc::Sender<()>>,
}

/// Notifications go out from their own thread: writing one can block while
/// the kernel holds a lock that an in-flight request also needs, and the
/// caller must never wait for that forever. `urgent`: real-time while it
/// may ([`crate::Options::realtime`]).
fn spawn_invalidator(notifier: Notifier, urgent: bool) -> io::Result<mpsc::Sender<InvalJob>> {
    let (tx, rx) = mpsc::channel::<InvalJob>();
    std::thread::Builder::new()
        .name("opfs-inval".to_string())
        .spawn(move || {
            // Like the watch's thread, which logs whether it could.
            let mut urgency = crate::sys::Urgency::claim(urgent).0;
            for job in rx {
                urgency.batch(job.ops.len());
                for op in &job.ops {
                    let res = match op {
                        Inval::Entry(parent, name) => {
                            notifier.inval_entry(INodeNo(*parent), OsStr::from_bytes(name))
                        }
                        Inval::Inode(ino) => notifier.inval_inode(INodeNo(*ino), 0, 0),
                        Inval::Attr(ino) => notifier.inval_inode(INodeNo(*ino), -1, 0),
                    };
                    if let Err(err) = res {
                        log::debug!("invalidation failed: {err}");
                    }
                }
                if let Some(done) = job.done {
                    let _ = done.send(());
                }
            }
        })?;
    Ok(tx)
}

struct ControlInner {
    fs: Arc<dyn Invalidate>,
    gate: Arc<Gate>,
    invalidations: Mutex<mpsc::Sender<InvalJob>>,
    unmounter: Mutex<Option<SessionUnmounter>>,
    /// For the filesystem's own notifications that must reach the kernel
    /// before a reply (see [`Controller::notifier`]).
    notifier: Notifier,
    mountpoint: PathBuf,
    /// The watch on the backing directory, once set up.
    watch: OnceLock<Option<Arc<Watch>>>,
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
    /// The controller of a session just mounted at `mountpoint`: `fs` finds
    /// cached inodes, `gate` is the one its mutating callbacks hold.
    /// Starts the invalidation thread, real-time while it may when `urgent`.
    pub(crate) fn new(
        fs: Arc<dyn Invalidate>,
        gate: Arc<Gate>,
        notifier: Notifier,
        unmounter: SessionUnmounter,
        mountpoint: &Path,
        urgent: bool,
    ) -> io::Result<Controller> {
        let invalidations = spawn_invalidator(notifier.clone(), urgent)?;
        Ok(Controller {
            inner: Arc::new(ControlInner {
                fs,
                gate,
                invalidations: Mutex::new(invalidations),
                unmounter: Mutex::new(Some(unmounter)),
                notifier,
                mountpoint: mountpoint
                    .canonicalize()
                    .unwrap_or_else(|_| mountpoint.to_path_buf()),
                watch: OnceLock::new(),
            }),
        })
    }

    /// Records the mount's watch (once, at mount time).
    pub(crate) fn set_watch(&self, watch: Option<Arc<Watch>>) {
        let _ = self.inner.watch.set(watch);
    }

    /// What keeps the kernel's caches coherent with changes made behind
    /// the mount's back: `Some("fanotify")` or `Some("inotify")` while the
    /// watch is active (long TTLs), `None` when there is no working watch
    /// (TTLs capped at [`crate::UNWATCHED_TTL`]: the watch could not be set
    /// up, a mark hit `max_user_marks`/`max_user_watches`, it is off, or the
    /// mount is an overlay).
    pub fn watching(&self) -> Option<&'static str> {
        match self.inner.watch.get() {
            Some(Some(w)) if w.active() => Some(w.backend()),
            _ => None,
        }
    }

    /// The session's notifier, for a callback that must invalidate before
    /// it replies. Only for notifications that take no lock a request may
    /// hold (an attribute-only `inval_inode`, offset -1); anything else
    /// goes through the invalidation thread ([`Controller::poster`]).
    pub(crate) fn notifier(&self) -> Notifier {
        self.inner.notifier.clone()
    }

    /// A sender of invalidations that does not wait for the kernel.
    pub(crate) fn poster(&self) -> Poster {
        Poster {
            tx: self
                .inner
                .invalidations
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// The mountpoint (canonical when it could be resolved at mount time).
    pub(crate) fn mountpoint(&self) -> &Path {
        &self.inner.mountpoint
    }

    /// Stops mutations: returns once no mutating callback is between its
    /// [`crate::MutationHook::before`] call and the end of its backing
    /// mutation, and keeps new ones waiting until the guard is dropped.
    /// Read-only operations continue. Blocks while another guard is alive.
    pub fn quiesce(&self) -> QuiesceGuard {
        self.inner.gate.write()
    }

    /// Writes back the kernel's dirty pages of this mount and waits until
    /// the daemon has served them: stores made through a shared writable
    /// `mmap` sit in the page cache until the kernel writes them back, and
    /// then arrive as ordinary WRITE requests (through the hook). Call it
    /// before [`Controller::quiesce`] at a turn boundary or a rewind, so a
    /// store made before the boundary is captured before it, and a dirty
    /// page cannot be written back over bytes a rewind restored.
    ///
    /// Only a file with a handle open for writing can have dirty pages (the
    /// mount has no writeback cache, so `write(2)` never leaves any; a
    /// shared writable mapping keeps its handle open, and unmapping writes
    /// back). For each such file (by one of its known names) it opens the
    /// file read-only through the mountpoint and `fdatasync`s it: the kernel
    /// sends the file's dirty pages as WRITEs and waits for their replies,
    /// then sends FSYNC (one backing `fdatasync`). So the cost is O(files
    /// open for writing): one `fork` plus a few system calls and one
    /// backing data sync each, independent of the tree size; with none open
    /// it is free. (`syncfs(2)` is no substitute: it starts the writeback
    /// but, on current kernels, does not wait for a FUSE server's replies.)
    /// A file that has lost every name is skipped: it is no longer in the
    /// tree. A mount without OPEN (`FUSE_NO_OPEN_SUPPORT`) has no handles
    /// to tell it which files are open for writing: it syncs the files
    /// some process maps shared instead (see `mapped_files`).
    ///
    /// The opens and syncs run in a forked child that holds none of this
    /// process's descriptors (`sys::fdatasync_in_child`): once a worker has
    /// read a request the kernel waits for its answer uninterruptibly, so a
    /// thread of this process waiting there when the process is killed
    /// would keep it from ever exiting (and `/dev/fuse` open, so the kernel
    /// would never abort the connection that would end the wait). The child
    /// does not hold `/dev/fuse`: the killed daemon exits, the connection is
    /// aborted, and the child's sync fails and it exits.
    ///
    /// Must be called without holding a [`QuiesceGuard`] and not from a
    /// FUSE worker thread: the WRITEs it causes wait on the gate and need a
    /// worker to serve them.
    ///
    /// # Errors
    ///
    /// The first failure to open (other than `ENOENT`: the name went away)
    /// or `fdatasync` one of the files, for example `EACCES` for a file
    /// its owner may not read, or a writeback error of the file; or the
    /// child process cannot be started (`EAGAIN`, `ENOMEM`) or ended early.
    /// The other files are still written back; a file that failed keeps its
    /// dirty pages until its next fsync, close or unmap. Without OPEN also:
    /// `/proc` cannot be listed or the mountpoint cannot be `statx`ed
    /// (nothing was written back then).
    pub fn write_back(&self) -> io::Result<()> {
        let files = if self.inner.fs.writers_untracked() {
            self.mapped_files()?
        } else {
            self.inner.fs.written_files()
        };
        if files.is_empty() {
            return Ok(());
        }
        let mut first_err = None;
        let mut paths = Vec::with_capacity(files.len());
        let mut inos = Vec::with_capacity(files.len());
        for (ino, path) in &files {
            let full = self.inner.mountpoint.join(OsStr::from_bytes(path));
            match CString::new(full.into_os_string().into_vec()) {
                Ok(c) => {
                    paths.push(c);
                    inos.push(*ino);
                }
                Err(_) => {
                    first_err.get_or_insert(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "NUL in a path under the mountpoint",
                    ));
                }
            }
        }
        let fs = &self.inner.fs;
        let ran = crate::sys::fdatasync_in_child(&paths, |i, outcome| {
            let res = match outcome {
                // fsync of a FUSE file writes its dirty pages back and
                // waits for the WRITE replies (fuse_sync_writes).
                SyncOutcome::Synced(synced) => {
                    fs.written_back(inos[i]);
                    synced
                }
                SyncOutcome::NotRegular => Ok(()),
                // Renamed or removed since: a name is gone, the pages
                // still go out at the file's next fsync or unmap.
                SyncOutcome::OpenFailed(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
                SyncOutcome::OpenFailed(e) => Err(e),
            };
            if let Err(e) = res {
                log::debug!("write back of {}: {e}", paths[i].to_string_lossy());
                first_err.get_or_insert(e);
            }
        });
        if let Err(e) = ran {
            log::debug!("write back: {e}");
            first_err.get_or_insert(e);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The files of this mount some process maps shared, for
    /// [`Controller::write_back`] of a mount that does not know which files
    /// are open for writing (`FUSE_NO_OPEN_SUPPORT`: no OPEN, no handles).
    /// Without `FUSE_WRITEBACK_CACHE` a file has dirty pages only while a
    /// shared mapping of it exists: `write(2)` goes straight to the daemon,
    /// and unmapping (or exiting) writes a mapping's pages back and waits
    /// for the replies (`fuse_vma_close`). So a store made before the call
    /// is either written back already or in a mapping listed in some
    /// process's `/proc/PID/maps` now. (`syncfs(2)` is no substitute: it
    /// starts the writeback of every dirty page but does not wait for a
    /// FUSE server's replies, `wait_sb_inodes` skips FUSE mappings; tried,
    /// `tests/rewind.rs` `mmap_store_kept_mapped_across_a_rewind_*` then
    /// failed 1 run in 3.) Cost: one read of each process's `maps`, nothing
    /// per file of the tree.
    ///
    /// # Errors
    ///
    /// `/proc` cannot be listed, or the mountpoint cannot be `statx`ed.
    fn mapped_files(&self) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let dev = crate::sys::mount_dev(&self.inner.mountpoint)?;
        let found = crate::sys::shared_mappings(dev)?;
        if found.unreadable > 0 {
            log::warn!(
                "write back: the memory maps of {} processes are unreadable (not root?); \
                 a store through a shared mapping of theirs reaches the daemon when written back",
                found.unreadable
            );
        }
        Ok(self.inner.fs.files_of(&found.inos))
    }

    /// Makes changes made directly in the backing directory at `paths`
    /// (relative, as in [`crate::Mutation`]; `""` is the root) visible
    /// through the mount: drops the kernel's cached name, attributes and
    /// pages for each path and its parent directory, and forgets the
    /// layer's own mapping of a name whose backing inode changed, so the
    /// next lookup re-reads it.
    ///
    /// Costs O(depth) per path. Must be called without holding a
    /// [`QuiesceGuard`]. Waits at most a few seconds for the kernel; paths
    /// the kernel never cached are skipped silently.
    pub fn invalidate(&self, paths: &[Vec<u8>]) {
        let mut ops = Vec::new();
        for path in paths {
            self.inner.fs.invalidations(path, &mut ops);
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
            .send(InvalJob {
                ops,
                done: Some(done_tx),
            });
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

    /// Unmounts, which makes [`crate::Mount::run`] return. Unmounting twice is a
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
