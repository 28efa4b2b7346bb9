//! `opfs completions`, `opfs man` and `opfs doctor` (`docs/cli.md`): generated from the real clap tree, and a doctor whose
//! checks fail and pass where they should.

mod common;

use std::fs;

use common::*;

#[test]
fn completions_and_man_pages_name_every_command() {
    let fx = Fixture::new();
    let bash = fx.opfs(&["completions", "bash"]).ok().stdout;
    for cmd in ["rewind", "undo", "label", "worktree", "doctor", "shell"] {
        assert!(bash.contains(cmd), "bash completion lacks {cmd}");
    }
    let fish = fx.opfs(&["completions", "fish"]).ok().stdout;
    assert!(fish.contains("complete -c opfs"), "{fish}");
    let zsh = fx.opfs(&["completions", "zsh"]).ok().stdout;
    assert!(zsh.starts_with("#compdef opfs"), "{zsh}");
    let bad = fx.opfs(&["completions", "tcsh"]);
    assert_eq!(bad.code, Some(2), "{bad}");
    let page = fx.opfs(&["man"]).ok().stdout;
    assert!(page.contains(".TH opfs 1"), "{page}");
    assert!(page.contains("undo"), "{page}");
    let dir = fx.root().join("man1");
    fs::create_dir(&dir).expect("mkdir");
    let run = fx.opfs(&["man", "--dir", dir.to_str().expect("utf8")]).ok();
    for name in ["opfs.1", "opfs-rewind.1", "opfs-worktree-create.1"] {
        let p = dir.join(name);
        assert!(run.stdout.contains(&p.display().to_string()), "{run}");
        let text = fs::read_to_string(&p).expect("page");
        assert!(text.contains(".SH NAME"), "{name}: {text}");
    }
    let missing = fx.opfs(&["man", "--dir", "/nonexistent/man1"]);
    assert_eq!(missing.code, Some(1), "{missing}");
    assert!(missing.stderr.contains("/nonexistent/man1"), "{missing}");
}

#[test]
fn doctor_fails_on_what_is_required_and_warns_on_the_rest() {
    let fx = Fixture::new();
    // This machine mounts (the fixture checked): every required check is ok.
    let run = fx.opfs(&["doctor", "--json"]).ok();
    let v = run.json();
    assert_eq!(v["ok"], true, "{v:#}");
    let status = |v: &serde_json::Value, name: &str| -> String {
        v["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no check {name}: {v:#}"))["status"]
            .as_str()
            .expect("status")
            .to_string()
    };
    for name in ["/dev/fuse", "fusermount3", "kernel", "state home"] {
        assert_eq!(status(&v, name), "ok", "{v:#}");
    }
    // No fusermount3 on PATH: a failure, exit 1, with a fix.
    let empty = fx.root().join("empty-bin");
    fs::create_dir(&empty).expect("mkdir");
    let mut cmd = fx.opfs_command(&["doctor"]);
    cmd.env("PATH", &empty).env("OPFS_BWRAP", "/bin/false");
    let run = run_command(cmd, &fx.root().join("scratch"), COMMAND_TIMEOUT).expect("doctor");
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stdout.contains("fail  fusermount3   not on PATH"),
        "{run}"
    );
    assert!(run.stdout.contains("fix: install fuse3"), "{run}");
    // A bubblewrap that cannot make namespaces is a warning only, saying
    // what is lost (the project at its own path) and what works instead.
    assert!(run.stdout.contains("warn  bubblewrap"), "{run}");
    assert!(
        run.stdout.contains(
            "so opfs shell cannot show the project at its own path; work at a mountpoint instead"
        ),
        "{run}"
    );
    // A state home that cannot be written fails.
    fx.set_env("OPFS_HOME", "/proc/opfs-doctor");
    let run = fx.opfs(&["doctor"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stdout.contains("fail  state home"), "{run}");
}

#[test]
fn completions_into_a_closed_pipe_exit_quietly_instead_of_panicking() {
    let fx = Fixture::new();
    let mut cmd = fx.opfs_command(&["completions", "bash"]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn opfs");
    // The reader goes away before the script (more than a pipe's buffer)
    // is written: `opfs completions bash | head -1`.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
}
