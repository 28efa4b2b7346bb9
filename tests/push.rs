//! Checkpoint remotes (`docs/remote.md`): the history pushed to a real git
//! remote (a bare repository served by `git daemon` on 127.0.0.1, started
//! by the test) under `refs/opfs/<machine>/<project key>/`, automatically
//! after turns and by `opfs push`; an unreachable remote shown by `status`
//! and retried; a clash refused and named; a push resumed after the
//! pusher died between the remote taking it and recording it.

mod common;

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

/// How long a test waits for the automatic pusher (a thread of the daemon).
const PUSH_WAIT: Duration = Duration::from_secs(90);

/// `git daemon` serving the bare repositories of a temp dir on 127.0.0.1,
/// pushes enabled; killed on drop.
struct GitDaemon {
    child: Child,
    base: tempfile::TempDir,
    port: u16,
}

impl GitDaemon {
    /// A daemon on a free port, or `None` (and a message) when this
    /// machine has no `git daemon` (`scripts/setup` installs it).
    fn start() -> Option<GitDaemon> {
        GitDaemon::start_on(free_port())
    }

    /// A daemon on `port`, serving a fresh bare repository `r.git`.
    fn start_on(port: u16) -> Option<GitDaemon> {
        let exec = Command::new("git").arg("--exec-path").output().ok()?;
        let exec = PathBuf::from(String::from_utf8_lossy(&exec.stdout).trim());
        if !exec.join("git-daemon").exists() {
            eprintln!("SKIP: `git daemon` is not installed (scripts/setup installs it)");
            return None;
        }
        let base = tempfile::tempdir().expect("temp dir");
        let repo = base.path().join("r.git");
        let out = Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(&repo)
            .output()
            .expect("git init");
        assert!(out.status.success(), "git init --bare failed");
        // git-daemon itself (not `git daemon`, which would leave it a
        // grandchild), in a process group of its own with the children
        // it forks per connection: the drop ends them all.
        let child = Command::new(exec.join("git-daemon"))
            .args([
                "--reuseaddr",
                "--export-all",
                "--enable=receive-pack",
                "--listen=127.0.0.1",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.path().display()))
            .arg(base.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start git daemon");
        let d = GitDaemon { child, base, port };
        assert!(
            wait_for(Duration::from_secs(30), || TcpStream::connect((
                "127.0.0.1",
                d.port
            ))
            .is_ok()),
            "git daemon did not listen on 127.0.0.1:{port}"
        );
        Some(d)
    }

    fn url(&self) -> String {
        url_on(self.port)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        end_group(&mut self.child);
        let _ = &self.base;
    }
}

/// Kills the process group `child` leads (it was started with
/// `process_group(0)`: a server and every process it started), then
/// reaps `child`.
fn end_group(child: &mut Child) {
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn url_on(port: u16) -> String {
    format!("git://127.0.0.1:{port}/r.git")
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Writes the fixture's configuration: `machine`, the project's remote,
/// automatic pushes on or off, a retry every second.
fn configure(f: &Fixture, url: &str, machine: &str, auto: bool) {
    let text = format!(
        "[push]\nmachine = {machine:?}\nretry_seconds = 1\n\n[projects.{:?}.push]\nremote = {url:?}\nauto = {auto}\n",
        f.project.display().to_string()
    );
    std::fs::write(&f.pinned.config, text).expect("write config");
}

/// Replaces `from` by `to` in the fixture's configuration file.
fn edit_config(f: &Fixture, from: &str, to: &str) {
    let text = std::fs::read_to_string(&f.pinned.config).expect("config");
    std::fs::write(&f.pinned.config, text.replace(from, to)).expect("write config");
}

/// The project's namespace on the remote.
fn namespace(f: &Fixture, machine: &str) -> String {
    let key = f.state_dir();
    format!(
        "refs/opfs/{machine}/{}",
        key.file_name().expect("key").to_string_lossy()
    )
}

/// `git ls-remote URL`: ref name to id.
fn ls_remote(url: &str) -> std::collections::BTreeMap<String, String> {
    let out = Command::new("git")
        .args(["ls-remote", url])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git ls-remote");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(id, r)| (r.to_string(), id.to_string()))
        .collect()
}

/// A plain git command in `dir` (no user configuration).
fn git_at(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The push entry of `status --json` for `url`.
fn push_status(f: &Fixture, url: &str) -> serde_json::Value {
    let s = f.status();
    s["push"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["remote"] == url))
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn turns_are_pushed_after_each_turn_under_the_machines_namespace() {
    let Some(d) = GitDaemon::start() else { return };
    let f = Fixture::new();
    // The user's own repository, with a remote of its own: never touched.
    write_file(&f.p("README"), b"hello\n", 0o644);
    git_at(&f.project, &["init", "-q"]);
    git_at(
        &f.project,
        &["remote", "add", "origin", "https://example.invalid/app.git"],
    );
    git_at(&f.project, &["add", "README"]);
    git_at(&f.project, &["commit", "-q", "-m", "first"]);
    let git_before = manifest(&f.p(".git"));
    configure(&f, &d.url(), "alpha", true);
    // A label names the turn it opens.
    f.mount_with(&["--label", "write a"]);
    write_file(&f.m("a.txt"), b"one\n", 0o644);
    f.turn("write big");
    let big: Vec<u8> = (0..9u32 << 20).map(|i| (i % 251) as u8).collect();
    write_file(&f.m("big.bin"), &big, 0o644);
    f.turn("edit a");
    write_file(&f.m("a.txt"), b"one\ntwo\n", 0o644);
    f.turn("idle");
    let ns = namespace(&f, "alpha");
    assert!(
        wait_for(PUSH_WAIT, || ls_remote(&d.url())
            .contains_key(&format!("{ns}/turns/3"))),
        "turn 3 never reached the remote: {:?}\nstatus: {:#}",
        ls_remote(&d.url()),
        f.status()
    );
    let refs = ls_remote(&d.url());
    for r in ["head", "baseline", "project", "turns/1", "turns/2"] {
        assert!(
            refs.contains_key(&format!("{ns}/{r}")),
            "{ns}/{r} missing: {refs:?}"
        );
    }
    assert!(
        refs.keys().all(|r| r.starts_with(&format!("{ns}/"))),
        "refs outside the namespace: {refs:?}"
    );
    let st = push_status(&f, &d.url());
    assert_eq!(st["last_turn"], 3, "{st:#}");
    assert!(st["failure"].is_null(), "{st:#}");

    // Stock git reads it elsewhere.
    let elsewhere = tempfile::tempdir().expect("temp");
    git_at(elsewhere.path(), &["init", "-q", "--bare", "."]);
    git_at(
        elsewhere.path(),
        &["fetch", "-q", &d.url(), "refs/opfs/*:refs/opfs/*"],
    );
    let log = git_at(
        elsewhere.path(),
        &["log", "--format=%s", &format!("{ns}/head")],
    );
    let subjects: Vec<&str> = log.lines().collect();
    assert_eq!(subjects.len(), 4, "three turns and the baseline: {log}");
    assert_eq!(
        subjects[..3],
        ["Turn 3: edit a", "Turn 2: write big", "Turn 1: write a"],
        "git log of the pushed head"
    );
    let changed = git_at(
        elsewhere.path(),
        &[
            "diff",
            "--name-only",
            &format!("{ns}/turns/1"),
            &format!("{ns}/turns/2"),
        ],
    );
    assert_eq!(changed.trim(), "big.bin");
    let pointer = git_at(
        elsewhere.path(),
        &["show", &format!("{ns}/turns/2:big.bin")],
    );
    assert!(pointer.starts_with("opfs-pointer v1\n"), "{pointer}");
    let a = git_at(elsewhere.path(), &["show", &format!("{ns}/turns/3:a.txt")]);
    assert_eq!(a, "one\ntwo\n");

    // Nothing of it in the user's repository.
    f.umount();
    assert_manifest_eq("the project's .git", &git_before, &manifest(&f.p(".git")));
    let remotes = git_at(&f.project, &["remote"]);
    assert_eq!(remotes.trim(), "origin");
}

#[test]
fn an_unreachable_remote_is_shown_by_status_and_retried_until_it_answers() {
    let port = free_port();
    let url = url_on(port);
    let f = Fixture::new();
    configure(&f, &url, "alpha", true);
    f.mount();
    write_file(&f.m("a.txt"), b"one\n", 0o644);
    // The turn does not wait for the push, nor fail with it.
    f.turn("one");
    assert!(
        wait_for(PUSH_WAIT, || push_status(&f, &url)["failure"]["attempts"]
            .as_u64()
            .is_some_and(|n| n >= 2)),
        "the failed push was not tried again: {:#}",
        f.status()
    );
    let st = push_status(&f, &url);
    assert_eq!(st["failure"]["kind"], "unreachable", "{st:#}");
    let msg = st["failure"]["message"].as_str().unwrap_or("");
    assert!(msg.contains(&url), "the error names the remote: {msg}");
    let warnings = f.status()["warnings"].to_string();
    assert!(
        warnings.contains(&format!("pushes to {url} fail")),
        "{warnings}"
    );
    // The remote comes up: the next retry pushes, nothing was lost.
    let Some(d) = GitDaemon::start_on(port) else {
        return;
    };
    let ns = namespace(&f, "alpha");
    assert!(
        wait_for(PUSH_WAIT, || push_status(&f, &url)["failure"].is_null()),
        "the retry never succeeded: {:#}",
        f.status()
    );
    assert_eq!(push_status(&f, &url)["last_turn"], 1);
    assert!(ls_remote(&d.url()).contains_key(&format!("{ns}/turns/1")));
}

#[test]
fn a_clash_in_the_namespace_is_refused_named_and_nothing_is_lost() {
    let Some(d) = GitDaemon::start() else { return };
    let f = Fixture::new();
    configure(&f, &d.url(), "alpha", false);
    f.mount();
    write_file(&f.m("a.txt"), b"one\n", 0o644);
    f.turn("one");
    f.opfs_c(&["push"]).ok();
    let ns = namespace(&f, "alpha");
    // Another machine of the same name pushes a project at the same path.
    let other = tempfile::tempdir().expect("temp");
    git_at(other.path(), &["init", "-q"]);
    write_file(&other.path().join("x"), b"theirs\n", 0o644);
    git_at(other.path(), &["add", "x"]);
    git_at(other.path(), &["commit", "-q", "-m", "theirs"]);
    git_at(
        other.path(),
        &[
            "push",
            "-q",
            "--force",
            &d.url(),
            &format!("HEAD:{ns}/head"),
        ],
    );
    let theirs = ls_remote(&d.url())[&format!("{ns}/head")].clone();
    write_file(&f.m("a.txt"), b"two\n", 0o644);
    f.turn("two");
    let run = f.opfs_c(&["push"]);
    assert_eq!(run.code, Some(1), "{run}");
    for part in [d.url(), format!("{ns}/head"), "[push] machine".to_string()] {
        assert!(run.stderr.contains(&part), "the error names {part}: {run}");
    }
    // Refused as a whole: theirs is still there, nothing of ours moved.
    let refs = ls_remote(&d.url());
    assert_eq!(refs[&format!("{ns}/head")], theirs);
    assert!(!refs.contains_key(&format!("{ns}/turns/2")), "{refs:?}");
    assert_eq!(push_status(&f, &d.url())["failure"]["kind"], "clash");
    // Nothing lost locally; once the stale copy is gone, the push goes through.
    let log = f.opfs_c(&["log", "--json"]).ok().json();
    assert_eq!(log.as_array().map(Vec::len), Some(3), "{log:#}");
    // The command the error gives for that, run as printed from a
    // directory that is no git repository.
    let command = run
        .stderr
        .split("delete all of ")
        .nth(1)
        .and_then(|t| t.split_once(" there: "))
        .and_then(|(_, t)| t.split_once("; nothing was lost"))
        .map(|(c, _)| c.to_string())
        .unwrap_or_else(|| panic!("no delete command in: {run}"));
    let out = Command::new("sh")
        .arg("-c")
        .arg(&command)
        .current_dir(other.path().parent().expect("parent"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("sh");
    assert!(out.status.success(), "{command}: {out:?}");
    assert!(
        ls_remote(&d.url()).keys().all(|r| !r.starts_with(&ns)),
        "{command}"
    );
    f.opfs_c(&["push"]).ok();
    let refs = ls_remote(&d.url());
    assert!(refs.contains_key(&format!("{ns}/turns/2")), "{refs:?}");
    assert!(push_status(&f, &d.url())["failure"].is_null());
}

#[test]
fn after_a_clash_with_a_fresh_home_is_fixed_as_said_every_ref_is_pushed_again() {
    let Some(d) = GitDaemon::start() else { return };
    let mut f = Fixture::new();
    configure(&f, &d.url(), "mf", false);
    f.mount();
    write_file(&f.m("f.txt"), b"f\n", 0o644);
    f.turn("f");
    f.opfs_c(&["push"]).ok();
    f.umount();
    let ns = namespace(&f, "mf");
    // The same project, same machine name, with a fresh state dir.
    let fresh = f.root().join("home2");
    std::fs::create_dir(&fresh).expect("mkdir");
    f.home = fresh.clone();
    f.pinned.opfs_home = fresh;
    f.mount();
    write_file(&f.m("g.txt"), b"g\n", 0o644);
    f.turn("g");
    let run = f.opfs_c(&["push"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert_eq!(push_status(&f, &d.url())["failure"]["kind"], "clash");
    // The fix the message gives, run as printed.
    let command = run
        .stderr
        .split("delete all of ")
        .nth(1)
        .and_then(|t| t.split_once(" there: "))
        .and_then(|(_, t)| t.split_once("; nothing was lost"))
        .map(|(c, _)| c.to_string())
        .unwrap_or_else(|| panic!("no delete command in: {run}"));
    let out = Command::new("sh")
        .arg("-c")
        .arg(&command)
        .current_dir(f.root())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("sh");
    assert!(out.status.success(), "{command}: {out:?}");
    assert!(
        ls_remote(&d.url()).keys().all(|r| !r.starts_with(&ns)),
        "{command}"
    );
    f.opfs_c(&["push"]).ok();
    let refs = ls_remote(&d.url());
    for r in ["project", "head", "baseline", "turns/1"] {
        assert!(refs.contains_key(&format!("{ns}/{r}")), "{r}: {refs:?}");
    }
    let list = f.opfs(&["remote", "list", &d.url()]).ok();
    assert!(
        list.stdout.contains(&f.project.display().to_string()),
        "{list}"
    );
}

#[test]
fn a_pusher_killed_after_the_remote_took_its_push_is_resumed_after_a_rewrite() {
    let Some(d) = GitDaemon::start() else { return };
    let f = Fixture::new();
    configure(&f, &d.url(), "alpha", false);
    f.mount();
    write_file(&f.m("a.txt"), b"one\n", 0o644);
    f.turn("one");
    f.opfs_c(&["push"]).ok();
    write_file(&f.m("a.txt"), b"two\n", 0o644);
    f.turn("two");
    // Killed right after git's push: the remote holds turn 2, push.json
    // still says turn 1.
    let mnt = f.mnt.display().to_string();
    let out = f
        .opfs_command(&["-C", &mnt, "push"])
        .env("OPFS_FAILPOINT", "push-after-git:1")
        .output()
        .expect("run opfs push");
    assert_eq!(
        out.status.code(),
        None,
        "the failpoint did not kill the push"
    );
    let ns = namespace(&f, "alpha");
    let before = ls_remote(&d.url());
    assert!(before.contains_key(&format!("{ns}/turns/2")), "{before:?}");
    // Then the history is rewritten (a relabel writes turn 2's commit
    // again) before the next push, which must not take the remote's copy
    // of its own earlier commit for a clash.
    f.opfs_c(&["label", "2", "renamed"]).ok();
    let run = f.opfs_c(&["push", "--json"]).ok();
    assert_eq!(run.json()["last_turn"], 2, "{run}");
    let export = f.state_dir().join("export.git");
    let local = String::from_utf8_lossy(&git_in_ok(&export, &["rev-parse", "refs/heads/opfs"]))
        .trim()
        .to_string();
    let after = ls_remote(&d.url());
    assert_ne!(after[&format!("{ns}/head")], before[&format!("{ns}/head")]);
    assert_eq!(after[&format!("{ns}/head")], local);
    assert!(push_status(&f, &d.url())["failure"].is_null());
}

/// The files and symlinks of `m` (directories' modes follow the umask in
/// a checkout; git keeps no directories).
fn files_only(m: Manifest) -> Manifest {
    m.into_iter()
        .filter(|(_, e)| !matches!(e, Entry::Dir { .. }))
        .collect()
}

#[test]
fn two_machines_push_to_one_remote_and_a_third_lists_and_materialises_every_turn() {
    let Some(d) = GitDaemon::start() else { return };
    let url = d.url();
    // Machine "alpha": three turns, one of them a symlink, one a
    // non-UTF-8 name and an executable.
    let a = Fixture::new();
    configure(&a, &url, "alpha", false);
    a.mount();
    let mut at_end = Vec::new();
    write_file(&a.m("src/main.rs"), b"fn main() {}\n", 0o644);
    a.turn("t");
    at_end.push(files_only(manifest(&a.project)));
    std::os::unix::fs::symlink("src/main.rs", a.m("link")).expect("symlink");
    write_file(&a.m(bytes_path(b"caf\xe9.sh")), b"#!/bin/sh\n", 0o755);
    a.turn("t");
    at_end.push(files_only(manifest(&a.project)));
    std::fs::remove_file(a.m("src/main.rs")).expect("rm");
    write_file(&a.m("notes.txt"), b"gone\n", 0o644);
    a.turn("t");
    at_end.push(files_only(manifest(&a.project)));
    a.opfs_c(&["push"]).ok();
    // Machine "beta": another project, one turn.
    let b = Fixture::new();
    configure(&b, &url, "beta", false);
    b.mount();
    write_file(&b.m("b.txt"), b"beta\n", 0o644);
    b.turn("t");
    b.opfs_c(&["push"]).ok();

    // A third machine, with nothing of either: lists both.
    let c = Fixture::new();
    let list = c.opfs(&["--json", "remote", "list", &url]).ok().json();
    let names: Vec<&str> = list
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let na = project_name(&a, "alpha");
    let nb = project_name(&b, "beta");
    assert!(
        names.contains(&na.as_str()) && names.contains(&nb.as_str()),
        "{list:#}"
    );
    let pa = list
        .as_array()
        .and_then(|l| l.iter().find(|p| p["name"] == na.as_str()))
        .expect("alpha's project");
    assert_eq!(pa["path"], a.project.display().to_string(), "{pa:#}");
    assert_eq!(pa["turns"], serde_json::json!([1, 2, 3]), "{pa:#}");
    let turns = c.opfs(&["--json", "remote", "list", &url, &na]).ok().json();
    assert_eq!(turns.as_array().map(Vec::len), Some(3), "{turns:#}");

    // Each turn, materialised, is the project at the end of that turn.
    for (i, expected) in at_end.iter().enumerate() {
        let dir = c.root().join(format!("turn{}", i + 1));
        let n = (i + 1).to_string();
        checkout_turn(&c, &url, &na, &n, &dir).ok();
        assert_manifest_eq(
            &format!("turn {n} materialised"),
            expected,
            &files_only(manifest(&dir)),
        );
    }
    // Bad input: a turn or project it does not hold, a non-empty directory.
    let run = c.opfs(&["remote", "checkout", &url, &na, "9", "/tmp/opfs-never"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("holds no turn 9"), "{run}");
    let run = c.opfs(&[
        "remote",
        "checkout",
        &url,
        "gamma/0000",
        "1",
        "/tmp/opfs-never",
    ]);
    assert!(run.stderr.contains("holds no project gamma/0000"), "{run}");
    let run = c.opfs(&[
        "remote",
        "checkout",
        &url,
        &na,
        "1",
        &c.root().join("turn1").display().to_string(),
    ]);
    assert!(run.stderr.contains("is not empty"), "{run}");
}

/// moto's S3 server (`pip install 'moto[server]'` into
/// `~/.cache/opfs-test-tools/moto`, which `scripts/setup` does) on
/// 127.0.0.1, with the bucket `ckpt`; killed on drop.
struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    fn start() -> Option<Moto> {
        let home = std::env::var_os("HOME").map(PathBuf::from)?;
        let venv = home.join(".cache/opfs-test-tools/moto/bin");
        if !venv.join("moto_server").exists() {
            eprintln!(
                "SKIP: moto's S3 server is not installed in {} (scripts/setup installs it)",
                venv.display()
            );
            return None;
        }
        let port = free_port();
        let child = Command::new(venv.join("moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start moto_server");
        let m = Moto { child, port };
        assert!(
            wait_for(Duration::from_secs(60), || TcpStream::connect((
                "127.0.0.1",
                m.port
            ))
            .is_ok()),
            "moto did not listen on 127.0.0.1:{port}"
        );
        let _ = m.boto3("s3.create_bucket(Bucket='ckpt')", "create the bucket");
        Some(m)
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Deletes every object of the bucket `ckpt` (as someone cleaning
    /// it by hand would).
    fn empty_bucket(&self) {
        let _ = self.boto3(
            "for o in s3.list_objects_v2(Bucket='ckpt').get('Contents', []):\n    s3.delete_object(Bucket='ckpt', Key=o['Key'])",
            "empty the bucket",
        );
    }

    /// Runs Python `code` with `s3`, a boto3 client of this server, in
    /// moto's venv; `what` names it in a failure. Its output.
    fn boto3(&self, code: &str, what: &str) -> String {
        let home = std::env::var_os("HOME").map(PathBuf::from).expect("HOME");
        let python = home.join(".cache/opfs-test-tools/moto/bin/python");
        let out = Command::new(python)
            .arg("-c")
            .arg(format!(
                "import boto3\ns3 = boto3.client('s3', endpoint_url='{}', aws_access_key_id='testing', aws_secret_access_key='testing', region_name='us-east-1')\n{code}",
                self.endpoint()
            ))
            .output()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        end_group(&mut self.child);
    }
}

/// [`configure`] plus the bucket `s3://ckpt/opfs` at `endpoint`, and
/// moto's credentials in the environment of every command of `f`.
fn configure_bucket(f: &Fixture, url: &str, machine: &str, endpoint: &str) {
    configure(f, url, machine, false);
    let mut text = std::fs::read_to_string(&f.pinned.config).expect("config");
    text = text.replace(
        "[push]\n",
        &format!("[push]\nbucket = \"s3://ckpt/opfs\"\nbucket_endpoint = {endpoint:?}\n"),
    );
    std::fs::write(&f.pinned.config, text).expect("write config");
    f.set_env("AWS_ACCESS_KEY_ID", "testing");
    f.set_env("AWS_SECRET_ACCESS_KEY", "testing");
}

/// `MACHINE/KEY`: the name `opfs remote` commands give `f`'s project
/// pushed as `machine`.
fn project_name(f: &Fixture, machine: &str) -> String {
    namespace(f, machine)
        .trim_start_matches("refs/opfs/")
        .to_string()
}

/// The first state home (machine "alpha"), its project pushing to `url`
/// by hand (`auto = false`) with big files to the bucket `s3://ckpt/opfs`
/// at `endpoint`; mounted.
fn first_home(url: &str, endpoint: &str) -> Fixture {
    let a = Fixture::new();
    configure_bucket(&a, url, "alpha", endpoint);
    a.mount();
    a
}

/// A second state home (machine "beta") that reads `url`'s bucket
/// `s3://ckpt/opfs` at `endpoint`: "another machine".
fn second_home(url: &str, endpoint: &str) -> Fixture {
    let b = Fixture::new();
    configure_bucket(&b, url, "beta", endpoint);
    b
}

/// `opfs remote checkout URL PROJECT TURN DIR` run by `f`.
fn checkout_turn(f: &Fixture, url: &str, project: &str, turn: &str, dir: &Path) -> Run {
    f.opfs(&[
        "remote",
        "checkout",
        url,
        project,
        turn,
        &dir.display().to_string(),
    ])
}

#[test]
fn big_files_go_to_the_bucket_and_a_second_home_materialises_each_turn_byte_for_byte() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = first_home(&url, &s3.endpoint());
    let mut at_end = Vec::new();
    let mut rng = Rng::new(31);
    let big = rng.bytes(9 << 20);
    write_file(&a.m("big.bin"), &big, 0o644);
    write_file(&a.m("small.txt"), b"one\n", 0o644);
    a.turn("t");
    at_end.push(files_only(manifest(&a.project)));
    // Written in place: its turn-1 bytes are kept as ranges, not a blob.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(a.m("big.bin"))
        .expect("open big");
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(4 << 20)).expect("seek");
    std::io::Write::write_all(&mut file, b"changed in place").expect("write");
    drop(file);
    let other = rng.bytes((8 << 20) + 5);
    write_file(&a.m("data/other.bin"), &other, 0o755);
    a.turn("t");
    at_end.push(files_only(manifest(&a.project)));
    std::fs::remove_file(a.m("big.bin")).expect("rm");
    a.turn("t");
    at_end.push(files_only(manifest(&a.project)));
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(
        r["objects_uploaded"], 3,
        "three versions of 8 MiB or more: {r:#}"
    );
    // Create-only and incremental: nothing more to upload.
    write_file(&a.m("small.txt"), b"two\n", 0o644);
    a.turn("t");
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["objects_uploaded"], 0, "{r:#}");
    // Emptied by hand: a push has nothing new to send, `--objects` puts
    // every pushed version's bytes back.
    s3.empty_bucket();
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["objects_uploaded"], 0, "{r:#}");
    let r = a.opfs_c(&["push", "--objects", "--json"]).ok().json();
    assert_eq!(r["objects_backfilled"], 3, "{r:#}");
    let r = a.opfs_c(&["push", "--objects", "--json"]).ok().json();
    assert_eq!(r["objects_backfilled"], 0, "{r:#}");

    // Another state home, which never saw the project.
    let b = second_home(&url, &s3.endpoint());
    let na = project_name(&a, "alpha");
    for (i, expected) in at_end.iter().enumerate() {
        let n = (i + 1).to_string();
        let dir = b.root().join(format!("turn{n}"));
        let run = b
            .opfs(&[
                "--json",
                "remote",
                "checkout",
                &url,
                &na,
                &n,
                &dir.display().to_string(),
            ])
            .ok();
        assert!(
            run.json()["pointers"].as_array().is_some_and(Vec::is_empty),
            "{run}"
        );
        assert_manifest_eq(
            &format!("turn {n} materialised from git and the bucket"),
            expected,
            &files_only(manifest(&dir)),
        );
    }
    // Without the bucket the pointers are written and said.
    let dir = b.root().join("nobucket");
    std::fs::write(&b.pinned.config, "").expect("config");
    let run = checkout_turn(&b, &url, &na, "1", &dir);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("written as pointer files"), "{run}");
}

#[test]
fn inside_opfs_run_neither_the_push_state_nor_the_credentials_are_visible() {
    let Some(d) = GitDaemon::start() else { return };
    if which("bwrap").is_none() {
        eprintln!("SKIP: bwrap is not installed (scripts/setup installs it)");
        return;
    }
    let f = Fixture::new();
    configure(&f, &d.url(), "alpha", false);
    f.set_env("AWS_SECRET_ACCESS_KEY", "aws-secret");
    let home = &f.pinned.home;
    write_file(
        &home.join(".git-credentials"),
        b"https://u:git-secret@host\n",
        0o600,
    );
    write_file(
        &home.join(".aws/credentials"),
        b"[default]\naws_secret_access_key = aws-file-secret\n",
        0o600,
    );
    f.mount();
    write_file(&f.m("a.txt"), b"one\n", 0o644);
    f.turn("one");
    f.opfs_c(&["push"]).ok();
    let push_json = f.state_dir().join("push.json");
    assert!(push_json.exists());
    let script = format!(
        "cat {} ~/.git-credentials ~/.aws/credentials 2>/dev/null; echo \"env=$AWS_SECRET_ACCESS_KEY\"",
        push_json.display()
    );
    let project = f.project.display().to_string();
    let run = f.opfs(&["-C", &project, "run", "--", "sh", "-c", &script]);
    assert_eq!(run.code, Some(0), "{run}");
    for secret in ["git-secret", "aws-file-secret", "aws-secret", "refs/opfs"] {
        assert!(
            !run.stdout.contains(secret),
            "{secret} visible inside opfs run: {run}"
        );
    }
    assert!(
        run.stdout.contains("env=\n") || run.stdout.trim_end().ends_with("env="),
        "{run}"
    );
}

#[test]
fn an_unreachable_bucket_fails_the_push_before_any_ref_and_names_the_bucket() {
    let Some(d) = GitDaemon::start() else { return };
    let f = Fixture::new();
    let nothing = format!("http://127.0.0.1:{}", free_port());
    configure_bucket(&f, &d.url(), "alpha", &nothing);
    f.mount();
    write_file(&f.m("big.bin"), &Rng::new(7).bytes(8 << 20), 0o644);
    f.turn("big");
    let run = f.opfs_c(&["push"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains("bucket s3://ckpt/opfs"),
        "the error names the bucket: {run}"
    );
    // No pointer reached the remote without its bytes.
    assert!(ls_remote(&d.url()).is_empty(), "{:?}", ls_remote(&d.url()));
    assert_eq!(push_status(&f, &d.url())["failure"]["kind"], "bucket");
}

#[test]
fn worktree_branches_go_with_the_projects_push_and_leave_after_their_discard() {
    let Some(d) = GitDaemon::start() else { return };
    let f = Fixture::new();
    configure(&f, &d.url(), "alpha", false);
    write_file(&f.p("a.txt"), b"a\n", 0o644);
    f.mount();
    write_file(&f.m("b.txt"), b"b\n", 0o644);
    f.turn("t");
    let ns = namespace(&f, "alpha");
    let run = f.opfs_p(&["worktree", "create", "exp"]).ok();
    let w = PathBuf::from(run.stdout.trim_end());
    assert!(wait_mount_state(&w, true, MOUNT_TIMEOUT), "{run}");
    write_file(&w.join("a.txt"), b"tried\n", 0o644);
    let wp = w.display().to_string();
    f.opfs(&["-C", &wp, "turn", "--label", "next"]).ok();
    f.opfs_c(&["push"]).ok();
    let branch = format!("{ns}/worktrees/exp");
    let refs = ls_remote(&d.url());
    assert!(refs.contains_key(&branch), "{refs:?}");
    // The branch's tree is the worktree's view.
    let elsewhere = tempfile::tempdir().expect("temp");
    git_at(elsewhere.path(), &["init", "-q", "--bare", "."]);
    git_at(
        elsewhere.path(),
        &["fetch", "-q", &d.url(), &format!("{branch}:{branch}")],
    );
    assert_eq!(
        git_at(elsewhere.path(), &["show", &format!("{branch}:a.txt")]),
        "tried\n"
    );
    // Discarded: the next push deletes it from the remote.
    f.opfs_p(&["worktree", "discard", "exp"]).ok();
    let r = f.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["deleted"], 1, "{r:#}");
    assert!(!ls_remote(&d.url()).contains_key(&branch));
}

/// Builds, in the bare repository argv[1], projects as a hostile pusher
/// could: `evil/0000000000000001` turn 1 holds a symlink `d` to argv[2]
/// and a file `d/pwned.txt` (two entries of one name, which git's own
/// commands never write but a pusher can); `evil/0000000000000002` turn 1
/// holds a `.git` directory whose config would run a command, and its
/// `project` commit a terminal escape; `evil/0000000000000003` lists turn
/// 7 also as `turns/007`.
const HOSTILE: &str = r#"
import subprocess, sys
G, victim = sys.argv[1], sys.argv[2]
def obj(t, data):
    return subprocess.run(['git', '--git-dir', G, 'hash-object', '-w', '--literally', '-t', t, '--stdin'],
                          input=data, capture_output=True, check=True).stdout.decode().strip()
def tree(entries):
    return obj('tree', b''.join(m.encode() + b' ' + n + b'\0' + bytes.fromhex(s) for m, n, s in entries))
def commit(t, msg):
    return obj('commit', ('tree %s\nauthor a <a@b> 1700000000 +0000\ncommitter a <a@b> 1700000000 +0000\n\n%s\n' % (t, msg)).encode())
def ref(name, sha):
    subprocess.run(['git', '--git-dir', G, 'update-ref', name, sha], check=True)
ns = 'refs/opfs/evil/'
empty = tree([])
inner = tree([('100644', b'pwned.txt', obj('blob', b'through the link\n'))])
t1 = tree([('100644', b'a.txt', obj('blob', b'ok\n')), ('120000', b'd', obj('blob', victim.encode())), ('40000', b'd', inner)])
ref(ns + '0000000000000001/turns/1', commit(t1, 'turn 1'))
ref(ns + '0000000000000001/project', commit(empty, 'p\n\nopfs-project: /one'))
cfg = b'[core]\n\tfsmonitor = "touch ' + victim.encode() + b'/RAN; false"\n'
dotgit = tree([('100644', b'HEAD', obj('blob', b'ref: refs/heads/main\n')), ('100644', b'config', obj('blob', cfg))])
t2 = tree([('40000', b'.GIT', dotgit), ('100644', b'readme', obj('blob', b'hi\n'))])
ref(ns + '0000000000000002/turns/1', commit(t2, 'turn 1'))
ref(ns + '0000000000000002/project', commit(empty, 'p\n\nopfs-project: /two\x1b]0;TITLE\x07'))
t3 = tree([('100644', b'a.txt', obj('blob', b'ok\n'))])
c3 = commit(t3, 'turn 7')
ref(ns + '0000000000000003/turns/7', c3)
ref(ns + '0000000000000003/turns/007', c3)
ref(ns + '0000000000000003/project', commit(empty, 'p\n\nopfs-project: /three'))
"#;

#[test]
fn a_hostile_remote_writes_nothing_outside_the_directory_and_no_git_dir() {
    let f = Fixture::new();
    let remote = f.root().join("hostile.git");
    let victim = f.root().join("victim");
    std::fs::create_dir(&victim).expect("victim");
    git_at(f.root(), &["init", "-q", "--bare", "hostile.git"]);
    let script = f.root().join("hostile.py");
    std::fs::write(&script, HOSTILE).expect("script");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&remote)
        .arg(&victim)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = remote.display().to_string();

    // Listing: the escape is not printed, turn 7 is listed once.
    let list = f.opfs(&["remote", "list", &url]).ok();
    assert!(!list.stdout.contains('\u{1b}'), "{list}");
    let turns = f
        .opfs(&["--json", "remote", "list", &url, "evil/0000000000000003"])
        .ok()
        .json();
    assert_eq!(turns.as_array().map(Vec::len), Some(1), "{turns}");

    // Turn 1 of `project` checked out into `<root>/<dir>`.
    let checkout = |project: &str, dir: &str| {
        let dir = f.root().join(dir);
        let run = f.opfs(&[
            "remote",
            "checkout",
            &url,
            project,
            "1",
            &dir.display().to_string(),
        ]);
        (dir, run)
    };

    // A symlink and a file below a directory of the same name: refused
    // before anything is written, nothing reaches the link's target.
    let (dir, run) = checkout("evil/0000000000000001", "co1");
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("is not a name opfs writes"), "{run}");
    assert!(std::fs::read_dir(&victim).expect("victim").next().is_none());
    assert!(!dir.exists() || std::fs::read_dir(&dir).expect("dir").next().is_none());

    // A `.git` (any case) is refused: nothing is written, nothing runs.
    let (dir, run) = checkout("evil/0000000000000002", "co2");
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains(".GIT"), "{run}");
    assert!(!dir.join(".GIT").exists() && !dir.join("readme").exists());

    // A remote that git would read as an option runs nothing.
    let marker = f.root().join("INJECTED");
    let evil = format!("--upload-pack=touch {}; false", marker.display());
    let run = f.opfs(&["remote", "list", "--", &evil]);
    assert_ne!(run.code, Some(0), "{run}");
    assert!(run.stderr.contains("starts with '-'"), "{run}");
    assert!(!marker.exists(), "the option ran: {run}");
}

/// A remote whose turn 1 of `odd/0000000000000001` holds `a.txt`, a
/// gitlink `sub` (160000) and an entry `sock` of mode 140000 (a socket's
/// mode, which git reads as a gitlink). Run with the bare repository.
const ODD_MODES: &str = r#"
import subprocess, sys
G = sys.argv[1]
def obj(t, data):
    return subprocess.run(['git', '--git-dir', G, 'hash-object', '-w', '--literally', '-t', t, '--stdin'],
                          input=data, capture_output=True, check=True).stdout.decode().strip()
def tree(entries):
    return obj('tree', b''.join(m.encode() + b' ' + n + b'\0' + bytes.fromhex(s) for m, n, s in entries))
def commit(t, msg):
    return obj('commit', ('tree %s\nauthor a <a@b> 1700000000 +0000\ncommitter a <a@b> 1700000000 +0000\n\n%s\n' % (t, msg)).encode())
def ref(name, sha):
    subprocess.run(['git', '--git-dir', G, 'update-ref', name, sha], check=True)
blob = obj('blob', b'ok\n')
t = tree([('100644', b'a.txt', blob), ('140000', b'sock', blob), ('160000', b'sub', blob)])
ref('refs/opfs/odd/0000000000000001/turns/1', commit(t, 'turn 1'))
ref('refs/opfs/odd/0000000000000001/project', commit(tree([]), 'p\n\nopfs-project: /odd'))
"#;

#[test]
fn tree_entries_of_unknown_modes_are_reported_not_dropped() {
    let f = Fixture::new();
    let remote = f.root().join("odd.git");
    git_at(f.root(), &["init", "-q", "--bare", "odd.git"]);
    let script = f.root().join("odd.py");
    std::fs::write(&script, ODD_MODES).expect("script");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&remote)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = remote.display().to_string();
    let checkout = |dir: &Path, json: bool| {
        let dir = dir.display().to_string();
        let mut args = vec![
            "remote",
            "checkout",
            &url,
            "odd/0000000000000001",
            "1",
            &dir,
        ];
        if json {
            args.insert(0, "--json");
        }
        f.opfs(&args)
    };
    // The rest of the tree is written; both entries are named; exit 1.
    let dir = f.root().join("co");
    let run = checkout(&dir, false);
    assert_eq!(run.code, Some(1), "{run}");
    for part in [
        "2 entries of the tree were not written",
        "mode 160000",
        "sock",
    ] {
        assert!(run.stderr.contains(part), "{part:?} not said: {run}");
    }
    assert_eq!(std::fs::read(dir.join("a.txt")).expect("a.txt"), b"ok\n");
    assert!(!dir.join("sock").exists() && !dir.join("sub").exists());
    let dir = f.root().join("co-json");
    let run = checkout(&dir, true);
    assert_eq!(run.code, Some(1), "{run}");
    // One JSON value: the report, carrying the error.
    let r: serde_json::Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run}"));
    assert_eq!(r["error"]["code"], 1, "{r:#}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("2 entries of the tree were not written")),
        "{r:#}"
    );
    let skipped: Vec<(String, String)> = r["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap_or_default().to_string(),
                e["mode"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        skipped,
        [
            ("sock".to_string(), "160000".to_string()),
            ("sub".to_string(), "160000".to_string())
        ],
        "{r:#}"
    );
    assert_eq!(r["files"], 1, "{r:#}");
}

#[test]
fn a_remote_url_with_a_password_is_refused_and_never_shown() {
    let f = Fixture::new();
    write_file(&f.p("a.txt"), b"a\n", 0o644);
    let url = "https://alice:s3cretPW@127.0.0.1:1/x.git";
    f.mount();
    let run = f.opfs_c(&["push", url]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("holds a password"), "{run}");
    assert!(!run.stderr.contains("s3cretPW"), "{run}");
    f.umount();
    // Configured: the mount says so, and nothing keeps the password.
    configure(&f, url, "m", true);
    let run = f.try_mount(&[], &[]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(
        run.stderr.contains(".push] remote") && !run.stderr.contains("s3cretPW"),
        "{run}"
    );
    let leaked: Vec<_> = walk_tree(&f.pinned.opfs_home, &[])
        .unwrap_or_default()
        .into_iter()
        .filter(|e| std::fs::read(&e.path).is_ok_and(|b| b.windows(8).any(|w| w == b"s3cretPW")))
        .map(|e| e.path)
        .collect();
    assert!(leaked.is_empty(), "{leaked:?}");
}

#[test]
fn a_one_off_push_that_failed_is_said_to_be_retried_by_nobody() {
    let f = Fixture::new();
    write_file(&f.p("a.txt"), b"a\n", 0o644);
    f.mount();
    f.turn("t");
    let url = url_on(free_port());
    let run = f.opfs_c(&["push", &url]);
    assert_eq!(run.code, Some(1), "{run}");
    let text = f.opfs_c(&["status"]).ok().stdout;
    let warning = text
        .lines()
        .find(|l| l.contains(&format!("pushes to {url} fail")))
        .unwrap_or_else(|| panic!("no warning: {text}"));
    assert!(warning.contains("nothing tries it again"), "{warning}");
}

/// A git command on `git_dir` (no user configuration); its trimmed stdout.
fn git_dir_at(git_dir: &Path, args: &[&str]) -> String {
    String::from_utf8_lossy(&git_in_ok(git_dir, args))
        .trim()
        .to_string()
}

#[test]
fn a_worktrees_big_files_reach_the_bucket_and_its_branch_is_materialised_elsewhere() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = Fixture::new();
    configure_bucket(&a, &url, "alpha", &s3.endpoint());
    write_file(&a.p("a.txt"), b"a\n", 0o644);
    a.mount();
    write_file(&a.m("b.txt"), b"b\n", 0o644);
    a.turn("t");
    // Before the worktree has a state dir of its own.
    let export = a.state_dir().join("export.git");
    let na = project_name(&a, "alpha");
    let run = a.opfs_p(&["worktree", "create", "exp"]).ok();
    let w = PathBuf::from(run.stdout.trim_end());
    assert!(wait_mount_state(&w, true, MOUNT_TIMEOUT), "{run}");
    let wp = w.display().to_string();
    let mut rng = Rng::new(29);
    // Worktree turn 1: a 9 MiB file, which lives in the worktree's store
    // and upper layer only, never in the project's.
    write_file(&w.join("big.bin"), &rng.bytes(9 << 20), 0o644);
    a.opfs(&["-C", &wp, "turn", "--label", "one"]).ok();
    let first = files_only(manifest(&w));
    // Worktree turn 2: rewritten whole (turn 1's bytes are now a
    // pre-image of the worktree's history) and a second big file.
    write_file(&w.join("big.bin"), &rng.bytes(9 << 20), 0o644);
    write_file(&w.join("d/other.bin"), &rng.bytes((8 << 20) + 3), 0o755);
    a.opfs(&["-C", &wp, "turn", "--label", "two"]).ok();
    let second = files_only(manifest(&w));
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(
        r["objects_uploaded"], 3,
        "the worktree's three big versions: {r:#}"
    );
    let turn1 = git_dir_at(&export, &["rev-parse", "refs/opfs/worktrees/exp~1"]);

    let b = second_home(&url, &s3.endpoint());
    for (what, turn, expected) in [
        ("its newest turn", "worktrees/exp", &second),
        ("its turn 1, by commit id", turn1.as_str(), &first),
    ] {
        let dir = b.root().join(format!("w{}", expected.len()));
        let run = b
            .opfs(&[
                "--json",
                "remote",
                "checkout",
                &url,
                &na,
                turn,
                &dir.display().to_string(),
            ])
            .ok();
        assert!(
            run.json()["pointers"].as_array().is_some_and(Vec::is_empty),
            "{what}: {run}"
        );
        assert_manifest_eq(
            &format!("worktree exp, {what}, from git and the bucket"),
            expected,
            &files_only(manifest(&dir)),
        );
    }
    // Emptied by hand: `--objects` puts the branch's bytes back too.
    s3.empty_bucket();
    let r = a.opfs_c(&["push", "--objects", "--json"]).ok().json();
    assert_eq!(r["objects_backfilled"], 3, "{r:#}");
}

#[test]
fn a_worktrees_turn_reaches_the_remote_through_its_own_daemon() {
    let Some(d) = GitDaemon::start() else { return };
    let f = Fixture::new();
    configure(&f, &d.url(), "alpha", true);
    write_file(&f.p("a.txt"), b"a\n", 0o644);
    f.mount();
    write_file(&f.m("b.txt"), b"b\n", 0o644);
    f.turn("t");
    let ns = namespace(&f, "alpha");
    let export = f.state_dir().join("export.git");
    // The project's own push of turn 1 is over before the worktree starts:
    // nothing of the project's pusher is left to carry the branch.
    assert!(
        wait_for(PUSH_WAIT, || ls_remote(&d.url())
            .contains_key(&format!("{ns}/turns/1"))),
        "turn 1 never reached the remote: {:#}",
        f.status()
    );
    let run = f.opfs_p(&["worktree", "create", "exp"]).ok();
    let w = PathBuf::from(run.stdout.trim_end());
    assert!(wait_mount_state(&w, true, MOUNT_TIMEOUT), "{run}");
    write_file(&w.join("a.txt"), b"tried\n", 0o644);
    let wp = w.display().to_string();
    f.opfs(&["-C", &wp, "turn", "--label", "next"]).ok();
    // No project turn, no `opfs push`: the worktree's daemon pushes.
    let branch = format!("{ns}/worktrees/exp");
    let exported = || {
        Command::new("git")
            .arg("--git-dir")
            .arg(&export)
            .args(["rev-parse", "-q", "--verify", "refs/opfs/worktrees/exp"])
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|id| !id.is_empty())
    };
    assert!(
        wait_for(PUSH_WAIT, || exported().is_some_and(|id| ls_remote(
            &d.url()
        )
        .get(&branch)
            == Some(&id))),
        "the worktree's branch never reached the remote: {:?}\nstatus: {:#}",
        ls_remote(&d.url()),
        f.status()
    );
    // The project's status shows the push.
    let st = push_status(&f, &d.url());
    assert!(st["failure"].is_null(), "{st:#}");
    let elsewhere = tempfile::tempdir().expect("temp");
    git_at(elsewhere.path(), &["init", "-q", "--bare", "."]);
    git_at(
        elsewhere.path(),
        &["fetch", "-q", &d.url(), &format!("{branch}:{branch}")],
    );
    assert_eq!(
        git_at(elsewhere.path(), &["show", &format!("{branch}:a.txt")]),
        "tried\n"
    );
}

#[test]
fn remote_commands_racing_on_a_fresh_local_copy_all_succeed() {
    let f = Fixture::new();
    // Five remotes, each new to this home: six commands race to make
    // its local copy.
    for round in 0..5 {
        let repo = f.root().join(format!("r{round}.git"));
        git_at(
            f.root(),
            &["init", "-q", "--bare", &repo.display().to_string()],
        );
        let url = repo.display().to_string();
        let children: Vec<_> = (0..6)
            .map(|_| {
                f.opfs_command(&["remote", "list", &url])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("start opfs remote list")
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().expect("wait");
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(String::from_utf8_lossy(&out.stdout).contains("holds no opfs history"));
        }
    }
}

/// A mounted project with one turn pushed to a local bare repository
/// (`ckpt.git` in the fixture's root); the fixture, the repository and
/// the project's name on it (`MACHINE/KEY`).
fn pushed_to_a_path() -> (Fixture, PathBuf, String) {
    let f = Fixture::new();
    let repo = f.root().join("ckpt.git");
    git_at(f.root(), &["init", "-q", "--bare", "ckpt.git"]);
    configure(&f, &repo.display().to_string(), "alpha", false);
    write_file(&f.p("a.txt"), b"a\n", 0o644);
    f.mount();
    write_file(&f.m("b.txt"), b"b\n", 0o644);
    f.turn("t");
    let ns = project_name(&f, "alpha");
    f.opfs_c(&["push"]).ok();
    (f, repo, ns)
}

#[test]
fn one_repository_as_a_path_and_as_a_file_url_is_one_remote() {
    let (f, repo, _) = pushed_to_a_path();
    let r = f
        .opfs_c(&["push", "--json", &format!("file://{}", repo.display())])
        .ok()
        .json();
    assert_eq!(r["up_to_date"], true, "{r:#}");
    let pushes = f.status()["push"].as_array().cloned().unwrap_or_default();
    assert_eq!(pushes.len(), 1, "{pushes:?}");
}

#[test]
fn a_checkout_into_a_symlink_to_nothing_names_the_link_and_the_fix() {
    let (f, repo, ns) = pushed_to_a_path();
    let link = f.root().join("out");
    let nowhere = f.root().join("nowhere");
    std::os::unix::fs::symlink(&nowhere, &link).expect("symlink");
    let run = f.opfs(&[
        "remote",
        "checkout",
        &repo.display().to_string(),
        &ns,
        "1",
        &link.display().to_string(),
    ]);
    assert_eq!(run.code, Some(1), "{run}");
    for part in [
        link.display().to_string(),
        nowhere.display().to_string(),
        "symbolic link".into(),
        "does not exist".into(),
    ] {
        assert!(run.stderr.contains(&part), "{part:?} not said: {run}");
    }
    assert!(!nowhere.exists());
}

#[test]
fn an_empty_machine_name_is_refused_naming_the_file_and_the_key() {
    let (f, _, _) = pushed_to_a_path();
    let config = f.pinned.config.display().to_string();
    edit_config(&f, "machine = \"alpha\"", "machine = \"\"");
    let run = f.opfs_c(&["push"]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains(&config), "{run}");
    assert!(run.stderr.contains("[push] machine is empty"), "{run}");
}

#[test]
fn a_bucket_that_is_no_s3_url_is_refused_at_push_and_at_mount() {
    let (f, _, _) = pushed_to_a_path();
    let config = f.pinned.config.display().to_string();
    edit_config(&f, "[push]\n", "[push]\nbucket = \"ckpt/opfs\"\n");
    // Nothing new to push, no big file: refused all the same.
    let run = f.opfs_c(&["push"]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains(&config), "{run}");
    assert!(run.stderr.contains("[push] bucket"), "{run}");
    assert!(run.stderr.contains("s3://BUCKET"), "{run}");
    f.umount();
    let run = f.try_mount(&[], &[]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("[push] bucket"), "{run}");
}

#[test]
fn a_big_files_object_gone_from_the_bucket_is_named_with_its_key_and_the_fix() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = first_home(&url, &s3.endpoint());
    let big = Rng::new(41).bytes(8 << 20);
    write_file(&a.m("big.bin"), &big, 0o644);
    a.turn("t");
    let na = project_name(&a, "alpha");
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["objects_uploaded"], 1, "{r:#}");
    // Expired by a lifecycle rule, or deleted by hand: opfs never does.
    s3.empty_bucket();
    let b = second_home(&url, &s3.endpoint());
    let dir = b.root().join("turn1");
    let run = checkout_turn(&b, &url, &na, "1", &dir);
    assert_eq!(run.code, Some(1), "{run}");
    let hash = blake3::hash(&big).to_hex().to_string();
    let key = format!("opfs/blake3/{}/{hash}", &hash[..2]);
    for part in [
        key.as_str(),
        "s3://ckpt/opfs",
        "big.bin",
        "opfs push --objects",
        "\"alpha\"",
    ] {
        assert!(run.stderr.contains(part), "{part:?} not said: {run}");
    }
    // The fix the message gives works.
    let r = a.opfs_c(&["push", "--objects", "--json"]).ok().json();
    assert_eq!(r["objects_backfilled"], 1, "{r:#}");
    std::fs::remove_dir_all(&dir).expect("rm");
    let run = b
        .opfs(&[
            "remote",
            "checkout",
            &url,
            &na,
            "1",
            &dir.display().to_string(),
        ])
        .ok();
    assert!(run.stdout.contains("1 from the bucket"), "{run}");
    assert_eq!(std::fs::read(dir.join("big.bin")).expect("read"), big);
}

