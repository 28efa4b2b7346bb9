//! Range pre-images through a real mount (`docs/ranges.md`): a large file
//! written in place stores the bytes each write overwrites, not the file,
//! and every reader (rewind, redo, show, diff, export) gets the exact
//! turn-start bytes back. Needs `/dev/fuse` and `fusermount3`.

mod common;

use std::time::Duration;

use common::*;

/// Range capture from 1 MiB, whatever the environment says.
const RANGE_MIN: &str = "1048576";

fn fixture() -> Fixture {
    let f = Fixture::new();
    f.set_env("OPFS_RANGE_MIN", RANGE_MIN);
    f
}

/// Writes `n` pseudo-random bytes (seeded) to `path` in the project.
fn big_file(f: &Fixture, rel: &str, n: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    write_file(&f.p(rel), &rng.bytes(n), 0o644);
}

/// Bytes of blob files and range packs in the state dir.
fn store_bytes(f: &Fixture) -> u64 {
    fn walk(p: &std::path::Path) -> u64 {
        let Ok(rd) = std::fs::read_dir(p) else {
            return 0;
        };
        rd.flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => walk(&e.path()),
                _ => e.metadata().map(|m| m.len()).unwrap_or(0),
            })
            .sum()
    }
    walk(&f.state_dir().join("blobs"))
}

fn log_entry(f: &Fixture, turn: u64) -> serde_json::Value {
    let v = f.opfs_c(&["log", "--json"]).ok().json();
    v.as_array()
        .expect("log --json is an array")
        .iter()
        .find(|e| e["turn"].as_u64() == Some(turn))
        .unwrap_or_else(|| panic!("turn {turn} not in the log: {v:#}"))
        .clone()
}

/// Asserts that `big` in the export's commit of turn `turn` (the tree at the
/// end of that turn) has the BLAKE3 hex hash `want`: its bytes, or from
/// 8 MiB on the pointer file naming them (docs/export.md "Large files").
fn assert_exported_big(git_dir: &std::path::Path, turn: u64, want: &str) {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["show", &format!("refs/opfs/turns/{turn}:big")])
        .output()
        .expect("git show");
    assert!(out.status.success(), "git show turn {turn}: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let got = match text.strip_prefix("opfs-pointer v1\nblake3 ") {
        Some(rest) => rest.lines().next().unwrap_or("").to_string(),
        None => blake3::hash(&out.stdout).to_hex().to_string(),
    };
    assert_eq!(got, want, "exported big at the end of turn {turn}");
}

/// Closes the open turn, rewinds to the start of turn `t` (the project must
/// be `start` again), then redoes (the project must be what the turn left).
fn close_turn_rewind_and_redo(f: &Fixture, t: u64, start: &Manifest) {
    let end = f.tree();
    let end_turn = f.turn("after");
    f.rewind(t);
    f.assert_tree("rewind to the start of the turn", start);
    f.rewind(end_turn);
    f.assert_tree("redo", &end);
}

