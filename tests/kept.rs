//! Removals keep the inode (`docs/design.md`, "Removals keep the inode"):
//! a large file removed (or renamed over) through the mount is linked into
//! the state dir instead of copied, guarded by a write lease and its link
//! count, and hashed off the request path.
//!
//! - `a_removed_large_file_is_kept_as_its_own_inode`: the blob of a removed
//!   300 KiB file is the file's own inode (not a copy), and a rewind brings
//!   the bytes back; the same for a rename over it.
//! - `a_timer_commit_while_a_kept_file_is_being_removed_does_not_copy_it`:
//!   the group-commit timer ticks while a removal is paused between its
//!   record and the unlink; the file is still kept, not copied.
//! - `kill_right_after_a_kept_removal_loses_nothing`: SIGKILL right after
//!   the removal, with the hash still pending; the next start hashes the
//!   kept file and the rewind restores it.
//! - `kill_before_the_removal_of_a_kept_file_keeps_the_project_file_apart`:
//!   SIGKILL after the kept record, before the unlink; the next start must
//!   copy (the project still names the inode), so a later write to the
//!   project file cannot change the recorded pre-image.
//! - `a_file_open_elsewhere_when_removed_is_copied_not_kept` and
//!   `a_hard_linked_file_is_copied_not_kept`: the lease and the link count
//!   refuse the keep; writes through the other descriptor or name after
//!   the removal do not reach the recorded pre-image.
//! - `without_open_a_file_open_through_the_mount_when_removed_is_copied`:
//!   without OPEN nothing is kept (a lease cannot see the mount's opens).
//!
//! The tests that expect keeping mount with OPEN (`OPFS_NO_OPEN=0`).

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

/// Above the default keep threshold (256 KiB).
const BIG: usize = 300 * 1024;

/// `BIG` random bytes; distinct seeds give distinct bytes (seeds that
/// differ only in their lowest bit give the same stream).
fn big_bytes(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..BIG).map(|_| rng.below(256) as u8).collect()
}

/// Where the blob of `bytes` lives in the fixture's state dir.
fn blob_path(f: &Fixture, bytes: &[u8]) -> PathBuf {
    let h = blake3::hash(bytes).to_hex().to_string();
    f.state_dir().join("blobs").join(&h[..2]).join(&h[2..])
}

