//! Test harness shared by the integration tests: real FUSE mounts in temp
//! dirs, the `opfs` CLI driven exactly as a user drives it, and exact tree
//! manifests to compare against.
//!
//! Every fixture gets sibling temp dirs: the project (backing dir), the
//! mountpoint, `OPFS_HOME` (the state dir), so the state never lands inside
//! the project, and a user home. Every `opfs` command runs in the pinned
//! environment of [`TestEnv`] (`OPFS_HOME`, `HOME`, `XDG_DATA_HOME`,
//! `XDG_CONFIG_HOME`, `OPFS_CONFIG` all inside the fixture). `Drop` unmounts
//! (`opfs umount`, then `fusermount3 -uz`).
//!
//! The mount-table reader is `opfs-testutil` (`fs/testutil`), shared with
//! `fs/tests`. [`walk_tree`] is the one tree walk behind every manifest.

// Each test binary uses a different subset of the helpers.
#![allow(dead_code)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod loopfs;
pub mod mmap;
pub mod opens;

/// Path of the binary under test.
pub const OPFS: &str = env!("CARGO_BIN_EXE_opfs");

/// The binary the tests drive: `$OPFS_TEST_BIN` if set (to test an installed
/// or release build), else the one cargo just built.
pub fn opfs_bin() -> PathBuf {
    match std::env::var_os("OPFS_TEST_BIN") {
        Some(bin) => {
            eprintln!("testing OPFS_TEST_BIN={}", Path::new(&bin).display());
            PathBuf::from(bin)
        }
        None => PathBuf::from(OPFS),
    }
}

/// How long any single command may run before the test fails (a hung FUSE
/// daemon must fail the test, not hang the suite).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

/// How long `mount` may take to show up in the mount table (and `umount` to
/// disappear from it).
pub const MOUNT_TIMEOUT: Duration = Duration::from_secs(15);

/// Panics with a clear message unless this machine can mount FUSE
/// filesystems. The tests must never pass silently without a mount.
pub fn require_fuse() {
    if !Path::new("/dev/fuse").exists() {
        panic!(
            "/dev/fuse is missing: these integration tests mount real FUSE \
             filesystems and cannot run here (load the fuse module or run in a \
             container with /dev/fuse; scripts/setup checks this)"
        );
    }
    if which("fusermount3").is_none() {
        panic!(
            "fusermount3 is not installed: these integration tests mount real \
             FUSE filesystems (install the fuse3 package; scripts/setup does it)"
        );
    }
}

/// Finds `name` on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The outcome of one command.
#[derive(Debug)]
pub struct Run {
    /// What was run, for messages.
    pub what: String,
    /// Exit code; `None` if killed by a signal.
    pub code: Option<i32>,
    /// Captured stdout.
    pub stdout: String,
    /// Captured stderr.
    pub stderr: String,
}

impl Run {
    /// Panics with the full output unless the command exited 0.
    pub fn ok(self) -> Run {
        assert_eq!(self.code, Some(0), "command failed: {self}");
        self
    }

    /// Parses stdout as JSON, panicking with the output if it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self}"))
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` exited {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what, self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` with stdout and stderr going to files (a daemonizing child that
/// keeps inherited pipes open must not block us), with a timeout.
pub fn run_command(mut cmd: Command, scratch: &Path, timeout: Duration) -> io::Result<Run> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let what = format!("{cmd:?}");
    let out_path = scratch.join(format!("cmd-{n}.out"));
    let err_path = scratch.join(format!("cmd-{n}.err"));
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&out_path)?)
        .stderr(fs::File::create(&err_path)?);
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = String::from_utf8_lossy(&fs::read(&out_path)?).into_owned();
    let stderr = String::from_utf8_lossy(&fs::read(&err_path)?).into_owned();
    let _ = fs::remove_file(&out_path);
    let _ = fs::remove_file(&err_path);
    match status {
        Some(status) => Ok(Run {
            what,
            code: status.code(),
            stdout,
            stderr,
        }),
        None => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "`{what}` did not finish within {timeout:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
            ),
        )),
    }
}

/// The mount-table reader shared with `fs/tests` (`opfs-testutil`).
pub use opfs_testutil::{is_mounted, wait_mount_state};

