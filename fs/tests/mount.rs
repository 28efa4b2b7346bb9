//! Integration tests on real FUSE mounts in temp dirs.

// A failed unwrap is a failed test, with the error in the message.
#![allow(clippy::unwrap_used)]

use std::ffi::{CString, OsStr};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opfs_fs::{Controller, Errno, Mutation, MutationHook, Options};
use opfs_testutil::is_mounted;

/// A mutation, owned, as the recording hook saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Content(Vec<u8>),
    Range(Vec<u8>, u64, u64),
    Metadata(Vec<u8>),
    Create(Vec<u8>),
    Remove(Vec<u8>),
    Rename(Vec<u8>, Vec<u8>, bool),
}

/// A path and the backing file's bytes when `Content` was reported for it.
type Snapshot = (Vec<u8>, Option<Vec<u8>>);

/// Records every mutation; for `Content` it also snapshots the backing
/// file's bytes at the time of the call, which proves the call came first.
struct Recorder {
    backing: PathBuf,
    seen: Mutex<Vec<Seen>>,
    snapshots: Mutex<Vec<Snapshot>>,
    fail: Mutex<Option<Errno>>,
    epoch: AtomicU64,
    range_min: AtomicU64,
}

impl MutationHook for Recorder {
    fn before(&self, m: &Mutation<'_>) -> Result<(), Errno> {
        if let Some(errno) = *self.fail.lock().unwrap() {
            return Err(errno);
        }
        let seen = match *m {
            Mutation::Content { path } => {
                let bytes = fs::read(self.backing.join(OsStr::from_bytes(path))).ok();
                self.snapshots.lock().unwrap().push((path.to_vec(), bytes));
                Seen::Content(path.to_vec())
            }
            Mutation::Range { path, offset, len } => {
                let bytes = fs::read(self.backing.join(OsStr::from_bytes(path))).ok();
                self.snapshots.lock().unwrap().push((path.to_vec(), bytes));
                Seen::Range(path.to_vec(), offset, len)
            }
            Mutation::Metadata { path } => Seen::Metadata(path.to_vec()),
            Mutation::Create { path } => Seen::Create(path.to_vec()),
            Mutation::Remove { path } => Seen::Remove(path.to_vec()),
            Mutation::Rename { from, to, exchange } => {
                Seen::Rename(from.to_vec(), to.to_vec(), exchange)
            }
        };
        self.seen.lock().unwrap().push(seen);
        Ok(())
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    fn range_min(&self) -> u64 {
        self.range_min.load(Ordering::SeqCst)
    }
}

impl Recorder {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
    fn fail_with(&self, errno: Option<Errno>) {
        *self.fail.lock().unwrap() = errno;
    }
}

/// A mounted temp dir; unmounts on drop.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    backing: PathBuf,
    mnt: PathBuf,
    hook: Arc<Recorder>,
    ctl: Controller,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

/// Whether the thread at `task` (`/proc/PID/task/TID`) sleeps in an
/// `open`/`openat` or `write` system call: a request of it waits for an
/// answer.
fn blocked_in_write(task: &Path) -> bool {
    let stat = fs::read_to_string(task.join("stat")).unwrap_or_default();
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    let syscall = fs::read_to_string(task.join("syscall")).unwrap_or_default();
    let nr = syscall
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<i64>().ok());
    matches!(state, Some("S" | "D"))
        && nr.is_some_and(|n| [libc::SYS_openat, libc::SYS_write].contains(&n))
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with(Options::default())
    }

    /// With OPEN (`no_open: false`): for the tests of what an open for
    /// writing reports. By default, while the watch is active, the kernel
    /// sends no OPEN and content is reported at the first mutating request
    /// of an epoch (`without_open_*` below).
    fn with_open() -> Fixture {
        Fixture::with(Options {
            no_open: false,
            ..Options::default()
        })
    }

    fn with(opts: Options) -> Fixture {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: these tests need FUSE (load the fuse module or run the \
             container with --device /dev/fuse)"
        );
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let backing = root.join("backing");
        let mnt = root.join("mnt");
        fs::create_dir(&backing).unwrap();
        fs::create_dir(&mnt).unwrap();
        let hook = Arc::new(Recorder {
            backing: backing.clone(),
            seen: Mutex::default(),
            snapshots: Mutex::default(),
            fail: Mutex::default(),
            epoch: AtomicU64::new(1),
            range_min: AtomicU64::new(u64::MAX),
        });
        let mount = opfs_fs::mount(&backing, &mnt, hook.clone(), &opts)
            .unwrap_or_else(|e| panic!("mount failed: {e} (is fusermount3 installed?)"));
        let ctl = mount.controller();
        let thread = std::thread::spawn(move || mount.run());
        wait_until("the mount", || is_mounted(&mnt));
        Fixture {
            _tmp: tmp,
            root,
            backing,
            mnt,
            hook,
            ctl,
            thread: Some(thread),
        }
    }

    fn m(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    fn b(&self, rel: &str) -> PathBuf {
        self.backing.join(rel)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Err(e) = self.ctl.unmount() {
            eprintln!("unmount failed: {e}");
        }
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("session ended with {e}"),
                Err(_) => eprintln!("session thread panicked"),
            }
        }
    }
}

