//! `FUSE_HANDLE_KILLPRIV_V2` (workloads 7a/7b): without OPEN the
//! kernel stops asking for `security.capability` before every write and
//! leaves it to the daemon to clear set-user-ID and set-group-ID bits when
//! a caller without `CAP_FSETID` writes, truncates, allocates or copies
//! into a file, or `chown`s it to -1, -1. What the mount shows after each
//! such change must be what a plain directory shows after the same change
//! by the same user, at once (the kernel's cached mode too), and a rewind
//! must give the bits back (`fs/README.md`, "Killing suid/sgid").

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::*;

/// The unprivileged users the changes are made as: the file's owner (in
/// its group), and a user in neither.
const OWNER: u32 = 65534;
const OTHER: u32 = 1000;

/// Each change, as a shell command on the file `$1` (`$1.src` is a file
/// the caller may read, for `copy_file_range`). `python3` is the system's
/// (`PY`): a per-user shim (pyenv) would not run as another user.
const CHANGES: &[(&str, &str)] = &[
    ("write", "printf x >> \"$1\""),
    ("truncate", "truncate -s 2 \"$1\""),
    ("O_TRUNC", "printf y > \"$1\""),
    ("fallocate", "fallocate -l 8192 \"$1\""),
    (
        "copy_file_range",
        "$PY -c 'import os,sys; a=os.open(sys.argv[1]+\".src\",0); \
         b=os.open(sys.argv[1],os.O_WRONLY); os.copy_file_range(a,b,3,0,0)' \"$1\"",
    ),
    (
        "chown -1 -1",
        "$PY -c 'import os,sys; os.chown(sys.argv[1],-1,-1)' \"$1\"",
    ),
];

/// Modes with set-user-ID, set-group-ID with and without group execute;
/// writable by everyone so that both users may make every change.
const MODES: &[u32] = &[0o6777, 0o4777, 0o2767, 0o2777, 0o0777];

fn have(tool: &str) -> bool {
    which(tool).is_some()
}

/// Makes `file` (and its `.src`) afresh with `mode`, owned by `OWNER`,
/// runs `change` as `uid` (root when 0), and returns whether it succeeded
/// and the mode the caller then sees (`stat` in the same directory:
/// through the mount, the kernel's cached attributes).
fn change_as(file: &Path, mode: u32, uid: u32, change: &str) -> (bool, u32) {
    let _ = fs::remove_file(file);
    fs::write(file, b"hello\n").expect("write the file");
    let src = format!("{}.src", file.display());
    fs::write(&src, b"abc").expect("write the source");
    fs::set_permissions(&src, fs::Permissions::from_mode(0o644)).expect("chmod source");
    std::os::unix::fs::chown(file, Some(OWNER), Some(OWNER)).expect("chown");
    fs::set_permissions(file, fs::Permissions::from_mode(mode)).expect("chmod");
    let mut cmd = if uid == 0 {
        Command::new("sh")
    } else {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            &uid.to_string(),
            "--regid",
            &uid.to_string(),
            "--clear-groups",
            "sh",
        ]);
        c
    };
    let out = cmd
        .env("PY", "/usr/bin/python3")
        .args(["-c", change, "sh"])
        .arg(file)
        .output()
        .expect("run the change");
    (
        out.status.success(),
        fs::metadata(file).expect("stat").mode() & 0o7777,
    )
}

/// Every change by every user on every mode leaves the mode a plain
/// directory leaves, as seen through the mount right after the change
/// (found: the kernel went on showing the bits the daemon had cleared
/// during a WRITE, whose reply carries no attributes) and in the project;
/// with the daemon's clearing undone, the write, `fallocate`,
/// `copy_file_range` and `chown -1 -1` rows kept their bits.
#[test]
fn suid_and_sgid_are_cleared_as_on_a_plain_directory() {
    if !have("setpriv") || !have("fallocate") || !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipped: setpriv, fallocate or /usr/bin/python3 missing");
        return;
    }
    let fx = Fixture::new();
    // Other users must reach the files: the fixture's root is 0700.
    fs::set_permissions(fx.root(), fs::Permissions::from_mode(0o755)).expect("chmod root");
    fs::set_permissions(&fx.project, fs::Permissions::from_mode(0o777)).expect("chmod project");
    let plain = fx.root().join("plain");
    fs::create_dir(&plain).expect("mkdir plain");
    fs::set_permissions(&plain, fs::Permissions::from_mode(0o777)).expect("chmod plain");
    fx.mount_with(&["--no-export"]);

    let mut differ = Vec::new();
    for &(name, change) in CHANGES {
        for &mode in MODES {
            for uid in [OWNER, OTHER, 0] {
                let want = change_as(&plain.join("f"), mode, uid, change);
                let seen = change_as(&fx.m("f"), mode, uid, change);
                let backing = fs::metadata(fx.p("f")).expect("stat project").mode() & 0o7777;
                if seen != want || backing != want.1 {
                    differ.push(format!(
                        "{name} as {uid} on {mode:o}: plain {want:?}, mount {seen:?}, \
                         project {backing:o}"
                    ));
                }
            }
        }
    }
    assert!(differ.is_empty(), "modes differ:\n{}", differ.join("\n"));
}

/// A bit the daemon cleared for a write is captured with the turn: a
/// rewind gives back the set-user-ID file's mode and bytes.
#[test]
fn a_cleared_suid_bit_comes_back_with_a_rewind() {
    if !have("setpriv") {
        eprintln!("skipped: setpriv missing");
        return;
    }
    let fx = Fixture::new();
    fs::set_permissions(fx.root(), fs::Permissions::from_mode(0o755)).expect("chmod root");
    let file = fx.p("tool");
    fs::write(&file, b"#!/bin/sh\necho tool\n").expect("write");
    std::os::unix::fs::chown(&file, Some(OWNER), Some(OWNER)).expect("chown");
    fs::set_permissions(&file, fs::Permissions::from_mode(0o6775)).expect("chmod");
    let before = fx.tree();
    fx.mount_with(&["--no-export"]);
    let turn = fx.turn("before the write");
    let out = Command::new("setpriv")
        .args([
            "--reuid",
            &OWNER.to_string(),
            "--regid",
            &OWNER.to_string(),
            "--clear-groups",
            "sh",
            "-c",
            "printf 'echo more\\n' >> \"$1\"",
            "sh",
        ])
        .arg(fx.m("tool"))
        .output()
        .expect("run the write");
    assert!(
        out.status.success(),
        "write failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        fs::metadata(fx.m("tool")).expect("stat").mode() & 0o7777,
        0o775,
        "the write by its owner cleared neither bit"
    );
    let v = fx.rewind(turn);
    check_rewind_result(&v, turn, false);
    assert_eq!(
        fs::metadata(fx.m("tool")).expect("stat").mode() & 0o7777,
        0o6775,
        "the rewind did not give the bits back"
    );
    fx.assert_tree("after the rewind", &before);
}