#[test]
fn small_writes_into_a_large_file_store_only_what_they_overwrite() {
    let f = fixture();
    big_file(&f, "big", 8 << 20, 1);
    f.mount();
    let t = f.turn("writes");
    let start = hash_file(&f.m("big"));
    let before = store_bytes(&f);
    // 64 writes of 4 KiB at scattered offsets, some overlapping, one past
    // the end (the file grows).
    let mut script = String::new();
    for i in 0..64u64 {
        let block = (i * 7919) % 2048;
        script += &format!(
            "head -c 4096 /dev/urandom | dd of=big bs=4096 seek={block} conv=notrunc status=none\n"
        );
    }
    script += "head -c 100 /dev/urandom | dd of=big bs=65536 oflag=seek_bytes seek=9000000 conv=notrunc status=none\n";
    f.sh(&script);
    let end = hash_file(&f.m("big"));
    let end_turn = f.turn("after");
    let grown = store_bytes(&f) - before;
    assert!(
        grown < 1 << 20,
        "64 writes of 4 KiB into an 8 MiB file grew the blob store by {grown} bytes"
    );
    let e = log_entry(&f, t);
    let stored = e["bytes_stored"].as_u64().expect("bytes_stored");
    assert!(
        stored <= 64 * 4096,
        "turn {t} stored {stored} bytes for 64 writes of 4 KiB: {e:#}"
    );
    assert_eq!(e["modified"].as_u64(), Some(1), "{e:#}");

    // show and export give the turn-start bytes.
    let shown = f
        .opfs_command(&[
            "-C",
            f.mnt.to_str().expect("utf-8"),
            "show",
            &format!("{t}:big"),
        ])
        .output()
        .expect("opfs show");
    assert!(shown.status.success(), "show: {shown:?}");
    assert_eq!(
        blake3::hash(&shown.stdout).to_hex().to_string(),
        start,
        "show {t}:big"
    );
    let git_dir = f.root().join("export.git");
    f.opfs_c(&["export", "--git-dir", git_dir.to_str().expect("utf-8")])
        .ok();
    for (turn, want) in [(t - 1, &start), (t, &end)] {
        assert_exported_big(&git_dir, turn, want);
    }

    let before_rewind = store_bytes(&f);
    f.rewind(t);
    assert_eq!(hash_file(&f.m("big")), start, "rewind to turn {t}");
    assert_eq!(hash_file(&f.p("big")), start, "project after rewind");
    f.rewind(end_turn);
    assert_eq!(hash_file(&f.m("big")), end, "redo to turn {end_turn}");
    // Both were written back in place: the rewind turns saved the runs
    // they overwrote (2 x 64 x 4 KiB, in range packs) and the tail the
    // rewind cut (611,492 bytes, a blob file), not the 8 MiB file.
    let grown = store_bytes(&f) - before_rewind;
    assert!(
        grown < 2 << 20,
        "a rewind and a redo of 64 writes grew the blob store by {grown} bytes"
    );
    f.umount();
}

#[test]
fn truncate_extend_punch_hole_and_mmap_are_ranges() {
    let f = fixture();
    big_file(&f, "big", 3 << 20, 2);
    f.mount();
    let t = f.turn("edits");
    let start = hash_file(&f.m("big"));
    f.sh(
        "truncate -s 1500000 big
         truncate -s 4000000 big
         head -c 5000 /dev/urandom | dd of=big bs=65536 oflag=seek_bytes seek=1499000 conv=notrunc status=none
         fallocate --punch-hole --offset 102400 --length 65536 big
         python3 -c \"
import mmap, os
fd = os.open('big', os.O_RDWR)
m = mmap.mmap(fd, 0)
m[200000:200010] = b'0123456789'
m[3999990:4000000] = b'abcdefghij'
m.flush(); m.close(); os.close(fd)
\"
         head -c 777 /dev/urandom >> big",
    );
    let end = hash_file(&f.m("big"));
    let end_turn = f.turn("after");
    let e = log_entry(&f, t);
    let stored = e["bytes_stored"].as_u64().expect("bytes_stored");
    // The cut from 3 MiB to 1.5 MB saves the tail; nothing else beyond
    // the bytes overwritten below the turn-start length.
    assert!(
        stored < (3 << 20) - 1_400_000,
        "turn {t} stored {stored} bytes: {e:#}"
    );
    f.rewind(t);
    assert_eq!(hash_file(&f.m("big")), start, "rewind to turn {t}");
    f.rewind(end_turn);
    assert_eq!(hash_file(&f.m("big")), end, "redo");
    f.umount();
}

#[test]
fn rename_and_removal_of_a_file_written_as_ranges() {
    let f = fixture();
    big_file(&f, "a", 2 << 20, 3);
    big_file(&f, "b", 2 << 20, 4);
    big_file(&f, "c", 2 << 20, 5);
    f.mount();
    let t = f.turn("moves");
    let start = f.tree();
    f.sh(
        "printf 'AAAA' | dd of=a bs=65536 oflag=seek_bytes seek=1000 conv=notrunc status=none
         mv a moved
         printf 'MORE' | dd of=moved bs=65536 oflag=seek_bytes seek=2000 conv=notrunc status=none
         printf 'BBBB' | dd of=b bs=65536 oflag=seek_bytes seek=3000 conv=notrunc status=none
         rm b
         printf 'CCCC' | dd of=c bs=65536 oflag=seek_bytes seek=4000 conv=notrunc status=none
         cp moved c.tmp && mv c.tmp c",
    );
    close_turn_rewind_and_redo(&f, t, &start);
    f.umount();
}