fn p(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn errno_of(err: &std::io::Error) -> i32 {
    err.raw_os_error().unwrap_or(0)
}

#[test]
fn create_write_read_round_trip() {
    let fx = Fixture::new();
    fs::write(fx.m("a.txt"), b"hello world").unwrap();
    assert_eq!(fs::read(fx.m("a.txt")).unwrap(), b"hello world");
    assert_eq!(fs::read(fx.b("a.txt")).unwrap(), b"hello world");
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fx.m("a.txt"))
        .unwrap();
    f.seek(SeekFrom::Start(6)).unwrap();
    f.write_all(b"there").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello there");
    let mut names: Vec<_> = fs::read_dir(&fx.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, vec![OsStr::new("a.txt").to_owned()]);
}

#[test]
fn content_is_reported_before_a_write_open() {
    let fx = Fixture::new();
    fs::write(fx.b("f"), b"original").unwrap();
    fx.hook.take();
    // O_TRUNC: the hook must see the bytes before the truncation.
    fs::write(fx.m("f"), b"new").unwrap();
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("f"))]);
    let snaps = fx.hook.snapshots.lock().unwrap().clone();
    assert_eq!(snaps, vec![(p("f"), Some(p("original")))]);
    assert_eq!(fs::read(fx.b("f")).unwrap(), b"new");
    // Read-only opens and reads never call the hook.
    fs::read(fx.m("f")).unwrap();
    fs::metadata(fx.m("f")).unwrap();
    assert_eq!(fx.hook.take(), vec![]);
}

#[test]
fn creations_are_reported_as_create() {
    let fx = Fixture::new();
    fs::write(fx.m("new"), b"x").unwrap();
    fs::create_dir(fx.m("d")).unwrap();
    std::os::unix::fs::symlink("../new", fx.m("d/l")).unwrap();
    fs::hard_link(fx.m("new"), fx.m("d/h")).unwrap();
    let fifo = cpath(&fx.m("d/fifo"));
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let seen = fx.hook.take();
    let creates: Vec<_> = seen
        .iter()
        .filter(|s| matches!(s, Seen::Create(_)))
        .cloned()
        .collect();
    assert_eq!(
        creates,
        vec![
            Seen::Create(p("new")),
            Seen::Create(p("d")),
            Seen::Create(p("d/l")),
            Seen::Create(p("d/h")),
            Seen::Create(p("d/fifo")),
        ]
    );
    assert!(fs::symlink_metadata(fx.b("d/fifo"))
        .unwrap()
        .file_type()
        .is_fifo_like());
    assert_eq!(fs::read_link(fx.b("d/l")).unwrap(), Path::new("../new"));
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}
impl FifoLike for fs::FileType {
    fn is_fifo_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_fifo(self)
    }
}

