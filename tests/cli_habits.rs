//! git and jj habits (`docs/cli.md`): labels
//! (`turn --label`, `label`, `mount --label`), a rewind list that stays
//! readable, turn refs (`@`, `@-`, `@-K`), `undo`, `log -n/--oneline/PATH`,
//! `diff` of the open turn, paths relative to the cwd, colour and pager.
//! Every test drives the binary through a real mount.

mod common;

use std::fs;

use common::*;
use serde_json::Value;

/// The label of turn `n` in `rewind --json --all`.
fn label_of(fx: &Fixture, n: u64) -> Value {
    fx.points(true)
        .into_iter()
        .find(|p| p["turn"] == n)
        .unwrap_or_else(|| panic!("turn {n} is not listed"))["label"]
        .clone()
}

#[test]
fn labels_belong_to_the_turn_they_name() {
    let fx = Fixture::new();
    // A first mount labels turn 1.
    fx.mount_with(&["--label", "session start"]);
    assert_eq!(label_of(&fx, 1), "session start");
    // `turn --label` labels the turn it opens, not the one it closes.
    fx.sh("echo a > a");
    let t2 = fx.turn("second");
    assert_eq!(t2, 2);
    assert_eq!(label_of(&fx, 1), "session start");
    assert_eq!(label_of(&fx, 2), "second");
    // `label` relabels, by number or by ref, and it lasts across a remount.
    fx.opfs_c(&["label", "1", "renamed one"]).ok();
    let run = fx.opfs_c(&["label", "@", "renamed\nopen", "--json"]).ok();
    assert_eq!(
        run.json(),
        serde_json::json!({"turn": 2, "label": "renamed\nopen"})
    );
    fx.umount();
    assert_eq!(label_of_p(&fx, 1), "renamed one");
    // A later mount with --label opens a new turn with it.
    fx.mount_with(&["--label", "second session"]);
    assert_eq!(fx.open_turn(), 3);
    assert_eq!(label_of(&fx, 3), "second session");
    assert_eq!(label_of(&fx, 2), "renamed\nopen");
    // An empty text removes the label; an unknown turn is bad usage.
    fx.opfs_c(&["label", "@-", ""]).ok();
    assert_eq!(label_of(&fx, 2), Value::Null);
    let run = fx.opfs_c(&["label", "9", "x"]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("turn 9 does not exist"), "{run}");
    // Text output escapes control characters.
    let log = fx.opfs_c(&["log"]).ok();
    assert!(log.stdout.contains("label:   renamed one"), "{log}");
}

/// The subject line of the export's commit named `rev`.
fn subject(git_dir: &std::path::Path, rev: &str) -> String {
    let out = git_in_ok(git_dir, &["log", "-1", "--format=%s", rev]);
    String::from_utf8_lossy(&out).trim().to_string()
}

#[test]
fn turn_m_labels_the_turn_it_closes_and_labels_reach_the_export() {
    let fx = Fixture::new();
    fx.mount_with(&["--no-export"]);
    // `-m` labels the work just done (the turn it closes), as `git commit
    // -m` does; `--label` still labels the turn that opens.
    fx.sh("echo a > a");
    let run = fx.opfs_c(&["turn", "-m", "wrote a"]).ok();
    assert_eq!(parse_turn_number(&run), 2);
    assert_eq!(label_of(&fx, 1), "wrote a");
    assert_eq!(label_of(&fx, 2), Value::Null);
    fx.sh("echo b > b");
    let run = fx
        .opfs_c(&["turn", "--message", "wrote b", "--label", "next prompt"])
        .ok();
    assert_eq!(parse_turn_number(&run), 3);
    assert_eq!(label_of(&fx, 2), "wrote b");
    assert_eq!(label_of(&fx, 3), "next prompt");

    let git_dir = fx.state_dir().join("export.git");
    let run = fx.opfs_c(&["export"]).ok();
    assert!(run.stdout.contains("exported turns 1 to 2"), "{run}");
    assert_eq!(subject(&git_dir, "refs/opfs/turns/1"), "Turn 1: wrote a");
    // A label changed after the export reaches it at the next export:
    // that commit's message changes, the later ones move onto it.
    fx.opfs_c(&["label", "1", "wrote the letter a"]).ok();
    let run = fx.opfs_c(&["export"]).ok();
    assert!(!run.stdout.contains("nothing new"), "{run}");
    assert!(run.stdout.contains("relabelled turn 1"), "{run}");
    assert_eq!(
        subject(&git_dir, "refs/opfs/turns/1"),
        "Turn 1: wrote the letter a"
    );
    assert_eq!(subject(&git_dir, "refs/opfs/turns/2"), "Turn 2: wrote b");
    assert_eq!(subject(&git_dir, "refs/heads/opfs"), "Turn 2: wrote b");
    let parent = git_in_ok(&git_dir, &["rev-parse", "refs/opfs/turns/2^"]);
    let one = git_in_ok(&git_dir, &["rev-parse", "refs/opfs/turns/1"]);
    assert_eq!(parent, one, "turn 2's commit is on the relabelled turn 1");
    let tip = git_in_ok(&git_dir, &["rev-parse", "refs/heads/opfs"]);
    // Nothing changed since: nothing to do. And the rewritten history is
    // what a fresh export of it writes (same ids).
    let run = fx.opfs_c(&["export"]).ok();
    assert!(run.stdout.contains("nothing new to export"), "{run}");
    fs::remove_dir_all(&git_dir).expect("remove the export");
    fx.opfs_c(&["export"]).ok();
    assert_eq!(
        git_in_ok(&git_dir, &["rev-parse", "refs/heads/opfs"]),
        tip,
        "a fresh export gives the same commits"
    );
    git_in_ok(&git_dir, &["fsck", "--strict"]);
}

