//! Exact rewind through a real mount, one test per scenario.
//!
//! Each scenario populates the project, mounts it, mutates it through the
//! mount in turn 2 (sometimes also in turn 1), then rewinds and compares the
//! whole tree — types, permission bits, bytes, link targets — of both the
//! backing project and the mountpoint with the manifest taken when the turn
//! began.

mod common;

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::mmap::Mapping;
use common::*;
use serde_json::Value;

/// The shape shared by the scenarios: `turn1` runs in turn 1 (through the
/// mount), `turn2` in turn 2. Then: rewind to 2 (→ the tree when turn 2
/// began), rewind that rewind (redo → the tree after turn 2), rewind to 2
/// again, rewind to 1 (→ the tree at mount time). Returns the result of the
/// first rewind to 2 and the manifests at mount, at turn 2's start and after
/// turn 2.
fn scenario(
    fx: &Fixture,
    turn1: impl FnOnce(&Fixture),
    turn2: impl FnOnce(&Fixture),
) -> (Value, Manifest, Manifest, Manifest) {
    let m0 = manifest(&fx.project);
    fx.mount();
    assert_eq!(fx.open_turn(), 1, "turn 1 opens at the first mount");
    assert_manifest_eq("mount serves the project", &m0, &manifest(&fx.mnt));
    turn1(fx);
    let m1 = fx.tree();
    assert_eq!(fx.turn("mutate"), 2);
    turn2(fx);
    let m2 = fx.tree();
    assert_ne!(
        m1, m2,
        "the turn-2 mutation changed nothing: the test cannot fail"
    );

    let r = fx.rewind(2);
    fx.assert_tree("after rewind 2", &m1);

    let redo = fx.rewind(rewind_turn(&r));
    fx.assert_tree("after rewinding the rewind (redo)", &m2);
    assert_ne!(rewind_turn(&redo), rewind_turn(&r));

    fx.rewind(2);
    fx.assert_tree("after rewind 2 again", &m1);

    fx.rewind(1);
    fx.assert_tree("after rewind 1", &m0);
    (r, m0, m1, m2)
}

/// [`scenario`] with shell scripts run at the mountpoint.
fn sh_scenario(fx: &Fixture, turn1: &str, turn2: &str) -> (Value, Manifest, Manifest, Manifest) {
    let t1 = turn1.to_owned();
    let t2 = turn2.to_owned();
    scenario(
        fx,
        move |fx| {
            if !t1.is_empty() {
                fx.sh(&t1);
            }
        },
        move |fx| {
            fx.sh(&t2);
        },
    )
}

fn assert_restored_contains(r: &Value, paths: &[&str]) {
    let got = restored(r);
    for p in paths {
        assert!(
            got.iter().any(|g| g == p),
            "`restored` should list {p:?}: {r:#}"
        );
    }
}

/// Creates the small source tree most scenarios start from.
fn populate(fx: &Fixture) {
    write_file(
        &fx.p("src/main.rs"),
        b"fn main() {\n    println!(\"alpha\");\n}\n",
        0o644,
    );
    write_file(&fx.p("src/lib.rs"), b"pub fn alpha() -> u32 { 1 }\n", 0o644);
    write_file(&fx.p("src/util/mod.rs"), b"// util alpha\n", 0o644);
    write_file(&fx.p("README"), b"alpha beta gamma\n", 0o644);
    write_file(&fx.p("run.sh"), b"#!/bin/sh\necho alpha\n", 0o755);
}

#[test]
fn sed_i_write_new_then_rename() {
    let fx = Fixture::new();
    populate(&fx);
    let (r, ..) = sh_scenario(
        &fx,
        "",
        "sed -i 's/alpha/ALPHA/' src/main.rs src/lib.rs && sed -i 's/beta/BETA/' README",
    );
    assert_restored_contains(&r, &["src/main.rs", "src/lib.rs", "README"]);
}

#[test]
fn rm_rf_of_a_tree() {
    let fx = Fixture::new();
    populate(&fx);
    write_file(&fx.p("src/util/deep/er/x.rs"), b"x\n", 0o600);
    fs::create_dir_all(fx.p("src/util/empty")).expect("mkdir");
    std::os::unix::fs::symlink("../lib.rs", fx.p("src/util/lib-link")).expect("symlink");
    let (r, ..) = sh_scenario(&fx, "", "rm -rf src");
    assert_restored_contains(&r, &["src/main.rs", "src/util/deep/er/x.rs"]);
}

#[test]
fn rm_rf_of_a_tree_created_in_turn_1() {
    let fx = Fixture::new();
    populate(&fx);
    sh_scenario(
        &fx,
        "mkdir -p gen/a/b && echo one > gen/a/b/f && echo two > gen/a/g && chmod 0700 gen/a",
        "rm -rf gen",
    );
}

#[test]
fn mv_of_a_directory_rewound_both_ways() {
    let fx = Fixture::new();
    populate(&fx);
    write_file(&fx.p("src/util/deep/x.rs"), b"deep\n", 0o644);
    // Rename the tree, then change things under the new name at depth: both
    // the old and the new location must be restorable.
    sh_scenario(
        &fx,
        "",
        "mv src source && echo changed > source/util/deep/x.rs && echo new > source/new.rs \
         && rm source/lib.rs && mv source/util source/helpers",
    );

    // The same again from the start of a fresh turn, checking the paths by
    // name in both directions: back to before the mv, then redo.
    let before = fx.tree();
    let t = fx.turn("mv again");
    fx.sh(
        "mv src source && mv source/util source/helpers && echo more >> source/helpers/deep/x.rs",
    );
    let after = fx.tree();
    let r = fx.rewind(t);
    fx.assert_tree("rewind to before the mv", &before);
    assert!(fx.m("src/util/deep/x.rs").is_file());
    assert!(!fx.m("source").exists() && !fx.p("source").exists());
    fx.rewind(rewind_turn(&r));
    fx.assert_tree("redo of the mv", &after);
    assert!(!fx.m("src").exists() && !fx.p("src").exists());
    assert!(fx.m("source/helpers/deep/x.rs").is_file());
}

