//! Copy-up in a worktree (`docs/worktrees.md`, "The upper layer"): on a
//! filesystem with reflinks the upper copy of a lower file shares its
//! extents (`FICLONE`: no byte is copied), from the project's own file and
//! from a recorded pre-image alike; elsewhere the bytes are copied, holes
//! kept. The reflink test makes an XFS filesystem on a loop device, so it
//! needs root, `mkfs.xfs` and `filefrag`; without them it says it is
//! skipped and why.

mod common;

use std::ffi::{CString, OsStr};
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::loopfs::LoopFs;
use common::*;

/// `len` bytes that differ from block to block (so nothing dedups or
/// compresses), seeded by `seed`.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u64)
                .wrapping_mul(2654435761)
                .wrapping_add(u64::from(seed)) as u8
                | 1
        })
        .collect()
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    f.write_all(bytes)
        .unwrap_or_else(|e| panic!("append to {}: {e}", path.display()));
}

/// True when `filefrag -v` reports an extent of `path` as shared with
/// another file.
fn shares_extents(path: &Path) -> bool {
    let out = Command::new("filefrag")
        .arg("-v")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .expect("run filefrag");
    assert!(out.status.success(), "filefrag -v {}", path.display());
    String::from_utf8_lossy(&out.stdout).contains("shared")
}

/// Bytes the process `pid` read and wrote through system calls so far
/// (`rchar` + `wchar` of `/proc/PID/io`): a byte copy of a file shows
/// there, a reflink does not.
fn io_bytes(pid: u64) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/io")).expect("read /proc/PID/io");
    text.lines()
        .filter(|l| l.starts_with("rchar:") || l.starts_with("wchar:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// `statfs(2)`'s filesystem type of `path`.
fn fs_type(path: &Path) -> i64 {
    let c = CString::new(path.as_os_str().as_bytes()).expect("path without NUL");
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: valid C string and writable struct.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) }, 0);
    // SAFETY: statfs succeeded, so the struct is filled.
    #[allow(clippy::unnecessary_cast)]
    let t = unsafe { st.assume_init() }.f_type as i64;
    t
}

const MIB: usize = 1 << 20;

/// Writes `bytes` to `path`, leaving every all-zero MiB a hole.
fn write_sparse(path: &Path, bytes: &[u8]) {
    let file = fs::File::create(path).expect("create");
    for (i, chunk) in bytes.chunks(MIB).enumerate() {
        if chunk.iter().any(|&b| b != 0) {
            file.write_all_at(chunk, (i * MIB) as u64).expect("write");
        }
    }
    file.set_len(bytes.len() as u64).expect("set_len");
}

/// The project for both tests: `big` (served unchanged from the project)
/// and `old` (replaced through the mount after the base turn began, so the
/// worktree serves its recorded pre-image, a blob file); returns the path
/// of worktree `w` made from that base turn and its daemon's pid.
fn worktree_over_two_large_files(f: &Fixture, big: &[u8], old: &[u8]) -> (PathBuf, u64) {
    write_sparse(&f.p("big"), big);
    write_sparse(&f.p("old"), old);
    f.mount();
    let base = f.turn("base");
    fs::remove_file(f.m("old")).expect("remove old through the mount");
    fs::write(f.m("old"), b"replaced\n").expect("write old through the mount");
    let run = f
        .opfs_p(&["worktree", "create", "w", "--from", &base.to_string()])
        .ok();
    let w = PathBuf::from(run.stdout.trim_end());
    assert!(wait_mount_state(&w, true, MOUNT_TIMEOUT), "{run}");
    let status = f
        .opfs(&[
            "-C".as_ref(),
            w.as_os_str(),
            "status".as_ref(),
            "--json".as_ref(),
        ])
        .ok()
        .json();
    let pid = status["pid"].as_u64().expect("the worktree daemon's pid");
    (w, pid)
}

/// Discards worktree `w` when dropped (also when a test fails, so no
/// worktree mount outlives it), before the fixture unmounts the project.
struct Discard<'a>(&'a Fixture);

impl Drop for Discard<'_> {
    fn drop(&mut self) {
        let p = self.0.project.as_os_str();
        let args: [&OsStr; 5] = [
            "-C".as_ref(),
            p,
            "worktree".as_ref(),
            "discard".as_ref(),
            "w".as_ref(),
        ];
        let _ = self.0.opfs_command(&args).stdin(Stdio::null()).output();
    }
}

/// The upper layer of worktree `w` (in the project's state dir; the
/// worktree's own history has a state dir beside it).
fn upper_of(f: &Fixture) -> PathBuf {
    fs::read_dir(f.home.join("projects"))
        .expect("read OPFS_HOME/projects")
        .map(|e| e.expect("entry").path().join("worktrees/w/upper"))
        .find(|p| p.is_dir())
        .expect("the upper layer of worktree w")
}

