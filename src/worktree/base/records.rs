//! The look at the project's records after an answer read the project
//! itself: did a capture happen since the records were loaded? (the
//! module docs of `base.rs`, "Frozen against the project's later
//! changes").
//!
//! **The mark** is the full answer: the index's `data_version` (SQLite's
//! count of commits by other connections: two `fcntl` locks and a read
//! of the WAL's shared memory) and the capture log's inode, length and
//! modification time (a `stat`). Equal to the one taken when the records
//! were loaded, no capture happened in between.
//!
//! **The watch** makes the common case cheaper: an inotify instance
//! (non-blocking) watching the folder of the index and of the capture
//! log for writes, truncations, creations, removals and renames of the
//! names the mark looks at (`index.db`, its `-wal` and `-journal`, and
//! `capture.log`). A look first reads the watch's queue: empty (one
//! `read` that returns `EAGAIN`), the records did not move and the mark
//! is not taken; anything else (an event on one of those names, or the
//! queue's overflow) falls through to the mark. Events on the folder's
//! other names (the daemon's log, its socket, the export) are read and
//! dropped.
//!
//! **Why an empty queue proves that no capture happened before the read
//! of the project ended.** The project's mount records a path's
//! pre-image, by a `write(2)` to the capture log or an index commit (a
//! `write(2)` to the WAL, or to the database in a checkpoint), and only
//! once that call has returned changes the path. Linux queues the
//! `IN_MODIFY` event of a write inside the system call, after the bytes
//! are in the file and before it returns (`fsnotify_modify` in
//! `vfs_write`; a truncation, `fallocate` or copy likewise; a creation,
//! removal or rename queues its event before returning too). So if the
//! worktree's read saw the project changed through the mount, the
//! record's write returned before that read ended, and its event is in
//! the queue when the look after the read reads it. Unless an earlier
//! look already drained it: that look then took the mark after the drain,
//! which showed the write; a mark that moved (or could not be taken)
//! clears the mark the records were loaded with, so every look after it
//! takes the mark in full until the records are reloaded. A reload
//! drains the queue before it takes its mark, and takes that before it
//! reads the records: a capture after the drain is either in the mark
//! and the records, or queued for the next look.
//!
//! Every writer of the records runs on this machine: the index is in WAL
//! mode, which SQLite supports only among processes sharing one kernel's
//! memory, and only the project's daemon (or a direct CLI operation
//! holding the state lock) writes the capture log. A watch is on the
//! folder's inode, so a bind mount of the state dir, or another mount
//! namespace, reports the same events. Not reported, and never done by
//! opfs: a write through a shared memory mapping (SQLite writes the
//! database and the WAL with `write(2)`; only `-shm` is mapped, and the
//! mark does not read it except through `data_version`, which moves only
//! with a commit), or through a hard link in another folder.
//!
//! **When the watch cannot be trusted, the mark is taken at every look**:
//! the instance or the watch cannot be made (`fs.inotify.max_user_instances`
//! or `max_user_watches` reached: logged at info once), the queue
//! overflowed (`IN_Q_OVERFLOW`: a look falls through to the mark, as for
//! an event), the folder was removed, renamed or unmounted (`IN_IGNORED`,
//! `IN_DELETE_SELF`, `IN_MOVE_SELF`, `IN_UNMOUNT`: the watch is dropped
//! for good), or reading the queue failed (dropped too). A look that
//! finds more than [`MAX_EVENTS`] events queued stops reading and takes
//! the mark (the rest are read at the next look). The capture log
//! replaced or removed and a WAL checkpoint are events on the watched
//! names: the mark is taken, and it moves only if a record did.
//!
//! **A [`Base::quiesced`](super::Base::quiesced) base** (a merge, under
//! the project's quiesce guard or its state lock) looks at nothing, and
//! drops its watch.

use std::ffi::{CStr, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use super::{BaseError, Core, Inner};
use crate::record::PreImage;
use crate::store::log as capture_log;
use crate::view::{Reader, Resolved};

/// How many times [`Core::fresh`] answers again while the project's
/// records keep moving under its reads of the project (each time after
/// reloading them); the last answer is given as it is.
const FRESH_TRIES: u32 = 4;

/// Where the project's records stand: changes when a capture may have
/// happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mark {
    data_version: i64,
    /// The capture log's (inode, length, mtime ns), `None` when missing.
    log: Option<(u64, u64, i64)>,
}