#[test]
fn several_turns_of_ranges_chain_back_to_each_start() {
    let f = fixture();
    big_file(&f, "big", 2 << 20, 6);
    f.mount();
    let mut starts = Vec::new();
    let mut rng = Rng::new(7);
    for round in 0..5 {
        let t = f.turn(&format!("round {round}"));
        starts.push((t, hash_file(&f.m("big"))));
        let mut script = String::new();
        for _ in 0..4 {
            let at = rng.below(2_200_000);
            let n = 1 + rng.below(20_000);
            script += &format!(
                "head -c {n} /dev/urandom | dd of=big bs=65536 oflag=seek_bytes seek={at} conv=notrunc status=none\n"
            );
        }
        if round == 2 {
            script += "truncate -s 1800000 big\n";
        }
        f.sh(&script);
    }
    let last = f.turn("end");
    starts.push((last, hash_file(&f.m("big"))));
    let mut order: Vec<usize> = (0..starts.len()).collect();
    rng.shuffle(&mut order);
    for i in order {
        let (t, want) = &starts[i];
        f.rewind(*t);
        assert_eq!(&hash_file(&f.m("big")), want, "rewind to turn {t}");
    }
    f.umount();
}

#[test]
fn ranges_survive_a_daemon_killed_in_the_middle_of_the_turn() {
    let f = fixture();
    big_file(&f, "big", 2 << 20, 8);
    f.mount();
    let t = f.turn("before the kill");
    let start = hash_file(&f.m("big"));
    f.sh("head -c 50000 /dev/urandom | dd of=big bs=65536 oflag=seek_bytes seek=100000 conv=notrunc status=none");
    kill_daemon(&f);
    f.mount();
    assert_eq!(f.open_turn(), t, "the turn goes on after the restart");
    // Overlaps the range saved before the kill: its bytes must not be
    // saved again (they are not the turn-start bytes any more).
    f.sh(
        "head -c 80000 /dev/urandom | dd of=big bs=65536 oflag=seek_bytes seek=90000 conv=notrunc status=none
         truncate -s 1000000 big",
    );
    f.turn("after");
    f.rewind(t);
    assert_eq!(hash_file(&f.m("big")), start, "rewind to turn {t}");
    let v = f.opfs_c(&["verify"]);
    assert_eq!(v.code, Some(0), "verify: {v}");
    f.umount();
}

#[test]
fn a_ranged_file_changed_behind_the_mount_is_never_guessed() {
    let f = fixture();
    big_file(&f, "big", 2 << 20, 9);
    f.mount();
    let t = f.turn("writes");
    f.sh("printf 'mount' | dd of=big bs=65536 oflag=seek_bytes seek=10 conv=notrunc status=none");
    f.turn("after");
    // Behind the mount's back, in the project itself.
    f.sh_in(
        &f.project,
        "printf 'user!' | dd of=big bs=65536 oflag=seek_bytes seek=500000 conv=notrunc status=none",
    );
    let theirs = hash_file(&f.p("big"));
    for args in [
        vec!["rewind", "2", "--json"],
        vec!["rewind", "2", "--json", "--force"],
    ] {
        let mut args = args;
        let turn = t.to_string();
        args[1] = &turn;
        let run = f.opfs_c(&args);
        assert_eq!(run.code, Some(3), "{args:?} must report a conflict: {run}");
        let v = run.json();
        let reasons = v["conflicts"].to_string();
        assert!(reasons.contains("big"), "{args:?}: {v:#}");
        assert_eq!(hash_file(&f.p("big")), theirs, "{args:?} wrote the file");
    }
    f.umount();
}

/// Mounts with `env` added for this daemon only; returns its pid.
fn mount_with(f: &Fixture, env: &[(&str, &str)]) -> i32 {
    let run = f.try_mount(&["--no-export"], env);
    assert_eq!(run.code, Some(0), "opfs mount failed: {run}");
    assert!(wait_mount_state(&f.mnt, true, MOUNT_TIMEOUT), "not mounted");
    f.status()["pid"].as_u64().expect("pid") as i32
}

