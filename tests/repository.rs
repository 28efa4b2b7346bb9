//! The project's repository survives every rewind (`docs/design.md`,
//! "`.git`"): `.git` moved through the mount during a turn (`mv .git
//! gitbackup`, or `mv .git .git-old && git init`) is never removed by a
//! rewind to before the move; the rewind leaves it and says how to put it
//! back. An ordinary rewind with `.git` in place behaves as before. The
//! rewinds pass `--partial`, so the other paths are restored around it.

mod common;

use std::fs;
use std::path::Path;

use common::*;

fn conflicts(v: &serde_json::Value) -> Vec<(String, String)> {
    v["conflicts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["path"].as_str().unwrap_or_default().to_string(),
                        c["reason"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn is_repository(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir()
}

/// A project with a repository holding one commit, mounted, turn 2 open.
fn project_with_repository() -> Fixture {
    let fx = Fixture::new();
    fs::write(fx.p("a.txt"), b"a0\n").expect("write");
    fx.sh_in(
        &fx.p(""),
        "git init -q && git add a.txt && git commit -qm first",
    );
    fx.mount();
    assert_eq!(fx.turn("work"), 2);
    fx
}

#[test]
fn a_rewind_never_removes_git_moved_away_through_the_mount() {
    let fx = project_with_repository();
    fx.sh("echo a1 > a.txt && mv .git gitbackup");
    let dry = fx.opfs_c(&["rewind", "2", "--dry-run", "--partial", "--json"]);
    assert_eq!(dry.code, Some(3), "{dry}");
    let run = fx.opfs_c(&["rewind", "2", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    let c = conflicts(&run.json());
    assert_eq!(c.len(), 1, "{run}");
    assert_eq!(c[0].0, "gitbackup");
    assert!(c[0].1.contains("mv gitbackup .git"), "{run}");
    assert!(is_repository(&fx.p("gitbackup")), "the repository is gone");
    // Everything else was restored.
    assert_eq!(fs::read(fx.p("a.txt")).expect("read"), b"a0\n");
    // Put back as the message says, the repository works.
    fx.sh("mv gitbackup .git && test \"$(git log -1 --format=%s)\" = first");
    // --force does not remove it either.
    fx.sh("mv .git gitbackup");
    let forced = fx.opfs_c(&["rewind", "2", "--force", "--partial", "--json"]);
    assert_eq!(forced.code, Some(3), "{forced}");
    assert!(
        is_repository(&fx.p("gitbackup")),
        "--force removed the repository"
    );
}

#[test]
fn a_rewind_never_removes_git_moved_aside_for_a_new_one() {
    let fx = project_with_repository();
    fx.sh("mv .git .git-old && git init -q && echo b > b.txt");
    let run = fx.opfs_c(&["rewind", "2", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    let c = conflicts(&run.json());
    assert_eq!(
        c.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        vec![".git-old"],
        "{run}"
    );
    assert!(
        is_repository(&fx.p(".git-old")),
        "the old repository is gone"
    );
    assert!(is_repository(&fx.p(".git")), "the new repository is gone");
    assert!(!fx.p("b.txt").exists());
}

#[test]
fn a_repository_moved_twice_is_still_never_removed() {
    let fx = project_with_repository();
    fx.sh("mv .git gitbackup");
    assert_eq!(fx.turn("again"), 3);
    fx.sh("mkdir -p keep && mv gitbackup keep/repo");
    let run = fx.opfs_c(&["rewind", "2", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    let mut c: Vec<String> = conflicts(&run.json()).into_iter().map(|c| c.0).collect();
    c.sort();
    assert_eq!(c, vec!["keep", "keep/repo"], "{run}");
    assert!(is_repository(&fx.p("keep/repo")), "the repository is gone");
}

#[test]
fn an_ordinary_rewind_with_git_in_place_is_unchanged() {
    let fx = project_with_repository();
    fx.sh("echo a1 > a.txt && echo n > new.txt && git add -A && git commit -qm second && mkdir d && echo x > d/x");
    let before = fs::read(fx.p(".git/HEAD")).expect("read HEAD");
    let v = fx.rewind(2);
    assert_eq!(v["conflicts"], serde_json::json!([]), "{v:#}");
    assert_eq!(fs::read(fx.p("a.txt")).expect("read"), b"a0\n");
    assert!(!fx.p("new.txt").exists());
    assert!(!fx.p("d").exists());
    // `.git` is never recorded, never restored: the commit stays.
    assert!(is_repository(&fx.p(".git")));
    assert_eq!(fs::read(fx.p(".git/HEAD")).expect("read HEAD"), before);
    fx.sh("test \"$(git log -1 --format=%s)\" = second");
}
