//! `opfs run` against real FUSE mounts and real bubblewrap: every escape
//! attempt of `docs/sandbox.md` must fail inside, and every "must work" item must
//! work. Needs /dev/fuse, fusermount3 and bwrap; fails with a clear message
//! when one is missing.
//!
//! Every test has its own temp root under `CARGO_TARGET_TMPDIR`, or under
//! `/var/tmp` when that lies under /tmp (a checkout under /tmp): never under
//! /tmp, which is private inside the sandbox and would hide the test's
//! files, or take their writes, for the wrong reason. Each root has its own
//! `OPFS_HOME` and `HOME`.

// A failed unwrap is a failed test, with the error in the message.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{TestEnv, OPFS};

/// A temp dir the sandbox shows as it is: `CARGO_TARGET_TMPDIR`, unless it
/// lies under /tmp (private inside), then `/var/tmp`.
fn visible_tmp() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let target = target
        .canonicalize()
        .unwrap_or_else(|_| target.to_path_buf());
    if !target.starts_with("/tmp") {
        return target;
    }
    let var_tmp = Path::new("/var/tmp").canonicalize().unwrap();
    assert!(
        !var_tmp.starts_with("/tmp"),
        "the target dir {} and /var/tmp both lie under /tmp, which the sandbox hides: \
         set CARGO_TARGET_DIR to a directory outside /tmp",
        target.display()
    );
    var_tmp
}

fn require_tools() {
    common::require_fuse();
    assert!(
        common::which("bwrap").is_some(),
        "these tests need bubblewrap (apt-get install bubblewrap, or scripts/setup)"
    );
}

/// Held (shared) by every `World::run`, alone by `World::run_alone`.
static SETUP: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A test world: a project with a sibling, a user home with an ssh key, an
/// opfs home, all under one temp root; unmounts whatever is left on drop.
struct World {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    project: PathBuf,
    sibling: PathBuf,
    /// `HOME` (with an ssh key), `OPFS_HOME` and `OPFS_CONFIG` of every
    /// command the world runs.
    pinned: TestEnv,
}

impl World {
    fn new() -> World {
        require_tools();
        let tmp = tempfile::Builder::new()
            .prefix("sandbox-")
            .tempdir_in(visible_tmp())
            .unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let w = World {
            project: root.join("project"),
            sibling: root.join("sibling"),
            pinned: TestEnv {
                opfs_home: root.join("opfs-home"),
                home: root.join("home"),
                config: root.join("config.toml"),
            },
            root,
            _tmp: tmp,
        };
        std::fs::create_dir_all(w.project.join("src")).unwrap();
        std::fs::create_dir_all(&w.sibling).unwrap();
        std::fs::create_dir_all(w.pinned.home.join(".ssh")).unwrap();
        std::fs::write(
            w.pinned.home.join(".ssh/id_ed25519"),
            "SECRET-KEY-MATERIAL\n",
        )
        .unwrap();
        std::fs::write(w.project.join("a.txt"), "original a\n").unwrap();
        std::fs::write(w.project.join("c.txt"), "original c\n").unwrap();
        std::fs::write(w.sibling.join("target.txt"), "sibling original\n").unwrap();
        w
    }

    /// `opfs` with this world's environment.
    fn opfs(&self) -> Command {
        self.command(OPFS)
    }