fn wait_gone(pid: i32) {
    assert!(
        wait_dead(pid, Duration::from_secs(10)),
        "daemon {pid} still alive"
    );
}

#[test]
fn a_killed_in_place_restore_of_ranges_is_finished_at_next_start() {
    let f = fixture();
    big_file(&f, "big", 3 << 20, 10);
    f.mount();
    let t = f.turn("writes");
    let start = hash_file(&f.m("big"));
    // Runs far apart, so the restore writes several of them back.
    let mut script = String::new();
    for i in 0..12u64 {
        script += &format!(
            "head -c 3000 /dev/urandom | dd of=big bs=65536 oflag=seek_bytes seek={} conv=notrunc status=none\n",
            i * 250_000 + 17
        );
    }
    script += "truncate -s 2000000 big\n";
    f.sh(&script);
    let after = hash_file(&f.m("big"));
    f.turn("after");
    f.umount();
    for point in [
        "rewind-after-capture:1",
        "rewind-patch-run:1",
        "rewind-patch-run:7",
        "rewind-after-step:1",
        "rewind-before-done:1",
    ] {
        let pid = mount_with(
            &f,
            &[("OPFS_FAILPOINT", point), ("OPFS_RANGE_MIN", RANGE_MIN)],
        );
        assert_eq!(hash_file(&f.m("big")), after, "{point}: before");
        // The interrupted rewind's turn (the start finishes it as a turn
        // of its own).
        let interrupted = f.open_turn() + 1;
        let run = f.opfs_c(&["rewind", &t.to_string(), "--json"]);
        assert_ne!(
            run.code,
            Some(0),
            "{point}: the daemon should have died: {run}"
        );
        wait_gone(pid);
        f.mount();
        if point.starts_with("rewind-after-capture") {
            // Killed while recording, before the restore was marked
            // running: nothing was written, and the start rolls it back.
            assert_eq!(hash_file(&f.m("big")), after, "{point}: rolled back");
            f.umount();
            continue;
        }
        // The next start finishes the restore from the records.
        assert_eq!(hash_file(&f.m("big")), start, "{point}: finished restore");
        assert_eq!(hash_file(&f.p("big")), start, "{point}: project");
        // Redo, for the next failpoint.
        f.rewind(interrupted);
        assert_eq!(hash_file(&f.m("big")), after, "{point}: redo");
        f.umount();
    }
}
/// Saved ranges are read back earliest first: where two overlap (a range
/// saved again after a restart holds bytes the turn already changed), the
/// earlier one holds the turn-start bytes; the record's size cuts the
/// result or asks the base for bytes past the pieces. Library level: the
/// index as `apply` writes it, read back through `ranges_of` and `Patched`.
#[test]
fn overlapping_saved_ranges_read_back_earliest_first() {
    use opfs::record::PreImage;
    use opfs::store::log::Op;
    use opfs::store::{BlobStore, Entry, Index};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut index = Index::open(&dir.path().join("index.sqlite"), false).expect("index");
    let blobs = BlobStore::open(&dir.path().join("blobs"), false).expect("blobs");
    // Saved in this order: [2, 6) "AAAA", then [4, 10) overlapping it,
    // then [12, 14) past the base.
    let pieces: [(u64, &[u8]); 3] = [(2, b"AAAA"), (4, b"bbbbbb"), (12, b"ZZ")];
    let entries: Vec<Entry> = pieces
        .iter()
        .map(|(offset, bytes)| Entry {
            turn: 1,
            path: b"f".to_vec(),
            pre: PreImage::File {
                blob: *blake3::hash(bytes).as_bytes(),
                size: bytes.len() as u64,
                perm: 0,
                ino: 0,
            },
            data: Some(bytes.to_vec()),
            op: Op::Range { offset: *offset },
            meta: None,
        })
        .collect();
    index.apply(&entries, &blobs).expect("apply");
    let patch = |size: u64, base: &[u8]| {
        opfs::view::ranges::patch_in_memory(&index, &blobs, 1, b"f", size, base)
    };
    assert_eq!(
        patch(14, b"0123456789xy").expect("patch"),
        b"01AAAAbbbbxyZZ",
        "earlier piece wins where two overlap"
    );
    assert_eq!(
        patch(5, b"0123456789xy").expect("cut"),
        b"01AAA",
        "size cuts"
    );
    assert_eq!(
        patch(16, b"0123456789xyzwvu").expect("tail from the base"),
        b"01AAAAbbbbxyZZvu"
    );
    // Bytes neither saved nor in the base: the base is not what the record
    // was made over.
    let err = patch(14, b"0123").expect_err("short base");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
}