/// Commits the daemon's pending records (`opfs log` asks it to), then
/// waits for the blob of `bytes` to exist.
fn wait_blob(f: &Fixture, bytes: &[u8]) -> fs::Metadata {
    let path = blob_path(f, bytes);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        f.opfs_c(&["log"]).ok();
        if let Ok(m) = fs::metadata(&path) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "no blob {} after the removal",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A fixture whose mounts keep OPEN (`OPFS_NO_OPEN=0`): without OPEN the
/// journal never keeps a removed inode, since a lease cannot see the files
/// open through the mount (`docs/design.md`, "Removals keep the inode").
fn keeping_fixture() -> Fixture {
    let f = Fixture::new();
    f.set_env("OPFS_NO_OPEN", "0");
    f
}

fn kept_dir_is_empty(f: &Fixture) -> bool {
    fs::read_dir(f.state_dir().join("kept")).map_or(true, |mut d| d.next().is_none())
}

fn daemon_pid(f: &Fixture) -> i32 {
    let s = f.status();
    s["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("status has no pid: {s:#}")) as i32
}

fn mount_env(f: &Fixture, env: &[(&str, &str)]) -> i32 {
    let run = f.try_mount(&["--no-export"], env);
    assert_eq!(run.code, Some(0), "opfs mount failed: {run}");
    assert!(
        wait_mount_state(&f.mnt, true, MOUNT_TIMEOUT),
        "{} is not mounted",
        f.mnt.display()
    );
    daemon_pid(f)
}

fn ino(p: &Path) -> u64 {
    fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
        .ino()
}

#[test]
fn a_removed_large_file_is_kept_as_its_own_inode() {
    let f = keeping_fixture();
    let a = big_bytes(10);
    let b = big_bytes(20);
    let c = big_bytes(30);
    write_file(&f.p("d/a"), &a, 0o640);
    write_file(&f.p("d/b"), &b, 0o644);
    write_file(&f.p("c"), &c, 0o600);
    let (ino_a, ino_b) = (ino(&f.p("d/a")), ino(&f.p("d/b")));
    f.mount_with(&["--no-export"]);
    let start = f.turn("start");
    let before = f.tree();
    f.sh("rm d/a && mv c d/b");
    // The blobs are the removed inodes themselves, not copies.
    assert_eq!(wait_blob(&f, &a).ino(), ino_a, "d/a was copied, not kept");
    assert_eq!(wait_blob(&f, &b).ino(), ino_b, "d/b was copied, not kept");
    assert!(kept_dir_is_empty(&f), "kept files left after the commit");
    f.rewind_in("kept: ", start);
    f.assert_tree("after the rewind", &before);
    let v = f.opfs_p(&["verify", "--json"]);
    assert_eq!(v.code, Some(0), "verify: {v}");
    f.umount();
}

#[test]
fn a_timer_commit_while_a_kept_file_is_being_removed_does_not_copy_it() {
    // The removal pauses 600 ms between its record and the unlink, the
    // journal's lock released: six ticks of the group-commit timer. A tick
    // in that window used to commit the record by copying the file (its
    // removal could still fail), which made the keeping test above flaky
    // under load; the timer now waits for the removal to end.
    let f = keeping_fixture();
    let a = big_bytes(60);
    write_file(&f.p("a"), &a, 0o644);
    let ino_a = ino(&f.p("a"));
    mount_env(&f, &[("OPFS_FAILPOINT", "before-removal:1:pause=600")]);
    let start = f.turn("start");
    let before = f.tree();
    f.sh("rm a");
    assert_eq!(wait_blob(&f, &a).ino(), ino_a, "a was copied, not kept");
    assert!(kept_dir_is_empty(&f), "kept files left after the commit");
    f.rewind_in("kept while a timer ticked: ", start);
    f.assert_tree("after the rewind", &before);
    f.umount();
}

#[test]
fn kill_right_after_a_kept_removal_loses_nothing() {
    let f = keeping_fixture();
    let a = big_bytes(40);
    write_file(&f.p("a"), &a, 0o644);
    write_file(&f.p("small"), b"small\n", 0o644);
    let ino_a = ino(&f.p("a"));
    let pid = mount_env(&f, &[("OPFS_FAILPOINT", "kept-after-removal:1")]);
    let start = f.turn("start");
    let before = manifest(&f.project);
    let _ = std::process::Command::new("rm")
        .arg("-f")
        .arg(f.m("a"))
        .status();
    assert!(
        wait_dead(pid, Duration::from_secs(10)),
        "the failpoint was not reached"
    );
    assert!(!f.p("a").exists(), "the removal did not reach the project");
    // The next start hashes the kept file into a blob (the same inode).
    mount_env(&f, &[]);
    assert_eq!(wait_blob(&f, &a).ino(), ino_a, "the kept inode was copied");
    assert!(kept_dir_is_empty(&f), "kept files left after the replay");
    f.rewind_in("after the kill: ", start);
    f.assert_tree("after the kill", &before);
    f.umount();
}

#[test]
fn kill_before_the_removal_of_a_kept_file_keeps_the_project_file_apart() {
    let f = keeping_fixture();
    let a = big_bytes(50);
    write_file(&f.p("a"), &a, 0o644);
    let pid = mount_env(&f, &[("OPFS_FAILPOINT", "capture-after-record:1")]);
    let start = f.turn("start");
    let before = manifest(&f.project);
    let _ = std::process::Command::new("rm")
        .arg("-f")
        .arg(f.m("a"))
        .status();
    assert!(
        wait_dead(pid, Duration::from_secs(10)),
        "the failpoint was not reached"
    );
    assert!(f.p("a").exists(), "the removal ran after the failpoint");
    mount_env(&f, &[]);
    let blob = wait_blob(&f, &a);
    assert_ne!(
        blob.ino(),
        ino(&f.p("a")),
        "the blob shares the inode the project still names"
    );
    assert!(kept_dir_is_empty(&f), "kept files left after the replay");
    assert_eq!(
        fs::metadata(f.p("a")).expect("a").nlink(),
        1,
        "the project file kept its second name"
    );
    // Changing the project file now must not change the recorded bytes.
    f.sh("printf 'changed' | dd of=a bs=1 seek=100 conv=notrunc status=none");
    f.rewind_in("after the kill: ", start);
    f.assert_tree("after the kill", &before);
    let v = f.opfs_p(&["verify", "--json"]);
    assert_eq!(v.code, Some(0), "verify: {v}");
    f.umount();
}

/// Writes `more` at the start of the file behind `file` (open for writing).
fn scribble(file: &mut fs::File, more: &[u8]) {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(0)).expect("seek");
    file.write_all(more).expect("write");
    file.flush().expect("flush");
}

#[test]
fn a_file_open_elsewhere_when_removed_is_copied_not_kept() {
    open_elsewhere_when_removed(keeping_fixture());
}

/// Without OPEN (the default for a root daemon with the watch) a file open
/// through the mount holds no descriptor of the backing inode, so the lease
/// would be granted and a write through that descriptor after the removal
/// would reach the kept pre-image: the journal copies every removed file
/// then (found when the two changes met: `b` was kept while open).
#[test]
fn without_open_a_file_open_through_the_mount_when_removed_is_copied() {
    open_elsewhere_when_removed(Fixture::new());
}

/// `a` open behind the mount and `b` open through it while both are
/// removed; writes through those descriptors after the removal must not
/// reach the pre-images.
fn open_elsewhere_when_removed(f: Fixture) {
    let a = big_bytes(60);
    let b = big_bytes(70);
    write_file(&f.p("a"), &a, 0o644);
    write_file(&f.p("b"), &b, 0o644);
    let (ino_a, ino_b) = (ino(&f.p("a")), ino(&f.p("b")));
    f.mount_with(&["--no-export"]);
    let start = f.turn("start");
    let before = f.tree();
    // `a` open behind the mount, `b` open through it.
    let mut behind = OpenOptions::new()
        .write(true)
        .open(f.p("a"))
        .expect("open a");
    let mut through = OpenOptions::new()
        .write(true)
        .open(f.m("b"))
        .expect("open b");
    f.sh("rm a b");
    // Both unlinked files are still open: writes through those
    // descriptors change no path, and must not change the pre-images.
    scribble(&mut behind, b"written after the removal");
    scribble(&mut through, b"written after the removal");
    drop((behind, through));
    assert_ne!(wait_blob(&f, &a).ino(), ino_a, "a was kept while open");
    assert_ne!(wait_blob(&f, &b).ino(), ino_b, "b was kept while open");
    f.rewind_in("open elsewhere: ", start);
    f.assert_tree("after the rewind", &before);
    f.umount();
}

#[test]
fn a_hard_linked_file_is_copied_not_kept() {
    let f = keeping_fixture();
    let a = big_bytes(80);
    write_file(&f.p("a"), &a, 0o644);
    fs::hard_link(f.p("a"), f.p("other")).expect("link");
    let ino_a = ino(&f.p("a"));
    f.mount_with(&["--no-export"]);
    let start = f.turn("start");
    f.sh("rm a");
    // The inode lives on under its other name, behind the mount too.
    let mut other = OpenOptions::new()
        .write(true)
        .open(f.p("other"))
        .expect("open other");
    scribble(&mut other, b"written after the removal");
    drop(other);
    assert_ne!(wait_blob(&f, &a).ino(), ino_a, "a was kept with two links");
    let run = f.opfs_c(&["rewind", &start.to_string(), "--json", "--force"]);
    assert_eq!(run.code, Some(0), "rewind: {run}");
    assert_eq!(fs::read(f.m("a")).expect("read a"), a, "a's bytes");
    f.umount();
}
