//! The CLI contract: bad usage exits 2 with a message, mount refuses bad
//! paths naming them, `turn` prints the number alone, `status --json` shape.

mod common;

use std::ffi::OsStr;
use std::fs;

use common::*;

fn assert_bad_usage(fx: &Fixture, args: &[&str], mention: Option<&str>) {
    let run = fx.opfs_c(args);
    assert_eq!(run.code, Some(2), "expected exit 2 (bad usage): {run}");
    assert!(
        !run.stderr.trim().is_empty(),
        "expected a message on stderr: {run}"
    );
    if let Some(m) = mention {
        assert!(
            run.stderr.contains(m),
            "the message should mention {m:?}: {run}"
        );
    }
}

#[test]
fn rewind_to_turn_0_is_bad_usage() {
    let fx = Fixture::new();
    fx.mount();
    assert_bad_usage(&fx, &["rewind", "0"], None);
}

#[test]
fn rewind_to_a_negative_turn_is_bad_usage() {
    let fx = Fixture::new();
    fx.mount();
    assert_bad_usage(&fx, &["rewind", "-1"], None);
    assert_bad_usage(&fx, &["rewind", "--", "-1"], None);
}

#[test]
fn rewind_to_a_non_number_is_bad_usage() {
    let fx = Fixture::new();
    fx.mount();
    assert_bad_usage(&fx, &["rewind", "abc"], Some("abc"));
}

#[test]
fn rewind_to_an_unknown_turn_is_bad_usage() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"f\n", 0o644);
    fx.mount();
    fx.sh("echo changed > f");
    let before = manifest(&fx.project);
    assert_bad_usage(&fx, &["rewind", "999"], Some("999"));
    assert_bad_usage(&fx, &["rewind", "999", "--json"], Some("999"));
    assert_manifest_eq(
        "a refused rewind changes nothing",
        &before,
        &manifest(&fx.project),
    );
}

fn assert_mount_refused(fx: &Fixture, project: &OsStr, mnt: &OsStr, must_name: &str) {
    let run = fx.opfs(&[OsStr::new("mount"), project, mnt]);
    assert!(
        matches!(run.code, Some(1 | 2)),
        "mount should fail with exit 1 or 2: {run}"
    );
    assert!(
        run.stderr.contains(must_name),
        "the error should name {must_name}: {run}"
    );
}

#[test]
fn mount_of_a_missing_project_fails_naming_it() {
    let fx = Fixture::new();
    let missing = fx.root().join("no-such-project");
    assert_mount_refused(
        &fx,
        missing.as_os_str(),
        fx.mnt.as_os_str(),
        &missing.to_string_lossy(),
    );
    assert!(!is_mounted(&fx.mnt));
}

#[test]
fn mount_on_a_missing_mountpoint_fails_naming_it() {
    let fx = Fixture::new();
    let missing = fx.root().join("no-such-mountpoint");
    assert_mount_refused(
        &fx,
        fx.project.as_os_str(),
        missing.as_os_str(),
        &missing.to_string_lossy(),
    );
    assert!(!missing.exists(), "mount must not create the mountpoint");
}

#[test]
fn mount_inside_the_project_fails() {
    let fx = Fixture::new();
    let inside = fx.p("sub/mnt");
    fs::create_dir_all(&inside).expect("mkdir");
    // The message must name the offending path: the mountpoint (which starts
    // with the project's path) or the project.
    assert_mount_refused(
        &fx,
        fx.project.as_os_str(),
        inside.as_os_str(),
        &fx.project.to_string_lossy(),
    );
    assert!(!is_mounted(&inside));
}

#[test]
fn mount_on_a_busy_mountpoint_fails_naming_it() {
    let fx = Fixture::new();
    fx.mount();
    let other = fx.root().join("other-project");
    fs::create_dir(&other).expect("mkdir");
    assert_mount_refused(
        &fx,
        other.as_os_str(),
        fx.mnt.as_os_str(),
        &fx.mnt.to_string_lossy(),
    );
    // The first mount keeps working.
    fx.sh("echo still > served");
    assert_eq!(fs::read(fx.p("served")).expect("read"), b"still\n");
}