/// The pointer text of `bytes` as the export writes it.
fn pointer_of(bytes: &[u8]) -> String {
    format!(
        "opfs-pointer v1\nblake3 {}\nsize {}\n",
        blake3::hash(bytes).to_hex(),
        bytes.len()
    )
}

#[test]
fn a_small_file_that_reads_as_a_pointer_is_pushed_and_checked_out_as_its_own_bytes() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = first_home(&url, &s3.endpoint());
    let big = Rng::new(5).bytes(9 << 20);
    write_file(&a.m("big.bin"), &big, 0o644);
    // The pointer text of big.bin, and of bytes no one has: a small file
    // an agent can write on purpose.
    write_file(&a.m("notes.txt"), pointer_of(&big).as_bytes(), 0o644);
    write_file(
        &a.m("harmless.txt"),
        format!(
            "opfs-pointer v1\nblake3 {}\nsize 9437184\n",
            "0123456789abcdef".repeat(4)
        )
        .as_bytes(),
        0o644,
    );
    a.turn("t");
    let at_end = files_only(manifest(&a.project));
    write_file(&a.m("later.txt"), b"more\n", 0o644);
    a.turn("t");
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["last_turn"], 2, "{r:#}");
    assert_eq!(r["objects_missing"], serde_json::json!([]), "{r:#}");
    assert!(push_status(&a, &url)["failure"].is_null());

    // On another home: each file as it was, not the bytes its text names.
    let b = second_home(&url, &s3.endpoint());
    let na = project_name(&a, "alpha");
    let dir = b.root().join("turn1");
    let run = b
        .opfs(&[
            "--json",
            "remote",
            "checkout",
            &url,
            &na,
            "1",
            &dir.display().to_string(),
        ])
        .ok();
    assert!(
        run.json()["pointers"].as_array().is_some_and(Vec::is_empty),
        "{run}"
    );
    assert_manifest_eq("turn 1 materialised", &at_end, &files_only(manifest(&dir)));
}

