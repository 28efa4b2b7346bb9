//! Shared by the overlay tests: a mounted overlay of a temp upper dir over
//! a temp lower dir (through `DirLower`), a hook that records every
//! mutation, the replay check that the hook's stream explains the upper
//! tree, and a manifest of a tree to prove the lower one never changes.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opfs_fs::{Controller, Errno, Mutation, MutationHook, Options};
use opfs_testutil::{is_mounted, DirLower};

/// A mutation, owned, as the recording hook saw it (`before`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Content(Vec<u8>),
    Range(Vec<u8>, u64, u64),
    Metadata(Vec<u8>),
    Create(Vec<u8>),
    Remove(Vec<u8>),
    Rename(Vec<u8>, Vec<u8>, bool),
}

/// Records every mutation the overlay reports, and checks each `Create`
/// names an absent upper path and each `Remove` an existing one (at the
/// time of `before`).
pub struct Recorder {
    pub upper: PathBuf,
    pub seen: Mutex<Vec<Seen>>,
    /// What `after` was told: the mutations that reached the upper dir.
    pub done: Mutex<Vec<Seen>>,
    pub bad: Mutex<Vec<String>>,
    /// When set, every `before` fails with this errno (fail closed).
    pub fail: Mutex<Option<Errno>>,
    pub epoch: AtomicU64,
    pub range_min: AtomicU64,
}

impl Recorder {
    fn exists(&self, path: &[u8]) -> bool {
        fs::symlink_metadata(self.upper.join(OsStr::from_bytes(path))).is_ok()
    }
}

impl MutationHook for Recorder {
    fn before(&self, m: &Mutation<'_>) -> Result<(), Errno> {
        if let Some(errno) = *self.fail.lock().unwrap() {
            return Err(errno);
        }
        let seen = match *m {
            Mutation::Content { path } => Seen::Content(path.to_vec()),
            Mutation::Range { path, offset, len } => Seen::Range(path.to_vec(), offset, len),
            Mutation::Metadata { path } => Seen::Metadata(path.to_vec()),
            Mutation::Create { path } => {
                if self.exists(path) {
                    self.bad
                        .lock()
                        .unwrap()
                        .push(format!("Create of existing {path:?}"));
                }
                Seen::Create(path.to_vec())
            }
            Mutation::Remove { path } => {
                if !self.exists(path) {
                    self.bad
                        .lock()
                        .unwrap()
                        .push(format!("Remove of absent {path:?}"));
                }
                Seen::Remove(path.to_vec())
            }
            Mutation::Rename { from, to, exchange } => {
                Seen::Rename(from.to_vec(), to.to_vec(), exchange)
            }
        };
        for p in paths_of(&seen) {
            if p.starts_with(b"/") || p.ends_with(b"/") {
                self.bad.lock().unwrap().push(format!("bad path {p:?}"));
            }
        }
        self.seen.lock().unwrap().push(seen);
        Ok(())
    }

