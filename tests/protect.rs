//! Never silently unprotected, on real mounts: with no
//! daemon serving the project `turn` fails (exit 1) unless
//! `--allow-unmounted`, `rewind` and `status` say so; `status` flags a stale
//! mount (a SIGKILLed daemon) and an interrupted rewind while unmounted; a
//! project served by one daemon is refused to a second one (another
//! `OPFS_HOME`, or another mountpoint); the turn hook makes a failed turn
//! visible; `umount` takes `-C`, and `-C` of a former mountpoint points to
//! its project.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

const NOT_SERVED: &str = "no opfs daemon serves";

/// A fixture with some history: turn 1 wrote `f` through the mount, turn 2
/// is open; then unmounted.
fn unmounted_with_history() -> Fixture {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"one\n", 0o644);
    fx.mount();
    fs::write(fx.m("f"), b"two\n").expect("write through the mount");
    assert_eq!(fx.turn("second"), 2);
    fs::write(fx.m("f"), b"three\n").expect("write through the mount");
    fx.umount();
    fx
}

fn open_turn_of_project(fx: &Fixture) -> u64 {
    let s = fx.opfs_p(&["status", "--json"]).ok().json();
    s["turn"]
        .as_u64()
        .unwrap_or_else(|| panic!("no turn: {s:#}"))
}

#[test]
fn turn_with_nothing_mounted_fails_and_opens_nothing() {
    let fx = unmounted_with_history();
    let project = fx.project.to_string_lossy().into_owned();
    for args in [&["turn"][..], &["turn", "--label", "x", "--json"]] {
        let run = fx.opfs_p(args);
        assert_eq!(run.code, Some(1), "{run}");
        assert!(
            run.stderr.contains(NOT_SERVED) && run.stderr.contains(&project),
            "the error must say no daemon serves the project: {run}"
        );
        assert!(run.stderr.contains("--allow-unmounted"), "{run}");
    }
    assert_eq!(open_turn_of_project(&fx), 2, "a refused turn opened one");

    // Asked for, it opens the turn, and still says nothing is recorded.
    let run = fx.opfs_p(&["turn", "--allow-unmounted"]).ok();
    assert_eq!(parse_turn_number(&run), 3);
    assert!(run.stderr.contains(NOT_SERVED), "{run}");
    let run = fx.opfs_p(&["turn", "--allow-unmounted", "--json"]).ok();
    assert_eq!(
        run.json(),
        serde_json::json!({"turn": 4, "mounted": false}),
        "{run}"
    );
    assert_eq!(open_turn_of_project(&fx), 4);

    // Mounted, nothing of this is said.
    fx.mount();
    let run = fx.opfs_c(&["turn", "--json"]).ok();
    assert_eq!(
        run.json(),
        serde_json::json!({"turn": 5, "mounted": true}),
        "{run}"
    );
    assert!(!run.stderr.contains(NOT_SERVED), "{run}");
}

#[test]
fn rewind_with_nothing_mounted_runs_directly_and_says_so() {
    let fx = unmounted_with_history();
    let run = fx.opfs_p(&["rewind"]).ok();
    assert!(run.stdout.contains("second"), "{run}");
    assert!(run.stderr.contains(NOT_SERVED), "{run}");

    let run = fx.opfs_p(&["rewind", "2", "--json"]).ok();
    let v = run.json();
    check_rewind_result(&v, 2, false);
    assert_eq!(v["mounted"], false, "{v:#}");
    assert!(
        run.stderr.contains(NOT_SERVED) && run.stderr.contains("not recorded"),
        "{run}"
    );
    assert_eq!(fs::read(fx.p("f")).expect("read f"), b"two\n");

    fx.mount();
    let v = fx.rewind(1);
    assert_eq!(v["mounted"], true, "{v:#}");
    assert_eq!(fs::read(fx.p("f")).expect("read f"), b"one\n");
}

#[test]
fn status_says_plainly_that_nothing_is_recorded() {
    let fx = unmounted_with_history();
    let human = fx.opfs_p(&["status"]).ok();
    assert!(
        human.stdout.contains("mounted:    no") && human.stdout.contains(NOT_SERVED),
        "{human}"
    );
    let s = fx.opfs_p(&["status", "--json"]).ok().json();
    assert_eq!(s["mounted"], false, "{s:#}");
    assert_eq!(s["stale_mounts"], serde_json::json!([]), "{s:#}");
    assert_eq!(s["interrupted_rewind"], serde_json::Value::Null, "{s:#}");
    let warnings = s["warnings"].as_array().expect("warnings");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains(NOT_SERVED))),
        "{s:#}"
    );

    fx.mount();
    let s = fx.status();
    assert_eq!(s["warnings"], serde_json::json!([]), "{s:#}");
}

