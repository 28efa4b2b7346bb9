//! The `[record] exclude` list, on real mounts: excluded
//! paths are served but not recorded, and a rewind never touches them
//! while every recorded path comes back exactly; a rename between a
//! recorded and an excluded name; a directory the rewind must remove that
//! holds excluded entries is left with a conflict, never deleted; the list
//! is read at mount (a later change shows in `status` and takes effect at
//! the next mount, an unmounted rewind applies the list in effect, records
//! an earlier mount made of a path excluded now are not applied); a bad
//! pattern refuses the mount naming the file.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;

/// Writes the fixture's configuration file with `patterns` as the
/// `[record] exclude` list.
fn exclude(fx: &Fixture, patterns: &[&str]) {
    let list: Vec<String> = patterns.iter().map(|p| format!("{p:?}")).collect();
    fs::write(
        &fx.pinned.config,
        format!("[record]\nexclude = [{}]\n", list.join(", ")),
    )
    .expect("write config");
}

/// `m` without the paths `excluded` says (and their subtrees).
fn recorded_part(m: &Manifest, excluded: impl Fn(&[u8]) -> bool) -> Manifest {
    m.iter()
        .filter(|(p, _)| !excluded(p))
        .map(|(p, e)| (p.clone(), e.clone()))
        .collect()
}

fn is_excluded(p: &[u8]) -> bool {
    p == b"target" || p.starts_with(b"target/") || p.ends_with(b".log") || p.starts_with(b".git")
}

#[test]
fn excluded_paths_are_not_recorded_and_a_rewind_leaves_them_while_the_rest_is_exact() {
    let fx = Fixture::new();
    exclude(&fx, &["target/", "*.log"]);
    write_file(&fx.p("src/a.rs"), b"fn a() {}\n", 0o644);
    write_file(&fx.p("target/old.o"), b"old object\n", 0o644);
    write_file(&fx.p("app.log"), b"line 1\n", 0o644);
    fx.mount();
    let start = fx.tree_without_git();

    // Turn 1: the agent edits a source, builds, logs, cleans.
    fs::write(fx.m("src/a.rs"), b"fn a() { changed() }\n").expect("edit");
    write_file(&fx.m("src/b.rs"), b"fn b() {}\n", 0o644);
    write_file(&fx.m("target/debug/a.o"), b"new object\n", 0o644);
    fs::remove_file(fx.m("target/old.o")).expect("rm");
    fs::write(fx.m("app.log"), b"line 1\nline 2\n").expect("log");
    write_file(&fx.m("src/trace.log"), b"trace\n", 0o644);
    let t2 = fx.turn("second");
    let at_two = fx.tree_without_git();
    fs::write(fx.m("src/a.rs"), b"fn a() { again() }\n").expect("edit 2");
    fs::remove_file(fx.m("src/trace.log")).expect("rm log");
    write_file(&fx.m("target/debug/b.o"), b"b\n", 0o644);

    let st = fx.status();
    assert_eq!(
        st["record_exclude"],
        serde_json::json!(["target/", "*.log"]),
        "{st:#}"
    );
    assert!(st["record_exclude_next_mount"].is_null(), "{st:#}");
    let diff = fx.opfs_c(&["diff", "1", "--name-status"]).ok();
    assert!(diff.stdout.contains("src/a.rs"), "{diff}");
    assert!(
        !diff.stdout.contains("target") && !diff.stdout.contains(".log"),
        "excluded paths must have no records: {diff}"
    );

    // Back to turn 2, then to turn 1: recorded paths exact, excluded ones as
    // they are now.
    let excluded_now = recorded_part(&fx.tree_without_git(), |p| !is_excluded(p));
    fx.rewind(t2);
    let now = fx.tree_without_git();
    assert_manifest_eq(
        "recorded paths at turn 2",
        &recorded_part(&at_two, is_excluded),
        &recorded_part(&now, is_excluded),
    );
    assert_manifest_eq(
        "excluded paths untouched by the rewind to 2",
        &excluded_now,
        &recorded_part(&now, |p| !is_excluded(p)),
    );
    fx.rewind(1);
    let now = fx.tree_without_git();
    assert_manifest_eq(
        "recorded paths at turn 1",
        &recorded_part(&start, is_excluded),
        &recorded_part(&now, is_excluded),
    );
    assert_manifest_eq(
        "excluded paths untouched by the rewind to 1",
        &excluded_now,
        &recorded_part(&now, |p| !is_excluded(p)),
    );
    assert_eq!(fs::read(fx.m("app.log")).expect("log"), b"line 1\nline 2\n");
    assert!(fx.m("target/debug/b.o").exists() && !fx.m("target/old.o").exists());

    // The export leaves them out too, even asked to export ignored paths.
    let v = fx
        .opfs_c(&["export", "--export-ignored", "--json"])
        .ok()
        .json();
    let git_dir = std::path::PathBuf::from(v["git_dir"].as_str().expect("git_dir"));
    let names = git_in_ok(&git_dir, &["log", "--all", "--name-only", "--format="]);
    let names = String::from_utf8_lossy(&names);
    assert!(names.contains("src/a.rs"), "{names}");
    assert!(
        !names.contains("target") && !names.contains(".log"),
        "excluded paths are not exported: {names}"
    );
}

