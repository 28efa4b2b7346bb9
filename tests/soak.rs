//! "Done means" for On a real source tree of thousands of files with
//! a git repository inside, seeded random shell work over several turns, then
//! rewinds to every turn in random order. Each rewind must give back exactly
//! the tree that turn began with (outside `.git`), leave `.git` exactly as the
//! git commands left it, and be undone by rewinding to its own turn.
//!
//! Replay a failure with `OPFS_SOAK_SEED=<seed printed in the output>`.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;

const TURNS: u64 = 8;
const OPS_PER_TURN: usize = 12;
const MAX_FILES: usize = 3000;
const MIN_FILES: usize = 1000;

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME must be set")
}

fn count_files(dir: &Path) -> (usize, u64) {
    let list = listing(dir, &[]);
    let files = list.len();
    let bytes = list
        .values()
        .map(|e| match e {
            Entry::File { size, .. } => *size,
            _ => 0,
        })
        .sum();
    (files, bytes)
}

/// The `NAME-VERSION` folder names of the packages `Cargo.lock` pins: the
/// soak project is drawn from these only, so it is the same on every
/// machine that built this workspace, whatever else the registry holds.
fn locked_crates() -> std::collections::BTreeSet<std::ffi::OsString> {
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock");
    let text = fs::read_to_string(&lock).unwrap_or_else(|e| panic!("{}: {e}", lock.display()));
    let mut out = std::collections::BTreeSet::new();
    let mut name = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("name = ") {
            name = Some(v.trim_matches('"').to_owned());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            out.insert(format!("{n}-{}", v.trim_matches('"')).into());
        }
    }
    out
}

/// Crate sources from the cargo registry (present after any build of this
/// workspace), chosen deterministically among the packages `Cargo.lock`
/// pins: whole crates in name order, skipping very large ones, up to
/// `MAX_FILES` files.
fn pick_sources() -> Vec<PathBuf> {
    let src = cargo_home().join("registry/src");
    let locked = locked_crates();
    let mut crates = Vec::new();
    for index in fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("{}: {e} (run `cargo fetch` first)", src.display()))
        .flatten()
    {
        for krate in fs::read_dir(index.path()).into_iter().flatten().flatten() {
            if krate.path().is_dir() && locked.contains(&krate.file_name()) {
                crates.push(krate.path());
            }
        }
    }
    crates.sort_by_key(|p| p.file_name().map(|n| n.to_owned()));
    crates.dedup_by_key(|p| p.file_name().map(|n| n.to_owned()));
    let mut chosen = Vec::new();
    let mut total = 0;
    for c in crates {
        let (files, bytes) = count_files(&c);
        if files > 600 || bytes > 4 << 20 || total + files > MAX_FILES {
            continue;
        }
        total += files;
        chosen.push(c);
    }
    assert!(
        total >= MIN_FILES,
        "only {total} files of crate sources under {} (need {MIN_FILES}); \
         run `cargo fetch` so the registry holds this workspace's dependencies",
        src.display()
    );
    eprintln!("soak project: {} crates, {total} files", chosen.len());
    chosen
}

#[test]
fn random_shell_work_then_rewinds_in_random_order() {
    let fx = Fixture::new();
    let sources = pick_sources();
    fs::create_dir(fx.p("vendor")).expect("mkdir vendor");
    for c in &sources {
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(c)
            .arg(fx.p("vendor"))
            .status()
            .expect("run cp");
        assert!(status.success(), "cp -a {}", c.display());
    }
    write_file(&fx.p("README.md"), b"# soak project\n", 0o644);
    std::os::unix::fs::symlink("vendor", fx.p("deps")).expect("symlink");
    fx.sh_in(
        &fx.project,
        "chmod -R u+w . && git -c init.defaultBranch=main init -q && git add -A \
         && git commit -qm 'initial import'",
    );

    let (mut rng, seed) = Rng::from_env("OPFS_SOAK_SEED", 0x50a1_c0de);
    fx.mount();
    let mut starts = vec![Manifest::new()]; // index 0 unused
    let mut n = 0;
    for t in 1..=TURNS {
        assert_eq!(fx.open_turn(), t);
        starts.push(if t == 1 {
            fx.tree_without_git()
        } else {
            manifest_without_git(&fx.project)
        });
        for _ in 0..OPS_PER_TURN {
            n += 1;
            let op = random_shell_op(&mut rng, &listing(&fx.project, &[b".git"]), n);
            eprintln!("turn {t}: {op}");
            fx.sh(&op);
        }
        if t % 2 == 0 {
            let commit = format!("git add -A && git commit -qm 'turn {t}' --allow-empty");
            eprintln!("turn {t}: {commit}");
            fx.sh(&commit);
        }
        assert_eq!(fx.turn(&format!("soak turn {}", t + 1)), t + 1);
    }
    starts.push(fx.tree_without_git()); // the start of the open turn
    let git_state = manifest(&fx.p(".git"));
    let commits = fx.sh("git log --format=%s");

    let mut order: Vec<u64> = (1..=TURNS + 1).collect();
    rng.shuffle(&mut order);
    eprintln!("rewind order: {order:?} (seed {seed:#x})");
    let mut current = starts[TURNS as usize + 1].clone();
    for &t in &order {
        let ctx = format!("seed {seed:#x}, rewind to {t}");
        let r = fx.rewind(t);
        fx.assert_tree_without_git(&ctx, &starts[t as usize]);
        assert_manifest_eq(
            &format!("{ctx}: .git"),
            &git_state,
            &manifest(&fx.p(".git")),
        );
        for p in restored(&r) {
            assert!(
                p != ".git" && !p.starts_with(".git/"),
                "{ctx}: restored {p}"
            );
        }

        // Rewinding to the rewind's own turn undoes it.
        fx.rewind(rewind_turn(&r));
        fx.assert_tree_without_git(&format!("{ctx}, then redo"), &current);
        assert_manifest_eq(
            &format!("{ctx}, then redo: .git"),
            &git_state,
            &manifest(&fx.p(".git")),
        );

        // Leave the tree at turn t's start, so the next rewind starts from a
        // different state each time.
        fx.rewind(t);
        fx.assert_tree_without_git(&format!("{ctx}, again"), &starts[t as usize]);
        current = starts[t as usize].clone();
    }
    assert_eq!(fx.sh("git log --format=%s"), commits, "git history changed");
    fx.umount();
    assert_manifest_eq("after umount", &current, &manifest_without_git(&fx.project));
}