#[test]
fn rename_over_an_existing_file() {
    let fx = Fixture::new();
    write_file(&fx.p("a.txt"), b"contents of a\n", 0o644);
    write_file(&fx.p("b.txt"), b"the old b, which gets replaced\n", 0o600);
    write_file(&fx.p("d/c.txt"), b"c\n", 0o755);
    let (r, ..) = sh_scenario(&fx, "", "mv -f a.txt b.txt && mv -f b.txt d/c.txt");
    assert_restored_contains(&r, &["a.txt", "b.txt", "d/c.txt"]);
}

fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> std::io::Result<()> {
    let from = std::ffi::CString::new(from.as_os_str().as_bytes()).expect("no NUL in path");
    let to = std::ffi::CString::new(to.as_os_str().as_bytes()).expect("no NUL in path");
    // SAFETY: both pointers are valid NUL-terminated strings for the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn rename_exchange() {
    let fx = Fixture::new();
    write_file(&fx.p("a"), b"AAAA\n", 0o644);
    write_file(&fx.p("b"), b"BB\n", 0o600);
    write_file(&fx.p("dir/inner"), b"inside\n", 0o644);
    scenario(
        &fx,
        |_| {},
        |fx| {
            renameat2(&fx.m("a"), &fx.m("b"), libc::RENAME_EXCHANGE).expect("exchange a <-> b");
            assert_eq!(fs::read(fx.m("a")).expect("read a"), b"BB\n");
            // A file and a directory swap places: types must come back too.
            renameat2(&fx.m("a"), &fx.m("dir"), libc::RENAME_EXCHANGE).expect("exchange a <-> dir");
            assert!(fx.m("a/inner").is_file());
            // RENAME_NOREPLACE onto an existing name must fail and change nothing.
            let err = renameat2(&fx.m("b"), &fx.m("a"), libc::RENAME_NOREPLACE)
                .expect_err("RENAME_NOREPLACE over an existing name");
            assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
            renameat2(&fx.m("b"), &fx.m("c"), libc::RENAME_NOREPLACE).expect("noreplace b -> c");
        },
    );
}

#[test]
fn new_directory_tree_is_removed() {
    let fx = Fixture::new();
    populate(&fx);
    sh_scenario(
        &fx,
        "",
        "mkdir -p target/debug/deps/empty && echo obj > target/debug/deps/a.o \
         && head -c 100000 /dev/urandom > target/debug/opfs && chmod 0755 target/debug/opfs \
         && ln -s debug target/latest && mkfifo target/fifo && echo x > src/new.rs",
    );
    assert!(!fx.p("target").exists() && !fx.m("target").exists());
    assert!(!fx.m("src/new.rs").exists());
}

#[test]
fn non_utf8_file_names() {
    let fx = Fixture::new();
    let cafe = bytes_path(b"caf\xe9");
    let naive = bytes_path(b"na\xefve \xff\xfe");
    write_file(&fx.p(&cafe), b"latin-1 name\n", 0o644);
    scenario(
        &fx,
        |_| {},
        |fx| {
            fs::write(fx.m(&cafe), b"rewritten\n").expect("write caf\\xe9");
            fs::create_dir(fx.m(&naive)).expect("mkdir non-UTF-8 dir");
            fs::write(
                fx.m(naive.join(bytes_path(b"\x80\x81.bin"))),
                [0u8, 159, 146, 150],
            )
            .expect("write inside non-UTF-8 dir");
            fs::rename(fx.m(&cafe), fx.m(bytes_path(b"caf\xe9.old"))).expect("rename");
        },
    );
    assert_eq!(fs::read(fx.m(&cafe)).expect("read"), b"latin-1 name\n");
}

#[test]
fn large_binary_file_overwritten_in_the_middle() {
    let fx = Fixture::new();
    let mut rng = Rng::new(20);
    let size = 20 << 20;
    write_file(&fx.p("big.bin"), &rng.bytes(size), 0o644);
    scenario(
        &fx,
        |_| {},
        |fx| {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .open(fx.m("big.bin"))
                .expect("open big.bin for writing");
            f.seek(SeekFrom::Start(10 << 20)).expect("seek");
            f.write_all(&vec![0xAB; 65536])
                .expect("write in the middle");
            f.seek(SeekFrom::Start(size as u64 - 3)).expect("seek");
            f.write_all(b"END").expect("write at the end");
        },
    );
}

#[test]
fn modes_0755_and_0600_are_kept() {
    let fx = Fixture::new();
    write_file(&fx.p("bin/tool"), b"#!/bin/sh\nexit 0\n", 0o755);
    write_file(&fx.p("secret"), b"token\n", 0o600);
    fs::create_dir(fx.p("private")).expect("mkdir");
    fs::set_permissions(fx.p("private"), fs::Permissions::from_mode(0o700)).expect("chmod");
    sh_scenario(
        &fx,
        "",
        "chmod 0644 bin/tool && sed -i s/token/TOKEN/ secret && chmod 0666 secret \
         && chmod 0755 private && chmod 0700 bin",
    );
    let mode = |p: &str| fs::metadata(fx.m(p)).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode("bin/tool"), 0o755);
    assert_eq!(mode("secret"), 0o600);
    assert_eq!(mode("private"), 0o700);
}