#[test]
fn removals_renames_and_chmod_are_reported() {
    let fx = Fixture::new();
    fs::create_dir(fx.b("d")).unwrap();
    fs::write(fx.b("d/a"), b"A").unwrap();
    fs::write(fx.b("b"), b"B").unwrap();
    fs::write(fx.b("gone"), b"G").unwrap();

    fs::remove_file(fx.m("gone")).unwrap();
    fs::set_permissions(fx.m("b"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(fx.b("b")).unwrap().mode() & 0o7777, 0o600);
    let from = cpath(&fx.m("d/a"));
    let to = cpath(&fx.m("b"));
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    fs::rename(fx.m("b"), fx.m("c")).unwrap();
    fs::remove_file(fx.m("d/a")).unwrap();
    fs::remove_dir(fx.m("d")).unwrap();

    assert_eq!(
        fx.hook.take(),
        vec![
            Seen::Remove(p("gone")),
            Seen::Metadata(p("b")),
            Seen::Rename(p("d/a"), p("b"), true),
            Seen::Rename(p("b"), p("c"), false),
            Seen::Remove(p("d/a")),
            Seen::Remove(p("d")),
        ]
    );
    assert_eq!(fs::read(fx.b("c")).unwrap(), b"A");
    assert!(!fx.b("d").exists());
}

#[test]
fn a_failing_hook_fails_the_operation_and_leaves_backing_unchanged() {
    let fx = Fixture::new();
    fs::write(fx.b("keep"), b"keep me").unwrap();
    fs::create_dir(fx.b("dir")).unwrap();
    fx.hook.fail_with(Some(libc::ENOSPC));

    let err = fs::write(fx.m("new"), b"x").unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOSPC, "create: {err}");
    let err = fs::write(fx.m("keep"), b"changed").unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOSPC, "write-open: {err}");
    let err = fs::remove_file(fx.m("keep")).unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOSPC, "unlink: {err}");
    let err = fs::create_dir(fx.m("d2")).unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOSPC, "mkdir: {err}");
    let err = fs::rename(fx.m("keep"), fx.m("moved")).unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOSPC, "rename: {err}");
    let err = fs::remove_dir(fx.m("dir")).unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOSPC, "rmdir: {err}");
    let err = fs::set_permissions(fx.m("keep"), fs::Permissions::from_mode(0o600)).unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOSPC, "chmod: {err}");

    assert!(!fx.b("new").exists());
    assert!(!fx.b("d2").exists());
    assert!(!fx.b("moved").exists());
    assert!(fx.b("dir").is_dir());
    assert_eq!(fs::read(fx.b("keep")).unwrap(), b"keep me");
    assert_ne!(
        fs::metadata(fx.b("keep")).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(fx.hook.take(), vec![]);
}

#[test]
fn large_files_report_each_write_as_a_range_before_it_runs() {
    use std::os::unix::fs::FileExt;
    let fx = Fixture::with_open();
    fx.hook.range_min.store(1000, Ordering::SeqCst);
    fs::write(fx.b("big"), vec![b'a'; 4000]).unwrap();
    fs::write(fx.b("small"), b"tiny").unwrap();
    fx.hook.take();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fx.m("big"))
        .unwrap();
    assert_eq!(fx.hook.take(), vec![], "a ranged open reports nothing");
    f.write_all_at(b"XYZ", 100).unwrap();
    f.write_all_at(b"Q", 5000).unwrap();
    assert_eq!(
        fx.hook.take(),
        vec![
            Seen::Range(p("big"), 100, 3),
            Seen::Range(p("big"), 5000, 1)
        ]
    );
    // The hook saw the bytes before each write.
    let snaps = fx.hook.snapshots.lock().unwrap().clone();
    assert_eq!(snaps[0].1.as_deref(), Some(&[b'a'; 4000][..]));
    f.set_len(50).unwrap();
    assert_eq!(
        fx.hook.take(),
        vec![Seen::Range(p("big"), 50, u64::MAX - 50)]
    );
    drop(f);
    // Below the threshold, and O_TRUNC of a large file: Content at open.
    fs::write(fx.b("big"), vec![b'b'; 4000]).unwrap();
    fx.hook.take();
    fs::OpenOptions::new()
        .write(true)
        .open(fx.m("small"))
        .unwrap()
        .write_all(b"x")
        .unwrap();
    fs::write(fx.m("big"), b"cut").unwrap();
    assert_eq!(
        fx.hook.take(),
        vec![Seen::Content(p("small")), Seen::Content(p("big"))]
    );
    // A hard-linked large file is captured whole.
    fs::write(fx.b("linked"), vec![b'c'; 4000]).unwrap();
    fs::hard_link(fx.b("linked"), fx.b("linked2")).unwrap();
    fx.hook.take();
    fs::OpenOptions::new()
        .write(true)
        .open(fx.m("linked"))
        .unwrap()
        .write_all_at(b"z", 1)
        .unwrap();
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("linked"))]);
}

