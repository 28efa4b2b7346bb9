//! Bad input and hostile conditions: each case gets a
//! clear error naming its cause and loses nothing. `docs/errors.md` lists
//! the messages and exit codes these tests pin down.
//!
//! Turn numbers 0 / negative / non-numeric / unknown against a running
//! daemon, a missing project or mountpoint, a busy mountpoint and a
//! mountpoint inside the project are covered by `tests/cli.rs`; this file
//! covers the rest.

mod common;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// The file of the blob holding `content`.
fn blob_file(fx: &Fixture, content: &[u8]) -> PathBuf {
    let h = blake3::hash(content).to_hex().to_string();
    fx.state_dir().join("blobs").join(&h[..2]).join(&h[2..])
}

/// True when the blob holding `content` is stored: as a file, or inline in
/// the index.
fn blob_stored(fx: &Fixture, content: &[u8]) -> bool {
    if blob_file(fx, content).exists() {
        return true;
    }
    let db = fx.state_dir().join("index.db");
    let conn = rusqlite::Connection::open(&db).expect("open index");
    conn.query_row(
        "SELECT count(*) FROM blobs WHERE hash = ?1 AND data IS NOT NULL",
        [blake3::hash(content).as_bytes().to_vec()],
        |r| r.get::<_, i64>(0),
    )
    .expect("query")
        == 1
}

fn assert_code(run: &Run, code: i32, mention: &str) {
    assert_eq!(run.code, Some(code), "expected exit {code}: {run}");
    assert!(
        run.stderr.contains(mention),
        "the message should mention {mention:?}: {run}"
    );
}

fn conflict_paths(v: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = v["conflicts"]
        .as_array()
        .unwrap_or_else(|| panic!("no conflicts array: {v:#}"))
        .iter()
        .map(|c| c["path"].as_str().unwrap_or("").to_string())
        .collect();
    out.sort();
    out
}

fn reason_of<'a>(v: &'a serde_json::Value, path: &str) -> &'a str {
    v["conflicts"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["path"] == path))
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_else(|| panic!("no conflict for {path}: {v:#}"))
}

// ---------------------------------------------------------------------------
// Turn numbers and -C

#[test]
fn bad_turn_numbers_without_a_daemon_are_bad_usage_and_change_nothing() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"one\n", 0o644);
    fx.mount();
    fx.turn("t2");
    fx.sh("echo two > f");
    fx.umount();
    let before = manifest(&fx.project);
    // The CLI runs the engine on the state dir itself: same rules as the daemon.
    for (arg, mention) in [
        ("0", "0"),
        ("999", "999"),
        ("abc", "abc"),
        ("1.5", "1.5"),
        ("99999999999999999999", "99999999999999999999"),
        ("", "turn number"),
    ] {
        assert_code(&fx.opfs_p(&["rewind", arg]), 2, mention);
    }
    assert_code(&fx.opfs_p(&["rewind", "--", "-3"]), 2, "-3");
    assert_code(
        &fx.opfs_p(&["rewind", "--id", "no-such-id"]),
        2,
        "no-such-id",
    );
    assert_code(&fx.opfs_p(&["rewind", "999", "--dry-run"]), 2, "999");
    assert_manifest_eq("refused rewinds", &before, &manifest(&fx.project));
    // And no turn was recorded by any of them.
    let s = fx.opfs_p(&["status", "--json"]).ok().json();
    assert_eq!(s["turn"], 2, "{s:#}");
}

#[test]
fn dash_c_pointing_nowhere_names_the_path() {
    let fx = Fixture::new();
    let missing = fx.root().join("no-such-dir");
    let stranger = fx.root().join("not-a-project");
    fs::create_dir(&stranger).expect("mkdir");
    let file = fx.root().join("a-file");
    fs::write(&file, b"x").expect("write");
    for dir in [&missing, &stranger, &file] {
        for args in [
            &["status"][..],
            &["turn"],
            &["rewind"],
            &["rewind", "1"],
            &["verify"],
        ] {
            let mut all: Vec<OsString> = vec!["-C".into(), dir.clone().into_os_string()];
            all.extend(args.iter().map(OsString::from));
            let run = fx.opfs(&all);
            assert_code(&run, 1, &dir.to_string_lossy());
        }
    }
    // Nothing was created for them.
    assert!(!missing.exists());
    assert!(!fx.home.join("projects").exists(), "state was created");
}