/// `gc` (keeping every turn) keeps the blobs of saved ranges, `verify`
/// counts them as referenced and reports one that is missing, and the turn
/// still rewinds exactly afterwards.
#[test]
fn gc_and_verify_know_the_blobs_of_saved_ranges() {
    let f = fixture();
    let orig = Rng::new(10).bytes(2 << 20);
    write_file(&f.p("big"), &orig, 0o644);
    f.mount();
    let t = f.turn("writes");
    // One range above the inline limit (a blob file), one inline.
    f.sh(
        "head -c 65536 /dev/urandom | dd of=big bs=65536 oflag=seek_bytes seek=409600 conv=notrunc status=none
         printf 'tiny' | dd of=big bs=65536 oflag=seek_bytes seek=1000000 conv=notrunc status=none",
    );
    let end_turn = f.turn("after");
    f.umount();

    let state = f.state_dir();
    let conn = rusqlite::Connection::open(state.join("index.db")).expect("open index");
    let files: Vec<std::path::PathBuf> = {
        let mut stmt = conn
            .prepare("SELECT blob FROM ranges")
            .expect("ranges table");
        let rows = stmt
            .query_map([], |r| r.get::<_, Vec<u8>>(0))
            .expect("query");
        rows.map(|h| {
            let h = blake3::Hash::from_bytes(h.expect("row").try_into().expect("32 bytes"));
            let h = h.to_hex().to_string();
            state.join("blobs").join(&h[..2]).join(&h[2..])
        })
        .filter(|p| p.exists())
        .collect()
    };
    drop(conn);
    assert!(!files.is_empty(), "no saved range is a blob file");

    let v = f.opfs_p(&["verify", "--json"]);
    assert_eq!(v.code, Some(0), "verify: {v}");
    assert_eq!(
        v.json()["unreferenced_blobs"].as_u64(),
        Some(0),
        "the blob of a saved range counts as referenced: {v}"
    );
    // A saved range's blob gone: verify says so.
    let held = std::fs::read(&files[0]).expect("read blob");
    std::fs::remove_file(&files[0]).expect("remove blob");
    let v = f.opfs_p(&["verify"]);
    assert_eq!(v.code, Some(1), "verify with a saved range missing: {v}");
    write_file(&files[0], &held, 0o444);
    f.opfs_p(&["verify"]).ok();

    // gc keeps every turn here, so it keeps every saved range.
    f.opfs_p(&["gc", "--keep", "100", "--json"]).ok();
    for p in &files {
        assert!(p.exists(), "gc removed the saved range {}", p.display());
    }
    f.opfs_p(&["verify"]).ok();
    f.mount();
    let end = hash_file(&f.m("big"));
    f.rewind(t);
    assert_eq!(
        hash_file(&f.m("big")),
        blake3::hash(&orig).to_hex().to_string(),
        "rewind to turn {t} after gc"
    );
    f.rewind(end_turn);
    assert_eq!(hash_file(&f.m("big")), end, "redo");
    f.umount();
}