#[test]
fn a_new_epoch_reports_content_again_on_the_next_write() {
    let fx = Fixture::with_open();
    fs::write(fx.b("f"), b"").unwrap();
    fx.hook.take();
    let mut f = fs::OpenOptions::new().write(true).open(fx.m("f")).unwrap();
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("f"))]);
    f.write_all(b"one").unwrap();
    f.flush().unwrap();
    assert_eq!(fx.hook.take(), vec![], "same epoch: no second report");
    fx.hook.epoch.fetch_add(1, Ordering::SeqCst);
    f.write_all(b"two").unwrap();
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("f"))]);
    f.write_all(b"three").unwrap();
    assert_eq!(fx.hook.take(), vec![]);
    drop(f);
    assert_eq!(fs::read(fx.b("f")).unwrap(), b"onetwothree");
}

#[test]
fn symlinks_in_the_backing_dir_are_never_followed_by_the_layer() {
    let fx = Fixture::with(Options {
        entry_ttl: Duration::from_secs(60),
        attr_ttl: Duration::from_secs(60),
        ..Options::default()
    });
    let outside = fx.root.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret"), b"secret").unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), fx.b("link")).unwrap();

    // O_NOFOLLOW through the mount sees the link itself.
    let err = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(fx.m("link"))
        .unwrap_err();
    assert_eq!(errno_of(&err), libc::ELOOP);
    // lchown and lutimes change the link, not its target.
    let before = fs::metadata(outside.join("secret")).unwrap();
    std::os::unix::fs::lchown(fx.m("link"), Some(4242), Some(4242)).unwrap();
    let link_meta = fs::symlink_metadata(fx.b("link")).unwrap();
    assert_eq!((link_meta.uid(), link_meta.gid()), (4242, 4242));
    let after = fs::metadata(outside.join("secret")).unwrap();
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));

    // A directory the mount has cached is swapped for a symlink to the
    // outside behind its back: the layer keeps working on the directory it
    // holds and creates nothing outside.
    fs::create_dir(fx.b("d")).unwrap();
    fs::metadata(fx.m("d")).unwrap();
    fs::rename(fx.b("d"), fx.b("d_old")).unwrap();
    std::os::unix::fs::symlink(&outside, fx.b("d")).unwrap();
    let _ = fs::write(fx.m("d/planted"), b"x");
    assert!(!outside.join("planted").exists());
    assert_eq!(fs::read(outside.join("secret")).unwrap(), b"secret");
}