#[test]
fn diff_shows_permission_changes_git_cannot_and_show_says_a_link_is_a_link() {
    let fx = Fixture::new();
    write_file(&fx.p("private"), b"secret\n", 0o644);
    write_file(&fx.p("run.sh"), b"echo\n", 0o644);
    fs::create_dir(fx.p("gone")).expect("mkdir");
    std::os::unix::fs::symlink("private", fx.p("link")).expect("symlink");
    fx.mount();
    fx.sh("chmod 0600 private; chmod 0755 run.sh; mkdir empty; rmdir gone; ln -sfn run.sh link");
    let patch = fx.opfs_c(&["diff"]).ok().stdout;
    // git keeps only 644/755: a chmod 0600 that a rewind restores gets a
    // line as `git diff --summary` words a mode change.
    assert!(
        patch.contains("\n mode change 0644 => 0600 private\n"),
        "{patch}"
    );
    assert!(!patch.contains("diff --git a/private"), "{patch}");
    assert!(
        patch.contains("diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"),
        "{patch}"
    );
    assert!(
        patch.contains("--- a/link\n+++ b/link\n@@ -1 +1 @@\n-private\n"),
        "{patch}"
    );
    assert!(patch.contains("new empty directory empty/"), "{patch}");
    assert!(patch.contains("deleted empty directory gone/"), "{patch}");
    let stat = fx.opfs_c(&["diff", "--stat"]).ok().stdout;
    assert!(stat.contains(" private | 0\n"), "{stat}");
    let names = fx.opfs_c(&["diff", "--name-status"]).ok().stdout;
    assert!(names.contains("M\tprivate\n"), "{names}");
    // `show` of a symlink: stdout is the target alone (a pipe gets exactly
    // those bytes); stderr says it is a link.
    let run = fx.opfs_c(&["show", "1:link"]).ok();
    assert_eq!(run.stdout, "private");
    assert!(
        run.stderr
            .contains("link was a symbolic link when turn 1 began"),
        "{run}"
    );
    let run = fx.opfs_c(&["show", "1:run.sh"]).ok();
    assert!(run.stderr.is_empty(), "{run}");
}

/// `label_of` through the project while unmounted.
fn label_of_p(fx: &Fixture, n: u64) -> Value {
    let v = fx.opfs_p(&["rewind", "--json", "--all"]).ok().json();
    v.as_array()
        .expect("array")
        .iter()
        .find(|p| p["turn"] == n)
        .unwrap_or_else(|| panic!("turn {n} is not listed: {v:#}"))["label"]
        .clone()
}

