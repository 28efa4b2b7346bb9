//! What a removal through the mount captures: the entry the removal
//! destroys, read through the directory the layer removes it from
//! (`MutationHook::before_in`), not whatever the path names by the time
//! the capture resolves it again from the project root.
//!
//! - `a_removal_in_a_directory_moved_behind_the_mount_captures_the_removed_bytes`:
//!   without the watch (the kernel may then use a cached entry for up to
//!   a second), a directory is moved away behind the mount and a new one
//!   with a file of the same name takes its place; `rm` through the mount
//!   right after still removes the file in the moved directory (the one
//!   the kernel's cached entry names). Its bytes must be what the turn
//!   recorded for the path. Resolving the path again from the root found
//!   the new file, born after the turn began, so the turn recorded the
//!   path as unknown and the removed bytes were lost.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The kernel caches entries for `opfs_fs::UNWATCHED_TTL` (1 s) without
/// the watch; a try whose steps took longer may have seen fresh entries
/// and is repeated.
const WINDOW: Duration = Duration::from_millis(700);

#[test]
fn a_removal_in_a_directory_moved_behind_the_mount_captures_the_removed_bytes() {
    let fx = Fixture::new();
    fx.set_env("OPFS_WATCH", "off");
    for attempt in 0..5 {
        let d = format!("d{attempt}");
        write_file(&fx.p(format!("{d}/x")), b"removed bytes\n", 0o644);
        if attempt == 0 {
            fx.mount();
        }
        let turn = fx.turn(&format!("try {attempt}"));
        let started = Instant::now();
        // The kernel looks both up and caches them.
        assert!(fx.m(format!("{d}/x")).exists(), "{d}/x through the mount");
        fx.sh_in(
            &fx.project,
            &format!("mv {d} moved{attempt} && mkdir {d} && echo 'new bytes' > {d}/x"),
        );
        let removed = std::fs::remove_file(fx.m(format!("{d}/x")));
        if started.elapsed() > WINDOW {
            eprintln!("try {attempt} took {:?}; again", started.elapsed());
            continue;
        }
        removed.unwrap_or_else(|e| panic!("rm {d}/x through the mount: {e}"));
        // The cached entry named the moved directory: that is where the
        // file went.
        assert!(
            !fx.p(format!("moved{attempt}/x")).exists(),
            "the removal should have reached the moved directory's file"
        );
        assert_eq!(
            std::fs::read(fx.p(format!("{d}/x"))).expect("read the new file"),
            b"new bytes\n"
        );
        let shown = fx.opfs_p(&["show", &format!("{turn}:{d}/x")]);
        assert!(
            shown.code == Some(0) && shown.stdout == "removed bytes\n",
            "turn {turn} did not record {d}/x as the bytes the removal destroyed: {shown}"
        );
        return;
    }
    panic!("no try finished within {WINDOW:?} (machine too loaded?)");
}

/// The capture reads a file without changing its access time (zero
/// intrusion; `tree::dir::open_entry` opens with `O_NOATIME`): the first
/// write of a turn to a file through the mount captures its bytes, and
/// the project's file keeps the access time it had. Skipped where the
/// backing filesystem does not update access times on a read (a
/// `noatime` mount): the test could not fail there.
#[test]
fn the_capture_leaves_the_access_time_alone() {
    use std::os::unix::fs::MetadataExt;
    let fx = Fixture::new();
    let old = libc::timespec {
        tv_sec: 1_000_000_000,
        tv_nsec: 0,
    };
    let set_atime = |rel: &str| {
        let path =
            std::ffi::CString::new(fx.p(rel).into_os_string().into_encoded_bytes()).expect("path");
        let times = [
            old,
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
        ];
        // SAFETY: a valid C string and two timespecs.
        let ret = unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) };
        assert_eq!(
            ret,
            0,
            "utimensat {rel}: {}",
            std::io::Error::last_os_error()
        );
    };
    std::fs::write(fx.p("probe"), b"probe\n").expect("seed");
    set_atime("probe");
    std::fs::read(fx.p("probe")).expect("read probe");
    if std::fs::metadata(fx.p("probe")).expect("stat").atime() == old.tv_sec {
        eprintln!("the backing filesystem does not update access times on a read: not checked");
        return;
    }
    std::fs::write(fx.p("f"), b"kept bytes\n").expect("seed");
    std::fs::write(fx.p("g"), b"removed bytes\n").expect("seed");
    set_atime("f");
    fx.mount_with(&["--no-export"]);
    fx.turn("t");
    let t = fx.open_turn();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(fx.m("f"))
            .expect("open via mount");
        f.write_all(b"more\n").expect("write via mount");
    }
    std::fs::remove_file(fx.m("g")).expect("rm via mount");
    assert_eq!(
        std::fs::metadata(fx.p("f")).expect("stat").atime(),
        old.tv_sec,
        "the capture's read changed the access time of the project's file"
    );
    let v = fx.rewind(t);
    check_rewind_result(&v, t, false);
    assert_eq!(std::fs::read(fx.p("f")).expect("read"), b"kept bytes\n");
    assert_eq!(std::fs::read(fx.p("g")).expect("read"), b"removed bytes\n");
}

/// A stream of removals is committed to the index in a few large groups,
/// not one per tick of the daemon's 100 ms timer
/// (`Journal::apply_pending_on_tick`): each group commit truncates the
/// capture log, so the times its size drops while an `rm -rf` of 6,000
/// files runs count the commits. The timer commits at most once per
/// `GROUP_MAX_WAIT` (1 s) while captures keep coming, and a group of
/// 4,096 records commits on its own: the bound allows one commit per
/// half second, a full group and two pauses of the `rm` (a loaded
/// machine). Committing on every tick gave about ten per second. Then a
/// rewind must give every file back exactly.
#[test]
fn a_stream_of_removals_is_committed_in_few_groups() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const FILES: usize = 6000;
    let fx = Fixture::new();
    for i in 0..FILES {
        write_file(
            &fx.p(format!("t/d{:03}/f{i:05}", i / 100)),
            format!("file {i}\n").repeat(8).as_bytes(),
            0o644,
        );
    }
    fx.mount();
    let before = fx.tree();
    let turn = fx.turn("removals");
    let log = fx.state_dir().join("capture.log");
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut drops = 0u32;
            let mut last = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let len = std::fs::metadata(&log).map_or(0, |m| m.len());
                if len < last {
                    drops += 1;
                }
                last = len;
                // A sampling interval, not an ordering: a commit every
                // 100 ms is seen, and the poller leaves the CPU to the rm.
                std::thread::sleep(Duration::from_millis(1));
            }
            drops
        })
    };
    let started = Instant::now();
    fx.sh(&format!("rm -rf {}", q(&fx.m("t").to_string_lossy())));
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let commits = poller.join().expect("poller");
    eprintln!("{commits} group commits in {elapsed:?}");
    let allowed = 2 + (FILES / 4096) as u32 + (elapsed.as_secs_f64() * 2.0).ceil() as u32;
    assert!(
        commits <= allowed,
        "{commits} group commits while rm -rf of {FILES} files ran for {elapsed:?} \
         (at most {allowed} expected: the timer should wait while captures keep coming)"
    );
    assert!(!fx.p("t").exists());
    let v = fx.rewind(turn);
    check_rewind_result(&v, turn, false);
    fx.assert_tree("after the rewind", &before);
}