#[test]
fn non_utf8_names_round_trip() {
    let fx = Fixture::new();
    let name = OsStr::from_bytes(b"caf\xe9-\xff\xfe");
    fs::write(fx.mnt.join(name), b"bytes").unwrap();
    assert_eq!(fs::read(fx.backing.join(name)).unwrap(), b"bytes");
    let listed: Vec<_> = fs::read_dir(&fx.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(listed, vec![name.to_owned()]);
    assert_eq!(
        fx.hook.take(),
        vec![Seen::Create(b"caf\xe9-\xff\xfe".to_vec())]
    );
}

#[test]
fn hard_links_share_content_and_inode() {
    let fx = Fixture::with_open();
    fs::write(fx.m("a"), b"first").unwrap();
    fs::hard_link(fx.m("a"), fx.m("b")).unwrap();
    fs::write(fx.m("b"), b"second").unwrap();
    assert_eq!(fs::read(fx.m("a")).unwrap(), b"second");
    let (ma, mb) = (
        fs::metadata(fx.m("a")).unwrap(),
        fs::metadata(fx.m("b")).unwrap(),
    );
    assert_eq!(ma.ino(), mb.ino());
    assert_eq!(ma.nlink(), 2);
    // The write-open through "b" reports every known name of the inode.
    let seen = fx.hook.take();
    assert!(seen.contains(&Seen::Content(p("b"))), "{seen:?}");
    assert!(seen.contains(&Seen::Content(p("a"))), "{seen:?}");
}

#[test]
fn invalidate_makes_backing_changes_visible_at_once() {
    let fx = Fixture::with(Options {
        entry_ttl: Duration::from_secs(60),
        attr_ttl: Duration::from_secs(60),
        ..Options::default()
    });
    fs::create_dir(fx.m("sub")).unwrap();
    fs::write(fx.m("sub/f"), b"old").unwrap();
    fs::write(fx.m("g"), b"old").unwrap();
    assert_eq!(fs::read(fx.m("sub/f")).unwrap(), b"old");
    assert_eq!(fs::read(fx.m("g")).unwrap(), b"old");

    // Replaced by a new inode, and rewritten in place with a new size.
    fs::write(fx.b("sub/f.tmp"), b"new content").unwrap();
    fs::rename(fx.b("sub/f.tmp"), fx.b("sub/f")).unwrap();
    fs::write(fx.b("g"), b"longer new content").unwrap();
    fx.ctl
        .invalidate(&[p("sub/f"), p("g"), p("never/looked/up"), p("")]);

    assert_eq!(fs::read(fx.m("sub/f")).unwrap(), b"new content");
    assert_eq!(fs::read(fx.m("g")).unwrap(), b"longer new content");
    // The layer's own mapping follows the new inode.
    fx.hook.take();
    fs::write(fx.m("sub/f"), b"through mount").unwrap();
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("sub/f"))]);
    assert_eq!(fs::read(fx.b("sub/f")).unwrap(), b"through mount");
}

#[test]
fn quiesce_holds_mutations_until_released() {
    let fx = Fixture::new();
    fs::write(fx.m("f"), b"before").unwrap();
    let guard = fx.ctl.quiesce();
    let path = fx.m("f");
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        let _ = tid_tx.send(fs::read_link("/proc/thread-self").unwrap());
        fs::write(path, b"after")
    });
    // Reads still work while quiesced.
    assert_eq!(fs::read(fx.m("f")).unwrap(), b"before");
    // The writer reaches the gate: it sleeps in its open or write, whose
    // answer the gate holds back.
    let task = PathBuf::from("/proc").join(tid_rx.recv().unwrap());
    wait_until("the writer to wait at the gate", || blocked_in_write(&task));
    assert_eq!(fs::read(fx.b("f")).unwrap(), b"before");
    drop(guard);
    writer.join().unwrap().unwrap();
    assert_eq!(fs::read(fx.b("f")).unwrap(), b"after");
}