#[test]
fn umount_of_a_busy_mount_fails_naming_it_and_keeps_serving() {
    let fx = Fixture::new();
    fx.mount();
    fs::write(fx.mnt.join("held"), b"x").expect("write");
    let held = fs::File::open(fx.mnt.join("held")).expect("open");
    let run = fx.opfs(&[OsStr::new("umount"), fx.mnt.as_os_str()]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("busy"), "{run}");
    assert!(run.stderr.contains(&*fx.mnt.to_string_lossy()), "{run}");
    assert!(is_mounted(&fx.mnt), "a refused umount detached the mount");
    fx.sh("echo still > served");
    assert_eq!(fs::read(fx.p("served")).expect("read"), b"still\n");
    drop(held);
    fx.umount();
}

#[test]
fn umount_waits_for_a_process_that_leaves_the_mount_at_once() {
    let fx = Fixture::new();
    fx.mount();
    // A process whose working directory is the mount, gone well within the
    // unmount grace (2 s).
    let mut child = std::process::Command::new("sleep")
        .arg("0.3")
        .current_dir(&fx.mnt)
        .spawn()
        .expect("spawn sleep");
    fx.umount();
    child.wait().expect("wait sleep");
}

/// Parses stdout as one JSON value and returns its `error` object.
fn json_error(run: &Run) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON value ({e}): {run}"));
    v.get("error")
        .cloned()
        .unwrap_or_else(|| panic!("no `error` object: {run}"))
}

#[test]
fn with_json_errors_are_json_on_stdout_too() {
    let fx = Fixture::new();
    fx.mount();
    // A failure (exit 1): an unknown -C path.
    let missing = fx.root().join("no-such-dir");
    let run = fx.opfs(&[
        OsStr::new("--json"),
        OsStr::new("-C"),
        missing.as_os_str(),
        OsStr::new("status"),
    ]);
    assert_eq!(run.code, Some(1), "{run}");
    let e = json_error(&run);
    assert_eq!(e["code"], 1, "{run}");
    assert_eq!(e["kind"], "failure", "{run}");
    let msg = e["message"].as_str().expect("message");
    assert!(msg.contains("no-such-dir"), "{run}");
    assert!(run.stderr.contains(msg), "stderr keeps the message: {run}");
    // Bad usage found by opfs (exit 2): an unknown turn.
    let run = fx.opfs_c(&["rewind", "99", "--json"]);
    assert_eq!(run.code, Some(2), "{run}");
    let e = json_error(&run);
    assert_eq!(e["kind"], "usage", "{run}");
    assert!(
        e["message"].as_str().expect("message").contains("99"),
        "{run}"
    );
    // Bad usage found by the argument parser (exit 2).
    let run = fx.opfs_c(&["status", "--json", "--bogus"]);
    assert_eq!(run.code, Some(2), "{run}");
    let e = json_error(&run);
    assert_eq!(e["kind"], "usage", "{run}");
    assert!(
        e["message"].as_str().expect("message").contains("--bogus"),
        "{run}"
    );
    // Without --json, stdout stays empty.
    let run = fx.opfs_c(&["rewind", "99"]);
    assert_eq!(run.code, Some(2), "{run}");
    assert_eq!(run.stdout, "", "{run}");
}

#[test]
fn turn_prints_only_the_new_number() {
    let fx = Fixture::new();
    fx.mount();
    let run = fx.opfs_c(&["turn", "--label", "x"]).ok();
    assert_eq!(run.stdout, "2\n", "{run}");
    let run = fx
        .opfs_c(&[
            "turn",
            "--label",
            "with spaces and ünïcode",
            "--id",
            "msg-42",
        ])
        .ok();
    assert_eq!(parse_turn_number(&run), 3);
    let run = fx.opfs_c(&["turn"]).ok();
    assert_eq!(parse_turn_number(&run), 4);
}

