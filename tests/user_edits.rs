//! The user's own edits are never clobbered (design §2.6, issue 3 §4): a
//! path changed directly in the project after the mount last wrote it is a
//! conflict for `rewind` (and its dry run), `--force` overrides, and the
//! mount serves the changed file correctly.

mod common;

use std::fs;
use std::io::Write;

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

    let dry = fx.opfs_c(&["rewind", "2", "--dry-run", "--json"]);
    assert_eq!(dry.code, Some(3), "{dry}");
    assert_eq!(conflicts(&dry.json()), vec!["f.txt".to_string()]);

    let run = fx.opfs_c(&["rewind", "2", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    assert_eq!(conflicts(&run.json()), vec!["f.txt".to_string()]);
    assert_eq!(fs::read(fx.p("f.txt")).expect("read"), b"USER-01\n");

    let forced = fx.opfs_c(&["rewind", "2", "--force", "--json"]);
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

    let run = fx.opfs_c(&["rewind", "2", "--json"]);
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
        fs::read(fx.m("grow.txt")).expect("read via mount"),
        longer,
        "no stale size or content through the mount"
    );
    fs::write(fx.p("grow.txt"), b"tiny").expect("shrink behind");
    assert_eq!(fs::read(fx.m("grow.txt")).expect("read via mount"), b"tiny");
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

    let dry = fx.opfs_c(&["rewind", "1", "--dry-run", "--json"]);
    assert_eq!(dry.code, Some(3), "{dry}");
    assert_eq!(conflicts(&dry.json()), vec!["d/x".to_string()], "{dry}");
    let report = dry.json();
    let planned: Vec<&str> = report["plan"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["path"].as_str()).collect())
        .unwrap_or_default();
    assert!(planned.contains(&"f"), "the dry run does not plan f: {dry}");
    assert!(!planned.contains(&"d/x"), "the dry run plans d/x: {dry}");

    for args in [&["rewind", "1", "--json"][..], &["rewind", "1", "--force", "--json"][..]] {
        let run = fx.opfs_c(args);
        assert_eq!(run.code, Some(3), "{run}");
        assert_eq!(conflicts(&run.json()), vec!["d/x".to_string()], "{run}");
        assert_eq!(fs::read(fx.p("f")).expect("read"), b"a\n");
        assert!(!fx.p("d").exists(), "d was created: {run}");
    }
}
