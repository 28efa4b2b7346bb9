//! Permission checks through the mount are the plain directory's.
//!
//! The mount asks the kernel to check permissions itself
//! (`default_permissions`), so every decision is made with the caller's
//! credentials and the attributes the daemon reports, even for names and
//! attributes the kernel has cached for long TTLs and for files opened
//! without an OPEN request. `docs/bench/2026-12-02-rm-rf-and-storm.md` ("The parent's
//! GETATTR") says why the mount keeps it although it costs a
//! GETATTR of the parent directory after every entry change. These tests
//! pin what the option guarantees, against a model: the same operations,
//! run by the same unprivileged callers, on a plain copy of the tree and
//! through the mount must end the same way (exit code and message), and
//! leave the same owners and modes behind.
//!
//! - `unprivileged_callers_get_the_plain_directorys_answers`: a read-only
//!   directory (unlink, create, rename, mkdir, symlink, write, chmod,
//!   `access(2)`), a sticky directory (removing or renaming another
//!   user's file, renaming over it), a group-writable directory with and
//!   without the supplementary group, a set-group-ID directory, and a
//!   private directory whose entries root has just looked up through the
//!   mount (cached dentries must not let another user through).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use common::*;

/// Unprivileged callers (no passwd entries needed).
const ALICE: u32 = 4242;
const BOB: u32 = 4243;
/// A group ALICE is given as a supplementary group in some runs.
const TEAM: u32 = 4300;