#[test]
fn symlink_changed_and_restored_as_a_symlink() {
    let fx = Fixture::new();
    write_file(&fx.p("one"), b"1\n", 0o644);
    write_file(&fx.p("two"), b"2\n", 0o644);
    std::os::unix::fs::symlink("one", fx.p("current")).expect("symlink");
    std::os::unix::fs::symlink("does/not/exist", fx.p("dangling")).expect("symlink");
    std::os::unix::fs::symlink(bytes_path(b"odd \xff target"), fx.p("odd")).expect("symlink");
    sh_scenario(
        &fx,
        "",
        "ln -sfn two current && rm dangling && echo now-a-file > dangling \
         && rm odd && mkdir odd && rm one && ln -s two one",
    );
    for name in ["current", "dangling", "odd", "one"] {
        let meta = fs::symlink_metadata(fx.m(name)).expect("lstat");
        let want_link = name != "one";
        assert_eq!(meta.file_type().is_symlink(), want_link, "{name}");
    }
    assert_eq!(
        fs::read_link(fx.m("current")).expect("readlink"),
        Path::new("one")
    );
}

#[test]
fn empty_directory_removed_and_restored() {
    let fx = Fixture::new();
    fs::create_dir_all(fx.p("empty")).expect("mkdir");
    fs::create_dir_all(fx.p("nested/empty/inside")).expect("mkdir");
    fs::set_permissions(fx.p("nested/empty"), fs::Permissions::from_mode(0o750)).expect("chmod");
    sh_scenario(&fx, "", "rmdir empty && rm -r nested");
    assert!(fx.m("empty").is_dir());
    assert!(fx.m("nested/empty/inside").is_dir());
}

#[test]
fn hard_links_written_through_one_name() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"shared content\n", 0o644);
    fs::create_dir(fx.p("sub")).expect("mkdir");
    fs::hard_link(fx.p("f"), fx.p("sub/g")).expect("link");
    write_file(&fx.p("x"), b"x\n", 0o644);
    sh_scenario(
        &fx,
        "",
        // In-place writes through one name (same inode), and a link made
        // through the mount and written through its new name.
        "printf 'changed via f\\n' > f && printf 'more\\n' >> sub/g && ln x y && printf 'via y\\n' > y",
    );
    for p in ["f", "sub/g"] {
        assert_eq!(fs::read(fx.m(p)).expect("read"), b"shared content\n", "{p}");
        assert_eq!(fs::read(fx.p(p)).expect("read"), b"shared content\n", "{p}");
    }
    assert_eq!(fs::read(fx.m("x")).expect("read"), b"x\n");
    assert!(!fx.m("y").exists());
}

#[test]
fn truncate() {
    let fx = Fixture::new();
    let mut rng = Rng::new(7);
    write_file(&fx.p("a"), &rng.bytes(10_000), 0o644);
    write_file(&fx.p("b"), b"short\n", 0o644);
    write_file(&fx.p("c"), b"will be emptied by O_TRUNC\n", 0o640);
    scenario(
        &fx,
        |_| {},
        |fx| {
            fx.sh("truncate -s 3 a && truncate -s 1M b && : > c");
            let f = fs::OpenOptions::new()
                .write(true)
                .open(fx.m("a"))
                .expect("open a");
            f.set_len(1).expect("ftruncate");
        },
    );
}

#[test]
fn o_append() {
    let fx = Fixture::new();
    write_file(&fx.p("log"), b"line 1\n", 0o644);
    scenario(
        &fx,
        |_| {},
        |fx| {
            fx.sh("echo 'line 2' >> log && echo 'first line' >> newlog");
            let mut f = fs::OpenOptions::new()
                .append(true)
                .open(fx.m("log"))
                .expect("open O_APPEND");
            f.write_all(b"line 3\n").expect("append");
            drop(f);
            assert_eq!(
                fs::read(fx.m("log")).expect("read"),
                b"line 1\nline 2\nline 3\n"
            );
        },
    );
}

#[test]
fn write_through_a_shared_writable_mmap() {
    let fx = Fixture::new();
    let len = 3 * 4096 + 100;
    write_file(&fx.p("mapped"), &vec![b'.'; len], 0o644);
    scenario(
        &fx,
        |_| {},
        |fx| {
            let map = Mapping::new(&fx.m("mapped"));
            map.store(0, b"M");
            map.store(5000, b"mmap!");
            map.store(len - 1, b"Z");
            map.sync();
            drop(map);
            let now = fs::read(fx.m("mapped")).expect("read back");
            assert_eq!(&now[5000..5005], b"mmap!");
        },
    );
    let back = fs::read(fx.m("mapped")).expect("read");
    assert!(
        back.iter().all(|&b| b == b'.'),
        "mmap writes were not rewound"
    );
}