#[test]
fn status_flags_a_stale_mount_of_a_killed_daemon() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"one\n", 0o644);
    fx.mount();
    let pid = fx.status()["pid"].as_i64().expect("pid") as i32;
    sigkill(pid);
    assert!(wait_dead(pid, Duration::from_secs(10)), "the daemon lives");
    let mnt = fx.mnt.to_string_lossy().into_owned();
    for via in [&fx.project, &fx.mnt] {
        let mut args: Vec<&OsStr> = vec![OsStr::new("-C"), via.as_os_str()];
        args.extend([OsStr::new("status"), OsStr::new("--json")]);
        let s = fx.opfs(&args).ok().json();
        assert_eq!(s["mounted"], false, "{s:#}");
        assert_eq!(s["stale_mounts"], serde_json::json!([mnt]), "{s:#}");
    }
    let human = fx.opfs_p(&["status"]).ok();
    assert!(
        human.stdout.contains(&format!("stale mount at {mnt}"))
            && human.stdout.contains("Transport endpoint is not connected"),
        "{human}"
    );
    // `turn` refuses, as with nothing mounted, and names the stale mount.
    let run = fx.opfs_c(&["turn"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains(NOT_SERVED) && run.stderr.contains(&format!("mount at {mnt} is stale")),
        "{run}"
    );

    // Mounting again cleans it up.
    fx.mount();
    let s = fx.status();
    assert_eq!(s["stale_mounts"], serde_json::json!([]), "{s:#}");
}

#[test]
fn status_flags_an_interrupted_rewind_while_unmounted() {
    let fx = unmounted_with_history();
    // A direct rewind dies (SIGKILL) with the restore marked running.
    let mut cmd = fx.opfs_command(&[
        OsStr::new("-C"),
        fx.project.as_os_str(),
        OsStr::new("rewind"),
        OsStr::new("1"),
    ]);
    cmd.env("OPFS_FAILPOINT", "rewind-before-done:1");
    let scratch = tempfile::tempdir_in(fx.root()).expect("scratch");
    let run = run_command(cmd, scratch.path(), Duration::from_secs(60)).expect("rewind");
    assert_eq!(
        run.code, None,
        "the failpoint should kill the rewind: {run}"
    );

    let s = fx.opfs_p(&["status", "--json"]).ok().json();
    assert_eq!(
        s["interrupted_rewind"],
        serde_json::json!({"turn": 3, "rewound_to": 1, "started": true, "state": "running"}),
        "{s:#}"
    );
    let human = fx.opfs_p(&["status"]).ok();
    assert!(
        human
            .stdout
            .contains("a rewind to turn 1 (turn 3) was interrupted"),
        "{human}"
    );
    // The mount finishes it; afterwards nothing is pending.
    fx.mount();
    assert!(fx.status()["recovered"].is_string(), "{:#}", fx.status());
    assert_eq!(fs::read(fx.p("f")).expect("read f"), b"one\n");
    fx.umount();
    let s = fx.opfs_p(&["status", "--json"]).ok().json();
    assert_eq!(s["interrupted_rewind"], serde_json::Value::Null, "{s:#}");
}

/// `opfs ARGS...` with `env` instead of the fixture's pinned environment.
fn opfs_as<S: AsRef<OsStr>>(fx: &Fixture, env: &TestEnv, args: &[S]) -> Run {
    let mut cmd = Command::new(opfs_bin());
    env.pin(&mut cmd).args(args).current_dir(fx.root());
    let scratch = tempfile::tempdir_in(fx.root()).expect("scratch");
    run_command(cmd, scratch.path(), Duration::from_secs(60)).expect("opfs")
}

/// `opfs mount PROJECT MNT` with `env`; whether `mnt` is mounted after it
/// (unmounted again, so a failed check leaves nothing behind).
fn mount_as(fx: &Fixture, env: &TestEnv, mnt: &Path) -> (Run, bool) {
    let args = [OsStr::new("mount"), fx.project.as_os_str(), mnt.as_os_str()];
    let run = opfs_as(fx, env, &args);
    let mounted = run.code == Some(0) && wait_mount_state(mnt, true, Duration::from_secs(10));
    if is_mounted(mnt) {
        let _ = opfs_as(fx, env, &[OsStr::new("umount"), mnt.as_os_str()]);
        if !wait_mount_state(mnt, false, Duration::from_secs(10)) {
            let _ = Command::new("fusermount3").arg("-uz").arg(mnt).status();
        }
    }
    (run, mounted)
}