/// Who runs an operation.
#[derive(Debug, Clone)]
struct Caller {
    name: &'static str,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

/// Builds the same tree under `root` (as root): owners, modes, contents.
fn build(root: &Path) {
    let sh = |script: &str| {
        let out = Command::new("sh")
            .arg("-euc")
            .arg(script)
            .arg("sh")
            .arg(root)
            .output()
            .expect("run sh");
        assert!(out.status.success(), "building the tree failed: {out:?}");
    };
    sh(&format!(
        r#"cd "$1"
        chmod 755 .
        mkdir ro sticky team sgid private open
        echo ro > ro/f; chmod 755 ro; chmod 644 ro/f
        chmod 1777 sticky
        echo b > sticky/bobs; chown {BOB}:{BOB} sticky/bobs; chmod 644 sticky/bobs
        echo a > sticky/alices; chown {ALICE}:{ALICE} sticky/alices; chmod 644 sticky/alices
        chown 0:{TEAM} team; chmod 770 team
        echo t > team/f; chown 0:{TEAM} team/f; chmod 660 team/f
        chown 0:{TEAM} sgid; chmod 2777 sgid
        echo p > private/f; chmod 644 private/f; chmod 700 private
        chmod 777 open
        echo o > open/f; chown {BOB}:{BOB} open/f; chmod 600 open/f"#
    ));
}

/// Runs `script` as `caller` with `root` as `$1`; returns the exit code
/// and stderr (messages name paths relative to `root`, so they compare).
fn run_as(caller: &Caller, root: &Path, script: &str) -> (Option<i32>, String) {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!("cd \"$1\" && {{ {script}; }}"))
        .arg("sh")
        .arg(root)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C")
        .current_dir("/");
    let (uid, gid, groups) = (caller.uid, caller.gid, caller.groups.clone());
    // SAFETY: only system calls run between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run the caller's shell");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Owner, group, mode and type of every entry under `root`, sorted.
fn owners_and_modes(root: &Path) -> String {
    let out = Command::new("find")
        .arg(".")
        .arg("-printf")
        .arg("%p %U %G %m %y\n")
        .current_dir(root)
        .output()
        .expect("find");
    assert!(out.status.success(), "find failed: {out:?}");
    let mut lines: Vec<&str> = std::str::from_utf8(&out.stdout)
        .expect("utf-8 listing")
        .lines()
        .collect();
    lines.sort_unstable();
    lines.join("\n")
}

#[test]
fn unprivileged_callers_get_the_plain_directorys_answers() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test switches users and needs root");
    let fx = Fixture::new();
    // Other users must reach the fixture's dirs at all.
    std::fs::set_permissions(fx.root(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod fixture root");
    let model = fx.root().join("model");
    std::fs::create_dir(&model).expect("create model dir");
    build(&model);
    build(&fx.project);
    fx.mount();
    fx.turn("permissions");

    // Root walks the whole tree through the mount first: every entry and
    // attribute is then in the kernel's caches, which must not let another
    // user past a check the plain directory makes.
    let walked = run_as(
        &Caller {
            name: "root",
            uid: 0,
            gid: 0,
            groups: vec![],
        },
        &fx.mnt,
        "find . -exec stat {} + >/dev/null && cat private/f team/f open/f >/dev/null",
    );
    assert_eq!(walked.0, Some(0), "root's walk failed: {}", walked.1);

    let alice = Caller {
        name: "alice",
        uid: ALICE,
        gid: ALICE,
        groups: vec![],
    };
    let alice_in_team = Caller {
        name: "alice in team",
        uid: ALICE,
        gid: ALICE,
        groups: vec![TEAM],
    };
    let bob = Caller {
        name: "bob",
        uid: BOB,
        gid: BOB,
        groups: vec![],
    };
    // In order: later steps see what earlier ones left.
    let steps: Vec<(&Caller, &str)> = vec![
        // A directory the caller may not write.
        (&alice, "rm -f ro/f"),
        (&alice, "touch ro/new"),
        (&alice, "mv ro/f ro/g"),
        (&alice, "mkdir ro/sub"),
        (&alice, "ln -s f ro/link"),
        (&alice, "echo x >> ro/f"),
        (&alice, "chmod 666 ro/f"),
        (&alice, "test -w ro/f"),
        (&alice, "test -r ro/f && cat ro/f >/dev/null"),
        // A sticky directory: only the owner removes or renames a file.
        (&alice, "rm -f sticky/bobs"),
        (&alice, "mv sticky/bobs sticky/taken"),
        (&alice, "mv sticky/alices sticky/bobs"),
        (&alice, "touch sticky/new && mv sticky/new sticky/renamed"),
        (&bob, "rm -f sticky/alices"),
        (&alice, "rm -f sticky/alices sticky/renamed"),
        // Group permissions need the supplementary group.
        (&alice, "ls team"),
        (&alice, "cat team/f"),
        (&alice, "touch team/a"),
        (&alice_in_team, "ls team && cat team/f"),
        (&alice_in_team, "touch team/a && echo x >> team/f"),
        (&alice_in_team, "mv team/a team/b && rm team/b"),
        (&alice_in_team, "test -w team/f"),
        (&alice, "test -w team/f"),
        // A set-group-ID directory hands its group (and the bit) down.
        (&alice, "mkdir sgid/d && touch sgid/f sgid/d/g"),
        (&alice_in_team, "touch sgid/t"),
        // Cached entries of a directory the caller may not search.
        (&alice, "stat private/f"),
        (&alice, "cat private/f"),
        (&alice, "rm -f private/f"),
        (&alice, "ls private"),
        (&alice, "test -e private/f"),
        // Another user's file in a directory everyone may write.
        (&alice, "cat open/f"),
        (&alice, "echo x >> open/f"),
        (&alice, "chmod 644 open/f"),
        (&alice, "touch -d 2001-01-01 open/f"),
        (&alice, "touch open/f"),
        (&alice, "rm open/f && touch open/f"),
        (&bob, "cat open/f"),
    ];
    let mut differences = Vec::new();
    let mut refused = 0;
    for (caller, script) in &steps {
        let want = run_as(caller, &model, script);
        let got = run_as(caller, &fx.mnt, script);
        if want.0 != Some(0) {
            refused += 1;
        }
        if want != got {
            differences.push(format!(
                "{} `{script}`: plain directory {want:?}, mount {got:?}",
                caller.name
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "permission checks through the mount differ from the plain directory's:\n{}",
        differences.join("\n")
    );
    // Most steps must have been refused, or the test proves nothing.
    assert!(
        refused >= 20,
        "only {refused} steps were refused on the plain directory"
    );
    assert_eq!(
        owners_and_modes(&fx.project),
        owners_and_modes(&model),
        "owners and modes left through the mount differ from the plain directory's"
    );
}