#[test]
fn several_turns_rewound_in_random_order() {
    let fx = Fixture::new();
    populate(&fx);
    let (mut rng, seed) = Rng::from_env("OPFS_TEST_SEED", 0x0bad_5eed);
    fx.mount();
    let mut starts = vec![Manifest::new()]; // index 0 unused
    let mut n = 0;
    for t in 1..=5u64 {
        assert_eq!(fx.open_turn(), t);
        starts.push(fx.tree());
        for _ in 0..6 {
            n += 1;
            let op = random_shell_op(&mut rng, &listing(&fx.project, &[]), n);
            eprintln!("turn {t}: {op}");
            fx.sh(&op);
        }
        assert_eq!(fx.turn(&format!("after turn {t}")), t + 1);
    }
    starts.push(fx.tree()); // the start of turn 6 (the open one)
    let mut order: Vec<u64> = (1..=6).collect();
    rng.shuffle(&mut order);
    eprintln!("rewind order: {order:?} (seed {seed:#x})");
    for &t in &order {
        fx.rewind(t);
        fx.assert_tree(
            &format!("rewind to {t} (seed {seed:#x})"),
            &starts[t as usize],
        );
    }
}

#[test]
fn rewind_of_a_rewind_is_a_redo() {
    let fx = Fixture::new();
    populate(&fx);
    fx.mount();
    let m1 = fx.tree();
    assert_eq!(fx.turn("work"), 2);
    fx.sh("sed -i s/alpha/omega/ src/lib.rs && rm -rf src/util && echo new > new.txt");
    let m2 = fx.tree();

    let undo = fx.rewind(2);
    fx.assert_tree("undo", &m1);
    let undo_turn = rewind_turn(&undo);
    assert!(
        undo_turn > 2,
        "the rewind is recorded as a new turn: {undo:#}"
    );
    assert_eq!(
        fx.open_turn(),
        undo_turn + 1,
        "after a rewind (turn {undo_turn}) a new agent turn opens"
    );
    let points = fx.points(true);
    let p = points
        .iter()
        .find(|p| p["turn"].as_u64() == Some(undo_turn))
        .unwrap_or_else(|| panic!("rewind turn {undo_turn} is not listed: {points:#?}"));
    assert_eq!(p["kind"], "rewind", "{p:#}");

    let redo = fx.rewind(undo_turn);
    fx.assert_tree("redo", &m2);
    let redo_turn = rewind_turn(&redo);
    assert!(redo_turn > undo_turn);

    fx.rewind(redo_turn);
    fx.assert_tree("undo of the redo", &m1);
}

#[test]
fn rewind_when_nothing_changed_is_a_no_op() {
    let fx = Fixture::new();
    populate(&fx);
    fx.mount();
    let m = fx.tree();
    fx.sh("cat src/main.rs >/dev/null && ls -laR >/dev/null");
    assert_eq!(fx.turn("idle"), 2);
    for n in [2, 1] {
        let r = fx.rewind(n);
        assert_eq!(
            restored(&r),
            Vec::<String>::new(),
            "nothing to restore: {r:#}"
        );
        fx.assert_tree(&format!("no-op rewind to {n}"), &m);
    }
}

#[test]
fn reads_through_the_mount_right_after_a_rewind() {
    let fx = Fixture::new();
    write_file(&fx.p("f"), b"the original, longer content\n", 0o644);
    write_file(&fx.p("d/kept"), b"kept\n", 0o644);
    fx.mount();
    // Warm the kernel's attribute, entry and page caches.
    assert_eq!(fx.sh("cat f"), "the original, longer content\n");
    fx.sh("stat f d/kept >/dev/null && ls d >/dev/null");
    assert_eq!(fx.turn("edit"), 2);
    fx.sh("echo short > f && echo new > d/added && rm d/kept && chmod 0600 f");
    assert_eq!(fx.sh("cat f && ls d"), "short\nadded\n");
    fx.rewind(1);
    // Immediately, no sleep: content, size, mode and listings are restored.
    assert_eq!(
        fx.sh("cat f; stat -c '%s %a' f; ls d"),
        "the original, longer content\n29 644\nkept\n"
    );
    assert_eq!(
        fs::read(fx.m("f")).expect("read"),
        b"the original, longer content\n"
    );
    assert!(!fx.m("d/added").exists());
    assert_eq!(fs::read(fx.m("d/kept")).expect("read"), b"kept\n");
    let mode = fs::metadata(fx.m("f")).expect("stat").mode() & 0o7777;
    assert_eq!(mode, 0o644);
}

#[test]
fn git_dir_is_served_but_never_restored() {
    let fx = Fixture::new();
    populate(&fx);
    fx.sh_in(
        &fx.project,
        "git -c init.defaultBranch=main init -q && git add -A && git commit -qm base",
    );
    fx.mount();
    let m1 = fx.tree_without_git();
    assert_eq!(fx.turn("git work"), 2);
    fx.sh("echo x > .git/x && sed -i s/alpha/beta/ src/lib.rs \
         && git add -A && git commit -qm 'in the mount' && echo y > src/y.rs");
    let git_after = manifest(&fx.p(".git"));
    let r = fx.rewind(1);
    fx.assert_tree_without_git("rewind 1", &m1);
    assert_manifest_eq(
        ".git after the rewind",
        &git_after,
        &manifest(&fx.p(".git")),
    );
    assert_eq!(fs::read(fx.m(".git/x")).expect(".git/x survives"), b"x\n");
    assert_eq!(
        fx.sh("git log --format=%s"),
        "in the mount\nbase\n",
        "the commit made in turn 2 is still in .git"
    );
    for p in restored(&r) {
        assert!(
            p != ".git" && !p.starts_with(".git/"),
            "restored {p}: {r:#}"
        );
    }
    for point in fx.points(true) {
        for p in point["paths"].as_array().into_iter().flatten() {
            let p = p.as_str().unwrap_or_default();
            assert!(
                p != ".git" && !p.starts_with(".git/"),
                "captured {p}: {point:#}"
            );
        }
    }
}