/// The events one look reads at most before it takes the mark anyway.
const MAX_EVENTS: usize = 4096;

/// The watch's read buffer: room for many events, at least one with the
/// longest name (16 bytes and `NAME_MAX + 1`).
const BUF_LEN: usize = 4096;

/// The watch's mask on the records' folder.
fn mask() -> WatchFlags {
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
}

/// An inotify watch on the folder(s) of the project's index and capture
/// log (see the module docs).
pub(super) struct Watch {
    fd: OwnedFd,
    /// The names whose events move the records.
    names: Vec<CString>,
    buf: Vec<MaybeUninit<u8>>,
}

/// What a look at the watch's queue found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// Nothing on the records' names since the last look.
    Quiet,
    /// An event on one of them, or more than the watch can tell: the mark
    /// must be taken.
    Moved,
    /// The watch is gone or broken: take the mark, now and from now on.
    Lost,
}

impl Watch {
    /// A watch on the folders of `index` and `log`. Errors: those of
    /// `inotify_init1` and `inotify_add_watch` (limits reached, a folder
    /// missing).
    pub(super) fn new(index: &Path, log: &Path) -> io::Result<Watch> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        let mut dirs: Vec<&Path> = Vec::new();
        let mut names = Vec::new();
        let invalid = || io::Error::from(io::ErrorKind::InvalidInput);
        for (file, suffixes) in [(index, &["", "-wal", "-journal"][..]), (log, &[""][..])] {
            let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
                return Err(invalid());
            };
            for suffix in suffixes {
                let mut n = name.as_bytes().to_vec();
                n.extend_from_slice(suffix.as_bytes());
                names.push(CString::new(n).map_err(|_| invalid())?);
            }
            if !dirs.contains(&dir) {
                inotify::add_watch(&fd, dir, mask())?;
                dirs.push(dir);
            }
        }
        Ok(Watch {
            fd,
            names,
            buf: vec![MaybeUninit::uninit(); BUF_LEN],
        })
    }

    /// Reads every event queued since the last look (at most
    /// [`MAX_EVENTS`]).
    pub(super) fn look(&mut self) -> Seen {
        let Watch { fd, names, buf } = self;
        let interesting =
            |name: Option<&CStr>| name.is_some_and(|n| names.iter().any(|m| **m == *n));
        let lost =
            ReadFlags::IGNORED | ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF | ReadFlags::UNMOUNT;
        let mut reader = inotify::Reader::new(&*fd, buf);
        let mut seen = Seen::Quiet;
        for _ in 0..MAX_EVENTS {
            match reader.next() {
                Err(rustix::io::Errno::AGAIN) => return seen,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return Seen::Lost,
                Ok(event) => {
                    let flags = event.events();
                    if flags.intersects(lost) {
                        return Seen::Lost;
                    }
                    if flags.contains(ReadFlags::QUEUE_OVERFLOW) || interesting(event.file_name()) {
                        seen = Seen::Moved;
                    }
                }
            }
        }
        Seen::Moved
    }
}

