//! Worktrees on real mounts (`docs/worktrees.md`): copy-on-write views of
//! the project at a turn, their own history, and merges back as one
//! rewindable turn. Needs `/dev/fuse`.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// `opfs -C PROJECT worktree ARGS...`.
fn wt<S: AsRef<OsStr>>(f: &Fixture, args: &[S]) -> Run {
    let mut all: Vec<&OsStr> = vec![OsStr::new("worktree")];
    all.extend(args.iter().map(AsRef::as_ref));
    f.opfs_p(&all)
}

/// `worktree create NAME [EXTRA...]`: asserts exit 0 and that stdout is the
/// path alone, which is mounted; returns it.
fn create(f: &Fixture, name: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec!["create", name];
    args.extend(extra);
    let run = wt(f, &args).ok();
    let path = PathBuf::from(run.stdout.trim_end());
    assert!(
        wait_mount_state(&path, true, MOUNT_TIMEOUT),
        "worktree create printed {} but it is not mounted: {run}",
        path.display()
    );
    path
}

/// Unmounts every worktree of the fixture (before the fixture drops).
fn discard_all(f: &Fixture) {
    let list = wt(f, &["list", "--json"]).ok().json();
    for w in list.as_array().cloned().unwrap_or_default() {
        let name = w["name"].as_str().expect("name").to_string();
        wt(f, &["discard", &name]).ok();
    }
}

fn read(p: &Path) -> String {
    String::from_utf8_lossy(&fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display())))
        .into_owned()
}