#[test]
fn a_big_files_lost_bytes_are_reported_and_do_not_stop_later_pushes() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let f = Fixture::new();
    f.mount();
    write_file(&f.m("big3.bin"), &Rng::new(9).bytes(9 << 20), 0o644);
    f.turn("big");
    f.opfs_c(&["export"]).ok();
    // Its only copy was the project's file, deleted while unmounted.
    f.umount();
    std::fs::remove_file(f.p("big3.bin")).expect("rm");
    configure_bucket(&f, &url, "alpha", &s3.endpoint());
    f.mount();
    write_file(&f.m("later.txt"), b"more\n", 0o644);
    f.turn("later");
    let run = f.opfs_c(&["push"]);
    assert_eq!(run.code, Some(0), "the push goes on without it: {run}");
    assert!(
        run.stdout.contains("big3.bin at the end of turn 1"),
        "{run}"
    );
    let ns = namespace(&f, "alpha");
    assert!(ls_remote(&url).contains_key(&format!("{ns}/turns/2")));
    let st = push_status(&f, &url);
    assert!(st["failure"].is_null(), "{st:#}");
    assert_eq!(st["missing"][0]["path"], "big3.bin", "{st:#}");
    assert_eq!(st["missing"][0]["turn"], 1, "{st:#}");
    let warnings = f.status()["warnings"].to_string();
    assert!(
        warnings.contains("big3.bin at the end of turn 1")
            && warnings.contains("checks out from the remote as its pointer file"),
        "{warnings}"
    );
    // Later turns go on being pushed.
    write_file(&f.m("later.txt"), b"more again\n", 0o644);
    f.turn("again");
    f.opfs_c(&["push"]).ok();
    assert!(ls_remote(&url).contains_key(&format!("{ns}/turns/3")));
}