#[test]
fn copy_up_shares_extents_on_a_reflink_filesystem() {
    let xfs = match LoopFs::make("mkfs.xfs", &["-q", "-m", "reflink=1"], 512 << 20) {
        Ok(x) => x,
        Err(why) => {
            eprintln!("skipped: copy_up_shares_extents_on_a_reflink_filesystem: {why}");
            return;
        }
    };
    if which("filefrag").is_none() {
        eprintln!("skipped: filefrag is missing (apt-get install e2fsprogs)");
        return;
    }
    let f = Fixture::new_in(&xfs.mnt);
    let (big, old) = (pattern(1, 64 * MIB), pattern(2, 64 * MIB));
    let (w, pid) = worktree_over_two_large_files(&f, &big, &old);
    let _discard = Discard(&f);
    let ctime = |p: &Path| {
        let md = fs::metadata(p).expect("stat");
        (md.ctime(), md.ctime_nsec())
    };
    let project_ctime = ctime(&f.p("big"));

    let before = io_bytes(pid);
    append(&w.join("big"), b"tail of big\n");
    append(&w.join("old"), b"tail of old\n");
    let copied = io_bytes(pid) - before;
    assert!(
        copied < 4 * MIB as u64,
        "copying up two 64 MiB files moved {copied} bytes through the daemon: no reflink"
    );

    let upper = upper_of(&f);
    for name in ["big", "old"] {
        assert!(
            shares_extents(&upper.join(name)),
            "the upper copy of {name} shares no extent:\n{}",
            String::from_utf8_lossy(
                &Command::new("filefrag")
                    .arg("-v")
                    .arg(upper.join(name))
                    .output()
                    .expect("filefrag")
                    .stdout
            )
        );
    }
    let mut want = big.clone();
    want.extend_from_slice(b"tail of big\n");
    assert!(fs::read(w.join("big")).expect("read") == want, "big");
    let mut want = old.clone();
    want.extend_from_slice(b"tail of old\n");
    assert!(fs::read(w.join("old")).expect("read") == want, "old");
    // The project is untouched, its ctime too (a reflink of a source file
    // changes nothing of it), so nothing reads as drifted.
    assert!(fs::read(f.p("big")).expect("read") == big);
    assert_eq!(fs::read(f.p("old")).expect("read"), b"replaced\n");
    assert_eq!(ctime(&f.p("big")), project_ctime);
    let list = f.opfs_p(&["worktree", "list", "--json"]).ok().json();
    assert_eq!(list[0]["drifted"], 0, "{list}");
    assert_eq!(list[0]["changed"], 2, "{list}");
}

#[test]
fn copy_up_copies_bytes_and_keeps_holes_without_reflinks() {
    let probe = tempfile::tempdir().expect("temp dir");
    // ext4, tmpfs: no reflinks, so the copy-up takes the byte-copy path.
    const EXT4: i64 = 0xEF53;
    const TMPFS: i64 = 0x0102_1994;
    let t = fs_type(probe.path());
    if t != EXT4 && t != TMPFS {
        eprintln!(
            "skipped: copy_up_copies_bytes_and_keeps_holes_without_reflinks: the temp dir's \
             filesystem ({t:#x}) is neither ext4 nor tmpfs, so it may have reflinks"
        );
        return;
    }
    let f = Fixture::new();
    // A sparse file: 1 MiB of data, a 6 MiB hole, 1 MiB of data.
    let mut big = vec![0u8; 8 * MIB];
    big[..MIB].copy_from_slice(&pattern(3, MIB));
    big[7 * MIB..].copy_from_slice(&pattern(4, MIB));
    let old = pattern(5, 3 * MIB);
    let (w, pid) = worktree_over_two_large_files(&f, &big, &old);
    let _discard = Discard(&f);
    let before = io_bytes(pid);
    append(&w.join("big"), b"tail\n");
    append(&w.join("old"), b"tail\n");
    let copied = io_bytes(pid) - before;
    assert!(
        copied >= (5 * MIB) as u64,
        "the copy-ups moved {copied} bytes through the daemon, less than the 5 MiB of data"
    );
    let upper = upper_of(&f);
    let mut want = big.clone();
    want.extend_from_slice(b"tail\n");
    assert!(fs::read(w.join("big")).expect("read") == want, "big");
    assert!(fs::read(upper.join("big")).expect("read") == want);
    let blocks = fs::metadata(upper.join("big")).expect("stat").blocks() * 512;
    assert!(
        blocks < 4 * MIB as u64,
        "the upper copy of a file with a 6 MiB hole holds {blocks} bytes: the hole was filled"
    );
    let mut want = old.clone();
    want.extend_from_slice(b"tail\n");
    assert!(fs::read(w.join("old")).expect("read") == want, "old");
    if which("filefrag").is_some() {
        assert!(!shares_extents(&upper.join("big")));
    }
}