#[test]
fn entries_are_created_as_the_calling_user() {
    use std::os::unix::process::CommandExt;
    let fx = Fixture::with(Options {
        allow_other: true,
        ..Options::default()
    });
    // tempdir() makes its directory 0700; let the other user reach the mount.
    fs::set_permissions(&fx.root, fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir(fx.m("shared")).unwrap();
    fs::set_permissions(fx.m("shared"), fs::Permissions::from_mode(0o777)).unwrap();
    let script = "umask 022 && echo x > shared/file && mkdir shared/dir && ln -s file shared/sym \
                  && mkfifo shared/fifo";
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(&fx.mnt)
        .uid(65534)
        .gid(65534)
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    for name in ["file", "dir", "sym", "fifo"] {
        let meta = fs::symlink_metadata(fx.b("shared").join(name)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534), "{name}");
    }
    assert_eq!(
        fs::metadata(fx.b("shared/file")).unwrap().mode() & 0o777,
        0o644
    );
    assert_eq!(
        fs::metadata(fx.b("shared/dir")).unwrap().mode() & 0o777,
        0o755
    );
    // The daemon went back to root: its own creations are root's again.
    fs::write(fx.m("shared/root-file"), b"r").unwrap();
    let meta = fs::metadata(fx.b("shared/root-file")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (0, 0));
}

#[test]
fn the_callers_umask_applies_not_the_daemons() {
    let fx = Fixture::new();
    let script = "umask 000 && mkdir d0 && : > f0 && umask 027 && mkdir d27 && : > f27";
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(&fx.mnt)
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    let mode = |name: &str| fs::metadata(fx.b(name)).unwrap().mode() & 0o7777;
    assert_eq!(mode("d0"), 0o777);
    assert_eq!(mode("f0"), 0o666);
    assert_eq!(mode("d27"), 0o750);
    assert_eq!(mode("f27"), 0o640);
}

#[test]
fn truncate_xattrs_and_append_are_reported() {
    let fx = Fixture::with_open();
    fs::write(fx.b("f"), b"0123456789").unwrap();
    fx.hook.take();
    // truncate(2) without an open handle: setattr(size).
    let c = cpath(&fx.m("f"));
    assert_eq!(unsafe { libc::truncate(c.as_ptr(), 4) }, 0);
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("f"))]);
    assert_eq!(fs::read(fx.b("f")).unwrap(), b"0123");

    let name = c"user.opfs";
    let rc = unsafe { libc::setxattr(c.as_ptr(), name.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    let rc = unsafe { libc::removexattr(c.as_ptr(), name.as_ptr()) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    assert_eq!(
        fx.hook.take(),
        vec![Seen::Metadata(p("f")), Seen::Metadata(p("f"))]
    );

    let mut f = fs::OpenOptions::new().append(true).open(fx.m("f")).unwrap();
    f.write_all(b"45").unwrap();
    f.write_all(b"67").unwrap();
    drop(f);
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("f"))]);
    assert_eq!(fs::read(fx.m("f")).unwrap(), b"01234567");
}

#[test]
fn inode_numbers_are_the_backing_ones_and_stable() {
    use std::os::unix::fs::DirEntryExt;
    let fx = Fixture::new();
    fs::create_dir(fx.b("d")).unwrap();
    fs::write(fx.b("d/f"), b"x").unwrap();
    let backing_ino = fs::metadata(fx.b("d/f")).unwrap().ino();
    assert_eq!(fs::metadata(fx.m("d/f")).unwrap().ino(), backing_ino);
    let listed: Vec<u64> = fs::read_dir(fx.m("d"))
        .unwrap()
        .map(|e| e.unwrap().ino())
        .collect();
    assert_eq!(listed, vec![backing_ino]);
}

#[test]
fn timestamp_only_setattr_records_nothing() {
    let fx = Fixture::new();
    fs::write(fx.b("t"), b"x").unwrap();
    fx.hook.take();
    let c = cpath(&fx.m("t"));
    // utimensat(NULL times) = touch: timestamps are not part of a pre-image.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), std::ptr::null(), 0) },
        0
    );
    assert_eq!(fx.hook.take(), vec![]);
    // A chmod still is.
    fs::set_permissions(fx.m("t"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fx.hook.take(), vec![Seen::Metadata(p("t"))]);
}