/// A remote that takes the connection and never answers: each `git` run
/// is stopped at `[push] timeout_seconds`, counted as a failed push and
/// retried; the push lock is not held for good, so a push to another
/// remote still goes through.
#[test]
fn a_remote_that_never_answers_is_stopped_at_the_deadline_and_retried() {
    let Some(d) = GitDaemon::start() else { return };
    let tarpit = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = url_on(tarpit.local_addr().expect("addr").port());
    // Accepts every connection and keeps it open, saying nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in tarpit.incoming() {
            held.push(c);
        }
    });
    let f = Fixture::new();
    configure(&f, &url, "alpha", true);
    edit_config(&f, "[push]\n", "[push]\ntimeout_seconds = 2\n");
    f.mount();
    write_file(&f.m("a.txt"), b"one\n", 0o644);
    f.turn("one");
    assert!(
        wait_for(PUSH_WAIT, || push_status(&f, &url)["failure"]["attempts"]
            .as_u64()
            .is_some_and(|n| n >= 2)),
        "the push to a silent remote never ended: {:#}",
        f.status()
    );
    let msg = push_status(&f, &url)["failure"]["message"].to_string();
    assert!(msg.contains("no result within 2 s"), "{msg}");
    // A one-off push to a silent remote ends too, with the same message.
    let run = f.opfs_c(&["push", &url]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("timeout_seconds"), "{run}");
    // And the lock is free for a remote that answers.
    f.opfs_c(&["push", &d.url()]).ok();
    let ns = namespace(&f, "alpha");
    assert!(ls_remote(&d.url()).contains_key(&format!("{ns}/turns/1")));
}

#[test]
fn a_token_in_a_remote_url_is_refused_at_push_mount_and_remote_naming_where_it_came_from() {
    let f = Fixture::new();
    write_file(&f.p("a.txt"), b"a\n", 0o644);
    f.mount();
    for url in [
        "https://ghp_SECRETTOKEN123@127.0.0.1:1/x.git",
        "https://127.0.0.1:1/x.git?private_token=SECRETTOKEN123",
        // git's `<transport>::<address>` form: refused as a whole.
        "https::https://SECRETTOKEN123@127.0.0.1:1/x.git",
    ] {
        let run = f.opfs_c(&["push", url]);
        assert_eq!(run.code, Some(2), "{run}");
        assert!(run.stderr.contains("the REMOTE argument"), "{run}");
        assert!(
            run.stderr.contains("credential helper") || run.stderr.contains("::<address>' form"),
            "{run}"
        );
        assert!(!run.stderr.contains("SECRETTOKEN123"), "{run}");
        for args in [
            vec!["remote", "list", url],
            vec!["remote", "list", url, "m/k"],
        ] {
            let run = f.opfs(&args);
            assert_eq!(run.code, Some(2), "{run}");
            assert!(!run.stderr.contains("SECRETTOKEN123"), "{run}");
        }
    }
    f.umount();
    configure(
        &f,
        "https://ghp_SECRETTOKEN123@127.0.0.1:1/x.git",
        "m",
        true,
    );
    let run = f.try_mount(&[], &[]);
    assert_eq!(run.code, Some(2), "{run}");
    let config = f.pinned.config.display().to_string();
    assert!(run.stderr.contains(&config), "{run}");
    assert!(run.stderr.contains(".push] remote"), "{run}");
    assert!(!run.stderr.contains("SECRETTOKEN123"), "{run}");
    configure(
        &f,
        "https::https://ghp_SECRETTOKEN123@127.0.0.1:1/x.git",
        "m",
        true,
    );
    let run = f.try_mount(&[], &[]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains(".push] remote"), "{run}");
    assert!(run.stderr.contains("::<address>' form"), "{run}");
    assert!(!run.stderr.contains("SECRETTOKEN123"), "{run}");
    // A bucket endpoint with a key in it, likewise.
    configure(&f, &url_on(free_port()), "m", true);
    edit_config(
        &f,
        "[push]\n",
        "[push]\nbucket = \"s3://ckpt/opfs\"\nbucket_endpoint = \"http://AK:ENDPOINTSECRET@127.0.0.1:1\"\n",
    );
    let run = f.try_mount(&[], &[]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("[push] bucket_endpoint"), "{run}");
    assert!(run.stderr.contains("AWS_ACCESS_KEY_ID"), "{run}");
    assert!(!run.stderr.contains("ENDPOINTSECRET"), "{run}");
}

/// Writes into the project's push.json an entry for `url` whose last
/// push failed with a message quoting it.
fn record_failed_push(f: &Fixture, url: &str) {
    let path = f.state_dir().join("push.json");
    let mut v: serde_json::Value = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| serde_json::json!({"remotes": {}}));
    v["remotes"][url] = serde_json::json!({
        "namespace": "refs/opfs/m/0123456789abcdef",
        "pushed": {},
        "last_success_ms": null,
        "last_turn": null,
        "failure": {
            "kind": "unreachable",
            "message": format!("cannot push to {url}: fatal: unable to access '{url}/': refused"),
            "since_ms": 1,
            "last_attempt_ms": 1,
            "attempts": 3
        }
    });
    std::fs::write(&path, serde_json::to_vec(&v).expect("json")).expect("write push.json");
}

#[test]
fn a_stored_url_with_a_token_is_shown_redacted_and_forget_drops_a_one_off_remote() {
    let (f, repo, _) = pushed_to_a_path();
    let repo = std::fs::canonicalize(&repo).expect("canonical");
    let secret = "https://ghp_SECRETTOKEN123@127.0.0.1:1/x.git?private_token=QSECRET";
    record_failed_push(&f, secret);
    let human = f.opfs_c(&["status"]).ok().stdout;
    let json = f.opfs_c(&["status", "--json"]).ok().stdout;
    for text in [&human, &json] {
        assert!(!text.contains("SECRETTOKEN123"), "{text}");
        assert!(!text.contains("QSECRET"), "{text}");
    }
    let shown = "https://***@127.0.0.1:1/x.git?***";
    assert!(human.contains(&format!("push:       {shown}")), "{human}");
    // Forgotten by the form status prints.
    let run = f.opfs_c(&["push", "--forget", shown]).ok();
    assert!(run.stdout.contains(&format!("forgot {shown}")), "{run}");
    assert!(!run.stdout.contains("SECRETTOKEN123"), "{run}");
    let human = f.opfs_c(&["status"]).ok().stdout;
    assert!(!human.contains("127.0.0.1:1"), "{human}");
    // The configured remote stays: the next push needs its entry.
    let run = f.opfs_c(&["push", "--forget", &repo.display().to_string()]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("the configuration names"), "{run}");
    assert!(f
        .opfs_c(&["status"])
        .ok()
        .stdout
        .contains(&format!("push:       {}", repo.display())));
    // An unknown one is named, with those it knows.
    let run = f.opfs_c(&["push", "--forget", "git://127.0.0.1:1/nothing.git"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains(&repo.display().to_string()), "{run}");
}

#[test]
fn bidi_and_other_format_characters_from_a_remote_are_printed_escaped() {
    let f = Fixture::new();
    let repo = f.root().join("bidi.git");
    git_at(f.root(), &["init", "-q", "--bare", "bidi.git"]);
    let tree = git_at(&repo, &["hash-object", "-w", "-t", "tree", "/dev/null"]);
    let msg = "opfs project x\n\nopfs-project: /home/u/\u{202e}gpj.exe\nopfs-machine: m\n";
    let commit = git_at(&repo, &["commit-tree", tree.trim(), "-m", msg]);
    let ns = "refs/opfs/m\u{202e}x\u{200f}/0123456789abcdef";
    for r in ["project", "turns/1", "worktrees/w\u{2066}"] {
        git_at(&repo, &["update-ref", &format!("{ns}/{r}"), commit.trim()]);
    }
    let run = f
        .opfs(&["remote", "list", &repo.display().to_string()])
        .ok();
    for c in ['\u{202e}', '\u{200f}', '\u{2066}'] {
        assert!(
            !run.stdout.contains(c),
            "U+{:04X} printed raw: {run}",
            c as u32
        );
    }
    for escaped in ["m\\u{202e}x\\u{200f}/", "worktrees: w\\u{2066}"] {
        assert!(run.stdout.contains(escaped), "{escaped}: {run}");
    }
    // The path, from the project's description: the character replaced.
    assert!(run.stdout.contains("/home/u/\u{fffd}gpj.exe"), "{run}");
}

#[test]
fn remote_list_reads_a_bounded_start_of_each_message_and_prints_a_bounded_subject() {
    let f = Fixture::new();
    let repo = f.root().join("big.git");
    git_at(f.root(), &["init", "-q", "--bare", "big.git"]);
    let tree = git_at(&repo, &["hash-object", "-w", "-t", "tree", "/dev/null"]);
    // A description followed by 4 MiB, and a subject of 4 MiB on one line.
    let big = "A".repeat(4 << 20);
    let desc = f.root().join("desc.txt");
    std::fs::write(
        &desc,
        format!("opfs project /p/x\n\nopfs-project: /p/x\nopfs-machine: m\n{big}\n"),
    )
    .expect("write");
    let subject = f.root().join("subject.txt");
    std::fs::write(&subject, format!("Turn 1: {big}\n\nbody\n")).expect("write");
    let path = |p: &Path| p.display().to_string();
    let project = git_at(&repo, &["commit-tree", tree.trim(), "-F", &path(&desc)]);
    let turn = git_at(&repo, &["commit-tree", tree.trim(), "-F", &path(&subject)]);
    let ns = "refs/opfs/m/0123456789abcdef";
    git_at(
        &repo,
        &["update-ref", &format!("{ns}/project"), project.trim()],
    );
    git_at(
        &repo,
        &["update-ref", &format!("{ns}/turns/1"), turn.trim()],
    );
    let url = path(&repo);
    let run = f.opfs(&["remote", "list", &url]).ok();
    assert!(run.stdout.contains("/p/x"), "{run}");
    let run = f.opfs(&["remote", "list", &url, "m/0123456789abcdef"]).ok();
    assert!(
        run.stdout.contains("Turn 1: AAAA"),
        "{}",
        &run.stdout[..300]
    );
    for line in run.stdout.lines() {
        assert!(line.chars().count() < 400, "a line of {} bytes", line.len());
    }
    assert!(run.stdout.contains("A…"), "{}", &run.stdout[..300]);
    let json = f
        .opfs(&["--json", "remote", "list", &url, "m/0123456789abcdef"])
        .ok()
        .json();
    let listed = json[0]["subject"].as_str().expect("subject");
    assert_eq!(listed.chars().count(), 201, "{}", &listed[..100]);
}

#[test]
fn suggested_commands_quote_a_path_with_a_space_and_a_url_with_an_ampersand() {
    let f = Fixture::new();
    write_file(&f.p("a.txt"), b"a\n", 0o644);
    f.mount();
    f.turn("t");
    let spaced = f.root().join("no such").join("x.git");
    let url = format!("git://127.0.0.1:{}/a&b.git", free_port());
    for remote in [spaced.display().to_string(), url.clone()] {
        let run = f.opfs_c(&["push", &remote]);
        assert_eq!(run.code, Some(1), "{run}");
    }
    let text = f.opfs_c(&["status"]).ok().stdout;
    for quoted in [format!("'{}'", spaced.display()), format!("'{url}'")] {
        assert!(
            text.contains(&format!("run `opfs push {quoted}` when it answers")),
            "{quoted} not quoted: {text}"
        );
    }
}

#[test]
fn a_machine_name_over_64_bytes_and_a_relative_remote_path_are_refused_naming_the_key() {
    let (f, repo, _) = pushed_to_a_path();
    let config = f.pinned.config.display().to_string();
    let long = "m".repeat(300);
    edit_config(&f, "machine = \"alpha\"", &format!("machine = \"{long}\""));
    let run = f.opfs_c(&["push"]);
    assert_eq!(run.code, Some(2), "{run}");
    for part in [
        config.as_str(),
        "[push] machine",
        "300 bytes",
        "at most 64 bytes",
    ] {
        assert!(run.stderr.contains(part), "{part:?} not said: {run}");
    }
    f.umount();
    let run = f.try_mount(&[], &[]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("[push] machine"), "{run}");
    // A relative path would be each reader's current directory's.
    edit_config(&f, &format!("machine = \"{long}\""), "machine = \"alpha\"");
    edit_config(
        &f,
        &format!("{:?}", repo.display().to_string()),
        "\"ckpt.git\"",
    );
    for run in [
        f.try_mount(&[], &[]),
        f.opfs(&["-C", &f.project.display().to_string(), "push"]),
    ] {
        assert_eq!(run.code, Some(2), "{run}");
        for part in [
            config.as_str(),
            ".push] remote",
            "\"ckpt.git\" is a relative path",
        ] {
            assert!(run.stderr.contains(part), "{part:?} not said: {run}");
        }
    }
}

#[test]
fn a_ref_below_a_turn_ref_is_no_second_turn() {
    let f = Fixture::new();
    let repo = f.root().join("spoof.git");
    git_at(f.root(), &["init", "-q", "--bare", "spoof.git"]);
    let tree = git_at(&repo, &["hash-object", "-w", "-t", "tree", "/dev/null"]);
    let commit = git_at(&repo, &["commit-tree", tree.trim(), "-m", "turn 5"]);
    let ns = "refs/opfs/m/0123456789abcdef";
    for r in ["project", "turns/5", "turns/zzz/5", "turns/x/y/5"] {
        git_at(&repo, &["update-ref", &format!("{ns}/{r}"), commit.trim()]);
    }
    let turns = f
        .opfs(&[
            "--json",
            "remote",
            "list",
            &repo.display().to_string(),
            "m/0123456789abcdef",
        ])
        .ok()
        .json();
    let listed: Vec<_> = turns
        .as_array()
        .expect("turns")
        .iter()
        .map(|t| t["turn"].clone())
        .collect();
    assert_eq!(listed, vec![serde_json::json!(5)], "{turns}");
}

#[test]
fn an_unreadable_push_state_is_shown_by_status_then_set_aside_and_the_push_goes_on() {
    let (f, repo, ns) = pushed_to_a_path();
    let path = f.state_dir().join("push.json");
    std::fs::write(&path, b"{1: 2").expect("corrupt push.json");
    let text = f.opfs_c(&["status"]).ok().stdout;
    let shown = path.display().to_string();
    let warning = text
        .lines()
        .find(|l| l.contains(&shown))
        .unwrap_or_else(|| panic!("push.json not named: {text}"));
    assert!(
        warning.contains("only caches what each remote holds"),
        "{warning}"
    );
    // The next push sets it aside, finds its refs on the remote and
    // sends the new turn.
    write_file(&f.m("c.txt"), b"c\n", 0o644);
    // `turn` prints the turn it opens: the one closed is the one before.
    let turn = f.turn("t2") - 1;
    let run = f.opfs_c(&["push"]).ok();
    assert!(run.stdout.contains("was unreadable: set aside as"), "{run}");
    // The new turn and head sent; the refs the remote held, adopted.
    assert!(run.stdout.contains("pushed 2 ref(s), adopted "), "{run}");
    let refs = ls_remote(&repo.display().to_string());
    assert!(
        refs.contains_key(&format!("refs/opfs/{ns}/turns/{turn}")),
        "{refs:?}"
    );
    let aside: Vec<_> = std::fs::read_dir(f.state_dir())
        .expect("state dir")
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("push.json.corrupt-")
        })
        .map(|e| e.path())
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(&aside[0]).expect("aside"), b"{1: 2");
    let status = f.status();
    assert_eq!(status["push"][0]["last_turn"], turn, "{status:#}");
    assert!(status["push"][0]["failure"].is_null(), "{status:#}");
    let warnings = status["warnings"].to_string();
    assert!(
        warnings.contains(&aside[0].display().to_string()),
        "{warnings}"
    );
    // Set aside again with nothing new: every ref adopted, none said
    // to be pushed.
    std::fs::write(&path, b"{1: 2").expect("corrupt push.json");
    let run = f.opfs_c(&["push"]).ok();
    assert!(run.stdout.contains("adopted "), "{run}");
    assert!(run.stdout.contains("nothing sent"), "{run}");
    assert!(
        !run.stdout.lines().any(|l| l.starts_with("pushed ")),
        "{run}"
    );
    // Up to date afterwards: nothing left to adopt.
    let r = f.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["up_to_date"], true, "{r:#}");
    assert_eq!(r["adopted"], 0, "{r:#}");
}