// ---------------------------------------------------------------------------
// Mountpoints

#[test]
fn mount_on_a_file_or_on_the_project_itself_is_refused() {
    let fx = Fixture::new();
    let file = fx.root().join("file-mnt");
    fs::write(&file, b"keep me").expect("write");
    let run = fx.opfs(&[
        OsStr::new("mount"),
        fx.project.as_os_str(),
        file.as_os_str(),
    ]);
    assert_code(&run, 1, &file.to_string_lossy());
    assert!(run.stderr.contains("not a directory"), "{run}");
    assert_eq!(fs::read(&file).expect("read"), b"keep me");

    let run = fx.opfs(&[
        OsStr::new("mount"),
        fx.project.as_os_str(),
        fx.project.as_os_str(),
    ]);
    assert_code(&run, 1, &fx.project.to_string_lossy());
    assert!(!is_mounted(&fx.project));

    // A project that is a file.
    let run = fx.opfs(&[OsStr::new("mount"), file.as_os_str(), fx.mnt.as_os_str()]);
    assert_code(&run, 1, &file.to_string_lossy());
    assert!(!is_mounted(&fx.mnt));

    // The project inside the mountpoint would be hidden by the mount.
    let inner = fx.mnt.join("proj");
    fs::create_dir(&inner).expect("mkdir");
    let run = fx.opfs(&[OsStr::new("mount"), inner.as_os_str(), fx.mnt.as_os_str()]);
    assert_code(&run, 1, &inner.to_string_lossy());
    assert!(!is_mounted(&fx.mnt));
}

// ---------------------------------------------------------------------------
// The project or the mount going away under a running daemon

#[test]
fn project_deleted_under_a_running_daemon() {
    let fx = Fixture::new();
    write_file(&fx.p("a"), b"a\n", 0o644);
    fx.mount();
    fx.turn("t2");
    fx.sh("echo changed > a");
    fs::remove_dir_all(&fx.project).expect("delete the project");

    // Mutations through the mount fail; they cannot resurrect the project.
    let err = fs::write(fx.m("b"), b"b").expect_err("write into a deleted project");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
    assert!(!fx.project.exists());

    // status still answers and says what happened.
    let s = fx.opfs_c(&["status", "--json"]).ok().json();
    assert_eq!(s["mounted"], true, "{s:#}");
    assert_eq!(s["project_deleted"], true, "{s:#}");
    let human = fx.opfs_c(&["status"]).ok();
    assert!(human.stdout.contains("deleted"), "{human}");

    // A rewind is refused (exit 1) naming the project, and writes nothing.
    let run = fx.opfs_c(&["rewind", "1", "--json"]);
    assert_code(&run, 1, &fx.project.to_string_lossy());
    assert!(run.stderr.contains("deleted"), "{run}");
    assert!(!fx.project.exists());

    // umount works and leaves no mount behind.
    fx.umount();
    assert!(!is_mounted(&fx.mnt));

    // Without the daemon, the CLI names the missing project too.
    let run = fx.opfs_c(&["status"]);
    assert_eq!(run.code, Some(1), "{run}");
}