fn paths_of(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| match c {
                    Value::String(s) => Some(s.clone()),
                    other => other["path"].as_str().map(String::from),
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_worktree_is_a_frozen_copy_on_write_view_merged_back_as_one_turn() {
    let f = Fixture::new();
    fs::create_dir_all(f.p("src/deep")).expect("mkdir");
    fs::write(f.p("src/main.rs"), "fn main() {}\n").expect("write");
    fs::write(f.p("src/deep/x.txt"), "x\n").expect("write");
    fs::write(f.p("README"), "readme\n").expect("write");
    f.mount();
    let base = f.turn("before the worktree");
    let before = manifest(&f.project);
    let w = create(&f, "fix-a", &[]);
    assert_ne!(w, f.mnt);
    assert!(
        !w.starts_with(&f.project),
        "the worktree is outside the project"
    );
    assert_eq!(read(&w.join("src/main.rs")), "fn main() {}\n");

    // The project moves on: the worktree does not see it.
    fs::write(f.m("README"), "changed in the project\n").expect("write");
    fs::write(f.m("later.txt"), "later\n").expect("write");
    assert_eq!(read(&w.join("README")), "readme\n");
    assert!(!w.join("later.txt").exists());

    // Work in the worktree: nothing reaches the project.
    f.sh_in(
        &w,
        "printf 'fn main() { fixed() }\\n' > src/main.rs; rm -r src/deep; mkdir src/deep; \
         touch src/deep/new; echo n > new.txt; mv README README.md",
    );
    assert_eq!(read(&f.p("src/main.rs")), "fn main() {}\n");
    assert!(f.p("src/deep/x.txt").exists());
    let names: Vec<String> = fs::read_dir(w.join("src/deep"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["new"],
        "an opaque directory shows only its own children"
    );

    let list = wt(&f, &["list", "--json"]).ok().json();
    assert_eq!(list[0]["name"], "fix-a");
    assert_eq!(list[0]["mounted"], true);
    assert!(list[0]["base_turn"].as_u64().expect("base") >= base);
    assert!(
        list[0]["changed"].as_u64().expect("changed") >= 5,
        "{list:#}"
    );

    let stat = wt(&f, &["diff", "fix-a", "--name-status"]).ok();
    assert!(stat.stdout.contains("src/main.rs"), "{stat}");

    // README was changed by the project too: a conflict, exit 3.
    let dry = wt(&f, &["merge", "fix-a", "--dry-run", "--json"]);
    assert_eq!(dry.code, Some(3), "{dry}");
    assert_eq!(paths_of(&dry.json(), "conflicts"), ["README"], "{dry}");
    assert_eq!(
        read(&f.p("src/main.rs")),
        "fn main() {}\n",
        "a dry run writes nothing"
    );
    // By default a conflict merges nothing: the project is as it was.
    let project_now = manifest(&f.project);
    let stopped = wt(&f, &["merge", "fix-a", "--json"]);
    assert_eq!(stopped.code, Some(3), "{stopped}");
    let report = stopped.json();
    assert_eq!(report["stopped_by_conflicts"], true, "{stopped}");
    assert_eq!(report["turn"], Value::Null, "{stopped}");
    assert_eq!(paths_of(&report, "conflicts"), ["README"], "{stopped}");
    assert_eq!(
        manifest(&f.project),
        project_now,
        "a stopped merge writes nothing"
    );
    // --partial merges the rest and leaves the conflict.
    let merged = wt(&f, &["merge", "fix-a", "--partial", "--json"]);
    assert_eq!(merged.code, Some(3), "{merged}");
    let report = merged.json();
    let turn = report["turn"].as_u64().expect("merge turn");
    assert_eq!(read(&f.m("src/main.rs")), "fn main() { fixed() }\n");
    assert!(f.m("src/deep/new").exists() && !f.m("src/deep/x.txt").exists());
    assert_eq!(read(&f.m("new.txt")), "n\n");
    assert_eq!(
        read(&f.m("README")),
        "changed in the project\n",
        "the conflict is left"
    );
    let points = f.points(true);
    let kind = points
        .iter()
        .find(|p| p["turn"].as_u64() == Some(turn))
        .map(|p| p["kind"].clone());
    assert_eq!(kind, Some(Value::from("merge")), "{points:#?}");

    // A merge is a turn: rewinding to its start undoes it exactly.
    f.rewind(turn);
    assert_eq!(read(&f.p("src/main.rs")), "fn main() {}\n");
    f.rewind(base);
    assert_eq!(manifest(&f.project), before);
    discard_all(&f);
}

#[test]
fn a_worktree_has_its_own_turns_and_rewinds_and_survives_a_remount() {
    let f = Fixture::new();
    fs::write(f.p("a"), "a0\n").expect("write");
    fs::write(f.p("gone"), "g\n").expect("write");
    f.mount();
    let w = create(&f, "try", &[]);
    let in_wt = |args: &[&str]| {
        let mut all = vec!["-C", w.to_str().expect("utf8")];
        all.extend(args);
        f.opfs(&all)
    };
    fs::write(w.join("a"), "a1\n").expect("write");
    fs::remove_file(w.join("gone")).expect("rm");
    let t = in_wt(&["turn", "--label", "try 1"]).ok();
    let t: u64 = t.stdout.trim().parse().expect("turn number");
    fs::write(w.join("a"), "a2\n").expect("write");
    in_wt(&["rewind", &t.to_string(), "--json"]).ok();
    assert_eq!(read(&w.join("a")), "a1\n");
    assert!(!w.join("gone").exists());

    // Unmount and mount again: the deletion stays deleted.
    f.opfs(&["umount", w.to_str().expect("utf8")]).ok();
    assert!(wait_mount_state(&w, false, MOUNT_TIMEOUT));
    wt(&f, &["mount", "try"]).ok();
    assert!(wait_mount_state(&w, true, MOUNT_TIMEOUT));
    assert!(!w.join("gone").exists(), "a whiteout survives a remount");
    assert_eq!(read(&w.join("a")), "a1\n");
    // The project never changed.
    assert_eq!(read(&f.p("a")), "a0\n");
    assert!(f.p("gone").exists());
    discard_all(&f);
}

#[test]
fn two_worktrees_from_different_turns_merge_one_after_the_other() {
    let f = Fixture::new();
    fs::write(f.p("shared"), "s0\n").expect("write");
    fs::write(f.p("one"), "1\n").expect("write");
    f.mount();
    let t1 = f.turn("t1");
    let a = create(&f, "a", &["--from", &t1.to_string()]);
    fs::write(f.m("one"), "1 changed\n").expect("write");
    let b = create(&f, "b", &[]);
    assert_eq!(read(&a.join("one")), "1\n", "a shows turn {t1}");
    assert_eq!(read(&b.join("one")), "1 changed\n", "b shows now");
    fs::write(a.join("shared"), "from a\n").expect("write");
    fs::write(a.join("only-a"), "a\n").expect("write");
    fs::write(b.join("shared"), "from b\n").expect("write");
    fs::write(b.join("only-b"), "b\n").expect("write");
    wt(&f, &["merge", "a"]).ok();
    assert_eq!(read(&f.m("shared")), "from a\n");
    // b's base of `shared` is s0, but the project now holds a's: a
    // conflict, which stops the merge (the dry run says the same).
    for dry in [true, false] {
        let mut args = vec!["merge", "b", "--json"];
        if dry {
            args.push("--dry-run");
        }
        let r = wt(&f, &args);
        assert_eq!(r.code, Some(3), "{r}");
        assert_eq!(paths_of(&r.json(), "conflicts"), ["shared"]);
        assert_eq!(r.json()["stopped_by_conflicts"], true, "{r}");
        assert!(!f.m("only-b").exists(), "{r}");
        assert_eq!(read(&f.m("shared")), "from a\n");
    }
    // --markers: both sides in the text file, as git writes them.
    let r = wt(&f, &["merge", "b", "--markers", "--json"]);
    assert_eq!(r.code, Some(3), "{r}");
    assert_eq!(paths_of(&r.json(), "marked"), ["shared"], "{r}");
    assert_eq!(read(&f.m("only-b")), "b\n");
    assert_eq!(
        read(&f.m("shared")),
        "<<<<<<< project\nfrom a\n=======\nfrom b\n>>>>>>> worktree b\n"
    );
    f.rewind(r.json()["turn"].as_u64().expect("merge turn"));
    assert_eq!(read(&f.m("shared")), "from a\n");
    assert!(!f.m("only-b").exists());
    // --force takes b's side.
    wt(&f, &["merge", "b", "--force"]).ok();
    assert_eq!(read(&f.m("shared")), "from b\n");
    discard_all(&f);
}

#[test]
fn rename_a_lower_directory_edit_inside_then_merge_into_an_unmounted_project() {
    let f = Fixture::new();
    fs::create_dir_all(f.p("lib/inner")).expect("mkdir");
    fs::write(f.p("lib/inner/f"), "f0\n").expect("write");
    fs::write(f.p("lib/g"), "g0\n").expect("write");
    f.mount();
    let w = create(&f, "mv", &[]);
    f.sh_in(&w, "mv lib src && echo f1 > src/inner/f");
    assert_eq!(read(&w.join("src/inner/f")), "f1\n");
    assert_eq!(read(&w.join("src/g")), "g0\n");
    assert!(!w.join("lib").exists());
    f.umount();
    // The project is not mounted: the merge runs directly, as a turn.
    let r = wt(&f, &["merge", "mv", "--json"]).ok().json();
    assert!(r["turn"].as_u64().is_some(), "{r:#}");
    assert_eq!(read(&f.p("src/inner/f")), "f1\n");
    assert_eq!(read(&f.p("src/g")), "g0\n");
    assert!(!f.p("lib").exists());
    discard_all(&f);
}

#[test]
fn bad_requests_get_clear_errors_and_change_nothing() {
    let f = Fixture::new();
    fs::write(f.p("a"), "a\n").expect("write");
    f.mount();
    // Names that are no git ref names either: their branch could not be
    // exported or pushed.
    for bad in ["", "..", "a/b", ".hidden", "a.", "a..b", "x.lock"] {
        let r = wt(&f, &["create", bad]);
        assert_eq!(r.code, Some(2), "{r}");
        assert!(r.stderr.contains("not a valid worktree name"), "{r}");
    }
    let r = wt(&f, &["create", "x", "--from", "99"]);
    assert_eq!(r.code, Some(2), "{r}");
    assert!(r.stderr.contains("turn 99 does not exist"), "{r}");
    let r = wt(&f, &["merge", "nope"]);
    assert_eq!(r.code, Some(2), "{r}");
    assert!(r.stderr.contains("no worktree named \"nope\""), "{r}");
    create(&f, "x", &[]);
    let r = wt(&f, &["create", "x"]);
    assert_eq!(r.code, Some(2), "{r}");
    assert!(r.stderr.contains("already exists"), "{r}");
    let list = wt(&f, &["list", "--json"]).ok().json();
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    discard_all(&f);
    assert_eq!(
        wt(&f, &["list", "--json"]).ok().json(),
        Value::Array(vec![])
    );
}

fn sigkill(pid: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

fn pid_of(f: &Fixture, ctx: &Path) -> i32 {
    let s = f
        .opfs(&[
            OsStr::new("-C"),
            ctx.as_os_str(),
            OsStr::new("status"),
            OsStr::new("--json"),
        ])
        .ok()
        .json();
    s["pid"].as_i64().unwrap_or_else(|| panic!("no pid: {s:#}")) as i32
}

#[test]
fn a_merge_killed_half_way_is_rolled_back_at_the_next_start() {
    let f = Fixture::new();
    for i in 0..30 {
        fs::write(f.p(format!("f{i:02}")), format!("base {i}\n")).expect("write");
    }
    let run = f.try_mount(&[], &[("OPFS_FAILPOINT", "rewind-after-step:12")]);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(wait_mount_state(&f.mnt, true, MOUNT_TIMEOUT));
    let w = create(&f, "big", &[]);
    for i in 0..30 {
        fs::write(w.join(format!("f{i:02}")), format!("worktree {i}\n")).expect("write");
    }
    let before = manifest(&f.project);
    let r = wt(&f, &["merge", "big"]);
    assert_eq!(r.code, Some(1), "the daemon died during the merge: {r}");
    let half = manifest(&f.project);
    assert_ne!(half, before, "the failpoint stops the merge half way");
    // The next start rolls the half-applied merge back, and says so.
    f.mount();
    let status = f.status();
    let recovered = status["recovered"].as_str().unwrap_or_default().to_string();
    assert!(recovered.contains("rolled back the merge"), "{status:#}");
    assert_eq!(manifest(&f.project), before, "nothing of the merge is left");
    // The worktree is untouched and merges whole now.
    wt(&f, &["merge", "big"]).ok();
    assert_eq!(read(&f.p("f29")), "worktree 29\n");
    assert_eq!(read(&f.p("f00")), "worktree 0\n");
    discard_all(&f);
}

#[test]
fn a_copy_up_killed_half_way_never_shows_a_half_copied_file() {
    let f = Fixture::new();
    let big: Vec<u8> = (0..64u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(f.p("big"), &big).expect("write");
    f.mount();
    let w = create(&f, "cu", &[]);
    for round in 0..3 {
        let pid = pid_of(&f, &w);
        let target = w.join("big");
        let writer = std::thread::spawn(move || {
            // The first write to a lower file copies it up (64 MiB).
            let _ = fs::OpenOptions::new()
                .append(true)
                .open(&target)
                .and_then(|mut h| std::io::Write::write_all(&mut h, b"tail"));
        });
        std::thread::sleep(std::time::Duration::from_millis(20 + 40 * round));
        sigkill(pid);
        let _ = writer.join();
        wt(&f, &["mount", "cu"]).ok();
        assert!(wait_mount_state(&w, true, MOUNT_TIMEOUT));
        let now = fs::read(w.join("big")).expect("read after the crash");
        assert!(
            now == big || (now.len() == big.len() + 4 && now.starts_with(&big)),
            "round {round}: the file is either the lower one or the lower one plus the \
             write, never half copied ({} bytes)",
            now.len()
        );
        if now.len() > big.len() {
            break;
        }
    }
    discard_all(&f);
}

#[test]
fn the_worktree_guide_example_runs() {
    let f = Fixture::new();
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin_dir = Path::new(OPFS).parent().expect("bin dir");
    let mut cmd = std::process::Command::new("bash");
    f.pinned.pin(&mut cmd);
    cmd.env(
        "PATH",
        format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    )
    .current_dir(f.root())
    .arg(here.join("docs/examples/worktrees.sh"))
    .arg(f.root().join("example"));
    let scratch = f.root().join("example-out");
    fs::create_dir_all(&scratch).expect("mkdir");
    let run = run_command(cmd, &scratch, COMMAND_TIMEOUT).expect("run");
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains("try-a passes: no, try-b passes: yes"),
        "{run}"
    );
    assert!(run.stdout.contains("example passed"), "{run}");
}

#[test]
fn opfs_run_over_a_worktree_shows_it_at_the_project_path() {
    if which("bwrap").is_none() {
        panic!("bubblewrap (bwrap) is needed for opfs run; scripts/setup installs it");
    }
    let f = Fixture::new();
    fs::write(f.p("a"), "a0\n").expect("write");
    f.mount();
    let w = create(&f, "sb", &[]);
    let project = f.project.to_str().expect("utf8").to_string();
    let run = f.opfs(&[
        "-C",
        &project,
        "run",
        "--worktree",
        "sb",
        "--turn",
        "in the sandbox",
        "--",
        "sh",
        "-c",
        &format!("cat {project}/a && echo changed > {project}/a && echo new > {project}/b"),
    ]);
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(run.stdout, "a0\n");
    assert_eq!(
        read(&w.join("a")),
        "changed\n",
        "the worktree took the change"
    );
    assert_eq!(read(&w.join("b")), "new\n");
    assert_eq!(read(&f.p("a")), "a0\n", "the project did not");
    assert!(!f.p("b").exists());
    // --turn opened a turn in the worktree's own history.
    let points = f
        .opfs(&["-C", w.to_str().expect("utf8"), "rewind", "--json"])
        .ok()
        .json();
    let labels: Vec<String> = points
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|p| p["label"].as_str().map(String::from))
        .collect();
    assert!(labels.iter().any(|l| l == "in the sandbox"), "{points:#}");
    let r = wt(&f, &["list", "--json"]).ok().json();
    assert_eq!(r[0]["mounted"], true, "left mounted: {r:#}");
    let bad = f.opfs(&["-C", &project, "run", "--worktree", "nope", "--", "true"]);
    assert_eq!(bad.code, Some(2), "{bad}");
    discard_all(&f);
}

/// git's index remembers each file's `st_ino` and `st_ctime`: a worktree
/// shows the project's own for what it did not change, so `git status` in
/// the worktree finds the index clean without re-reading every file.
#[test]
fn a_worktree_shows_the_projects_inode_numbers_and_ctimes_to_git() {
    let f = Fixture::new();
    fs::create_dir_all(f.p("src")).expect("mkdir");
    for i in 0..20 {
        fs::write(f.p(format!("src/f{i}.rs")), format!("// {i}\n")).expect("write");
    }
    f.sh_in(
        &f.project,
        "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm base",
    );
    f.mount();
    let w = create(&f, "git", &[]);
    for i in [0, 7, 19] {
        let rel = format!("src/f{i}.rs");
        let (a, b) = (
            fs::metadata(w.join(&rel)).expect("stat in the worktree"),
            fs::metadata(f.p(&rel)).expect("stat in the project"),
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (
                a.ino(),
                a.ctime(),
                a.ctime_nsec(),
                a.mtime(),
                a.mtime_nsec()
            ),
            (
                b.ino(),
                b.ctime(),
                b.ctime_nsec(),
                b.mtime(),
                b.mtime_nsec()
            ),
            "{rel}"
        );
    }
    let out = f.sh_in(&w, "git status --porcelain");
    assert_eq!(out.trim(), "", "a fresh worktree is clean to git");
    fs::write(w.join("src/f7.rs"), "// changed\n").expect("write");
    let out = f.sh_in(&w, "git status --porcelain");
    assert_eq!(out.trim(), "M src/f7.rs");
    discard_all(&f);
}

/// A worktree mount caches entries and attributes for 60 s
/// (`WORKTREE_TTL`): its own rewinds must still show at once, sizes,
/// listings, removed and re-appearing names included.
#[test]
fn a_rewind_in_a_worktree_shows_at_once_through_its_caches() {
    let f = Fixture::new();
    fs::write(f.p("a"), "lower a, long enough\n").expect("write");
    fs::write(f.p("gone"), "g\n").expect("write");
    fs::create_dir_all(f.p("d")).expect("mkdir");
    fs::write(f.p("d/x"), "x\n").expect("write");
    f.mount();
    let w = create(&f, "cache", &[]);
    let in_wt = |args: &[&str]| {
        let mut all = vec!["-C", w.to_str().expect("utf8")];
        all.extend(args);
        f.opfs(&all)
    };
    let names = |dir: &Path| {
        let mut v: Vec<String> = fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    fs::write(w.join("a"), "short\n").expect("write");
    let t: u64 = in_wt(&["turn"]).ok().stdout.trim().parse().expect("turn");
    // Change everything, and look at it all so the kernel caches it.
    fs::write(w.join("a"), "a much longer content than before\n").expect("write");
    fs::remove_file(w.join("gone")).expect("rm");
    fs::remove_dir_all(w.join("d")).expect("rm -r");
    fs::create_dir_all(w.join("d/new")).expect("mkdir");
    fs::write(w.join("d/y"), "y\n").expect("write");
    fs::write(w.join("added"), "n\n").expect("write");
    for p in ["a", "d", "d/new", "d/y", "added"] {
        fs::metadata(w.join(p)).expect("stat");
    }
    // Misses the kernel caches (negative entries) that the rewind ends.
    for p in ["gone", "d/x"] {
        assert!(fs::metadata(w.join(p)).is_err(), "{p}");
    }
    assert_eq!(names(&w), ["a", "added", "d"]);
    assert_eq!(names(&w.join("d")), ["new", "y"]);

    in_wt(&["rewind", &t.to_string(), "--json"]).ok();
    assert_eq!(fs::metadata(w.join("a")).expect("stat").len(), 6);
    assert_eq!(read(&w.join("a")), "short\n");
    assert_eq!(names(&w), ["a", "d", "gone"]);
    assert_eq!(read(&w.join("gone")), "g\n");
    assert_eq!(names(&w.join("d")), ["x"]);
    assert!(!w.join("added").exists());
    assert!(!w.join("d/y").exists());
    assert_eq!(read(&w.join("d/x")), "x\n");
    discard_all(&f);
}

/// `opfs -C WORKTREE ARGS...`.
fn in_wt<S: AsRef<OsStr>>(f: &Fixture, w: &Path, args: &[S]) -> Run {
    let mut all: Vec<&OsStr> = vec![OsStr::new("-C"), w.as_os_str()];
    all.extend(args.iter().map(AsRef::as_ref));
    f.opfs(&all)
}

/// A worktree's `log`, `diff`, `show` and `status` show the worktree as
/// its user sees it, not its upper layer: no `.wh.` name, a deleted lower
/// file is a deletion with the lower bytes as its old side, an edit of a
/// lower file a modification against the lower bytes, an opaque directory
/// (`rm -r d; mkdir d; touch d/new`) its hidden lower children deleted.
#[test]
fn a_worktrees_log_diff_and_show_are_its_view_not_its_upper_layer() {
    let f = Fixture::new();
    fs::create_dir_all(f.p("d")).expect("mkdir");
    fs::create_dir_all(f.p("dir")).expect("mkdir");
    fs::write(f.p("a.txt"), "a0\n").expect("write");
    fs::write(f.p("del.txt"), "d0\n").expect("write");
    fs::write(f.p("ren.txt"), "r0\n").expect("write");
    fs::write(f.p("d/x"), "x0\n").expect("write");
    fs::write(f.p("d/y"), "y0\n").expect("write");
    fs::write(f.p("dir/in"), "in0\n").expect("write");
    fs::write(f.p("keep"), "k\n").expect("write");
    f.mount();
    let w = create(&f, "view", &[]);
    f.sh_in(
        &w,
        "echo a1 > a.txt; rm del.txt; mv ren.txt renamed.txt; rm -r d; mkdir d; touch d/new; \
         mv dir moved",
    );
    let t1 = in_wt(&f, &w, &["status", "--json"]).ok().json()["turn"]
        .as_u64()
        .expect("open turn");
    in_wt(&f, &w, &["turn", "--label", "first"]).ok();
    fs::write(w.join("a.txt"), "a2\n").expect("write");
    fs::write(w.join("moved/in"), "in1\n").expect("write");
    let t2 = t1 + 1;

    let ns = in_wt(&f, &w, &["diff", &t1.to_string(), "--name-status"]).ok();
    assert!(!ns.stdout.contains(".wh."), "{ns}");
    let lines: Vec<&str> = ns.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "M\ta.txt",
            "A\td/new",
            "D\td/x",
            "D\td/y",
            "D\tdel.txt",
            "R100\tdir/in\tmoved/in",
            "R100\tren.txt\trenamed.txt",
        ],
        "{ns}"
    );
    let patch = in_wt(&f, &w, &["diff", &t1.to_string()]).ok().stdout;
    assert!(patch.contains("-a0\n+a1\n"), "{patch}");
    assert!(
        patch.contains(
            "deleted file mode 100644\n--- a/del.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-d0\n"
        ),
        "the lower bytes are the old side of a deletion: {patch}"
    );
    // The open turn: against the end of turn 1, the lower bytes no more.
    let open = in_wt(&f, &w, &["diff", "--name-status"]).ok();
    assert_eq!(open.stdout, "M\ta.txt\nM\tmoved/in\n", "{open}");
    let range = in_wt(&f, &w, &["diff", &format!("{t1}..{t2}"), "--name-status"]).ok();
    assert!(range.stdout.contains("M\ta.txt\n"), "{range}");
    assert!(
        range.stdout.contains("R100\tren.txt\trenamed.txt\n"),
        "{range}"
    );
    assert!(
        range.stdout.contains("D\tdir/in\n") && range.stdout.contains("A\tmoved/in\n"),
        "{range}"
    );

    let log = in_wt(&f, &w, &["log", "--json"]).ok().json();
    let entry = |t: u64| {
        log.as_array()
            .expect("array")
            .iter()
            .find(|e| e["turn"].as_u64() == Some(t))
            .cloned()
            .unwrap_or_else(|| panic!("no turn {t}: {log:#}"))
    };
    let e1 = entry(t1);
    assert_eq!(
        (&e1["added"], &e1["modified"], &e1["deleted"]),
        (&Value::from(3), &Value::from(1), &Value::from(5)),
        "added d/new, renamed.txt, moved/in; modified a.txt; deleted del.txt, ren.txt, d/x, d/y, dir/in: {e1:#}"
    );
    let e2 = entry(t2);
    assert_eq!(
        (&e2["added"], &e2["modified"], &e2["deleted"]),
        (&Value::from(0), &Value::from(2), &Value::from(0)),
        "{e2:#}"
    );
    let only_d = in_wt(&f, &w, &["log", "--json", "d"]).ok().json();
    assert_eq!(only_d.as_array().map(Vec::len), Some(1), "{only_d:#}");

    let show = |spec: String| in_wt(&f, &w, &["show", &spec]);
    assert_eq!(show(format!("{t1}:a.txt")).ok().stdout, "a0\n");
    assert_eq!(show(format!("{t2}:a.txt")).ok().stdout, "a1\n");
    assert_eq!(show(format!("{t1}:del.txt")).ok().stdout, "d0\n");
    assert_eq!(show(format!("{t1}:d/x")).ok().stdout, "x0\n");
    assert_eq!(show(format!("{t2}:d/new")).ok().stdout, "");
    assert_eq!(show(format!("{t2}:moved/in")).ok().stdout, "in0\n");
    assert_eq!(show(format!("{t1}:keep")).ok().stdout, "k\n");
    for gone in ["del.txt", "d/x", "ren.txt", "dir/in"] {
        let r = show(format!("{t2}:{gone}"));
        assert_eq!(r.code, Some(1), "{r}");
        assert!(r.stderr.contains("did not exist"), "{r}");
    }
    let r = show(format!("{t2}:.wh.del.txt"));
    assert_eq!(r.code, Some(1), "a whiteout is not a path of the view: {r}");

    let st = in_wt(&f, &w, &["status", "--json"]).ok().json();
    assert_eq!(st["worktree"]["name"], "view", "{st:#}");
    assert_eq!(
        st["worktree"]["project"].as_str().map(PathBuf::from),
        Some(f.project.clone())
    );
    let human = in_wt(&f, &w, &["status"]).ok().stdout;
    assert!(human.contains("worktree:   view of "), "{human}");
    discard_all(&f);
}

/// What a git tree holds, as the worktree's view should: path → (git mode,
/// BLAKE3 of the bytes, hex). Files and symlinks only (git has no
/// directories).
type GitView = std::collections::BTreeMap<Vec<u8>, (u32, String)>;

/// The view a worktree mount shows, as git would hold it (`.git` left out).
fn git_view_of(root: &Path) -> GitView {
    manifest_without_git(root)
        .into_iter()
        .filter_map(|(p, e)| match e {
            Entry::File { mode, blake3, .. } => Some((
                p,
                (
                    if mode & 0o111 != 0 {
                        0o100755
                    } else {
                        0o100644
                    },
                    blake3,
                ),
            )),
            Entry::Symlink { target } => {
                Some((p, (0o120000, blake3::hash(&target).to_hex().to_string())))
            }
            _ => None,
        })
        .collect()
}

/// The tree of `rev` in the export `git_dir`, as [`git_view_of`] gives it.
fn git_view_in(git_dir: &Path, rev: &str) -> GitView {
    let list = git_in_ok(git_dir, &["ls-tree", "-r", "-z", rev]);
    let mut out = GitView::new();
    for entry in list.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let tab = entry.iter().position(|&b| b == b'\t').expect("tab");
        let meta = String::from_utf8_lossy(&entry[..tab]).into_owned();
        let mut parts = meta.split(' ');
        let mode = u32::from_str_radix(parts.next().expect("mode"), 8).expect("octal");
        let id = parts.nth(1).expect("id");
        let bytes = git_in_ok(git_dir, &["cat-file", "blob", id]);
        out.insert(
            entry[tab + 1..].to_vec(),
            (mode, blake3::hash(&bytes).to_hex().to_string()),
        );
    }
    out
}

/// The commit of `branch` that holds worktree turn `turn` (its
/// `opfs-turn:` trailer), if any.
fn commit_of_turn(git_dir: &Path, branch: &str, turn: u64) -> Option<String> {
    let out = git_in(git_dir, &["log", "--format=%H%x00%B%x01", branch]);
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .split('\u{1}')
        .filter_map(|c| c.trim_start().split_once('\0'))
        .find(|(_, body)| {
            body.contains("opfs-worktree: ")
                && body.lines().any(|l| l == format!("opfs-turn: {turn}"))
        })
        .map(|(id, _)| id.to_string())
}

/// A worktree's history is exported as its own branch of the project's
/// export, `refs/opfs/worktrees/NAME`: it starts from the project's commit
/// for the base turn's start, each commit's tree is what the worktree
/// showed at the end of its turn (a walk of the mount; never a `.wh.`
/// name), the worktree daemon writes it after each turn, the project's own
/// branch holds none of it, stock `git log -p` reads it, and `worktree
/// discard` deletes it.
#[test]
fn a_worktrees_history_is_its_own_branch_of_the_export() {
    let f = Fixture::new();
    fs::create_dir_all(f.p("d")).expect("mkdir");
    fs::create_dir_all(f.p("dir/sub")).expect("mkdir");
    fs::write(f.p("a.txt"), "a0\n").expect("write");
    fs::write(f.p("del.txt"), "d0\n").expect("write");
    fs::write(f.p("d/x"), "x0\n").expect("write");
    fs::write(f.p("d/y"), "y0\n").expect("write");
    fs::write(f.p("dir/sub/in"), "in0\n").expect("write");
    fs::write(f.p(".gitignore"), "*.log\n").expect("write");
    std::os::unix::fs::symlink("a.txt", f.p("link")).expect("symlink");
    f.mount();
    f.turn("project work before the worktree");
    let w = create(&f, "exp", &[]);
    let base = wt(&f, &["list", "--json"]).ok().json()[0]["base_turn"]
        .as_u64()
        .expect("base");
    let git_dir = PathBuf::from(
        f.opfs_p(&["status", "--json"]).ok().json()["state_dir"]
            .as_str()
            .expect("state dir"),
    )
    .join("export.git");
    let branch = "refs/opfs/worktrees/exp";

    f.sh_in(
        &w,
        "echo a1 > a.txt; rm del.txt; rm -r d; mkdir d; touch d/new; mv dir moved; \
         echo noise > build.log; ln -sf moved/sub/in link",
    );
    let view1 = git_view_of(&w);
    let t1: u64 = in_wt(&f, &w, &["status", "--json"]).ok().json()["turn"]
        .as_u64()
        .expect("turn");
    in_wt(&f, &w, &["turn", "--label", "first try"]).ok();
    // The worktree's daemon exports after the turn, off the request path.
    assert!(
        opfs::control::client::wait_for(std::time::Duration::from_secs(60), || {
            commit_of_turn(&git_dir, branch, t1).is_some()
        }),
        "the worktree daemon did not export turn {t1} to {branch}"
    );
    f.sh_in(
        &w,
        "echo a2 > a.txt; mkdir -p e && echo e > e/f; rm -r moved/sub",
    );
    let view2 = git_view_of(&w);
    in_wt(&f, &w, &["turn", "--label", "second try"]).ok();
    // An explicit export (of this worktree alone) catches up at once.
    let r = in_wt(&f, &w, &["export", "--json"]).ok().json();
    assert_eq!(r["branch"], branch, "{r:#}");

    let c1 = commit_of_turn(&git_dir, branch, t1).expect("turn 1 on the branch");
    let c2 = commit_of_turn(&git_dir, branch, t1 + 1).expect("turn 2 on the branch");
    let mut expected1 = view1.clone();
    expected1.remove(b"build.log".as_slice());
    let mut expected2 = view2.clone();
    expected2.remove(b"build.log".as_slice());
    assert_eq!(git_view_in(&git_dir, &c1), expected1, "turn {t1}'s tree");
    assert_eq!(
        git_view_in(&git_dir, &c2),
        expected2,
        "turn {}'s tree",
        t1 + 1
    );
    assert!(git_view_in(&git_dir, &c1).contains_key(b"d/new".as_slice()));
    let names =
        String::from_utf8_lossy(&git_in_ok(&git_dir, &["log", "--name-only", branch])).into_owned();
    assert!(!names.contains(".wh."), "{names}");

    // Its first commit's parent is the project's commit for the base.
    let parent = String::from_utf8_lossy(&git_in_ok(&git_dir, &["rev-parse", &format!("{c1}^")]))
        .trim()
        .to_string();
    let base_ref = format!("refs/opfs/turns/{}", base - 1);
    let want = String::from_utf8_lossy(&git_in_ok(&git_dir, &["rev-parse", &base_ref]))
        .trim()
        .to_string();
    assert_eq!(
        parent, want,
        "the branch starts at the project's {base_ref}"
    );

    // The project's own branch has none of the worktree's work.
    let main_log = String::from_utf8_lossy(&git_in_ok(
        &git_dir,
        &["log", "--format=%B", "refs/heads/opfs"],
    ))
    .into_owned();
    assert!(!main_log.contains("opfs-worktree"), "{main_log}");
    let main = git_view_in(&git_dir, "refs/heads/opfs");
    assert!(main.contains_key(b"del.txt".as_slice()) && main.contains_key(b"d/x".as_slice()));
    assert!(
        !main.contains_key(b"d/new".as_slice()) && !main.contains_key(b"moved/sub/in".as_slice())
    );

    // Stock git reads it, patches included.
    let patch = String::from_utf8_lossy(&git_in_ok(&git_dir, &["log", "-p", branch])).into_owned();
    assert!(
        patch.contains("-a0\n+a1\n") && patch.contains("-a1\n+a2\n"),
        "{patch}"
    );
    assert!(patch.contains("opfs-worktree: exp"), "{patch}");

    // The project's `opfs export` exports the worktrees' branches too.
    let all = f.opfs_p(&["export", "--json"]).ok().json();
    assert_eq!(all["worktrees"][0]["name"], "exp", "{all:#}");

    // Discard deletes the branch.
    wt(&f, &["discard", "exp"]).ok();
    let gone = git_in(&git_dir, &["show-ref", "--verify", branch]);
    assert!(!gone.status.success(), "{branch} is gone after discard");
    assert!(
        git_in(&git_dir, &["show-ref", "--verify", "refs/heads/opfs"])
            .status
            .success()
    );
}

/// `opfs gc` rewrites the project's export under a worktree's branch (its
/// kept commits get new parents) and writes the branch's commits again on
/// the project's new commit for the base, same trees, in the same step;
/// the next export finds the branch in place.
#[test]
fn a_worktree_branch_follows_the_project_export_rewritten_by_gc() {
    let f = Fixture::new();
    fs::write(f.p("a"), "0\n").expect("write");
    f.mount();
    for i in 1..=3 {
        fs::write(f.m("a"), format!("{i}\n")).expect("write");
        f.turn(&format!("project turn {i}"));
    }
    let w = create(&f, "gcd", &[]);
    let base = wt(&f, &["list", "--json"]).ok().json()[0]["base_turn"]
        .as_u64()
        .expect("base");
    fs::write(w.join("a"), "in the worktree\n").expect("write");
    in_wt(&f, &w, &["turn"]).ok();
    let r = f.opfs_p(&["export", "--json"]).ok().json();
    let git_dir = PathBuf::from(r["git_dir"].as_str().expect("git dir"));
    let branch = "refs/opfs/worktrees/gcd";
    let before = git_view_in(&git_dir, branch);
    assert_eq!(
        before.get(b"a".as_slice()).map(|e| e.1.clone()),
        Some(blake3::hash(b"in the worktree\n").to_hex().to_string())
    );

    f.umount();
    let gc = f.opfs_p(&["gc", "--keep", "1", "--json"]);
    assert_eq!(gc.code, Some(0), "{gc}");
    assert_eq!(gc.json()["export"]["branches_rewritten"], 1, "{gc}");
    let r = f.opfs_p(&["export", "--json"]).ok().json();
    assert_eq!(r["worktrees"][0]["rewritten"], false, "{r:#}");
    let first = String::from_utf8_lossy(&git_in_ok(
        &git_dir,
        &["rev-list", "--max-parents=0", branch],
    ))
    .trim()
    .to_string();
    let baseline =
        String::from_utf8_lossy(&git_in_ok(&git_dir, &["rev-parse", "refs/opfs/baseline"]))
            .trim()
            .to_string();
    assert_eq!(first, baseline, "the branch sits on the new baseline");
    let msg = String::from_utf8_lossy(&git_in_ok(
        &git_dir,
        &["log", "-1", "--format=%B", "refs/opfs/baseline"],
    ))
    .into_owned();
    assert!(msg.contains(&format!("opfs-baseline: {base}")), "{msg}");
    assert_eq!(git_view_in(&git_dir, branch), before, "same trees");
    discard_all(&f);
}

/// Files and directories of a worktree mount, for picking random targets
/// (`.git` never).
fn entries_of(root: &Path) -> (Vec<String>, Vec<String>) {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    for (p, e) in manifest_without_git(root) {
        let p = String::from_utf8(p).expect("utf8 names");
        match e {
            Entry::Dir { .. } => dirs.push(p),
            _ => files.push(p),
        }
    }
    (files, dirs)
}

/// One random change of the worktree at `w`; returns what it did.
fn random_change(rng: &mut Rng, w: &Path, n: &mut u32) -> String {
    let (files, dirs) = entries_of(w);
    *n += 1;
    let fresh = format!("n{n}");
    let mut in_dir = dirs.clone();
    in_dir.push(String::new());
    let dir = rng.pick(&in_dir).clone();
    let join = |d: &str, name: &str| {
        if d.is_empty() {
            name.to_string()
        } else {
            format!("{d}/{name}")
        }
    };
    let p = |rel: &str| w.join(rel);
    match rng.below(10) {
        0 | 1 if !files.is_empty() => {
            let f = rng.pick(&files).clone();
            if p(&f).is_symlink() {
                return format!("skip symlink {f}");
            }
            fs::write(p(&f), format!("edited {n}\n")).expect("write");
            format!("edit {f}")
        }
        2 if !files.is_empty() => {
            let f = rng.pick(&files).clone();
            fs::remove_file(p(&f)).expect("rm");
            format!("rm {f}")
        }
        3 if !dirs.is_empty() => {
            let d = rng.pick(&dirs).clone();
            fs::remove_dir_all(p(&d)).expect("rm -r");
            if rng.below(2) == 0 {
                fs::create_dir(p(&d)).expect("mkdir");
                fs::write(p(&join(&d, &fresh)), "under a remade dir\n").expect("write");
                format!("rm -r {d}; mkdir {d}; touch {d}/{fresh}")
            } else {
                format!("rm -r {d}")
            }
        }
        4 => {
            let d = join(&dir, &fresh);
            fs::create_dir(p(&d)).expect("mkdir");
            fs::write(p(&join(&d, "f")), format!("{n}\n")).expect("write");
            format!("mkdir {d} + file")
        }
        5 if !files.is_empty() => {
            let f = rng.pick(&files).clone();
            let to = join(&dir, &fresh);
            fs::rename(p(&f), p(&to)).expect("mv");
            format!("mv {f} {to}")
        }
        6 if !dirs.is_empty() => {
            let d = rng.pick(&dirs).clone();
            fs::rename(p(&d), p(&fresh)).expect("mv dir");
            format!("mv {d} {fresh}")
        }
        7 if !files.is_empty() => {
            use std::os::unix::fs::PermissionsExt;
            let f = rng.pick(&files).clone();
            if p(&f).is_symlink() {
                return format!("skip symlink {f}");
            }
            let mode = fs::metadata(p(&f)).expect("stat").permissions().mode();
            fs::set_permissions(p(&f), fs::Permissions::from_mode(mode ^ 0o111)).expect("chmod");
            format!("chmod {f}")
        }
        8 => {
            let l = join(&dir, &fresh);
            std::os::unix::fs::symlink(format!("target-{n}"), p(&l)).expect("symlink");
            format!("ln -s {l}")
        }
        _ if !dirs.is_empty() => {
            let d = rng.pick(&dirs).clone();
            fs::remove_dir_all(p(&d)).expect("rm -r");
            fs::write(p(&d), "a file where a directory was\n").expect("write");
            format!("replace dir {d} by a file")
        }
        _ => {
            let f = join(&dir, &fresh);
            fs::write(p(&f), format!("new {n}\n")).expect("write");
            format!("new {f}")
        }
    }
}

/// `git diff --name-status` between two views, renames as delete + add.
fn expected_status(old: &GitView, new: &GitView) -> Vec<String> {
    let mut out = Vec::new();
    let keys: std::collections::BTreeSet<&Vec<u8>> = old.keys().chain(new.keys()).collect();
    for k in keys {
        let k_s = String::from_utf8_lossy(k);
        match (old.get(k), new.get(k)) {
            (None, Some(_)) => out.push(format!("A\t{k_s}")),
            (Some(_), None) => out.push(format!("D\t{k_s}")),
            (Some(a), Some(b)) if a != b => {
                let t = (a.0 == 0o120000) != (b.0 == 0o120000);
                out.push(format!("{}\t{k_s}", if t { "T" } else { "M" }));
            }
            _ => {}
        }
    }
    out.sort();
    out
}

/// `opfs diff --name-status` output as [`expected_status`] gives it.
fn actual_status(out: &str) -> Vec<String> {
    let mut v = Vec::new();
    for l in out.lines().filter(|l| !l.ends_with('/')) {
        let parts: Vec<&str> = l.split('\t').collect();
        match parts.as_slice() {
            [s, from, to] if s.starts_with('R') => {
                v.push(format!("D\t{from}"));
                v.push(format!("A\t{to}"));
            }
            _ => v.push(l.to_string()),
        }
    }
    v.sort();
    v
}

/// Random changes of a worktree over several turns (edits, deletions,
/// `rm -r` with and without a remade directory, renames of files and
/// directories, mode changes, symlinks, a directory replaced by a file):
/// after each turn, what the worktree's `diff N`, `show N:PATH` and its
/// export branch say is what walks of the mount saw.
#[test]
fn a_worktrees_history_and_branch_match_its_mount_under_random_changes() {
    let (mut rng, seed) = Rng::from_env("OPFS_WORKTREE_SEED", 0x5eed_0012);
    let f = Fixture::new();
    for d in ["src/a", "src/b", "docs", "empty"] {
        fs::create_dir_all(f.p(d)).expect("mkdir");
    }
    for (i, rel) in ["src/a/x", "src/a/y", "src/b/z", "docs/r", "top", "src/m"]
        .iter()
        .enumerate()
    {
        fs::write(f.p(rel), format!("lower {i}\n")).expect("write");
    }
    std::os::unix::fs::symlink("top", f.p("link")).expect("symlink");
    f.mount();
    let w = create(&f, "rnd", &[]);
    let mut views = vec![git_view_of(&w)];
    let mut first = None;
    let mut n = 0;
    let mut done = Vec::new();
    for _ in 0..5 {
        let t = in_wt(&f, &w, &["status", "--json"]).ok().json()["turn"]
            .as_u64()
            .expect("turn");
        first.get_or_insert(t);
        for _ in 0..4 {
            done.push(format!("turn {t}: {}", random_change(&mut rng, &w, &mut n)));
        }
        views.push(git_view_of(&w));
        in_wt(&f, &w, &["turn"]).ok();
    }
    let first = first.expect("turns");
    let ctx = format!("seed {seed:#x}, changes:\n{}", done.join("\n"));
    let r = in_wt(&f, &w, &["export", "--json"]).ok().json();
    let git_dir = PathBuf::from(r["git_dir"].as_str().expect("git dir"));
    for (i, pair) in views.windows(2).enumerate() {
        let t = first + i as u64;
        let ns = in_wt(&f, &w, &["diff", &t.to_string(), "--name-status"]).ok();
        assert_eq!(
            actual_status(&ns.stdout),
            expected_status(&pair[0], &pair[1]),
            "diff {t}; {ctx}"
        );
        let c = commit_of_turn(&git_dir, "refs/opfs/worktrees/rnd", t)
            .unwrap_or_else(|| panic!("turn {t} on the branch; {ctx}"));
        assert_eq!(
            git_view_in(&git_dir, &c),
            pair[1],
            "tree of turn {t}; {ctx}"
        );
        // `show t:PATH`: the view when turn t began.
        let mut some: Vec<&Vec<u8>> = pair[0].keys().collect();
        rng.shuffle(&mut some);
        for path in some.into_iter().take(3) {
            let p = String::from_utf8_lossy(path).into_owned();
            let shown = in_wt(&f, &w, &["show", &format!("{t}:{p}")]).ok();
            assert_eq!(
                blake3::hash(shown.stdout.as_bytes()).to_hex().to_string(),
                pair[0][path].1,
                "show {t}:{p}; {ctx}"
            );
        }
        for (path, _) in pair[1]
            .iter()
            .filter(|(p, _)| !pair[0].contains_key(*p))
            .take(2)
        {
            let p = String::from_utf8_lossy(path).into_owned();
            let shown = in_wt(&f, &w, &["show", &format!("{t}:{p}")]);
            assert_eq!(shown.code, Some(1), "show {t}:{p} (absent then); {ctx}");
        }
    }
    discard_all(&f);
}

/// A project mounted with `--no-export` gets no export repository behind
/// its back from a worktree's daemon; `opfs export` then writes the
/// project's history and the worktree's branch.
#[test]
fn a_worktree_of_a_no_export_project_exports_only_when_asked() {
    let f = Fixture::new();
    fs::write(f.p("a"), "a0\n").expect("write");
    f.mount_with(&["--no-export"]);
    let w = create(&f, "quiet", &[]);
    fs::write(w.join("a"), "a1\n").expect("write");
    in_wt(&f, &w, &["turn"]).ok();
    let state = PathBuf::from(
        f.opfs_p(&["status", "--json"]).ok().json()["state_dir"]
            .as_str()
            .expect("state dir"),
    );
    let git_dir = state.join("export.git");
    let appeared =
        opfs::control::client::wait_for(std::time::Duration::from_secs(3), || git_dir.exists());
    assert!(!appeared, "a worktree daemon made {}", git_dir.display());
    let r = f.opfs_p(&["export", "--json"]).ok().json();
    assert_eq!(r["worktrees"][0]["turns"], serde_json::json!([1]), "{r:#}");
    let tree = git_view_in(&git_dir, "refs/opfs/worktrees/quiet");
    assert_eq!(
        tree.get(b"a".as_slice()).map(|e| e.1.clone()),
        Some(blake3::hash(b"a1\n").to_hex().to_string())
    );
    discard_all(&f);
}

/// The git dir of the fixture's project's default export.
fn export_git_dir(f: &Fixture) -> PathBuf {
    PathBuf::from(
        f.opfs_p(&["status", "--json"]).ok().json()["state_dir"]
            .as_str()
            .expect("state dir"),
    )
    .join("export.git")
}

/// A worktree's branch follows the ignore rules of the worktree's own
/// view: a `.gitignore` the worktree rewrote (or added in a directory)
/// decides what its branch leaves out, not the project's. (Before, the
/// branch read the project's `.gitignore`: `a.tmp` and `sub/secret` were
/// on the branch and `b.log` was not.)
#[test]
fn a_worktrees_branch_follows_the_gitignore_the_worktree_wrote() {
    let f = Fixture::new();
    fs::write(f.p(".gitignore"), "*.log\n").expect("write");
    fs::create_dir(f.p("sub")).expect("mkdir");
    fs::write(f.p("sub/kept"), "k\n").expect("write");
    f.mount();
    f.turn("before the worktree");
    let w = create(&f, "ign", &[]);
    f.sh_in(
        &w,
        "echo '*.tmp' > .gitignore; echo t > a.tmp; echo l > b.log; \
         echo secret > sub/.gitignore; echo s > sub/secret; echo o > sub/ok",
    );
    let turn: u64 = in_wt(&f, &w, &["status", "--json"]).ok().json()["turn"]
        .as_u64()
        .expect("turn");
    in_wt(&f, &w, &["turn", "--label", "own rules"]).ok();
    in_wt(&f, &w, &["export"]).ok();
    let git_dir = export_git_dir(&f);
    let c = commit_of_turn(&git_dir, "refs/opfs/worktrees/ign", turn).expect("turn exported");
    let names: Vec<String> = git_view_in(&git_dir, &c)
        .keys()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    assert_eq!(
        names,
        [
            ".gitignore",
            "b.log",
            "sub/.gitignore",
            "sub/kept",
            "sub/ok"
        ],
        "the branch's tree follows the worktree's .gitignore files"
    );
    // The project's own export still follows the project's rules.
    f.opfs_p(&["export"]).ok();
    assert_eq!(
        fs::read(f.p(".gitignore")).expect("read"),
        b"*.log\n",
        "the project is untouched"
    );
    discard_all(&f);
}

/// A worktree's branch leaves out the project's `[record] exclude` list, as
/// the project's own export does (before, `export_branch` never applied
/// it, so a cache the worktree wrote reached its branch).
#[test]
fn a_worktrees_branch_leaves_out_the_record_exclude_list() {
    let f = Fixture::new();
    fs::write(&f.pinned.config, "[record]\nexclude = [\"cache/\"]\n").expect("write config");
    fs::write(f.p("a"), "a0\n").expect("write");
    f.mount();
    f.turn("before the worktree");
    let w = create(&f, "excl", &[]);
    f.sh_in(&w, "echo a1 > a; mkdir -p cache; echo big > cache/x");
    let turn: u64 = in_wt(&f, &w, &["status", "--json"]).ok().json()["turn"]
        .as_u64()
        .expect("turn");
    in_wt(&f, &w, &["turn", "--label", "with a cache"]).ok();
    in_wt(&f, &w, &["export"]).ok();
    let git_dir = export_git_dir(&f);
    let c = commit_of_turn(&git_dir, "refs/opfs/worktrees/excl", turn).expect("turn exported");
    let names: Vec<String> = git_view_in(&git_dir, &c)
        .keys()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    assert_eq!(names, ["a"], "the branch holds no excluded path");
    discard_all(&f);
}

/// `worktree discard` deletes the worktree's branch from every repository
/// it was exported to, not only the default one: `opfs export --git-dir`
/// in the project writes every worktree's branch there too. (Before, the
/// branch was left behind in the other repository.)
#[test]
fn discard_deletes_the_branch_from_every_repository_it_was_exported_to() {
    let f = Fixture::new();
    fs::write(f.p("a"), "a0\n").expect("write");
    f.mount();
    let w = create(&f, "gone", &[]);
    fs::write(w.join("a"), "a1\n").expect("write");
    in_wt(&f, &w, &["turn"]).ok();
    let other = f.root().join("elsewhere.git");
    let other2 = f.root().join("from-the-worktree.git");
    let r = f
        .opfs_p(&[
            OsStr::new("export"),
            OsStr::new("--json"),
            OsStr::new("--git-dir"),
            other.as_os_str(),
        ])
        .ok()
        .json();
    assert_eq!(r["worktrees"][0]["turns"], serde_json::json!([1]), "{r:#}");
    in_wt(
        &f,
        &w,
        &[
            OsStr::new("export"),
            OsStr::new("--git-dir"),
            other2.as_os_str(),
        ],
    )
    .ok();
    let branch = "refs/opfs/worktrees/gone";
    for repo in [&other, &other2] {
        assert!(
            git_in(repo, &["rev-parse", "--verify", branch])
                .status
                .success(),
            "{branch} was not exported to {}",
            repo.display()
        );
    }
    wt(&f, &["discard", "gone"]).ok();
    for repo in [&other, &other2] {
        assert!(
            !git_in(repo, &["rev-parse", "--verify", branch])
                .status
                .success(),
            "{branch} is left in {} after discard",
            repo.display()
        );
        assert!(
            git_in(repo, &["rev-parse", "--verify", "refs/heads/opfs"])
                .status
                .success(),
            "the project's history stays in {}",
            repo.display()
        );
    }
}

/// `worktree merge --dry-run` prints the same plan whether the project's
/// daemon makes it or the command plans it itself (unmounted): each path
/// with the target's size, mode and hash. (Before, a plan sent by the
/// daemon printed `-> absent` for every path.)
#[test]
fn a_merge_dry_run_prints_the_same_plan_mounted_or_not() {
    let f = Fixture::new();
    fs::write(f.p("edit"), "e0\n").expect("write");
    fs::write(f.p("gone"), "g0\n").expect("write");
    f.mount();
    let w = create(&f, "dry", &[]);
    f.sh_in(&w, "echo e1 >> edit; rm gone; echo n > new; chmod 755 new");
    let mounted = wt(&f, &["merge", "dry", "--dry-run"]).ok().stdout;
    f.umount();
    let unmounted = wt(&f, &["merge", "dry", "--dry-run"]).ok().stdout;
    assert_eq!(mounted, unmounted, "the plan depends on who made it");
    let size = "e0\ne1\n".len();
    let hash = blake3::hash(b"e0\ne1\n").to_hex().to_string();
    let edit = format!("(file) -> file {size} bytes 644 {}", &hash[..12]);
    assert!(mounted.contains(&edit), "no `{edit}` in:\n{mounted}");
    assert!(
        mounted.contains("new (absent) -> file 2 bytes 755"),
        "{mounted}"
    );
    assert!(
        mounted.contains("remove gone (file) -> absent"),
        "{mounted}"
    );
    discard_all(&f);
}

/// A worktree of a project mounted with `--sync` is served with `--sync`
/// too (the user's durability choice holds for its worktrees), and one of
/// a project mounted without it is not. (Before, worktree daemons never
/// got `--sync`.)
#[test]
fn a_worktree_follows_the_projects_sync_choice() {
    for sync in [true, false] {
        let f = Fixture::new();
        fs::write(f.p("a"), "a0\n").expect("write");
        if sync {
            f.mount_with(&["--sync"]);
        } else {
            f.mount();
        }
        let w = create(&f, "dur", &[]);
        let cmdline = fs::read(format!("/proc/{}/cmdline", pid_of(&f, &w))).expect("cmdline");
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        assert_eq!(
            args.contains(&b"--sync".as_slice()),
            sync,
            "project mounted with sync = {sync}: the worktree daemon runs {:?}",
            String::from_utf8_lossy(&cmdline)
        );
        // After a remount of the worktree too.
        f.opfs(&[OsStr::new("umount"), w.as_os_str()]).ok();
        wt(&f, &["mount", "dur"]).ok();
        let cmdline = fs::read(format!("/proc/{}/cmdline", pid_of(&f, &w))).expect("cmdline");
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        assert_eq!(
            args.contains(&b"--sync".as_slice()),
            sync,
            "after a remount"
        );
        discard_all(&f);
    }
}

/// `opfs gc` moves each worktree branch onto the rewritten project
/// history in the same step, so `git gc` no longer keeps a dropped turn's
/// objects through the branch's old base. (Before, prune walked only
/// `refs/heads/opfs`: the branch still reached the old chain and the
/// dropped turn's blob stayed in the export until the worktree's next
/// export, and loose for git's two weeks after that.)
#[test]
fn gc_moves_worktree_branches_so_dropped_turns_leave_the_export() {
    let f = Fixture::new();
    fs::write(f.p("f"), "f0\n").expect("write");
    f.mount();
    fs::write(f.m("dropped"), "only at the end of turn 1\n").expect("write");
    f.turn("t1");
    fs::remove_file(f.m("dropped")).expect("rm");
    f.turn("t2");
    fs::write(f.m("f"), "f3\n").expect("write");
    let t3 = f.turn("t3");
    let w = create(&f, "keep", &[]);
    let base = wt(&f, &["list", "--json"]).ok().json()[0]["base_turn"]
        .as_u64()
        .expect("base");
    assert_eq!(base, t3, "the worktree's base is the empty open turn");
    fs::write(w.join("f"), "w1\n").expect("write");
    in_wt(&f, &w, &["turn"]).ok();
    f.opfs_p(&["export"]).ok();
    let git_dir = export_git_dir(&f);
    let branch = "refs/opfs/worktrees/keep";
    let dropped = git_ok_str(&git_dir, &["rev-parse", "refs/opfs/turns/1:dropped"]);
    let tree = git_ok_str(&git_dir, &["rev-parse", &format!("{branch}^{{tree}}")]);

    let r = f.opfs_c(&["gc", "--keep", "1", "--json"]).ok().json();
    assert!(
        !git_in(&git_dir, &["cat-file", "-e", &dropped])
            .status
            .success(),
        "a dropped turn's blob is still in the export after gc"
    );
    assert_eq!(r["export"]["branches_rewritten"], 1, "{r:#}");
    assert_eq!(
        git_ok_str(&git_dir, &["rev-parse", &format!("{branch}^{{tree}}")]),
        tree,
        "the branch keeps its tree"
    );
    assert_eq!(
        git_ok_str(&git_dir, &["rev-parse", &format!("{branch}~1")]),
        git_ok_str(&git_dir, &["rev-parse", "refs/opfs/baseline"]),
        "the branch sits on the new baseline (the end of turn {})",
        t3 - 1
    );
    // The worktree's next export finds its branch where gc put it.
    fs::write(w.join("f"), "w2\n").expect("write");
    in_wt(&f, &w, &["turn"]).ok();
    let e = in_wt(&f, &w, &["export", "--json"]).ok().json();
    assert_eq!(e["rewritten"], false, "{e:#}");
    discard_all(&f);
}

fn git_ok_str(git_dir: &Path, args: &[&str]) -> String {
    String::from_utf8_lossy(&git_in_ok(git_dir, args))
        .trim()
        .to_string()
}

/// The sorted names of directory `dir`.
fn sorted_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("ls {}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The worktree's caches (a handle reading the project's own file, page
/// cache, entries, misses, listings, all kept 60 s) never let a later
/// change of the project show: not one made through its mount, not one
/// made by a rewind, and one made behind its mount either does not show
/// or is listed as drifted.
#[test]
fn a_project_change_after_create_never_shows_through_the_worktrees_caches() {
    use std::os::unix::fs::FileExt;
    let f = Fixture::new();
    let big: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(f.p("big"), &big).expect("write");
    fs::write(f.p("small"), "small base\n").expect("write");
    fs::create_dir_all(f.p("d")).expect("mkdir");
    fs::write(f.p("d/c"), "c\n").expect("write");
    f.mount();
    let w = create(&f, "frozen", &[]);

    // Fill every cache: a handle on `big` with its first page read (the
    // project's own file, opened once for the handle), the other files,
    // the listings, and misses.
    let held = fs::File::open(w.join("big")).expect("open big");
    let mut page = vec![0u8; 4096];
    held.read_exact_at(&mut page, 0).expect("read big");
    assert_eq!(page, big[..4096]);
    let check = |when: &str, at: u64| {
        // A page no read touched yet, far from the others (the kernel's
        // readahead): a READ of the held handle, answered from the file
        // opened at its open. (The whole of `big` is read only at the end:
        // its pages are shared by every handle.)
        let mut page = vec![0u8; 4096];
        held.read_exact_at(&mut page, at).expect("read big");
        let at = at as usize;
        assert!(
            page == big[at..at + 4096],
            "{when}: the handle held on big shows the project's new bytes"
        );
        assert_eq!(read(&w.join("small")), "small base\n", "{when}");
        assert_eq!(sorted_names(&w), ["big", "d", "small"], "{when}");
        assert_eq!(sorted_names(&w.join("d")), ["c"], "{when}");
        assert_eq!(read(&w.join("d/c")), "c\n", "{when}");
        for miss in ["new", "d/new", "later"] {
            assert!(
                fs::symlink_metadata(w.join(miss)).is_err(),
                "{when}: {miss} shows"
            );
        }
    };
    check("at create", 256 << 10);

    // Through the project's mount.
    fs::write(f.m("big"), vec![b'X'; 1 << 20]).expect("write");
    fs::write(f.m("small"), "small changed\n").expect("write");
    fs::write(f.m("new"), "new\n").expect("write");
    fs::write(f.m("d/new"), "n\n").expect("write");
    fs::remove_file(f.m("d/c")).expect("rm");
    check("after changes through the project's mount", 512 << 10);

    // By a rewind of the project (to the changed state, from a later one).
    let t = f.turn("changed");
    fs::write(f.m("small"), "third\n").expect("write");
    fs::remove_file(f.m("new")).expect("rm");
    f.rewind(t);
    assert_eq!(read(&f.m("small")), "small changed\n");
    check("after a rewind of the project", 768 << 10);
    assert!(fs::read(w.join("big")).expect("read") == big, "big");

    // Behind the project's mount: a name the worktree holds as a miss, a
    // file whose pages it holds. Either the worktree still shows its base,
    // or the path is listed as drifted (docs/worktrees.md).
    fs::write(f.p("later"), "behind\n").expect("write");
    fs::write(f.p("d/behind"), "behind\n").expect("write");
    fs::write(f.p("small"), "small behind\n").expect("write");
    let shown: Vec<&str> = ["later", "d/behind"]
        .into_iter()
        .filter(|p| fs::symlink_metadata(w.join(p)).is_ok())
        .chain((read(&w.join("small")) != "small base\n").then_some("small"))
        .collect();
    let list = wt(&f, &["list", "--json"]).ok().json();
    let drifted = list[0]["drifted"].as_u64().unwrap_or(0);
    assert!(
        drifted >= shown.len() as u64,
        "{shown:?} show the project's changes behind its mount, not all listed as drifted: {list:#}"
    );
    drop(held);
    discard_all(&f);
}

/// A reader holding a lower file's cached pages sees a write made in the
/// worktree by another process (in place, then with `O_TRUNC`), and so
/// does a new reader.
#[test]
fn a_write_in_the_worktree_reaches_a_reader_holding_its_cached_pages() {
    use std::os::unix::fs::FileExt;
    let f = Fixture::new();
    fs::write(f.p("f.txt"), "lower bytes\n").expect("write");
    f.mount();
    let w = create(&f, "pages", &[]);
    let reader = fs::File::open(w.join("f.txt")).expect("open");
    let at = |r: &fs::File| {
        let mut buf = vec![0u8; 64];
        let n = r.read_at(&mut buf, 0).expect("read");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(at(&reader), "lower bytes\n");
    f.sh_in(&w, "printf UPPER | dd of=f.txt conv=notrunc status=none");
    assert_eq!(at(&reader), "UPPER bytes\n", "the held reader");
    assert_eq!(read(&w.join("f.txt")), "UPPER bytes\n", "a new reader");
    f.sh_in(&w, "printf 'new\\n' > f.txt");
    assert_eq!(at(&reader), "new\n", "the held reader after O_TRUNC");
    assert_eq!(read(&w.join("f.txt")), "new\n");
    assert_eq!(
        read(&f.p("f.txt")),
        "lower bytes\n",
        "the project is untouched"
    );
    drop(reader);
    discard_all(&f);
}

/// Without directory handles (`FUSE_NO_OPENDIR_SUPPORT`) a merged listing
/// longer than one READDIR reply is read whole, each name once, and a
/// change made in it through the worktree shows in the next listing.
#[test]
fn a_long_merged_listing_reads_whole_and_follows_changes() {
    let f = Fixture::new();
    fs::create_dir_all(f.p("big")).expect("mkdir");
    let mut want: Vec<String> = (0..600)
        .map(|i| format!("lower-name-number-{i:04}"))
        .collect();
    for n in &want {
        fs::write(f.p("big").join(n), "l\n").expect("write");
    }
    f.mount();
    let w = create(&f, "listing", &[]);
    let dir = w.join("big");
    // Each entry's number is the one `stat` shows (read before any stat).
    let numbered: Vec<(PathBuf, u64)> = fs::read_dir(&dir)
        .expect("ls")
        .map(|e| {
            let e = e.expect("entry");
            (e.path(), std::os::unix::fs::DirEntryExt::ino(&e))
        })
        .collect();
    for (p, ino) in numbered {
        let st = fs::symlink_metadata(&p).expect("stat");
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&st),
            ino,
            "{}",
            p.display()
        );
    }
    assert_eq!(sorted_names(&dir), want);
    for i in 0..200 {
        let n = format!("upper-name-number-{i:04}");
        fs::write(dir.join(&n), "u\n").expect("write");
        want.push(n);
    }
    for i in (0..600).step_by(3) {
        let n = format!("lower-name-number-{i:04}");
        fs::remove_file(dir.join(&n)).expect("rm");
        want.retain(|x| *x != n);
    }
    want.sort();
    for round in 0..3 {
        assert_eq!(sorted_names(&dir), want, "listing {round}");
    }
    let out = f.sh_in(&dir, "ls -f | sort | uniq -d");
    assert_eq!(out.trim(), "", "names listed twice");
    discard_all(&f);
}

#[test]
fn merge_diff_and_log_follow_the_ignore_rules_and_a_rewind_still_restores_ignored_paths() {
    let f = Fixture::new();
    fs::write(f.p(".gitignore"), "target/\n.venv/\n.env\nout/\n").expect("write");
    fs::write(f.p("lib.rs"), "fn a() {}\n").expect("write");
    fs::write(f.p(".env"), "SECRET=1\n").expect("write");
    f.mount();
    f.turn("base");
    let w = create(&f, "fix", &[]);
    f.sh_in(
        &w,
        "echo 'fn a() { fixed() }' > lib.rs; mkdir -p target/debug .venv/bin; \
         echo obj > target/debug/lib.o; echo py > .venv/bin/python",
    );

    // worktree diff: the work, not the build output, unless asked.
    let diff = wt(&f, &["diff", "fix", "--name-status"]).ok();
    assert_eq!(diff.stdout, "M\tlib.rs\n", "{diff}");
    let all = wt(&f, &["diff", "fix", "--name-status", "--include-ignored"]).ok();
    for p in ["lib.rs", "target/debug/lib.o", ".venv/bin/python"] {
        assert!(all.stdout.contains(p), "--include-ignored shows {p}: {all}");
    }

    // The merge carries lib.rs alone and says what it left out.
    let dry = wt(&f, &["merge", "fix", "--dry-run", "--json"]).ok().json();
    assert_eq!(paths_of(&dry, "merged"), ["lib.rs"], "{dry:#}");
    // target, target/debug, target/debug/lib.o and the same three of .venv.
    assert_eq!(dry["ignored"], 6, "{dry:#}");
    let merged = wt(&f, &["merge", "fix", "--json"]).ok().json();
    assert_eq!(paths_of(&merged, "merged"), ["lib.rs"], "{merged:#}");
    assert_eq!(read(&f.m("lib.rs")), "fn a() { fixed() }\n");
    assert!(!f.m("target").exists() && !f.m(".venv").exists());
    let turn = merged["turn"].as_u64().expect("merge turn");
    f.rewind(turn);
    let all = wt(&f, &["merge", "fix", "--include-ignored", "--json"])
        .ok()
        .json();
    let mut got = paths_of(&all, "merged");
    got.sort();
    assert!(
        got.contains(&"target/debug/lib.o".to_string())
            && got.contains(&".venv/bin/python".to_string())
            && got.contains(&"lib.rs".to_string()),
        "{all:#}"
    );
    assert_eq!(read(&f.m("target/debug/lib.o")), "obj\n");
    discard_all(&f);

    // opfs diff and log in the project: the same rules. (`out/` is
    // ignored but not regenerable output opfs leaves unrecorded by
    // default, as `target/` is: docs/design.md.)
    let t = f.turn("build");
    f.sh("echo 'fn b() {}' >> lib.rs; mkdir -p out/release; echo x > out/release/y; rm .env");
    let diff = f.opfs_c(&["diff", "--name-status"]).ok();
    assert_eq!(diff.stdout, "M\tlib.rs\n", "{diff}");
    let all = f
        .opfs_c(&["diff", "--name-status", "--include-ignored"])
        .ok();
    for p in ["lib.rs", "out/release/y", ".env"] {
        assert!(all.stdout.contains(p), "--include-ignored shows {p}: {all}");
    }
    let log = f.opfs_c(&["log", "--json"]).ok().json();
    let entry = log
        .as_array()
        .and_then(|a| a.iter().find(|e| e["turn"].as_u64() == Some(t)))
        .cloned()
        .expect("the turn is logged");
    assert_eq!(
        (
            &entry["added"],
            &entry["modified"],
            &entry["deleted"],
            &entry["ignored"]
        ),
        (
            &Value::from(0),
            &Value::from(1),
            &Value::from(0),
            &Value::from(2)
        ),
        "{entry:#}"
    );
    let log = f
        .opfs_c(&["log", "--json", "--include-ignored"])
        .ok()
        .json();
    let entry = log
        .as_array()
        .and_then(|a| a.iter().find(|e| e["turn"].as_u64() == Some(t)))
        .cloned()
        .expect("the turn is logged");
    assert_eq!(
        (&entry["added"], &entry["deleted"], &entry["ignored"]),
        (&Value::from(1), &Value::from(1), &Value::from(0)),
        "{entry:#}"
    );

    // A rewind restores what the rules ignore: the deleted .env comes back.
    f.rewind(t);
    assert_eq!(read(&f.p(".env")), "SECRET=1\n");
    assert!(!f.p("out/release").exists());
}

/// What the worktree commands print a person: a merge dry run of a change
/// the project already holds says "already identical" (not "1 paths" and
/// no plan), the default path is short (under the state home's `wt/`, not
/// 80-odd characters deep), and a discard refused because a shell sits in
/// the worktree gives its advice once.
#[test]
fn worktree_output_is_short_and_says_each_thing_once() {
    let f = Fixture::new();
    fs::write(f.p("f"), "old\n").expect("write");
    f.mount();
    let w = create(&f, "fix-a", &[]);
    let home = f.home.clone();
    assert!(
        w.starts_with(home.join("wt")) && w.ends_with("fix-a"),
        "default path {} is not under {}/wt",
        w.display(),
        home.display()
    );
    let depth = w
        .strip_prefix(&home)
        .expect("under home")
        .components()
        .count();
    assert_eq!(depth, 3, "wt/<project>-<key>/fix-a: {}", w.display());
    f.sh_in(&w, "echo new > f");
    f.sh("echo new > f");
    let run = wt(&f, &["merge", "fix-a", "--dry-run"]).ok();
    assert!(run.stdout.contains("already identical"), "{run}");
    assert!(run.stdout.contains("  f: already identical"), "{run}");
    assert!(!run.stdout.contains("1 paths"), "{run}");
    let v = wt(&f, &["merge", "fix-a", "--dry-run", "--json"])
        .ok()
        .json();
    assert_eq!(paths_of(&v, "identical"), ["f"], "{v:#}");

    // A process with its cwd in the worktree: discard is refused, once.
    let mut holder = std::process::Command::new("sleep")
        .arg("600")
        .current_dir(&w)
        .spawn()
        .expect("spawn a process inside the worktree");
    let run = wt(&f, &["discard", "fix-a"]);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("was not discarded"), "{run}");
    for advice in ["leave it", "then retry", "then try again"] {
        assert!(
            run.stderr.matches(advice).count() <= 1,
            "{advice:?} said more than once: {run}"
        );
    }
    assert_eq!(run.stderr.matches("fuser -vm").count(), 1, "{run}");
    // Once the process is gone, discard removes the default mountpoint too.
    wt(&f, &["discard", "fix-a"]).ok();
    assert!(!w.exists(), "{} is left behind", w.display());
    assert!(
        !w.parent().expect("parent").exists(),
        "its folder is left behind"
    );
}