/// A bare repository `name` in `dir` whose every hook, and whose
/// `core.alternateRefsCommand` (with an alternate object store), writes a
/// marker file into `marks` when git runs it.
fn repo_that_runs_programs(dir: &Path, name: &str, marks: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(marks).expect("marks dir");
    git_at(dir, &["init", "-q", "--bare", "alternate.git"]);
    git_at(dir, &["init", "-q", "--bare", name]);
    let repo = dir.join(name);
    let script = |path: &Path, mark: &str| {
        let text = format!("#!/bin/sh\ntouch '{}/{name}-{mark}'\n", marks.display());
        std::fs::write(path, text).expect("write script");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    for hook in [
        "pre-receive",
        "update",
        "post-receive",
        "post-update",
        "reference-transaction",
        "push-to-checkout",
        "pre-auto-gc",
    ] {
        script(&repo.join("hooks").join(hook), hook);
    }
    let alt_cmd = dir.join(format!("{name}-alternate-refs.sh"));
    script(&alt_cmd, "alternateRefsCommand");
    std::fs::write(
        repo.join("objects/info/alternates"),
        format!("{}\n", dir.join("alternate.git/objects").display()),
    )
    .expect("alternates");
    git_at(
        &repo,
        &[
            "config",
            "core.alternateRefsCommand",
            &alt_cmd.display().to_string(),
        ],
    );
    repo
}

/// A local repository (a path or a `file://` URL) is pushed to by a
/// `git receive-pack` that git runs on this machine, with that
/// repository's own configuration: none of its hooks, nor a command its
/// configuration names, runs.
#[test]
fn a_local_remote_runs_none_of_its_own_hooks_or_commands() {
    let f = Fixture::new();
    let marks = f.root().join("marks");
    let by_path = repo_that_runs_programs(f.root(), "path.git", &marks);
    let by_url = repo_that_runs_programs(f.root(), "url.git", &marks);
    configure(&f, &by_path.display().to_string(), "alpha", false);
    f.mount();
    write_file(&f.m("a.txt"), b"one\n", 0o644);
    f.turn("one");
    let ns = namespace(&f, "alpha");
    for remote in [
        by_path.display().to_string(),
        format!("file://{}", by_url.display()),
    ] {
        f.opfs_c(&["push", &remote]).ok();
        assert!(
            ls_remote(&remote).contains_key(&format!("{ns}/turns/1")),
            "turn 1 not pushed to {remote}"
        );
    }
    let ran: Vec<String> = std::fs::read_dir(&marks)
        .expect("marks")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        ran.is_empty(),
        "the remote ran programs of its own: {ran:?}"
    );
}

/// `opfs push --objects` meets a version whose bytes are gone for good
/// (pushed before a bucket was configured, then deleted behind the
/// mount): it warns about it as a push does, lists it in `--json`, and
/// `push.json` keeps it (`opfs status` warns).
#[test]
fn objects_gone_for_good_are_reported_by_push_objects() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let f = Fixture::new();
    configure(&f, &url, "alpha", false);
    f.mount();
    write_file(&f.m("big3.bin"), &Rng::new(9).bytes(9 << 20), 0o644);
    f.turn("big");
    // Pushed with no bucket: its bytes stayed on this machine.
    f.opfs_c(&["push"]).ok();
    // Its only copy was the project's file, deleted while unmounted.
    f.umount();
    std::fs::remove_file(f.p("big3.bin")).expect("rm");
    configure_bucket(&f, &url, "alpha", &s3.endpoint());
    f.mount();
    let run = f.opfs_c(&["push", "--objects"]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout
            .contains("warning: big3.bin at the end of turn 1")
            && run.stdout.contains("checks out as its pointer file"),
        "{run}"
    );
    let r = f.opfs_c(&["push", "--objects", "--json"]).ok().json();
    assert_eq!(r["objects_missing"][0]["path"], "big3.bin", "{r:#}");
    assert_eq!(r["objects_missing"][0]["turn"], 1, "{r:#}");
    assert_eq!(
        r["objects_missing"].as_array().map(Vec::len),
        Some(1),
        "{r:#}"
    );
    let st = push_status(&f, &url);
    assert_eq!(st["missing"][0]["path"], "big3.bin", "{st:#}");
    assert_eq!(st["missing"].as_array().map(Vec::len), Some(1), "{st:#}");
}

/// The test servers end with their drop, and every process they started
/// with them: nothing listens on their ports afterwards (a `git daemon`
/// whose `git` alone was killed kept serving, one left per test).
#[test]
fn the_test_servers_leave_nothing_listening_after_their_drop() {
    let mut ports = Vec::new();
    if let Some(d) = GitDaemon::start() {
        // A connection served (a child forked for it) while it is dropped.
        let served = ls_remote(&d.url());
        assert!(served.is_empty(), "{served:?}");
        ports.push(("git daemon", d.port));
    }
    if let Some(m) = Moto::start() {
        ports.push(("moto", m.port));
    }
    for (what, port) in ports {
        assert!(
            wait_for(Duration::from_secs(30), || TcpStream::connect((
                "127.0.0.1",
                port
            ))
            .is_err()),
            "{what} still listens on 127.0.0.1:{port} after its drop"
        );
    }
}

/// A TCP listener on 127.0.0.1 that takes every connection and never
/// answers, until dropped (then it closes them all and the port).
struct Tarpit {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tarpit {
    fn start() -> Tarpit {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok(c) => held.push(c),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Tarpit {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Tarpit {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The pids of the processes whose command line names `url` (the `git`
/// of a push to it).
fn processes_naming(url: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == url.as_bytes()))
        })
        .collect()
}

/// `opfs umount` stops the automatic push under way (its git, connected
/// to a remote that never answers, would otherwise run until its
/// deadline, after the project is unmounted): no git of it is left, the
/// push is recorded as interrupted, and the next mount pushes again.
#[test]
fn an_unmount_stops_the_push_under_way_and_the_next_mount_pushes_again() {
    let tarpit = Tarpit::start();
    let port = tarpit.port;
    let url = url_on(port);
    let f = Fixture::new();
    configure(&f, &url, "alpha", true);
    // A deadline far beyond the test: only the unmount can stop it.
    edit_config(&f, "[push]\n", "[push]\ntimeout_seconds = 36000\n");
    f.mount();
    write_file(&f.m("a.txt"), b"one\n", 0o644);
    f.turn("one");
    assert!(
        wait_for(PUSH_WAIT, || !processes_naming(&url).is_empty()),
        "no push to {url} started"
    );
    f.umount();
    assert!(
        wait_for(Duration::from_secs(30), || processes_naming(&url)
            .is_empty()),
        "the push's git outlived the unmount: {:?}",
        processes_naming(&url)
    );
    let status = f.opfs_p(&["status", "--json"]).ok().json();
    let st = status["push"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["remote"] == url.as_str()))
        .cloned()
        .unwrap_or_default();
    assert_eq!(st["failure"]["kind"], "interrupted", "{status:#}");
    // The remote answers now: the next mount pushes.
    drop(tarpit);
    let Some(d) = GitDaemon::start_on(port) else {
        return;
    };
    f.mount();
    let ns = namespace(&f, "alpha");
    assert!(
        wait_for(PUSH_WAIT, || ls_remote(&d.url())
            .contains_key(&format!("{ns}/turns/1"))),
        "turn 1 was not pushed at the next mount: {:#}",
        f.status()
    );
}

/// The key of `bytes`' object in the bucket `s3://ckpt/opfs`.
fn object_key(bytes: &[u8]) -> String {
    let hash = blake3::hash(bytes).to_hex().to_string();
    format!("opfs/blake3/{}/{hash}", &hash[..2])
}

#[test]
fn a_big_file_goes_up_in_parts_and_comes_back_byte_for_byte() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = first_home(&url, &s3.endpoint());
    // Above the multipart threshold (16 MiB): parts of 8 MiB, the last
    // one smaller.
    let big = Rng::new(77).bytes((20 << 20) + 3);
    write_file(&a.m("big.bin"), &big, 0o644);
    a.turn("t");
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["objects_uploaded"], 1, "{r:#}");
    assert_eq!(r["object_bytes"], big.len() as u64, "{r:#}");
    // A multipart upload's ETag ends in -<number of parts>; no upload is
    // left open.
    let key = object_key(&big);
    let etag = s3.boto3(
        &format!("print(s3.head_object(Bucket='ckpt', Key='{key}')['ETag'])"),
        "head the object",
    );
    assert!(
        etag.trim().ends_with("-3\""),
        "not uploaded in 3 parts: {etag}"
    );
    let open = s3.boto3(
        "print(len(s3.list_multipart_uploads(Bucket='ckpt').get('Uploads', [])))",
        "list the uploads",
    );
    assert_eq!(open.trim(), "0", "multipart uploads left open");
    // Create-only: the next push finds it there.
    let r = a.opfs_c(&["push", "--objects", "--json"]).ok().json();
    assert_eq!(r["objects_backfilled"], 0, "{r:#}");
    let b = second_home(&url, &s3.endpoint());
    let na = project_name(&a, "alpha");
    let dir = b.root().join("turn1");
    let run = b
        .opfs(&[
            "--json",
            "remote",
            "checkout",
            &url,
            &na,
            "1",
            &dir.display().to_string(),
        ])
        .ok();
    assert_eq!(run.json()["resolved"], 1, "{run}");
    assert!(std::fs::read(dir.join("big.bin")).expect("read") == big);

    // A version whose only copy, the project's file, was rewritten behind
    // the mount with other bytes of the same size: its upload is read in
    // parts from the file, found to be other bytes at the end, and
    // aborted; nothing is written, no upload is left open.
    let lost = Rng::new(78).bytes(17 << 20);
    write_file(&a.m("lost.bin"), &lost, 0o644);
    a.turn("t");
    a.opfs_c(&["export"]).ok();
    a.umount();
    write_file(&a.p("lost.bin"), &Rng::new(79).bytes(17 << 20), 0o644);
    a.mount();
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["objects_uploaded"], 0, "{r:#}");
    assert_eq!(r["objects_missing"][0]["path"], "lost.bin", "{r:#}");
    let open = s3.boto3(
        "print(len(s3.list_multipart_uploads(Bucket='ckpt').get('Uploads', [])))",
        "list the uploads",
    );
    assert_eq!(open.trim(), "0", "a multipart upload was left open");
    let keys = s3.boto3(
        "print([o['Key'] for o in s3.list_objects_v2(Bucket='ckpt').get('Contents', [])])",
        "list the objects",
    );
    assert!(!keys.contains(&object_key(&lost)), "{keys}");
}

/// Runs `f`'s `opfs ARGS...` under `/usr/bin/time`: its outcome and its
/// peak resident memory in KiB (its children's included); `None` when
/// this machine has no `/usr/bin/time`.
fn opfs_with_maxrss(f: &Fixture, args: &[&str]) -> Option<(Run, u64)> {
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        eprintln!("SKIP: /usr/bin/time is not installed");
        return None;
    }
    let inner = f.opfs_command(args);
    let report = f.root().join("maxrss");
    let mut cmd = Command::new(time);
    cmd.args(["-f", "%M", "-o"])
        .arg(&report)
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    if let Some(dir) = inner.get_current_dir() {
        cmd.current_dir(dir);
    }
    let out = cmd.output().expect("run /usr/bin/time opfs");
    let rss = std::fs::read_to_string(&report)
        .expect("time's report")
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("maxrss");
    let run = Run {
        what: format!("opfs {}", args.join(" ")),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    Some((run, rss))
}

/// Writes into the bare repository `git_dir` a commit whose tree holds
/// `README` and `zeros.bin` (`n` zero bytes), under `refname`.
fn commit_zeros(git_dir: &Path, refname: &str, n: usize) {
    commit_files(
        git_dir,
        refname,
        &[("README", 3, None), ("zeros.bin", n, Some(0))],
    );
}

