//! Progress for what can run for more than a second: the
//! seams the CLI's bars hang on, on real mounts. A mounted rewind that asks
//! for progress gets `progress` lines over the control socket that grow to
//! their total before its answer, and one that does not ask gets none (the
//! protocol as before); gc reports its sweep of the blob store up to its
//! total; and with stdout and stderr not terminals (a script, a pipe) the
//! commands print no bar.

mod common;

use std::fs;

use common::*;
use opfs::control::client::{answer_limit, exchange};
use opfs::control::protocol::{Request, Response};
use opfs::store::StateDir;

fn state_of(fx: &Fixture) -> StateDir {
    StateDir {
        dir: fx.state_dir(),
        project: fx.project.clone(),
    }
}

fn rewind_request(to: u64, progress: bool) -> Request {
    Request::Rewind {
        to,
        dry_run: false,
        force: false,
        progress,
        pending: None,
        partial: false,
        markers: false,
        paths: None,
    }
}

#[test]
fn a_mounted_rewind_sends_progress_lines_that_grow_to_the_total() {
    let fx = Fixture::new();
    fx.mount();
    for i in 0..200 {
        write_file(&fx.m(format!("d/f{i}")), b"made in turn 1\n", 0o644);
    }
    let t2 = fx.turn("two");
    let state = state_of(&fx);

    let mut seen: Vec<(u64, u64)> = Vec::new();
    let req = rewind_request(1, true);
    let answer = exchange(&state, &req, answer_limit(&req), &mut |d, t| {
        seen.push((d, t))
    })
    .expect("rewind through the socket");
    let Response::Rewind(report) = answer else {
        panic!("not a rewind answer: {answer:?}");
    };
    assert!(report.conflicts.is_empty(), "{report:?}");
    assert!(!fx.m("d").exists(), "the rewind ran");
    // Units: each path recorded, each removal, each path restored.
    let removals = report
        .plan
        .iter()
        .filter(|p| p.steps.contains(&opfs::restore::Step::Remove))
        .count() as u64;
    let total = 2 * report.plan.len() as u64 + removals;
    assert!(total >= 3 * 201, "{total}");
    assert!(!seen.is_empty(), "progress lines come before the answer");
    assert!(seen.iter().all(|&(d, t)| t == total && d <= t), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
    assert_eq!(seen.last(), Some(&(total, total)), "{seen:?}");

    // Not asked for, none is sent: the answer is the first line.
    let mut calls = 0;
    let req = rewind_request(t2, false);
    let answer = exchange(&state, &req, answer_limit(&req), &mut |_, _| calls += 1)
        .expect("rewind through the socket");
    assert!(matches!(answer, Response::Rewind(_)), "{answer:?}");
    assert_eq!(calls, 0);
    assert!(fx.m("d/f199").exists(), "the redo ran");
}

#[test]
fn gc_progress_sweeps_every_blob_folder_up_to_its_total() {
    let fx = Fixture::new();
    fx.mount();
    // Blob files (above the inline size), one per turn, that `keep: 1`
    // drops.
    for i in 0..6u8 {
        fs::write(fx.m("big"), vec![i; 64 * 1024]).expect("write");
        fx.turn("next");
    }
    fx.umount();
    let st = state_of(&fx);
    let folders = fs::read_dir(st.blobs_dir())
        .expect("blobs")
        .flatten()
        .filter(|d| d.file_name().len() == 2)
        .count() as u64;
    assert!(folders >= 2, "{folders}");
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let retention = opfs::gc::Retention {
        keep: 1,
        max_bytes: None,
        min_age_days: None,
    };
    let lock = opfs::state::lock::StateLock::try_acquire(&st)
        .expect("lock")
        .expect("no daemon holds it");
    let r = opfs::gc::gc_with_progress(
        &st,
        retention,
        opfs::gc::Offline::Locked(&lock),
        &mut |d, t| seen.push((d, t)),
    )
    .expect("gc");
    assert!(r.blobs_removed > 0, "{r:?}");
    assert!(
        seen.iter().all(|&(d, t)| t == folders && d <= t),
        "{seen:?}"
    );
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
    assert_eq!(seen.first(), Some(&(0, folders)));
    assert_eq!(seen.last(), Some(&(folders, folders)));
}

#[test]
fn no_bar_is_printed_when_stdout_is_not_a_terminal() {
    let fx = Fixture::new();
    fx.mount();
    for i in 0..300 {
        write_file(&fx.m(format!("d/f{i}")), b"x\n", 0o644);
    }
    fx.turn("two");
    let bar_marks = ["restoring", "sweeping", "baseline", "\r", "\x1b["];
    let quiet = |run: &Run| {
        assert!(
            !bar_marks.iter().any(|m| run.stderr.contains(m)),
            "a bar was drawn into a pipe: {run}"
        );
    };
    quiet(&fx.opfs_c(&["rewind", "1"]).ok());
    quiet(&fx.opfs_c(&["export"]).ok());
    quiet(&fx.opfs_c(&["verify"]).ok());
    quiet(&fx.opfs_c(&["gc", "--dry-run"]).ok());
    fx.umount();
    quiet(&fx.opfs_p(&["gc", "--keep", "1"]).ok());
}