#[test]
fn the_rewind_list_stays_readable_after_many_rewinds() {
    let fx = Fixture::new();
    fx.mount();
    fx.sh("echo 1 > f");
    let long = "x".repeat(200);
    fx.turn(&long);
    fx.sh("echo 2 > f");
    for _ in 0..6 {
        fx.rewind(1);
        fx.sh("echo again >> f");
        fx.rewind(1);
    }
    let text = fx.opfs_c(&["rewind"]).ok().stdout;
    let rows: Vec<&str> = text.lines().skip(1).collect();
    let table: Vec<&str> = rows
        .iter()
        .copied()
        .filter(|r| !r.starts_with('('))
        .collect();
    assert_eq!(table.len(), 10, "ten rows shown:\n{text}");
    for r in &table {
        // Every row says something in its label column: the label, what
        // the turn followed, or `-`.
        assert!(!r.ends_with(' '), "an empty row:\n{text}");
        assert!(
            r.split_whitespace().nth(4).is_some(),
            "an empty row:\n{text}"
        );
        assert!(r.chars().count() < 140, "a row too long: {r}");
    }
    assert!(
        table
            .iter()
            .any(|r| r.ends_with("(after the rewind to turn 1)")),
        "{text}"
    );
    assert!(
        rows.iter()
            .any(|r| r.starts_with('(') && r.contains("not shown")),
        "the hidden rows are counted:\n{text}"
    );
    // The long label is cut in the text, whole in JSON.
    let all = fx.opfs_c(&["rewind", "--all"]).ok().stdout;
    let row2 = all
        .lines()
        .find(|l| l.trim_start().starts_with("2 "))
        .unwrap_or_else(|| panic!("turn 2 not listed:\n{all}"));
    assert!(row2.ends_with('…'), "{row2}");
    assert!(!row2.contains(&long), "{row2}");
    assert_eq!(label_of(&fx, 2), Value::String(long));
}

#[test]
fn turn_refs_name_turns_relative_to_the_open_one() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v1\n", 0o644);
    fx.mount();
    let v1 = fx.tree();
    fx.sh("echo v2 > f");
    fx.turn("t2");
    let v2 = fx.tree();
    fx.sh("echo v3 > f");
    fx.turn("t3");
    fx.sh("echo v4 > f");
    // `show @-:f` is f at the start of turn 2; `show @-2:f` at turn 1.
    assert_eq!(fx.opfs_c(&["show", "@-:f"]).ok().stdout, "v2\n");
    assert_eq!(fx.opfs_c(&["show", "@-2:f"]).ok().stdout, "v1\n");
    assert_eq!(fx.opfs_c(&["show", "@:f"]).ok().stdout, "v3\n");
    // A diff range of refs.
    let d = fx.opfs_c(&["diff", "@-2..@-1"]).ok().stdout;
    assert!(d.contains("-v1\n") && d.contains("+v3\n"), "{d}");
    // Out of range: bad usage naming the range.
    for bad in ["@-3", "@-99"] {
        let run = fx.opfs_c(&["rewind", bad]);
        assert_eq!(run.code, Some(2), "{run}");
        assert!(run.stderr.contains("out of range"), "{run}");
        assert!(run.stderr.contains("@-2"), "{run}");
    }
    let run = fx.opfs_c(&["show", "@x:f"]);
    assert_eq!(run.code, Some(2), "{run}");
    // `rewind @-` rewinds to the start of turn 2.
    let v = one_json(fx.opfs_c(&["rewind", "@-", "--json"]));
    assert_eq!(v["rewound_to"], 2, "{v:#}");
    fx.assert_tree("start of turn 2", &v2);
    let v = one_json(fx.opfs_c(&["rewind", "1", "--json"]));
    assert_eq!(v["rewound_to"], 1, "{v:#}");
    fx.assert_tree("start of turn 1", &v1);
}

fn one_json(run: Run) -> Value {
    run.ok().json()
}

#[test]
fn undo_takes_back_the_last_rewind_or_the_open_turn() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"v1\n", 0o644);
    fx.mount();
    let start1 = fx.tree();
    fx.sh("echo v2 > f");
    fx.turn("t2");
    let start2 = fx.tree();
    fx.sh("echo v3 > f && echo new > g");
    let dirty = fx.tree();
    // The open turn changed things: undo discards them.
    let run = fx.opfs_c(&["undo"]).ok();
    assert!(run.stderr.contains("open turn 2"), "{run}");
    fx.assert_tree("open turn undone", &start2);
    // The last action was a rewind: undo is redo.
    let run = fx.opfs_c(&["undo", "--json"]).ok();
    let v = run.json();
    assert_eq!(v["undo"]["action"], "rewind", "{v:#}");
    fx.assert_tree("rewind undone", &dirty);
    // And again: undoes that redo.
    fx.opfs_c(&["undo"]).ok();
    fx.assert_tree("redo undone", &start2);
    // A dry run changes nothing and says what it would do.
    let run = fx.opfs_c(&["undo", "--dry-run"]).ok();
    assert!(run.stderr.contains("would undo the rewind"), "{run}");
    fx.assert_tree("dry run", &start2);
    // After a new turn with no change, undo reaches back to the last turn
    // that changed something.
    fx.opfs_c(&["rewind", "1"]).ok();
    fx.assert_tree("turn 1", &start1);
    fx.sh("echo w > f");
    fx.turn("after");
    let run = fx.opfs_c(&["undo", "--json"]).ok();
    let v = run.json();
    assert_eq!(v["undo"]["action"], "last_turn", "{v:#}");
    fx.assert_tree("last turn undone", &start1);
}