/// Writes into the bare repository `git_dir` a commit whose tree holds
/// each `(name, bytes, fill)`: `bytes` bytes of `fill` (`None`: random,
/// which git cannot compress), under `refname`.
fn commit_files(git_dir: &Path, refname: &str, files: &[(&str, usize, Option<u8>)]) {
    type Feed<'a> = Option<&'a mut dyn FnMut(&mut dyn std::io::Write)>;
    let git = |args: &[&str], input: Feed<'_>| {
        let mut child = Command::new("git")
            .arg(format!("--git-dir={}", git_dir.display()))
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("git");
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(write) = input {
            write(&mut stdin);
        }
        drop(stdin);
        let out = child.wait_with_output().expect("git");
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let mut listing = String::new();
    let mut rng = Rng::new(11);
    for (name, n, fill) in files {
        let id = git(
            &["hash-object", "-w", "--stdin"],
            Some(&mut |w: &mut dyn std::io::Write| {
                let mut left = *n;
                while left > 0 {
                    let k = left.min(1 << 20);
                    let chunk = match fill {
                        Some(b) => vec![*b; k],
                        None => rng.bytes(k),
                    };
                    w.write_all(&chunk).expect("write");
                    left -= k;
                }
            }),
        );
        listing.push_str(&format!("100644 blob {id}\t{name}\n"));
    }
    let tree = git(
        &["mktree"],
        Some(&mut |w: &mut dyn std::io::Write| w.write_all(listing.as_bytes()).expect("write")),
    );
    let commit = git(&["commit-tree", &tree, "-m", "Turn 1"], None);
    git(&["update-ref", refname, &commit], None);
}

#[test]
fn a_checkout_streams_a_huge_blob_and_stops_a_bucket_answering_too_much_in_bounded_memory() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    // A remote holding a 160 MiB blob (of zeros: small in git).
    commit_zeros(
        &d.base.path().join("r.git"),
        "refs/opfs/evil/0123456789abcdef/turns/1",
        160 << 20,
    );
    let b = second_home(&url, &s3.endpoint());
    let dir = b.root().join("zeros");
    let Some((run, rss)) = opfs_with_maxrss(
        &b,
        &[
            "remote",
            "checkout",
            &url,
            "evil/0123456789abcdef",
            "1",
            &dir.display().to_string(),
        ],
    ) else {
        return;
    };
    assert_eq!(run.code, Some(0), "{run}");
    let m = std::fs::metadata(dir.join("zeros.bin")).expect("zeros.bin");
    assert_eq!(m.len(), 160 << 20);
    assert!(
        rss < 100 << 10,
        "a 160 MiB blob was held in memory: maxrss {rss} KiB"
    );

    // A bucket answering 160 MiB for a pointer of 9 MiB.
    let a = first_home(&url, &s3.endpoint());
    let big = Rng::new(5).bytes(9 << 20);
    write_file(&a.m("big.bin"), &big, 0o644);
    write_file(&a.m("small.txt"), b"small\n", 0o644);
    a.turn("t");
    a.opfs_c(&["push"]).ok();
    let key = object_key(&big);
    let _ = s3.boto3(
        &format!("s3.put_object(Bucket='ckpt', Key='{key}', Body=b'\\0' * (160 << 20))"),
        "replace the object",
    );
    let na = project_name(&a, "alpha");
    let dir = b.root().join("turn1");
    let (run, rss) = opfs_with_maxrss(
        &b,
        &[
            "--json",
            "remote",
            "checkout",
            &url,
            &na,
            "1",
            &dir.display().to_string(),
        ],
    )
    .expect("time");
    assert!(
        rss < 100 << 10,
        "a 160 MiB answer was held in memory: maxrss {rss} KiB"
    );
    // That file is written as its pointer and named; the rest of the tree
    // is written.
    assert_eq!(run.code, Some(1), "{run}");
    for part in [
        key.as_str(),
        "big.bin",
        "is not their bytes",
        "opfs push --objects",
    ] {
        assert!(run.stderr.contains(part), "{part:?} not said: {run}");
    }
    // One JSON value: the report, carrying the error.
    let v: serde_json::Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run}"));
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("is not their bytes")),
        "{v:#}"
    );
    assert_eq!(v["bad_objects"][0]["path"], "big.bin", "{v:#}");
    assert_eq!(v["bad_objects"][0]["key"], key, "{v:#}");
    assert_eq!(
        std::fs::read_to_string(dir.join("big.bin")).expect("big.bin"),
        pointer_of(&big)
    );
    assert_eq!(
        std::fs::read(dir.join("small.txt")).expect("small"),
        b"small\n"
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left.len(), 2, "only the tree's files: {left:?}");
}

#[test]
fn a_checkout_that_fails_midway_leaves_nothing_and_can_be_run_again() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = first_home(&url, &s3.endpoint());
    let big = Rng::new(6).bytes(9 << 20);
    write_file(&a.m("README"), b"readme\n", 0o644);
    write_file(&a.m("big.bin"), &big, 0o644);
    write_file(&a.m("z.txt"), b"z\n", 0o644);
    a.turn("t");
    a.opfs_c(&["push"]).ok();
    let na = project_name(&a, "alpha");
    let b = second_home(&url, &s3.endpoint());
    // The bucket goes away: README is written before big.bin needs it.
    drop(s3);
    let absent = b.root().join("out/turn1");
    let empty = b.root().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    for dir in [&absent, &empty] {
        let run = checkout_turn(&b, &url, &na, "1", dir);
        assert_eq!(run.code, Some(1), "{run}");
        assert!(run.stderr.contains("s3://ckpt/opfs"), "{run}");
        if dir == &absent {
            assert!(
                !absent.exists(),
                "a failed checkout left {}",
                absent.display()
            );
        } else {
            let left: Vec<_> = std::fs::read_dir(&empty)
                .expect("dir")
                .map(|e| e.expect("entry").file_name())
                .collect();
            assert!(left.is_empty(), "a failed checkout left {left:?}");
        }
        let beside: Vec<_> = std::fs::read_dir(dir.parent().expect("parent"))
            .expect("parent")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("opfs-checkout"))
            .collect();
        assert!(beside.is_empty(), "left beside: {beside:?}");
    }
    // Run again (without the bucket now): the same directory is taken.
    std::fs::write(&b.pinned.config, "").expect("config");
    let run = checkout_turn(&b, &url, &na, "1", &absent);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("written as pointer files"), "{run}");
    assert_eq!(
        std::fs::read(absent.join("README")).expect("README"),
        b"readme\n"
    );
    assert_eq!(std::fs::read(absent.join("z.txt")).expect("z"), b"z\n");
}

#[test]
fn a_full_disk_under_the_local_copy_is_named_and_a_failed_fetch_leaves_nothing() {
    let Some(d) = GitDaemon::start() else { return };
    let url = d.url();
    let repo = d.base.path().join("r.git");
    commit_files(
        &repo,
        "refs/opfs/small/0123456789abcdef/turns/1",
        &[("README", 3, None)],
    );
    // 16 MiB that git cannot compress: more than the local copy's 12 MiB.
    commit_files(
        &repo,
        "refs/opfs/big/0123456789abcdef/turns/1",
        &[("random.bin", 16 << 20, None)],
    );
    let b = Fixture::new();
    let remotes = b.pinned.opfs_home.join("remotes");
    std::fs::create_dir_all(&remotes).expect("mkdir remotes");
    let _fs = match common::loopfs::LoopFs::make_at(
        "mkfs.ext4",
        &["-q", "-F", "-m", "0"],
        12 << 20,
        &remotes,
    ) {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIP: no small ext4 for the local copies: {why}");
            return;
        }
    };
    let copies = || -> Vec<String> {
        std::fs::read_dir(&remotes)
            .expect("remotes")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".git"))
            .collect()
    };
    let out = b.root().join("small");
    b.opfs(&[
        "remote",
        "checkout",
        &url,
        "small/0123456789abcdef",
        "1",
        &out.display().to_string(),
    ])
    .ok();
    let before = copies();
    assert_eq!(before.len(), 1, "{before:?}");
    let copy = remotes.join(&before[0]);
    // The disk fills during the fetch: said as such, naming the copy and
    // the fix; the fetch's temporary pack is removed, the copy kept.
    let out = b.root().join("big");
    let run = b.opfs(&[
        "remote",
        "checkout",
        &url,
        "big/0123456789abcdef",
        "1",
        &out.display().to_string(),
    ]);
    assert_eq!(run.code, Some(1), "{run}");
    for part in [
        "no space left on the device",
        &copy.display().to_string(),
        "free space",
    ] {
        assert!(run.stderr.contains(part), "{part:?} not said: {run}");
    }
    assert!(!run.stderr.contains("check the URL"), "{run}");
    let pack: Vec<_> = std::fs::read_dir(copy.join("objects/pack"))
        .expect("pack dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tmp_"))
        .collect();
    assert!(pack.is_empty(), "left in the copy: {pack:?}");
    assert!(!out.exists(), "{}", out.display());
    // A URL that names nothing leaves no copy behind.
    let typo = url_on(free_port());
    let run = b.opfs(&["remote", "list", &typo]);
    assert_eq!(run.code, Some(1), "{run}");
    assert_eq!(copies(), before, "a failed URL left a local copy");
}

#[test]
fn an_object_of_another_size_under_the_key_fails_the_push_naming_it_and_the_fix() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let f = Fixture::new();
    configure_bucket(&f, &url, "alpha", &s3.endpoint());
    f.mount();
    let big = Rng::new(53).bytes(8 << 20);
    let hash = blake3::hash(&big).to_hex().to_string();
    let key = format!("opfs/blake3/{}/{hash}", &hash[..2]);
    // What a corrupt bucket holds, or what a service that answers 200 to
    // any HEAD says: an object of another size under the key.
    s3.boto3(
        &format!("s3.put_object(Bucket='ckpt', Key='{key}', Body=b'not these bytes')"),
        "put an object of another size",
    );
    write_file(&f.m("big.bin"), &big, 0o644);
    f.turn("big");
    let run = f.opfs_c(&["push"]);
    assert_eq!(run.code, Some(1), "{run}");
    let size = (8u64 << 20).to_string();
    for part in [
        key.as_str(),
        "15 bytes",
        size.as_str(),
        "delete that object",
    ] {
        assert!(run.stderr.contains(part), "{part:?} not said: {run}");
    }
    // No pointer reached the remote without its bytes.
    assert!(ls_remote(&url).is_empty(), "{:?}", ls_remote(&url));
    assert_eq!(push_status(&f, &url)["failure"]["kind"], "bucket");
    // The fix the message gives works.
    s3.empty_bucket();
    let r = f.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["objects_uploaded"], 1, "{r:#}");
}

/// A TCP proxy on 127.0.0.1 to the port `to` that holds back the first
/// bytes of the answer on each connection for `first`, then passes the
/// answers on at 1 MiB per `per_mib` (a slow link, as the client sees
/// it); its port is closed on drop, and its connections pass nothing
/// more.
struct SlowProxy {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Bytes passed from clients to the server so far.
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl SlowProxy {
    fn start(to: u16, first: Duration, per_mib: Duration) -> SlowProxy {
        SlowProxy::start_with(to, first, per_mib, Duration::ZERO)
    }

    /// A proxy that passes what clients send (request bodies: uploads)
    /// at 1 MiB per `up_per_mib`, answers as they come.
    fn slow_uploads(to: u16, up_per_mib: Duration) -> SlowProxy {
        SlowProxy::start_with(to, Duration::ZERO, Duration::ZERO, up_per_mib)
    }

    fn start_with(to: u16, first: Duration, per_mib: Duration, up_per_mib: Duration) -> SlowProxy {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = sent.clone();
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => relay(
                        client,
                        to,
                        (first, per_mib),
                        (up_per_mib, counter.clone()),
                        stopped.clone(),
                    ),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        SlowProxy {
            port,
            stop,
            thread: Some(thread),
            sent,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Relays `client` to the port `to` as [`SlowProxy`] says, on threads of
/// its own that end with the connection.
fn relay(
    client: TcpStream,
    to: u16,
    (first, per_mib): (Duration, Duration),
    (up_per_mib, sent): (Duration, std::sync::Arc<std::sync::atomic::AtomicU64>),
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let _ = client.set_nonblocking(false);
    let Ok(upstream) = TcpStream::connect(("127.0.0.1", to)) else {
        return;
    };
    let (Ok(mut from_client), Ok(mut to_upstream)) = (client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    let stopped = stop.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = from_client.read(&mut buf) {
            std::thread::sleep(up_per_mib * n as u32 / (1 << 20));
            // Dropped: what is left of a slow request is not passed on.
            if stopped.load(Ordering::SeqCst) {
                break;
            }
            if to_upstream.write_all(&buf[..n]).is_err() {
                break;
            }
            sent.fetch_add(n as u64, Ordering::SeqCst);
        }
        let _ = to_upstream.shutdown(std::net::Shutdown::Write);
    });
    let (mut from_upstream, mut to_client) = (upstream, client);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let mut started = false;
        while let Ok(n @ 1..) = from_upstream.read(&mut buf) {
            if !started {
                std::thread::sleep(first);
                started = true;
            }
            std::thread::sleep(per_mib * n as u32 / (1 << 20));
            if stop.load(Ordering::SeqCst) || to_client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(std::net::Shutdown::Both);
    });
}

#[test]
fn a_bucket_request_may_take_the_configured_timeout_and_no_more() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = first_home(&url, &s3.endpoint());
    let big = Rng::new(59).bytes((8 << 20) + 5);
    write_file(&a.m("big.bin"), &big, 0o644);
    a.turn("big");
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["objects_uploaded"], 1, "{r:#}");
    let na = project_name(&a, "alpha");
    // Another home reads the bucket through a link whose every answer
    // starts 8 s late: longer than `[push] timeout_seconds = 3`, shorter
    // than object_store's own 30 s.
    let slow = SlowProxy::start(s3.port, Duration::from_secs(8), Duration::ZERO);
    let b = second_home(&url, &slow.endpoint());
    edit_config(&b, "[push]\n", "[push]\ntimeout_seconds = 3\n");
    let dir = b.root().join("turn1");
    let checkout = || checkout_turn(&b, &url, &na, "1", &dir);
    let run = checkout();
    assert_eq!(run.code, Some(1), "a request outlived the setting: {run}");
    let hash = blake3::hash(&big).to_hex().to_string();
    let key = format!("opfs/blake3/{}/{hash}", &hash[..2]);
    for part in ["bucket s3://ckpt/opfs", key.as_str()] {
        assert!(run.stderr.contains(part), "{part:?} not said: {run}");
    }
    assert!(!dir.exists(), "a failed checkout left {}", dir.display());
    // Raised, the same slow link carries the object.
    edit_config(&b, "timeout_seconds = 3\n", "timeout_seconds = 120\n");
    checkout().ok();
    assert_eq!(std::fs::read(dir.join("big.bin")).expect("read"), big);
}

#[test]
fn a_checkout_reads_a_big_object_in_ranges_each_within_the_timeout() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = first_home(&url, &s3.endpoint());
    let big = Rng::new(61).bytes(32 << 20);
    write_file(&a.m("big.bin"), &big, 0o644);
    a.turn("big");
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["objects_uploaded"], 1, "{r:#}");
    let na = project_name(&a, "alpha");
    // A link of 2 MiB/s and `[push] timeout_seconds = 3`: an 8 MiB range
    // takes 4 s (object_store resumes a read cut by the timeout, at most 3
    // times: 12 s, 24 MiB, per request). One request for the whole 32 MiB
    // would need 16 s.
    let slow = SlowProxy::start(s3.port, Duration::ZERO, Duration::from_millis(500));
    let b = second_home(&url, &slow.endpoint());
    edit_config(&b, "[push]\n", "[push]\ntimeout_seconds = 3\n");
    let dir = b.root().join("turn1");
    checkout_turn(&b, &url, &na, "1", &dir).ok();
    assert_eq!(std::fs::read(dir.join("big.bin")).expect("read"), big);
}