/// A mode change of a file the turn writes as ranges stores nothing more:
/// the ranged record holds the turn-start permission bits already.
#[test]
fn chmod_of_a_file_written_as_ranges_stores_nothing_more() {
    let f = fixture();
    big_file(&f, "big", 4 << 20, 11);
    f.mount();
    let t = f.turn("writes and chmod");
    let start = hash_file(&f.m("big"));
    f.sh(
        "printf 'before' | dd of=big bs=65536 oflag=seek_bytes seek=1000 conv=notrunc status=none
         chmod 600 big
         printf 'after' | dd of=big bs=65536 oflag=seek_bytes seek=3000000 conv=notrunc status=none",
    );
    let end = hash_file(&f.m("big"));
    let end_turn = f.turn("after");
    let e = log_entry(&f, t);
    let stored = e["bytes_stored"].as_u64().expect("bytes_stored");
    assert!(
        stored < 64 * 1024,
        "turn {t} stored {stored} bytes for two small writes and a chmod: {e:#}"
    );
    f.rewind(t);
    assert_eq!(hash_file(&f.m("big")), start, "rewind to turn {t}");
    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777
    };
    assert_eq!(mode(&f.p("big")), 0o644, "turn-start mode");
    f.rewind(end_turn);
    assert_eq!(hash_file(&f.m("big")), end, "redo");
    assert_eq!(mode(&f.p("big")), 0o600, "mode after the turn");
    f.umount();
}

