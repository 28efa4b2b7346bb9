//! Retention while mounted, on real mounts: `opfs gc`
//! goes to the daemon, which applies it by turn count and by byte budget
//! (dropped turns gone from `opfs rewind`, kept ones rewind exactly, the
//! store shrinks); a worktree's base turn stays pinned; a workload running
//! through the mount during gc loses nothing; the daemon applies a
//! configured policy by itself after `opfs turn`; and SIGKILL inside a
//! daemon-side gc leaves a store `opfs verify` accepts, whose every kept
//! turn rewinds exactly. Needs `/dev/fuse`.

// A failed unwrap is a failed test, with the error in the message.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// Distinct content of `len` bytes for `(seed, version)`: large enough to
/// be stored as a blob file (above 16 KiB) when `len` is.
fn content(seed: u64, version: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(version));
    rng.bytes(len)
}

/// Turns `first..` of a history: each turn rewrites `big` (64 KiB, a new
/// version), edits `small` and adds a file; returns the manifest of the
/// project at the start of each turn, by turn number.
fn history(f: &Fixture, turns: u64) -> Vec<(u64, Manifest)> {
    let mut starts = Vec::new();
    for i in 0..turns {
        let t = f.turn(&format!("t{i}"));
        starts.push((t, f.tree()));
        fs::write(f.m("big"), content(1, i, 64 << 10)).unwrap();
        fs::write(f.m("small"), format!("small {i}\n")).unwrap();
        fs::write(f.m(format!("added-{i}")), format!("{i}\n")).unwrap();
    }
    starts
}

fn gc(f: &Fixture, args: &[&str]) -> Value {
    let mut all = vec!["gc", "--json"];
    all.extend_from_slice(args);
    let run = f.opfs_c(&all);
    assert_eq!(run.code, Some(0), "opfs gc {args:?} failed: {run}");
    run.json()
}

fn turns_listed(f: &Fixture) -> Vec<u64> {
    f.points(true)
        .iter()
        .filter_map(|p| p["turn"].as_u64())
        .collect()
}

fn store_bytes(f: &Fixture) -> u64 {
    f.status()["store_bytes"].as_u64().unwrap()
}

/// Bytes of the blob files of the state dir.
fn blob_file_bytes(f: &Fixture) -> u64 {
    walk_tree(&f.state_dir().join("blobs"), &[])
        .unwrap()
        .iter()
        .filter(|e| e.meta.is_file())
        .map(|e| e.meta.len())
        .sum()
}

/// Every turn in `starts` from `oldest` on rewinds to exactly its
/// manifest (newest first, so each rewind crosses the ones before it).
fn kept_turns_rewind_exactly(f: &Fixture, starts: &[(u64, Manifest)], oldest: u64, ctx: &str) {
    for (t, m) in starts.iter().rev().filter(|(t, _)| *t >= oldest) {
        f.rewind_in(&format!("{ctx}: "), *t);
        f.assert_tree(&format!("{ctx}: turn {t}"), m);
    }
}

/// `opfs verify --json` on the unmounted state dir: asserts it is
/// consistent and returns the report.
fn verify_ok(f: &Fixture, ctx: &str) -> Value {
    let run = f.opfs_p(&["verify", "--json"]);
    assert_eq!(run.code, Some(0), "{ctx}: verify failed: {run}");
    let v = run.json();
    assert_eq!(v["ok"], true, "{ctx}: {v:#}");
    v
}