/// The names in `dir` that hold `part`.
fn names_with(dir: &Path, part: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(part))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_checkout_killed_midway_leaves_a_staging_directory_the_next_checkout_removes() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = first_home(&url, &s3.endpoint());
    let big = Rng::new(71).bytes((8 << 20) + 5);
    write_file(&a.m("README"), b"readme\n", 0o644);
    write_file(&a.m("big.bin"), &big, 0o644);
    a.turn("t");
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["objects_uploaded"], 1, "{r:#}");
    let na = project_name(&a, "alpha");
    // Another home reads the bucket through a link that holds every
    // answer back for minutes: each checkout stops at big.bin, its
    // temporary file made, README written.
    let slow = SlowProxy::start(s3.port, Duration::from_secs(300), Duration::ZERO);
    let b = second_home(&url, &slow.endpoint());
    let out = b.root().join("out");
    let absent = out.join("turn1");
    let empty = b.root().join("empty");
    std::fs::create_dir_all(&out).expect("mkdir");
    std::fs::create_dir(&empty).expect("mkdir");
    // (where the staging directory appears, DIR)
    for (holder, dir) in [(&out, &absent), (&empty, &empty)] {
        let mut child = b
            .opfs_command(&[
                "remote",
                "checkout",
                &url,
                &na,
                "1",
                &dir.display().to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let midway = wait_for(Duration::from_secs(120), || {
            names_with(holder, "opfs-checkout").iter().any(|s| {
                !names_with(&holder.join(s), "big.bin.opfs-part").is_empty()
                    && holder.join(s).join("README").exists()
            })
        });
        sigkill(child.id() as i32);
        let _ = child.wait();
        assert!(midway, "the checkout never reached big.bin");
        assert_eq!(names_with(holder, "opfs-checkout").len(), 1);
    }
    // The next checkout into the same parent, and into that DIR, removes
    // what the killed ones left (their lock died with them), and writes
    // the turn (without the bucket now: big.bin as its pointer, exit 1).
    std::fs::write(&b.pinned.config, "").expect("config");
    for dir in [&absent, &empty] {
        let run = checkout_turn(&b, &url, &na, "1", dir);
        assert_eq!(run.code, Some(1), "{run}");
        assert!(run.stderr.contains("written as pointer files"), "{run}");
        assert_eq!(
            std::fs::read(dir.join("README")).expect("README"),
            b"readme\n"
        );
    }
    assert!(
        names_with(&out, "opfs-checkout").is_empty(),
        "{:?}",
        names_with(&out, "")
    );
    assert!(
        names_with(&empty, "opfs-checkout").is_empty(),
        "{:?}",
        names_with(&empty, "")
    );
    drop(slow);
}

#[test]
fn a_remote_that_cannot_be_read_leaves_no_local_copy_and_no_lock_file() {
    let f = Fixture::new();
    let url = url_on(free_port());
    let run = f.opfs(&["remote", "list", &url]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("cannot read"), "{run}");
    let left = names_with(&f.pinned.opfs_home.join("remotes"), "");
    assert!(left.is_empty(), "left in remotes/: {left:?}");
    // The next command on that remote takes the lock again.
    let run = f.opfs(&["remote", "list", &url]);
    assert_eq!(run.code, Some(1), "{run}");
}

/// Adds `url.<base>.<var> = <value>` to the fixture's user git
/// configuration (its pinned HOME's `.gitconfig`, never the machine's).
fn user_git_rule(f: &Fixture, base: &str, var: &str, value: &str) {
    let out = Command::new("git")
        .arg("config")
        .arg("--file")
        .arg(f.pinned.home.join(".gitconfig"))
        .args(["--add", &format!("url.{base}.{var}"), value])
        .output()
        .expect("git config");
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn insteadof_rules_are_applied_before_a_remote_is_taken_as_local_or_passed_to_a_helper() {
    let Some(d) = GitDaemon::start() else { return };
    let f = Fixture::new();
    std::fs::create_dir_all(&f.pinned.home).expect("home");
    std::fs::write(&f.pinned.config, "[push]\nmachine = \"m\"\n").expect("config");
    write_file(&f.p("a.txt"), b"a\n", 0o644);
    f.mount();
    f.turn("t");
    // A path that the user's configuration sends to a git daemon: pushed
    // there as any git:// remote, without opfs's local receive-pack
    // (which the daemon would refuse as an unknown service).
    let alias = f.root().join("alias");
    user_git_rule(
        &f,
        &format!("git://127.0.0.1:{}/", d.port),
        "insteadOf",
        &format!("{}/", alias.display()),
    );
    let path = alias.join("r.git").display().to_string();
    f.opfs_c(&["push", &path]).ok();
    let ns = namespace(&f, "m");
    let refs = ls_remote(&d.url());
    assert!(refs.keys().any(|r| r.starts_with(&ns)), "{refs:?}");
    // A rule that turns a remote into a `<transport>::` form (which runs
    // git-remote-<transport> from PATH; ext:: runs any command) is
    // refused naming the rule, to fetch and to push; nothing runs.
    let mark = f.root().join("RAN");
    let helper = format!("ext::sh -c touch% {}% #", mark.display());
    user_git_rule(&f, &helper, "insteadOf", "git://alias.invalid/");
    user_git_rule(&f, &helper, "pushInsteadOf", "git://push-alias.invalid/");
    for (args, rule) in [
        (
            vec!["push", "git://alias.invalid/r.git"],
            "insteadOf = \"git://alias.invalid/\"",
        ),
        (
            vec!["push", "git://push-alias.invalid/r.git"],
            "pushInsteadOf = \"git://push-alias.invalid/\"",
        ),
        (
            vec!["remote", "list", "git://alias.invalid/r.git"],
            "insteadOf = \"git://alias.invalid/\"",
        ),
    ] {
        let run = f.opfs_c(&args);
        assert_ne!(run.code, Some(0), "{run}");
        for part in [rule, "'ext::<address>' form"] {
            assert!(run.stderr.contains(part), "{part:?} not said: {run}");
        }
        assert!(!mark.exists(), "the helper ran: {run}");
    }
    // The same rule met by the daemon's automatic push (the rule added
    // after the mount) is shown by status.
    f.umount();
    configure(&f, "git://alias.invalid/r.git", "m", true);
    f.mount();
    write_file(&f.m("b.txt"), b"b\n", 0o644);
    f.turn("t");
    assert!(
        wait_for(PUSH_WAIT, || push_status(&f, "git://alias.invalid/r.git")
            ["failure"]["message"]
            .as_str()
            .is_some_and(
                |m| m.contains("insteadOf = \"git://alias.invalid/\"")
            )),
        "{:#}",
        f.status()
    );
    assert!(!mark.exists(), "the helper ran");
}

#[test]
fn an_unmount_cuts_short_a_multipart_upload_under_way_and_the_next_mount_pushes_it() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    // Uploads pass at 1 MiB per 8 s per connection: a 17 MiB object (a
    // multipart upload of 8 MiB parts, 2 at once) would take over a
    // minute, longer than an unmount waits for a push to end (20 s).
    let slow = SlowProxy::slow_uploads(s3.port, Duration::from_secs(8));
    let a = Fixture::new();
    configure_bucket(&a, &url, "alpha", &slow.endpoint());
    edit_config(&a, "auto = false", "auto = true");
    a.mount();
    let big = Rng::new(83).bytes((17 << 20) + 3);
    write_file(&a.m("big.bin"), &big, 0o644);
    a.turn("big");
    // The parts are on their way (more than any request without a body).
    assert!(
        wait_for(PUSH_WAIT, || slow
            .sent
            .load(std::sync::atomic::Ordering::SeqCst)
            > 1 << 20),
        "the upload never started: {:#}",
        a.status()
    );
    a.umount();
    // The push ended as interrupted (recorded before the daemon ended),
    // and no multipart upload is left open.
    let status = a.opfs_p(&["status", "--json"]).ok().json();
    let st = status["push"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["remote"] == url.as_str()))
        .cloned()
        .unwrap_or_default();
    assert_eq!(st["failure"]["kind"], "interrupted", "{status:#}");
    let open = s3.boto3(
        "print(len(s3.list_multipart_uploads(Bucket='ckpt').get('Uploads', [])))",
        "list the uploads",
    );
    assert_eq!(open.trim(), "0", "a multipart upload was left open");
    // The next mount (the bucket reached directly now) pushes the object;
    // the proxy drops what is left of the parts that were cut short.
    edit_config(&a, &slow.endpoint(), &s3.endpoint());
    drop(slow);
    a.mount();
    let ns = namespace(&a, "alpha");
    assert!(
        wait_for(PUSH_WAIT, || ls_remote(&url)
            .contains_key(&format!("{ns}/turns/1"))),
        "turn 1 was not pushed at the next mount: {:#}",
        a.status()
    );
    let b = second_home(&url, &s3.endpoint());
    let dir = b.root().join("turn1");
    checkout_turn(&b, &url, &project_name(&a, "alpha"), "1", &dir).ok();
    assert_eq!(std::fs::read(dir.join("big.bin")).expect("read"), big);
}

/// A sparse file of `size` bytes at `path` (through the mount): no disk,
/// only its size, so an object of that size to the bucket.
fn sparse(path: &Path, size: u64) {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(size))
        .expect("sparse file");
}

/// A turn's objects go to the bucket smallest first while they fit in
/// `[push] bucket_turn_budget`; the next is withheld: its pointer is
/// pushed, the push and `opfs status` name it and the fix, a checkout
/// elsewhere says it may have been withheld, and raising the budget then
/// `opfs push --objects` sends it.
#[test]
fn a_turns_objects_beyond_its_bucket_budget_are_withheld_named_and_sent_after_a_raise() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = Fixture::new();
    configure_bucket(&a, &url, "alpha", &s3.endpoint());
    edit_config(&a, "[push]\n", "[push]\nbucket_turn_budget = \"20MiB\"\n");
    a.mount();
    // 25 MiB of objects for no disk at all.
    sparse(&a.m("s12.bin"), 12 << 20);
    sparse(&a.m("s13.bin"), 13 << 20);
    a.turn("sparse");
    let run = a.opfs_c(&["push"]).ok();
    for part in [
        "warning: s13.bin at the end of turn 1 (13631488 bytes",
        "budget of 20971520 bytes",
        "[push] bucket_turn_budget",
        "opfs push --objects",
    ] {
        assert!(run.stdout.contains(part), "{part:?} not said: {run}");
    }
    assert!(!run.stdout.contains("s12.bin"), "{run}");
    let st = push_status(&a, &url);
    assert_eq!(st["withheld"][0]["path"], "s13.bin", "{st:#}");
    assert_eq!(st["withheld"][0]["size"], 13 << 20, "{st:#}");
    assert_eq!(st["withheld"][0]["budget"], 20 << 20, "{st:#}");
    assert_eq!(st["withheld"].as_array().map(Vec::len), Some(1), "{st:#}");
    assert!(st["failure"].is_null(), "{st:#}");
    let warnings = a.status()["warnings"].to_string();
    assert!(
        warnings.contains("s13.bin at the end of turn 1")
            && warnings.contains("bucket_turn_budget"),
        "{warnings}"
    );
    // Only the one that fit is in the bucket.
    let keys = s3.boto3(
        "for o in s3.list_objects_v2(Bucket='ckpt').get('Contents', []):\n    print(o['Key'], o['Size'])",
        "list the bucket",
    );
    assert_eq!(keys.lines().count(), 1, "{keys}");
    assert!(
        keys.contains(&format!("{} {}", object_key(&vec![0; 12 << 20]), 12 << 20)),
        "{keys}"
    );

    // Both pointers are on the remote; elsewhere the withheld one checks
    // out as its pointer, and the message says why it may be missing.
    let b = Fixture::new();
    configure_bucket(&b, &url, "beta", &s3.endpoint());
    let na = namespace(&a, "alpha")
        .trim_start_matches("refs/opfs/")
        .to_string();
    let checkout = |dir: &Path| {
        b.opfs(&[
            "--json",
            "remote",
            "checkout",
            &url,
            &na,
            "1",
            &dir.display().to_string(),
        ])
    };
    let dir = b.root().join("turn1");
    let run = checkout(&dir);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains("withheld") && run.stderr.contains("bucket_turn_budget"),
        "{run}"
    );
    // One JSON value: the report, carrying the error.
    let r: serde_json::Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run}"));
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("withheld")),
        "{r:#}"
    );
    assert_eq!(r["missing_objects"][0]["path"], "s13.bin", "{r:#}");
    assert_eq!(r["resolved"], 1, "{r:#}");
    assert_eq!(
        std::fs::read(dir.join("s12.bin")).expect("s12").len(),
        12 << 20
    );
    assert!(std::fs::read_to_string(dir.join("s13.bin"))
        .expect("s13")
        .starts_with("opfs-pointer"));

    // The fix the messages give.
    edit_config(&a, "\"20MiB\"", "\"64MiB\"");
    let r = a.opfs_c(&["push", "--objects", "--json"]).ok().json();
    assert_eq!(r["objects_backfilled"], 1, "{r:#}");
    assert_eq!(r["bytes_backfilled"], 13 << 20, "{r:#}");
    assert_eq!(
        r["objects_withheld"].as_array().map(Vec::len),
        Some(0),
        "{r:#}"
    );
    let st = push_status(&a, &url);
    assert!(
        st["withheld"].as_array().is_some_and(Vec::is_empty),
        "{st:#}"
    );
    std::fs::remove_dir_all(&dir).expect("rm");
    let r = checkout(&dir).ok().json();
    assert_eq!(r["resolved"], 2, "{r:#}");
    assert_eq!(
        std::fs::read(dir.join("s13.bin")).expect("s13"),
        vec![0; 13 << 20]
    );
    // Withheld means not in the bucket: under the small budget again,
    // an object the bucket holds is not said to be withheld.
    edit_config(&a, "\"64MiB\"", "\"20MiB\"");
    let r = a.opfs_c(&["push", "--objects", "--json"]).ok().json();
    assert_eq!(
        r["objects_withheld"].as_array().map(Vec::len),
        Some(0),
        "{r:#}"
    );
    let st = push_status(&a, &url);
    assert!(
        st["withheld"].as_array().is_some_and(Vec::is_empty),
        "{st:#}"
    );
}

/// No object larger than the per-turn budget reaches the bucket: the
/// daemon's automatic push withholds it, says so in its log and records
/// it for `opfs status`, and the pointer still reaches the remote.
#[test]
fn an_object_larger_than_the_turn_budget_is_withheld_by_the_automatic_push() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let f = Fixture::new();
    configure_bucket(&f, &url, "alpha", &s3.endpoint());
    edit_config(&f, "auto = false", "auto = true");
    edit_config(&f, "[push]\n", "[push]\nbucket_turn_budget = 8388608\n");
    f.mount();
    sparse(&f.m("huge.bin"), (8 << 20) + 1);
    f.turn("huge");
    // The pusher logs what it withheld once the push is recorded.
    let log = || std::fs::read_to_string(f.state_dir().join("daemon.log")).unwrap_or_default();
    assert!(
        wait_for(PUSH_WAIT, || log()
            .contains("huge.bin at the end of turn 1")),
        "the push never said it withheld huge.bin: {}\nstatus: {:#}",
        log(),
        f.status()
    );
    assert!(
        log().contains("larger than the bucket's per-turn budget of 8388608 bytes"),
        "{}",
        log()
    );
    let ns = namespace(&f, "alpha");
    assert!(ls_remote(&url).contains_key(&format!("{ns}/turns/1")));
    let st = push_status(&f, &url);
    assert_eq!(st["withheld"][0]["path"], "huge.bin", "{st:#}");
    assert_eq!(st["withheld"][0]["size"], (8 << 20) + 1, "{st:#}");
    let keys = s3.boto3(
        "print(len(s3.list_objects_v2(Bucket='ckpt').get('Contents', [])))",
        "count the objects",
    );
    assert_eq!(keys.trim(), "0", "nothing reached the bucket");
}

/// `[push] bucket_turn_budget` takes bytes, a size or `"none"`; anything
/// else is refused at push and at mount, naming the file and the key.
#[test]
fn a_bucket_turn_budget_that_is_no_size_is_refused_at_push_and_at_mount() {
    let (f, _, _) = pushed_to_a_path();
    let config = f.pinned.config.display().to_string();
    for ok in ["\"none\"", "0", "\"512MiB\"", "1048576"] {
        edit_config(
            &f,
            "[push]\n",
            &format!("[push]\nbucket_turn_budget = {ok}\n"),
        );
        f.opfs_c(&["push"]).ok();
        edit_config(&f, &format!("bucket_turn_budget = {ok}\n"), "");
    }
    for bad in ["\"lots\"", "-1"] {
        edit_config(
            &f,
            "[push]\n",
            &format!("[push]\nbucket_turn_budget = {bad}\n"),
        );
        let run = f.opfs_c(&["push"]);
        assert_eq!(run.code, Some(2), "{run}");
        assert!(run.stderr.contains(&config), "{run}");
        assert!(
            run.stderr.contains("[push] bucket_turn_budget") && run.stderr.contains("\"none\""),
            "{run}"
        );
        edit_config(&f, &format!("bucket_turn_budget = {bad}\n"), "");
    }
    edit_config(&f, "[push]\n", "[push]\nbucket_turn_budget = \"lots\"\n");
    f.umount();
    let run = f.try_mount(&[], &[]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("[push] bucket_turn_budget"), "{run}");
}

