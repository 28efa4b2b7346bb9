//! State that grows with what changed, on a real mount:
//! a large file is exported as a pointer file (its bytes stay in opfs), so
//! a 4 KiB write into it grows the whole state dir by about what the turn
//! wrote, not by a copy of the file; and the export is packed.

// A failed unwrap is a failed test, with the error in the message.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use common::git_in_ok as git_ok;

/// Apparent bytes of every file under `dir` (what the state dir holds).
fn bytes_under(dir: &Path) -> u64 {
    let mut n = 0;
    for e in fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        if m.is_dir() {
            n += bytes_under(&e.path());
        } else {
            n += m.len();
        }
    }
    n
}

/// Deterministic incompressible bytes.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_4k_write_into_a_large_file_grows_the_state_dir_by_about_4k() {
    let fx = common::Fixture::new();
    let size = 12 << 20;
    let mut big = noise(size, 7);
    fs::write(fx.p("big.bin"), &big).unwrap();
    for i in 0..200 {
        fs::write(fx.p(format!("f{i:03}.txt")), format!("file {i}\n")).unwrap();
    }
    fx.mount_with(&["--no-export"]);
    fx.turn("before");
    let git_dir = fx.root().join("export.git");
    let git = git_dir.to_str().unwrap().to_string();
    fx.opfs_c(&["export", "--git-dir", &git]).ok();
    // The baseline holds a pointer, not 12 MiB, and is packed.
    let shown = git_ok(&git_dir, &["show", "refs/opfs/baseline:big.bin"]);
    let want = format!(
        "opfs-pointer v1\nblake3 {}\nsize {size}\n",
        blake3::hash(&big).to_hex()
    );
    assert_eq!(String::from_utf8_lossy(&shown), want);
    let counts = String::from_utf8(git_ok(&git_dir, &["count-objects", "-v"])).unwrap();
    assert!(
        counts.starts_with("count: 0\n"),
        "baseline not packed: {counts}"
    );
    assert!(
        bytes_under(&git_dir) < 1 << 20,
        "the export holds the large file's bytes: {} bytes",
        bytes_under(&git_dir)
    );

    // One 4 KiB write into the large file, then the turn and the export.
    let state = fx.state_dir();
    let before = bytes_under(&state) + bytes_under(&git_dir);
    let patch = noise(4096, 99);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(fx.m("big.bin"))
        .unwrap();
    f.seek(SeekFrom::Start(5 << 20)).unwrap();
    f.write_all(&patch).unwrap();
    drop(f);
    big[5 << 20..(5 << 20) + 4096].copy_from_slice(&patch);
    let t = fx.turn("4k write") - 1;
    fx.opfs_c(&["export", "--git-dir", &git]).ok();
    let grown = (bytes_under(&state) + bytes_under(&git_dir)).saturating_sub(before);
    // 2x what the turn wrote plus a small constant (index pages, the
    // pointer, two trees and a commit).
    assert!(
        grown <= 2 * 4096 + (256 << 10),
        "a 4 KiB write grew the state dir by {grown} bytes"
    );
    let shown = git_ok(&git_dir, &["show", &format!("refs/opfs/turns/{t}:big.bin")]);
    assert!(
        String::from_utf8_lossy(&shown).contains(&blake3::hash(&big).to_hex().to_string()),
        "the pointer names the new content"
    );
    // The bytes of each version are opfs's to give back.
    let run = fx.opfs_c(&["show", &format!("{t}:big.bin")]);
    assert_eq!(run.code, Some(0), "{run}");
    fx.rewind(t);
    assert_eq!(
        blake3::hash(&fs::read(fx.p("big.bin")).unwrap()),
        blake3::hash(&noise(size, 7))
    );
}