#[test]
fn gc_while_mounted_by_turn_count_and_by_byte_budget() {
    let f = Fixture::new();
    fs::write(f.p("big"), content(1, 999, 64 << 10)).unwrap();
    f.mount();
    let starts = history(&f, 8);
    let open = f.open_turn();
    let first = starts[0].0;
    let before_bytes = store_bytes(&f);
    let before_files = blob_file_bytes(&f);

    // By count: keep the newest 5 turns (the open one among them).
    let r = gc(&f, &["--keep", "5"]);
    let cut = open + 1 - 5;
    assert_eq!(r["dry_run"], false, "{r:#}");
    assert_eq!(r["dropped_turns"], serde_json::json!([1, cut - 1]), "{r:#}");
    assert_eq!(r["oldest_kept"], cut, "{r:#}");
    assert!(r["records_deleted"].as_u64().unwrap() > 0, "{r:#}");
    assert!(r["blobs_removed"].as_u64().unwrap() > 0, "{r:#}");
    assert!(store_bytes(&f) < before_bytes, "{r:#}");
    assert!(blob_file_bytes(&f) < before_files, "{r:#}");
    let listed = turns_listed(&f);
    assert_eq!(listed.first(), Some(&cut), "{listed:?}");
    // A dropped turn is bad usage, naming the oldest kept one.
    let run = f.opfs_c(&["rewind", &first.max(1).to_string()]);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("dropped by retention"), "{run}");

    // The mount works on, and the kept turns still rewind exactly.
    let more = history(&f, 2);
    let all: Vec<(u64, Manifest)> = starts.into_iter().chain(more).collect();
    kept_turns_rewind_exactly(&f, &all, cut, "after gc --keep");

    // By byte budget: each version of `big` is 64 KiB; a budget of 200
    // KiB keeps the turns whose records name at most that.
    let before = store_bytes(&f);
    let r = gc(&f, &["--max-bytes", "200K"]);
    let oldest = r["oldest_kept"].as_u64().unwrap();
    assert!(oldest > cut, "the budget dropped more turns: {r:#}");
    let after = store_bytes(&f);
    assert!(after <= 200 << 10 && after < before, "{after} {r:#}");
    assert_eq!(turns_listed(&f).first(), Some(&oldest));
    kept_turns_rewind_exactly(&f, &all, oldest, "after gc --max-bytes");
    f.umount();
    let v = verify_ok(&f, "after both");
    assert_eq!(v["unreferenced_blobs"], 0, "{v:#}");
}

#[test]
fn a_worktree_base_stays_pinned_while_mounted() {
    let f = Fixture::new();
    f.mount();
    let starts = history(&f, 3);
    let base = starts[1].0;
    let w = PathBuf::from(
        f.opfs_p(&["worktree", "create", "w", "--from", &base.to_string()])
            .ok()
            .stdout
            .trim_end(),
    );
    assert!(wait_mount_state(&w, true, MOUNT_TIMEOUT));
    history(&f, 2);
    let r = gc(&f, &["--keep", "1"]);
    assert_eq!(r["oldest_kept"], base, "{r:#}");
    let note = r["note"].as_str().unwrap_or_default();
    assert!(note.contains("worktree \"w\""), "{r:#}");
    // The worktree still shows the project as turn `base` began.
    assert_manifest_eq(
        "the worktree after gc",
        &starts[1].1,
        &manifest_without_git(&w),
    );
    f.opfs_p(&["worktree", "discard", "w"]).ok();
    let r = gc(&f, &["--keep", "1"]);
    assert_eq!(r["oldest_kept"], f.open_turn(), "{r:#}");
    f.umount();
    verify_ok(&f, "after the pin went");
}

/// `worktree create --from N` checks turn N, then writes the metadata
/// that pins it; a gc in between must wait (the pins lock) and then keep
/// N, so the worktree shows the project as N began.
#[test]
fn a_worktree_created_during_gc_keeps_its_base() {
    let f = Fixture::new();
    f.mount();
    let starts = history(&f, 4);
    let (base, at_base) = &starts[1];
    let mut cmd = f.opfs_command(&[
        OsStr::new("-C"),
        f.project.as_os_str(),
        OsStr::new("worktree"),
        OsStr::new("create"),
        OsStr::new("w"),
        OsStr::new("--from"),
        OsStr::new(&base.to_string()),
    ]);
    cmd.env("OPFS_FAILPOINT", "worktree-before-meta:1:pause=1500")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap_or_default();
            if line.contains("failpoint worktree-before-meta:1 reached") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(60)).is_ok(),
        "worktree create never reached its failpoint"
    );
    let r = gc(&f, &["--keep", "1"]);
    let status = child.wait().unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let err = reader.join().unwrap();
    assert!(status.success(), "worktree create failed: {err}");
    assert_eq!(r["oldest_kept"], *base, "{r:#}");
    let w = PathBuf::from(out.trim_end());
    assert!(wait_mount_state(&w, true, MOUNT_TIMEOUT));
    assert_manifest_eq("the worktree", at_base, &manifest_without_git(&w));
    f.opfs_p(&["worktree", "discard", "w"]).ok();
}