/// A field of `/proc/PID/status` in KiB (`VmHWM`, `VmRSS`).
fn proc_kib(pid: u64, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The `blake3` line of the pointer file `path` in `rev` of `git_dir`.
fn pointer_hash(git_dir: &Path, rev: &str, path: &str) -> String {
    let text = git_dir_at(git_dir, &["show", &format!("{rev}:{path}")]);
    text.lines()
        .find_map(|l| l.strip_prefix("blake3 "))
        .unwrap_or_else(|| panic!("{rev}:{path} is no pointer: {text}"))
        .to_string()
}

/// A big file written in place by a few bytes is exported and pushed
/// without ever being held whole in memory: the daemon's export hashes
/// the file (and the version put together from its saved ranges) as it
/// reads it, and the push uploads the turn-start version put together as
/// a stream. The pointers name the BLAKE3 of the bytes `opfs show` gives
/// for each turn, and the bucket holds exactly those bytes.
#[test]
fn a_big_file_written_in_place_is_exported_and_pushed_in_bounded_memory() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let a = Fixture::new();
    configure_bucket(&a, &url, "alpha", &s3.endpoint());
    a.mount();
    const SIZE: usize = 64 << 20;
    let v1 = Rng::new(81).bytes(SIZE);
    write_file(&a.m("db.bin"), &v1, 0o644);
    a.turn("new");
    let git_dir = a.state_dir().join("export.git");
    let exported = |n: u32| {
        wait_for(Duration::from_secs(120), || {
            git_in(
                &git_dir,
                &[
                    "rev-parse",
                    "--verify",
                    "-q",
                    &format!("refs/opfs/turns/{n}"),
                ],
            )
            .status
            .success()
        })
    };
    assert!(exported(1), "turn 1 was not exported");
    let pid = a.status()["pid"].as_u64().expect("daemon pid");
    // The daemon's peak memory from here on.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM");
    let rest = proc_kib(pid, "VmRSS");
    let mut v2 = v1.clone();
    v2[40_000_000..40_000_004].copy_from_slice(b"ZZZZ");
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(a.m("db.bin"))
            .expect("open");
        f.seek(SeekFrom::Start(40_000_000)).expect("seek");
        f.write_all(b"ZZZZ").expect("write in place");
    }
    a.turn("in place");
    assert!(exported(2), "turn 2 was not exported");
    let peak = proc_kib(pid, "VmHWM");
    eprintln!("daemon: VmRSS {rest} KiB at the reset, VmHWM {peak} KiB after the export");
    assert!(
        peak.saturating_sub(rest) < (SIZE as u64 / 1024) / 2,
        "the daemon's export of a {} MiB file written in place grew its memory from {rest} KiB to {peak} KiB",
        SIZE >> 20
    );
    // The pointers name the bytes `opfs show` gives for each turn's end.
    for (turn, want) in [(1, &v1), (2, &v2)] {
        let hash = pointer_hash(&git_dir, &format!("refs/opfs/turns/{turn}"), "db.bin");
        assert_eq!(hash, blake3::hash(want).to_hex().as_str(), "turn {turn}");
    }
    let shown = a
        .opfs_command(&[
            "-C".as_ref(),
            a.mnt.as_os_str(),
            "show".as_ref(),
            "2:db.bin".as_ref(),
        ])
        .output()
        .expect("opfs show");
    assert!(
        shown.status.success() && shown.stdout == v1,
        "opfs show 2:db.bin is not the file at the end of turn 1"
    );
    // Turn 1's bytes are only the file's now with its saved ranges laid
    // over: put together as they are uploaded.
    let mnt = a.mnt.display().to_string();
    let Some((run, rss)) = opfs_with_maxrss(&a, &["-C", &mnt, "push", "--json"]) else {
        return;
    };
    assert_eq!(run.code, Some(0), "{run}");
    eprintln!("opfs push: maxrss {rss} KiB");
    let r = run.json();
    assert_eq!(r["objects_uploaded"], 2, "{r:#}");
    assert_eq!(r["objects_missing"], serde_json::json!([]), "{r:#}");
    assert!(
        rss < (SIZE as u64 / 1024) * 3 / 2,
        "opfs push of a {} MiB version put together from ranges peaked at {rss} KiB",
        SIZE >> 20
    );
    let copy = a.root().join("object");
    for want in [&v1, &v2] {
        let key = object_key(want);
        s3.boto3(
            &format!("s3.download_file('ckpt', '{key}', '{}')", copy.display()),
            "read the object",
        );
        let got = std::fs::read(&copy).expect("the object");
        assert!(&got == want, "{key} holds other bytes");
    }
}

/// A big file written in place through the mount while the version of an
/// earlier turn's end (its saved ranges laid over that file) is pushed:
/// that version is not lost, only moving. The daemon's automatic push
/// fails for now (kind `bucket`) and is tried again; once the writes
/// stop, it goes through with the object in the bucket, equal to what
/// `opfs show` gives for that turn, and nothing is reported missing.
#[test]
fn a_big_file_written_in_place_during_its_push_is_pushed_once_the_writes_pause() {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let f = Fixture::new();
    configure_bucket(&f, &url, "alpha", &s3.endpoint());
    edit_config(&f, "auto = false", "auto = true");
    f.mount();
    const SIZE: usize = 32 << 20;
    write_file(&f.m("db.bin"), &Rng::new(61).bytes(SIZE), 0o644);
    f.turn("new");
    assert!(
        wait_for(PUSH_WAIT, || push_status(&f, &url)["last_turn"] == 1),
        "turn 1 was not pushed: {:#}",
        f.status()
    );
    // Random small writes in place, until told to stop.
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let writes = std::sync::Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, writes) = (stop.clone(), writes.clone());
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(f.m("db.bin"))
            .expect("open db.bin");
        std::thread::spawn(move || {
            let mut rng = Rng::new(62);
            while !stop.load(Ordering::SeqCst) {
                let len = 1 + rng.below(8192);
                let at = rng.below(SIZE - len) as u64;
                file.write_all_at(&rng.bytes(len), at)
                    .expect("write in place");
                writes.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    assert!(
        wait_for(Duration::from_secs(60), || writes.load(Ordering::SeqCst)
            >= 100),
        "the writer did not write"
    );
    // Turn 2 ends while the file keeps being written (in turn 3): its end
    // is the file with turn 3's saved ranges laid over it.
    f.turn("scribbled");
    let attempted = wait_for(PUSH_WAIT, || {
        let st = push_status(&f, &url);
        st["last_turn"] == 2 || st["failure"]["attempts"].as_u64().is_some_and(|n| n >= 1)
    });
    let during = push_status(&f, &url);
    stop.store(true, Ordering::SeqCst);
    writer.join().expect("writer");
    assert!(attempted, "turn 2 was never pushed: {during:#}");
    eprintln!(
        "{} writes; the push during them: {:#}",
        writes.load(Ordering::SeqCst),
        during["failure"]
    );
    if !during["failure"].is_null() {
        assert_eq!(during["failure"]["kind"], "bucket", "{during:#}");
        let msg = during["failure"]["message"].to_string();
        assert!(msg.contains("being written through the mount"), "{msg}");
    }
    assert!(
        wait_for(PUSH_WAIT, || {
            let st = push_status(&f, &url);
            st["last_turn"] == 2 && st["failure"].is_null()
        }),
        "turn 2 was not pushed once the writes stopped: {:#}",
        push_status(&f, &url)
    );
    let st = push_status(&f, &url);
    assert!(
        st["missing"].as_array().is_none_or(Vec::is_empty),
        "a version still on this machine was reported lost: {st:#}"
    );
    let shown = f
        .opfs_command(&[
            "-C".as_ref(),
            f.mnt.as_os_str(),
            "show".as_ref(),
            "3:db.bin".as_ref(),
        ])
        .output()
        .expect("opfs show");
    assert!(shown.status.success() && shown.stdout.len() == SIZE);
    let git_dir = f.state_dir().join("export.git");
    assert_eq!(
        pointer_hash(&git_dir, "refs/opfs/turns/2", "db.bin"),
        blake3::hash(&shown.stdout).to_hex().as_str()
    );
    let copy = f.root().join("object");
    let key = object_key(&shown.stdout);
    s3.boto3(
        &format!("s3.download_file('ckpt', '{key}', '{}')", copy.display()),
        "read the object",
    );
    assert!(
        std::fs::read(&copy).expect("the object") == shown.stdout,
        "{key} holds other bytes than opfs show 3:db.bin"
    );
}

/// A version recorded as gone for good stops being reported once the
/// bucket holds its object: after another machine uploaded the same
/// content (`opfs push --objects` finds it there), and after the same
/// content is written again and pushed.
#[test]
fn a_missing_object_that_reaches_the_bucket_is_no_longer_reported() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let f = Fixture::new();
    configure(&f, &url, "alpha", false);
    f.mount();
    let c = Rng::new(71).bytes(9 << 20);
    let e = Rng::new(72).bytes(9 << 20);
    write_file(&f.m("c.bin"), &c, 0o644);
    write_file(&f.m("e.bin"), &e, 0o644);
    f.turn("big");
    // Pushed with no bucket; the only copies, the project's files, are
    // deleted while unmounted.
    f.opfs_c(&["push"]).ok();
    f.umount();
    std::fs::remove_file(f.p("c.bin")).expect("rm");
    std::fs::remove_file(f.p("e.bin")).expect("rm");
    configure_bucket(&f, &url, "alpha", &s3.endpoint());
    f.mount();
    f.opfs_c(&["push", "--objects"]).ok();
    let missing = |f: &Fixture| {
        let mut paths: Vec<String> = push_status(f, &url)["missing"]
            .as_array()
            .map(|a| a.iter().map(|m| m["path"].to_string()).collect())
            .unwrap_or_default();
        paths.sort();
        paths
    };
    assert_eq!(missing(&f), ["\"c.bin\"", "\"e.bin\""]);
    // Another machine sends c.bin's content to the bucket.
    let b = second_home(&url, &s3.endpoint());
    b.mount();
    write_file(&b.m("c.bin"), &c, 0o644);
    b.turn("c");
    b.opfs_c(&["push"]).ok();
    s3.boto3(
        &format!("s3.head_object(Bucket='ckpt', Key='{}')", object_key(&c)),
        "the other machine's object",
    );
    f.opfs_c(&["push", "--objects"]).ok();
    assert_eq!(missing(&f), ["\"e.bin\""], "{:#}", push_status(&f, &url));
    // e.bin's content written again, and pushed: its object goes up.
    write_file(&f.m("again.bin"), &e, 0o644);
    f.turn("again");
    f.opfs_c(&["push"]).ok();
    assert!(missing(&f).is_empty(), "{:#}", push_status(&f, &url));
    let warnings = f.status()["warnings"].to_string();
    assert!(!warnings.contains("without its bytes"), "{warnings}");
}

/// A directory named like a checkout's staging directory that no checkout
/// made (it carries no mark) is never swept: beside DIR it survives the
/// checkout; inside DIR, DIR is not empty.
#[test]
fn a_directory_named_like_a_staging_directory_is_never_swept() {
    let (f, repo, ns) = pushed_to_a_path();
    let url = repo.display().to_string();
    let par = f.root().join("par");
    let beside = par.join(".co.opfs-checkout-42");
    std::fs::create_dir_all(&beside).expect("mkdir");
    std::fs::write(beside.join("x"), b"mine\n").expect("x");
    let dir = par.join("sub");
    checkout_turn(&f, &url, &ns, "head", &dir).ok();
    assert_eq!(std::fs::read(dir.join("b.txt")).expect("b.txt"), b"b\n");
    assert_eq!(std::fs::read(beside.join("x")).expect("x kept"), b"mine\n");
    let holder = f.root().join("holder");
    let inside = holder.join(".opfs-checkout-7");
    std::fs::create_dir_all(&inside).expect("mkdir");
    std::fs::write(inside.join("y"), b"mine too\n").expect("y");
    let run = checkout_turn(&f, &url, &ns, "head", &holder);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("is not empty"), "{run}");
    assert_eq!(
        std::fs::read(inside.join("y")).expect("y kept"),
        b"mine too\n"
    );
}

/// Reads apply the user's `insteadOf` rules only: git ignores
/// `pushInsteadOf` to fetch, so an `ext::` one refuses the push but not
/// `opfs remote list` or `checkout`; nothing runs.
#[test]
fn a_push_insteadof_rule_does_not_refuse_a_read() {
    let (f, repo, ns) = pushed_to_a_path();
    let url = repo.display().to_string();
    std::fs::create_dir_all(&f.pinned.home).expect("home");
    let mark = f.root().join("RAN");
    let helper = format!("ext::sh -c touch% {}% #", mark.display());
    user_git_rule(
        &f,
        &helper,
        "pushInsteadOf",
        &format!("{}/", f.root().display()),
    );
    let list = f.opfs(&["--json", "remote", "list", &url]).ok().json();
    assert!(
        list.as_array()
            .is_some_and(|l| l.iter().any(|p| p["name"] == ns.as_str())),
        "{list:#}"
    );
    let dir = f.root().join("co");
    checkout_turn(&f, &url, &ns, "head", &dir).ok();
    assert_eq!(std::fs::read(dir.join("b.txt")).expect("b.txt"), b"b\n");
    let run = f.opfs_c(&["push"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("pushInsteadOf"), "{run}");
    assert!(!mark.exists(), "the helper ran");
}

/// A remote whose turn 1 holds a name of 300 bytes and turn 2 a symbolic
/// link whose target is 4096 bytes (`git hash-object --literally`).
const LONG_NAMES: &str = r#"
import subprocess, sys
G = sys.argv[1]
def obj(t, data):
    return subprocess.run(['git', '--git-dir', G, 'hash-object', '-w', '--literally', '-t', t, '--stdin'],
                          input=data, capture_output=True, check=True).stdout.decode().strip()
def tree(entries):
    return obj('tree', b''.join(m.encode() + b' ' + n + b'\0' + bytes.fromhex(s) for m, n, s in entries))
def commit(t, msg):
    return obj('commit', ('tree %s\nauthor a <a@b> 1700000000 +0000\ncommitter a <a@b> 1700000000 +0000\n\n%s\n' % (t, msg)).encode())
def ref(name, sha):
    subprocess.run(['git', '--git-dir', G, 'update-ref', name, sha], check=True)
ok = obj('blob', b'ok\n')
t1 = tree([('100644', b'a.txt', ok), ('40000', b'd', tree([('100644', b'n' * 300, ok)]))])
t2 = tree([('100644', b'a.txt', ok), ('120000', b'link-too-long', obj('blob', b'a' * 4096))])
ref('refs/opfs/long/0000000000000001/turns/1', commit(t1, 'turn 1'))
ref('refs/opfs/long/0000000000000001/turns/2', commit(t2, 'turn 2'))
ref('refs/opfs/long/0000000000000001/project', commit(tree([]), 'p\n\nopfs-project: /long'))
"#;

/// A name or a symlink target too long for the file system fails the
/// checkout naming the tree entry and the turn, never the staging
/// directory; nothing is left.
#[test]
fn a_name_too_long_fails_the_checkout_naming_the_tree_entry() {
    let f = Fixture::new();
    let remote = f.root().join("long.git");
    git_at(f.root(), &["init", "-q", "--bare", "long.git"]);
    let script = f.root().join("long.py");
    std::fs::write(&script, LONG_NAMES).expect("script");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&remote)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = remote.display().to_string();
    let long = format!("d/{}", "n".repeat(300));
    for (turn, entry, what) in [
        ("1", long.as_str(), "300 bytes"),
        ("2", "link-too-long", "4096 bytes"),
    ] {
        let dir = f.root().join(format!("co{turn}"));
        let run = checkout_turn(&f, &url, "long/0000000000000001", turn, &dir);
        assert_eq!(run.code, Some(1), "{run}");
        for part in [entry, what, &format!("turn {turn}")] {
            assert!(run.stderr.contains(part), "{part:?} not said: {run}");
        }
        assert!(!run.stderr.contains("opfs-checkout"), "{run}");
        assert!(!dir.exists());
        assert!(names_with(f.root(), "opfs-checkout").is_empty());
    }
}

/// `opfs push --objects` counts the upload in its `elapsed_ms`: uploads
/// pass at 1 MiB per 500 ms, so sending a 9 MiB object takes at least
/// 2250 ms (over two connections at most, the larger carries half).
#[test]
fn push_objects_counts_its_upload_in_elapsed_ms() {
    let Some(d) = GitDaemon::start() else { return };
    let Some(s3) = Moto::start() else { return };
    let url = d.url();
    let slow = SlowProxy::slow_uploads(s3.port, Duration::from_millis(500));
    let a = first_home(&url, &slow.endpoint());
    sparse(&a.m("big.bin"), 9 << 20);
    a.turn("t");
    edit_config(&a, "[push]\n", "[push]\nbucket_turn_budget = \"1MiB\"\n");
    let r = a.opfs_c(&["push", "--json"]).ok().json();
    assert_eq!(r["objects_uploaded"], 0, "withheld: {r:#}");
    edit_config(&a, "bucket_turn_budget = \"1MiB\"\n", "");
    let r = a.opfs_c(&["push", "--objects", "--json"]).ok().json();
    assert_eq!(r["objects_backfilled"], 1, "{r:#}");
    let ms = r["elapsed_ms"].as_u64().unwrap_or_default();
    assert!(ms >= 2250, "elapsed_ms {ms} leaves out the upload: {r:#}");
}