#[test]
fn log_takes_a_count_oneline_and_paths_relative_to_the_cwd() {
    let fx = Fixture::new();
    fs::create_dir(fx.p("src")).expect("mkdir");
    write_file(&fx.p("src/a"), b"a\n", 0o644);
    write_file(&fx.p("top"), b"t\n", 0o644);
    fx.mount();
    fx.sh("echo a2 > src/a");
    fx.turn("two");
    fx.sh("echo t2 > top");
    fx.turn("three");
    fx.sh("echo a3 > src/a");
    let turns = |run: Run| -> Vec<u64> {
        run.ok()
            .json()
            .as_array()
            .expect("array")
            .iter()
            .map(|e| e["turn"].as_u64().expect("turn"))
            .collect()
    };
    assert_eq!(turns(fx.opfs_c(&["log", "--json"])), vec![3, 2, 1]);
    assert_eq!(turns(fx.opfs_c(&["log", "-n", "2", "--json"])), vec![3, 2]);
    assert_eq!(turns(fx.opfs_c(&["log", "--json", "src"])), vec![3, 1]);
    assert_eq!(turns(fx.opfs_c(&["log", "--json", "top"])), vec![2]);
    // From inside the mount, a path is relative to the cwd.
    let sub = fx.m("src");
    let mut args: Vec<std::ffi::OsString> = vec!["-C".into(), sub.into_os_string()];
    args.extend(["log", "--json", "a"].map(Into::into));
    assert_eq!(turns(fx.opfs(&args)), vec![3, 1]);
    let one = fx.opfs_c(&["log", "--oneline"]).ok().stdout;
    let lines: Vec<&str> = one.lines().collect();
    assert_eq!(lines.len(), 3, "{one}");
    assert!(
        lines[0].contains("   3 agent") && lines[0].ends_with("three (open)"),
        "{one}"
    );
    assert!(lines[2].contains("+0 ~1 -0"), "{one}");
}

#[test]
fn diff_without_a_turn_is_the_open_turn_and_shows_modes_and_links() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"x\n", 0o644);
    write_file(&fx.p("run"), b"#!/bin/sh\n", 0o644);
    fs::create_dir(fx.p("old")).expect("mkdir");
    fx.mount();
    fx.sh("echo y > f");
    fx.turn("two");
    fx.sh("chmod +x run && ln -s f link && echo z > f && mkdir -p new/deep full && rmdir old && echo x > full/x");
    let d = fx.opfs_c(&["diff"]).ok().stdout;
    // Empty directories made or removed show (git apply skips the lines);
    // one with a file in it shows through the file.
    assert!(d.contains("\nnew empty directory new/deep/\n"), "{d}");
    assert!(d.ends_with("deleted empty directory old/\n"), "{d}");
    assert!(
        !d.contains("directory new/\n") && !d.contains("full/\n"),
        "{d}"
    );
    assert!(
        d.contains("diff --git a/run b/run\nold mode 100644\nnew mode 100755\n"),
        "{d}"
    );
    assert!(d.contains("new file mode 120000\n"), "{d}");
    assert!(d.contains("-y\n+z\n"), "{d}");
    assert!(!d.contains("-x\n"), "turn 1 is not in it: {d}");
    // `diff PATH` with no turn: the open turn, limited.
    let only = fx.opfs_c(&["diff", "--name-status", "f"]).ok().stdout;
    assert_eq!(only, "M\tf\n");
    let ns = fx.opfs_c(&["diff", "--name-status"]).ok().stdout;
    assert_eq!(ns.lines().count(), 6, "{ns}");
    assert!(ns.ends_with("A\tnew/deep/\nD\told/\n"), "{ns}");
}

#[test]
fn show_takes_dot_paths_relative_to_the_cwd_in_the_mount() {
    let fx = Fixture::new();
    fs::create_dir_all(fx.p("src/deep")).expect("mkdir");
    write_file(&fx.p("src/deep/a"), b"deep\n", 0o644);
    write_file(&fx.p("src/b"), b"b\n", 0o644);
    fx.mount();
    let run_in = |dir: &str, spec: &str| {
        let mut args: Vec<std::ffi::OsString> = vec!["-C".into(), fx.m(dir).into_os_string()];
        args.extend(["show", spec].map(Into::into));
        fx.opfs(&args)
    };
    assert_eq!(run_in("src/deep", "1:./a").ok().stdout, "deep\n");
    assert_eq!(run_in("src/deep", "1:../b").ok().stdout, "b\n");
    // A plain PATH is from the root, as git's REV:PATH.
    assert_eq!(run_in("src/deep", "1:src/b").ok().stdout, "b\n");
    let run = run_in("src", "1:../../x");
    assert_eq!(run.code, Some(2), "{run}");
}

