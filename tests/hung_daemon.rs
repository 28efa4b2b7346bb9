//! A hung daemon hangs nothing else (guarantee 9, "no command waits
//! forever on a daemon"): with the daemon stopped (`SIGSTOP`), `status`,
//! `turn`, the agent hook and `umount` each return and say what they
//! found; `umount --force` ends it, and the next `mount` serves the
//! project again with everything it had captured.

mod common;

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// How long the harness lets one command run before calling it hung.
/// Every command here returns within its documented bound (at once for a
/// stopped daemon); this only keeps a regression from hanging the suite.
const HUNG: Duration = Duration::from_secs(60);

/// Stops the daemon on creation; kills it on drop, so a failed test never
/// leaves a stopped daemon (and its mount) behind.
struct Stopped(i32);

impl Stopped {
    fn new(pid: i32) -> Stopped {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(pid, libc::SIGSTOP);
        }
        assert!(
            wait_for(Duration::from_secs(10), || proc_state(pid) == Some('T')),
            "daemon {pid} did not stop"
        );
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        sigkill(self.0);
    }
}

fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn daemon_pid(fx: &Fixture) -> i32 {
    fx.status()["pid"].as_i64().expect("pid") as i32
}

/// `opfs ARGS...` in the fixture's environment, failing the test if it
/// does not return within [`HUNG`].
fn bounded(fx: &Fixture, args: &[&OsStr]) -> Run {
    let scratch = tempfile::tempdir().expect("scratch");
    run_command(fx.opfs_command(args), scratch.path(), HUNG)
        .unwrap_or_else(|e| panic!("a command waited on the stopped daemon: {e}"))
}

/// The agent hook with a prompt event whose cwd is `cwd` (the hook itself
/// runs outside it: a `chdir` into a stopped daemon's mount would wait).
fn hook(fx: &Fixture, cwd: &Path) -> Run {
    let scratch = tempfile::tempdir().expect("scratch");
    let event = scratch.path().join("event.json");
    std::fs::write(
        &event,
        serde_json::json!({
            "session_id": "s1",
            "prompt": "next step",
            "cwd": cwd,
            "hook_event_name": "UserPromptSubmit",
        })
        .to_string(),
    )
    .expect("event");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "{} hook --agent claude-code < {}",
            q(&opfs_bin().to_string_lossy()),
            q(&event.to_string_lossy())
        ))
        .current_dir(fx.root());
    fx.pinned.pin(&mut cmd);
    run_command(cmd, scratch.path(), HUNG)
        .unwrap_or_else(|e| panic!("the hook waited on the stopped daemon: {e}"))
}

fn says_stopped(run: &Run, pid: i32) {
    let text = format!("{}{}", run.stdout, run.stderr);
    assert!(
        text.contains(&format!("(pid {pid}) does not answer: stopped (state T)")),
        "{run}"
    );
    assert!(text.contains("umount --force"), "{run}");
}

#[test]
fn a_stopped_daemon_hangs_no_command_and_umount_force_recovers_it() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"before\n", 0o644);
    fx.mount();
    let pid = daemon_pid(&fx);
    fx.sh("echo during > f; echo new > g");
    let stopped = Stopped::new(pid);

    let mnt = fx.mnt.as_os_str();
    let project = fx.project.as_os_str();
    let c = OsStr::new("-C");
    for args in [
        vec![c, mnt, OsStr::new("status")],
        vec![c, project, OsStr::new("status"), OsStr::new("--json")],
        vec![c, mnt, OsStr::new("turn")],
        vec![OsStr::new("umount"), mnt],
    ] {
        let run = bounded(&fx, &args);
        assert_eq!(run.code, Some(1), "{run}");
        says_stopped(&run, pid);
        if args.contains(&OsStr::new("--json")) {
            let v = run.json();
            assert_eq!(v["error"]["kind"], "failure", "{run}");
        }
    }
    // The hook lets the agent go on, telling it nothing is recorded.
    let run = hook(&fx, &fx.mnt);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("systemMessage"), "{run}");
    says_stopped(&run, pid);
    // A new mount is refused, saying why and how to end it.
    let run = fx.try_mount(&[], &[]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr
            .contains(&format!("held by its daemon (pid {pid})"))
            && run.stderr.contains("stopped (state T)"),
        "{run}"
    );

    let run = bounded(&fx, &[OsStr::new("umount"), OsStr::new("--force"), mnt]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        wait_dead(pid, Duration::from_secs(30)),
        "daemon {pid} lives"
    );
    drop(stopped);
    assert!(!is_mounted(&fx.mnt), "{run}");

    // Mounted again, what the stopped daemon captured is all there.
    fx.mount();
    assert_eq!(fx.sh("cat f g"), "during\nnew\n");
    let run = fx.opfs_c(&["show", "1:f"]).ok();
    assert_eq!(run.stdout, "before\n", "{run}");
    let run = fx.opfs_c(&["show", "1:g"]);
    assert_ne!(run.code, Some(0), "g did not exist at turn 1: {run}");
    fx.rewind(1);
    assert_eq!(fx.sh("cat f; ls"), "before\nf\n");
}