#[test]
fn dry_run_prints_the_plan_and_changes_nothing() {
    let fx = Fixture::new();
    populate(&fx);
    fx.mount();
    let m1 = fx.tree();
    assert_eq!(fx.turn("work"), 2);
    fx.sh("sed -i s/alpha/x/ src/main.rs && rm README && mkdir out && echo o > out/o");
    let m2 = fx.tree();
    let before = fx.open_turn();
    let run = fx.opfs_c(&["rewind", "1", "--dry-run", "--json"]).ok();
    let dry = run.json();
    check_rewind_result(&dry, 1, true);
    fx.assert_tree("after a dry run", &m2);
    assert_eq!(fx.open_turn(), before, "a dry run records no turn");
    let real = fx.rewind(1);
    fx.assert_tree("after the real rewind", &m1);
    let mut a = restored(&dry);
    let mut b = restored(&real);
    a.sort();
    b.sort();
    assert_eq!(a, b, "the dry run's plan differs from what the rewind did");
    assert!(b.iter().any(|p| p == "src/main.rs") && b.iter().any(|p| p == "README"));
}

/// The conflicts of `v` (a rewind or merge `--json` object), by path.
fn conflict_paths(v: &Value) -> Vec<String> {
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
fn a_conflicted_rewind_changes_nothing_unless_told_how() {
    let fx = Fixture::new();
    write_file(&fx.p("agent.txt"), b"a0\n", 0o644);
    write_file(&fx.p("user.txt"), b"one\ntwo\nthree\n", 0o644);
    fx.mount();
    let m1 = fx.tree();
    assert_eq!(fx.turn("work"), 2);
    fx.sh("echo a1 > agent.txt && printf 'one\\nTWO\\nthree\\n' > user.txt");
    // The user edits the project directly, not through the mount (a new
    // size: the fingerprint differs whatever the clock).
    let edited = b"one\nTWO\nthree, edited by the user behind opfs\n";
    fs::write(fx.p("user.txt"), edited).expect("write");
    let m2 = fx.tree();
    let open = fx.open_turn();

    // The dry run shows the plan the rewind would follow: nothing, since
    // user.txt conflicts; agent.txt is what the rest would be.
    let run = fx.opfs_c(&["rewind", "1", "--dry-run", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    let dry = run.json();
    check_rewind_result(&dry, 1, true);
    assert_eq!(dry["stopped_by_conflicts"], true, "{dry:#}");
    assert_eq!(conflict_paths(&dry), ["user.txt"], "{dry:#}");
    let planned: Vec<&str> = dry["plan"]
        .as_array()
        .expect("plan")
        .iter()
        .filter_map(|p| p["path"].as_str())
        .collect();
    assert_eq!(planned, ["agent.txt"], "{dry:#}");
    let text = fx.opfs_c(&["rewind", "1", "--dry-run"]);
    assert!(
        text.stdout.contains("would change nothing") && text.stdout.contains("--partial"),
        "{text}"
    );

    // By default: nothing restored, no turn recorded, the conflict listed.
    let run = fx.opfs_c(&["rewind", "1", "--json"]);
    assert_eq!(run.code, Some(3), "a conflict stops the rewind: {run}");
    let v = run.json();
    check_rewind_result(&v, 1, false);
    assert_eq!(v["stopped_by_conflicts"], true, "{v:#}");
    assert_eq!(v["turn"], Value::Null, "{v:#}");
    assert_eq!(restored(&v), Vec::<String>::new(), "{v:#}");
    assert_eq!(conflict_paths(&v), ["user.txt"], "{v:#}");
    fx.assert_tree("a stopped rewind changes nothing", &m2);
    assert_eq!(fx.open_turn(), open, "a stopped rewind opens no turn");
    let text = fx.opfs_c(&["rewind", "1"]);
    assert_eq!(text.code, Some(3), "{text}");
    assert!(
        text.stderr
            .contains("not restored: user.txt: changed outside the mount"),
        "{text}"
    );

    // --markers: the text file gets both sides, the rest is restored.
    let run = fx.opfs_c(&["rewind", "1", "--markers", "--json"]);
    assert_eq!(run.code, Some(3), "markers are left to resolve: {run}");
    let v = run.json();
    assert_eq!(v["marked"], serde_json::json!(["user.txt"]), "{v:#}");
    assert_eq!(v["conflicts"], serde_json::json!([]), "{v:#}");
    assert_eq!(fs::read(fx.p("agent.txt")).expect("read"), b"a0\n");
    assert_eq!(
        String::from_utf8(fs::read(fx.p("user.txt")).expect("read")).expect("utf8"),
        "one\n<<<<<<< project now\nTWO\nthree, edited by the user behind opfs\n=======\n\
         two\nthree\n>>>>>>> turn 1\n"
    );
    // It is a turn like any rewind: rewinding to it gives the edit back.
    fx.rewind(rewind_turn(&v));
    fx.assert_tree("rewinding the marked rewind", &m2);

    // --partial: the rest restored, the conflict left as it is.
    let again = b"edited behind opfs once more\n";
    fs::write(fx.p("user.txt"), again).expect("write");
    let run = fx.opfs_c(&["rewind", "1", "--partial", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    let v = run.json();
    assert_eq!(v["stopped_by_conflicts"], false, "{v:#}");
    assert_eq!(restored(&v), ["agent.txt"], "{v:#}");
    assert_eq!(conflict_paths(&v), ["user.txt"], "{v:#}");
    assert_eq!(fs::read(fx.p("agent.txt")).expect("read"), b"a0\n");
    assert_eq!(fs::read(fx.p("user.txt")).expect("read"), again);

    // --force: the incoming side.
    let run = fx.opfs_c(&["rewind", "1", "--force", "--json"]);
    assert_eq!(
        run.code,
        Some(0),
        "--force restores conflicting paths: {run}"
    );
    fx.assert_tree("after rewind --force", &m1);
}

#[test]
fn rewind_list_shape() {
    let fx = Fixture::new();
    populate(&fx);
    fx.mount();
    fx.sh("echo one > one.txt");
    for i in 2..=12u64 {
        assert_eq!(fx.turn(&format!("label {i}")), i);
        fx.sh(&format!("echo {i} > file{i}.txt && echo {i} >> README"));
    }
    let all = fx.points(true);
    let numbers: Vec<u64> = all.iter().filter_map(|p| p["turn"].as_u64()).collect();
    assert_eq!(
        numbers,
        (1..=12).collect::<Vec<_>>(),
        "--all lists every turn: {all:#?}"
    );
    for p in &all {
        let t = p["turn"].as_u64().unwrap_or_default();
        assert_eq!(p["kind"], "agent", "{p:#}");
        let started = p["started_at"].as_str().unwrap_or_default();
        assert!(is_rfc3339(started), "started_at is not RFC 3339: {p:#}");
        let paths: Vec<&str> = p["paths"]
            .as_array()
            .unwrap_or_else(|| panic!("paths is not an array: {p:#}"))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if t == 1 {
            assert!(paths.contains(&"one.txt"), "{p:#}");
        } else {
            assert_eq!(p["label"], format!("label {t}"), "{p:#}");
            let f = format!("file{t}.txt");
            assert!(
                paths.contains(&f.as_str()) && paths.contains(&"README"),
                "{p:#}"
            );
        }
    }
    let newest = fx.points(false);
    let numbers: Vec<u64> = newest.iter().filter_map(|p| p["turn"].as_u64()).collect();
    assert_eq!(
        numbers,
        (3..=12).collect::<Vec<_>>(),
        "the 10 newest by default"
    );
    let human = fx.opfs_c(&["rewind"]).ok();
    assert!(human.stdout.contains("label 12"), "{human}");
}

fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && (b[10] == b'T' || b[10] == b't')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && (s.ends_with('Z') || s.ends_with('z') || {
            let tz = &b[b.len() - 6..];
            (tz[0] == b'+' || tz[0] == b'-') && tz[3] == b':'
        })
}

#[test]
fn history_survives_a_remount() {
    let fx = Fixture::new();
    populate(&fx);
    fx.mount();
    fx.sh("echo t1 > t1.txt");
    assert_eq!(fx.turn("two"), 2);
    let m2 = fx.tree();
    fx.sh("rm -rf src && echo t2 > t2.txt");
    assert_eq!(fx.turn("three"), 3);
    fx.sh("chmod 0600 run.sh");
    fx.umount();
    fx.mount();
    let open = fx.open_turn();
    assert!(
        open >= 3,
        "a later mount continues the numbering (open turn {open})"
    );
    fx.rewind(2);
    fx.assert_tree("rewind to 2 after a remount", &m2);
}

fn head(path: &Path, n: usize) -> Vec<u8> {
    let mut bytes = fs::read(path).expect("read");
    bytes.truncate(n);
    bytes
}

/// A store made through a shared mapping before `opfs
/// turn` belongs to the turn it closes, even when its dirty page reaches the
/// daemon only after the boundary (the mapping stays live across it).
fn mmap_store_kept_mapped_across_a_turn_lands_in_the_earlier_turn(size: usize) {
    let fx = Fixture::new();
    let mut content = b"original".to_vec();
    content.resize(size, 0);
    write_file(&fx.p("f.bin"), &content, 0o644);
    fx.mount();
    assert_eq!(fx.turn("N"), 2);
    let map = Mapping::new(&fx.m("f.bin"));
    map.store(0, b"store-A!");
    // Not read back through the mount: closing any fd of the file would
    // write its dirty pages back (FLUSH) and hide the bug.
    assert_eq!(fx.turn("N+1"), 3, "the mapping is still live");
    map.store(8, b"store-B!");
    drop(map);
    assert_eq!(fx.turn("after"), 4);
    assert_eq!(head(&fx.p("f.bin"), 16), b"store-A!store-B!");

    fx.rewind(3);
    assert_eq!(
        head(&fx.p("f.bin"), 16),
        b"store-A!\0\0\0\0\0\0\0\0",
        "turn 3 began after store A and before store B"
    );
    fx.rewind(2);
    assert_eq!(head(&fx.p("f.bin"), 16), b"original\0\0\0\0\0\0\0\0");
    assert!(fs::read(fx.p("f.bin")).expect("read") == content);
}

#[test]
fn mmap_store_kept_mapped_across_a_turn_lands_in_the_earlier_turn_64k() {
    mmap_store_kept_mapped_across_a_turn_lands_in_the_earlier_turn(64 * 1024);
}

#[test]
fn mmap_store_kept_mapped_across_a_turn_lands_in_the_earlier_turn_4m_ranged() {
    mmap_store_kept_mapped_across_a_turn_lands_in_the_earlier_turn(4 << 20);
}

/// The rewind side of A dirty page stored before `opfs
/// rewind` must not be written back over the bytes the rewind restored.
fn mmap_store_kept_mapped_across_a_rewind_does_not_clobber_it(size: usize) {
    let fx = Fixture::new();
    let mut content = b"original".to_vec();
    content.resize(size, 0);
    write_file(&fx.p("f.bin"), &content, 0o644);
    fx.mount();
    assert_eq!(fx.turn("N"), 2);
    let map = Mapping::new(&fx.m("f.bin"));
    map.store(0, b"store-A!");
    fx.rewind(2);
    assert_eq!(
        head(&fx.p("f.bin"), 8),
        b"original",
        "right after the rewind"
    );
    drop(map);
    assert_eq!(
        head(&fx.p("f.bin"), 8),
        b"original",
        "the dirty page was written back over the rewind"
    );
    assert!(fs::read(fx.p("f.bin")).expect("read") == content);
    assert_eq!(head(&fx.m("f.bin"), 8), b"original", "through the mount");
}

#[test]
fn mmap_store_kept_mapped_across_a_rewind_does_not_clobber_it_64k() {
    mmap_store_kept_mapped_across_a_rewind_does_not_clobber_it(64 * 1024);
}

#[test]
fn mmap_store_kept_mapped_across_a_rewind_does_not_clobber_it_4m_ranged() {
    mmap_store_kept_mapped_across_a_rewind_does_not_clobber_it(4 << 20);
}

/// The names of each file, as sets of paths sharing an inode (only sets of
/// two or more), sorted.
fn link_sets(root: &Path, names: &[&str]) -> Vec<Vec<String>> {
    let mut by_ino: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
    for n in names {
        if let Ok(m) = fs::symlink_metadata(root.join(n)) {
            by_ino.entry(m.ino()).or_default().push(n.to_string());
        }
    }
    let mut sets: Vec<Vec<String>> = by_ino.into_values().filter(|s| s.len() > 1).collect();
    sets.sort();
    sets
}

/// Names that were hard links of one file when a turn began are
/// one file again after a rewind to it, whatever the turn did to them: `b`
/// unlinked and made again as a separate file, `c` moved away (its file
/// written and removed under the new name) and made a link of `x`, `d` (a
/// name the mount never looked up) untouched, and `x`/`y`, separate files,
/// linked during the turn. The redo gives the
/// turn's end back, links included, and the file's bits and bytes are one.
#[test]
fn hard_link_sets_come_back_after_a_rewind() {
    let fx = Fixture::new();
    write_file(&fx.p("a"), b"shared\n", 0o640);
    for n in ["b", "c", "d"] {
        fs::hard_link(fx.p("a"), fx.p(n)).expect("link");
    }
    write_file(&fx.p("x"), b"x\n", 0o644);
    write_file(&fx.p("y"), b"y\n", 0o644);
    let names = ["a", "b", "c", "d", "x", "y", "e"];
    fx.mount();
    let start = fx.tree();
    assert_eq!(fx.turn("break the links"), 2);
    fx.sh("rm b && printf 'shared\\n' > b && chmod 640 b \
         && mv c e && printf 'more\\n' >> e && ln x c && rm e \
         && rm y && ln x y && chmod 600 a");
    let end = fx.tree();
    let end_sets = link_sets(&fx.project, &names);
    let set = |s: &[&str]| s.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(end_sets, vec![set(&["a", "d"]), set(&["c", "x", "y"])]);

    let undo = fx.rewind(2);
    assert!(
        undo["conflicts"].as_array().is_none_or(|c| c.is_empty()),
        "{undo:#}"
    );
    fx.assert_tree("undo", &start);
    let all = vec!["a", "b", "c", "d"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    assert_eq!(
        link_sets(&fx.project, &names),
        vec![all.clone()],
        "{undo:#}"
    );
    let st = fs::metadata(fx.p("a")).expect("stat");
    assert_eq!(st.nlink(), 4, "{undo:#}");
    assert_eq!(st.mode() & 0o7777, 0o640);
    // Through the mount too: one inode, four names.
    assert_eq!(fs::metadata(fx.m("d")).expect("stat").nlink(), 4);
    assert_eq!(
        fs::metadata(fx.m("b")).expect("stat").ino(),
        fs::metadata(fx.m("c")).expect("stat").ino()
    );

    let redo = fx.rewind(rewind_turn(&undo));
    fx.assert_tree("redo", &end);
    assert_eq!(link_sets(&fx.project, &names), end_sets, "{redo:#}");

    // Once more back: a write through one name shows under every name.
    fx.rewind(rewind_turn(&redo));
    fx.assert_tree("undo of the redo", &start);
    assert_eq!(link_sets(&fx.project, &names), vec![all]);
    fs::write(fx.m("c"), b"through c\n").expect("write via mount");
    for n in ["a", "b", "d"] {
        assert_eq!(fs::read(fx.p(n)).expect("read"), b"through c\n", "{n}");
    }
}

/// `rewind N --dry-run` prints the same plan whether the daemon makes it
/// or the command plans it itself (unmounted), each path with what the
/// target is (size, mode, hash; directory; symlink target). (Before, the
/// daemon's plan crossed the socket without the target's details.)
#[test]
fn a_rewind_dry_run_prints_the_same_plan_mounted_or_not() {
    let f = Fixture::new();
    fs::write(f.p("edit"), "e0\n").expect("write");
    fs::create_dir(f.p("dir")).expect("mkdir");
    std::os::unix::fs::symlink("edit", f.p("link")).expect("symlink");
    f.mount();
    f.sh("echo e1 >> edit; rm -r dir; rm link; ln -s elsewhere link; echo n > new");
    f.turn("changes");
    let mounted = f.opfs_c(&["rewind", "1", "--dry-run"]).ok().stdout;
    f.umount();
    let unmounted = f.opfs_p(&["rewind", "1", "--dry-run"]).ok().stdout;
    assert_eq!(mounted, unmounted, "the plan depends on who made it");
    let hash = blake3::hash(b"e0\n").to_hex().to_string();
    for line in [
        format!("rewrite edit (file) -> file 3 bytes 644 {}", &hash[..12]),
        "create dir (absent) -> dir 755".to_string(),
        "remove+create link (symlink) -> symlink edit".to_string(),
        "remove new (file) -> absent".to_string(),
    ] {
        assert!(mounted.contains(&line), "no `{line}` in:\n{mounted}");
    }
}

/// `opfs restore ARGS...` run in `dir` (inside the mountpoint), whatever
/// the exit code.
fn restore_in(fx: &Fixture, dir: &Path, args: &[&str]) -> Run {
    let mut all = vec!["restore"];
    all.extend(args);
    let mut cmd = fx.opfs_command(&all);
    cmd.current_dir(dir);
    run_command(cmd, fx.root(), std::time::Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("running opfs restore: {e}"))
}

#[test]
fn restore_brings_back_only_the_paths_named_as_a_turn_of_its_own() {
    use std::os::unix::fs::symlink;
    let fx = Fixture::new();
    write_file(&fx.p("src/a.txt"), b"a0\n", 0o644);
    write_file(&fx.p("src/b.txt"), b"b0\n", 0o644);
    symlink("a.txt", fx.p("src/link")).expect("symlink");
    write_file(&fx.p("d/x"), b"x0\n", 0o644);
    write_file(&fx.p("keep.txt"), b"k0\n", 0o644);
    fx.mount();
    let m1 = fx.tree();
    assert_eq!(fx.turn("work"), 2);
    fx.sh(
        "echo a1 > src/a.txt && chmod 600 src/b.txt && rm src/link && ln -s b.txt src/link \
         && echo new > src/new.txt && rm -r d && mkdir new && echo f > new/f && echo k1 > keep.txt",
    );

    // A directory, from inside the mountpoint, relative to where one stands.
    let run = restore_in(&fx, &fx.mnt, &["--from", "2", "src", "--json"]);
    assert_eq!(run.code, Some(0), "{run}");
    let v = run.json();
    let turn = rewind_turn(&v);
    let mut got = restored(&v);
    got.sort();
    assert_eq!(
        got,
        ["src/a.txt", "src/b.txt", "src/link", "src/new.txt"],
        "{v:#}"
    );
    assert_eq!(fs::read(fx.p("src/a.txt")).expect("read"), b"a0\n");
    let mode = fs::metadata(fx.p("src/b.txt"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o644, "the mode comes back");
    assert_eq!(
        fs::read_link(fx.p("src/link")).expect("readlink"),
        Path::new("a.txt")
    );
    assert!(
        !fx.p("src/new.txt").exists(),
        "a file made since is removed"
    );
    // Nothing else moved.
    assert_eq!(fs::read(fx.p("keep.txt")).expect("read"), b"k1\n");
    assert!(!fx.p("d").exists() && fx.p("new/f").exists());
    let points = fx.points(true);
    let row = points
        .iter()
        .find(|p| p["turn"].as_u64() == Some(turn))
        .expect("the restore's turn is listed");
    assert_eq!(row["kind"], "rewind", "{row:#}");
    assert_eq!(row["label"], "restore src from turn 2", "{row:#}");

    // Removals and a removed directory, named from a subdirectory.
    let run = restore_in(
        &fx,
        &fx.m("src"),
        &["--from", "2", "../d", "../new", "--json"],
    );
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(fs::read(fx.p("d/x")).expect("read"), b"x0\n");
    assert!(!fx.p("new").exists());

    // It is a turn: rewinding to its start undoes it.
    fx.rewind(turn);
    assert_eq!(fs::read(fx.p("src/a.txt")).expect("read"), b"a1\n");
    assert!(fx.p("src/new.txt").exists());

    // Without --from: the open turn's changes to the path are undone.
    fs::write(fx.m("keep.txt"), b"k2\n").expect("write");
    let run = restore_in(&fx, &fx.mnt, &["keep.txt"]);
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(fs::read(fx.p("keep.txt")).expect("read"), b"k1\n");
    let run = restore_in(&fx, &fx.mnt, &["keep.txt"]);
    assert!(run.stdout.contains("nothing to restore"), "{run}");

    // The rewind's conflict rules: a path changed behind the mount stops it.
    fs::write(fx.p("src/a.txt"), b"edited behind the mount\n").expect("write");
    let before = fx.tree();
    let run = restore_in(&fx, &fx.mnt, &["--from", "2", "src", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    assert_eq!(run.json()["stopped_by_conflicts"], true, "{run}");
    fx.assert_tree("a conflicted restore changes nothing", &before);
    let run = restore_in(&fx, &fx.mnt, &["--from", "1", ".", "--force"]);
    assert_eq!(run.code, Some(0), "{run}");
    fx.assert_tree("restoring . from turn 1 is a whole rewind", &m1);
}