/// Opening a large file with `O_TRUNC` (`> file`) is not a range: the whole
/// file goes. Before any write of the turn it is captured whole; after
/// ranges were saved, the ranged record is put together first.
#[test]
fn truncating_open_of_a_large_file_keeps_its_turn_start_bytes() {
    let f = fixture();
    big_file(&f, "a", 2 << 20, 12);
    big_file(&f, "b", 2 << 20, 13);
    f.mount();
    let t = f.turn("truncating opens");
    let start = f.tree();
    f.sh("printf 'new a' > a
         printf 'BBBB' | dd of=b bs=65536 oflag=seek_bytes seek=5000 conv=notrunc status=none
         printf 'new b' > b
         printf 'more' >> b");
    close_turn_rewind_and_redo(&f, t, &start);
    f.umount();
}

/// Ranged records on both sides of a whole-file record of the same path
/// (the file replaced by a rename in between): each ranged record is laid
/// over the content at the start of the turn after it, for show, export and
/// rewind alike.
#[test]
fn ranged_records_around_a_whole_record_read_back_through_history() {
    let f = fixture();
    big_file(&f, "big", 2 << 20, 14);
    f.mount();
    let mut starts = Vec::new();
    let t = f.turn("ranges");
    starts.push((t, hash_file(&f.m("big"))));
    f.sh("printf 'one' | dd of=big bs=65536 oflag=seek_bytes seek=1000 conv=notrunc status=none");
    let t = f.turn("replaced");
    starts.push((t, hash_file(&f.m("big"))));
    f.sh("cp big big.tmp
         printf 'two' | dd of=big.tmp bs=65536 oflag=seek_bytes seek=2000 conv=notrunc status=none
         mv big.tmp big");
    let t = f.turn("ranges again");
    starts.push((t, hash_file(&f.m("big"))));
    f.sh("printf 'three' | dd of=big bs=65536 oflag=seek_bytes seek=3000 conv=notrunc status=none");
    let last = f.turn("end");
    starts.push((last, hash_file(&f.m("big"))));

    for (t, want) in &starts {
        let shown = f
            .opfs_command(&[
                "-C",
                f.mnt.to_str().expect("utf-8"),
                "show",
                &format!("{t}:big"),
            ])
            .output()
            .expect("opfs show");
        assert!(shown.status.success(), "show {t}:big: {shown:?}");
        assert_eq!(
            &blake3::hash(&shown.stdout).to_hex().to_string(),
            want,
            "show {t}:big"
        );
    }
    let git_dir = f.root().join("export.git");
    f.opfs_c(&["export", "--git-dir", git_dir.to_str().expect("utf-8")])
        .ok();
    // The export's turn N holds the tree at the end of N: the start of N+1.
    for w in starts.windows(2) {
        assert_exported_big(&git_dir, w[0].0, &w[1].1);
    }
    // Oldest first: the first rewind goes from the end straight to the
    // first turn, across the whole record.
    for (t, want) in &starts {
        f.rewind(*t);
        assert_eq!(&hash_file(&f.m("big")), want, "rewind to turn {t}");
    }
    f.umount();
}

/// SIGKILLs the fixture's daemon and waits until it is gone.
fn kill_daemon(f: &Fixture) {
    let pid = f.status()["pid"].as_u64().expect("pid") as i32;
    sigkill(pid);
    wait_gone(pid);
}

/// After a restart in the middle of a turn, a file the turn already saved
/// ranges of is still known as ranged: removing or renaming it puts its
/// turn-start bytes together first, and a write after it was cut below the
/// range threshold (so it is no longer opened as ranges) does too.
#[test]
fn a_restarted_daemon_still_knows_which_files_are_ranged() {
    let f = fixture();
    big_file(&f, "gone", 2 << 20, 15);
    big_file(&f, "moved", 2 << 20, 16);
    big_file(&f, "cut", 2 << 20, 17);
    f.mount();
    let t = f.turn("before the kill");
    let start = f.tree();
    f.sh("for n in gone moved cut; do
           printf 'ranged' | dd of=$n bs=65536 oflag=seek_bytes seek=100000 conv=notrunc status=none
         done
         truncate -s 500000 cut");
    kill_daemon(&f);
    f.mount();
    assert_eq!(f.open_turn(), t, "the turn goes on after the restart");
    f.sh(
        "rm gone
         mv moved elsewhere
         printf 'small now' | dd of=cut bs=65536 oflag=seek_bytes seek=10 conv=notrunc status=none",
    );
    close_turn_rewind_and_redo(&f, t, &start);
    f.umount();
}

/// The small saved pieces of a turn live in its range pack
/// (`blobs/packs/<turn>`, `docs/format.md`): bytes a torn append left at
/// the pack's end are never read, pieces logged but not committed when the
/// daemon is killed are packed by the next start, the turn rewinds exactly
/// after all that, `opfs verify` checks the packed bytes (and reports a
/// damaged one), and gc removes the pack with its turn.
#[test]
fn packed_pieces_survive_a_torn_append_and_a_kill_and_go_with_their_turn() {
    let f = fixture();
    big_file(&f, "big", 2 << 20, 18);
    f.mount();
    let t = f.turn("packed");
    let start = hash_file(&f.m("big"));
    let writes = |first: u64| {
        let mut script = String::new();
        for i in first..first + 16 {
            let block = (i * 131) % 512;
            script += &format!(
                "head -c 4096 /dev/urandom | dd of=big bs=4096 seek={block} conv=notrunc status=none\n"
            );
        }
        f.sh(&script);
    };
    writes(0);
    // `log` commits what the daemon holds: the pieces are in the pack.
    f.opfs_c(&["log"]).ok();
    let pack = f.state_dir().join("blobs/packs").join(t.to_string());
    let len = std::fs::metadata(&pack)
        .unwrap_or_else(|e| panic!("no range pack {}: {e}", pack.display()))
        .len();
    assert!(len >= 16 * 4096, "the pack holds {len} bytes for 16 pieces");
    // A torn append: bytes at the end that no row names.
    {
        use std::io::Write;
        let mut p = std::fs::OpenOptions::new()
            .append(true)
            .open(&pack)
            .expect("open pack");
        p.write_all(&[0xa5; 3000]).expect("tear");
    }
    writes(16);
    kill_daemon(&f);
    f.mount();
    assert_eq!(f.open_turn(), t, "the turn goes on after the restart");
    writes(32);
    let end = hash_file(&f.m("big"));
    let end_turn = f.turn("after");
    f.rewind(t);
    assert_eq!(hash_file(&f.m("big")), start, "rewind to turn {t}");
    f.rewind(end_turn);
    assert_eq!(hash_file(&f.m("big")), end, "redo");
    f.umount();

    f.opfs_p(&["verify"]).ok();
    // A packed byte that a row names, damaged: verify says so.
    let held = std::fs::read(&pack).expect("read pack");
    let mut bad = held.clone();
    bad[100] ^= 0xff;
    std::fs::write(&pack, &bad).expect("damage");
    let v = f.opfs_p(&["verify"]);
    assert_eq!(v.code, Some(1), "verify with a damaged pack: {v}");
    std::fs::write(&pack, &held).expect("repair");
    f.opfs_p(&["verify"]).ok();

    // Turn t dropped: its pack goes.
    f.opfs_p(&["gc", "--keep", "1"]).ok();
    assert!(!pack.exists(), "gc left the pack of dropped turn {t}");
    f.opfs_p(&["verify"]).ok();
}
