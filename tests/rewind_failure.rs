//! A rewind that fails (disk full, I/O error) leaves the project as it was
//! or says exactly what it changed, and never replays later over work done
//! since (`docs/contract.md` guarantee 3; `docs/crash-model.md`, "A rewind
//! that fails").
//!
//! The room tests put the project and the state dir on one small ext4
//! image on a loop device, filled from outside, so they need root,
//! `mkfs.ext4` and loop devices; without them they say they are skipped
//! and why. The failpoint tests inject `ENOSPC` into the restore's writes
//! (`OPFS_FAILPOINT=rewind-write:N:enospc`) on any filesystem.

mod common;

use std::fs;
use std::io::Write;
use std::process::Stdio;

use common::loopfs::LoopFs;
use common::*;
use serde_json::Value;

/// `len` bytes that differ from block to block (nothing dedups).
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u64)
                .wrapping_mul(2654435761)
                .wrapping_add(u64::from(seed) * 7919)
                .rotate_right(7) as u8
        })
        .collect()
}

/// The kind of turn `n` per `opfs log --json`.
fn kind_of(f: &Fixture, n: u64) -> String {
    let log = f.opfs_c(&["log", "--json"]).ok().json();
    log.as_array()
        .and_then(|a| a.iter().find(|t| t["turn"].as_u64() == Some(n)))
        .and_then(|t| t["kind"].as_str())
        .unwrap_or("missing")
        .to_string()
}

/// After a rewind that failed: the open turn is an agent turn (the agent's
/// next writes are recorded where a later rewind reaches them) and nothing
/// is left pending (`--resume` has nothing to do).
fn assert_nothing_pending(f: &Fixture, ctx: &str) {
    let open = f.open_turn();
    assert_eq!(kind_of(f, open), "agent", "{ctx}: open turn {open}");
    let st = f.status();
    assert!(
        st["interrupted_rewind"].is_null(),
        "{ctx}: nothing should be pending: {st:#}"
    );
    let resume = f.opfs_c(&["rewind", "--resume"]);
    assert_ne!(resume.code, Some(0), "{ctx}: {resume}");
    assert!(
        resume.stderr.contains("no rewind is interrupted"),
        "{ctx}: {resume}"
    );
}