#[test]
fn a_lazily_unmounted_stopped_daemon_is_said_and_ended() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    fx.mount();
    let pid = daemon_pid(&fx);
    let stopped = Stopped::new(pid);
    let st = Command::new("fusermount3")
        .arg("-uz")
        .arg(&fx.mnt)
        .status()
        .expect("fusermount3");
    assert!(st.success());

    let c = OsStr::new("-C");
    let run = bounded(&fx, &[c, fx.project.as_os_str(), OsStr::new("status")]);
    assert_eq!(run.code, Some(1), "{run}");
    says_stopped(&run, pid);
    let run = fx.try_mount(&[], &[]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr
            .contains(&format!("held by its daemon (pid {pid})"))
            && run.stderr.contains("is gone"),
        "{run}"
    );
    let run = bounded(
        &fx,
        &[
            c,
            fx.project.as_os_str(),
            OsStr::new("umount"),
            OsStr::new("--force"),
        ],
    );
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        wait_dead(pid, Duration::from_secs(30)),
        "daemon {pid} lives"
    );
    drop(stopped);
    fx.mount();
    assert_eq!(fx.sh("cat f"), "v0\n");
}

#[test]
fn a_lazily_unmounted_live_daemon_exits_and_the_project_mounts_again() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    fx.mount();
    let pid = daemon_pid(&fx);
    fx.sh("echo v1 > f");
    let st = Command::new("fusermount3")
        .arg("-uz")
        .arg(&fx.mnt)
        .status()
        .expect("fusermount3");
    assert!(st.success());
    assert!(
        wait_dead(pid, Duration::from_secs(30)),
        "daemon {pid} outlived its mount"
    );
    let run = fx.opfs_p(&["status", "--json"]).ok();
    assert_eq!(run.json()["mounted"], false, "{run}");
    fx.mount();
    assert_eq!(fx.opfs_c(&["show", "1:f"]).ok().stdout, "v0\n");
}

/// A request whose client stopped waiting (the daemon was stopped) is not
/// carried out when the daemon runs again: an unmount asked for and given
/// up on must not unmount minutes later.
#[test]
fn a_request_given_up_on_is_dropped_when_the_daemon_resumes() {
    use std::io::Write;
    let fx = Fixture::new();
    fx.mount();
    let pid = daemon_pid(&fx);
    let stopped = Stopped::new(pid);
    {
        let mut conn = std::os::unix::net::UnixStream::connect(
            Path::new(&fx.state_dir()).join("control.sock"),
        )
        .expect("connect");
        conn.write_all(b"{\"op\":\"unmount\"}\n").expect("send");
    } // closed: the client gave up
      // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, libc::SIGCONT);
    }
    let log = fx.state_dir().join("daemon.log");
    assert!(
        wait_for(Duration::from_secs(30), || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("control request dropped"))),
        "the daemon did not drop the abandoned unmount: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(is_mounted(&fx.mnt), "the abandoned unmount ran");
    assert_eq!(fx.status()["mounted"], true);
    // It runs again: the fixture unmounts it, so the guard must not act.
    #[allow(clippy::mem_forget)]
    std::mem::forget(stopped);
}

/// An export waits for another export of the same repository, but never
/// for a holder of its lock that is stopped (a daemon stopped in the
/// middle of its background export): `opfs export` fails at once naming
/// it. The holder here is `flock(1)`, stopped the same way.
#[test]
fn an_export_lock_held_by_a_stopped_process_is_not_waited_on() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v0\n", 0o644);
    fx.mount();
    fx.sh("echo v1 > f");
    fx.turn("two");
    fx.opfs_c(&["export"]).ok();
    let lock = fx.state_dir().join("export.git/opfs-export.lock");
    let mut holder = Command::new("flock")
        .arg("-o")
        .arg(&lock)
        .args(["sleep", "120"])
        .spawn()
        .expect("flock");
    let pid = holder.id() as i32;
    assert!(
        wait_for(Duration::from_secs(30), || Command::new("flock")
            .args(["-n"])
            .arg(&lock)
            .arg("true")
            .status()
            .is_ok_and(|s| !s.success())),
        "flock did not take the lock"
    );
    let stopped = Stopped::new(pid);
    let c = OsStr::new("-C");
    let run = bounded(&fx, &[c, fx.mnt.as_os_str(), OsStr::new("export")]);
    drop(stopped); // killed
    let _ = holder.wait();
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr
            .contains(&format!("held by pid {pid}, which is stopped (state T)")),
        "{run}"
    );
}
