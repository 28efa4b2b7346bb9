//! The watch on the backing directory: every change made to it behind the
//! mount's back becomes kernel cache invalidations, so the kernel may cache
//! entries, attributes and misses for long (`docs/coherence.md`).
//!
//! - `mod.rs` (here): [`Watch`] (the marks, one per directory the inode
//!   table holds, counted per backing inode; the per-directory event
//!   counters that guard lookups against a change in flight; the thread
//!   that reads events and sends the invalidations).
//! - `fanotify.rs`: inode marks with `FAN_EVENT_ON_CHILD` and
//!   `FAN_REPORT_DFID_NAME` (needs `CAP_SYS_ADMIN`); events caused by this
//!   process are dropped (the kernel saw them, or the caller invalidates
//!   explicitly, as a rewind does).
//! - `inotify.rs`: the unprivileged fallback; its events carry no pid, so
//!   the daemon's own changes invalidate too (extra, never missing).
//!
//! The watch only decides how long the kernel may cache: capture and the
//! turn boundary never depend on it. When it cannot be set up, or a mark
//! fails (a `max_user_marks` / `max_user_watches` limit), it turns itself
//! inactive and the mount answers with [`crate::UNWATCHED_TTL`] from then
//! on.

mod fanotify;
mod inotify;

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::controller::{Inval, Poster};
use crate::inode::InodeKey;

/// Which watch a mount uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchMode {
    /// fanotify when privileged, else inotify (default).
    #[default]
    Auto,
    /// inotify even when fanotify would work (for tests and comparison).
    Inotify,
    /// No watch: the mount caches for [`crate::UNWATCHED_TTL`] at most.
    Off,
}

/// What changed at a name (or at the directory itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct What {
    /// The name was created, removed or renamed (from or to).
    pub(crate) entry: bool,
    /// The content changed (a write, a truncate).
    pub(crate) content: bool,
    /// Attributes changed (mode, owner, times, link count, xattrs).
    pub(crate) attr: bool,
}

/// An event as a backend read it.
struct Raw {
    /// The backend's id of the watched directory.
    id: Vec<u8>,
    /// The child's name; `None` for the directory itself.
    name: Option<Vec<u8>>,
    what: What,
    /// The backend dropped the mark (inotify `IN_IGNORED`).
    gone: bool,
}

/// What a read of the event queue gave.
enum Read {
    Events(Vec<Raw>),
    /// The queue overflowed: events were lost.
    Overflow(Vec<Raw>),
}