/// The 64 MiB case: project and state dir on one nearly full ext4. The
/// rewind must fail before it changes anything (or succeed exactly),
/// leave nothing pending, and no later start or rewind may replay it over
/// the agent's work done after it failed.
#[test]
fn a_rewind_without_room_changes_nothing_and_never_replays_over_later_work() {
    let fs64 = match LoopFs::make("mkfs.ext4", &["-q"], 64 << 20) {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let f = Fixture::new_in(&fs64.mnt);
    for i in 0..10u8 {
        write_file(&f.p(format!("big{i}")), &pattern(i, 2 << 20), 0o644);
    }
    for i in 0..100 {
        write_file(
            &f.p(format!("s{i}")),
            format!("small {i}\n").as_bytes(),
            0o644,
        );
    }
    f.mount_with(&["--no-export"]);
    let start = f.tree();
    for i in 0..10u8 {
        fs::write(f.m(format!("big{i}")), pattern(100 + i, 2 << 20)).expect("rewrite big");
    }
    for i in 0..100 {
        fs::write(f.m(format!("s{i}")), format!("new {i}\n")).expect("rewrite small");
    }
    let t2 = f.turn("after the rewrite");
    let after = f.tree();
    fs64.fill(64 << 10);

    let run = f.opfs_c(&["rewind", "1", "--json"]);
    if run.code == Some(0) {
        f.assert_tree("a rewind that succeeded", &start);
        return;
    }
    assert!(
        run.stderr.contains("nothing was changed") || run.stderr.contains("rolled back"),
        "the failed rewind must say what it left: {run}"
    );
    assert!(
        !run.stderr.contains("database or disk is full") || run.stderr.contains("rolled back"),
        "{run}"
    );
    f.assert_tree("after the failed rewind", &after);
    assert_nothing_pending(&f, "after the failed rewind");

    // The agent goes on working.
    fs::write(f.m("s1"), "AGENT WORK\n").expect("agent write");
    let agent_turn = f.open_turn();
    assert!(agent_turn >= t2);
    fs64.unfill();

    // The next start must not replay anything over it.
    f.umount();
    f.mount_with(&["--no-export"]);
    assert_eq!(fs::read(f.p("s1")).expect("s1"), b"AGENT WORK\n");
    let st = f.status();
    assert!(st["recovered"].is_null(), "nothing to recover: {st:#}");
    assert_nothing_pending(&f, "after the next start");

    // A rewind the user asks for again: exact, or refused with nothing changed.
    let mut expected = after.clone();
    expected.insert(
        b"s1".to_vec(),
        manifest(&f.project)[&b"s1".to_vec()].clone(),
    );
    f.assert_tree("before rewinding again", &expected);
    let run = f.opfs_c(&["rewind", "1", "--json"]);
    if run.code == Some(0) {
        f.assert_tree("rewound to turn 1", &start);
        // The redo gives the agent's work back.
        let rw = rewind_turn(&run.json());
        f.rewind(rw);
        f.assert_tree("redo", &expected);
    } else {
        assert!(run.stderr.contains("not enough room"), "{run}");
        f.assert_tree("refused again", &expected);
        assert_nothing_pending(&f, "refused again");
    }

    // A rewind that fits: the agent's turn, whose only path is s1.
    let v = f.rewind(agent_turn);
    assert_eq!(restored(&v), vec!["s1".to_string()], "{v:#}");
    assert_eq!(fs::read(f.p("s1")).expect("s1"), b"new 1\n");
    f.rewind(rewind_turn(&v));
    assert_eq!(fs::read(f.p("s1")).expect("s1"), b"AGENT WORK\n");
}

/// The ranged variant: a 6 MiB file written in place (its pre-images kept
/// as ranges, `docs/ranges.md`) on a 96 MiB ext4. `rewind 3` without room
/// must change nothing, and rewinds must work once space is freed.
#[test]
fn a_ranged_rewind_without_room_changes_nothing_and_works_once_space_is_freed() {
    let fs96 = match LoopFs::make("mkfs.ext4", &["-q"], 96 << 20) {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let f = Fixture::new_in(&fs96.mnt);
    write_file(&f.p("big"), &pattern(1, 6 << 20), 0o644);
    for i in 0..8 {
        write_file(&f.p(format!("f{i}")), format!("v1 {i}\n").as_bytes(), 0o644);
    }
    f.mount_with(&["--no-export"]);
    let write_at = |seed: u8, offset: u64, len: usize| {
        use std::os::unix::fs::FileExt;
        let file = fs::OpenOptions::new()
            .write(true)
            .open(f.m("big"))
            .expect("open big");
        file.write_all_at(&pattern(seed, len), offset)
            .expect("write big in place");
    };
    let mut starts = vec![f.tree()];
    // Turn 1.
    write_at(10, 0, 1 << 20);
    for i in 0..4 {
        fs::write(f.m(format!("f{i}")), format!("v2 {i}\n")).expect("write");
    }
    f.turn("two");
    starts.push(f.tree());
    // Turn 2.
    write_at(20, 2 << 20, 1 << 20);
    fs::write(f.m("new2"), "made in turn 2\n").expect("write");
    f.turn("three");
    starts.push(f.tree());
    // Turn 3: in place over most of the file, small files changed, made
    // and removed.
    write_at(30, 0, 5 << 20);
    for i in 0..8 {
        fs::write(f.m(format!("f{i}")), format!("v3 {i}\n")).expect("write");
    }
    fs::write(f.m("new3"), "made in turn 3\n").expect("write");
    fs::remove_file(f.m("new2")).expect("remove");
    f.turn("four");
    let after = f.tree();

    fs96.fill(64 << 10);
    let run = f.opfs_c(&["rewind", "3", "--json"]);
    if run.code == Some(0) {
        f.assert_tree("a rewind that succeeded", &starts[2]);
    } else {
        assert!(
            run.stderr.contains("nothing was changed") || run.stderr.contains("rolled back"),
            "the failed rewind must say what it left: {run}"
        );
        f.assert_tree("after the failed rewind", &after);
        assert_nothing_pending(&f, "after the failed rewind");
        // Refused the same way while there is no room, changing nothing.
        let again = f.opfs_c(&["rewind", "3"]);
        assert_ne!(again.code, Some(0), "{again}");
        f.assert_tree("after the second failed rewind", &after);
    }
    fs96.unfill();
    let v = f.rewind(3);
    f.assert_tree("rewind 3 once space is freed", &starts[2]);
    f.rewind(1);
    f.assert_tree("rewind 1", &starts[0]);
    f.rewind(rewind_turn(&v));
    f.assert_tree("redo of rewind 3", &after);
}

/// The index failing after the rewind opened its turn, before it wrote
/// anything (the commit of its records: what the full disk hit):
/// the project is unchanged, nothing is pending, the agent works in an
/// agent turn, and no later start replays the rewind over that work.
#[test]
fn an_index_failure_before_the_first_write_leaves_nothing_to_replay() {
    let f = Fixture::new();
    let (start, after) = twenty_rewritten(&f, &[("OPFS_FAILPOINT", "rewind-commit:1:enospc")]);
    let failed_turn = f.open_turn() + 1;
    let run = f.opfs_c(&["rewind", "1"]);
    assert_eq!(run.code, Some(1), "the rewind must fail: {run}");
    assert!(
        run.stderr.contains("failed before it changed anything")
            && run.stderr.contains(&format!(
                "turn {failed_turn}, the rewind's, is closed as rolled back"
            )),
        "{run}"
    );
    assert_eq!(manifest(&f.project), after);
    assert_nothing_pending(&f, "after the failed rewind");
    fs::write(f.m("s07"), "AGENT WORK\n").expect("agent write");
    f.umount();
    f.mount_with(&["--no-export"]);
    assert_eq!(fs::read(f.p("s07")).expect("s07"), b"AGENT WORK\n");
    assert!(f.status()["recovered"].is_null());
    // The rewind works now, and its redo gives the agent's work back.
    let v = f.rewind(1);
    assert_eq!(manifest(&f.project), start);
    f.rewind(rewind_turn(&v));
    assert_eq!(fs::read(f.p("s07")).expect("s07"), b"AGENT WORK\n");
}

/// The index failing while the rewind records (the state dir filling
/// after the room check passed), and again when it closes its turn: the
/// message does not claim the turn was closed, `status` warns about the
/// rewind turn left open, nothing is pending (`--abort` has nothing to put
/// back), and neither the next start nor the next rewind finishes the
/// failed rewind over the agent's work done since: the start closes the
/// turn as rolled back.
#[test]
fn a_rewind_failing_while_recording_and_closing_never_finishes_over_later_work() {
    let f = Fixture::new();
    let (start, after) = twenty_rewritten(
        &f,
        &[(
            "OPFS_FAILPOINT",
            "rewind-commit:1:enospc,rewind-close:1:enospc",
        )],
    );
    let failed_turn = f.open_turn() + 1;
    let run = f.opfs_c(&["rewind", "1"]);
    assert_eq!(run.code, Some(1), "the rewind must fail: {run}");
    assert!(
        run.stderr.contains("failed before it changed anything")
            && run
                .stderr
                .contains(&format!("turn {failed_turn}, the rewind's, is still open"))
            && !run.stderr.contains("is closed"),
        "{run}"
    );
    assert_eq!(manifest(&f.project), after);
    let st = f.status();
    assert!(
        st["interrupted_rewind"].is_null(),
        "nothing pending: {st:#}"
    );
    assert!(
        st["warnings"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w.as_str().is_some_and(|w| w
                .contains(&format!("turn {failed_turn}"))
                && w.contains("left open")))),
        "status must show the rewind turn left open: {st:#}"
    );
    fs::write(f.m("s07"), "AGENT WORK\n").expect("agent write");
    let abort = f.opfs_c(&["rewind", "--abort"]);
    assert_ne!(abort.code, Some(0), "{abort}");
    assert!(abort.stderr.contains("no rewind is interrupted"), "{abort}");
    assert_eq!(fs::read(f.p("s07")).expect("s07"), b"AGENT WORK\n");
    f.umount();
    // Unmounted, status says the same.
    let st = f.status();
    assert_eq!(st["interrupted_rewind"]["state"], "not started", "{st:#}");
    f.mount_with(&["--no-export"]);
    assert_eq!(fs::read(f.p("s07")).expect("s07"), b"AGENT WORK\n");
    let st = f.status();
    assert!(
        st["recovered"]
            .as_str()
            .is_some_and(|r| r.contains("before it changed anything")),
        "{st:#}"
    );
    let mut expected = after.clone();
    expected.insert(
        b"s07".to_vec(),
        manifest(&f.project)[&b"s07".to_vec()].clone(),
    );
    assert_eq!(manifest(&f.project), expected, "nothing replayed");
    assert_nothing_pending(&f, "after the next start");
    let list = f.opfs_c(&["rewind"]).ok();
    assert!(
        list.stdout
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{failed_turn} "))
                && l.contains("(failed, rolled back)")),
        "{list}"
    );
    // The rewind works now, and its redo gives the agent's work back.
    let v = f.rewind(1);
    assert_eq!(manifest(&f.project), start);
    f.rewind(rewind_turn(&v));
    assert_eq!(manifest(&f.project), expected);
}

