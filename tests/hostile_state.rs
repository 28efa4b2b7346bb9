//! Damaged state and hostile arguments are refused plainly
//! (`docs/errors.md`): a corrupt index stops `mount` and `rewind` before
//! they write, an empty one is named as such, `-C` a file is refused, a
//! negative retention setting is named, and a mount right after its
//! daemon was killed works.

mod common;

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::time::Duration;

use common::loopfs::LoopFs;
use common::*;

/// Overwrites 8 KiB in the middle of `path` with garbage.
fn garble_middle(path: &std::path::Path) {
    let len = fs::metadata(path).expect("index").len();
    let mut f = fs::OpenOptions::new().write(true).open(path).expect("open");
    f.seek(SeekFrom::Start(len / 2 / 4096 * 4096))
        .expect("seek");
    f.write_all(&[0xA5; 8192]).expect("garble");
    f.sync_all().expect("sync");
}

#[test]
fn a_corrupt_index_stops_mount_and_rewind_before_they_write() {
    let fx = Fixture::new();
    for i in 0..400 {
        write_file(
            &fx.p(format!("f{i:03}")),
            format!("v0 {i}\n").as_bytes(),
            0o644,
        );
    }
    fx.mount();
    fx.sh("for f in f*; do echo v1 > $f; done");
    fx.turn("two");
    fx.sh("for f in f*; do echo v2 > $f; done");
    fx.umount();
    let index = fx.state_dir().join("index.db");
    garble_middle(&index);
    let run = fx.opfs_p(&["verify"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stdout.contains("malformed") || run.stderr.contains("malformed"),
        "{run}"
    );
    let before = manifest(&fx.project);

    let run = fx.try_mount(&[], &[]);
    assert_eq!(run.code, Some(1), "mount ran on a corrupt index: {run}");
    assert!(
        run.stderr.contains("index.db is corrupt") && run.stderr.contains("backup"),
        "{run}"
    );
    assert!(!is_mounted(&fx.mnt));
    let run = fx.opfs_p(&["rewind", "1"]);
    assert_eq!(run.code, Some(1), "rewind ran on a corrupt index: {run}");
    assert!(run.stderr.contains("index.db is corrupt"), "{run}");
    assert_manifest_eq("corrupt index", &before, &manifest(&fx.project));
}

#[test]
fn an_empty_index_is_named_by_verify() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    fx.mount();
    fx.umount();
    let state = fx.state_dir();
    fs::write(state.join("index.db"), b"").expect("truncate");
    let run = fx.opfs_p(&["verify"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains("is empty (0 bytes)") && !run.stderr.contains("no such table"),
        "{run}"
    );
}

#[test]
fn dash_c_a_file_is_refused() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    fx.mount();
    for dir in [fx.m("f"), fx.p("f")] {
        let run = fx.opfs(&[
            std::ffi::OsStr::new("-C"),
            dir.as_os_str(),
            std::ffi::OsStr::new("status"),
        ]);
        assert_eq!(run.code, Some(1), "{run}");
        assert!(run.stderr.contains("not a directory"), "{run}");
    }
}

#[test]
fn a_negative_retention_setting_is_named() {
    let fx = Fixture::new();
    fx.mount();
    for (text, says) in [
        (
            "[retention]\nkeep = -1\n",
            "[retention] keep = -1: keep at least 1 turn",
        ),
        (
            "[retention]\nmax_bytes = -5\n",
            "[retention] max_bytes = -5: a size cannot be negative",
        ),
        (
            "[retention]\nkeep_days = -2\n",
            "[retention] keep_days = -2: a number of days cannot be negative",
        ),
    ] {
        fs::write(&fx.pinned.config, text).expect("config");
        let run = fx.opfs_c(&["gc"]);
        assert_eq!(run.code, Some(1), "{run}");
        assert!(run.stderr.contains(says), "{text}: {run}");
    }
}