    fn after(&self, m: &Mutation<'_>, _now: Option<&libc::stat>) {
        let done = match *m {
            Mutation::Create { path } => Seen::Create(path.to_vec()),
            Mutation::Remove { path } => Seen::Remove(path.to_vec()),
            Mutation::Rename { from, to, exchange } => {
                Seen::Rename(from.to_vec(), to.to_vec(), exchange)
            }
            _ => return,
        };
        self.done.lock().unwrap().push(done);
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    fn range_min(&self) -> u64 {
        self.range_min.load(Ordering::SeqCst)
    }
}

fn paths_of(s: &Seen) -> Vec<&[u8]> {
    match s {
        Seen::Content(p) | Seen::Range(p, ..) | Seen::Metadata(p) | Seen::Create(p) => vec![p],
        Seen::Remove(p) => vec![p],
        Seen::Rename(a, b, _) => vec![a, b],
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An overlay mount of `upper` over `lower` in a temp dir.
pub struct Overlay {
    _tmp: tempfile::TempDir,
    pub lower: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub mnt: PathBuf,
    pub hook: Arc<Recorder>,
    /// The paths the replayed Create/Remove/Rename stream says exist in
    /// the upper dir (checked against it by [`Overlay::check_upper`]).
    replayed: std::collections::BTreeSet<Vec<u8>>,
    ctl: Option<Controller>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
    lower_manifest: BTreeMap<Vec<u8>, String>,
    pub opts: Options,
}

impl Overlay {
    /// A fresh temp dir whose lower tree `make_lower` fills, then mounted.
    pub fn new(make_lower: impl FnOnce(&Path)) -> Overlay {
        Overlay::with(Options::default(), make_lower)
    }

    pub fn with(opts: Options, make_lower: impl FnOnce(&Path)) -> Overlay {
        assert!(
            Path::new("/dev/fuse").exists(),
            "these tests need /dev/fuse"
        );
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let (lower, upper, work, mnt) = (
            root.join("lower"),
            root.join("upper"),
            root.join("work"),
            root.join("mnt"),
        );
        for d in [&lower, &upper, &work, &mnt] {
            fs::create_dir(d).unwrap();
        }
        make_lower(&lower);
        let hook = Arc::new(Recorder {
            upper: upper.clone(),
            seen: Mutex::default(),
            done: Mutex::default(),
            bad: Mutex::default(),
            fail: Mutex::default(),
            epoch: AtomicU64::new(1),
            range_min: AtomicU64::new(u64::MAX),
        });
        let mut o = Overlay {
            _tmp: tmp,
            lower_manifest: manifest(&lower),
            lower,
            upper,
            work,
            mnt,
            hook,
            replayed: Default::default(),
            ctl: None,
            thread: None,
            opts,
        };
        o.mount();
        o
    }

    /// Mounts (again).
    pub fn mount(&mut self) {
        let m = opfs_fs::mount_overlay(
            &self.upper,
            &self.work,
            Arc::new(DirLower::new(&self.lower)),
            &self.mnt,
            self.hook.clone(),
            &self.opts,
        )
        .unwrap_or_else(|e| panic!("mount_overlay failed: {e}"));
        self.ctl = Some(m.controller());
        self.thread = Some(std::thread::spawn(move || m.run()));
        let mnt = self.mnt.clone();
        wait_until("the mount", || is_mounted(&mnt));
    }

    /// Unmounts and waits for the session to end.
    pub fn unmount(&mut self) {
        if let Some(ctl) = self.ctl.take() {
            ctl.unmount().unwrap();
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap().unwrap();
        }
    }

    pub fn remount(&mut self) {
        self.unmount();
        self.mount();
    }

    pub fn ctl(&self) -> &Controller {
        self.ctl.as_ref().unwrap()
    }

    /// A path in the mount.
    pub fn m(&self, rel: impl AsRef<OsStr>) -> PathBuf {
        self.mnt.join(rel.as_ref())
    }

    /// A path in the upper dir.
    pub fn u(&self, rel: impl AsRef<OsStr>) -> PathBuf {
        self.upper.join(rel.as_ref())
    }

    /// Checks the lower dir is unchanged, every Create/Remove the hook saw
    /// was sound, and replaying the hook's stream explains the upper tree
    /// exactly (no entry appeared or went unreported).
    pub fn check_upper(&mut self) {
        assert_eq!(
            manifest(&self.lower),
            self.lower_manifest,
            "the lower dir changed"
        );
        let bad = self.hook.bad.lock().unwrap().clone();
        assert!(bad.is_empty(), "unsound hook calls: {bad:?}");
        let seen = self.take_seen();
        let actual: std::collections::BTreeSet<Vec<u8>> =
            manifest(&self.upper).into_keys().collect();
        assert_eq!(
            actual
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect::<Vec<_>>(),
            self.replayed
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect::<Vec<_>>(),
            "upper tree vs the hook's Create/Remove/Rename stream {seen:?}"
        );
    }

    /// The hook's `before` calls since the last check; replays the
    /// namespace changes `after` confirmed since.
    pub fn take_seen(&mut self) -> Vec<Seen> {
        let seen = std::mem::take(&mut *self.hook.seen.lock().unwrap());
        let done = std::mem::take(&mut *self.hook.done.lock().unwrap());
        for s in &done {
            assert!(seen.contains(s), "after without before: {s:?}");
            replay(&mut self.replayed, s);
        }
        seen
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        if let Some(ctl) = self.ctl.take() {
            let _ = ctl.unmount();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn under(p: &[u8], dir: &[u8]) -> bool {
    p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/'
}

fn replay(set: &mut std::collections::BTreeSet<Vec<u8>>, s: &Seen) {
    match s {
        Seen::Create(p) => {
            set.insert(p.clone());
        }
        Seen::Remove(p) => {
            set.remove(p);
        }
        Seen::Rename(from, to, exchange) => {
            let moved: Vec<Vec<u8>> = set
                .iter()
                .filter(|p| *p == from || under(p, from))
                .cloned()
                .collect();
            let other: Vec<Vec<u8>> = set
                .iter()
                .filter(|p| *p == to || under(p, to))
                .cloned()
                .collect();
            for p in moved.iter().chain(&other) {
                set.remove(p);
            }
            let re = |p: &[u8], a: &[u8], b: &[u8]| {
                let mut out = b.to_vec();
                out.extend_from_slice(&p[a.len()..]);
                out
            };
            for p in &moved {
                set.insert(re(p, from, to));
            }
            if *exchange {
                for p in &other {
                    set.insert(re(p, to, from));
                }
            }
        }
        _ => {}
    }
}

/// Every entry below `root` (relative path → type, mode, owner, content or
/// target). Times are left out.
pub fn manifest(root: &Path) -> BTreeMap<Vec<u8>, String> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<Vec<u8>, String>) {
    for ent in fs::read_dir(dir).unwrap() {
        let ent = ent.unwrap();
        let path = ent.path();
        let md = fs::symlink_metadata(&path).unwrap();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .as_os_str()
            .as_bytes()
            .to_vec();
        let ft = md.file_type();
        let what = if ft.is_dir() {
            walk(root, &path, out);
            "dir".to_string()
        } else if ft.is_symlink() {
            format!("link {:?}", fs::read_link(&path).unwrap())
        } else if ft.is_fifo() {
            "fifo".to_string()
        } else if ft.is_file() {
            let data = fs::read(&path).unwrap();
            format!("file {} {:x}", data.len(), fnv(&data))
        } else {
            "other".to_string()
        };
        out.insert(
            rel,
            format!("{what} {:o} {}:{}", md.mode() & 0o7777, md.uid(), md.gid()),
        );
    }
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// The names in the mounted dir `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| String::from_utf8_lossy(e.unwrap().file_name().as_bytes()).into_owned())
        .collect();
    v.sort();
    v
}