/// Under `FUSE_NO_OPENDIR_SUPPORT` (the default while the watch is active)
/// the kernel sends no OPENDIR and keeps every listing until something
/// invalidates it: a name created behind the mount by another process
/// shows through the watch's invalidation, one removed through the mount
/// at once, and one the mounting process itself creates in the backing
/// directory (its own changes are not reported) once it calls
/// `Controller::invalidate`, as documented.
#[test]
fn without_opendir_cached_listings_follow_the_watch() {
    let fx = Fixture::new();
    fs::create_dir(fx.b("d")).unwrap();
    fs::write(fx.b("d/a"), b"a").unwrap();
    let names = |dir: &Path| {
        let mut v: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    // Listed twice: the second listing comes from the kernel's cache.
    assert_eq!(names(&fx.m("d")), ["a"]);
    assert_eq!(names(&fx.m("d")), ["a"]);
    let made = std::process::Command::new("sh")
        .arg("-c")
        .arg("echo b > \"$1\"/d/b")
        .arg("sh")
        .arg(&fx.backing)
        .status()
        .unwrap();
    assert!(made.success());
    wait_until("the watch to show d/b", || names(&fx.m("d")) == ["a", "b"]);
    fs::remove_file(fx.m("d/a")).unwrap();
    assert_eq!(names(&fx.m("d")), ["b"]);
    fs::write(fx.b("d/c"), b"c").unwrap();
    fx.ctl.invalidate(&[p("d/c")]);
    assert_eq!(names(&fx.m("d")), ["b", "c"]);
    // fsync of a directory without a handle (READDIR and FSYNCDIR come
    // with handle 0) still reaches the backing directory.
    let dir = fs::File::open(fx.m("d")).unwrap();
    dir.sync_all().unwrap();
}

/// `FOPEN_KEEP_CACHE` and `FOPEN_CACHE_DIR` are only answered while the
/// backing inode is unchanged since its previous open: a same-size rewrite
/// and a new entry made behind the mount's back must show at the next open.
/// (With OPENDIR and OPEN kept: under `FUSE_NO_OPENDIR_SUPPORT` and
/// `FUSE_NO_OPEN_SUPPORT` listings and pages follow the watch instead,
/// which ignores this process's own changes; see
/// `without_opendir_cached_listings_follow_the_watch` and
/// `without_open_cached_pages_follow_the_watch`.)
#[test]
fn kept_caches_follow_changes_behind_the_mounts_back() {
    let fx = Fixture::with(Options {
        no_opendir: false,
        no_open: false,
        ..Options::default()
    });
    fs::write(fx.b("f.txt"), b"aaaa").unwrap();
    for _ in 0..3 {
        assert_eq!(fs::read(fx.m("f.txt")).unwrap(), b"aaaa");
    }
    fs::write(fx.b("f.txt"), b"bbbb").unwrap();
    assert_eq!(fs::read(fx.m("f.txt")).unwrap(), b"bbbb");
    assert_eq!(fs::read(fx.m("f.txt")).unwrap(), b"bbbb");

    let names = |dir: &Path| {
        let mut v: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&fx.mnt), vec![OsStr::new("f.txt").to_owned()]);
    assert_eq!(names(&fx.mnt), vec![OsStr::new("f.txt").to_owned()]);
    fs::write(fx.b("g.txt"), b"new").unwrap();
    assert_eq!(
        names(&fx.mnt),
        vec![
            OsStr::new("f.txt").to_owned(),
            OsStr::new("g.txt").to_owned()
        ]
    );
    // Writes through the mount stay visible through the kept cache.
    fs::write(fx.m("f.txt"), b"cccc").unwrap();
    assert_eq!(fs::read(fx.m("f.txt")).unwrap(), b"cccc");
    assert_eq!(fs::read(fx.b("f.txt")).unwrap(), b"cccc");
}