/// The race gc must win: while it sweeps, the agent writes, and its
/// captures find already stored a blob that only dropped turns named (the
/// content the files had when the turn began, stored once as another
/// file's pre-image). Every capture made during gc must keep its blob:
/// the turn gc ran in rewinds exactly to its start. The daemon pauses
/// between reading the kept blobs and sweeping (failpoint
/// `gc-before-sweep`), and the writer writes inside that pause.
#[test]
fn gc_during_a_workload_loses_nothing() {
    const COPIES: usize = 100;
    let f = Fixture::new();
    f.set_env("OPFS_FAILPOINT", "gc-before-sweep:1:pause=1500");
    f.mount();
    // Turn A: `x` and COPIES files `y*` get content X (no blob yet).
    f.turn("A");
    let x = content(2, 0, 40 << 10);
    fs::write(f.m("x"), &x).unwrap();
    for j in 0..COPIES {
        fs::write(f.m(format!("y{j}")), &x).unwrap();
    }
    // Turn B: `x` changes, so X is stored as its pre-image, named by B's
    // record alone. One more turn, and `gc --keep 2` drops B.
    f.turn("B");
    fs::write(f.m("x"), b"changed").unwrap();
    f.turn("filler");
    let during = f.turn("gc");
    let start = f.tree();
    let log = f.state_dir().join("daemon.log");
    let writer = {
        let mnt = f.mnt.clone();
        std::thread::spawn(move || {
            let paused = wait_for(Duration::from_secs(60), || {
                fs::read_to_string(&log)
                    .is_ok_and(|l| l.contains("failpoint gc-before-sweep:1 reached"))
            });
            // Each first write captures pre-image X: a blob gc is about to
            // sweep, found stored.
            for j in 0..COPIES {
                fs::write(mnt.join(format!("y{j}")), format!("{j}")).unwrap();
            }
            paused
        })
    };
    let r = gc(&f, &["--keep", "2"]);
    assert!(writer.join().unwrap(), "the daemon never paused");
    assert_eq!(
        r["dropped_turns"],
        serde_json::json!([1, during - 2]),
        "{r:#}"
    );
    f.rewind_in("the turn gc ran in: ", during);
    f.assert_tree("the turn gc ran in", &start);
    f.umount();
    verify_ok(&f, "after gc under a workload");
}

/// `[retention]` in the configuration file: the daemon applies it by
/// itself after turns; `auto = false` leaves it to `opfs gc`, which then
/// takes its values as defaults.
#[test]
fn the_daemon_applies_a_configured_policy_after_turns() {
    let f = Fixture::new();
    fs::write(&f.pinned.config, "[retention]\nkeep = 3\n").unwrap();
    f.mount();
    let starts = history(&f, 6);
    let open = f.opfs_c(&["turn"]).ok();
    let open = parse_turn_number(&open);
    let kept_from = open + 1 - 3;
    let dropped = wait_for(Duration::from_secs(20), || {
        turns_listed(&f).first() == Some(&kept_from)
    });
    assert!(dropped, "turns listed: {:?}", turns_listed(&f));
    // One rewind: it closes turns, after which the policy drops more.
    let (_, m) = starts.iter().find(|(t, _)| *t == kept_from).unwrap();
    f.rewind_in("after automatic gc: ", kept_from);
    f.assert_tree("after automatic gc", m);
    f.umount();
    verify_ok(&f, "after automatic gc");

    // A byte budget alone turns it on too.
    fs::write(&f.pinned.config, "[retention]\nmax_bytes = \"150K\"\n").unwrap();
    f.mount();
    assert!(
        has_retention_thread(&f),
        "a configured policy runs the automatic retention"
    );
    history(&f, 4);
    f.turn("last");
    let ok = wait_for(Duration::from_secs(20), || store_bytes(&f) <= 150 << 10);
    assert!(ok, "store bytes {}", store_bytes(&f));
    f.umount();

    // auto = false: nothing dropped by itself; `opfs gc` keeps 2.
    fs::write(&f.pinned.config, "[retention]\nkeep = 2\nauto = false\n").unwrap();
    f.mount();
    history(&f, 4);
    // Nothing can drop turns by itself: the daemon runs no retention
    // thread (checked on the daemon, not by waiting to see nothing).
    assert!(
        !has_retention_thread(&f),
        "auto = false starts no automatic retention"
    );
    let listed = turns_listed(&f);
    assert!(
        listed.len() > 3,
        "more turns than keep = 2 keeps: {listed:?}"
    );
    let r = gc(&f, &[]);
    let open = f.open_turn();
    assert_eq!(r["oldest_kept"], open - 1, "{r:#}");

    // A bad table is refused before anything is mounted.
    f.umount();
    fs::write(&f.pinned.config, "[retention]\nkeep = 0\n").unwrap();
    let run = f.try_mount(&[], &[]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("[retention] keep = 0"), "{run}");
}