/// Marking the restore done fails (the index, after every step ran): the
/// rewind says so, `status` reports the restore left running, the agent
/// works in an agent turn, and the next start finishes the restore without
/// touching the agent's work.
#[test]
fn a_restore_that_cannot_be_marked_done_is_reported_and_finished_around_later_work() {
    let f = Fixture::new();
    let (start, _after) = twenty_rewritten(&f, &[("OPFS_FAILPOINT", "rewind-done:1:enospc")]);
    let run = f.opfs_c(&["rewind", "1"]);
    assert_eq!(run.code, Some(1), "the rewind must fail: {run}");
    assert!(
        run.stderr.contains("could not mark it finished")
            && run.stderr.contains("database is full"),
        "{run}"
    );
    assert_eq!(manifest(&f.project), start, "every step ran");
    let open = f.open_turn();
    assert_eq!(kind_of(&f, open), "agent");
    let st = f.status();
    assert_eq!(st["interrupted_rewind"]["state"], "running", "{st:#}");
    assert!(
        st["warnings"].as_array().is_some_and(|w| w.iter().any(|w| w
            .as_str()
            .is_some_and(|w| w.contains("could not be marked finished")))),
        "{st:#}"
    );
    fs::write(f.m("s05"), "AGENT WORK\n").expect("agent write");
    f.umount();
    f.mount_with(&["--no-export"]);
    let st = f.status();
    assert!(
        st["recovered"]
            .as_str()
            .is_some_and(|r| r.contains("finished an interrupted rewind to turn 1")
                && r.contains("1 left unrestored")),
        "{st:#}"
    );
    assert_eq!(fs::read(f.p("s05")).expect("s05"), b"AGENT WORK\n");
    let mut expected = start.clone();
    expected.insert(
        b"s05".to_vec(),
        manifest(&f.project)[&b"s05".to_vec()].clone(),
    );
    assert_eq!(manifest(&f.project), expected);
    assert_nothing_pending(&f, "after the start finished it");
}