#[test]
fn colour_only_when_asked_or_on_a_terminal_and_no_pager_under_a_pipe() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"x\n", 0o644);
    fx.mount();
    fx.sh("echo y > f");
    let plain = fx.opfs_c(&["diff"]).ok().stdout;
    assert!(!plain.contains('\x1b'), "no colour under a pipe: {plain:?}");
    let coloured = fx.opfs_c(&["diff", "--color=always"]).ok().stdout;
    assert!(
        coloured.contains("\x1b[31m-x\x1b[m\n\x1b[32m+y\x1b[m\n"),
        "{coloured:?}"
    );
    assert!(coloured.contains("\x1b[36m@@"), "{coloured:?}");
    let log = fx.opfs_c(&["log", "--color=always"]).ok().stdout;
    assert!(log.starts_with("\x1b[33mturn 1\x1b[m"), "{log:?}");
    assert!(!fx
        .opfs_c(&["diff", "--color=never"])
        .ok()
        .stdout
        .contains('\x1b'));
    // A pager that leaves a mark: never run under a pipe,
    let mark = fx.root().join("pager-ran");
    let pager = fx.root().join("pager.sh");
    write_file(
        &pager,
        format!("#!/bin/sh\ntouch {}\ncat\n", mark.display()).as_bytes(),
        0o755,
    );
    fx.set_env("OPFS_PAGER", pager.to_str().expect("utf8"));
    let piped = fx.opfs_c(&["diff"]).ok().stdout;
    assert_eq!(piped, plain);
    assert!(!mark.exists(), "the pager ran under a pipe");
    // but run on a terminal (script(1) gives it one), with colour, and
    // not with --no-pager.
    if which("script").is_none() {
        panic!("script(1) (util-linux) is needed to give opfs a terminal");
    }
    let on_tty = |extra: &str| {
        let cmd = format!(
            "{} -C {} diff {extra}",
            opfs_bin().display(),
            fx.mnt.display()
        );
        // The fixture's pinned environment, given to script(1) and so to
        // opfs under it.
        let c = fx.opfs_command::<&str>(&[]);
        let mut s = std::process::Command::new("script");
        s.args(["-qec", &cmd, "/dev/null"]);
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => s.env(k, v),
                None => s.env_remove(k),
            };
        }
        run_command(s, &fx.root().join("scratch"), COMMAND_TIMEOUT).expect("script")
    };
    let run = on_tty("--no-pager");
    assert_eq!(run.code, Some(0), "{run}");
    assert!(!mark.exists(), "the pager ran with --no-pager: {run}");
    assert!(
        run.stdout.contains("\x1b[32m+y"),
        "colour on a terminal: {run}"
    );
    let run = on_tty("");
    assert_eq!(run.code, Some(0), "{run}");
    assert!(mark.exists(), "no pager on a terminal: {run}");
    assert!(run.stdout.contains("+y"), "{run}");
    fs::remove_file(&mark).expect("rm mark");
    fx.set_env("NO_COLOR", "1");
    let run = on_tty("");
    assert!(!run.stdout.contains("\x1b[32m"), "NO_COLOR: {run}");
}

#[test]
fn the_daemon_log_stays_quiet_on_terminal_ioctls() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"x\n", 0o644);
    fx.mount();
    // `[ -t 0 ]` is isatty(): a TCGETS ioctl on the file, through the mount.
    let out = fx.sh("n=0; for i in $(seq 40); do [ -t 0 ] < f || n=$((n+1)); done; echo $n");
    assert_eq!(out.trim(), "40", "a file through the mount is no terminal");
    fx.umount();
    let log = fs::read_to_string(fx.state_dir().join("daemon.log")).expect("daemon.log");
    let ioctl_lines: Vec<&str> = log.lines().filter(|l| l.contains("ioctl")).collect();
    assert_eq!(ioctl_lines.len(), 1, "one line per ioctl number:\n{log}");
    assert!(
        ioctl_lines[0].contains("0x5401"),
        "TCGETS is 0x5401:\n{log}"
    );
    assert!(!log.contains("Not Implemented"), "{log}");
}