#[test]
fn a_project_is_served_once() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"one\n", 0o644);
    fx.mount();
    let mnt2 = fx.root().join("mnt2");
    fs::create_dir(&mnt2).expect("mkdir");
    let other = TestEnv {
        opfs_home: fx.root().join("home2"),
        ..fx.pinned.clone()
    };

    // Another state dir: refused, naming the mount that serves it.
    let (run, mounted) = mount_as(&fx, &other, &mnt2);
    assert!(!mounted, "a second daemon serves the project: {run}");
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains("already served by another opfs daemon")
            && run.stderr.contains(&*fx.mnt.to_string_lossy()),
        "{run}"
    );
    // The same state dir at another mountpoint: refused too.
    let (run, mounted) = mount_as(&fx, &fx.pinned, &mnt2);
    assert!(!mounted, "a second daemon serves the project: {run}");
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("already mounted"), "{run}");

    // Once the first is gone the other state dir may serve it.
    fx.umount();
    let (run, mounted) = mount_as(&fx, &other, &mnt2);
    assert!(mounted, "{run}");
}

#[test]
fn umount_takes_dash_c_and_the_former_mountpoint_points_to_the_project() {
    let fx = Fixture::new();
    fx.mount();
    fx.opfs_c(&["umount"]).ok();
    assert!(
        wait_mount_state(&fx.mnt, false, Duration::from_secs(10)),
        "-C MOUNTPOINT umount left it mounted"
    );
    let project = fx.project.to_string_lossy().into_owned();
    let status = fx.opfs_c(&["status"]).ok();
    assert!(
        status.stdout.contains(&format!("project:    {project}"))
            && status.stderr.contains("not mounted any more"),
        "{status}"
    );
    let turn = fx.opfs_c(&["turn"]);
    assert_eq!(turn.code, Some(1), "{turn}");
    assert!(
        turn.stderr.contains(&project) && turn.stderr.contains("not mounted any more"),
        "{turn}"
    );
    // Nothing left to unmount.
    let run = fx.opfs_p(&["umount"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("not mounted"), "{run}");
    // -C PROJECT umount works too.
    fx.mount();
    fx.opfs_p(&["umount"]).ok();
    assert!(wait_mount_state(&fx.mnt, false, Duration::from_secs(10)));
}

/// Runs `docs/examples/turn-hook.sh` in a new session (no terminal to
/// write to) with a prompt event on stdin, `path` as `$PATH` and
/// `OPFS_PROJECT` the mountpoint.
fn run_hook(fx: &Fixture, path: &str, strict: bool) -> Run {
    let hook = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/turn-hook.sh");
    let event = fx.root().join("event.json");
    fs::write(
        &event,
        br#"{"hook_event_name":"UserPromptSubmit","prompt":"add a test"}"#,
    )
    .expect("write event");
    let mut cmd = Command::new("setsid");
    fx.pinned
        .pin(&mut cmd)
        .arg("-w")
        .arg("sh")
        .arg("-c")
        .arg(r#"exec "$0" < "$1""#)
        .arg(&hook)
        .arg(&event)
        .env("PATH", path)
        .env("OPFS_PROJECT", &fx.mnt)
        .env("OPFS_HOOK_STRICT", if strict { "1" } else { "0" });
    let scratch = tempfile::tempdir_in(fx.root()).expect("scratch");
    run_command(cmd, scratch.path(), Duration::from_secs(60)).expect("hook")
}

fn system_message(run: &Run) -> String {
    let v = run.json();
    v["systemMessage"]
        .as_str()
        .unwrap_or_else(|| panic!("no systemMessage: {run}"))
        .to_owned()
}

#[test]
fn the_hook_makes_a_failed_turn_visible() {
    let fx = Fixture::new();
    fx.mount();
    let bin_dir: PathBuf = opfs_bin().parent().expect("bin dir").to_path_buf();
    let with_opfs = format!("{}:/usr/bin:/bin", bin_dir.display());

    // Served: a turn labelled with the prompt, nothing said.
    let run = run_hook(&fx, &with_opfs, false);
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(run.stdout, "", "{run}");
    let points = fx.points(true);
    assert!(
        points.iter().any(|p| p["label"] == "add a test"),
        "{points:?}"
    );

    // opfs not on PATH.
    let run = run_hook(&fx, "/usr/bin:/bin", false);
    assert_eq!(run.code, Some(0), "{run}");
    let msg = system_message(&run);
    assert!(
        msg.contains("NOT recorded") && msg.contains("not on the hook's PATH"),
        "{run}"
    );
    assert!(run.stderr.contains("not on the hook's PATH"), "{run}");

    // The daemon gone: the reason is opfs's own.
    fx.umount();
    let run = run_hook(&fx, &with_opfs, false);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        system_message(&run).contains("not mounted any more"),
        "{run}"
    );
    // Strict: the agent is told to stop (exit 2).
    let run = run_hook(&fx, &with_opfs, true);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("NOT recorded"), "{run}");
}