/// Twenty files rewritten in turn 1, so `rewind 1` writes them back in
/// path order (`s00` first): the failpoint's N-th write is `s(N-1)`.
fn twenty_rewritten(f: &Fixture, env: &[(&str, &str)]) -> (Manifest, Manifest) {
    for i in 0..20 {
        write_file(
            &f.p(format!("s{i:02}")),
            format!("start {i}\n").as_bytes(),
            0o644,
        );
    }
    let run = f.try_mount(&["--no-export"], env);
    assert_eq!(run.code, Some(0), "opfs mount failed: {run}");
    assert!(wait_mount_state(&f.mnt, true, MOUNT_TIMEOUT), "not mounted");
    let start = manifest(&f.project);
    for i in 0..20 {
        fs::write(f.m(format!("s{i:02}")), format!("agent {i}\n")).expect("rewrite");
    }
    f.turn("after");
    (start, manifest(&f.project))
}

/// A write that fails for space in the middle of a rewind: the rewind puts
/// back what it changed from its own records and says so; nothing is left
/// pending, and the same rewind works afterwards.
#[test]
fn a_write_failing_midway_rolls_the_rewind_back() {
    let f = Fixture::new();
    let (start, after) = twenty_rewritten(&f, &[("OPFS_FAILPOINT", "rewind-write:5:enospc")]);
    let run = f.opfs_c(&["rewind", "1"]);
    assert_eq!(run.code, Some(1), "the rewind must fail: {run}");
    assert!(
        run.stderr
            .contains("rolled back: the project is as it was before the rewind")
            && run.stderr.contains("s04")
            && run.stderr.contains("No space left on device"),
        "{run}"
    );
    assert_eq!(manifest(&f.project), after, "rolled back exactly");
    assert_manifest_eq("mount after the roll back", &after, &manifest(&f.mnt));
    assert_nothing_pending(&f, "after the roll back");
    let list = f.opfs_c(&["rewind"]).ok();
    assert!(list.stdout.contains("(failed, rolled back)"), "{list}");
    // The failpoint fired once: the same rewind now works.
    f.rewind(1);
    assert_eq!(manifest(&f.project), start);
}