/// A kernel notification interface.
trait Backend: Send + Sync {
    /// `"fanotify"` or `"inotify"`.
    fn name(&self) -> &'static str;
    /// The fd to poll for events.
    fn fd(&self) -> BorrowedFd<'_>;
    /// Marks the directory `fd` (an `O_PATH` fd is fine); returns the id
    /// its events will carry.
    fn add(&self, fd: BorrowedFd<'_>) -> io::Result<Vec<u8>>;
    /// Removes the mark with id `id`.
    fn remove(&self, id: &[u8]);
    /// Reads what is queued without blocking.
    fn read(&self, buf: &mut [u8]) -> io::Result<Read>;
    /// Stops the group from hearing of content changes (`FAN_MODIFY`)
    /// made through the vfsmount of `fd`. `Unsupported` where the backend
    /// cannot tell mounts apart (inotify).
    fn ignore_modify_on_mount(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let _ = fd;
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// The filesystem side: turns a change into the invalidations it needs.
pub(crate) trait Target: Send + Sync {
    /// Appends what makes a change at `dir/name` (or at `dir` itself when
    /// `name` is `None`) visible through the mount.
    fn changed(&self, dir: u64, name: Option<&[u8]>, what: What, out: &mut Vec<Inval>);
    /// Appends what drops everything the kernel may cache (after events
    /// were lost).
    fn everything(&self, out: &mut Vec<Inval>);
}

/// One marked directory.
struct Mark {
    /// The FUSE inode number its events are reported for (the newest node
    /// of the backing inode).
    ino: u64,
    /// Nodes of the inode table holding this mark.
    count: u64,
    /// The backend's id.
    id: Vec<u8>,
}

#[derive(Default)]
struct Marks {
    by_key: HashMap<InodeKey, Mark>,
    by_id: HashMap<Vec<u8>, InodeKey>,
}

/// Slots of the per-directory event counters (directories share a slot by
/// inode number modulo this; a shared slot only costs a TTL 0 now and
/// then).
const GEN_SLOTS: usize = 4096;

/// How long after an event its invalidations are sent once more: a lookup
/// revalidating a cached name holds no directory lock, so its reply can
/// land just after the first invalidation, and an inode invalidation that
/// reaches the kernel before the reply of the lookup that first brings the
/// inode in finds no inode to invalidate (`docs/coherence.md`, "Races").
const TRAIL: Duration = Duration::from_millis(30);

/// How long the thread lets the daemon's own events gather while the
/// daemon is mid-burst of entry changes (an `rm -rf` or an untar through
/// the mount): after a wake-up that left nothing to invalidate and came
/// within [`BURST`] of the previous such wake-up, it sleeps this long
/// before it polls again, and then reads what the burst queued meanwhile
/// in one go. Without it every removal through the mount woke the thread
/// once, only to read the event and drop it (fanotify cannot ignore entry
/// events by mount: `EINVAL`). A change made behind the mount while the
/// thread gathers shows up to this much later (`docs/coherence.md`, "The
/// daemon's own changes").
const GATHER: Duration = Duration::from_millis(4);

/// Two wake-ups with nothing to invalidate at most this far apart mean a
/// burst of the daemon's own changes ([`GATHER`]); a single removal now
/// and then costs one wake-up, as before.
const BURST: Duration = Duration::from_millis(10);

/// The watch of one mount.
pub(crate) struct Watch {
    backend: Box<dyn Backend>,
    marks: Mutex<Marks>,
    gens: Box<[AtomicU64]>,
    active: AtomicBool,
    stop: AtomicBool,
}

impl Watch {
    /// Sets up the watch `mode` asks for. `None` (logged) when `mode` is
    /// [`WatchMode::Off`] or neither backend can be initialised.
    pub(crate) fn new(mode: WatchMode, root: BorrowedFd<'_>) -> Option<Arc<Watch>> {
        let backend: Box<dyn Backend> = match mode {
            WatchMode::Off => return None,
            WatchMode::Auto => match fanotify::Fanotify::new(root) {
                Ok(f) => Box::new(f),
                Err(err) => {
                    log::info!("fanotify unavailable ({err}); watching with inotify");
                    match inotify::Inotify::new() {
                        Ok(i) => Box::new(i),
                        Err(err) => {
                            log::warn!("cannot watch the backing directory ({err})");
                            return None;
                        }
                    }
                }
            },
            WatchMode::Inotify => match inotify::Inotify::new() {
                Ok(i) => Box::new(i),
                Err(err) => {
                    log::warn!("cannot watch the backing directory with inotify ({err})");
                    return None;
                }
            },
        };
        Some(Arc::new(Watch {
            backend,
            marks: Mutex::default(),
            gens: (0..GEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            active: AtomicBool::new(true),
            stop: AtomicBool::new(false),
        }))
    }

    /// `"fanotify"` or `"inotify"`.
    pub(crate) fn backend(&self) -> &'static str {
        self.backend.name()
    }

    /// Moves the daemon's own I/O out of the watch where the backend can:
    /// with fanotify, clones the mount tree of `backing` (privately:
    /// `open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`, a detached copy only
    /// the returned fd and what is opened through it hold) and ignores
    /// content changes made through that clone's vfsmount, so the writes
    /// the daemon makes through it (every WRITE, FALLOCATE, COPY_FILE_RANGE
    /// of the mount) no longer wake the watch thread. Returns the clone's
    /// root (an `O_PATH` fd of the same directory as `root`) for the
    /// daemon's I/O, or `None` (logged) where the backend is inotify
    /// (whose events cannot be told apart by mount), the clone or the
    /// ignore mark is refused (`EPERM` without `CAP_SYS_ADMIN`), or the
    /// clone's root is not `root`'s inode. Changes made through any other
    /// mount of the project still report; entry and attribute events of
    /// the daemon's own changes still come (a mount mark cannot ignore
    /// them: `EINVAL`) and are dropped by pid as before
    /// (`docs/coherence.md`, "The daemon's own changes").
    pub(crate) fn own_mount(
        &self,
        backing: &std::ffi::CString,
        root: BorrowedFd<'_>,
    ) -> Option<OwnedFd> {
        if self.backend.name() != "fanotify" {
            return None;
        }
        let clone = match crate::sys::open_tree_clone(backing) {
            Ok(fd) => fd,
            Err(err) => {
                log::info!("no private clone of the project's mount ({err}): the daemon's writes wake the watch");
                return None;
            }
        };
        let same = match (crate::sys::fstat(clone.as_fd()), crate::sys::fstat(root)) {
            (Ok(a), Ok(b)) => InodeKey::of(&a) == InodeKey::of(&b),
            _ => false,
        };
        if !same {
            log::info!("the clone of the project's mount is another directory: not used");
            return None;
        }
        if let Err(err) = self.backend.ignore_modify_on_mount(clone.as_fd()) {
            log::info!("cannot ignore the daemon's writes through its clone ({err}): not used");
            return None;
        }
        Some(clone)
    }

    /// True while every directory the inode table holds is marked.
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// The event counter of directory `dir`: read it before reading the
    /// backing directory and again before answering; a change means an
    /// event for `dir` was handled in between, and the answer must not be
    /// cached.
    pub(crate) fn gen(&self, dir: u64) -> u64 {
        self.gens[(dir as usize) % GEN_SLOTS].load(Ordering::Acquire)
    }

    fn bump(&self, dir: u64) {
        self.gens[(dir as usize) % GEN_SLOTS].fetch_add(1, Ordering::AcqRel);
    }

    fn bump_all(&self) {
        for g in &self.gens {
            g.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A node for the directory `key` (FUSE inode `ino`, open as `fd`)
    /// entered the inode table: marks it (again: a mark the kernel dropped
    /// with a deleted inode whose number came back must be renewed). A
    /// failure turns the watch inactive for good (logged once).
    pub(crate) fn add(&self, ino: u64, key: InodeKey, fd: BorrowedFd<'_>) {
        let mut marks = self.lock();
        match self.backend.add(fd) {
            Ok(id) => {
                marks.by_id.insert(id.clone(), key);
                let mark = marks.by_key.entry(key).or_insert(Mark {
                    ino,
                    count: 0,
                    id: Vec::new(),
                });
                mark.ino = ino;
                mark.count += 1;
                mark.id = id;
            }
            Err(err) => {
                if self.active.swap(false, Ordering::AcqRel) {
                    log::warn!(
                        "cannot {} directory inode {} ({err}): kernel caching falls back \
                         to {:?} TTLs for this mount (raise fs.{}.max_user_{} and remount)",
                        self.backend.name(),
                        key.ino,
                        crate::UNWATCHED_TTL,
                        self.backend.name(),
                        if self.backend.name() == "fanotify" {
                            "marks"
                        } else {
                            "watches"
                        }
                    );
                }
            }
        }
    }

    /// A node of the directory `key` left the inode table: drops its mark
    /// when no other node holds it.
    pub(crate) fn remove(&self, key: InodeKey) {
        let mut marks = self.lock();
        let Some(mark) = marks.by_key.get_mut(&key) else {
            return;
        };
        mark.count = mark.count.saturating_sub(1);
        if mark.count > 0 {
            return;
        }
        if let Some(mark) = marks.by_key.remove(&key) {
            marks.by_id.remove(&mark.id);
            self.backend.remove(&mark.id);
        }
    }

    /// Stops the event thread (at its next wake-up, within a second).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Starts the thread that reads events and posts their invalidations;
    /// `urgent`: real-time while it may ([`crate::Options::realtime`]).
    pub(crate) fn start(
        self: &Arc<Self>,
        target: Arc<dyn Target>,
        post: Poster,
        urgent: bool,
    ) -> io::Result<()> {
        let watch = Arc::clone(self);
        let (told, class) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("opfs-watch".to_string())
            .spawn(move || {
                let (urgency, claimed) = crate::sys::Urgency::claim(urgent);
                let _ = told.send(claimed);
                watch.serve(&*target, &post, urgency)
            })?;
        // Logged before the mount is announced, so its log says it.
        match class.recv() {
            Ok(Ok(true)) => {
                log::info!("the watch and invalidation threads run real-time (SCHED_FIFO 1)")
            }
            Ok(Err(err)) => log::info!(
                "the watch and invalidation threads stay in the normal class ({err}): \
                 while other processes keep every CPU busy, a change behind the mount may \
                 show late (docs/coherence.md, \"What limits promptness\")"
            ),
            Ok(Ok(false)) | Err(_) => {}
        }
        Ok(())
    }

    fn serve(&self, target: &dyn Target, post: &Poster, mut urgency: crate::sys::Urgency) {
        let mut buf = vec![0u8; 64 * 1024];
        let mut trailing: Vec<(Instant, Vec<Inval>)> = Vec::new();
        // When the last wake-up that left nothing to invalidate ended.
        let mut idle_at: Option<Instant> = None;
        while !self.stop.load(Ordering::Acquire) {
            let timeout = match trailing.first() {
                Some((due, _)) => due.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(1),
            };
            if poll_in(self.backend.fd(), timeout) {
                let mut ops = Vec::new();
                let mut events: usize = 0;
                loop {
                    match self.backend.read(&mut buf) {
                        Ok(Read::Events(raw)) if raw.is_empty() => break,
                        Ok(Read::Events(raw)) => {
                            events = events.saturating_add(raw.len());
                            if events > crate::sys::Urgency::STORM {
                                urgency.batch(events);
                            }
                            self.handle(target, raw, &mut ops)
                        }
                        Ok(Read::Overflow(raw)) => {
                            events = usize::MAX;
                            urgency.batch(events);
                            log::info!(
                                "{} queue overflowed: invalidating everything",
                                self.backend()
                            );
                            self.handle(target, raw, &mut ops);
                            self.bump_all();
                            target.everything(&mut ops);
                        }
                        Err(err) => {
                            log::warn!("reading {} events: {err}", self.backend());
                            break;
                        }
                    }
                }
                // A wake-up that left nothing to invalidate read the
                // daemon's own changes (fanotify drops them): while the
                // mount serves mutations the thread waits in the normal
                // class, as it did before; the next change from elsewhere
                // puts it back.
                urgency.batch(if ops.is_empty() { usize::MAX } else { events });
                if ops.is_empty() {
                    let now = Instant::now();
                    let burst = idle_at.is_some_and(|t| now.duration_since(t) < BURST);
                    idle_at = Some(now);
                    if burst {
                        // Never past a trailing post that falls due.
                        let nap = trailing.first().map_or(GATHER, |(due, _)| {
                            due.saturating_duration_since(now).min(GATHER)
                        });
                        std::thread::sleep(nap);
                    }
                } else {
                    idle_at = None;
                    let again = ops.clone();
                    if !post.post(ops) {
                        return;
                    }
                    trailing.push((Instant::now() + TRAIL, again));
                }
            }
            let now = Instant::now();
            while trailing.first().is_some_and(|(due, _)| *due <= now) {
                let (_, ops) = trailing.remove(0);
                if !post.post(ops) {
                    return;
                }
            }
        }
    }

    /// Bumps the counters of the directories `raw` names, then asks
    /// `target` for their invalidations.
    fn handle(&self, target: &dyn Target, raw: Vec<Raw>, out: &mut Vec<Inval>) {
        let resolved: Vec<(u64, Raw)> = {
            let mut marks = self.lock();
            raw.into_iter()
                .filter_map(|r| {
                    let key = *marks.by_id.get(&r.id)?;
                    let ino = marks.by_key.get(&key)?.ino;
                    if r.gone {
                        marks.by_id.remove(&r.id);
                        if marks.by_key.get(&key).is_some_and(|m| m.id == r.id) {
                            marks.by_key.remove(&key);
                        }
                    }
                    Some((ino, r))
                })
                .collect()
        };
        for (dir, _) in &resolved {
            self.bump(*dir);
        }
        for (dir, r) in &resolved {
            if r.what != What::default() {
                target.changed(*dir, r.name.as_deref(), r.what, out);
            }
        }
    }
}

/// Waits up to `timeout` for `fd` to be readable.
fn poll_in(fd: BorrowedFd<'_>, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis().max(1)).unwrap_or(1000);
    // SAFETY: one valid pollfd for the length given.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n > 0 && pfd.revents & libc::POLLIN != 0
}

/// An fd the kernel just returned, owned.
fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `/proc/self/fd/N` of `fd`, as a C string (marks are added by path: an
/// `O_PATH` fd as the directory fd gives `EBADF`).
fn proc_path(fd: BorrowedFd<'_>) -> std::ffi::CString {
    let text = format!("/proc/self/fd/{}", fd.as_raw_fd());
    // A formatted number has no NUL.
    std::ffi::CString::new(text).unwrap_or_default()
}
