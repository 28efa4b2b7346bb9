//! A worktree's base stays frozen while the project's agent writes through
//! the project's mount at the same time as the worktree reads
//! (`docs/worktrees.md`, "The base is frozen"): the look at the project's
//! records after each read of a project file (an inotify watch in front of
//! the full check, `src/worktree/base/records.rs`) never lets a write
//! through the mount show. Needs `/dev/fuse`.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{wait_for, wait_mount_state, Fixture, MOUNT_TIMEOUT};

/// Files the agent rewrites while the worktree reads them.
const FILES: usize = 300;

fn rel(i: usize) -> PathBuf {
    PathBuf::from(format!("d{}/f{i}.txt", i / 100))
}

fn base_bytes(i: usize) -> String {
    format!("file {i} as it was when the worktree was made\n")
}

fn agent_bytes(i: usize) -> String {
    format!("file {i} as the agent wrote it later\n")
}

fn read(p: &Path) -> String {
    String::from_utf8_lossy(&fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display())))
        .into_owned()
}

/// The agent rewrites file after file through the project's mount while
/// the worktree reads each one for the first time (a READ that reaches
/// the worktree's daemon): half of them while the agent's write of that
/// very file may be under way, half right after it returned (each of
/// those a capture the worktree's look must notice). Every read shows the
/// bytes of the worktree's base; the project's mount shows the agent's.
#[test]
fn reads_in_a_worktree_never_show_the_agents_writes_made_meanwhile() {
    let f = Fixture::new();
    for i in 0..FILES {
        let p = f.p(rel(i));
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(&p, base_bytes(i)).expect("write");
    }
    f.mount();
    let run = f.opfs_p(&["worktree", "create", "reader"]).ok();
    let w = PathBuf::from(run.stdout.trim_end());
    assert!(
        wait_mount_state(&w, true, MOUNT_TIMEOUT),
        "worktree create printed {} but it is not mounted: {run}",
        w.display()
    );

    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let written = Arc::clone(&written);
        let mnt = f.m("");
        std::thread::spawn(move || {
            for i in 0..FILES {
                fs::write(mnt.join(rel(i)), agent_bytes(i)).expect("write through the mount");
                written.store(i + 1, Ordering::SeqCst);
            }
        })
    };
    let mut shown = Vec::new();
    for i in 0..FILES {
        // Even: once the agent has written every file before this one
        // (it may be writing this one now). Odd: once it wrote this one.
        let need = if i % 2 == 0 { i } else { i + 1 };
        assert!(
            wait_for(Duration::from_secs(120), || written.load(Ordering::SeqCst)
                >= need),
            "the agent's writes stopped at {} of {FILES}",
            written.load(Ordering::SeqCst)
        );
        let got = read(&w.join(rel(i)));
        if got != base_bytes(i) {
            shown.push(format!("{}: {got:?}", rel(i).display()));
        }
    }
    writer.join().expect("writer");
    assert!(
        shown.is_empty(),
        "the worktree showed the agent's later writes ({} of {FILES}): {shown:?}",
        shown.len()
    );
    for i in (0..FILES).step_by(37) {
        assert_eq!(read(&f.m(rel(i))), agent_bytes(i), "through the mount");
        assert_eq!(read(&w.join(rel(i))), base_bytes(i), "in the worktree");
    }
    f.opfs_p(&["worktree", "discard", "reader"]).ok();
}