/// The next mount right after a daemon was killed works (xfstests' harness
/// killed one mid-test; the next test's mount must not fail): with a
/// writer busy in the mount (its cwd inside it), and on a machine without
/// `fusermount3` (the dead mount was left in place and the mount refused
/// as "busy"; root detaches it itself).
#[test]
fn a_mount_right_after_its_daemon_was_killed_works() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    // A PATH with git but no fusermount3.
    let bin = fx.root().join("bin-without-fusermount3");
    fs::create_dir(&bin).expect("mkdir");
    if let Some(git) = which("git") {
        std::os::unix::fs::symlink(git, bin.join("git")).expect("symlink");
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    for round in 0..4 {
        let env: Vec<(&str, &str)> = if round == 3 && root {
            vec![("PATH", bin.to_str().expect("utf-8 path"))]
        } else {
            Vec::new()
        };
        fx.mount();
        let pid = fx.status()["pid"].as_i64().expect("pid") as i32;
        let mut writer = std::process::Command::new("sh")
            .arg("-c")
            .arg("while :; do head -c 1048576 /dev/zero > big 2>/dev/null; done")
            .current_dir(&fx.mnt)
            .spawn()
            .expect("writer");
        sigkill(pid);
        let run = fx.try_mount(&[], &env);
        let _ = writer.kill();
        let _ = writer.wait();
        assert_eq!(run.code, Some(0), "round {round}: {run}");
        assert!(wait_mount_state(&fx.mnt, true, Duration::from_secs(15)));
        assert_eq!(fx.sh("cat f"), "v0\n");
        fx.umount();
    }
}

/// Unmounts a mount the test made (lazily) on drop.
struct LazyUnmount(std::path::PathBuf);

impl Drop for LazyUnmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A full state dir is not invisible: while mutations are refused for
/// `ENOSPC`, `status` says since when and how much space is left, and
/// says nothing once captures succeed again. The state dir is on a small
/// loop-mounted ext4 (root only: skipped with the reason otherwise).
#[test]
fn a_full_state_dir_is_shown_by_status() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: loop-mounting a small ext4 for the state dir needs root");
        return;
    }
    let fx = Fixture::new();
    let _state_fs = LoopFs::make_at("mkfs.ext4", &["-q", "-F", "-m", "0"], 32 << 20, &fx.home)
        .expect("a small ext4 for the state dir");
    write_file(&fx.p("big"), &vec![7u8; 3 << 20], 0o644);
    fx.mount_with(&["--no-export"]);

    // Fill the state dir's filesystem from outside.
    let filler = fx.home.join("filler");
    {
        let mut f = fs::File::create(&filler).expect("filler");
        let chunk = vec![0u8; 1 << 20];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }
    let run = fx.opfs(&[
        std::ffi::OsStr::new("-C"),
        fx.mnt.as_os_str(),
        std::ffi::OsStr::new("status"),
        std::ffi::OsStr::new("--json"),
    ]);
    assert!(
        run.json()["mutations_refused"].is_null(),
        "no mutation refused yet: {run}"
    );
    let overwrite = std::process::Command::new("sh")
        .arg("-c")
        .arg("echo agent > big")
        .current_dir(&fx.mnt)
        .output()
        .expect("sh");
    assert!(!overwrite.status.success(), "the overwrite was not refused");
    assert_eq!(fs::read(fx.p("big")).expect("big").len(), 3 << 20);

    let v = fx.status();
    assert_eq!(v["mutations_refused"]["errno"], "ENOSPC", "{v:#}");
    assert!(v["mutations_refused"]["count"].as_u64() >= Some(1), "{v:#}");
    assert!(
        v["mutations_refused"]["since_ms"].as_u64() > Some(0),
        "{v:#}"
    );
    assert!(
        v["state_dir_free_bytes"].as_u64() < Some(3 << 20),
        "free space: {v:#}"
    );
    assert!(
        v["warnings"].as_array().is_some_and(|w| w.iter().any(|w| w
            .as_str()
            .is_some_and(|w| w.contains("mutations are refused since")))),
        "{v:#}"
    );
    let run = fx.opfs_c(&["status"]).ok();
    assert!(
        run.stdout.contains("mutations are refused since")
            && run.stdout.contains("filesystem is full")
            && run.stdout.contains("free on its filesystem"),
        "{run}"
    );

    // Space back: the next capture succeeds and the warning goes.
    fs::remove_file(&filler).expect("free");
    fx.sh("echo agent > big");
    let v = fx.status();
    assert!(v["mutations_refused"].is_null(), "{v:#}");
    fx.umount();
}