    /// `program` with this world's environment: the shared pinned one
    /// (`OPFS_HOME`, `HOME` with the ssh key, `OPFS_CONFIG`, ...) plus the
    /// paths the scripts name.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        self.pinned
            .pin(&mut c)
            .env("PROJECT", &self.project)
            .env("SIBLING", &self.sibling)
            .env("OPFS", OPFS)
            .stdin(Stdio::null());
        c
    }

    /// `opfs -C PROJECT run EXTRA... -- sh -c SCRIPT`.
    fn run(&self, extra: &[&str], script: &str) -> Output {
        let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
        self.run_unlocked(extra, script)
    }

    /// [`World::run`] while no other test's sandbox starts: for a command
    /// that removes a worktree from its running sandbox, which reaches the
    /// copies of its shared folder that sandboxes started meanwhile hold
    /// (bwrap fails to set up if a mount vanishes while it remounts them;
    /// docs/mcp.md "Known gaps").
    fn run_alone(&self, extra: &[&str], script: &str) -> Output {
        let _alone = SETUP.write().unwrap_or_else(|e| e.into_inner());
        self.run_unlocked(extra, script)
    }

    fn run_unlocked(&self, extra: &[&str], script: &str) -> Output {
        let mut c = self.opfs();
        c.arg("-C")
            .arg(&self.project)
            .arg("run")
            .args(extra)
            .args(["--", "sh", "-c", script]);
        c.output().unwrap()
    }

    /// Mounts the project at `<root>/mnt` (for tests that want a running
    /// daemon across runs).
    fn mount(&self) -> PathBuf {
        let mp = self.root.join("mnt");
        std::fs::create_dir_all(&mp).unwrap();
        let out = self
            .opfs()
            .arg("mount")
            .arg(&self.project)
            .arg(&mp)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount failed: {}", show(&out));
        mp
    }

    fn mounts_under_root(&self) -> Vec<PathBuf> {
        opfs_testutil::mount_points()
            .into_iter()
            .filter(|m| m.starts_with(&self.root))
            .collect()
    }

    /// The rewind points as JSON (`opfs rewind --json`).
    fn turns(&self) -> Vec<serde_json::Value> {
        let out = self
            .opfs()
            .arg("-C")
            .arg(&self.project)
            .args(["rewind", "--all", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "rewind list failed: {}", show(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for m in self.mounts_under_root() {
            let _ = Command::new("fusermount3").arg("-uz").arg(&m).status();
        }
    }
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `script` (which prints ESCAPED if an attempt succeeded) and checks
/// that the sandbox really ran it and nothing escaped.
fn assert_contained(w: &World, extra: &[&str], script: &str) -> Output {
    let out = w.run(extra, &format!("echo RAN; {script}; exit 0"));
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        stdout(&out).contains("RAN"),
        "command did not run: {}",
        show(&out)
    );
    assert!(!stdout(&out).contains("ESCAPED"), "{}", show(&out));
    out
}

// ---------------------------------------------------------------- escapes

/// `opfs run` in a folder that holds the state dir (the home folder, with
/// the state under ~/.local/share) is refused naming the state dir and
/// `OPFS_HOME`, not a mountpoint the user never chose, and makes nothing
/// inside the project.
#[test]
fn a_run_in_the_folder_holding_the_state_dir_names_the_state_dir() {
    let mut w = World::new();
    w.pinned.opfs_home = w.project.join(".local/share/opfs");
    let before = common::manifest_without_git(&w.project);
    let out = w.run(&[], "echo ran > ran.txt");
    assert!(!out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("state dir") && err.contains("OPFS_HOME"),
        "the error names the state dir and OPFS_HOME: {err}"
    );
    assert!(
        !err.contains("choose a directory outside it"),
        "not a mountpoint error: {err}"
    );
    common::assert_manifest_eq(
        "nothing made in the project",
        &before,
        &common::manifest_without_git(&w.project),
    );
}

#[test]
fn writing_to_home_fails() {
    let w = World::new();
    assert_contained(
        &w,
        &[],
        r#"echo x > "$HOME/pwned" && echo ESCAPED; mkdir "$HOME/d" && echo ESCAPED"#,
    );
    assert!(!w.pinned.home.join("pwned").exists());
    assert!(!w.pinned.home.join("d").exists());
}

#[test]
fn writing_to_etc_and_usr_fails() {
    let w = World::new();
    let name = format!("opfs-sandbox-test-{}", std::process::id());
    assert_contained(
        &w,
        &[],
        &format!(
            r#"echo x > /etc/{name} && echo ESCAPED; echo x > /usr/{name} && echo ESCAPED; echo x >> /etc/hostname && echo ESCAPED"#
        ),
    );
    assert!(!Path::new("/etc").join(&name).exists());
    assert!(!Path::new("/usr").join(&name).exists());
}

#[test]
fn writing_to_a_sibling_of_the_project_fails() {
    let w = World::new();
    assert_contained(
        &w,
        &[],
        r#"echo x > "$SIBLING/new" && echo ESCAPED; echo x >> "$SIBLING/target.txt" && echo ESCAPED; rm "$SIBLING/target.txt" && echo ESCAPED"#,
    );
    assert!(!w.sibling.join("new").exists());
    assert_eq!(
        std::fs::read_to_string(w.sibling.join("target.txt")).unwrap(),
        "sibling original\n"
    );
}

#[test]
fn the_ssh_key_of_the_home_is_unreadable() {
    let w = World::new();
    let out = assert_contained(
        &w,
        &[],
        r#"cat "$HOME/.ssh/id_ed25519" && echo ESCAPED; ls -A "$HOME/.ssh"; cat "$HOME"/.ssh/* 2>/dev/null"#,
    );
    assert!(
        !stdout(&out).contains("SECRET-KEY-MATERIAL"),
        "{}",
        show(&out)
    );
}

#[test]
fn a_credential_file_and_a_configured_hide_are_unreadable() {
    let w = World::new();
    std::fs::write(
        w.pinned.home.join(".netrc"),
        "machine x password NETRC-SECRET\n",
    )
    .unwrap();
    std::fs::write(w.root.join("secret.txt"), "CONFIGURED-SECRET\n").unwrap();
    std::fs::write(
        &w.pinned.config,
        format!(
            "[sandbox]\nhide = [\"{}\"]\n",
            w.root.join("secret.txt").display()
        ),
    )
    .unwrap();
    let out = assert_contained(
        &w,
        &[],
        &format!(
            r#"cat "$HOME/.netrc"; cat {}"#,
            w.root.join("secret.txt").display()
        ),
    );
    assert!(!stdout(&out).contains("NETRC-SECRET"), "{}", show(&out));
    assert!(
        !stdout(&out).contains("CONFIGURED-SECRET"),
        "{}",
        show(&out)
    );
}

/// Git's credential store under `$XDG_CONFIG_HOME` and under
/// `~/.config/git`, and the files the AWS variables name outside `~/.aws`,
/// are unreadable inside: opfs reads some of them itself (the bucket of
/// `opfs push`), and each lets the command act as the user.
#[test]
fn credential_files_the_environment_names_are_unreadable() {
    let w = World::new();
    let xdg = w.root.join("xdg");
    let elsewhere = w.root.join("elsewhere");
    std::fs::create_dir_all(xdg.join("git")).unwrap();
    std::fs::create_dir_all(w.pinned.home.join(".config/git")).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let files = [
        (xdg.join("git/credentials"), "XDG-GIT-SECRET"),
        (
            w.pinned.home.join(".config/git/credentials"),
            "HOME-GIT-SECRET",
        ),
        (elsewhere.join("aws-creds"), "AWS-FILE-SECRET"),
        (elsewhere.join("aws-config"), "AWS-CONFIG-SECRET"),
        (elsewhere.join("token"), "AWS-TOKEN-SECRET"),
    ];
    for (path, secret) in &files {
        std::fs::write(path, format!("{secret}\n")).unwrap();
    }
    let script = format!(
        "echo RAN; cat {} 2>/dev/null; exit 0",
        files
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    let mut c = w.opfs();
    let out = common::xdg_config_home(&mut c, &xdg)
        .env("AWS_SHARED_CREDENTIALS_FILE", &files[2].0)
        .env("AWS_CONFIG_FILE", &files[3].0)
        .env("AWS_WEB_IDENTITY_TOKEN_FILE", &files[4].0)
        .arg("-C")
        .arg(&w.project)
        .args(["run", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(stdout(&out).contains("RAN"), "{}", show(&out));
    for (_, secret) in &files {
        assert!(
            !stdout(&out).contains(secret),
            "{secret} readable inside: {}",
            show(&out)
        );
    }
}

#[test]
fn a_loopback_listener_outside_is_unreachable_without_net() {
    let w = World::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    assert_contained(
        &w,
        &[],
        &format!(r#"bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo ESCAPED"#),
    );
    assert!(
        listener.accept().is_err(),
        "the listener outside got a connection from the sandbox"
    );
}

#[test]
fn the_state_dir_and_control_socket_are_invisible() {
    let w = World::new();
    let mp = w.mount();
    let socket = std::fs::read_dir(w.pinned.opfs_home.join("projects"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("control.sock");
    assert!(socket.exists(), "the daemon's socket should exist outside");
    let out = assert_contained(
        &w,
        &[],
        &format!(
            r#"test -e {sock} && echo ESCAPED; ls -A "$OPFS_HOME"; ls "$OPFS_HOME/projects" && echo ESCAPED; ls -A {mp}/ >/dev/null && echo MP_READABLE; echo x > {mp}/via-mp && echo MP_IS_THE_PROJECT"#,
            sock = socket.display(),
            mp = mp.display()
        ),
    );
    // Only RAN and the mountpoint's lines: the state dir lists as empty.
    let text = stdout(&out);
    let listed: Vec<&str> = text
        .lines()
        .filter(|l| !matches!(*l, "RAN" | "MP_READABLE" | "MP_IS_THE_PROJECT"))
        .collect::<Vec<_>>();
    assert!(listed.is_empty(), "state dir visible: {}", show(&out));
    // The mountpoint's path shows the project's mount inside (sandbox.md,
    // "The mountpoint's path shows the same view"): a write there is a
    // write through the journal, recorded like one at the project's path.
    assert!(text.contains("MP_IS_THE_PROJECT"), "{}", show(&out));
    assert!(w.project.join("via-mp").exists());
    let diff = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["diff", "1", "--name-status"])
        .output()
        .unwrap();
    assert!(stdout(&diff).contains("via-mp"), "{}", show(&diff));
}

#[test]
fn opfs_turn_and_rewind_inside_cannot_rewrite_history() {
    let w = World::new();
    let mp = w.mount();
    // Some history: turn 2 changes a.txt.
    let t = w
        .opfs()
        .arg("-C")
        .arg(&mp)
        .args(["turn", "--label", "work"])
        .output()
        .unwrap();
    assert!(t.status.success(), "{}", show(&t));
    std::fs::write(mp.join("a.txt"), "changed by the user's agent\n").unwrap();
    let before = w.turns();
    let out = w.run(
        &[],
        &format!(
            r#"echo RAN
"$OPFS" -C "$PROJECT" turn --label evil && echo ESCAPED
"$OPFS" -C "$PROJECT" rewind 1 && echo ESCAPED
"$OPFS" -C {mp} rewind 1 && echo ESCAPED
"$OPFS" -C "$PROJECT" rewind && echo ESCAPED
"$OPFS" umount {mp} && echo ESCAPED
exit 0"#,
            mp = mp.display()
        ),
    );
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        stdout(&out).contains("RAN") && !stdout(&out).contains("ESCAPED"),
        "{}",
        show(&out)
    );
    let after = w.turns();
    assert_eq!(before, after, "history changed from inside the sandbox");
    assert_eq!(
        std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
        "changed by the user's agent\n"
    );
    assert!(w.mounts_under_root().iter().any(|m| Path::new(m) == mp));
}

#[test]
fn a_symlink_in_the_project_pointing_outside_cannot_be_written_through() {
    let w = World::new();
    symlink(&w.sibling, w.project.join("out-dir")).unwrap();
    symlink(w.sibling.join("target.txt"), w.project.join("out-file")).unwrap();
    symlink("../sibling", w.project.join("out-rel")).unwrap();
    assert_contained(
        &w,
        &[],
        r#"echo x > out-dir/new && echo ESCAPED; echo x >> out-file && echo ESCAPED; echo x > out-rel/rel && echo ESCAPED; cat out-file >/dev/null && echo READ_OK"#,
    );
    assert!(!w.sibling.join("new").exists());
    assert!(!w.sibling.join("rel").exists());
    assert_eq!(
        std::fs::read_to_string(w.sibling.join("target.txt")).unwrap(),
        "sibling original\n"
    );
}

#[test]
fn dot_dot_from_the_project_bind_cannot_escape() {
    let w = World::new();
    assert_contained(
        &w,
        &[],
        r#"echo x > "$PROJECT/../sibling/dd1" && echo ESCAPED
echo x > "$PROJECT/src/../../sibling/dd2" && echo ESCAPED
cd "$PROJECT/src" && echo x > ../../dd3 && echo ESCAPED
cd "$PROJECT/.." && mkdir dd4 && echo ESCAPED
cd / && echo x > "$PROJECT/../../dd5" && echo ESCAPED"#,
    );
    for n in ["sibling/dd1", "sibling/dd2", "dd3", "dd4"] {
        assert!(!w.root.join(n).exists(), "{n} was created");
    }
    assert!(!w.root.parent().unwrap().join("dd5").exists());
}

#[test]
fn host_processes_and_capabilities_are_out_of_reach() {
    let w = World::new();
    let out = assert_contained(
        &w,
        &[],
        r#"grep CapEff /proc/self/status
for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -q 'moun[t] -f' && echo ESCAPED
mount -o remount,rw / 2>/dev/null && echo ESCAPED
umount "$OPFS_HOME" 2>/dev/null && echo ESCAPED"#,
    );
    assert!(
        stdout(&out).contains("CapEff:\t0000000000000000"),
        "{}",
        show(&out)
    );
}

#[test]
fn secret_environment_variables_are_removed() {
    // Not while a test removes a worktree from a running sandbox.
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    std::fs::write(
        &w.pinned.config,
        "[sandbox]\nsecret_env = [\"MY_API_SECRET\"]\n",
    )
    .unwrap();
    let out = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .env("GH_TOKEN", "gh-secret")
        .env("MY_API_SECRET", "mine")
        .env("HARMLESS", "kept")
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "echo gh=$GH_TOKEN my=$MY_API_SECRET h=$HARMLESS mode=$OPFS_SANDBOX",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(stdout(&out).trim(), "gh= my= h=kept mode=workspace-write");
}

#[test]
fn without_bwrap_the_command_is_refused_not_run() {
    let w = World::new();
    // $OPFS_BWRAP names a missing binary.
    let out = w
        .opfs()
        .env("OPFS_BWRAP", w.root.join("no-such-bwrap"))
        .arg("-C")
        .arg(&w.project)
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "echo ran > \"$SIBLING/ran\"; echo ran > ran",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("never runs a command unsandboxed"), "{err}");
    // bwrap not on $PATH.
    let out = w
        .opfs()
        .env("PATH", w.root.join("empty-path"))
        .arg("-C")
        .arg(&w.project)
        .args([
            "run",
            "--",
            "/bin/sh",
            "-c",
            "echo ran > \"$SIBLING/ran\"; echo ran > ran",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(!w.sibling.join("ran").exists());
    assert!(!w.project.join("ran").exists());
    assert!(w.mounts_under_root().is_empty());
}

#[test]
fn when_bwrap_cannot_build_the_sandbox_the_command_is_refused() {
    // Not while a test removes a worktree from a running sandbox.
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    let fake = w.root.join("fake-bwrap");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'bwrap: fake setup failure' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = w
        .opfs()
        .env("OPFS_BWRAP", &fake)
        .arg("-C")
        .arg(&w.project)
        .args(["run", "--", "sh", "-c", "echo ran > \"$SIBLING/ran\""])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot set up the sandbox"), "{err}");
    assert!(err.contains("fake setup failure"), "{err}");
    assert!(!w.sibling.join("ran").exists());
    assert!(
        w.mounts_under_root().is_empty(),
        "the private mount was left behind"
    );
}

#[test]
fn a_sandbox_whose_setup_raced_with_an_unmount_is_built_again() {
    // Not while a test removes a worktree from a running sandbox.
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    // bwrap copies every mount of the host and remounts each read-only; a
    // mount another process unmounts and removes meanwhile makes it fail.
    // A bwrap that fails so once, then is the real one: the run goes on.
    let w = World::new();
    let real = common::which("bwrap").unwrap();
    let fake = w.root.join("racy-bwrap");
    let once = w.root.join("raced");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nif [ ! -e '{once}' ]; then : > '{once}'; echo 'bwrap: Can'\\''t bind \
             mount /oldroot/ on /newroot/: Unable to apply mount flags: remount \
             \"/newroot/gone\": No such file or directory' >&2; exit 1; fi\nexec '{real}' \"$@\"\n",
            once = once.display(),
            real = real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = w
        .opfs()
        .env("OPFS_BWRAP", &fake)
        .arg("-C")
        .arg(&w.project)
        .args(["run", "--", "sh", "-c", "echo ran > ran"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(once.exists(), "the fake bwrap was not used: {}", show(&out));
    assert_eq!(
        std::fs::read_to_string(w.project.join("ran")).unwrap(),
        "ran\n"
    );
}

#[test]
fn a_daemon_killed_during_the_run_is_said_and_the_run_fails() {
    // The command ignores its failed writes and exits 0: opfs run says the
    // daemon stopped and does not report success.
    let w = World::new();
    // Made through the mount (the command can write only there), read
    // outside.
    let ready = w.project.join("ready");
    let go = w.root.join("go");
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    let child = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["run", "--", "sh", "-c"])
        .arg(format!(
            "echo one > a.txt; : > '{ready}'; while [ ! -e '{go}' ]; do sleep 0.05; done; \
             echo two > a.txt; echo WROTE=$?; exit 0",
            ready = ready.display(),
            go = go.display()
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The run's own daemon: `opfs mount -f ... PROJECT MOUNTPOINT`.
    let killed = Command::new("pkill")
        .arg("-KILL")
        .arg("-f")
        .arg(format!("mount -f .* {} ", w.project.display()))
        .status()
        .unwrap();
    assert!(
        killed.success(),
        "no daemon of {} to kill",
        w.project.display()
    );
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        stdout(&out).contains("WROTE=") && !stdout(&out).contains("WROTE=0"),
        "{}",
        show(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stopped while the command ran"), "{err}");
    assert!(err.contains(&w.project.display().to_string()), "{err}");
    // What it wrote before the kill reached the project; what after, not.
    assert_eq!(
        std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
        "one\n"
    );
}

// ---------------------------------------------------------------- must work

#[test]
fn project_writes_land_are_captured_and_a_rewind_undoes_them() {
    let w = World::new();
    let out = w.run(
        &["--turn", "agent work"],
        r#"set -e
echo "agent a" > a.txt
echo new > b.txt
rm c.txt
mkdir -p d/e && echo deep > d/e/f.txt
sed -i 's/agent/AGENT/' a.txt
pwd"#,
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        stdout(&out).trim(),
        w.project.to_str().unwrap(),
        "cwd inside"
    );
    // The writes landed in the project.
    assert_eq!(
        std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
        "AGENT a\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.project.join("b.txt")).unwrap(),
        "new\n"
    );
    assert!(!w.project.join("c.txt").exists());
    // The private mount is gone again.
    assert!(
        w.mounts_under_root().is_empty(),
        "{:?}",
        w.mounts_under_root()
    );
    // --turn opened a labelled turn that recorded the paths.
    let turns = w.turns();
    let t = turns
        .iter()
        .find(|t| t["label"] == "agent work")
        .unwrap_or_else(|| panic!("no turn labelled 'agent work': {turns:?}"));
    let paths: Vec<&str> = t["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for p in ["a.txt", "b.txt", "c.txt", "d"] {
        assert!(paths.contains(&p), "{p} not captured: {paths:?}");
    }
    // A rewind from outside undoes them.
    let n = t["turn"].as_u64().unwrap().to_string();
    let r = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["rewind", &n])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", show(&r));
    assert_eq!(
        std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
        "original a\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.project.join("c.txt")).unwrap(),
        "original c\n"
    );
    assert!(!w.project.join("b.txt").exists());
    assert!(!w.project.join("d").exists());
}

#[test]
fn an_existing_mount_is_used_and_left_running() {
    // Not while a test removes a worktree from a running sandbox.
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    let mp = w.mount();
    std::fs::create_dir_all(mp.join("src/deep")).unwrap();
    // Started from inside the mountpoint: the cwd maps to the project path.
    let out = w
        .opfs()
        .current_dir(mp.join("src/deep"))
        .args([
            "run",
            "--turn",
            "via mount",
            "--",
            "sh",
            "-c",
            "pwd; echo hi > here.txt",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        stdout(&out).trim(),
        w.project.join("src/deep").to_str().unwrap()
    );
    assert!(w.mounts_under_root().iter().any(|m| Path::new(m) == mp));
    assert_eq!(
        std::fs::read_to_string(w.project.join("src/deep/here.txt")).unwrap(),
        "hi\n"
    );
    let turns = w.turns();
    let t = turns.iter().find(|t| t["label"] == "via mount").unwrap();
    assert!(
        t["paths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "src/deep/here.txt"),
        "{t}"
    );
}

#[test]
fn writable_dirs_are_writable() {
    let w = World::new();
    let cache = w.root.join("cache");
    let cfg_cache = w.root.join("cfg-cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(&cfg_cache).unwrap();
    std::fs::write(
        &w.pinned.config,
        format!(
            "[sandbox]\nwritable = [\"{}\", \"~/missing-is-skipped\"]\n",
            cfg_cache.display()
        ),
    )
    .unwrap();
    let out = w.run(
        &["--writable", cache.to_str().unwrap()],
        &format!(
            r#"echo c > {}/x && echo d > {}/y && echo x > "$SIBLING/no" ; echo tmp > /tmp/t && cat /tmp/t"#,
            cache.display(),
            cfg_cache.display()
        ),
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(std::fs::read_to_string(cache.join("x")).unwrap(), "c\n");
    assert_eq!(std::fs::read_to_string(cfg_cache.join("y")).unwrap(), "d\n");
    assert!(!w.sibling.join("no").exists());
    assert_eq!(stdout(&out).trim(), "tmp");
}

/// The binary under test where the sandbox shows it: a copy in the
/// world's root if it lies under /tmp (a checkout there), which is private
/// inside.
fn visible_opfs(w: &World) -> PathBuf {
    if !Path::new(OPFS).canonicalize().unwrap().starts_with("/tmp") {
        return PathBuf::from(OPFS);
    }
    let copy = w.root.join("opfs");
    std::fs::hard_link(OPFS, &copy)
        .or_else(|_| std::fs::copy(OPFS, &copy).map(|_| ()))
        .unwrap();
    copy
}

/// Inside the sandbox: `opfs mcp` driven as an MCP client drives it, then
/// raw requests on the narrow socket. Prints `MCP_*` and `RAW` lines.
const NARROW_CLIENT: &str = r#"
import json, os, socket, subprocess, sys
p = subprocess.Popen([sys.argv[1], "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def send(m):
    p.stdin.write(json.dumps(m) + chr(10)); p.stdin.flush()
def rpc(i, method, params):
    send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
    while True:
        line = p.stdout.readline()
        if not line:
            raise SystemExit("opfs mcp closed its output")
        m = json.loads(line)
        if m.get("id") == i:
            return m
rpc(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
print("MCP_LOG " + json.dumps(rpc(2, "tools/call", {"name": "history_log", "arguments": {}})))
print("MCP_WT " + json.dumps(rpc(3, "tools/call", {"name": "worktree_list", "arguments": {}})))
print("MCP_BAD " + json.dumps(rpc(4, "tools/call", {"name": "rewind", "arguments": {"to": 1}})))
p.stdin.close()
print("MCP_RC %d" % p.wait())
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["OPFS_MCP_SOCKET"])
f = s.makefile("rw")
for line in sys.stdin:
    f.write(line); f.flush()
    print("RAW " + f.readline().strip())
"#;

/// Requests no narrow socket may run: control requests, tools that do not
/// exist, extra fields, bad JSON.
const REFUSED: &[&str] = &[
    r#"{"op":"rewind","to":1,"dry_run":false}"#,
    r#"{"op":"turn","label":"evil","id":null}"#,
    r#"{"op":"unmount"}"#,
    r#"{"op":"status"}"#,
    r#"{"op":"commit"}"#,
    r#"{"tool":"rewind","arguments":{"to":1}}"#,
    r#"{"tool":"turn","arguments":{"label":"evil"}}"#,
    r#"{"tool":"gc","arguments":{}}"#,
    r#"{"tool":"history_log","arguments":{},"project":"/elsewhere"}"#,
    r#"not json"#,
];

#[test]
fn mcp_inside_the_sandbox_reaches_only_its_tools_through_the_narrow_socket() {
    let w = World::new();
    let bin = visible_opfs(&w);
    let client = w.root.join("client.py");
    std::fs::write(&client, NARROW_CLIENT).unwrap();
    let requests = w.root.join("requests.jsonl");
    let mut lines: Vec<&str> = REFUSED.to_vec();
    lines.push(r#"{"tool":"worktree_merge","arguments":{"name":"x","force":true}}"#);
    lines.push(r#"{"tool":"history_log","arguments":{"limit":1}}"#);
    std::fs::write(
        &requests,
        lines.join(
            "
",
        ) + "
",
    )
    .unwrap();
    let out = w.run(
        &["--turn", "t1"],
        &format!(
            r#"echo one > one.txt; /usr/bin/python3 {client} {bin} < {requests}; echo "CLIENT_RC=$?"; echo "HOME_LS=[$(ls -A "$OPFS_HOME")]"; "$OPFS" -C "$PROJECT" turn --label evil && echo ESCAPED; true"#,
            client = client.display(),
            bin = bin.display(),
            requests = requests.display(),
        ),
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{}", show(&out));
    assert!(text.contains("CLIENT_RC=0"), "{}", show(&out));
    assert!(!text.contains("ESCAPED"), "{}", show(&out));
    assert!(
        text.contains("HOME_LS=[]"),
        "the state dir is hidden: {}",
        show(&out)
    );
    let field = |tag: &str| -> serde_json::Value {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .unwrap_or_else(|| panic!("no {tag}: {}", show(&out)));
        serde_json::from_str(line.trim()).unwrap()
    };
    // The MCP tools work inside, for this project: its history and its
    // (empty) worktree list.
    let log = field("MCP_LOG ");
    assert_eq!(log["result"]["isError"], false, "{log}");
    let log_text = log["result"]["content"][0]["text"].as_str().unwrap();
    let turns: serde_json::Value = serde_json::from_str(log_text).unwrap();
    assert_eq!(turns, log["result"]["structuredContent"], "{log}");
    let turns = turns["turns"].clone();
    assert_eq!(turns[0]["label"], "t1", "{turns}");
    assert!(turns[0]["added"].as_u64() >= Some(1), "one.txt: {turns}");
    let wt = field("MCP_WT ");
    assert_eq!(wt["result"]["isError"], false, "{wt}");
    assert_eq!(
        wt["result"]["structuredContent"],
        serde_json::json!({"worktrees": []}),
        "{wt}"
    );
    assert!(
        field("MCP_BAD ").get("error").is_some(),
        "an unknown tool is a JSON-RPC error"
    );
    assert_eq!(field("MCP_RC ").as_i64(), Some(0));

    // Raw requests on the narrow socket: only the tools run.
    let raw: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("RAW "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(raw.len(), lines.len(), "{}", show(&out));
    for (req, answer) in REFUSED.iter().zip(&raw) {
        let msg = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with("refused:"),
            "{req} must be refused: {answer}"
        );
    }
    let merge = &raw[REFUSED.len()];
    let msg = merge["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("bad arguments") && msg.contains("force"),
        "{merge}"
    );
    let last = &raw[REFUSED.len() + 1];
    assert_eq!(last["ok"][0]["label"], "t1", "{last}");

    // Nothing those requests asked for happened, and the socket is gone.
    let labels: Vec<_> = w.turns().iter().map(|t| t["label"].clone()).collect();
    assert!(!labels.iter().any(|l| l == "evil"), "{labels:?}");
    assert!(
        labels.iter().any(|l| l == "t1"),
        "the run's turn is still there: {labels:?}"
    );
    let leftovers: Vec<_> = walk_names(&w.pinned.opfs_home)
        .into_iter()
        .filter(|n| n.ends_with(".sock") && n.contains("mcp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn walk_names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            out.push(p.to_string_lossy().into_owned());
            if p.is_dir() && !p.is_symlink() {
                out.extend(walk_names(&p));
            }
        }
    }
    out
}

#[test]
fn the_agent_hook_inside_the_sandbox_says_turns_are_opened_outside() {
    // `opfs integrate` configures the hook user-wide, so it also runs when
    // the agent runs inside `opfs run`. With `--turn` the user asked for
    // one turn for the whole run, so the hook opens none; it must not
    // claim that nothing is recorded (the mount records into the turn
    // opened outside), nor block.
    let w = World::new();
    let bin = visible_opfs(&w);
    let out = w.run(
        &["--turn", "outside"],
        &format!(
            r#"echo '{{"hook_event_name":"UserPromptSubmit","prompt":"p","session_id":"s"}}' | OPFS_HOOK_STRICT=1 {} hook; echo "rc=$?"; echo x > made.txt"#,
            bin.display()
        ),
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{}", show(&out));
    assert!(text.contains("rc=0"), "{}", show(&out));
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let msg = first["systemMessage"].as_str().unwrap();
    assert!(
        msg.contains("cannot open turns") && msg.contains("are recorded"),
        "{msg}"
    );
    let turns = w.turns();
    let t = turns.iter().find(|t| t["label"] == "outside").unwrap();
    assert!(
        t["paths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "made.txt"),
        "{t}"
    );
}

#[test]
fn a_writable_file_is_writable_and_its_directory_is_not() {
    // An agent's own config file (`--writable ~/.claude.json`).
    let w = World::new();
    let cfg = w.pinned.home.join(".agent.json");
    std::fs::create_dir_all(&w.pinned.home).unwrap();
    std::fs::write(&cfg, "{}\n").unwrap();
    let out = w.run(
        &["--writable", cfg.to_str().unwrap()],
        &format!(
            r#"echo '{{"n": 1}}' > {cfg} && echo WROTE; echo x > {dir}/other && echo ESCAPED"#,
            cfg = cfg.display(),
            dir = w.pinned.home.display()
        ),
    );
    assert!(stdout(&out).contains("WROTE"), "{}", show(&out));
    assert!(!stdout(&out).contains("ESCAPED"), "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), "{\"n\": 1}\n");
    assert!(!w.pinned.home.join("other").exists());
    // A missing one is refused (usage), naming it.
    let missing = w.pinned.home.join("missing.json");
    let out = w.run(&["--writable", missing.to_str().unwrap()], "echo RAN");
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(!stdout(&out).contains("RAN"));
}

#[test]
fn a_writable_root_inside_a_hidden_path_is_refused() {
    let w = World::new();
    let out = w.run(
        &["--writable", w.pinned.home.join(".ssh").to_str().unwrap()],
        "echo RAN",
    );
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(!stdout(&out).contains("RAN"));
}

#[test]
fn net_gives_the_network() {
    let w = World::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accept = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    });
    let out = w.run(
        &["--net"],
        &format!(
            r#"bash -c 'echo hello-from-sandbox > /dev/tcp/127.0.0.1/{port}' && echo CONNECTED"#
        ),
    );
    assert!(out.status.success(), "{}", show(&out));
    assert!(stdout(&out).contains("CONNECTED"), "{}", show(&out));
    assert_eq!(accept.join().unwrap().trim(), "hello-from-sandbox");
}

#[test]
fn the_exit_status_comes_back() {
    let w = World::new();
    assert_eq!(w.run(&[], "exit 42").status.code(), Some(42));
    assert_eq!(w.run(&[], "exit 0").status.code(), Some(0));
    assert_eq!(w.run(&[], "kill -TERM $$").status.code(), Some(128 + 15));
    let missing = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["run", "--", "no-such-command-xyz"])
        .output()
        .unwrap();
    assert_ne!(missing.status.code(), Some(0), "{}", show(&missing));
}

#[test]
fn signals_are_forwarded_to_the_command() {
    // Not while a test removes a worktree from a running sandbox.
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    let mut child = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args([
            "run",
            "--",
            "sh",
            "-c",
            r#"trap 'echo got-term > signalled; exit 7' TERM; echo up > ready; while :; do sleep 0.05; done"#,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !w.project.join("ready").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(7), "{err}");
    assert_eq!(
        std::fs::read_to_string(w.project.join("signalled")).unwrap(),
        "got-term\n"
    );
    assert!(w.mounts_under_root().is_empty());
}

#[test]
fn read_only_mode_allows_reading_and_only_tmp_writes() {
    let w = World::new();
    let out = w.run(
        &["--sandbox", "read-only"],
        r#"cat a.txt; echo x > a.txt && echo ESCAPED; echo x > new.txt && echo ESCAPED; echo t > /tmp/t && echo TMP_OK"#,
    );
    assert!(out.status.success(), "{}", show(&out));
    let s = stdout(&out);
    assert!(
        s.contains("original a") && s.contains("TMP_OK") && !s.contains("ESCAPED"),
        "{}",
        show(&out)
    );
    assert_eq!(
        std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
        "original a\n"
    );
    assert!(!w.project.join("new.txt").exists());
}

#[test]
fn danger_full_access_runs_unsandboxed_only_when_named() {
    let w = World::new();
    let out = w.run(
        &["--sandbox", "danger-full-access"],
        r#"echo x > "$SIBLING/free"; echo $OPFS_SANDBOX"#,
    );
    assert!(out.status.success(), "{}", show(&out));
    assert!(w.sibling.join("free").exists());
    assert_eq!(stdout(&out).trim(), "danger-full-access");
    // Any other spelling is a usage error, never a weaker sandbox.
    let out = w.run(&["--sandbox", "danger"], "echo RAN");
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(!stdout(&out).contains("RAN"));
}

// ---------------------------------------------------------------- docs/agents.md

#[test]
fn the_agents_guide_worked_example_runs() {
    // Its `opfs run`s start sandboxes: not while a test removes a worktree
    // from a running one (see `World::run_alone`).
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    // The examples as they are in the checkout, copied where the sandbox
    // shows them (a checkout under /tmp is private inside it).
    let examples = copy_examples(&w);
    let bin_dir = Path::new(OPFS).parent().unwrap();
    let out = w
        .command("bash")
        .env(
            "PATH",
            format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap()),
        )
        .current_dir(&w.root)
        .arg(examples.join("agent-session.sh"))
        .arg(&w.project)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(stdout(&out).contains("example passed"), "{}", show(&out));
}

#[test]
fn the_state_dir_is_invisible_with_a_private_mount_too() {
    let w = World::new();
    // No `opfs mount`: opfs run mounts under the state dir itself.
    let out = assert_contained(
        &w,
        &[],
        r#"ls -A "$OPFS_HOME" | grep . && echo ESCAPED; "$OPFS" -C "$PROJECT" turn && echo ESCAPED"#,
    );
    assert!(w.mounts_under_root().is_empty(), "{}", show(&out));
    assert_eq!(w.turns().len(), 1, "a turn was opened from inside");
}

/// `docs/examples/*.sh`, byte for byte and with their modes, in
/// `<root>/examples`; the copy's directory.
fn copy_examples(w: &World) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples");
    let dst = w.root.join("examples");
    std::fs::create_dir(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "sh") {
            std::fs::copy(&p, dst.join(p.file_name().unwrap())).unwrap();
        }
    }
    dst
}

#[test]
fn a_command_under_the_private_tmp_is_refused_naming_it() {
    let w = World::new();
    let dir = tempfile::Builder::new()
        .prefix("opfs-run-cmd-")
        .tempdir_in("/tmp")
        .unwrap();
    let script = dir.path().canonicalize().unwrap().join("agent.sh");
    std::fs::write(&script, "#!/bin/sh\necho RAN\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let run = |c: &mut Command| c.output().unwrap();
    // By path, and found on $PATH.
    for out in [
        run(w
            .opfs()
            .arg("-C")
            .arg(&w.project)
            .args(["run", "--"])
            .arg(&script)),
        run(w
            .opfs()
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    dir.path().display(),
                    std::env::var("PATH").unwrap()
                ),
            )
            .arg("-C")
            .arg(&w.project)
            .args(["run", "--", "agent.sh"])),
    ] {
        assert_eq!(out.status.code(), Some(2), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&*script.to_string_lossy()) && err.contains("/tmp"),
            "the error must name the command and /tmp: {}",
            show(&out)
        );
        assert!(!stdout(&out).contains("RAN"), "{}", show(&out));
    }
    // Nothing was mounted for the refused runs.
    assert!(w.mounts_under_root().is_empty());
}

/// Inside the sandbox: raw `worktree_list` and `worktree_create` requests
/// on the narrow socket. Prints `RAW` lines.
const WORKTREE_CLIENT: &str = r#"
import json, os, socket
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["OPFS_MCP_SOCKET"])
f = s.makefile("rw")
for req in [{"tool": "worktree_list", "arguments": {}}, {"tool": "worktree_create", "arguments": {"name": "w2"}}, {"tool": "worktree_discard", "arguments": {"name": "w1"}}]:
    f.write(json.dumps(req) + chr(10)); f.flush()
    print("RAW " + f.readline().strip())
"#;

#[test]
fn worktrees_mounted_at_start_are_editable_inside_at_the_path_the_tools_give() {
    let w = World::new();
    let _mp = w.mount();
    let out = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["worktree", "create", "w1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let client = w.root.join("wt-client.py");
    std::fs::write(&client, WORKTREE_CLIENT).unwrap();
    let out = w.run(
        &[],
        &format!(
            r#"cat /tmp/opfs-worktrees/w1/a.txt; echo "from inside" > /tmp/opfs-worktrees/w1/a.txt && echo WROTE; echo "HOME_LS=[$(ls -A "$OPFS_HOME")]"; /usr/bin/python3 {client}; true"#,
            client = client.display()
        ),
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text.contains("original a") && text.contains("WROTE"),
        "the worktree is readable and writable inside: {}",
        show(&out)
    );
    assert!(
        text.contains("HOME_LS=[]"),
        "the state dir stays hidden: {}",
        show(&out)
    );
    let raw: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("RAW "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(raw.len(), 3, "{}", show(&out));
    let rows = raw[0]["ok"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", raw[0]));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["path"], "/tmp/opfs-worktrees/w1", "{rows:?}");
    assert_eq!(
        rows[0]["changed"], 1,
        "the write inside landed in the worktree: {rows:?}"
    );
    let created = &raw[1]["ok"];
    assert_eq!(created["name"], "w2", "{}", raw[1]);
    assert_eq!(
        created["path"], "/tmp/opfs-worktrees/w2",
        "a worktree made inside shows there at once: {}",
        raw[1]
    );
    assert!(created.get("note").is_none(), "{}", raw[1]);
    // The user's worktree cannot be discarded from inside (the agent's
    // tools act only on the agent's worktrees): refused at once, still
    // mounted.
    let refused = raw[2]["error"]["message"].as_str().unwrap_or_default();
    assert!(refused.contains("made by the user"), "{}", raw[2]);
    let list = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["worktree", "list", "--json"])
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "w1" && r["mounted"] == true),
        "{rows}"
    );
    // The project itself is untouched; the worktree holds the change.
    assert_eq!(
        std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
        "original a\n"
    );
    let diff = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["worktree", "diff", "w1"])
        .output()
        .unwrap();
    assert!(stdout(&diff).contains("+from inside"), "{}", show(&diff));
}

/// Inside the sandbox: `opfs mcp` driven as an MCP client drives it
/// (argv[1] is the binary): creates worktrees, works in them at the path
/// the tool answers with, discards one (refused while this process's
/// working directory is in it). Prints tagged lines.
const CREATE_INSIDE_CLIENT: &str = r#"
import json, os, subprocess, sys
p = subprocess.Popen([sys.argv[1], "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def send(m):
    p.stdin.write(json.dumps(m) + chr(10)); p.stdin.flush()
n = [0]
def call(name, args):
    n[0] += 1
    send({"jsonrpc": "2.0", "id": n[0], "method": "tools/call", "params": {"name": name, "arguments": args}})
    while True:
        line = p.stdout.readline()
        if not line:
            raise SystemExit("opfs mcp closed its output")
        m = json.loads(line)
        if m.get("id") == n[0]:
            r = m["result"]
            if r["isError"]:
                return True, r["content"][0]["text"]
            v = r["structuredContent"]
            return False, v["worktrees"] if name == "worktree_list" else v
send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
p.stdout.readline()
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
err, w2 = call("worktree_create", {"name": "w2"})
print("CREATED " + json.dumps([err, w2]))
path = w2["path"]
print("BEFORE " + open(os.path.join(path, "a.txt")).read().strip())
with open(os.path.join(path, "a.txt"), "w") as f:
    f.write("from inside w2\n")
os.mkdir(os.path.join(path, "newdir"))
with open(os.path.join(path, "newdir", "b.txt"), "w") as f:
    f.write("new in w2\n")
print("AFTER " + open(os.path.join(path, "a.txt")).read().strip())
err, rows = call("worktree_list", {})
print("LIST " + json.dumps(rows))
err, w3 = call("worktree_create", {"name": "w3"})
os.chdir(w3["path"])
print("BUSY " + json.dumps(call("worktree_discard", {"name": "w3"})))
os.chdir("/")
print("DISCARD " + json.dumps(call("worktree_discard", {"name": "w3"})))
print("SHOWN " + json.dumps(sorted(os.listdir("/tmp/opfs-worktrees"))))
print("W3_AFTER " + json.dumps(os.listdir("/tmp/opfs-worktrees/w3")))
try:
    os.mkdir("/tmp/opfs-worktrees/planted")
    print("ESCAPED: the shared folder is writable")
except OSError as e:
    print("PLANT_REFUSED %d" % e.errno)
p.stdin.close()
print("MCP_RC %d" % p.wait())
"#;

#[test]
fn a_worktree_created_inside_is_editable_there_at_once() {
    let w = World::new();
    let bin = visible_opfs(&w);
    let client = w.root.join("create-client.py");
    std::fs::write(&client, CREATE_INSIDE_CLIENT).unwrap();
    let out = w.run_alone(
        &[],
        &format!(
            r#"/usr/bin/python3 {client} {bin}; echo "CLIENT_RC=$?"; echo "HOME_LS=[$(ls -A "$OPFS_HOME")]"; true"#,
            client = client.display(),
            bin = bin.display(),
        ),
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{}", show(&out));
    assert!(text.contains("CLIENT_RC=0"), "{}", show(&out));
    assert!(!text.contains("ESCAPED"), "{}", show(&out));
    let field = |tag: &str| -> serde_json::Value {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .unwrap_or_else(|| panic!("no {tag}: {}", show(&out)));
        serde_json::from_str(line.trim()).unwrap()
    };
    let created = field("CREATED ");
    assert_eq!(created[0], false, "{created}");
    assert_eq!(created[1]["path"], "/tmp/opfs-worktrees/w2", "{created}");
    assert!(created[1].get("note").is_none(), "{created}");
    // Readable and writable inside, in the same run, at that path.
    assert!(text.contains("BEFORE original a"), "{}", show(&out));
    assert!(text.contains("AFTER from inside w2"), "{}", show(&out));
    let rows = field("LIST ");
    assert!(
        rows.as_array().unwrap().iter().any(|r| r["name"] == "w2"
            && r["path"] == "/tmp/opfs-worktrees/w2"
            && r["changed"] == 3),
        "the list gives the inside path and the writes: {rows}"
    );
    // Discarding one a process inside uses is refused and leaves it; once
    // the process has left, it is unbound and discarded.
    let busy = field("BUSY ");
    assert_eq!(busy[0], true, "{busy}");
    assert!(
        busy[1]
            .as_str()
            .unwrap_or_default()
            .contains("in use inside this sandbox"),
        "{busy}"
    );
    let discarded = field("DISCARD ");
    assert_eq!(discarded[0], false, "{discarded}");
    assert_eq!(discarded[1]["discarded"], "w3", "{discarded}");
    // w3's mount is gone from the sandbox; its empty mountpoint stays
    // until the run ends.
    assert_eq!(field("SHOWN "), serde_json::json!(["w2", "w3"]));
    assert_eq!(field("W3_AFTER "), serde_json::json!([]));
    assert!(text.contains("PLANT_REFUSED "), "{}", show(&out));
    assert_eq!(field("MCP_RC ").as_i64(), Some(0));
    assert!(
        text.contains("HOME_LS=[]"),
        "the state dir stays hidden: {}",
        show(&out)
    );

    // The writes landed in the worktree, not the project.
    assert_eq!(
        std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
        "original a\n"
    );
    assert!(!w.project.join("newdir").exists());
    let diff = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["worktree", "diff", "w2"])
        .output()
        .unwrap();
    assert!(
        stdout(&diff).contains("+from inside w2") && stdout(&diff).contains("+new in w2"),
        "{}",
        show(&diff)
    );
    // After the run: the worktree stays mounted at its own path outside,
    // and nothing else is mounted (no bind, no shared folder, no private
    // project mount); the shared folder is gone.
    let list = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["worktree", "list", "--json"])
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "w3 was discarded: {rows:?}");
    assert_eq!(rows[0]["mounted"], true, "{rows:?}");
    let outside = PathBuf::from(rows[0]["path"].as_str().unwrap());
    assert_eq!(
        w.mounts_under_root(),
        vec![outside],
        "mounts left by the run"
    );
    // Of the shared folder and its staging folder, only their empty
    // mountpoint directories are left (the next run removes them).
    let shared: Vec<_> = walk_names(&w.pinned.opfs_home)
        .into_iter()
        .filter(|n| n.contains("/sandbox-worktrees/"))
        .collect();
    assert_eq!(shared.len(), 2, "{shared:?}");
    assert_eq!(
        shared.iter().filter(|n| n.ends_with("-stage")).count(),
        1,
        "{shared:?}"
    );
    for dir in &shared {
        assert!(
            std::fs::read_dir(dir).unwrap().next().is_none(),
            "{shared:?}"
        );
    }
}

/// Inside the sandbox: creates worktree argv[1] through the raw narrow
/// socket and prints the answer as `RAW ...`.
const CREATE_RAW: &str = r#"
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["OPFS_MCP_SOCKET"])
f = s.makefile("rw")
f.write(json.dumps({"tool": "worktree_create", "arguments": {"name": sys.argv[1]}}) + chr(10)); f.flush()
print("RAW " + f.readline().strip())
"#;

/// The mount points of `w` below its shared worktree folders (not their
/// private staging folders: `staging_mounts`).
fn shared_mounts(w: &World) -> Vec<PathBuf> {
    w.mounts_under_root()
        .into_iter()
        .filter(|m| m.to_string_lossy().contains("/sandbox-worktrees/"))
        .filter(|m| staging_folder(m).is_none())
        .collect()
}

/// The staging folder (`sandbox-worktrees/<pid>-stage`) `m` lies in, if any.
fn staging_folder(m: &Path) -> Option<PathBuf> {
    m.ancestors()
        .find(|a| a.to_string_lossy().ends_with("-stage"))
        .map(Path::to_path_buf)
}

/// The mount points of `w` in the shared folders' staging folders.
fn staging_mounts(w: &World) -> Vec<PathBuf> {
    w.mounts_under_root()
        .into_iter()
        .filter(|m| m.to_string_lossy().contains("/sandbox-worktrees/"))
        .filter(|m| staging_folder(m).is_some())
        .collect()
}

#[test]
fn a_killed_command_leaves_no_shared_worktree_mount() {
    let w = World::new();
    let client = w.root.join("create-raw.py");
    std::fs::write(&client, CREATE_RAW).unwrap();
    let out = w.run(
        &[],
        &format!(
            r#"/usr/bin/python3 {client} w2; echo hi > /tmp/opfs-worktrees/w2/a.txt && echo WROTE; kill -9 $$"#,
            client = client.display()
        ),
    );
    assert_eq!(out.status.code(), Some(128 + 9), "{}", show(&out));
    assert!(stdout(&out).contains("WROTE"), "{}", show(&out));
    assert!(shared_mounts(&w).is_empty(), "{:?}", shared_mounts(&w));
    assert!(staging_mounts(&w).is_empty(), "{:?}", staging_mounts(&w));
    // What is left mounted is the worktree at its own path, nothing else.
    assert_eq!(
        w.mounts_under_root().len(),
        1,
        "{:?}",
        w.mounts_under_root()
    );
}

#[test]
fn a_shared_folder_left_by_a_killed_opfs_run_is_torn_down_by_the_next_run() {
    let w = World::new();
    let _mp = w.mount();
    let client = w.root.join("create-raw.py");
    std::fs::write(&client, CREATE_RAW).unwrap();
    let mut run = w.opfs();
    run.arg("-C")
        .arg(&w.project)
        .args(["run", "--", "sh", "-c"])
        .arg(format!(
            "/usr/bin/python3 {client} w2; sleep 600",
            client = client.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = run.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while shared_mounts(&w).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the shared folder and w2's bind never appeared: {:?}",
            w.mounts_under_root()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed = child.id().to_string();
    child.kill().unwrap();
    child.wait().unwrap();
    // Killed outright, opfs run could not clean up: the folder is left.
    assert_eq!(shared_mounts(&w).len(), 2, "{:?}", w.mounts_under_root());
    let out = w.run(&[], "ls /tmp/opfs-worktrees");
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        stdout(&out).trim(),
        "w2",
        "the next run shows the worktree: {}",
        show(&out)
    );
    assert!(shared_mounts(&w).is_empty(), "{:?}", shared_mounts(&w));
    assert!(staging_mounts(&w).is_empty(), "{:?}", staging_mounts(&w));
    let left: Vec<_> = walk_names(&w.pinned.opfs_home)
        .into_iter()
        .filter(|n| n.ends_with(&format!("/sandbox-worktrees/{killed}")))
        .collect();
    assert!(left.is_empty(), "the killed run's folder is gone: {left:?}");
}

/// Inside the sandbox: raw requests (argv[1], a JSON list) on the narrow
/// socket, each answer printed as `RAW ...`.
const RAW_REQUESTS: &str = r#"
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["OPFS_MCP_SOCKET"])
f = s.makefile("rw")
for req in json.loads(sys.argv[1]):
    f.write(json.dumps(req) + chr(10)); f.flush()
    print("RAW " + f.readline().strip())
"#;

#[test]
fn the_agent_cannot_merge_or_discard_a_worktree_the_user_made() {
    let w = World::new();
    let _mp = w.mount();
    let made = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["worktree", "create", "userwt"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", show(&made));
    let path = PathBuf::from(stdout(&made).trim());
    std::fs::write(path.join("a.txt"), "the user's work\n").unwrap();
    let umount = w.opfs().arg("umount").arg(&path).output().unwrap();
    assert!(umount.status.success(), "{}", show(&umount));
    let client = w.root.join("raw.py");
    std::fs::write(&client, RAW_REQUESTS).unwrap();
    let requests = serde_json::json!([
        {"tool": "worktree_discard", "arguments": {"name": "userwt"}},
        {"tool": "worktree_merge", "arguments": {"name": "userwt"}},
        {"tool": "worktree_diff", "arguments": {"name": "userwt"}},
        {"tool": "worktree_create", "arguments": {"name": "agentwt"}},
        {"tool": "worktree_list", "arguments": {}},
        {"tool": "worktree_discard", "arguments": {"name": "agentwt"}},
    ]);
    let out = w.run_alone(
        &[],
        &format!("/usr/bin/python3 {} '{}'; true", client.display(), requests),
    );
    let raw: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .filter_map(|l| l.strip_prefix("RAW "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(raw.len(), 6, "{}", show(&out));
    for refused in &raw[..2] {
        let msg = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("\"userwt\" was made by the user")
                && msg.contains("opfs worktree discard userwt"),
            "{refused}"
        );
    }
    assert!(
        raw[2]["ok"]["output"]
            .as_str()
            .unwrap_or_default()
            .contains("+the user's work"),
        "diff stays allowed: {}",
        raw[2]
    );
    assert_eq!(raw[3]["ok"]["name"], "agentwt", "{}", raw[3]);
    let rows = raw[4]["ok"].as_array().unwrap();
    let by = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .map(|r| r["created_by"].clone())
    };
    assert_eq!(by("userwt"), Some("user".into()), "{rows:?}");
    assert_eq!(by("agentwt"), Some("agent".into()), "{rows:?}");
    assert_eq!(raw[5]["ok"]["discarded"], "agentwt", "{}", raw[5]);
    // The user's worktree and its work are still there, unmerged.
    let wt_file = w
        .pinned
        .opfs_home
        .join("projects")
        .read_dir()
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("worktrees/userwt/worktree.json").is_file());
    assert!(wt_file.is_some(), "the user's worktree is gone");
    let diff = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["worktree", "diff", "userwt"])
        .output()
        .unwrap();
    assert!(
        stdout(&diff).contains("+the user's work"),
        "{}",
        show(&diff)
    );
    assert_eq!(
        std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
        "original a\n"
    );
}

// ------------------------------------------------------- git's own files

/// Makes the world's project a git repository with one commit.
fn git_init(w: &World) {
    let git = |args: &[&str]| {
        let out = w
            .command("git")
            .arg("-C")
            .arg(&w.project)
            .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", show(&out));
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
}

/// `git ARGS` in the project, outside the sandbox, as the user runs it.
fn git_outside(w: &World, args: &[&str]) -> Output {
    w.command("git")
        .arg("-C")
        .arg(&w.project)
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
        .args(args)
        .output()
        .unwrap()
}

/// Inside: the escape of a planted `core.fsmonitor` and a planted
/// `post-checkout` hook (each would touch `$OUT/...` when git runs it
/// outside), a `commondir` redirect and a `.git` swap; then the git
/// commands an agent needs. Prints one tagged line per step.
const PLANT_AND_COMMIT: &str = r#"
G="git -c user.email=a@example.com -c user.name=agent"
git config core.fsmonitor "touch $OUT/ESCAPED-fsmonitor; false" && echo "PLANTED config"
printf '#!/bin/sh\ntouch %s/ESCAPED-hook\n' "$OUT" > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout && echo "PLANTED hook"
printf '[core]\n\tfsmonitor = "touch %s/ESCAPED-info"\n' "$OUT" > .git/info/planted && echo "PLANTED info"
mkdir -p .git/evil && echo evil > .git/commondir && echo "PLANTED commondir"
mv .git .git-old && echo "PLANTED swap"
echo new > new.txt
$G add new.txt && echo OK-add
$G commit -qm "by the agent" && echo OK-commit
$G branch side && echo OK-branch
$G checkout -qb other && echo OK-checkout
echo more >> new.txt && $G stash -q && echo OK-stash
$G stash pop -q && echo OK-stash-pop
git init -q nested && echo OK-nested
"#;

#[test]
fn what_git_runs_is_read_only_inside_and_nothing_planted_runs_outside() {
    // Not while a test removes a worktree from a running sandbox.
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    git_init(&w);
    let out_dir = w.root.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let config_before = std::fs::read(w.project.join(".git/config")).unwrap();
    let out = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["run", "--", "sh", "-c", PLANT_AND_COMMIT])
        .env("OUT", &out_dir)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}", show(&out));
    assert!(!text.contains("PLANTED"), "{}", show(&out));
    for ok in [
        "OK-add",
        "OK-commit",
        "OK-branch",
        "OK-checkout",
        "OK-stash",
        "OK-stash-pop",
        "OK-nested",
    ] {
        assert!(text.contains(ok), "{ok} missing: {}", show(&out));
    }
    assert_eq!(
        std::fs::read(w.project.join(".git/config")).unwrap(),
        config_before
    );
    assert!(!w.project.join(".git/commondir").exists());
    // The user's git outside runs nothing the command planted, and sees
    // the agent's commit and branch.
    for args in [
        &["status"][..],
        &["checkout", "-q", "-b", "mine"],
        &["checkout", "-q", "other"],
    ] {
        let o = git_outside(&w, args);
        assert!(o.status.success(), "git {args:?}: {}", show(&o));
    }
    let planted: Vec<_> = std::fs::read_dir(&out_dir).unwrap().flatten().collect();
    assert!(
        planted.is_empty(),
        "code planted inside ran outside: {planted:?}"
    );
    let log = git_outside(&w, &["log", "--format=%s", "other"]);
    assert!(stdout(&log).contains("by the agent"), "{}", show(&log));
    assert!(stdout(&git_outside(&w, &["branch"])).contains("side"));
    // The repository made in a subfolder is the command's own: status
    // names it; nothing of the project's `.git` changed, so nothing else.
    let status = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["status", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let changed: Vec<String> = v["git_changes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["paths"].as_array().unwrap().clone())
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert_eq!(changed, vec!["nested/.git".to_string()], "{v}");
}

#[test]
fn writable_git_config_opens_it_and_status_and_log_show_the_change() {
    let w = World::new();
    git_init(&w);
    let out = w.run(
        &["--writable-git-config", "--turn", "agent"],
        "git config opfs-test.planted yes && echo CONFIG-OK; echo '#!/bin/sh' > .git/hooks/pre-commit && echo HOOK-OK",
    );
    assert!(stdout(&out).contains("CONFIG-OK"), "{}", show(&out));
    assert!(stdout(&out).contains("HOOK-OK"), "{}", show(&out));
    let status = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["status", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let warned = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .find(|w| w.contains("changed what git runs or trusts"))
        .unwrap_or_else(|| panic!("no warning: {v}"))
        .to_string();
    assert!(
        warned.contains(".git/config") && warned.contains(".git/hooks/pre-commit"),
        "{warned}"
    );
    let turn = v["git_changes"][0]["turn"].as_u64().unwrap();
    let log = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["log"])
        .output()
        .unwrap();
    assert!(
        stdout(&log).contains(&format!(
            "warning: turn {turn} changed what git runs or trusts"
        )),
        "{}",
        show(&log)
    );
}

#[test]
fn a_hooks_path_inside_the_project_is_read_only_and_a_missing_one_is_refused() {
    let w = World::new();
    std::fs::create_dir_all(w.project.join("tools/hooks")).unwrap();
    std::fs::write(w.project.join("tools/hooks/keep"), "").unwrap();
    git_init(&w);
    let cfg = git_outside(&w, &["config", "core.hooksPath", "tools/hooks"]);
    assert!(cfg.status.success(), "{}", show(&cfg));
    let out = w.run(
        &[],
        "echo '#!/bin/sh' > tools/hooks/post-checkout && echo PLANTED; echo ok > src/x && echo WROTE",
    );
    assert!(!stdout(&out).contains("PLANTED"), "{}", show(&out));
    assert!(stdout(&out).contains("WROTE"), "{}", show(&out));
    // A hooks folder that does not exist, whose parent is the project's
    // root: it cannot be kept read-only, so the command is not run.
    let cfg = git_outside(&w, &["config", "core.hooksPath", ".githooks"]);
    assert!(cfg.status.success(), "{}", show(&cfg));
    let out = w.run(&[], "echo RAN");
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(!stdout(&out).contains("RAN"), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}/.githooks", w.project.display()))
            && err.contains("--writable-git-config"),
        "{err}"
    );
}

/// Inside, against a repository whose hooks folder is `.husky/_`, which
/// includes `../tools/cfg/inc` and `../conf/local/extra.inc` (missing):
/// each parent of what git runs is removed, or moved away and the path made
/// anew with code that would touch `$OUT/...` outside; then ordinary work
/// in those folders. Prints one tagged line per step.
const MOVE_A_PARENT_AWAY: &str = r#"
echo "RMDIR $(rmdir .husky 2>&1)"
rm -rf tools conf 2>/dev/null; echo "RM $?"
printf '#!/bin/sh\ntouch %s/ESCAPED-direct\n' "$OUT" > .husky/_/post-checkout && echo PLANTED-direct
mv .husky .husky-old && mkdir -p .husky/_ && printf '#!/bin/sh\ntouch %s/ESCAPED-husky\n' "$OUT" > .husky/_/post-checkout && chmod +x .husky/_/post-checkout && echo PLANTED-husky
mv tools tools2 && mkdir -p tools/cfg && printf '[core]\n\tfsmonitor = "touch %s/ESCAPED-include; false"\n' "$OUT" > tools/cfg/inc && echo PLANTED-include
mv tools/cfg tools/cfg2 && mkdir -p tools/cfg && printf '[core]\n\tfsmonitor = "touch %s/ESCAPED-include2; false"\n' "$OUT" > tools/cfg/inc && echo PLANTED-include2
mv conf conf2 && mkdir -p conf/local && printf '[alias]\n\tst = "!touch %s/ESCAPED-missing"\n' "$OUT" > conf/local/extra.inc && echo PLANTED-missing
printf '[alias]\n\tst = "!touch %s/ESCAPED-missing2"\n' "$OUT" > conf/local/extra.inc && echo PLANTED-missing2
echo new > .husky/pre-push && echo WROTE-husky
echo new > tools/cfg/other && mkdir tools/more && echo WROTE-tools
echo new > conf/other && echo WROTE-conf
true
"#;

#[test]
fn a_parent_of_what_git_runs_cannot_be_moved_away_and_the_path_made_anew() {
    // Not while a test removes a worktree from a running sandbox.
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    std::fs::create_dir_all(w.project.join(".husky/_")).unwrap();
    std::fs::write(w.project.join(".husky/_/h"), "#!/bin/sh\n").unwrap();
    std::fs::write(w.project.join(".husky/pre-commit"), "true\n").unwrap();
    std::fs::create_dir_all(w.project.join("tools/cfg")).unwrap();
    std::fs::write(w.project.join("tools/cfg/inc"), "[user]\n\tname = t\n").unwrap();
    std::fs::create_dir_all(w.project.join("conf/local")).unwrap();
    std::fs::write(w.project.join("conf/local/keep"), "").unwrap();
    git_init(&w);
    for (k, v) in [
        ("core.hooksPath", ".husky/_"),
        ("include.path", "../tools/cfg/inc"),
        ("include.path", "../conf/local/extra.inc"),
    ] {
        let cfg = git_outside(&w, &["config", "--add", k, v]);
        assert!(cfg.status.success(), "{}", show(&cfg));
    }
    let out_dir = w.root.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["run", "--", "sh", "-c", MOVE_A_PARENT_AWAY])
        .env("OUT", &out_dir)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}", show(&out));
    // The user's git outside runs nothing the command planted (`st`, an
    // alias the command may have planted, is not there: it fails).
    for args in [&["status"][..], &["checkout", "-q", "-b", "br2"]] {
        let o = git_outside(&w, args);
        assert!(o.status.success(), "git {args:?}: {}", show(&o));
    }
    let _ = git_outside(&w, &["st"]);
    let planted: Vec<_> = std::fs::read_dir(&out_dir).unwrap().flatten().collect();
    assert!(
        planted.is_empty(),
        "code planted inside ran outside: {planted:?}\n{}",
        show(&out)
    );
    assert!(!text.contains("PLANTED"), "{}", show(&out));
    let rmdir = text.lines().find(|l| l.starts_with("RMDIR")).unwrap_or("");
    assert!(rmdir.contains("busy"), "{}", show(&out));
    assert!(!text.contains("RM 0"), "{}", show(&out));
    for ok in ["WROTE-husky", "WROTE-tools", "WROTE-conf"] {
        assert!(text.contains(ok), "{ok} missing: {}", show(&out));
    }
    // What git runs is where it was, as it was.
    assert!(w.project.join(".husky/_/h").is_file());
    assert_eq!(
        std::fs::read_to_string(w.project.join("tools/cfg/inc")).unwrap(),
        "[user]\n\tname = t\n"
    );
    assert!(!w.project.join("conf/local/extra.inc").exists());
}

#[test]
fn no_control_socket_of_another_project_is_usable_inside() {
    let w = World::new();
    let bin = visible_opfs(&w);
    let other = w.root.join("other");
    let other_home = w.root.join("other-home");
    let other_mnt = w.root.join("other-mnt");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::create_dir_all(&other_mnt).unwrap();
    std::fs::write(other.join("f.txt"), "one\n").unwrap();
    let other_env = TestEnv {
        opfs_home: other_home.clone(),
        home: w.pinned.home.clone(),
        config: w.pinned.config.clone(),
    };
    let other_opfs = |args: &[&str]| {
        let mut c = Command::new(OPFS);
        other_env.pin(&mut c).args(args).output().unwrap()
    };
    let m = other_opfs(&[
        "mount",
        other.to_str().unwrap(),
        other_mnt.to_str().unwrap(),
    ]);
    assert!(m.status.success(), "{}", show(&m));
    let t = other_opfs(&["-C", other_mnt.to_str().unwrap(), "turn"]);
    assert!(t.status.success(), "{}", show(&t));
    let before = stdout(&t).trim().to_string();
    let script = format!(
        r#"for c in turn "rewind 1" "gc --keep 1" umount; do OPFS_HOME={home} {bin} -C {mnt} $c; echo "RC $c $?"; done"#,
        home = other_home.display(),
        bin = bin.display(),
        mnt = other_mnt.display(),
    );
    let out = w.run(&[], &script);
    let text = stdout(&out);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    for c in ["turn", "rewind 1", "gc --keep 1", "umount"] {
        assert!(
            text.contains(&format!("RC {c} 1")),
            "{c} must fail: {}",
            show(&out)
        );
    }
    assert_eq!(
        err.matches("refused by the daemon of").count(),
        4,
        "{}",
        show(&out)
    );
    // Nothing changed: still mounted, the same open turn.
    let s = other_opfs(&["-C", other_mnt.to_str().unwrap(), "status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(v["mounted"], true, "{v}");
    assert_eq!(v["turn"].to_string(), before, "{v}");
    let u = other_opfs(&["umount", other_mnt.to_str().unwrap()]);
    assert!(u.status.success(), "{}", show(&u));
}

#[test]
fn what_git_runs_is_read_only_in_the_worktrees_the_sandbox_shows() {
    let w = World::new();
    std::fs::create_dir_all(w.project.join(".husky/_")).unwrap();
    std::fs::write(w.project.join(".husky/_/h"), "#!/bin/sh\n").unwrap();
    git_init(&w);
    let cfg = git_outside(&w, &["config", "core.hooksPath", ".husky/_"]);
    assert!(cfg.status.success(), "{}", show(&cfg));
    let _mp = w.mount();
    let made = w
        .opfs()
        .arg("-C")
        .arg(&w.project)
        .args(["worktree", "create", "w1"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", show(&made));
    let client = w.root.join("raw.py");
    std::fs::write(&client, RAW_REQUESTS).unwrap();
    let requests = serde_json::json!([
        {"tool": "worktree_create", "arguments": {"name": "w2"}},
    ]);
    let script = format!(
        r#"/usr/bin/python3 {client} '{requests}'
for wt in w1 w2; do
  d=/tmp/opfs-worktrees/$wt
  test -d $d/.git/hooks && echo "SHOWN $wt"
  echo x > $d/.git/hooks/post-checkout && echo "PLANTED hook $wt"
  git -C $d config core.fsmonitor "touch /x; false" && echo "PLANTED config $wt"
  echo y > $d/y.txt && echo "WROTE $wt"
  mv $d/.husky $d/.husky-old && mkdir -p $d/.husky/_ && echo x > $d/.husky/_/post-checkout && echo "PLANTED husky $wt"
  echo z > $d/.husky/other && echo "WROTE husky $wt"
done
true"#,
        client = client.display(),
    );
    let out = w.run_alone(&[], &script);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", show(&out));
    for wt in ["w1", "w2"] {
        assert!(text.contains(&format!("SHOWN {wt}")), "{}", show(&out));
        assert!(text.contains(&format!("WROTE {wt}")), "{}", show(&out));
        assert!(
            text.contains(&format!("WROTE husky {wt}")),
            "{}",
            show(&out)
        );
    }
    assert!(!text.contains("PLANTED"), "{}", show(&out));
}

#[test]
fn a_daemon_started_after_the_sandbox_refuses_it_too() {
    // Not while a test removes a worktree from a running sandbox.
    let _shared = SETUP.read().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    let bin = visible_opfs(&w);
    let later = w.root.join("later");
    let later_home = w.root.join("later-home");
    let later_mnt = w.root.join("later-mnt");
    std::fs::create_dir_all(&later).unwrap();
    std::fs::create_dir_all(&later_mnt).unwrap();
    std::fs::write(later.join("f.txt"), "one\n").unwrap();
    let go = w.root.join("go");
    // Inside: say it runs (a file in the project), wait (bounded) for the
    // other daemon to be up, then try it.
    let script = format!(
        r#"echo up > started; i=0; while [ ! -e {go} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; OPFS_HOME={home} {bin} -C {mnt} turn; echo "RC $?""#,
        go = go.display(),
        home = later_home.display(),
        bin = bin.display(),
        mnt = later_mnt.display(),
    );
    let mut c = w.opfs();
    c.arg("-C")
        .arg(&w.project)
        .args(["run", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !w.project.join("started").exists() {
        if let Ok(Some(_)) = child.try_wait() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the sandbox ended before the script started: {}",
                show(&out)
            );
        }
        assert!(Instant::now() < deadline, "the sandbox never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Only now: a daemon the sandbox could not know about when it started.
    let later_env = TestEnv {
        opfs_home: later_home.clone(),
        home: w.pinned.home.clone(),
        config: w.pinned.config.clone(),
    };
    let later_opfs = |args: &[&str]| {
        let mut c = Command::new(OPFS);
        later_env.pin(&mut c).args(args).output().unwrap()
    };
    let m = later_opfs(&[
        "mount",
        later.to_str().unwrap(),
        later_mnt.to_str().unwrap(),
    ]);
    assert!(m.status.success(), "{}", show(&m));
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(stdout(&out).contains("RC 1"), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refused by the daemon of"),
        "{}",
        show(&out)
    );
    let s = later_opfs(&["-C", later_mnt.to_str().unwrap(), "status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(v["turn"], 1, "no turn was opened: {v}");
    let u = later_opfs(&["umount", later_mnt.to_str().unwrap()]);
    assert!(u.status.success(), "{}", show(&u));
}

/// The agent's prompt hook inside `opfs run` opens a turn per prompt
/// through the run's narrow socket, and nothing it sends in any number
/// costs the user a turn they had: 200 hook calls (a file written after
/// every second one) with `[retention] keep = 4` leave every turn of
/// before the run as it was, also after `opfs gc`; the user's empty open
/// turn is not relabelled, an empty turn opened from inside is; a long
/// prompt's label is cut to its bound.
#[test]
fn two_hundred_hook_calls_from_inside_cost_no_turn_the_user_had() {
    let w = World::new();
    std::fs::write(&w.pinned.config, "[retention]\nkeep = 4\n").unwrap();
    let mp = w.mount();
    let turn = |label: &str| {
        let out = w
            .opfs()
            .arg("-C")
            .arg(&mp)
            .args(["turn", "--label", label])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
    };
    std::fs::write(mp.join("a.txt"), "one\n").unwrap();
    turn("u2");
    std::fs::write(mp.join("a.txt"), "two\n").unwrap();
    turn("u3");
    std::fs::write(mp.join("c.txt"), "three\n").unwrap();
    turn("pre-empty");
    let key = |t: &serde_json::Value| {
        (
            t["turn"].as_u64().unwrap(),
            t["label"].clone(),
            t["paths"].clone(),
        )
    };
    let before: Vec<_> = w.turns().iter().map(key).collect();
    assert_eq!(before.len(), 4, "{before:?}");
    let bin = visible_opfs(&w);
    let out = w.run(
        &[],
        &format!(
            r#"long=$(printf '%10000s' '' | tr ' ' x)
i=1
while [ $i -le 200 ]; do
  p="p$i"; [ $i -eq 200 ] && p="p200$long"
  out=$(printf '{{"hook_event_name":"UserPromptSubmit","prompt":"%s","session_id":"s"}}' "$p" | {bin} hook --agent claude-code 2>&1)
  [ -n "$out" ] && echo "HOOK $i: $out"
  [ $((i % 2)) -eq 0 ] && echo $i > loop.txt
  i=$((i + 1))
done
echo LOOPED"#,
            bin = bin.display()
        ),
    );
    assert!(stdout(&out).contains("LOOPED"), "{}", show(&out));
    assert!(!stdout(&out).contains("HOOK"), "{}", show(&out));
    let check = |when: &str| {
        let turns = w.turns();
        let kept: Vec<_> = turns.iter().map(key).filter(|k| k.0 <= 4).collect();
        assert_eq!(kept, before, "{when}: the turns of before the run");
        // Oldest first.
        let inside: Vec<&serde_json::Value> = turns
            .iter()
            .rev()
            .filter(|t| t["turn"].as_u64().unwrap() > 4)
            .collect();
        let labels: Vec<String> = inside
            .iter()
            .map(|t| t["label"].as_str().unwrap_or("").to_string())
            .collect();
        let want: Vec<String> = (1..=100).map(|k| format!("p{}", 2 * k)).collect();
        assert_eq!(
            labels.len(),
            100,
            "{when}: one turn per written prompt: {labels:?}"
        );
        assert_eq!(labels[..99], want[..99], "{when}");
        let long = &labels[99];
        assert!(
            long.starts_with("p200xxx") && long.ends_with('…') && long.len() <= 4096,
            "{when}: the long prompt's label is cut: {} bytes",
            long.len()
        );
    };
    check("after the run");
    // The user's gc with the same policy: 4 turns opened from outside.
    let out = w
        .opfs()
        .arg("-C")
        .arg(&mp)
        .args(["gc", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    check("after opfs gc");
    let out = w.opfs().arg("umount").arg(&mp).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
}
