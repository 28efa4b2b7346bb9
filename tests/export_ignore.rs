//! The export follows the project's ignore rules, on a
//! real mount: `.gitignore` at every level, `.git/info/exclude` and the
//! user's global excludes keep build output out of the exported commits,
//! while rewind still records and restores the ignored paths; a change of
//! `.gitignore` applies from the next change of each path;
//! `--export-ignored` exports everything and is kept by the repository.

// A failed unwrap is a failed test, with the error in the message.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// Every path in the tree of `rev` in the bare repository `git_dir`.
fn ls_tree(git_dir: &Path, rev: &str) -> BTreeSet<String> {
    let out = common::git_in_ok(git_dir, &["ls-tree", "-r", "--name-only", rev]);
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

fn set(paths: &[&str]) -> BTreeSet<String> {
    paths.iter().map(|p| p.to_string()).collect()
}

#[test]
fn build_output_stays_out_of_the_export_but_is_rewound() {
    let fx = common::Fixture::new();
    fs::write(fx.p(".gitignore"), "target/\n*.log\n").unwrap();
    // An ignored target/ is not recorded by default (docs/design.md "What
    // opfs keeps by default"); this test is about the export, so it asks
    // for everything to be recorded.
    fs::write(&fx.pinned.config, "[record]\nskip_regenerable = false\n").unwrap();
    fs::create_dir_all(fx.p("src")).unwrap();
    fs::write(fx.p("src/main.rs"), "fn main() {}\n").unwrap();
    fs::write(fx.p("src/.gitignore"), "generated.rs\n").unwrap();
    fs::create_dir_all(fx.p(".git/info")).unwrap();
    fs::write(fx.p(".git/info/exclude"), "local.env\n").unwrap();
    let global = fx.pinned.home.join(".config/git/ignore");
    fs::create_dir_all(global.parent().unwrap()).unwrap();
    fs::write(&global, "*.swp\n").unwrap();
    // Present before the mount: the baseline walk must leave them out.
    fs::create_dir_all(fx.p("target/debug")).unwrap();
    fs::write(fx.p("target/debug/old"), vec![7u8; 4096]).unwrap();
    fx.mount_with(&["--no-export"]);

    // Turn 1: a "cargo build" and the files each rule ignores.
    fs::create_dir_all(fx.m("target/debug/deps")).unwrap();
    fs::write(fx.m("target/debug/deps/app"), vec![1u8; 1 << 20]).unwrap();
    fs::write(fx.m("target/.rustc_info.json"), "{}").unwrap();
    fs::write(fx.m("build.log"), "compiling\n").unwrap();
    fs::write(fx.m("src/generated.rs"), "// generated\n").unwrap();
    fs::write(fx.m("local.env"), "TOKEN=x\n").unwrap();
    fs::write(fx.m(".main.rs.swp"), "swap").unwrap();
    fs::write(fx.m("src/main.rs"), "fn main() { println!(); }\n").unwrap();
    fs::write(fx.m("src/lib.rs"), "pub fn f() {}\n").unwrap();
    assert_eq!(fx.turn("build"), 2);

    let git_dir = fx.root().join("export.git");
    let git = git_dir.to_str().unwrap().to_string();
    let run = fx.opfs_c(&["export", "--git-dir", &git, "--json"]).ok();
    let report = run.json();
    assert_eq!(report["follows_ignore_rules"], true, "{report:#}");
    assert!(report["ignored"].as_u64().unwrap() >= 1, "{report:#}");
    let tracked = set(&[".gitignore", "src/.gitignore", "src/lib.rs", "src/main.rs"]);
    assert_eq!(ls_tree(&git_dir, "refs/opfs/turns/1"), tracked);
    assert_eq!(
        ls_tree(&git_dir, "refs/opfs/baseline"),
        set(&[".gitignore", "src/.gitignore", "src/main.rs"])
    );

    // Ignored paths are still recorded: a rewind to turn 1 removes what the
    // build made and gives back what it changed.
    fx.rewind(1);
    assert!(!fx.p("target/debug/deps").exists());
    assert!(!fx.p("build.log").exists());
    assert!(!fx.p("local.env").exists());
    assert_eq!(fs::read(fx.p("target/debug/old")).unwrap(), vec![7u8; 4096]);
    // ... and the rewind of that rewind brings the build output back.
    fx.rewind(2);
    assert_eq!(
        fs::read(fx.p("target/debug/deps/app")).unwrap(),
        vec![1u8; 1 << 20]
    );

    fx.opfs_c(&["export", "--git-dir", &git]).ok();

    // A .gitignore change applies from the next change of each path:
    // build.log, written again after `*.log` went, is exported; local.env,
    // un-ignored but not changed, is not (yet).
    fs::write(fx.m(".gitignore"), "target/\n").unwrap();
    fs::write(fx.m(".git/info/exclude"), "").unwrap();
    fs::write(fx.m("build.log"), "compiling again\n").unwrap();
    let t = fx.turn("unignore logs");
    fx.opfs_c(&["export", "--git-dir", &git]).ok();
    let mut want = tracked.clone();
    want.insert("build.log".into());
    assert_eq!(
        ls_tree(&git_dir, &format!("refs/opfs/turns/{}", t - 1)),
        want
    );
    // Ignoring a tracked path removes it from the next commit that
    // changes it.
    fs::write(fx.m(".gitignore"), "target/\n*.rs\n").unwrap();
    fs::write(fx.m("src/lib.rs"), "pub fn g() {}\n").unwrap();
    let t = fx.turn("ignore rs");
    fx.opfs_c(&["export", "--git-dir", &git]).ok();
    let want = set(&[".gitignore", "src/.gitignore", "src/main.rs", "build.log"]);
    assert_eq!(
        ls_tree(&git_dir, &format!("refs/opfs/turns/{}", t - 1)),
        want
    );

    // --export-ignored: everything, and the repository keeps the choice.
    let all_dir = fx.root().join("all.git");
    let all = all_dir.to_str().unwrap().to_string();
    let r = fx
        .opfs_c(&["export", "--git-dir", &all, "--export-ignored", "--json"])
        .ok()
        .json();
    assert_eq!(r["follows_ignore_rules"], false, "{r:#}");
    let turn1 = ls_tree(&all_dir, "refs/opfs/turns/1");
    for p in [
        "target/debug/deps/app",
        "target/debug/old",
        "build.log",
        "local.env",
        ".main.rs.swp",
        "src/generated.rs",
    ] {
        assert!(turn1.contains(p), "{p} missing from {turn1:?}");
    }
    fs::write(fx.m("target/debug/new"), "x").unwrap();
    let t = fx.turn("more build");
    let r = fx
        .opfs_c(&["export", "--git-dir", &all, "--json"])
        .ok()
        .json();
    assert_eq!(
        r["follows_ignore_rules"], false,
        "the choice is kept: {r:#}"
    );
    assert!(ls_tree(&all_dir, &format!("refs/opfs/turns/{}", t - 1)).contains("target/debug/new"));
    // The other repository still follows the rules.
    fx.opfs_c(&["export", "--git-dir", &git]).ok();
    assert_eq!(
        ls_tree(&git_dir, &format!("refs/opfs/turns/{}", t - 1)),
        want
    );
}