#[test]
fn status_reports_the_mount() {
    let fx = Fixture::new();
    fx.mount();
    let s = fx.status();
    assert_eq!(s["mounted"], true, "{s:#}");
    assert_eq!(s["mountpoint"].as_str(), fx.mnt.to_str(), "{s:#}");
    assert_eq!(s["project"].as_str(), fx.project.to_str(), "{s:#}");
    assert_eq!(s["turn"], 1, "{s:#}");
    assert!(s["store_bytes"].is_u64(), "{s:#}");
    fx.turn("next");
    assert_eq!(fx.open_turn(), 2);
    let human = fx.opfs_c(&["status"]).ok();
    assert!(human.stdout.contains(&*fx.mnt.to_string_lossy()), "{human}");

    // The project path finds the same daemon (-C takes either).
    let run = fx
        .opfs(&[
            OsStr::new("-C"),
            fx.project.as_os_str(),
            OsStr::new("status"),
            OsStr::new("--json"),
        ])
        .ok();
    assert_eq!(run.json()["turn"], 2, "{run}");

    fx.umount();
    let run = fx
        .opfs(&[
            OsStr::new("-C"),
            fx.project.as_os_str(),
            OsStr::new("status"),
            OsStr::new("--json"),
        ])
        .ok();
    assert_eq!(run.json()["mounted"], false, "{run}");
}

#[test]
fn state_lives_in_opfs_home_not_in_the_project() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"f\n", 0o644);
    let before = manifest(&fx.project);
    fx.mount();
    fx.turn("t");
    fx.sh("cat f > /dev/null");
    fx.umount();
    assert_manifest_eq(
        "opfs wrote into the project",
        &before,
        &manifest(&fx.project),
    );
    assert!(
        fs::read_dir(&fx.home)
            .expect("read OPFS_HOME")
            .next()
            .is_some(),
        "nothing was written to OPFS_HOME"
    );
}

#[test]
fn show_and_diff_of_a_turn_dropped_by_gc_say_so_like_rewind() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    fx.mount();
    fx.sh("echo v1 > f");
    for i in 2..=4 {
        fx.turn(&format!("t{i}"));
        fx.sh(&format!("echo v{i} > f"));
    }
    fx.umount();
    fx.opfs_p(&["gc", "--keep", "2"]).ok();
    let want = "turn 1 was dropped by retention (opfs gc); the oldest turn kept is 3";
    for args in [
        &["rewind", "1"][..],
        &["show", "1:f"][..],
        &["diff", "1"][..],
        &["diff", "1..4"][..],
    ] {
        let run = fx.opfs_p(args);
        assert_eq!(run.code, Some(2), "{args:?}: {run}");
        assert!(run.stderr.contains(want), "{args:?}: {run}");
    }
    // A turn that never existed keeps its own message.
    let run = fx.opfs_p(&["show", "9:f"]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("turn 9 does not exist"), "{run}");
    // Kept turns still show.
    let run = fx.opfs_p(&["show", "3:f"]).ok();
    assert_eq!(run.stdout, "v2\n", "{run}");
}

