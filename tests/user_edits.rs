//! The user's own edits are never clobbered (design §2.6): a
//! path changed directly in the project after the mount last wrote it is a
//! conflict for `rewind` (and its dry run), `--force` overrides, and the
//! mount serves the changed file correctly.
//!
//! The rewinds here pass `--partial`: they check each path's outcome, the
//! others restored around a conflict (without it a conflict restores
//! nothing: `tests/rewind.rs`).

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

fn conflicts(v: &serde_json::Value) -> Vec<String> {
    v["conflicts"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["path"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_same_size_edit_right_after_the_mount_wrote_is_a_conflict() {
    let fx = Fixture::new();
    fs::write(fx.p("f.txt"), b"original\n").expect("write");
    fx.mount();
    assert_eq!(fx.turn("work"), 2);
    // Through the mount, then at once directly in the project, with the
    // same size: only a fine-grained timestamp tells the two apart.
    fs::write(fx.m("f.txt"), b"agent-1\n").expect("write via mount");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(fx.p("f.txt"))
        .expect("open in project");
    f.write_all(b"USER-01\n").expect("write behind the mount");
    drop(f);

    let dry = fx.opfs_c(&["rewind", "2", "--dry-run", "--partial", "--json"]);
    assert_eq!(dry.code, Some(3), "{dry}");
    assert_eq!(conflicts(&dry.json()), vec!["f.txt".to_string()]);

    let run = fx.opfs_c(&["rewind", "2", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    assert_eq!(conflicts(&run.json()), vec!["f.txt".to_string()]);
    assert_eq!(fs::read(fx.p("f.txt")).expect("read"), b"USER-01\n");

    let forced = fx.opfs_c(&["rewind", "2", "--force", "--partial", "--json"]);
    assert_eq!(forced.code, Some(0), "{forced}");
    assert_eq!(fs::read(fx.p("f.txt")).expect("read"), b"original\n");
}

#[test]
fn user_deletions_creations_and_chmods_are_conflicts() {
    let fx = Fixture::new();
    fs::write(fx.p("gone.txt"), b"g\n").expect("write");
    fs::write(fx.p("mode.txt"), b"m\n").expect("write");
    fx.mount();
    assert_eq!(fx.turn("work"), 2);
    fx.sh("echo g2 > gone.txt && echo m2 > mode.txt && echo n > new.txt && rm new.txt && echo keep > other.txt");
    // Behind the mount: delete what the agent wrote, chmod another, create
    // a file where the agent had deleted one.
    fs::remove_file(fx.p("gone.txt")).expect("rm");
    fs::set_permissions(
        fx.p("mode.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    fs::write(fx.p("new.txt"), b"the user's new file\n").expect("write");

    let run = fx.opfs_c(&["rewind", "2", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    let mut c = conflicts(&run.json());
    c.sort();
    assert_eq!(c, vec!["gone.txt", "mode.txt", "new.txt"]);
    // Everything else was restored.
    assert!(!fx.p("other.txt").exists());
    assert_eq!(
        fs::read(fx.p("new.txt")).expect("read"),
        b"the user's new file\n"
    );
}

#[test]
fn the_mount_serves_a_file_changed_behind_its_back() {
    let fx = Fixture::new();
    fs::write(fx.p("grow.txt"), b"short\n").expect("write");
    fx.mount();
    // Read through the mount so the kernel caches its attributes.
    assert_eq!(fs::read(fx.m("grow.txt")).expect("read"), b"short\n");
    let longer = b"a much longer content, written directly in the project\n".repeat(50);
    fs::write(fx.p("grow.txt"), &longer).expect("write behind");
    assert_eq!(
        read_until(&fx.m("grow.txt"), &longer),
        longer,
        "no stale size or content through the mount"
    );
    fs::write(fx.p("grow.txt"), b"tiny").expect("shrink behind");
    assert_eq!(read_until(&fx.m("grow.txt"), b"tiny"), b"tiny");
}

/// Reads `path` (through the mount) until it holds `want`, for at most
/// 3 s, and returns the last read. A change made behind the mount shows
/// once the watch has invalidated the kernel's caches: promptly, not
/// synchronously (docs/coherence.md; `tests/coherence.rs` bounds the
/// delay). A stale cache would last the 60 s TTL and fail here.
fn read_until(path: &Path, want: &[u8]) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let got = fs::read(path).expect("read via mount");
        if got == want || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A file made directly in the project inside a directory the agent made
/// through the mount, then removed with it through the mount: its record
/// says it existed, but its directory did not exist when the turn began.
/// The dry run and the real run report the same conflict and create
/// nothing beneath the absent directory, even with `--force`.
#[test]
fn a_record_beneath_a_directory_absent_at_the_target_is_a_conflict_not_a_creation() {
    let fx = Fixture::new();
    fs::write(fx.p("f"), b"a\n").expect("write");
    fx.mount();
    fs::write(fx.m("f"), b"b\n").expect("write via mount");
    assert_eq!(fx.turn("work"), 2);
    fs::create_dir(fx.m("d")).expect("mkdir via mount");
    fs::write(fx.p("d/x"), b"direct\n").expect("write in the project");
    assert_eq!(fx.turn("more"), 3);
    fs::remove_dir_all(fx.m("d")).expect("rm -rf via mount");

    let dry = fx.opfs_c(&["rewind", "1", "--dry-run", "--partial", "--json"]);
    assert_eq!(dry.code, Some(3), "{dry}");
    assert_eq!(conflicts(&dry.json()), vec!["d/x".to_string()], "{dry}");
    let report = dry.json();
    let planned: Vec<&str> = report["plan"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["path"].as_str()).collect())
        .unwrap_or_default();
    assert!(planned.contains(&"f"), "the dry run does not plan f: {dry}");
    assert!(!planned.contains(&"d/x"), "the dry run plans d/x: {dry}");

    for args in [
        &["rewind", "1", "--partial", "--json"][..],
        &["rewind", "1", "--force", "--partial", "--json"][..],
    ] {
        let run = fx.opfs_c(args);
        assert_eq!(run.code, Some(3), "{run}");
        assert_eq!(conflicts(&run.json()), vec!["d/x".to_string()], "{run}");
        assert_eq!(fs::read(fx.p("f")).expect("read"), b"a\n");
        assert!(!fx.p("d").exists(), "d was created: {run}");
    }
}

/// Files and a directory created directly in the project in turn 2, then
/// removed through the mount in turn 3: the mount's only records of them
/// are in turn 3. A rewind to turn 1 or 2 must not bring them back (they
/// were not there when those turns began, or what was there is unknown):
/// each is a conflict, even with `--force`, and `show` says so. A rewind to
/// turn 3, when they existed, restores them.
#[test]
fn files_created_outside_the_mount_then_removed_through_it_are_not_put_back_into_earlier_turns() {
    let fx = Fixture::new();
    fs::write(fx.p("f"), b"a\n").expect("write");
    fx.mount();
    fs::write(fx.m("f"), b"b\n").expect("write via mount");
    assert_eq!(fx.turn("work"), 2);
    fs::create_dir(fx.p("d2")).expect("mkdir in the project");
    fs::write(fx.p("d2/x"), b"direct x\n").expect("write in the project");
    fs::write(fx.p("y"), b"direct y\n").expect("write in the project");
    // Created through the mount in turn 2: its history is known.
    fs::write(fx.m("g"), b"g\n").expect("write via mount");
    assert_eq!(fx.turn("more"), 3);
    fs::remove_dir_all(fx.m("d2")).expect("rm -rf via mount");
    fs::remove_file(fx.m("y")).expect("rm via mount");
    fs::write(fx.m("g"), b"g2\n").expect("write via mount");

    let unknown = vec!["d2".to_string(), "d2/x".to_string(), "y".to_string()];
    for turn in ["1", "2"] {
        let dry = fx.opfs_c(&["rewind", turn, "--dry-run", "--partial", "--json"]);
        assert_eq!(dry.code, Some(3), "{dry}");
        assert_eq!(conflicts(&dry.json()), unknown, "{dry}");
        let show = fx.opfs_c(&["show", &format!("{turn}:y")]);
        assert_eq!(show.code, Some(1), "{show}");
        assert!(show.stderr.contains("unknown"), "{show}");
    }
    let run = fx.opfs_c(&["rewind", "1", "--force", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    assert_eq!(conflicts(&run.json()), unknown, "{run}");
    assert_eq!(fs::read(fx.p("f")).expect("read"), b"a\n");
    assert!(
        !fx.p("g").exists(),
        "g was created in turn 2 through the mount"
    );
    assert!(!fx.p("y").exists(), "y was put back into turn 1");
    assert!(!fx.p("d2").exists(), "d2 was put back into turn 1");

    let run = fx.opfs_c(&["rewind", "3", "--partial", "--json"]);
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(fs::read(fx.p("y")).expect("read"), b"direct y\n");
    assert_eq!(fs::read(fx.p("d2/x")).expect("read"), b"direct x\n");
    assert_eq!(fs::read(fx.p("g")).expect("read"), b"g\n");
    let show = fx.opfs_c(&["show", "3:y"]).ok();
    assert_eq!(show.stdout, "direct y\n");
}

/// A file the user replaced in turn 2 the way editors save (a new file
/// renamed over the old one), then edited through the mount in turn 3: a
/// rewind to turn 3 restores the user's version; a rewind to turn 2 does
/// not pass the user's version off as the turn-2 state.
#[test]
fn a_file_replaced_outside_the_mount_is_unknown_before_the_replacement() {
    let fx = Fixture::new();
    fs::write(fx.p("doc"), b"v1\n").expect("write");
    fx.mount();
    assert_eq!(fx.turn("work"), 2);
    fs::write(fx.p(".doc.tmp"), b"user v2\n").expect("write in the project");
    fs::rename(fx.p(".doc.tmp"), fx.p("doc")).expect("rename in the project");
    // Past the coarse clock's tick: an inode born outside the mount within
    // a tick of the next turn's start counts as born in that turn (on the
    // safe side, `docs/design.md`), and this test is about turn 2.
    wait_clock_past(&fx.p("doc"), coarse_tick());
    assert_eq!(fx.turn("more"), 3);
    fs::write(fx.m("doc"), b"agent v3\n").expect("write via mount");

    let dry = fx.opfs_c(&["rewind", "2", "--dry-run", "--partial", "--json"]);
    assert_eq!(dry.code, Some(3), "{dry}");
    assert_eq!(conflicts(&dry.json()), vec!["doc".to_string()], "{dry}");
    let run = fx.opfs_c(&["rewind", "3", "--partial", "--json"]);
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(fs::read(fx.p("doc")).expect("read"), b"user v2\n");
}

/// Found by `tests/soak.rs`: a write through one name of a hard-linked
/// file moves the inode's mtime under its other name, and that name then
/// looked changed behind the mount, even after the first name was gone. It
/// is not; an edit behind the mount through the other name still is.
#[test]
fn a_write_through_another_hard_link_is_not_a_change_behind_the_mount() {
    let fx = Fixture::new();
    fs::write(fx.p("a"), b"a0\n").expect("write");
    fx.mount();
    assert_eq!(fx.turn("link"), 2);
    fx.sh("ln a b");
    assert_eq!(fx.turn("write through a, then drop a"), 3);
    // A later tick than the link's: the write changes a's times.
    wait_clock_past(&fx.p("a"), std::time::Duration::ZERO);
    fx.sh("echo a1 >> a; rm a");
    let v = fx.rewind(3);
    assert!(conflicts(&v).is_empty(), "{v:#}");
    assert_eq!(fs::read(fx.p("b")).expect("read"), b"a0\n");
    // a and b were one file when turn 3 began, and are again.
    assert_eq!(fx.p("a").metadata().expect("stat a").ino(), ino(&fx.p("b")));

    // Behind the mount, through one name: a conflict. a and b are one
    // file, so the edit changed both names, and both are left alone.
    fx.sh("echo a2 >> a");
    wait_clock_past(&fx.p("a"), std::time::Duration::ZERO);
    fs::write(fx.p("b"), b"the user's\n").expect("write behind the mount");
    let run = fx.opfs_c(&["rewind", "3", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    assert_eq!(
        conflicts(&run.json()),
        vec!["a".to_string(), "b".to_string()]
    );
    assert_eq!(fs::read(fx.p("a")).expect("read"), b"the user's\n");
}

fn ino(p: &std::path::Path) -> u64 {
    p.metadata().expect("stat").ino()
}

/// Names that were one file when the turn began are one file
/// again after the rewind, and an edit behind the mount through any name
/// of that file is still a conflict for every name of it (the relinked
/// group), also when only a name the rewind did not touch carries the edit.
#[test]
fn an_edit_behind_the_mount_through_a_relinked_name_is_a_conflict_for_every_name() {
    let fx = Fixture::new();
    fs::write(fx.p("a"), b"shared\n").expect("write");
    fs::hard_link(fx.p("a"), fx.p("b")).expect("link");
    fs::hard_link(fx.p("a"), fx.p("c")).expect("link");
    fx.mount();
    assert_eq!(fx.turn("split"), 2);
    // b and c become separate files with the same bytes; a keeps the inode.
    fx.sh("rm b c && printf 'shared\\n' > b && cp b c");
    let v = fx.rewind(2);
    assert!(conflicts(&v).is_empty(), "{v:#}");
    let i = ino(&fx.p("a"));
    assert_eq!((ino(&fx.p("b")), ino(&fx.p("c"))), (i, i), "{v:#}");
    assert_eq!(fx.p("a").metadata().expect("stat").nlink(), 3);

    // Write through the mount (every name changes), then behind it
    // through c only: the planned name of the file is a conflict, nothing
    // is written, the user's bytes stay.
    assert_eq!(fx.turn("write"), 5);
    fx.sh("echo agent >> b");
    wait_clock_past(&fx.p("b"), std::time::Duration::ZERO);
    fs::OpenOptions::new()
        .append(true)
        .open(fx.p("c"))
        .and_then(|mut f| f.write_all(b"user\n"))
        .expect("write behind the mount");
    let run = fx.opfs_c(&["rewind", "5", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    // b, the name the turn wrote through, is the one path the rewind
    // plans; a and c were never recorded, so they are not touched either.
    assert_eq!(conflicts(&run.json()), vec!["b".to_string()], "{run}");
    assert_eq!(
        fs::read(fx.p("a")).expect("read"),
        b"shared\nagent\nuser\n",
        "{run}"
    );
    // Forced, the file comes back as it was, one inode with three names.
    let forced = fx.opfs_c(&["rewind", "5", "--force", "--partial", "--json"]);
    assert_eq!(forced.code, Some(0), "{forced}");
    assert_eq!(fs::read(fx.p("c")).expect("read"), b"shared\n");
    let i = ino(&fx.p("a"));
    assert_eq!((ino(&fx.p("b")), ino(&fx.p("c"))), (i, i));
}

/// A change behind the mount through one name of a hard-linked file changed
/// every name of it: a planned name without a fingerprint of its own (the
/// daemon that left it was killed before storing one) is left alone too,
/// since restoring it in place would overwrite the user's bytes under the
/// name that is reported.
#[test]
fn an_edit_behind_the_mount_spreads_to_a_hard_link_without_a_fingerprint() {
    let fx = Fixture::new();
    fs::write(fx.p("a"), b"one\n").expect("write");
    fs::hard_link(fx.p("a"), fx.p("b")).expect("link");
    fx.mount();
    assert_eq!(fx.turn("write"), 2);
    // Both names known to the mount, both recorded; their fingerprints
    // live in the daemon's memory only.
    fx.sh("stat b >/dev/null && echo two >> a");
    let pid = fx.status()["pid"].as_u64().expect("pid") as i32;
    sigkill(pid);
    assert!(wait_dead(pid, std::time::Duration::from_secs(10)));
    fx.mount();
    // A fingerprint for a again (a timestamp change through the mount);
    // b has none.
    fx.sh("touch a");
    wait_clock_past(&fx.p("a"), std::time::Duration::ZERO);
    fs::OpenOptions::new()
        .append(true)
        .open(fx.p("b"))
        .and_then(|mut f| f.write_all(b"user\n"))
        .expect("write behind the mount");
    let run = fx.opfs_c(&["rewind", "2", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    assert_eq!(
        conflicts(&run.json()),
        vec!["a".to_string(), "b".to_string()],
        "{run}"
    );
    assert_eq!(fs::read(fx.p("b")).expect("read"), b"one\ntwo\nuser\n");
}

/// `opfs -C m show N:PATH --outside[=K]`: the kept edit's bytes.
fn show_outside(fx: &Fixture, spec: &str, k: Option<u64>) -> Run {
    let flag = match k {
        Some(k) => format!("--outside={k}"),
        None => "--outside".to_string(),
    };
    fx.opfs_c(&["show", spec, &flag])
}

/// The user's edit behind the mount between two writes of the agent in one
/// turn (the agent overwrites it, removes it, or renames another file over
/// it) is kept before the mount's mutation runs, shown by `show --outside`,
/// and reported by `log`, `diff` and `status`.
fn overwritten_user_edit_is_kept(no_open: bool, agent: &str, by: &str) {
    let fx = Fixture::new();
    fs::write(fx.p("f"), b"v0\n").expect("write");
    if !no_open {
        fx.set_env("OPFS_NO_OPEN", "0");
    }
    fx.mount();
    assert_eq!(fx.turn("work"), 2);
    fs::write(fx.m("f"), b"agent1\n").expect("write via mount");
    fs::write(fx.m("g"), b"other\n").expect("write via mount");
    // The user, in their editor, directly in the project.
    fs::write(fx.p("f"), b"USER-EDIT\n").expect("write behind the mount");
    // The agent again, same turn.
    fx.sh(agent);
    assert_eq!(fx.turn("next"), 3);

    let shown = show_outside(&fx, "2:f", None).ok();
    assert_eq!(shown.stdout, "USER-EDIT\n", "{shown}");
    let shown = show_outside(&fx, "2:f", Some(1)).ok();
    assert_eq!(shown.stdout, "USER-EDIT\n", "{shown}");
    let json = fx
        .opfs_c(&["show", "2:f", "--outside", "--json"])
        .ok()
        .json();
    assert_eq!(json["outside"]["by"], by, "{json:#}");
    assert_eq!(
        json["outside"]["show"], "opfs show 2:f --outside=1",
        "{json:#}"
    );
    // The turn's own record is unchanged: f was v0 when turn 2 began.
    assert_eq!(fx.opfs_c(&["show", "2:f"]).ok().stdout, "v0\n");
    // No second copy for a later write of the same state.
    let missing = show_outside(&fx, "2:f", Some(2));
    assert_eq!(missing.code, Some(2), "{missing}");

    let log = fx.opfs_c(&["log"]).ok();
    assert!(log.stdout.contains("opfs show 2:f --outside=1"), "{log}");
    let log = fx.opfs_c(&["log", "--json"]).ok().json();
    let two = log
        .as_array()
        .and_then(|a| a.iter().find(|e| e["turn"] == 2))
        .cloned()
        .unwrap_or_default();
    assert_eq!(two["outside_edits"][0]["path"], "f", "{log:#}");
    let diff = fx.opfs_c(&["diff", "2"]).ok();
    assert!(diff.stdout.contains("opfs show 2:f --outside=1"), "{diff}");
    let diff = fx.opfs_c(&["diff", "2", "--json"]).ok().json();
    assert_eq!(diff["outside_edits"][0]["path"], "f", "{diff:#}");
    let status = fx.status();
    assert_eq!(status["outside_edits"][0]["path"], "f", "{status:#}");
    let status = fx.opfs_c(&["status"]).ok();
    assert!(
        status.stdout.contains("opfs show 2:f --outside=1"),
        "{status}"
    );
    // The kept blob is accounted for: verify finds nothing unreferenced.
    let verify = fx.opfs_c(&["verify", "--json"]).ok().json();
    assert_eq!(verify["unreferenced_blobs"], 0, "{verify:#}");
}

#[test]
fn a_user_edit_the_agent_overwrites_in_the_same_turn_is_kept() {
    overwritten_user_edit_is_kept(true, "echo agent2 > f", "write");
}

#[test]
fn a_user_edit_the_agent_overwrites_through_an_open_is_kept() {
    overwritten_user_edit_is_kept(false, "echo agent2 > f", "write");
}

#[test]
fn a_user_edit_the_agent_removes_in_the_same_turn_is_kept() {
    overwritten_user_edit_is_kept(true, "rm f", "remove");
}

#[test]
fn a_user_edit_the_agent_renames_over_in_the_same_turn_is_kept() {
    overwritten_user_edit_is_kept(true, "mv g f", "replace");
}

#[test]
fn agent_writes_with_nothing_changed_behind_the_mount_keep_nothing() {
    let fx = Fixture::new();
    fs::write(fx.p("f"), b"v0\n").expect("write");
    fx.mount();
    assert_eq!(fx.turn("work"), 2);
    fx.sh("echo a1 > f; echo a2 > f; chmod 600 f; echo a3 >> f; mv f g; mv g f; rm f");
    assert_eq!(fx.turn("next"), 3);
    let status = fx.status();
    assert_eq!(status["outside_edits"], serde_json::json!([]), "{status:#}");
    let missing = show_outside(&fx, "2:f", None);
    assert_eq!(missing.code, Some(2), "{missing}");
    // A rewind treats the path as before: restored, no conflict.
    let v = fx.rewind(2);
    assert_eq!(v["conflicts"], serde_json::json!([]), "{v:#}");
    assert_eq!(fs::read(fx.p("f")).expect("read"), b"v0\n");
}

/// A file of at least 1 MiB written in place is kept as ranges: the turn
/// saves only the bytes the mount overwrites (`docs/ranges.md`). A user's
/// edit behind the mount between two of the agent's mutations in that turn
/// changed bytes the turn never saved, so what the file held when the turn
/// began is not known in full: `show` says so instead of printing the
/// user's bytes as the turn's start, and the rewind of the path is a
/// conflict even with `--force`, naming the kept edit, which holds the
/// whole file as it was before the agent's second mutation. `agent` is that
/// mutation (a shell command run in the mount): a write in place keeps the
/// record ranged; a removal, a rename away or a truncating open takes the
/// file away and so would make the record whole from the user's bytes.
fn user_edit_between_two_ranged_mutations(agent: &str) {
    use std::os::unix::fs::FileExt;
    let fx = Fixture::new();
    let size = 2 << 20;
    fs::write(fx.p("big"), vec![0u8; size]).expect("write");
    fx.mount();
    assert_eq!(fx.turn("work"), 2);
    fx.sh("printf agent-1 | dd of=big bs=1 seek=100 conv=notrunc status=none");
    fs::OpenOptions::new()
        .write(true)
        .open(fx.p("big"))
        .and_then(|f| f.write_all_at(b"USER-EDIT", 5000))
        .expect("write behind the mount");
    fx.sh(agent);
    assert_eq!(fx.turn("next"), 3);
    let now = fs::read(fx.p("big")).ok();

    // The kept edit: zeros but the agent's first write and the user's.
    let mut kept = vec![0u8; size];
    kept[100..107].copy_from_slice(b"agent-1");
    kept[5000..5009].copy_from_slice(b"USER-EDIT");
    let outside = fx.opfs_c(&["show", "2:big", "--outside=1"]).ok();
    assert!(outside.stdout.as_bytes() == kept, "kept edit differs");

    // Not the user's bytes presented as turn 2's start.
    let shown = fx.opfs_c(&["show", "2:big"]);
    assert_eq!(shown.code, Some(1), "{}", shown.stderr);
    assert!(
        shown.stderr.contains("behind the mount")
            && shown.stderr.contains("opfs show 2:big --outside=1"),
        "{}",
        shown.stderr
    );

    for force in [false, true] {
        let mut args = vec!["rewind", "2", "--partial", "--json"];
        if force {
            args.push("--force");
        }
        let run = fx.opfs_c(&args);
        assert_eq!(run.code, Some(3), "{run}");
        let v = run.json();
        assert!(conflicts(&v).contains(&"big".to_string()), "{run}");
        let reason = v["conflicts"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["path"] == "big"))
            .and_then(|c| c["reason"].as_str())
            .unwrap_or_default()
            .to_string();
        assert!(reason.contains("opfs show 2:big --outside=1"), "{reason}");
        assert!(fs::read(fx.p("big")).ok() == now, "left as it is");
    }
}

#[test]
fn a_user_edit_between_two_ranged_writes_makes_the_turn_start_unknown() {
    user_edit_between_two_ranged_mutations(
        "printf agent-2 | dd of=big bs=1 seek=5000 conv=notrunc status=none",
    );
}

#[test]
fn a_user_edit_before_the_agent_removes_a_ranged_file_makes_the_turn_start_unknown() {
    user_edit_between_two_ranged_mutations("rm big");
}

#[test]
fn a_user_edit_before_the_agent_truncates_or_moves_a_ranged_file_makes_the_turn_start_unknown() {
    user_edit_between_two_ranged_mutations("printf agent-2 > big");
    user_edit_between_two_ranged_mutations("mv big moved");
}