/// SIGKILL inside a daemon-side gc: after the index dropped the turns
/// (before any blob file went), and after the first blob file went. The
/// next start needs nothing; `opfs verify` accepts the store; every kept
/// turn rewinds exactly; the next gc removes what the killed one left.
#[test]
fn sigkill_during_gc_while_mounted() {
    for point in ["gc-after-drop:1", "gc-after-remove:1", "gc-after-remove:3"] {
        let f = Fixture::new();
        fs::write(f.p("big"), content(3, 99, 64 << 10)).unwrap();
        let run = f.try_mount(&[], &[("OPFS_FAILPOINT", point)]);
        assert_eq!(run.code, Some(0), "{point}: {run}");
        assert!(wait_mount_state(&f.mnt, true, MOUNT_TIMEOUT));
        let pid = f.status()["pid"].as_i64().unwrap() as i32;
        let starts = history(&f, 6);
        let open = f.open_turn();
        let run = f.opfs_c(&["gc", "--keep", "2"]);
        assert_eq!(
            run.code,
            Some(1),
            "{point}: the daemon should have died: {run}"
        );
        assert!(
            wait_dead(pid, Duration::from_secs(10)),
            "{point}: still alive"
        );
        // The next mount cleans up the dead one and needs nothing else.
        f.mount();
        let s = f.status();
        assert!(s["recovered"].is_null(), "{point}: {s:#}");
        let cut = open + 1 - 2;
        assert_eq!(turns_listed(&f).first(), Some(&cut), "{point}");
        kept_turns_rewind_exactly(&f, &starts, cut, point);
        f.umount();
        let v = verify_ok(&f, point);
        if point.starts_with("gc-after-drop") {
            assert!(
                v["unreferenced_blobs"].as_u64().unwrap() > 0,
                "{point}: killed before any blob file went: {v:#}"
            );
        }
        // The next gc removes what the killed one left (its blob files).
        f.opfs_p(&["gc", "--keep", "100", "--json"]).ok();
        let v = verify_ok(&f, point);
        assert_eq!(v["unreferenced_blobs"], 0, "{point}: {v:#}");
    }
}

/// A gc that drops more than one step's records (`gc::STEP_RECORDS`,
/// 2048) commits them in steps, the gate released between them; killed
/// between two steps it leaves a smaller, consistent gc: the turns of the
/// first step gone, every other turn there and exact, and the next gc
/// finishes the policy.
#[test]
fn sigkill_between_gc_steps() {
    const FILES: usize = 1100;
    let f = Fixture::new();
    let run = f.try_mount(
        &["--no-export"],
        &[("OPFS_FAILPOINT", "gc-between-steps:1")],
    );
    assert_eq!(run.code, Some(0), "{run}");
    assert!(wait_mount_state(&f.mnt, true, MOUNT_TIMEOUT));
    let pid = f.status()["pid"].as_i64().unwrap() as i32;
    let mut starts = Vec::new();
    for t in 0..4 {
        let n = f.turn(&format!("t{t}"));
        starts.push((n, f.tree()));
        let script = format!("for i in $(seq 1 {FILES}); do printf '{t} %s\\n' $i > f$i; done");
        f.sh(&script);
    }
    let open = f.turn("last");
    starts.push((open, f.tree()));
    let run = f.opfs_c(&["gc", "--keep", "1"]);
    assert_eq!(run.code, Some(1), "the daemon should have died: {run}");
    assert!(wait_dead(pid, Duration::from_secs(10)), "still alive");
    f.mount_with(&["--no-export"]);
    let oldest = *turns_listed(&f).first().unwrap();
    assert!(
        oldest > starts[0].0 && oldest < open,
        "one step, not all, was committed: oldest kept {oldest}, open {open}"
    );
    kept_turns_rewind_exactly(&f, &starts, oldest, "after a kill between steps");
    let r = gc(&f, &["--keep", "1"]);
    assert_eq!(r["oldest_kept"], f.open_turn(), "{r:#}");
    f.umount();
    verify_ok(&f, "after the steps");
}