/// The real descriptors (not `O_PATH`) process `pid` holds on `file`.
fn real_fds_of(pid: i32, file: &Path) -> Vec<String> {
    const O_PATH_FLAG: u32 = 0o10000000;
    let want = fs::canonicalize(file).expect("canonicalize");
    let mut found = Vec::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fd")).expect("the daemon's fds") {
        let Ok(entry) = entry else { continue };
        if fs::read_link(entry.path()).ok().as_deref() != Some(want.as_path()) {
            continue;
        }
        let n = entry.file_name().to_string_lossy().into_owned();
        let info = fs::read_to_string(format!("/proc/{pid}/fdinfo/{n}")).unwrap_or_default();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
            .unwrap_or(0);
        if flags & O_PATH_FLAG == 0 {
            found.push(format!("fd {n} flags {flags:o}"));
        }
    }
    found
}

/// Reads in a worktree go without OPEN (`FUSE_NO_OPEN_SUPPORT`, as
/// through the project's mount): a file held open for reading costs the
/// worktree's daemon no descriptor of the project's file (with OPEN, the
/// lower handle held one until RELEASE, and each cold read of a file cost
/// an OPEN and a RELEASE besides its READ), and the bytes are the base's
/// even when the project changes the file after the read through its
/// mount. Writes without a handle (an `O_TRUNC` rewrite, an append through
/// a descriptor opened before) copy up and are the worktree's alone.
#[test]
fn a_file_read_in_a_worktree_needs_no_open_and_holds_no_fd() {
    use std::io::{Read, Write};
    let f = Fixture::new();
    write_file(&f.p("a.txt"), b"base bytes\n", 0o644);
    write_file(&f.p("b.txt"), b"b base\n", 0o644);
    f.mount();
    let w = create(&f, "r", &[]);
    let pid = pid_of(&f, &w);
    let mut held = fs::File::open(w.join("a.txt")).expect("open in the worktree");
    let mut s = String::new();
    held.read_to_string(&mut s).expect("read");
    assert_eq!(s, "base bytes\n");
    let fds = real_fds_of(pid, &f.p("a.txt"));
    if std::env::var("OPFS_NO_OPEN").map_or(true, |v| v != "0") {
        assert!(fds.is_empty(), "the worktree's daemon holds {fds:?}");
    }
    // The project moves on through its mount; the worktree does not.
    fs::write(f.m("a.txt"), b"project's later bytes\n").expect("write via mount");
    assert_eq!(read(&w.join("a.txt")), "base bytes\n");
    drop(held);

    // An append through a descriptor opened before any write, then a
    // rewrite with O_TRUNC: both land in the worktree only.
    let mut app = fs::OpenOptions::new()
        .append(true)
        .open(w.join("b.txt"))
        .expect("open for append");
    app.write_all(b"more\n").expect("append");
    drop(app);
    assert_eq!(read(&w.join("b.txt")), "b base\nmore\n");
    fs::write(w.join("a.txt"), b"worktree bytes\n").expect("rewrite in the worktree");
    assert_eq!(read(&w.join("a.txt")), "worktree bytes\n");
    assert_eq!(read(&f.m("a.txt")), "project's later bytes\n");
    assert_eq!(read(&f.m("b.txt")), "b base\n");
    let diff = wt(&f, &["diff", "r", "--name-status"]).ok();
    assert!(
        diff.stdout.contains("a.txt") && diff.stdout.contains("b.txt"),
        "{diff}"
    );
    discard_all(&f);
}