#[test]
fn a_rename_into_an_excluded_name_and_back_keeps_the_recorded_path_exact() {
    let fx = Fixture::new();
    exclude(&fx, &["*.log"]);
    write_file(&fx.p("notes.txt"), b"original\n", 0o600);
    fx.mount();
    // Turn 1: the recorded file moves to an excluded name.
    fs::rename(fx.m("notes.txt"), fx.m("notes.log")).expect("mv");
    let t2 = fx.turn("two");
    // Turn 2: it changes there (not recorded) and moves back.
    fs::write(fx.m("notes.log"), b"edited while excluded\n").expect("edit");
    fs::rename(fx.m("notes.log"), fx.m("notes.txt")).expect("mv back");
    let t3 = fx.turn("three");
    fs::write(fx.m("notes.txt"), b"third\n").expect("edit 3");

    fx.rewind(t3);
    assert_eq!(
        fs::read(fx.m("notes.txt")).expect("read"),
        b"edited while excluded\n"
    );
    fx.rewind(t2);
    assert!(
        !fx.m("notes.txt").exists(),
        "notes.txt was absent when turn 2 began"
    );
    assert!(
        !fx.m("notes.log").exists(),
        "an excluded path is never restored"
    );
    fx.rewind(1);
    assert_eq!(fs::read(fx.m("notes.txt")).expect("read"), b"original\n");
    assert_eq!(
        fs::metadata(fx.m("notes.txt"))
            .expect("stat")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
}

#[test]
fn a_directory_to_remove_that_holds_excluded_entries_is_left_with_a_conflict() {
    let fx = Fixture::new();
    exclude(&fx, &["target/"]);
    fx.mount();
    let t2 = fx.turn("before the crate");
    // Turn 2: a new crate is made and built.
    write_file(&fx.m("newcrate/src/lib.rs"), b"pub fn f() {}\n", 0o644);
    write_file(
        &fx.m("newcrate/target/debug/libf.rlib"),
        b"build output\n",
        0o644,
    );
    fx.turn("after");

    let run = fx.opfs_c(&["rewind", &t2.to_string(), "--json"]);
    assert_eq!(
        run.code,
        Some(3),
        "the directory must stay, as a conflict: {run}"
    );
    let v = run.json();
    let conflicts = v["conflicts"].to_string();
    assert!(
        conflicts.contains("newcrate") && conflicts.contains("newcrate/target"),
        "the conflict names the directory and the excluded entry: {v:#}"
    );
    assert!(
        !fx.m("newcrate/src/lib.rs").exists(),
        "recorded paths are restored"
    );
    assert_eq!(
        fs::read(fx.m("newcrate/target/debug/libf.rlib")).expect("excluded file kept"),
        b"build output\n"
    );
}

#[test]
fn the_list_is_read_at_mount_and_an_unmounted_rewind_applies_the_list_in_effect() {
    let fx = Fixture::new();
    exclude(&fx, &["gen/"]);
    write_file(&fx.p("gen/out.txt"), b"generated 1\n", 0o644);
    write_file(&fx.p("src.txt"), b"source 1\n", 0o644);
    fx.mount();
    fs::write(fx.m("gen/out.txt"), b"generated 2\n").expect("gen");
    fs::write(fx.m("src.txt"), b"source 2\n").expect("src");

    // A change of the configuration while mounted waits for the next mount.
    exclude(&fx, &[]);
    let st = fx.status();
    assert_eq!(st["record_exclude"], serde_json::json!(["gen/"]), "{st:#}");
    assert_eq!(
        st["record_exclude_next_mount"],
        serde_json::json!([]),
        "{st:#}"
    );
    let text = fx.opfs_c(&["status"]).ok();
    assert!(text.stdout.contains("next mount"), "{text}");
    fs::write(fx.m("gen/out.txt"), b"generated 3\n").expect("gen");
    fx.umount();

    // Unmounted, the rewind applies the list the mount had.
    let run = fx.opfs_p(&["rewind", "1", "--json"]);
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(fs::read(fx.p("src.txt")).expect("src"), b"source 1\n");
    assert_eq!(
        fs::read(fx.p("gen/out.txt")).expect("gen"),
        b"generated 3\n"
    );

    // The next mount records everything again.
    fx.mount();
    assert_eq!(fx.status()["record_exclude"], serde_json::json!([]));
    let t = fx.turn("now recorded");
    fs::write(fx.m("gen/out.txt"), b"generated 4\n").expect("gen");
    let t_gen = fx.turn("gen recorded");
    fs::write(fx.m("gen/out.txt"), b"generated 5\n").expect("gen");
    fx.rewind(t);
    assert_eq!(
        fs::read(fx.m("gen/out.txt")).expect("gen"),
        b"generated 3\n"
    );

    // Excluded again: the records the previous mount made are left alone.
    fx.umount();
    exclude(&fx, &["gen/"]);
    fx.mount();
    fs::write(fx.m("gen/out.txt"), b"generated 6\n").expect("gen");
    fx.rewind(t_gen);
    assert_eq!(
        fs::read(fx.m("gen/out.txt")).expect("gen"),
        b"generated 6\n",
        "a rewind never touches a path excluded now, whatever its records"
    );
}

#[test]
fn a_bad_exclude_pattern_refuses_the_mount_and_names_the_file() {
    let fx = Fixture::new();
    exclude(&fx, &["ok/", "bad{pattern"]);
    let run = fx.try_mount(&[], &[]);
    assert_eq!(run.code, Some(1), "{run}");
    let config = fx.pinned.config.to_string_lossy().into_owned();
    assert!(
        run.stderr.contains(&config) && run.stderr.contains("bad{pattern"),
        "the error names the file and the pattern: {run}"
    );
    assert!(
        wait_mount_state(&fx.mnt, false, std::time::Duration::from_millis(10)),
        "nothing may be mounted"
    );
}

/// What opfs keeps by default (`docs/design.md` "What opfs keeps by
/// default"): the regenerable directories the project's ignore rules
/// ignore (`target/`, `__pycache__/`, a venv that ignores itself) are not
/// recorded and a rewind leaves them; what is ignored but not regenerable
/// (`.env`, a data folder) and a regenerable name the project does not
/// ignore (`node_modules/` here) are recorded and rewound exactly.
/// `status` says where the stored bytes go and what would save them; a
/// project's own settings, kept in the configuration, win.
#[test]
fn regenerable_ignored_output_is_not_recorded_by_default_and_precious_files_are() {
    let fx = Fixture::new();
    fs::write(fx.p(".gitignore"), "/target\n__pycache__/\n.env\ndata/\n").expect("write");
    write_file(&fx.p("src/a.rs"), b"fn a() {}\n", 0o644);
    write_file(&fx.p(".env"), b"SECRET=1\n", 0o600);
    write_file(&fx.p("target/debug/old.o"), b"old object\n", 0o644);
    write_file(&fx.p(".venv/.gitignore"), b"*\n", 0o644);
    // A folder named `target` below the root, which `/target` does not
    // ignore: git commits it, so it is recorded.
    write_file(&fx.p("lib/target/keep.rs"), b"kept\n", 0o644);
    let start = fx.tree_without_git();
    fx.mount();
    let st = fx.status();
    assert_eq!(
        st["record_exclude"],
        serde_json::json!(["/target/", "/.venv/", "__pycache__/"]),
        "{st:#}"
    );
    // A turn: a build, a bytecode cache, a venv, packages the project does
    // not ignore, a precious file changed and data made.
    write_file(&fx.m("target/debug/app"), &vec![7u8; 1 << 20], 0o755);
    fs::remove_file(fx.m("target/debug/old.o")).expect("rm");
    write_file(&fx.m("src/__pycache__/m.pyc"), b"bytecode", 0o644);
    write_file(&fx.m(".venv/lib/site.py"), b"site\n", 0o644);
    write_file(
        &fx.m("node_modules/x/index.js"),
        &vec![b'x'; 300 << 10],
        0o644,
    );
    write_file(&fx.m(".env"), b"SECRET=2\n", 0o600);
    write_file(&fx.m("data/d.csv"), b"1,2\n", 0o644);
    write_file(&fx.m("src/a.rs"), b"fn a() { b() }\n", 0o644);
    write_file(&fx.m("lib/target/keep.rs"), b"changed\n", 0o644);
    write_file(&fx.m("lib/target/new.rs"), b"new\n", 0o644);
    fx.turn("work");
    fx.sh("echo again > node_modules/x/index.js");
    fx.turn("more");
    let st = fx.status();
    let tops = st["stored_by_top"].as_array().expect("stored_by_top");
    let top = |name: &str| tops.iter().find(|t| t["top"] == name).cloned();
    let nm = top("node_modules").unwrap_or_else(|| panic!("no node_modules: {st:#}"));
    assert_eq!(nm["bytes"], 300 << 10, "{st:#}");
    assert!(
        nm["hint"].as_str().unwrap_or("").contains("regenerable"),
        "{st:#}"
    );
    assert!(top("target").is_none(), "target was recorded: {st:#}");
    let text = fx.opfs_c(&["status"]).ok().stdout;
    assert!(
        text.contains("stored:     300.0 KiB in node_modules"),
        "{text}"
    );
    // The rewind restores every recorded path exactly and leaves the
    // regenerable ones as the build left them.
    fx.rewind(1);
    assert_eq!(fs::read(fx.m(".env")).expect(".env"), b"SECRET=1\n");
    assert!(!fx.m("data").exists() && !fx.m("node_modules").exists());
    assert_eq!(fs::read(fx.m("src/a.rs")).expect("a.rs"), b"fn a() {}\n");
    assert_eq!(
        fs::read(fx.m("lib/target/keep.rs")).expect("keep.rs"),
        b"kept\n"
    );
    assert!(!fx.m("lib/target/new.rs").exists());
    assert_eq!(
        fs::read(fx.m("target/debug/app")).expect("app").len(),
        1 << 20
    );
    assert!(
        !fx.m("target/debug/old.o").exists(),
        "not recorded, not restored"
    );
    assert!(fx.m("src/__pycache__/m.pyc").exists() && fx.m(".venv/lib/site.py").exists());
    let skip = |p: &[u8]| {
        p.starts_with(b"target") || p.starts_with(b".venv") || p.starts_with(b"src/__pycache__")
    };
    assert_manifest_eq(
        "recorded paths after the rewind",
        &recorded_part(&start, skip),
        &recorded_part(&fx.tree_without_git(), skip),
    );
    fx.umount();

    // The project's own settings, outside the project, win: record its
    // build output after all, and leave out one more folder.
    fs::write(
        &fx.pinned.config,
        format!(
            "[record]\nexclude = [\"*.log\"]\n\n[projects.{:?}.record]\nskip_regenerable = false\nexclude = [\"cache/\"]\n",
            fx.project.display().to_string()
        ),
    )
    .expect("write config");
    fx.mount();
    assert_eq!(
        fx.status()["record_exclude"],
        serde_json::json!(["*.log", "cache/"])
    );
}