#[test]
fn mount_removed_under_a_running_daemon() {
    let fx = Fixture::new();
    write_file(&fx.p("a"), b"a\n", 0o644);
    fx.mount();
    let before = manifest(&fx.project);
    fx.turn("t2");
    fx.sh("echo changed > a && mkdir d && echo x > d/x");
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg(&fx.mnt)
        .status()
        .expect("fusermount3");
    assert!(st.success());
    assert!(wait_mount_state(&fx.mnt, false, MOUNT_TIMEOUT));

    // The daemon notices and exits: status (by the project) says unmounted
    // and keeps the history.
    let mut status = serde_json::Value::Null;
    for _ in 0..500 {
        status = fx.opfs_p(&["status", "--json"]).ok().json();
        if status["mounted"] == false {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(status["mounted"], false, "{status:#}");
    assert_eq!(status["turn"], 2, "{status:#}");

    // umount of what is no longer mounted says so.
    let run = fx.opfs(&[OsStr::new("umount"), fx.mnt.as_os_str()]);
    assert_code(&run, 1, &fx.mnt.to_string_lossy());

    // Nothing was lost: mount again and rewind to turn 2's start.
    fx.mount();
    fx.rewind(2);
    fx.assert_tree("after remount and rewind", &before);
    fx.umount();
}

// ---------------------------------------------------------------------------
// A corrupt index

fn history_then_unmount(fx: &Fixture) -> Manifest {
    write_file(&fx.p("a"), b"a original\n", 0o644);
    write_file(&fx.p("b"), b"b original\n", 0o644);
    fx.mount();
    fx.turn("t2");
    for i in 0..40 {
        fx.sh(&format!("echo {i} > f{i}"));
    }
    fx.sh("echo edited > a && rm b");
    fx.umount();
    manifest(&fx.project)
}

/// A clean unmount checkpoints the index: the database file alone holds
/// the history (so these tests damage the real thing, not a stale copy).
fn assert_wal_empty(fx: &Fixture) {
    let wal = fx.state_dir().join("index.db-wal");
    let len = fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(
        len,
        0,
        "{} still holds {len} bytes after unmount",
        wal.display()
    );
}

fn assert_every_command_names(fx: &Fixture, what: &str, project: &Manifest) {
    for args in [
        &["status"][..],
        &["rewind"],
        &["rewind", "1"],
        &["rewind", "1", "--dry-run"],
        &["turn"],
        &["verify"],
    ] {
        let run = fx.opfs_p(args);
        assert_code(&run, 1, "index.db");
        assert!(
            !run.stderr.contains("panicked"),
            "{what}: {args:?} panicked: {run}"
        );
    }
    let run = fx.opfs(&[
        OsStr::new("mount"),
        fx.project.as_os_str(),
        fx.mnt.as_os_str(),
    ]);
    assert_code(&run, 1, "index.db");
    assert!(!is_mounted(&fx.mnt), "{what}: mounted on a corrupt index");
    assert_manifest_eq(
        &format!("{what}: the project"),
        project,
        &manifest(&fx.project),
    );
}

#[test]
fn garbage_index_fails_naming_the_file_and_writes_nothing() {
    let fx = Fixture::new();
    let project = history_then_unmount(&fx);
    let db = fx.state_dir().join("index.db");
    assert_wal_empty(&fx);
    let good = fs::read(&db).expect("read index");
    let mut garbage = vec![0u8; good.len()];
    for (i, b) in garbage.iter_mut().enumerate() {
        *b = (i * 7919 % 251) as u8;
    }
    fs::write(&db, &garbage).expect("write garbage");
    assert_every_command_names(&fx, "garbage", &project);
    assert_eq!(
        fs::read(&db).expect("read"),
        garbage,
        "opfs rewrote the file"
    );

    // Put the good file back: everything recorded is still there.
    fs::write(&db, &good).expect("restore");
    fx.opfs_p(&["verify"]).ok();
    let v = fx.opfs_p(&["rewind", "2", "--json"]).ok().json();
    assert!(restored(&v).contains(&"b".to_string()), "{v:#}");
    assert_eq!(fs::read(fx.p("b")).expect("b"), b"b original\n");
}

#[test]
fn truncated_index_fails_naming_the_file_and_writes_nothing() {
    let fx = Fixture::new();
    let project = history_then_unmount(&fx);
    let db = fx.state_dir().join("index.db");
    assert_wal_empty(&fx);
    let good = fs::read(&db).expect("read index");
    assert!(
        good.len() >= 8192,
        "index too small to truncate meaningfully"
    );
    // Cut at a page boundary, then mid-page.
    for len in [good.len() / 2 / 4096 * 4096, good.len() / 2 + 100] {
        fs::write(&db, &good[..len]).expect("truncate");
        assert_every_command_names(&fx, &format!("truncated to {len}"), &project);
    }
    // Truncated to nothing: SQLite alone would start a new, empty history.
    fs::write(&db, b"").expect("truncate to 0");
    assert_every_command_names(&fx, "truncated to 0", &project);
    assert_eq!(fs::metadata(&db).expect("stat").len(), 0);
    let run = fx.opfs_p(&["status"]);
    assert!(run.stderr.contains("truncated"), "{run}");

    fs::write(&db, &good).expect("restore");
    fx.opfs_p(&["verify"]).ok();
}

#[test]
fn damaged_capture_log_fails_naming_the_file_and_writes_nothing() {
    let fx = Fixture::new();
    let project = history_then_unmount(&fx);
    let log = fx.state_dir().join("capture.log");
    assert_eq!(
        fs::metadata(&log).expect("capture.log exists").len(),
        0,
        "a clean unmount leaves every record in the index"
    );
    let db = fx.state_dir().join("index.db");
    let index_before = fs::read(&db).expect("read index");
    // Not a capture log at all, then a record damaged in the middle (a
    // torn last record is dropped silently: that is what a crash leaves).
    let mut middle = b"opfsLOG1".to_vec();
    for _ in 0..2 {
        middle.extend_from_slice(&4u32.to_le_bytes());
        middle.extend_from_slice(&[0xAB; 8]); // wrong checksum
        middle.extend_from_slice(b"junk");
    }
    for (what, bytes) in [
        ("bad magic", b"garbage!garbage!".to_vec()),
        ("bad record", middle),
    ] {
        fs::write(&log, &bytes).expect("damage the log");
        for args in [&["log"][..], &["rewind", "1", "--dry-run"], &["turn"]] {
            let run = fx.opfs_p(args);
            assert_code(&run, 1, "capture.log");
            assert!(!run.stderr.contains("panicked"), "{what}: {args:?}: {run}");
        }
        let run = fx.opfs(&[
            OsStr::new("mount"),
            fx.project.as_os_str(),
            fx.mnt.as_os_str(),
        ]);
        assert_code(&run, 1, "capture.log");
        assert!(!is_mounted(&fx.mnt), "{what}: mounted with a damaged log");
        let v = fx.opfs_p(&["verify", "--json"]);
        assert_eq!(v.code, Some(1), "{what}: {v}");
        assert!(v.stdout.contains("capture.log"), "{what}: {v}");
        assert_eq!(fs::read(&log).expect("read log"), bytes, "{what}: log kept");
        assert_eq!(fs::read(&db).expect("read index"), index_before, "{what}");
        assert_manifest_eq(what, &project, &manifest(&fx.project));
    }
    // Moving the damaged log away (as the message says) lets everything run.
    fs::remove_file(&log).expect("remove");
    fx.opfs_p(&["verify"]).ok();
    let v = fx.opfs_p(&["rewind", "1", "--json"]).ok().json();
    check_rewind_result(&v, 1, false);
}

// ---------------------------------------------------------------------------
// Missing and altered blobs; opfs verify

#[test]
fn missing_and_altered_blobs_are_conflicts_never_wrong_bytes() {
    let fx = Fixture::new();
    // Large pre-images are blob files; small ones are inline in the index.
    let big = |tag: &str| format!("{tag} original\n").repeat(2000).into_bytes();
    write_file(&fx.p("altered"), &big("altered"), 0o644);
    write_file(&fx.p("missing"), &big("missing"), 0o644);
    write_file(&fx.p("altered_small"), b"altered small\n", 0o644);
    write_file(&fx.p("missing_small"), b"missing small\n", 0o644);
    write_file(&fx.p("fine"), b"fine original\n", 0o644);
    write_file(&fx.p("gone"), b"gone original\n", 0o600);
    fx.mount();
    fx.turn("t2");
    fx.sh(
        "for f in altered missing altered_small missing_small fine; do echo agent > $f; done; rm gone",
    );
    // The records are committed (a history command asks the daemon to).
    fx.opfs_c(&["log"]).ok();
    fs::write(blob_file(&fx, &big("altered")), b"tampered bytes!!!\n").expect("alter");
    fs::remove_file(blob_file(&fx, &big("missing"))).expect("delete");
    let conn = rusqlite::Connection::open(fx.state_dir().join("index.db")).expect("open index");
    let hash = |c: &[u8]| blake3::hash(c).as_bytes().to_vec();
    let n = conn
        .execute(
            "UPDATE blobs SET data = CAST('tampered' AS BLOB) WHERE hash = ?1",
            [hash(b"altered small\n")],
        )
        .expect("alter inline");
    assert_eq!(n, 1, "the small pre-image is inline");
    let n = conn
        .execute(
            "DELETE FROM blobs WHERE hash = ?1",
            [hash(b"missing small\n")],
        )
        .expect("delete inline");
    assert_eq!(n, 1, "the small pre-image is inline");
    drop(conn);

    // verify lists each, naming the blob and the path using it.
    let run = fx.opfs_c(&["verify", "--json"]);
    assert_eq!(run.code, Some(1), "{run}");
    let v = run.json();
    assert_eq!(v["ok"], false, "{v:#}");
    let problems = v["problems"].to_string();
    assert!(problems.contains("corrupt"), "{v:#}");
    assert!(problems.contains("missing"), "{v:#}");
    for p in ["altered", "missing", "altered_small"] {
        assert!(problems.contains(&format!("\\\"{p}\\\"")), "{p}: {v:#}");
    }
    assert!(problems.contains("not in the blobs table"), "{v:#}");

    // The dry run shows the same plan the real run executes.
    let damaged = ["altered", "altered_small", "missing", "missing_small"];
    // (--partial: restore the rest; by default a conflict restores nothing.)
    let dry = fx.opfs_c(&["rewind", "2", "--dry-run", "--partial", "--json"]);
    assert_eq!(dry.code, Some(3), "{dry}");
    let run = fx.opfs_c(&["rewind", "2", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    let v = run.json();
    check_rewind_result(&v, 2, false);
    assert_eq!(conflict_paths(&v), damaged, "{v:#}");
    assert_eq!(conflict_paths(&dry.json()), damaged);
    for p in ["altered", "altered_small"] {
        assert!(reason_of(&v, p).contains("corrupt"), "{v:#}");
    }
    for p in ["missing", "missing_small"] {
        assert!(reason_of(&v, p).contains("missing"), "{v:#}");
    }
    let mut r = restored(&v);
    r.sort();
    assert_eq!(r, ["fine", "gone"], "{v:#}");
    // The damaged paths keep what they hold; the others are restored.
    for p in damaged {
        assert_eq!(fs::read(fx.p(p)).expect("read"), b"agent\n", "{p}");
    }
    assert_eq!(fs::read(fx.p("fine")).expect("read"), b"fine original\n");
    assert_eq!(fs::read(fx.m("gone")).expect("read"), b"gone original\n");
    fx.umount();
}

#[test]
fn verify_passes_on_a_healthy_store_and_reports_each_problem() {
    let fx = Fixture::new();
    write_file(&fx.p("a"), b"a\n", 0o644);
    fx.mount();
    fx.turn("t2");
    fx.sh("echo b > a && mkdir d && ln -s a l && mkfifo p");
    fx.rewind(1);
    // Healthy, while mounted (read-only next to the daemon).
    let run = fx.opfs_c(&["verify"]).ok();
    assert!(run.stdout.starts_with("ok:"), "{run}");
    let v = fx.opfs_c(&["verify", "--json"]).ok().json();
    assert_eq!(v["ok"], true, "{v:#}");
    assert!(v["records"].as_u64().unwrap_or(0) >= 4, "{v:#}");
    fx.umount();
    fx.opfs_p(&["verify"]).ok();

    // Damage the index in ways only a bug or a hand could.
    let db = fx.state_dir().join("index.db");
    let conn = rusqlite::Connection::open(&db).expect("open index");
    conn.execute_batch(
        "INSERT INTO preimages(turn, path, kind) VALUES (1, CAST('../escape' AS BLOB), 0);
         INSERT INTO preimages(turn, path, kind) VALUES (77, CAST('orphan' AS BLOB), 0);
         INSERT INTO preimages(turn, path, kind) VALUES (1, CAST('weird' AS BLOB), 42);
         INSERT INTO restores(rewind_turn, rewound_to, state) VALUES (50, 1, 'running');
         INSERT INTO turns(number, kind, started_at) VALUES (9, 'agent', 0);",
    )
    .expect("tamper");
    drop(conn);
    fs::create_dir_all(fx.state_dir().join("blobs/zz")).expect("stray dir");
    let run = fx.opfs_p(&["verify"]);
    assert_eq!(run.code, Some(1), "{run}");
    for needle in [
        "../escape",
        "turn 77 path \"orphan\": the turn does not exist",
        "unknown pre-image kind 42",
        "recorded as turn 50",
        "missing",
        "is open but turn 9 is newer",
        "blobs/zz",
    ] {
        assert!(
            run.stdout.contains(needle),
            "verify misses {needle:?}: {run}"
        );
    }
    assert!(run.stdout.contains("FAILED"), "{run}");
}

// ---------------------------------------------------------------------------
// The state dir's filesystem full

struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size}"))
            .arg("tmpfs")
            .arg(at)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount -t tmpfs failed (needs root)");
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn free_bytes(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("cstr");
    // SAFETY: zeroed statvfs is a valid out-parameter; c is NUL-terminated.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    s.f_bavail * s.f_frsize
}

/// Appends zeros to `filler` until the filesystem refuses (or `limit`).
fn fill(filler: &Path, limit: u64) {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(filler)
        .expect("open filler");
    let chunk = vec![0u8; 4096];
    let mut written = 0;
    while written < limit {
        if f.write_all(&chunk).is_err() {
            break;
        }
        written += chunk.len() as u64;
    }
}

#[test]
fn full_state_dir_fails_mutations_with_enospc_and_work_resumes() {
    let fx = Fixture::new();
    let data: Vec<Vec<u8>> = (0..4u8)
        .map(|i| (0..300_000u32).map(|j| (j % 251) as u8 ^ i).collect())
        .collect();
    for (i, d) in data.iter().enumerate() {
        write_file(&fx.p(format!("big{i}")), d, 0o644);
    }
    let _tmpfs = Tmpfs::mount(&fx.home, "2m");
    let run = fx.opfs(&[
        OsStr::new("mount"),
        OsStr::new("--no-export"),
        fx.project.as_os_str(),
        fx.mnt.as_os_str(),
    ]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(wait_mount_state(&fx.mnt, true, MOUNT_TIMEOUT));
    let t2 = fx.turn("t2");
    // Recorded before the disk fills: must survive.
    fs::write(fx.m("big3"), b"agent 3\n").expect("write big3");
    let original = manifest(&fx.project);

    let filler = fx.home.join("filler");
    let free = free_bytes(&fx.home);
    fill(&filler, free.saturating_sub(64 * 1024));
    assert!(free_bytes(&fx.home) < 200_000);

    // Each of these needs a 300 KB pre-image copy: refused, project unchanged.
    let err = fs::write(fx.m("big0"), b"over").expect_err("overwrite on a full store");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    let err = fs::remove_file(fx.m("big1")).expect_err("unlink on a full store");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    let err = fs::rename(fx.m("big2"), fx.m("moved")).expect_err("rename on a full store");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    let err = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(fx.m("big0"))
        .expect_err("O_TRUNC on a full store");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert_manifest_eq("refused mutations", &original, &manifest(&fx.project));

    // Completely full: even index rows may not fit. Whatever fails, fails
    // with ENOSPC and leaves the project as it was.
    fill(&filler, u64::MAX);
    match fs::create_dir(fx.m("newdir")) {
        Ok(()) => assert!(fx.p("newdir").is_dir()),
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            assert!(!fx.p("newdir").exists());
        }
    }
    let run = fx.opfs_c(&["turn"]);
    if run.code != Some(0) {
        assert_code(&run, 1, "index.db");
    }
    // The daemon survives and answers.
    let s = fx.status();
    assert_eq!(s["mounted"], true, "{s:#}");

    // Space returns: work resumes.
    fs::remove_file(&filler).expect("remove filler");
    fs::write(fx.m("big0"), b"over\n").expect("overwrite once space returns");
    fs::remove_file(fx.m("big1")).expect("unlink once space returns");
    fx.turn("after");
    fx.opfs_p(&["verify"]).ok();
    fx.opfs_c(&["verify"]).ok();

    // Nothing already recorded is lost: turn 2's start comes back exactly.
    let v = fx.opfs_c(&["rewind", &t2.to_string(), "--json"]);
    assert_eq!(v.code, Some(0), "{v}");
    assert_eq!(fs::read(fx.p("big3")).expect("big3"), data[3]);
    assert_eq!(fs::read(fx.p("big0")).expect("big0"), data[0]);
    assert_eq!(fs::read(fx.p("big1")).expect("big1"), data[1]);
    fx.umount();
}

// ---------------------------------------------------------------------------
// A directory replaced by a symlink to the outside

#[test]
fn directory_swapped_for_a_symlink_outside_is_never_followed() {
    let fx = Fixture::new();
    write_file(&fx.p("d/f"), b"f original\n", 0o644);
    write_file(&fx.p("d/g"), b"g original\n", 0o644);
    write_file(&fx.p("top"), b"top original\n", 0o644);
    let outside = fx.root().join("outside");
    write_file(&outside.join("f"), b"outside f\n", 0o644);
    write_file(&outside.join("g"), b"outside g\n", 0o644);
    fx.mount();
    fx.turn("t2");
    fx.sh("echo agent > d/f && rm d/g && echo new > d/new && echo agent > top");
    // Behind opfs's back: the directory becomes a symlink to the outside.
    fs::rename(fx.p("d"), fx.root().join("d-saved")).expect("move d away");
    symlink(&outside, fx.p("d")).expect("symlink");
    let outside_before = manifest(&outside);

    for args in [
        &["rewind", "2", "--dry-run", "--partial", "--json"][..],
        &["rewind", "2", "--partial", "--json"],
        &["rewind", "2", "--force", "--partial", "--json"],
    ] {
        let run = fx.opfs_c(args);
        assert_eq!(run.code, Some(3), "{run}");
        let v = run.json();
        // d/new was created in turn 2 and must be absent: with `d` a
        // symlink, nothing is at d/new in the project, so there is nothing
        // to do for it.
        assert_eq!(conflict_paths(&v), ["d/f", "d/g"], "{args:?}: {v:#}");
        for p in ["d/f", "d/g"] {
            assert!(
                reason_of(&v, p).contains("symbolic link"),
                "{p} should say why: {v:#}"
            );
        }
        assert_manifest_eq(
            &format!("{args:?} wrote outside the project"),
            &outside_before,
            &manifest(&outside),
        );
    }
    assert_eq!(fs::read(fx.p("top")).expect("top"), b"top original\n");
    assert!(fs::symlink_metadata(fx.p("d"))
        .expect("d")
        .file_type()
        .is_symlink());
    // The link stays as the user made it; the agent's own paths under it
    // are reported, never followed by opfs.
    assert_eq!(fs::read_link(fx.p("d")).expect("readlink"), outside);
    fx.umount();
}

// ---------------------------------------------------------------------------
// Long and odd names

#[test]
fn long_and_odd_names_capture_list_and_rewind() {
    let fx = Fixture::new();
    let name_max: Vec<u8> = vec![b'n'; 255];
    let newline = b"line\nbreak".to_vec();
    let invalid = b"bad-\xff\xfe-utf8".to_vec();
    let backslash = b"back\\slash \"quoted\"".to_vec();
    // A chain of 200-byte directories to a relative path near PATH_MAX
    // (4096 with the NUL), leaving room for the absolute prefixes.
    let comp = vec![b'c'; 200];
    let mut deep: Vec<u8> = Vec::new();
    for _ in 0..18 {
        if !deep.is_empty() {
            deep.push(b'/');
        }
        deep.extend_from_slice(&comp);
    }
    let deep_file = [&deep[..], b"/", &name_max[..]].concat();
    assert!(deep_file.len() > 3800 && deep_file.len() < 4000);
    assert!(fx.project.as_os_str().len() + deep_file.len() < 4095);

    for n in [&name_max, &newline, &invalid, &backslash] {
        write_file(&fx.p(bytes_path(n)), b"before\n", 0o644);
    }
    fx.mount();
    let at_start = manifest(&fx.project);
    let t2 = fx.turn("odd names");
    let m = |b: &[u8]| fx.mnt.join(bytes_path(b));
    for n in [&name_max, &newline, &invalid, &backslash] {
        fs::write(m(n), b"after\n").expect("write through the mount");
        let mut renamed = n.clone();
        renamed.extend_from_slice(b".x");
        if n.len() < 255 {
            fs::write(m(&renamed), b"created\n").expect("create");
        }
    }
    // NAME_MAX + 1 is refused, as on any Linux filesystem.
    let err = fs::write(m(&[b'n'; 256]), b"x").expect_err("256-byte name");
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG), "{err}");
    fs::create_dir_all(m(&deep)).expect("deep mkdir through the mount");
    fs::write(m(&deep_file), b"deep\n").expect("deep file through the mount");
    let in_turn2 = manifest(&fx.project);
    fx.turn("t3");
    fs::write(m(&deep_file), b"deeper\n").expect("deep rewrite");

    // The listing stays valid JSON and names every path, escaped.
    let points = fx.points(true);
    let t2_paths: Vec<String> = points
        .iter()
        .find(|p| p["turn"] == t2)
        .and_then(|p| p["paths"].as_array())
        .expect("turn 2 listed")
        .iter()
        .map(|p| p.as_str().expect("string").to_string())
        .collect();
    for want in [
        String::from_utf8(name_max.clone()).expect("ascii"),
        "line\nbreak".to_string(),
        "bad-\\xff\\xfe-utf8".to_string(),
        "back\\\\slash \"quoted\"".to_string(),
    ] {
        assert!(t2_paths.contains(&want), "{want:?} not in {t2_paths:?}");
    }
    assert!(
        t2_paths.iter().any(|p| p.len() == deep_file.len()),
        "the deep file is not listed"
    );
    let human = fx.opfs_c(&["rewind", "--all"]).ok();
    assert!(human.stdout.contains("odd names"), "{human}");

    // Rewind round-trips them: to turn 3's start (the deep file's content),
    let v = fx.rewind(t2 + 1);
    assert_eq!(restored(&v).len(), 1, "{v:#}");
    fx.assert_tree("turn 3 start", &in_turn2);
    // and to turn 2's start (everything created goes, the content returns).
    let v = fx.rewind(t2);
    let listed: Vec<String> = restored(&v);
    assert!(listed.contains(&"line\nbreak".to_string()), "{v:#}");
    fx.assert_tree("turn 2 start", &at_start);
    fx.umount();
}

// ---------------------------------------------------------------------------
// opfs gc (retention)

#[test]
fn gc_keeps_the_newest_turns_exact_and_never_what_a_restore_needs() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    fx.mount();
    let mut starts = vec![(1u64, manifest(&fx.project))];
    fx.sh("echo v1 > f");
    for i in 2..=6u64 {
        let t = fx.turn(&format!("t{i}"));
        starts.push((t, manifest(&fx.project)));
        fx.sh(&format!("echo v{i} > f && echo {i} > g{i}"));
    }
    // While mounted the daemon applies it (tests/retention.rs); the
    // default policy (the newest 100 turns) drops nothing here.
    let served = fx.opfs_c(&["gc", "--json"]).ok().json();
    assert!(served["dropped_turns"].is_null(), "{served:#}");
    fx.umount();
    assert!(blob_stored(&fx, b"v0\n"));

    // Dry run changes nothing.
    let dry = fx
        .opfs_p(&["gc", "--keep", "3", "--dry-run", "--json"])
        .ok()
        .json();
    assert_eq!(dry["dropped_turns"], serde_json::json!([1, 3]), "{dry:#}");
    assert!(blob_stored(&fx, b"v0\n"));
    assert_code(&fx.opfs_p(&["gc", "--keep", "0"]), 2, "0");

    // An unfinished restore to turn 2 keeps turns from 2 on.
    let db = fx.state_dir().join("index.db");
    let conn = rusqlite::Connection::open(&db).expect("open index");
    conn.execute(
        "INSERT INTO restores(rewind_turn, rewound_to, state) VALUES (99, 2, 'running')",
        [],
    )
    .expect("fake a running restore");
    let r = fx.opfs_p(&["gc", "--keep", "1", "--json"]).ok().json();
    assert_eq!(r["dropped_turns"], serde_json::json!([1, 1]), "{r:#}");
    assert!(
        r["note"].as_str().unwrap_or("").contains("unfinished"),
        "{r:#}"
    );
    assert!(
        !blob_stored(&fx, b"v0\n"),
        "turn 1's only blob should be collected"
    );
    conn.execute("DELETE FROM restores WHERE rewind_turn = 99", [])
        .expect("clear it");
    drop(conn);

    let r = fx.opfs_p(&["gc", "--keep", "3", "--json"]).ok().json();
    assert_eq!(r["dropped_turns"], serde_json::json!([2, 3]), "{r:#}");
    assert!(r["blobs_removed"].as_u64().unwrap_or(0) >= 1, "{r:#}");
    fx.opfs_p(&["verify"]).ok();
    // Dropped turns are unknown now; kept ones rewind exactly.
    assert_code(&fx.opfs_p(&["rewind", "2"]), 2, "2");
    let listed = fx.opfs_p(&["rewind", "--all", "--json"]).ok().json();
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{listed:#}");
    for (t, m) in starts.iter().rev().take(3) {
        let run = fx.opfs_p(&["rewind", &t.to_string(), "--json"]);
        assert_eq!(run.code, Some(0), "{run}");
        assert_manifest_eq(&format!("turn {t} after gc"), m, &manifest(&fx.project));
    }
    fx.opfs_p(&["verify"]).ok();
}