#[test]
fn a_bad_opfs_range_min_is_bad_usage_naming_it() {
    let fx = Fixture::new();
    fx.set_env("OPFS_RANGE_MIN", "garbage");
    let run = fx.opfs(&[
        OsStr::new("mount"),
        fx.project.as_os_str(),
        fx.mnt.as_os_str(),
    ]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("OPFS_RANGE_MIN"), "{run}");
    assert!(run.stderr.contains("garbage"), "{run}");
    assert!(!is_mounted(&fx.mnt), "{run}");
    // The same with --json: one error object.
    let run = fx.opfs(&[
        OsStr::new("mount"),
        fx.project.as_os_str(),
        fx.mnt.as_os_str(),
        OsStr::new("--json"),
    ]);
    assert_eq!(run.code, Some(2), "{run}");
    assert_eq!(json_error(&run)["kind"], "usage", "{run}");
    assert!(!is_mounted(&fx.mnt), "{run}");
    // --range-min given: the variable is not consulted.
    let run = fx.opfs(&[
        OsStr::new("mount"),
        fx.project.as_os_str(),
        fx.mnt.as_os_str(),
        OsStr::new("--range-min"),
        OsStr::new("off"),
    ]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(wait_mount_state(&fx.mnt, true, MOUNT_TIMEOUT));
    fx.umount();
}

#[test]
fn labels_with_control_characters_print_escaped_and_json_keeps_them() {
    let fx = Fixture::new();
    fx.mount();
    let label = "multi\nline\x1b[31mRED\r\t\u{9b}end";
    let shown = "multi\\nline\\x1b[31mRED\\r\\t\\u{9b}end";
    let t = fx.turn(label);
    fx.opfs_c(&["turn", "--label", "plain", "--id", "id\x1b[0m"])
        .ok();
    // The rewind list: one header line and one line per turn.
    let run = fx.opfs_c(&["rewind"]).ok();
    assert_eq!(run.stdout.lines().count(), 1 + 3, "{run}");
    assert!(!run.stdout.contains('\x1b'), "{run}");
    assert!(!run.stdout.contains('\u{9b}'), "{run}");
    assert!(run.stdout.contains(shown), "{run}");
    // The log.
    let run = fx.opfs_c(&["log"]).ok();
    assert!(!run.stdout.contains('\x1b'), "{run}");
    assert!(!run.stdout.contains('\r'), "{run}");
    assert!(
        run.stdout.contains(&format!("    label:   {shown}\n")),
        "{run}"
    );
    assert!(run.stdout.contains("    id:      id\\x1b[0m\n"), "{run}");
    // JSON keeps the label exactly.
    let points = fx.points(true);
    let p = points.iter().find(|p| p["turn"] == t).expect("the turn");
    assert_eq!(p["label"], label, "{p:#}");
    let log = fx.opfs_c(&["log", "--json"]).ok().json();
    let e = log
        .as_array()
        .expect("log array")
        .iter()
        .find(|e| e["turn"] == t)
        .expect("the turn")
        .clone();
    assert_eq!(e["label"], label, "{e:#}");
}

/// Asserts `run` exited 0 with exactly one JSON value on stdout; returns it.
fn one_json(run: Run) -> serde_json::Value {
    let run = run.ok();
    let mut values =
        serde_json::Deserializer::from_str(&run.stdout).into_iter::<serde_json::Value>();
    let first = match values.next() {
        Some(Ok(v)) => v,
        other => panic!("stdout is not a JSON value ({other:?}): {run}"),
    };
    assert!(values.next().is_none(), "more than one JSON value: {run}");
    first
}

#[test]
fn with_json_every_command_prints_one_json_value_on_success() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    let v = one_json(fx.opfs(&[
        OsStr::new("mount"),
        fx.project.as_os_str(),
        fx.mnt.as_os_str(),
        OsStr::new("--json"),
    ]));
    assert_eq!(v["mountpoint"].as_str(), fx.mnt.to_str(), "{v:#}");
    assert!(wait_mount_state(&fx.mnt, true, MOUNT_TIMEOUT));
    fx.sh("echo v1 > f");
    let v = one_json(fx.opfs_c(&["turn", "--label", "t", "--json"]));
    assert_eq!(v["turn"], 2, "{v:#}");
    fx.sh("echo v2 > f");
    for args in [
        &["status"][..],
        &["rewind"][..],
        &["log"][..],
        &["diff", "1"][..],
        &["diff", "1..2", "--stat"][..],
        &["verify"][..],
        &["export"][..],
        &["rewind", "1", "--dry-run"][..],
        &["rewind", "1"][..],
    ] {
        let mut with = args.to_vec();
        with.push("--json");
        one_json(fx.opfs_c(&with));
    }
    let v = one_json(fx.opfs(&[
        OsStr::new("umount"),
        fx.mnt.as_os_str(),
        OsStr::new("--json"),
    ]));
    assert_eq!(v["unmounted"].as_str(), fx.mnt.to_str(), "{v:#}");
    assert!(wait_mount_state(&fx.mnt, false, MOUNT_TIMEOUT));
    one_json(fx.opfs_p(&["gc", "--keep", "1", "--json"]));
    one_json(fx.opfs_p(&["status", "--json"]));
}