/// `opfs -C MOUNTPOINT gc` with the mount gone stale is refused like any
/// other command; with nothing mounted it runs on the state dir.
#[test]
fn gc_without_a_daemon_runs_on_the_state_dir() {
    let f = Fixture::new();
    f.mount();
    history(&f, 4);
    f.umount();
    let r = f
        .opfs(&[
            OsStr::new("-C"),
            f.project.as_os_str(),
            OsStr::new("gc"),
            OsStr::new("--keep"),
            OsStr::new("2"),
            OsStr::new("--json"),
        ])
        .ok()
        .json();
    assert!(r["dropped_turns"].is_array(), "{r:#}");
    verify_ok(&f, "unmounted gc");
}

/// With no `[retention]` table the daemon applies the default policy by
/// itself: a turn goes once it is outside the newest 100 *and* ended more
/// than 30 days ago, so a store never grows without bound while nothing
/// recent goes. Turns 1 to 3 are made 40 days old in the index; of the
/// 105 turns then, only they are dropped (4 and 5 are outside the newest
/// 100 but recent), at the mount's start or after a turn, whichever
/// comes first. (Before, nothing was dropped without the table.)
#[test]
fn the_default_policy_drops_turns_past_100_and_30_days_while_mounted() {
    let f = Fixture::new();
    fs::write(f.p("f"), "0\n").unwrap();
    f.mount();
    for i in 1..=103u64 {
        fs::write(f.m("f"), format!("{i}\n")).unwrap();
        let run = f.opfs_c(&["turn"]).ok();
        assert_eq!(parse_turn_number(&run), i + 1);
    }
    f.umount();
    let days_40: i64 = 40 * 86_400 * 1_000_000_000;
    let conn = rusqlite::Connection::open(f.state_dir().join("index.db")).unwrap();
    conn.execute(
        "UPDATE turns SET started_at = started_at - ?1, ended_at = ended_at - ?1 WHERE number <= 3",
        [days_40],
    )
    .unwrap();
    drop(conn);
    // The daemon checks the policy once at start (a policy configured
    // since the last mount applies at once) and after each turn.
    f.mount();
    let dropped = wait_for(Duration::from_secs(20), || {
        turns_listed(&f).first() == Some(&4)
    });
    assert!(dropped, "turns listed: {:?}", turns_listed(&f));
    let open = parse_turn_number(&f.opfs_c(&["turn"]).ok());
    assert_eq!(open, 105);
    let kept = wait_for(Duration::from_secs(2), || {
        turns_listed(&f).first() != Some(&4)
    });
    assert!(!kept, "a recent turn went: {:?}", turns_listed(&f));
    // Turn 4 is outside the newest 100 but only days old: kept, and it
    // rewinds exactly.
    f.rewind_in("after the default policy: ", 4);
    assert_eq!(fs::read_to_string(f.m("f")).unwrap(), "3\n");
    f.umount();
    verify_ok(&f, "after the default policy");
}

/// Whether the daemon serving `f` runs the automatic retention (its
/// thread `opfs-retention`, started at mount when a policy applies by
/// itself).
fn has_retention_thread(f: &Fixture) -> bool {
    let pid = f.status()["pid"].as_i64().expect("the daemon's pid");
    fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the daemon's threads")
        .flatten()
        .any(|t| {
            fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "opfs-retention")
        })
}