/// Without OPEN (the default while the watch is active) a file's content
/// is reported at the first mutating request of each epoch, whatever
/// descriptor it comes through, and only then; a large file's writes
/// report their ranges; an `O_TRUNC` open arrives as a size `setattr`
/// (no `ATOMIC_O_TRUNC`), reported whole before it truncates.
#[test]
fn without_open_content_is_reported_at_the_first_mutating_request_of_an_epoch() {
    use std::os::unix::fs::FileExt;
    let fx = Fixture::new();
    fs::write(fx.b("f"), b"0123456789").unwrap();
    fx.hook.take();
    let f = fs::OpenOptions::new().write(true).open(fx.m("f")).unwrap();
    assert_eq!(fx.hook.take(), vec![], "an open reports nothing");
    f.write_all_at(b"ab", 0).unwrap();
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("f"))]);
    f.write_all_at(b"cd", 2).unwrap();
    let c = cpath(&fx.m("f"));
    assert_eq!(unsafe { libc::truncate(c.as_ptr(), 8) }, 0);
    assert_eq!(fx.hook.take(), vec![], "same epoch: nothing more");
    fx.hook.epoch.fetch_add(1, Ordering::SeqCst);
    // The descriptor opened in the earlier epoch reports again.
    f.write_all_at(b"ef", 4).unwrap();
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("f"))]);
    drop(f);
    assert_eq!(fs::read(fx.b("f")).unwrap(), b"abcdef67");

    fx.hook.epoch.fetch_add(1, Ordering::SeqCst);
    let snaps_before = fx.hook.snapshots.lock().unwrap().len();
    drop(
        fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(fx.m("f"))
            .unwrap(),
    );
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("f"))]);
    let snaps = fx.hook.snapshots.lock().unwrap().clone();
    assert_eq!(
        snaps[snaps_before].1.as_deref(),
        Some(&b"abcdef67"[..]),
        "the hook saw the bytes before the truncation"
    );
    assert_eq!(
        fs::read(fx.b("f")).unwrap(),
        b"",
        "O_TRUNC reached the file"
    );

    fx.hook.range_min.store(1000, Ordering::SeqCst);
    fs::write(fx.b("big"), vec![b'a'; 4000]).unwrap();
    fx.hook.take();
    let big = fs::OpenOptions::new()
        .write(true)
        .open(fx.m("big"))
        .unwrap();
    big.write_all_at(b"XYZ", 100).unwrap();
    big.write_all_at(b"Q", 5000).unwrap();
    assert_eq!(
        fx.hook.take(),
        vec![
            Seen::Range(p("big"), 100, 3),
            Seen::Range(p("big"), 5000, 1)
        ]
    );
    drop(big);
    // A large file emptied by `O_TRUNC` is captured whole, as through OPEN
    // (a range from 0 would hold a sparse file's holes as zeros).
    fx.hook.epoch.fetch_add(1, Ordering::SeqCst);
    fs::write(fx.m("big"), b"cut").unwrap();
    assert_eq!(fx.hook.take(), vec![Seen::Content(p("big"))]);
}

/// Without OPEN the kernel keeps a file's pages across opens until
/// something invalidates them: a rewrite behind the mount by another
/// process shows through the watch's invalidation (same size, so no
/// attribute tells), one the mounting process itself makes (its own
/// changes are not reported) once it calls `Controller::invalidate`.
#[test]
fn without_open_cached_pages_follow_the_watch() {
    let fx = Fixture::new();
    fs::write(fx.b("f.txt"), b"aaaa").unwrap();
    for _ in 0..3 {
        assert_eq!(fs::read(fx.m("f.txt")).unwrap(), b"aaaa");
    }
    let made = std::process::Command::new("sh")
        .arg("-c")
        .arg("printf bbbb > \"$1\"/f.txt")
        .arg("sh")
        .arg(&fx.backing)
        .status()
        .unwrap();
    assert!(made.success());
    wait_until("the watch to show the rewrite", || {
        fs::read(fx.m("f.txt")).unwrap() == b"bbbb"
    });
    fs::write(fx.b("f.txt"), b"cccc").unwrap();
    fx.ctl.invalidate(&[p("f.txt")]);
    assert_eq!(fs::read(fx.m("f.txt")).unwrap(), b"cccc");
}