/// A rewind that fails midway and cannot put back what it changed either:
/// `status`, the rewind list, `turn` and the agent hook say so; no start
/// finishes it by itself; `--resume` finishes it as a new turn, leaves the
/// agent's work done since alone, and a redo gives back what it overwrote.
#[test]
fn a_rewind_that_cannot_roll_back_is_reported_and_resumed_without_overwriting_later_work() {
    let f = Fixture::new();
    let (start, after) = twenty_rewritten(&f, &[("OPFS_FAILPOINT", "rewind-write:5:enospc+")]);
    let stopped_turn = f.open_turn() + 1;
    let run = f.opfs_c(&["rewind", "1"]);
    assert_eq!(run.code, Some(1), "the rewind must fail: {run}");
    assert!(
        run.stderr.contains("stopped: 4 of 20 paths restored")
            && run.stderr.contains("opfs rewind --resume"),
        "{run}"
    );
    // Exactly s00..s03 were restored.
    let mut half = after.clone();
    for i in 0..4 {
        let name = format!("s{i:02}").into_bytes();
        half.insert(name.clone(), start[&name].clone());
    }
    assert_eq!(manifest(&f.project), half, "4 paths restored, no more");
    let open = f.open_turn();
    assert_eq!(kind_of(&f, open), "agent");

    let st = f.status();
    assert_eq!(st["interrupted_rewind"]["state"], "stopped", "{st:#}");
    assert_eq!(st["interrupted_rewind"]["restored"], 4, "{st:#}");
    assert_eq!(st["interrupted_rewind"]["total"], 20, "{st:#}");
    let human = f.opfs_c(&["status"]).ok();
    assert!(human.stdout.contains("4 of 20 paths restored"), "{human}");
    let list = f.opfs_c(&["rewind"]).ok();
    assert!(
        list.stdout.contains("STOPPED") && list.stdout.contains("opfs rewind --resume"),
        "{list}"
    );
    let turn = f.opfs_c(&["turn"]).ok();
    assert!(turn.stderr.contains("4 of 20 paths restored"), "{turn}");
    let event = serde_json::json!({
        "hook_event_name": "UserPromptSubmit",
        "session_id": "s",
        "prompt": "go on",
        "cwd": f.mnt,
    });
    let mut hook = f.opfs_command(&["hook", "--agent", "claude-code"]);
    hook.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = hook.spawn().expect("spawn hook");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(event.to_string().as_bytes())
        .expect("event");
    let out = child.wait_with_output().expect("hook");
    assert_eq!(out.status.code(), Some(0));
    let said: Value = serde_json::from_slice(&out.stdout).expect("hook stdout is JSON");
    assert!(
        said["systemMessage"]
            .as_str()
            .is_some_and(|m| m.contains("4 of 20 paths restored")),
        "{said:#}"
    );

    // The agent works on: a path the rewind restored, one it did not.
    fs::write(f.m("s02"), "AGENT TWO\n").expect("agent write");
    fs::write(f.m("s10"), "AGENT TEN\n").expect("agent write");
    f.turn("agent work");
    let before_resume = manifest(&f.project);

    // No start finishes it by itself.
    f.umount();
    f.mount_with(&["--no-export"]);
    assert_eq!(manifest(&f.project), before_resume, "the start replayed it");
    assert_eq!(f.status()["interrupted_rewind"]["state"], "stopped");

    // The dry run shows the plan the resume would run, and writes nothing.
    let dry = f.opfs_c(&["rewind", "--resume", "--dry-run", "--json"]);
    assert_eq!(dry.code, Some(3), "its conflicts exit 3 too: {dry}");
    let d = dry.json();
    assert_eq!(d["dry_run"], true, "{d:#}");
    assert_eq!(d["rewound_to"], 1, "{d:#}");
    assert_eq!(manifest(&f.project), before_resume, "the dry run wrote");
    assert_eq!(f.status()["interrupted_rewind"]["state"], "stopped");
    let run = f.opfs_c(&["rewind", "--resume", "--json"]);
    assert_eq!(run.code, Some(3), "conflicts exit 3: {run}");
    let v = run.json();
    let conflicts: Vec<&str> = v["conflicts"]
        .as_array()
        .expect("conflicts")
        .iter()
        .filter_map(|c| c["path"].as_str())
        .collect();
    assert_eq!(conflicts, vec!["s02", "s10"], "{v:#}");
    assert_eq!(
        d["restored"], v["restored"],
        "the dry run's plan is the resume's"
    );
    assert_eq!(
        d["conflicts"], v["conflicts"],
        "the dry run's conflicts are the resume's"
    );
    let said = v["conflicts"][0].to_string();
    assert!(
        said.contains("a rewind to that turn gives the change back")
            && !said.contains("kept in turn"),
        "the conflict must say where the change is kept: {said}"
    );
    let mut expected = start.clone();
    for name in ["s02", "s10"] {
        let name = name.as_bytes().to_vec();
        expected.insert(name.clone(), before_resume[&name].clone());
    }
    assert_eq!(manifest(&f.project), expected, "resumed, later work kept");
    assert_nothing_pending(&f, "after --resume");
    // The redo of the resume gives back exactly what it overwrote; the
    // redo of the stopped rewind gives back the tree before it.
    f.rewind(rewind_turn(&v));
    assert_eq!(manifest(&f.project), before_resume, "redo of the resume");
    // (The agent's later work stays in its own turn's records.)
    f.rewind(stopped_turn);
    assert_eq!(manifest(&f.project), after, "redo of the stopped rewind");
}

