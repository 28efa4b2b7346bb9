//! Disk use as a user sees it, on real mounts: `status`
//! counts everything opfs keeps, `gc --dry-run` works while mounted and
//! changes nothing, sizes take suffixes, and `gc` takes the commits of the
//! turns it dropped out of the export, keeps every kept turn's tree, and
//! packs it so a dropped turn's objects are gone.

// A failed unwrap is a failed test, with the error in the message.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::git_in as git;

fn git_ok(git_dir: &Path, args: &[&str]) -> String {
    let out = common::git_in_ok(git_dir, args);
    String::from_utf8(out).unwrap().trim().to_string()
}

fn turn_refs(git_dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = git_ok(
        git_dir,
        &["for-each-ref", "--format=%(refname)", "refs/opfs/turns/"],
    )
    .lines()
    .filter_map(|l| l.strip_prefix("refs/opfs/turns/")?.parse().ok())
    .collect();
    v.sort();
    v
}

#[test]
fn status_counts_the_state_dir_and_gc_prunes_the_export() {
    let fx = common::Fixture::new();
    fs::write(fx.p("keep.txt"), "kept all along\n").unwrap();
    fx.mount();
    // Turn 1 writes a file only turn 1's end holds; later turns edit f.
    fs::write(fx.m("old.txt"), "only at the end of turn 1\n").unwrap();
    fx.turn("t1");
    fs::remove_file(fx.m("old.txt")).unwrap();
    for i in 2..=6 {
        fs::write(fx.m("f"), format!("version {i}\n")).unwrap();
        fx.turn(&format!("t{i}"));
    }
    // Open turn 7. The daemon exports in the background; this one waits
    // for it (the export lock) and catches up.
    fx.opfs_c(&["export"]).ok();
    let git_dir = fx.state_dir().join("export.git");
    assert_eq!(turn_refs(&git_dir), vec![1, 2, 3, 4, 5, 6]);
    let old_blob = git_ok(&git_dir, &["rev-parse", "refs/opfs/turns/1:old.txt"]);
    let trees: Vec<String> = (5..=6)
        .map(|t| {
            git_ok(
                &git_dir,
                &["rev-parse", &format!("refs/opfs/turns/{t}^{{tree}}")],
            )
        })
        .collect();

    // status counts every part of the state dir, while mounted.
    let s = fx.status();
    let d = &s["disk"];
    let part = |k: &str| {
        d[k].as_u64()
            .unwrap_or_else(|| panic!("no disk.{k}: {s:#}"))
    };
    let sum: u64 = ["blobs", "index", "logs", "export", "worktrees", "other"]
        .iter()
        .map(|k| part(k))
        .sum();
    assert_eq!(sum, part("total"), "{s:#}");
    assert!(part("export") > 0 && part("index") > 0, "{s:#}");
    assert!(
        part("total") >= common_du(&fx.state_dir()) / 2,
        "status counts the whole state dir: {s:#}"
    );
    let text = fx.opfs_c(&["status"]).ok().stdout;
    assert!(text.contains("disk:") && text.contains("export"), "{text}");

    // A bad size names the flag and the accepted forms (exit 2).
    let run = fx.opfs_c(&["gc", "--dry-run", "--max-bytes", "10Q"]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(
        run.stderr.contains("--max-bytes") && run.stderr.contains("512K, 10M, 2G"),
        "{run}"
    );

    // The dry run works while mounted, says what it would do, and changes
    // nothing.
    let dry = fx
        .opfs_c(&[
            "gc",
            "--keep",
            "2",
            "--max-bytes",
            "2G",
            "--dry-run",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(dry["dry_run"], true, "{dry:#}");
    assert_eq!(dry["dropped_turns"], serde_json::json!([1, 5]), "{dry:#}");
    assert_eq!(dry["export"]["commits_dropped"], 5, "{dry:#}");
    assert_eq!(dry["export"]["commits_rewritten"], 1, "{dry:#}");
    let text = fx.opfs_c(&["gc", "--keep", "2", "--dry-run"]).ok().stdout;
    assert!(
        text.starts_with("dry run: turns 1 to 5 would be dropped"),
        "{text}"
    );
    assert_eq!(turn_refs(&git_dir), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(fx.points(true).len(), 7, "the dry run dropped nothing");

    fx.umount();
    let r = fx
        .opfs_p(&["gc", "--keep", "2", "--max-bytes", "512M", "--json"])
        .ok()
        .json();
    assert_eq!(r["dropped_turns"], serde_json::json!([1, 5]), "{r:#}");
    let e = &r["export"];
    assert_eq!(e["commits_dropped"], 5, "{r:#}");
    assert_eq!(e["commits_rewritten"], 1, "{r:#}");
    assert_eq!(e["packed"], "git", "{r:#}");
    // The export shows the kept history: a baseline of turn 6 (the end of
    // turn 5), then turn 6 with the tree it had.
    assert_eq!(turn_refs(&git_dir), vec![6]);
    assert_eq!(
        git_ok(&git_dir, &["rev-parse", "refs/opfs/baseline^{tree}"]),
        trees[0]
    );
    assert_eq!(
        git_ok(&git_dir, &["rev-parse", "refs/opfs/turns/6^{tree}"]),
        trees[1]
    );
    assert_eq!(
        git_ok(&git_dir, &["rev-list", "--count", "refs/heads/opfs"]),
        "2"
    );
    let msg = git_ok(
        &git_dir,
        &["log", "-1", "--format=%B", "refs/opfs/baseline"],
    );
    assert!(msg.contains("opfs-baseline: 6"), "{msg}");
    git_ok(&git_dir, &["fsck", "--strict", "--no-dangling"]);
    // Packed, and turn 1's blob is gone.
    let counts = git_ok(&git_dir, &["count-objects", "-v"]);
    assert!(
        counts.contains("\ncount: 0\n") || counts.starts_with("count: 0\n"),
        "{counts}"
    );
    assert!(
        !git(&git_dir, &["cat-file", "-e", &old_blob])
            .status
            .success(),
        "the blob only dropped turns held is still in the export"
    );

    // The next export goes on from the rewritten chain.
    fx.mount();
    fs::write(fx.m("f"), "after gc\n").unwrap();
    fx.turn("after gc");
    fx.opfs_c(&["export"]).ok();
    let parent = git_ok(&git_dir, &["rev-parse", "refs/heads/opfs^"]);
    let six = git_ok(&git_dir, &["rev-parse", "refs/opfs/turns/6"]);
    let newest = *turn_refs(&git_dir).last().unwrap();
    assert!(newest > 6);
    // Turn 7 (empty) and the turn after it follow turn 6.
    let chain = git_ok(&git_dir, &["rev-list", "refs/heads/opfs"]);
    assert!(chain.lines().any(|l| l == six), "{chain}");
    assert!(!parent.is_empty());
    assert_eq!(
        git_ok(&git_dir, &["show", &format!("refs/opfs/turns/{newest}:f")]),
        "after gc"
    );
}

/// Disk bytes of `dir` as `du -s --block-size=1` counts them.
fn common_du(dir: &Path) -> u64 {
    let out = Command::new("du")
        .args(["-s", "--block-size=1"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A first export that starts while a daemon-side gc is under way (the gc
/// found no export to hold, so it does not wait for this one) and reads
/// the turns gc drops meanwhile: the export notices and starts over from
/// what is kept, so its history ends as the project is. (Before, the
/// export listed the closed turns before the drop and loaded their
/// records after it: their commits lacked what they changed, gc's prune
/// then made the tree of the last dropped turn the new baseline, and the
/// export lacked `born` for good.) Failpoints pause gc after its hold
/// (`gc-after-hold`) and the export between listing the turns and loading
/// their records (`export-before-turns`).
#[test]
fn a_first_export_racing_a_daemon_gc_ends_as_the_project_is() {
    let fx = common::Fixture::new();
    fs::write(fx.p("f"), "f0\n").unwrap();
    let run = fx.try_mount(
        &["--no-export"],
        &[("OPFS_FAILPOINT", "gc-after-hold:1:pause=3000")],
    );
    assert_eq!(run.code, Some(0), "{run}");
    assert!(common::wait_mount_state(
        &fx.mnt,
        true,
        common::MOUNT_TIMEOUT
    ));
    fs::write(fx.m("born"), "made in turn 1\n").unwrap();
    fx.turn("t1");
    fs::write(fx.m("f"), "f2\n").unwrap();
    fx.turn("t2");
    fs::write(fx.m("f"), "f3\n").unwrap();
    fx.turn("t3");
    let mut gc = fx.opfs_command(&[
        "-C".as_ref(),
        fx.mnt.as_os_str(),
        "gc".as_ref(),
        "--keep".as_ref(),
        "1".as_ref(),
    ]);
    let gc = gc
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The export starts once gc is paused inside its hold (the daemon logs
    // the failpoint as it reaches it).
    let log = fx.state_dir().join("daemon.log");
    assert!(
        common::wait_for(std::time::Duration::from_secs(60), || {
            fs::read_to_string(&log).is_ok_and(|l| l.contains("failpoint gc-after-hold:1 reached"))
        }),
        "gc did not reach its hold within 60 s ({})",
        log.display()
    );
    let mut export = fx.opfs_command(&["-C".as_ref(), fx.mnt.as_os_str(), "export".as_ref()]);
    export.env("OPFS_FAILPOINT", "export-before-turns:1:pause=4000");
    let out = export.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let gc = gc.wait_with_output().unwrap();
    assert!(gc.status.success(), "gc failed: {gc:?}");
    fx.opfs_c(&["export"]).ok();
    let git_dir = fx.state_dir().join("export.git");
    let names = git_ok(
        &git_dir,
        &["ls-tree", "-r", "--name-only", "refs/heads/opfs"],
    );
    assert_eq!(names, "born\nf", "the export's newest tree");
    assert_eq!(
        git_ok(&git_dir, &["cat-file", "blob", "refs/heads/opfs:f"]),
        "f3"
    );
    fx.umount();
}