/// The pinned environment of one test: every variable through which `opfs`
/// finds its state, its configuration or the user's home points into the
/// test's own temp dir, whatever the environment `cargo test` runs in.
/// Every `opfs` command the tests run gets it ([`TestEnv::pin`]): the
/// commands of [`Fixture`] (and so the daemons they start), of
/// `tests/export.rs` and of the sandbox tests (`tests/sandbox.rs`, which
/// also gives it to the shells it runs, so `$HOME` there is the pinned one).
#[derive(Debug, Clone)]
pub struct TestEnv {
    /// `OPFS_HOME`: the state dir.
    pub opfs_home: PathBuf,
    /// `HOME`: the user's home (credential dirs, `~/.config`,
    /// `~/.local/share`). Need not exist.
    pub home: PathBuf,
    /// `OPFS_CONFIG`: the configuration file. Need not exist (the
    /// defaults then).
    pub config: PathBuf,
}

impl TestEnv {
    /// Sets the pinned variables on `cmd`: `OPFS_HOME`, `HOME`,
    /// `OPFS_CONFIG`; `XDG_DATA_HOME` and `XDG_CONFIG_HOME` to their XDG
    /// defaults under the pinned `HOME` (so every fallback `opfs` knows
    /// resolves inside the test's dir too); and removes `OPFS_BWRAP` and
    /// `RUST_LOG`. Other `OPFS_*` knobs (`OPFS_INODE_FDS`, ...) pass
    /// through on purpose: `docs/testing.md` runs whole suites under them.
    pub fn pin<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("OPFS_HOME", &self.opfs_home)
            .env("HOME", &self.home)
            .env("OPFS_CONFIG", &self.config)
            .env("XDG_DATA_HOME", self.home.join(".local/share"))
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env_remove("OPFS_BWRAP")
            .env_remove("RUST_LOG")
    }
}

/// `cmd` with `$XDG_CONFIG_HOME` at `dir` instead of the pinned
/// `<home>/.config` (for a test of what opfs reads or hides there).
pub fn xdg_config_home<'a>(cmd: &'a mut Command, dir: &Path) -> &'a mut Command {
    cmd.env("XDG_CONFIG_HOME", dir)
}

/// A project, a mountpoint and a state dir in temp dirs; unmounts on drop.
pub struct Fixture {
    base: tempfile::TempDir,
    /// The project (backing dir).
    pub project: PathBuf,
    /// The mountpoint.
    pub mnt: PathBuf,
    /// `OPFS_HOME`.
    pub home: PathBuf,
    /// The environment every `opfs` command of this fixture gets (its
    /// `opfs_home` is [`Fixture::home`]).
    pub pinned: TestEnv,
    scratch: PathBuf,
    mounted: Cell<bool>,
    /// Extra environment for every `opfs` command (and so the daemon).
    env: std::cell::RefCell<Vec<(String, String)>>,
}

impl Fixture {
    /// Fresh empty project, mountpoint and state dir. Panics unless FUSE is
    /// usable on this machine.
    pub fn new() -> Fixture {
        Fixture::new_in(&std::env::temp_dir())
    }

    /// As [`Fixture::new`], with every dir inside `dir` (a filesystem a
    /// test made for it, e.g. one with reflinks).
    pub fn new_in(dir: &Path) -> Fixture {
        require_fuse();
        let base = tempfile::Builder::new()
            .prefix("opfs-test-")
            .tempdir_in(dir)
            .expect("create temp dir");
        let root = base.path().canonicalize().expect("canonicalize temp dir");
        let project = root.join("project");
        let mnt = root.join("mnt");
        let home = root.join("home");
        let scratch = root.join("scratch");
        let user_home = root.join("user-home");
        for d in [&project, &mnt, &home, &scratch, &user_home] {
            fs::create_dir(d).expect("create fixture dir");
        }
        let pinned = TestEnv {
            opfs_home: home.clone(),
            home: user_home,
            config: root.join("config.toml"),
        };
        Fixture {
            base,
            project,
            mnt,
            home,
            pinned,
            scratch,
            mounted: Cell::new(false),
            env: Default::default(),
        }
    }

    /// Sets `key=value` in the environment of every later `opfs` command
    /// (a daemon started by `mount` inherits it), e.g. `OPFS_RANGE_MIN`.
    pub fn set_env(&self, key: &str, value: &str) {
        self.env
            .borrow_mut()
            .push((key.to_string(), value.to_string()));
    }

    /// The fixture's root temp dir (parent of project, mnt and home).
    pub fn root(&self) -> &Path {
        self.base.path()
    }

    /// `rel` inside the project (backing dir).
    pub fn p(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.project.join(rel)
    }

    /// `rel` inside the mountpoint.
    pub fn m(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.mnt.join(rel)
    }