/// A start that cannot finish an interrupted rewind for lack of room,
/// when the rewind had restored nothing yet (killed right after its
/// restore was marked running): it is reported stopped with 0 paths
/// restored, and not as "half restored".
#[test]
fn a_start_that_cannot_finish_a_rewind_that_restored_nothing_does_not_say_half_restored() {
    let fs64 = match LoopFs::make("mkfs.ext4", &["-q"], 64 << 20) {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let f = Fixture::new_in(&fs64.mnt);
    for i in 0..20u8 {
        write_file(&f.p(format!("f{i:02}")), &pattern(i, 256 << 10), 0o644);
    }
    let run = f.try_mount(&["--no-export"], &[("OPFS_FAILPOINT", "rewind-running:1")]);
    assert_eq!(run.code, Some(0), "opfs mount failed: {run}");
    assert!(wait_mount_state(&f.mnt, true, MOUNT_TIMEOUT), "not mounted");
    for i in 0..20u8 {
        fs::write(f.m(format!("f{i:02}")), pattern(50 + i, 256 << 10)).expect("rewrite");
    }
    f.turn("after");
    let after = manifest(&f.project);
    let pid = f.status()["pid"].as_u64().expect("daemon pid") as i32;
    let run = f.opfs_c(&["rewind", "1"]);
    assert_ne!(run.code, Some(0), "the daemon should have died: {run}");
    assert!(
        wait_dead(pid, std::time::Duration::from_secs(10)),
        "the daemon is still alive"
    );
    assert_eq!(
        manifest(&f.project),
        after,
        "nothing written before the kill"
    );
    fs64.fill(64 << 10);
    f.mount_with(&["--no-export"]);
    let st = f.status();
    assert_eq!(st["interrupted_rewind"]["state"], "stopped", "{st:#}");
    assert_eq!(st["interrupted_rewind"]["restored"], 0, "{st:#}");
    let human = f.opfs_c(&["status"]).ok();
    assert!(
        human.stdout.contains("0 of 20 paths restored") && !human.stdout.contains("half restored"),
        "{human}"
    );
    assert_eq!(manifest(&f.project), after);
    fs64.unfill();
}

/// A rewind that first finishes one whose restore could not be marked
/// done, and then fails itself, says what the finish did, not only that
/// "nothing was changed".
#[test]
fn a_rewind_that_finished_an_old_one_first_says_so_when_it_fails() {
    let f = Fixture::new();
    let (_start, _after) = twenty_rewritten(
        &f,
        &[(
            "OPFS_FAILPOINT",
            "rewind-done:1:enospc,rewind-commit:3:enospc",
        )],
    );
    let run = f.opfs_c(&["rewind", "1"]);
    assert_eq!(run.code, Some(1), "the rewind must fail: {run}");
    assert!(run.stderr.contains("could not mark it finished"), "{run}");
    fs::write(f.m("s05"), "AGENT WORK\n").expect("agent write");
    let run = f.opfs_c(&["rewind", "1"]);
    assert_eq!(run.code, Some(1), "the second rewind must fail: {run}");
    assert!(
        run.stderr
            .contains("first finished an interrupted rewind to turn 1")
            && run
                .stderr
                .contains("0 path(s) restored, 1 left as they are")
            && run
                .stderr
                .contains("then the rewind to turn 1 failed before it changed anything"),
        "{run}"
    );
    assert_eq!(fs::read(f.p("s05")).expect("s05"), b"AGENT WORK\n");
}

/// `--abort` puts back what a stopped rewind changed, as a new turn,
/// leaving the agent's later work alone.
#[test]
fn abort_puts_back_what_a_stopped_rewind_changed() {
    let f = Fixture::new();
    let (_start, after) = twenty_rewritten(&f, &[("OPFS_FAILPOINT", "rewind-write:5:enospc+")]);
    let run = f.opfs_c(&["rewind", "1"]);
    assert_eq!(run.code, Some(1), "the rewind must fail: {run}");
    fs::write(f.m("s01"), "AGENT ONE\n").expect("agent write");
    f.umount();
    f.mount_with(&["--no-export"]);
    let run = f.opfs_c(&["rewind", "--abort", "--json"]);
    assert_eq!(run.code, Some(3), "the agent's path is a conflict: {run}");
    let mut expected = after.clone();
    expected.insert(
        b"s01".to_vec(),
        manifest(&f.project)[&b"s01".to_vec()].clone(),
    );
    assert_eq!(fs::read(f.p("s01")).expect("s01"), b"AGENT ONE\n");
    assert_eq!(
        manifest(&f.project),
        expected,
        "aborted: as before the rewind"
    );
    assert_nothing_pending(&f, "after --abort");
}