impl Core {
    /// The mark, taken in full.
    pub(super) fn mark(&self, inner: &Inner) -> io::Result<Mark> {
        let data_version = inner.index.data_version().map_err(io::Error::other)?;
        let log = match self.log_stat() {
            Ok(st) => Some((
                st.st_ino,
                st.st_size as u64,
                st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64,
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        Ok(Mark { data_version, log })
    }

    /// True when the records may have moved since they were loaded: the
    /// watch's queue first, the mark when it holds anything or there is
    /// no watch (module docs). A mark found moved, or not taken, is
    /// forgotten, so every look until the next reload says moved.
    pub(super) fn moved(&self, inner: &mut Inner) -> io::Result<bool> {
        if inner.seen.is_some() {
            if let Some(watch) = inner.watch.as_mut() {
                match watch.look() {
                    Seen::Quiet => return Ok(false),
                    Seen::Moved => {}
                    Seen::Lost => {
                        log::info!(
                            "the watch on the project's records ({}) is gone: each read in \
                             the worktree now looks at them in full",
                            self.log_path.display()
                        );
                        inner.watch = None;
                    }
                }
            }
        }
        match self.mark(inner) {
            Ok(now) if inner.seen == Some(now) => Ok(false),
            Ok(_) => {
                inner.seen = None;
                Ok(true)
            }
            Err(e) => {
                inner.seen = None;
                Err(e)
            }
        }
    }

    /// Reloads every record since the base turn: the daemon's capture log
    /// committed first, and whatever a log still holds (a daemon that died
    /// before committing it) read directly. The watch's queue is drained,
    /// then the mark taken, then the records read (module docs).
    pub(super) fn reload(&self, inner: &mut Inner) -> Result<(), BaseError> {
        inner.seen = None;
        if self.log_len() > 0 {
            (self.commit)();
        }
        if let Some(watch) = inner.watch.as_mut() {
            if watch.look() == Seen::Lost {
                inner.watch = None;
            }
        }
        let mark = self.mark(inner).ok();
        self.dirs.clear();
        inner.resolved = Resolved::default();
        let noop = || {};
        let reader = Reader {
            index: &inner.index,
            blobs: &self.blobs,
            backing: &self.project,
            commit: &noop,
            resolved: &inner.resolved,
        };
        let mut timeline = reader.timeline(self.turn)?;
        if self.log_len() > 0 {
            // Records of a daemon that is gone: whole pre-images only (a
            // ranged one needs the index's ranges; the next daemon start
            // moves it there).
            if let Ok(entries) = capture_log::read(&self.log_path) {
                for e in entries {
                    if e.op == capture_log::Op::Record && !matches!(e.pre, PreImage::Ranged { .. })
                    {
                        if let (PreImage::File { blob, .. }, Some(data)) = (&e.pre, &e.data) {
                            inner.resolved.borrow_mut().insert(*blob, data.clone());
                        }
                        timeline.add(e.turn, &e.path, e.pre);
                    }
                }
            }
        }
        inner.timeline = timeline;
        inner.seen = mark;
        inner.generation += 1;
        Ok(())
    }

    pub(super) fn log_len(&self) -> u64 {
        self.log_stat().map_or(0, |st| st.st_size as u64)
    }

    /// `stat` of the capture log, by its name in the held descriptor of
    /// its folder (no walk of the state dir's path at each look).
    fn log_stat(&self) -> io::Result<rustix::fs::Stat> {
        match &self.log_dir {
            Some((dir, name)) => Ok(rustix::fs::statat(
                dir,
                name.as_c_str(),
                rustix::fs::AtFlags::empty(),
            )?),
            None => Ok(rustix::fs::stat(&self.log_path)?),
        }
    }

    /// Runs `f` against the records and, when it read the project itself,
    /// looks once at the records afterwards ([`Core::moved`]): unmoved
    /// since they were read, no capture happened before or during `f`'s
    /// read of the project, so what it saw there is the base's (the
    /// project's mount captures a path before it changes it); moved, the
    /// records are reloaded and `f` runs again, up to [`FRESH_TRIES`]
    /// times. An answer from records alone needs no look at all (a path's
    /// earliest record since the base never changes once made, so stale
    /// records answer it as fresh ones would). See the module docs.
    pub(super) fn fresh<R>(&self, f: impl FnMut(&Inner) -> io::Result<R>) -> io::Result<R> {
        self.fresh_unless(f, |_| false)
    }

    /// [`Core::fresh`], except that an answer `settled` accepts needs no
    /// look at the records (its user checks them later itself, as a
    /// [`ProjectFile`](super::files::ProjectFile) does after each read).
    pub(super) fn fresh_unless<R>(
        &self,
        mut f: impl FnMut(&Inner) -> io::Result<R>,
        settled: impl Fn(&R) -> bool,
    ) -> io::Result<R> {
        let mut inner = self.lock();
        if !self.check.load(Ordering::Relaxed) {
            inner.pending_drift.borrow_mut().clear();
            let r = f(&inner);
            self.note_pending_drift(&inner);
            return r;
        }
        let mut tries = 1;
        loop {
            inner.read_project.set(false);
            inner.pending_drift.borrow_mut().clear();
            let r = f(&inner);
            if r.as_ref().is_ok_and(&settled) {
                // Its user looks at the records and the drift itself.
                inner.pending_drift.borrow_mut().clear();
                return r;
            }
            if !inner.read_project.get() {
                return r;
            }
            if !self.moved(&mut inner)? || tries == FRESH_TRIES {
                self.note_pending_drift(&inner);
                return r;
            }
            tries += 1;
            self.reload(&mut inner).map_err(io::Error::other)?;
        }
    }

    /// True when the bytes just read from the project's own file at
    /// `path`, opened while the records were those of `generation`, are
    /// still the base's: the project's records did not move since, or
    /// they did (reloaded here) and still hold nothing for `path`. The
    /// project's mount records a path's pre-image before it changes the
    /// path, so a path without a record now was not changed through the
    /// mount before now, after the read. On `true` with moved records,
    /// `generation` is brought forward, so the next read costs one look
    /// at the records again.
    pub(super) fn still_current(&self, path: &[u8], generation: &AtomicU64) -> io::Result<bool> {
        let mut inner = self.lock();
        if !self.check.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let moved = self.moved(&mut inner)?;
        if !moved && inner.generation == generation.load(Ordering::Relaxed) {
            return Ok(true);
        }
        if moved {
            self.reload(&mut inner).map_err(io::Error::other)?;
        }
        if inner.timeline.state_at(path, self.turn).is_some() {
            return Ok(false);
        }
        generation.store(inner.generation, Ordering::Relaxed);
        Ok(true)
    }
}

/// An `O_PATH` descriptor of `log`'s folder and `log`'s name there.
pub(super) fn log_dir(log: &Path) -> Option<(OwnedFd, CString)> {
    let name = CString::new(log.file_name()?.as_bytes()).ok()?;
    let dir = rustix::fs::open(
        log.parent()?,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    Some((dir, name))
}

#[cfg(test)]
mod tests {
    use super::{Seen, Watch};
    use std::fs;

    fn watch(dir: &std::path::Path) -> Watch {
        Watch::new(&dir.join("index.db"), &dir.join("capture.log")).expect("watch")
    }

    #[test]
    fn the_watch_sees_the_records_names_and_nothing_else() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        let mut w = watch(d);
        assert_eq!(w.look(), Seen::Quiet, "nothing yet");
        fs::write(d.join("daemon.log"), "line\n").expect("write");
        fs::write(d.join("index.db-shm"), "x").expect("write");
        assert_eq!(w.look(), Seen::Quiet, "other names");
        for name in [
            "capture.log",
            "index.db",
            "index.db-wal",
            "index.db-journal",
        ] {
            fs::write(d.join(name), "x").expect("write");
            assert_eq!(w.look(), Seen::Moved, "{name} written");
            assert_eq!(w.look(), Seen::Quiet, "{name}: drained");
        }
        // Truncated (a group commit empties the log), replaced, removed.
        fs::File::options()
            .write(true)
            .open(d.join("capture.log"))
            .expect("open")
            .set_len(0)
            .expect("truncate");
        assert_eq!(w.look(), Seen::Moved, "log truncated");
        fs::write(d.join("new.log"), "y").expect("write");
        assert_eq!(w.look(), Seen::Quiet);
        fs::rename(d.join("new.log"), d.join("capture.log")).expect("rename");
        assert_eq!(w.look(), Seen::Moved, "log replaced");
        fs::remove_file(d.join("capture.log")).expect("rm");
        assert_eq!(w.look(), Seen::Moved, "log removed");
        // The folder itself goes: the watch is lost for good.
        drop(w);
        let sub = d.join("state");
        fs::create_dir(&sub).expect("mkdir");
        let mut w = watch(&sub);
        fs::remove_dir(&sub).expect("rmdir");
        assert_eq!(w.look(), Seen::Lost, "folder removed");
    }

    #[test]
    fn an_overflowed_queue_counts_as_moved() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        let mut w = watch(d);
        let max: usize = fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(16384);
        // Two names written in turn: events the kernel cannot merge,
        // none on the records' names, more than the queue holds.
        let mut a = fs::File::create(d.join("a")).expect("a");
        let mut b = fs::File::create(d.join("b")).expect("b");
        for _ in 0..max / 2 + 8 {
            std::io::Write::write_all(&mut a, b"x").expect("write");
            std::io::Write::write_all(&mut b, b"x").expect("write");
        }
        assert_eq!(w.look(), Seen::Moved);
    }
}