    /// An `opfs` command in the fixture's pinned environment
    /// ([`TestEnv::pin`]: `OPFS_HOME` is the fixture's state dir) plus what
    /// [`Fixture::set_env`] added.
    pub fn opfs_command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = Command::new(opfs_bin());
        self.pinned.pin(cmd.args(args)).current_dir(self.root());
        for (k, v) in self.env.borrow().iter() {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `opfs ARGS...` and returns its outcome, whatever the exit code.
    pub fn opfs<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        run_command(self.opfs_command(args), &self.scratch, COMMAND_TIMEOUT)
            .unwrap_or_else(|e| panic!("running opfs: {e}"))
    }

    /// Runs `opfs -C MOUNTPOINT ARGS...`.
    pub fn opfs_c<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        let mut all: Vec<OsString> = vec!["-C".into(), self.mnt.clone().into_os_string()];
        all.extend(args.iter().map(|a| a.as_ref().to_os_string()));
        self.opfs(&all)
    }

    /// `opfs mount PROJECT MOUNTPOINT`, then waits (polling the mount table)
    /// until the mount is visible.
    pub fn mount(&self) {
        self.mount_with(&[]);
    }

    /// `opfs mount PROJECT MOUNTPOINT EXTRA...` with `env` added for this
    /// command alone (and so for the daemon it starts); its outcome,
    /// whatever the exit code. Unlike [`Fixture::mount`] it does not wait
    /// for the mount, and [`Fixture::tree`] does not then compare the
    /// mountpoint.
    pub fn try_mount(&self, extra: &[&str], env: &[(&str, &str)]) -> Run {
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("mount"),
            self.project.as_os_str(),
            self.mnt.as_os_str(),
        ];
        args.extend(extra.iter().map(OsStr::new));
        let mut cmd = self.opfs_command(&args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        run_command(cmd, &self.scratch, COMMAND_TIMEOUT)
            .unwrap_or_else(|e| panic!("running opfs mount: {e}"))
    }

    /// [`Fixture::mount`] with `EXTRA...` arguments (`--no-export`, ...).
    pub fn mount_with(&self, extra: &[&str]) {
        let run = self.try_mount(extra, &[]);
        assert_eq!(run.code, Some(0), "opfs mount failed: {run}");
        self.mounted.set(true);
        assert!(
            wait_mount_state(&self.mnt, true, MOUNT_TIMEOUT),
            "opfs mount exited 0 but {} is not in /proc/self/mountinfo after {:?}",
            self.mnt.display(),
            MOUNT_TIMEOUT
        );
    }

    /// `opfs umount MOUNTPOINT`; asserts the mount is gone.
    pub fn umount(&self) {
        let run = self.opfs(&[OsStr::new("umount"), self.mnt.as_os_str()]);
        assert_eq!(run.code, Some(0), "opfs umount failed: {run}");
        assert!(
            wait_mount_state(&self.mnt, false, MOUNT_TIMEOUT),
            "opfs umount exited 0 but {} is still mounted",
            self.mnt.display()
        );
        self.mounted.set(false);
    }

    /// Runs `bash -c SCRIPT` with the mountpoint as cwd; asserts success and
    /// returns stdout.
    pub fn sh(&self, script: &str) -> String {
        self.sh_in(&self.mnt, script)
    }

    /// Runs `bash -c SCRIPT` with `dir` as cwd; asserts success.
    pub fn sh_in(&self, dir: &Path, script: &str) -> String {
        let mut cmd = Command::new("bash");
        cmd.arg("-euo")
            .arg("pipefail")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .env("LC_ALL", "C");
        self.pinned
            .pin(&mut cmd)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "opfs test")
            .env("GIT_AUTHOR_EMAIL", "test@opfs.invalid")
            .env("GIT_COMMITTER_NAME", "opfs test")
            .env("GIT_COMMITTER_EMAIL", "test@opfs.invalid");
        let run = run_command(cmd, &self.scratch, COMMAND_TIMEOUT)
            .unwrap_or_else(|e| panic!("running script in {}: {e}", dir.display()));
        assert_eq!(
            run.code,
            Some(0),
            "script failed in {}:\n{script}\n{run}",
            dir.display()
        );
        run.stdout
    }

    /// `opfs -C PROJECT ARGS...` (works unmounted too, unlike the
    /// mountpoint).
    pub fn opfs_p<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        let mut all: Vec<OsString> = vec!["-C".into(), self.project.clone().into_os_string()];
        all.extend(args.iter().map(|a| a.as_ref().to_os_string()));
        self.opfs(&all)
    }

    /// The state dir of the fixture's one project
    /// (`OPFS_HOME/projects/KEY`); asserts there is exactly one.
    pub fn state_dir(&self) -> PathBuf {
        let mut dirs: Vec<PathBuf> = fs::read_dir(self.home.join("projects"))
            .expect("read OPFS_HOME/projects")
            .map(|e| e.expect("entry").path())
            .collect();
        assert_eq!(dirs.len(), 1, "expected one state dir: {dirs:?}");
        dirs.pop().expect("one")
    }

    /// `opfs -C MOUNTPOINT turn --label LABEL`: asserts stdout is the new turn
    /// number alone and returns it.
    pub fn turn(&self, label: &str) -> u64 {
        let run = self.opfs_c(&["turn", "--label", label]).ok();
        parse_turn_number(&run)
    }

    /// `opfs -C MOUNTPOINT rewind N --json`: asserts exit 0, the documented
    /// object shape, `rewound_to == N`, no conflicts, not a dry run; returns
    /// the object.
    pub fn rewind(&self, n: u64) -> Value {
        self.rewind_in("", n)
    }

    /// [`Fixture::rewind`] with `ctx` before every failure message.
    pub fn rewind_in(&self, ctx: &str, n: u64) -> Value {
        let run = self.opfs_c(&["rewind", &n.to_string(), "--json"]);
        assert_eq!(run.code, Some(0), "{ctx}rewind {n} failed: {run}");
        let v = run.json();
        check_rewind_result(&v, n, false);
        assert_eq!(
            v["conflicts"].as_array().map(Vec::len),
            Some(0),
            "{ctx}rewind {n} reported conflicts: {v:#}"
        );
        v
    }

    /// `opfs -C MOUNTPOINT rewind [--all] --json`: the rewind points, sorted
    /// by turn number.
    pub fn points(&self, all: bool) -> Vec<Value> {
        let mut args = vec!["rewind", "--json"];
        if all {
            args.push("--all");
        }
        let run = self.opfs_c(&args).ok();
        let v = run.json();
        let mut list = v
            .as_array()
            .unwrap_or_else(|| panic!("`rewind --json` is not an array: {v:#}"))
            .clone();
        list.sort_by_key(|p| p["turn"].as_u64());
        list
    }

    /// `opfs -C MOUNTPOINT status --json`.
    pub fn status(&self) -> Value {
        self.opfs_c(&["status", "--json"]).ok().json()
    }

    /// The open turn, per `status --json`.
    pub fn open_turn(&self) -> u64 {
        let s = self.status();
        s["turn"]
            .as_u64()
            .unwrap_or_else(|| panic!("status has no numeric `turn`: {s:#}"))
    }

    /// Manifest of the project; also asserts the mount serves the same tree.
    pub fn tree(&self) -> Manifest {
        let m = manifest(&self.project);
        if self.mounted.get() {
            assert_manifest_eq("mountpoint vs project", &m, &manifest(&self.mnt));
        }
        m
    }

    /// Manifest of the project without the top-level `.git`; also asserts the
    /// mount serves the same tree.
    pub fn tree_without_git(&self) -> Manifest {
        let m = manifest_without_git(&self.project);
        if self.mounted.get() {
            assert_manifest_eq(
                "mountpoint vs project (without .git)",
                &m,
                &manifest_without_git(&self.mnt),
            );
        }
        m
    }

    /// Asserts that both the project and the mountpoint hold exactly
    /// `expected`.
    pub fn assert_tree(&self, ctx: &str, expected: &Manifest) {
        self.assert_both_trees(ctx, expected, manifest);
    }

    /// Like [`Fixture::assert_tree`], ignoring the top-level `.git`.
    pub fn assert_tree_without_git(&self, ctx: &str, expected: &Manifest) {
        self.assert_both_trees(ctx, expected, manifest_without_git);
    }

    fn assert_both_trees(&self, ctx: &str, expected: &Manifest, read: fn(&Path) -> Manifest) {
        for (side, root) in [("project", &self.project), ("mountpoint", &self.mnt)] {
            assert_manifest_eq(&format!("{ctx}: {side}"), expected, &read(root));
        }
    }
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Never panic here: this also runs while a failed test unwinds.
        // Worktrees a failed test left mounted (under the state dir) go
        // first, deepest first, so no daemon outlives the test.
        let mut left: Vec<PathBuf> = if Path::new("/proc/self/mountinfo").exists() {
            opfs_testutil::mount_points()
        } else {
            Vec::new()
        }
        .into_iter()
        .filter(|m| m.starts_with(self.base.path()) && *m != self.mnt)
        .collect();
        left.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        for m in left {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&m)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if !is_mounted(&self.mnt) {
            return;
        }
        let mut cmd = self.opfs_command(&[OsStr::new("umount"), self.mnt.as_os_str()]);
        cmd.current_dir("/");
        let _ = run_command(cmd, &self.scratch, Duration::from_secs(30));
        if wait_mount_state(&self.mnt, false, Duration::from_secs(5)) {
            return;
        }
        eprintln!(
            "opfs umount left {} mounted; falling back to fusermount3 -uz",
            self.mnt.display()
        );
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(&self.mnt)
            .stdin(Stdio::null())
            .status();
        let _ = wait_mount_state(&self.mnt, false, Duration::from_secs(5));
    }
}