#[test]
fn mount_in_the_foreground_with_json_prints_one_value_when_ready() {
    use std::io::BufRead;
    let fx = Fixture::new();
    let mut cmd = fx.opfs_command(&[
        OsStr::new("mount"),
        OsStr::new("-f"),
        fx.project.as_os_str(),
        fx.mnt.as_os_str(),
        OsStr::new("--json"),
    ]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().expect("spawn opfs mount -f");
    // Read on a thread, so a mount that never prints fails the test
    // instead of hanging it (dropping the fixture unmounts, which ends the
    // daemon).
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let _ = tx.send(line);
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut rest);
        rest
    });
    let line = rx
        .recv_timeout(MOUNT_TIMEOUT)
        .expect("no line on stdout once mounted");
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
    assert!(
        is_mounted(&fx.mnt),
        "printed before the mount was ready: {v:#}"
    );
    assert_eq!(v["pid"], child.id(), "{v:#}");
    assert_eq!(v["mountpoint"].as_str(), fx.mnt.to_str(), "{v:#}");
    fx.umount();
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}");
    let rest = reader.join().expect("reader thread");
    assert_eq!(rest, "", "more output after the ready line");
}

#[test]
fn show_with_json_prints_one_object_with_the_content_in_base64() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    write_file(&fx.p("bin"), b"\x00\xff\n", 0o600);
    write_file(&fx.p("run.sh"), b"#!/bin/sh\n", 0o755);
    std::os::unix::fs::symlink("f", fx.p("link")).expect("symlink");
    fx.mount();
    fx.turn("t");
    fx.sh("echo v1 > f && rm bin run.sh link && ln -s run.sh link && mkdir d");

    let v = one_json(fx.opfs_c(&["show", "1:f", "--json"]));
    assert_eq!(
        v,
        serde_json::json!({"turn": 1, "path": "f", "kind": "file", "perm": "0644",
                           "size": 3, "content_base64": "djAK"}),
        "{v:#}"
    );
    let v = one_json(fx.opfs_c(&["show", "1:bin", "--json"]));
    assert_eq!(v["content_base64"], "AP8K", "{v:#}");
    assert_eq!(v["perm"], "0600", "{v:#}");
    let v = one_json(fx.opfs_c(&["show", "1:run.sh", "--json"]));
    assert_eq!(v["content_base64"], "IyEvYmluL3NoCg==", "{v:#}");
    assert_eq!(v["perm"], "0755", "{v:#}");
    let v = one_json(fx.opfs_c(&["show", "1:link", "--json"]));
    assert_eq!(
        v,
        serde_json::json!({"turn": 1, "path": "link", "kind": "symlink",
                           "target": "f", "target_base64": "Zg=="}),
        "{v:#}"
    );
    // The open turn's start, read from the project.
    fx.turn("t3");
    let v = one_json(fx.opfs_c(&["show", "3:f", "--json"]));
    assert_eq!(v["content_base64"], "djEK", "{v:#}");
    // Without --json, the raw bytes as before.
    let run = fx.opfs_c(&["show", "1:f"]).ok();
    assert_eq!(run.stdout, "v0\n", "{run}");
    // Errors stay errors, as one JSON error object.
    let run = fx.opfs_c(&["show", "1:d", "--json"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(json_error(&run)["message"]
        .as_str()
        .expect("message")
        .contains("did not exist"));
    let run = fx.opfs_c(&["show", "3:d", "--json"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert_eq!(json_error(&run)["kind"], "failure", "{run}");
}