/// A bind-mount alias of a served project is the same directory: a second
/// daemon on it (another `OPFS_HOME`, or the same one) is refused, since
/// "served once" compares the directory's identity, not its path.
#[test]
fn a_bind_mount_alias_of_a_served_project_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: a bind mount needs root");
        return;
    }
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"one\n", 0o644);
    fx.mount();
    let alias = fx.root().join("alias");
    let mnt2 = fx.root().join("mnt2");
    fs::create_dir(&alias).expect("mkdir");
    fs::create_dir(&mnt2).expect("mkdir");
    assert!(std::process::Command::new("mount")
        .arg("--bind")
        .arg(&fx.project)
        .arg(&alias)
        .status()
        .is_ok_and(|s| s.success()));
    let _alias = LazyUnmount(alias.clone());
    for home in [fx.root().join("home2"), fx.home.clone()] {
        let mut cmd = fx.opfs_command(&[
            std::ffi::OsStr::new("mount"),
            alias.as_os_str(),
            mnt2.as_os_str(),
        ]);
        TestEnv {
            opfs_home: home.clone(),
            ..fx.pinned.clone()
        }
        .pin(&mut cmd);
        let run = run_command(cmd, fx.root(), Duration::from_secs(60)).expect("mount");
        let served = is_mounted(&mnt2);
        if served {
            let _ = std::process::Command::new("fusermount3")
                .arg("-uz")
                .arg(&mnt2)
                .status();
        }
        assert!(!served, "a second daemon serves the alias: {run}");
        assert_eq!(run.code, Some(1), "{run}");
        assert!(
            run.stderr.contains("already served by another opfs daemon")
                && run.stderr.contains(&*fx.mnt.to_string_lossy()),
            "{run}"
        );
    }
}

/// Bytes of the loose objects (`objects/xx/...`) of the repository at
/// `git_dir`.
fn loose_bytes(git_dir: &std::path::Path) -> u64 {
    let Ok(dirs) = fs::read_dir(git_dir.join("objects")) else {
        return 0;
    };
    dirs.flatten()
        .filter(|d| d.file_name().len() == 2)
        .flat_map(|d| fs::read_dir(d.path()).into_iter().flatten().flatten())
        .filter_map(|f| f.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// A background export that fails for space cleans up after itself: the
/// loose objects it wrote before failing are removed (they were 23 MiB
/// that not even `gc` reclaimed). The state dir is on a small
/// loop-mounted ext4 (root only).
#[test]
fn a_failed_export_leaves_no_loose_objects() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: loop-mounting a small ext4 for the state dir needs root");
        return;
    }
    let fx = Fixture::new();
    let _state_fs = LoopFs::make_at("mkfs.ext4", &["-q", "-F", "-m", "0"], 24 << 20, &fx.home)
        .expect("a small ext4 for the state dir");
    let mut rng = Rng::new(25);
    for i in 0..4 {
        write_file(&fx.p(format!("r{i}")), &rng.bytes(6 << 20), 0o644);
    }
    fx.mount(); // with the background export: its baseline cannot fit
    let log = fx.state_dir().join("daemon.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !fs::read_to_string(&log).is_ok_and(|t| t.contains("background export failed")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the export did not fail: {}",
            fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = loose_bytes(&fx.state_dir().join("export.git"));
    assert!(
        left < 1 << 20,
        "the failed export left {left} bytes of loose objects"
    );
    fx.umount();
}

/// `gc` collects what a killed export left: loose objects no ref reaches.
#[test]
fn gc_removes_the_loose_objects_a_killed_export_left() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    fx.mount();
    fx.sh("echo v1 > f");
    fx.turn("two");
    fx.opfs_c(&["export"]).ok();
    fx.umount();
    let git_dir = fx.state_dir().join("export.git");
    // What a killed export leaves: an object written, no ref moved to it.
    let stray = fx.root().join("stray");
    write_file(&stray, &Rng::new(7).bytes(1 << 20), 0o644);
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&git_dir)
        .args(["hash-object", "-w"])
        .arg(&stray)
        .output()
        .expect("git");
    assert!(out.status.success());
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let object = git_dir.join("objects").join(&id[..2]).join(&id[2..]);
    assert!(object.exists());
    fx.opfs_p(&["gc"]).ok();
    assert!(!object.exists(), "gc left the unreachable object {id}");
    // What the export holds is still there.
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&git_dir)
        .args(["fsck", "--no-dangling"])
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