/// True once `pid` has exited: gone, or a zombie nobody reaped yet whose
/// every thread has left too. A leader that is a zombie while one of its
/// threads still sits in a system call is not dead: it still holds its
/// files (the state lock, `/dev/fuse`).
pub fn is_dead(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(
        |task| match std::fs::read_to_string(task.path().join("stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        },
    )
}

/// Polls `cond` every 10 ms until it holds or `limit` has passed; whether
/// it held. The way a test waits for another process to reach a point
/// (never a fixed sleep).
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One tick of the kernel's coarse clock (`CLOCK_REALTIME_COARSE`), which
/// file timestamps come from.
pub fn coarse_tick() -> Duration {
    let res = rustix::time::clock_getres(rustix::time::ClockId::RealtimeCoarse);
    Duration::new(res.tv_sec as u64, res.tv_nsec as u32)
}

/// Waits until the kernel's coarse clock reads more than `margin` past
/// every timestamp of `path` (modification, change and birth): a change
/// made after it cannot carry the same time as the last one (so it is
/// seen as a change), and a turn opened after it starts more than
/// `margin` after `path` was made. File timestamps come from that clock,
/// so two changes within one tick may carry one time. A wait on the
/// clock with a bound (5 s), never a fixed sleep.
pub fn wait_clock_past(path: &Path, margin: Duration) {
    let md = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    let mut latest = ns(md.mtime(), md.mtime_nsec()).max(ns(md.ctime(), md.ctime_nsec()));
    if let Ok(born) = md.created() {
        if let Ok(d) = born.duration_since(std::time::UNIX_EPOCH) {
            latest = latest.max(d.as_nanos() as i128);
        }
    }
    let past = latest + margin.as_nanos() as i128;
    let coarse_now = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        ns(t.tv_sec, t.tv_nsec)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while coarse_now() <= past {
        assert!(
            Instant::now() < deadline,
            "the coarse clock did not pass {} + {margin:?} within 5 s",
            path.display()
        );
        // A pace for the poll, not an ordering: the loop waits on the clock.
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether the performance bounds of the suite are asserted: only with
/// `OPFS_PERF_BOUNDS=1` (an idle machine, `docs/testing.md`, "Performance
/// bounds"). Otherwise a missed bound is reported on stderr and the test
/// goes on: the default suite asserts behaviour, not speed, since it runs
/// on loaded machines too.
pub fn perf_bounds() -> bool {
    std::env::var_os("OPFS_PERF_BOUNDS").is_some_and(|v| v == "1")
}

/// Asserts a performance bound when [`perf_bounds`] says so; else only
/// reports a missed one.
pub fn perf_bound(holds: bool, what: impl FnOnce() -> String) {
    if holds {
        return;
    }
    let what = what();
    assert!(!perf_bounds(), "performance bound missed: {what}");
    eprintln!("performance bound missed (asserted only with OPFS_PERF_BOUNDS=1): {what}");
}

/// Polls until `pid` [`is_dead`]; false if it still lives after `limit`.
pub fn wait_dead(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !is_dead(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Sends SIGKILL to `pid` (a daemon the test started, its pid read from
/// its own status).
pub fn sigkill(pid: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Asserts that `run`'s stdout is one decimal number (plus a newline) and
/// returns it.
pub fn parse_turn_number(run: &Run) -> u64 {
    let text = run.stdout.strip_suffix('\n').unwrap_or(&run.stdout);
    assert!(
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()),
        "`turn` must print the new turn number alone on stdout: {run}"
    );
    text.parse()
        .unwrap_or_else(|e| panic!("turn number out of range ({e}): {run}"))
}

/// Checks the documented shape of a `rewind N --json` object.
pub fn check_rewind_result(v: &Value, n: u64, dry_run: bool) {
    assert!(v.is_object(), "rewind --json is not an object: {v:#}");
    // A rewind its conflicts stopped records no turn.
    assert!(
        v["turn"].as_u64().is_some() || v["stopped_by_conflicts"] == true,
        "rewind result has no numeric `turn`: {v:#}"
    );
    assert_eq!(v["rewound_to"].as_u64(), Some(n), "rewound_to: {v:#}");
    assert_eq!(v["dry_run"].as_bool(), Some(dry_run), "dry_run: {v:#}");
    let restored = v["restored"]
        .as_array()
        .unwrap_or_else(|| panic!("`restored` is not an array: {v:#}"));
    assert!(
        restored.iter().all(Value::is_string),
        "`restored` holds non-strings: {v:#}"
    );
    let conflicts = v["conflicts"]
        .as_array()
        .unwrap_or_else(|| panic!("`conflicts` is not an array: {v:#}"));
    for c in conflicts {
        assert!(
            c["path"].is_string() && c["reason"].is_string(),
            "a conflict needs `path` and `reason` strings: {v:#}"
        );
    }
}

/// The `restored` paths of a rewind result, as strings.
pub fn restored(v: &Value) -> Vec<String> {
    v["restored"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The turn number that recorded a rewind.
pub fn rewind_turn(v: &Value) -> u64 {
    v["turn"]
        .as_u64()
        .unwrap_or_else(|| panic!("rewind result has no `turn`: {v:#}"))
}

/// One path's recorded state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file.
    File {
        /// `mode & 0o7777`.
        mode: u32,
        /// Size in bytes.
        size: u64,
        /// BLAKE3 of the content, hex.
        blake3: String,
    },
    /// A directory.
    Dir {
        /// `mode & 0o7777`.
        mode: u32,
    },
    /// A symbolic link (never followed).
    Symlink {
        /// The raw link target.
        target: Vec<u8>,
    },
    /// A fifo, socket or device node.
    Other {
        /// "fifo", "socket", "char" or "block".
        kind: &'static str,
        /// `mode & 0o7777`.
        mode: u32,
    },
}

/// A whole tree: relative path bytes (components joined by `/`) → entry. The
/// root itself is not included.
pub type Manifest = BTreeMap<Vec<u8>, Entry>;

/// Manifest of everything under `root`, without following symlinks.
pub fn manifest(root: &Path) -> Manifest {
    manifest_filtered(root, &[])
}

/// Manifest of everything under `root` except the top-level `.git`.
pub fn manifest_without_git(root: &Path) -> Manifest {
    manifest_filtered(root, &[b".git"])
}

/// Manifest of everything under `root` except the listed relative paths (and
/// everything below them).
pub fn manifest_filtered(root: &Path, skip: &[&[u8]]) -> Manifest {
    manifest_of(root, skip, true)
}

/// Paths and kinds only (no hashing): cheap listing for choosing targets.
pub fn listing(root: &Path, skip: &[&[u8]]) -> Manifest {
    manifest_of(root, skip, false)
}

fn manifest_of(root: &Path, skip: &[&[u8]], hash: bool) -> Manifest {
    let found = walk_tree(root, skip).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Manifest::new();
    for Found { rel, path, meta } in found {
        let ft = meta.file_type();
        let mode = meta.permissions().mode() & 0o7777;
        let e = if ft.is_symlink() {
            Entry::Symlink {
                target: link_target(&path).unwrap_or_else(|e| panic!("{e}")),
            }
        } else if ft.is_dir() {
            Entry::Dir { mode }
        } else if ft.is_file() {
            Entry::File {
                mode,
                size: meta.size(),
                blake3: if hash {
                    hash_file(&path)
                } else {
                    String::new()
                },
            }
        } else {
            let kind = if ft.is_fifo() {
                "fifo"
            } else if ft.is_socket() {
                "socket"
            } else if ft.is_char_device() {
                "char"
            } else {
                "block"
            };
            Entry::Other { kind, mode }
        };
        out.insert(rel, e);
    }
    out
}

/// One entry below a tree's root, as [`walk_tree`] finds it.
#[derive(Debug)]
pub struct Found {
    /// The path relative to the root, components joined by `/`.
    pub rel: Vec<u8>,
    /// The full path.
    pub path: PathBuf,
    /// `lstat` of it: a symlink is not followed.
    pub meta: fs::Metadata,
}

/// The one tree walk behind every manifest of the tests (this file's
/// [`Manifest`], the git view of `tests/export.rs`, the model's tree in
/// `tests/model.rs`): every entry below `root` (not `root` itself), never
/// following a symlink, leaving out the listed relative paths and everything
/// below them. Errors name the path and the call that failed.
pub fn walk_tree(root: &Path, skip: &[&[u8]]) -> io::Result<Vec<Found>> {
    let mut out = Vec::new();
    walk_dir(root, &mut Vec::new(), skip, &mut out)?;
    Ok(out)
}

fn walk_dir(dir: &Path, rel: &mut Vec<u8>, skip: &[&[u8]], out: &mut Vec<Found>) -> io::Result<()> {
    let context = |what: &str, path: &Path, e: io::Error| {
        io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
    };
    for entry in fs::read_dir(dir).map_err(|e| context("read_dir", dir, e))? {
        let entry = entry.map_err(|e| context("read_dir", dir, e))?;
        let len = rel.len();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(entry.file_name().as_bytes());
        if !skip.contains(&rel.as_slice()) {
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).map_err(|e| context("lstat", &path, e))?;
            let is_dir = meta.file_type().is_dir();
            out.push(Found {
                rel: rel.clone(),
                path: path.clone(),
                meta,
            });
            if is_dir {
                walk_dir(&path, rel, skip, out)?;
            }
        }
        rel.truncate(len);
    }
    Ok(())
}

/// The raw target of the symlink at `path`; the error names the path.
pub fn link_target(path: &Path) -> io::Result<Vec<u8>> {
    fs::read_link(path)
        .map(|t| t.into_os_string().into_vec())
        .map_err(|e| io::Error::new(e.kind(), format!("readlink {}: {e}", path.display())))
}

/// BLAKE3 of a file's content, hex.
pub fn hash_file(path: &Path) -> String {
    let mut f = fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut h = blake3::Hasher::new();
    io::copy(&mut f, &mut h).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    h.finalize().to_hex().to_string()
}

/// A printable form of a raw path.
pub fn show(path: &[u8]) -> String {
    path.escape_ascii().to_string()
}

/// Asserts two manifests are equal, listing the differing paths (not the
/// whole trees) when they are not.
pub fn assert_manifest_eq(ctx: &str, expected: &Manifest, actual: &Manifest) {
    if expected == actual {
        return;
    }
    let mut lines = Vec::new();
    for (path, e) in expected {
        match actual.get(path) {
            None => lines.push(format!("  missing  {}  (expected {e:?})", show(path))),
            Some(a) if a != e => lines.push(format!(
                "  differs  {}\n      expected {e:?}\n      actual   {a:?}",
                show(path)
            )),
            Some(_) => {}
        }
    }
    for (path, a) in actual {
        if !expected.contains_key(path) {
            lines.push(format!("  extra    {}  ({a:?})", show(path)));
        }
    }
    let total = lines.len();
    lines.truncate(40);
    panic!(
        "{ctx}: tree differs from the expected one at {total} path(s):\n{}{}",
        lines.join("\n"),
        if total > 40 { "\n  ..." } else { "" }
    );
}

/// Writes `bytes` to `path` and sets its permission bits.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
    }
    fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// A path from raw bytes.
pub fn bytes_path(b: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(b))
}

/// Quotes `s` for bash.
pub fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A small deterministic PRNG (xorshift64*), so a failing sequence can be
/// replayed from its printed seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`. The seed is mixed (SplitMix64's finalizer,
    /// a bijection) so that every seed gives its own stream: seeds that
    /// differ only in the lowest bit used to start from the same state.
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // xorshift's state must not be 0; exactly one seed mixes to 0.
        Rng(if z == 0 { 0x9E37_79B9_7F4A_7C15 } else { z })
    }

    /// The seed from env var `var` (decimal or 0x-hex) or `default`; printed
    /// so it shows with a failing test's output.
    pub fn from_env(var: &str, default: u64) -> (Rng, u64) {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| {
                let s = s.trim();
                match s.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16).ok(),
                    None => s.parse().ok(),
                }
            })
            .unwrap_or(default);
        eprintln!("seed: {seed:#x} (replay with {var}={seed:#x})");
        (Rng::new(seed), seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Fisher–Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }

    /// `n` pseudo-random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(n);
        out
    }
}

/// One random piece of shell work on the tree described by `list` (a
/// [`listing`] of the current tree, `.git` excluded), as a bash snippet to
/// run at the tree's root. `n` makes new names unique. Covers `sed -i`,
/// appends, overwrites, truncate, `rm`, `rm -rf`, `mv` of files (also over
/// existing ones) and directories, new trees, `cp -r`, `chmod`, symlink
/// changes and hard links.
pub fn random_shell_op(rng: &mut Rng, list: &Manifest, n: usize) -> String {
    let utf8 = |p: &Vec<u8>| std::str::from_utf8(p).ok().map(str::to_owned);
    let files: Vec<String> = list
        .iter()
        .filter(|(_, e)| matches!(e, Entry::File { .. }))
        .filter_map(|(p, _)| utf8(p))
        .collect();
    let dirs: Vec<String> = list
        .iter()
        .filter(|(_, e)| matches!(e, Entry::Dir { .. }))
        .filter_map(|(p, _)| utf8(p))
        .collect();
    let links: Vec<String> = list
        .iter()
        .filter(|(_, e)| matches!(e, Entry::Symlink { .. }))
        .filter_map(|(p, _)| utf8(p))
        .collect();
    let parent_of = |p: &str| -> String {
        match p.rfind('/') {
            Some(i) => p[..i].to_owned(),
            None => ".".to_owned(),
        }
    };
    let any_dir = |rng: &mut Rng| -> String {
        if dirs.is_empty() || rng.below(4) == 0 {
            ".".to_owned()
        } else {
            rng.pick(&dirs).clone()
        }
    };
    loop {
        match rng.below(14) {
            0 | 1 if !files.is_empty() => {
                let f = rng.pick(&files);
                return format!("sed -i 's/e/E{n}/g; 1s/^/edited {n}\\n/' {}", q(f));
            }
            2 if !files.is_empty() => {
                let f = rng.pick(&files);
                return format!("printf 'appended %d\\n' {n} >> {}", q(f));
            }
            3 if !files.is_empty() => {
                let f = rng.pick(&files);
                return format!("printf 'overwritten %d\\n' {n} > {}", q(f));
            }
            4 if !files.is_empty() => {
                let f = rng.pick(&files);
                let size = rng.below(3000);
                return format!("truncate -s {size} {}", q(f));
            }
            5 if !files.is_empty() => {
                let f = rng.pick(&files);
                return format!("rm -f {}", q(f));
            }
            6 if !dirs.is_empty() => {
                let d = rng.pick(&dirs);
                return format!("rm -rf {}", q(d));
            }
            7 if !dirs.is_empty() => {
                let d = rng.pick(&dirs).clone();
                // Either a rename in place or a move to the top level.
                let to = if rng.below(2) == 0 {
                    format!("{}/moved{n}", parent_of(&d))
                } else {
                    format!("top{n}")
                };
                return format!("mv {} {}", q(&d), q(&to));
            }
            8 if files.len() >= 2 => {
                let a = rng.pick(&files).clone();
                let b = rng.pick(&files).clone();
                if a == b {
                    continue;
                }
                // `mv` refuses to rename a file over a hard link of itself.
                return format!(
                    "if [ {a} -ef {b} ]; then rm {a}; else mv -f {a} {b}; fi",
                    a = q(&a),
                    b = q(&b)
                );
            }
            9 => {
                let d = format!("{}/new{n}", any_dir(rng));
                let kb = rng.below(64);
                return format!(
                    "mkdir -p {d}/sub/deeper {d}/empty && printf 'new file %d\\n' {n} > {d}/a.txt \
                     && head -c {kb}000 /dev/urandom > {d}/sub/blob.bin \
                     && printf 'x' > {d}/sub/deeper/x && ln -s ../a.txt {d}/sub/link",
                    d = q(&d)
                );
            }
            10 if !dirs.is_empty() => {
                let d = rng.pick(&dirs).clone();
                return format!(
                    "cp -r {} {}",
                    q(&d),
                    q(&format!("{}/copy{n}", parent_of(&d)))
                );
            }
            11 if !files.is_empty() || !dirs.is_empty() => {
                if !files.is_empty() && (dirs.is_empty() || rng.below(3) != 0) {
                    let f = rng.pick(&files);
                    let mode = rng.pick(&["0600", "0755", "0644", "0640", "0700"]);
                    return format!("chmod {mode} {}", q(f));
                }
                let d = rng.pick(&dirs);
                let mode = rng.pick(&["0700", "0755", "0750"]);
                return format!("chmod {mode} {}", q(d));
            }
            12 => {
                if !links.is_empty() && rng.below(2) == 0 {
                    let l = rng.pick(&links);
                    return format!("ln -sfn 'retargeted-{n}' {}", q(l));
                }
                let target = if files.is_empty() {
                    format!("nowhere-{n}")
                } else {
                    rng.pick(&files).clone()
                };
                let at = format!("{}/link{n}", any_dir(rng));
                return format!("ln -sfn {} {}", q(&target), q(&at));
            }
            13 if !files.is_empty() => {
                let f = rng.pick(&files);
                return format!("ln {} {}", q(f), q(&format!("{f}.hardlink{n}")));
            }
            _ => continue,
        }
    }
}

/// Stock git on the bare repository `git_dir` (the export), with no system
/// or global configuration.
pub fn git_in(git_dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("run git")
}

/// [`git_in`], asserting success; its stdout.
pub fn git_in_ok(git_dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = git_in(git_dir, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
