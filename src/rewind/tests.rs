//! Unit tests of the rewind planner and executor over a real directory.

use super::*;
use crate::store::StateDir;
use opfs_fs::{Mutation, MutationHook};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

/// These tests check each path's outcome: a conflict leaves that path
/// and the rest is restored (`partial`); the default, a conflict
/// restoring nothing, is tested on a mount (`tests/rewind.rs`).
fn dry() -> RewindOptions {
    RewindOptions {
        dry_run: true,
        partial: true,
        ..RewindOptions::default()
    }
}

fn real() -> RewindOptions {
    RewindOptions {
        partial: true,
        ..RewindOptions::default()
    }
}

fn manifest(root: &Path) -> BTreeMap<Vec<u8>, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).expect("read_dir") {
            let e = e.expect("entry");
            let p = e.path();
            let rel = p
                .strip_prefix(root)
                .expect("prefix")
                .as_os_str()
                .as_bytes()
                .to_vec();
            let md = fs::symlink_metadata(&p).expect("lstat");
            let desc = if md.file_type().is_symlink() {
                format!("link {:?}", fs::read_link(&p).expect("readlink"))
            } else if md.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", md.permissions().mode() & 0o7777)
            } else {
                format!(
                    "file {:o} {}",
                    md.permissions().mode() & 0o7777,
                    blake3::hash(&fs::read(&p).expect("read")).to_hex()
                )
            };
            out.insert(rel, desc);
        }
    }
    out
}

struct Setup {
    _tmp: tempfile::TempDir,
    project: std::path::PathBuf,
    journal: Journal,
    /// Held as a direct command holds it: nothing is mounted.
    lock: crate::state::lock::StateLock,
}

impl Setup {
    /// The exclusive access turns, rewinds and merges need.
    fn excl(&self) -> crate::capture::Exclusive<'_> {
        crate::capture::Exclusive::unmounted(&self.lock)
    }
}

fn setup() -> Setup {
    setup_with(|_| {})
}

/// [`setup`], with `more` run on the project before the journal opens: a
/// file made after the first turn began would be an inode born outside the
/// mount during that turn, whose pre-image is unknown (`capture/birth.rs`).
fn setup_with(more: impl FnOnce(&Path)) -> Setup {
    let tmp = tempfile::tempdir().expect("tempdir");
    let project = tmp.path().join("project");
    fs::create_dir_all(project.join("src/deep")).expect("mkdir");
    fs::write(project.join("src/main.rs"), b"fn main() {}\n").expect("write");
    fs::write(project.join("src/deep/x.txt"), b"x").expect("write");
    fs::write(project.join("run.sh"), b"#!/bin/sh\n").expect("write");
    fs::set_permissions(project.join("run.sh"), fs::Permissions::from_mode(0o755)).expect("chmod");
    symlink("src/main.rs", project.join("link")).expect("symlink");
    fs::create_dir(project.join("empty")).expect("mkdir");
    more(&project);
    let project = fs::canonicalize(&project).expect("canon");
    let state = StateDir::for_project(&tmp.path().join("home"), &project);
    let journal = Journal::open(&state, false).expect("journal");
    let lock = crate::state::lock::StateLock::try_acquire(&state)
        .expect("lock")
        .expect("unheld");
    Setup {
        _tmp: tmp,
        project,
        journal,
        lock,
    }
}

#[test]
fn planner_restores_every_kind_of_change() {
    let s = setup();
    let before = manifest(&s.project);
    let j = &s.journal;
    let p = &s.project;
    // Modify a file in place.
    j.before(&Mutation::Content {
        path: b"src/main.rs",
    })
    .expect("hook");
    fs::write(p.join("src/main.rs"), b"changed").expect("write");
    // chmod.
    j.before(&Mutation::Metadata { path: b"run.sh" })
        .expect("hook");
    fs::set_permissions(p.join("run.sh"), fs::Permissions::from_mode(0o600)).expect("chmod");
    // Symlink retargeted.
    j.before(&Mutation::Remove { path: b"link" }).expect("hook");
    fs::remove_file(p.join("link")).expect("rm");
    j.before(&Mutation::Create { path: b"link" }).expect("hook");
    symlink("elsewhere", p.join("link")).expect("symlink");
    // Empty dir removed.
    j.before(&Mutation::Remove { path: b"empty" })
        .expect("hook");
    fs::remove_dir(p.join("empty")).expect("rmdir");
    // Directory renamed.
    j.before(&Mutation::Rename {
        from: b"src",
        to: b"lib",
        exchange: false,
    })
    .expect("hook");
    fs::rename(p.join("src"), p.join("lib")).expect("mv");
    // New tree.
    j.before(&Mutation::Create { path: b"new" }).expect("hook");
    fs::create_dir(p.join("new")).expect("mkdir");
    j.before(&Mutation::Create { path: b"new/f" })
        .expect("hook");
    fs::write(p.join("new/f"), b"f").expect("write");
    let after = manifest(p);
    assert_ne!(before, after);

    let dry = rewind(j, &s.excl(), 1, dry()).expect("dry run");
    assert_eq!(dry.turn, Some(2));
    assert_eq!(manifest(p), after, "a dry run writes nothing");

    let report = rewind(j, &s.excl(), 1, real()).expect("rewind");
    assert!(report.conflicts.is_empty(), "{:?}", report.conflicts);
    assert_eq!(report.turn, Some(2));
    assert_eq!(report.open_turn, 3);
    assert_eq!(dry.plan.len(), report.plan.len());
    assert_eq!(manifest(p), before);

    // Redo: rewinding to the rewind's own turn restores the state before it.
    let redo = rewind(j, &s.excl(), 2, real()).expect("redo");
    assert!(redo.conflicts.is_empty(), "{:?}", redo.conflicts);
    assert_eq!(manifest(p), after);
    // And a no-op rewind to the turn just opened changes nothing.
    let open = j.open_turn();
    let noop = rewind(j, &s.excl(), open, real()).expect("noop");
    assert!(noop.restored.is_empty());
    assert_eq!(manifest(p), after);
}

#[test]
fn foreign_entries_and_bad_turns_are_reported() {
    let s = setup();
    let j = &s.journal;
    j.before(&Mutation::Create { path: b"made" }).expect("hook");
    fs::create_dir(s.project.join("made")).expect("mkdir");
    // Created behind opfs's back:
    fs::write(s.project.join("made/user-file"), b"mine").expect("write");
    let report = rewind(j, &s.excl(), 1, real()).expect("rewind");
    assert_eq!(report.conflicts.len(), 1, "{:?}", report.conflicts);
    assert!(report.conflicts[0]
        .reason
        .to_string()
        .contains("made/user-file"));
    assert!(s.project.join("made/user-file").exists());
    assert!(matches!(
        rewind(j, &s.excl(), 0, real()),
        Err(RewindError::Turn(TurnError::Unknown { .. }))
    ));
    assert!(matches!(
        rewind(j, &s.excl(), 99, dry()),
        Err(RewindError::Turn(TurnError::Unknown { .. }))
    ));
}

#[test]
fn corrupt_blob_is_a_conflict_and_never_written() {
    let big = vec![b'#'; crate::store::INLINE_MAX as usize + 1];
    let s = setup_with(|p| fs::write(p.join("big"), &big).expect("write"));
    let j = &s.journal;
    j.before(&Mutation::Content { path: b"run.sh" })
        .expect("hook");
    j.before(&Mutation::Content { path: b"big" }).expect("hook");
    fs::write(s.project.join("run.sh"), b"new content").expect("write");
    fs::write(s.project.join("big"), b"new content").expect("write");
    // A blob file with other bytes, and inline content with other bytes.
    let blob = *blake3::hash(&big).as_bytes();
    fs::write(j.blobs().path_of(&blob), b"garbage!!!").expect("corrupt");
    j.apply_pending().expect("commit");
    let small = *blake3::hash(b"#!/bin/sh\n").as_bytes();
    let conn = rusqlite::Connection::open(j.state().index_path()).expect("db");
    let n = conn
        .execute(
            "UPDATE blobs SET data = X'00' WHERE hash = ?1",
            [&small[..]],
        )
        .expect("corrupt inline");
    assert_eq!(n, 1, "the small pre-image is stored inline");
    let report = rewind(j, &s.excl(), 1, real()).expect("rewind");
    assert_eq!(report.conflicts.len(), 2, "{:?}", report.conflicts);
    for c in &report.conflicts {
        assert!(
            c.reason.to_string().contains("corrupt"),
            "{:?}",
            report.conflicts
        );
    }
    for f in ["run.sh", "big"] {
        assert_eq!(fs::read(s.project.join(f)).expect("read"), b"new content");
    }
}

#[test]
fn the_report_reads_back_from_its_json() {
    let s = setup();
    let j = &s.journal;
    j.before(&Mutation::Content {
        path: b"src/main.rs",
    })
    .expect("hook");
    fs::write(s.project.join("src/main.rs"), b"changed").expect("write");
    let report = rewind(j, &s.excl(), 1, dry()).expect("dry run");
    let value = serde_json::to_value(&report).expect("json");
    let mut first = value["plan"][0].clone();
    let detail = first["detail"].as_str().unwrap_or_default().to_string();
    assert!(
        detail.starts_with("file 13 bytes 644 ") && detail.len() == "file 13 bytes 644 ".len() + 12,
        "the target in words: {detail:?}"
    );
    if let Some(m) = first.as_object_mut() {
        m.remove("detail");
    }
    assert_eq!(
        first,
        serde_json::json!({"path": "src/main.rs", "current": "file", "target": "file", "steps": ["rewrite"]})
    );
    let back: RewindReport = serde_json::from_value(value.clone()).expect("parse");
    assert_eq!(serde_json::to_value(&back).expect("json"), value);
}

#[test]
fn rewind_progress_grows_one_unit_at_a_time_to_its_total() {
    let s = setup();
    let j = &s.journal;
    for i in 0..20 {
        let name = format!("new{i}");
        j.before(&Mutation::Create {
            path: name.as_bytes(),
        })
        .expect("hook");
        fs::write(s.project.join(&name), b"n").expect("write");
    }
    j.before(&Mutation::Content {
        path: b"src/main.rs",
    })
    .expect("hook");
    fs::write(s.project.join("src/main.rs"), b"changed").expect("write");

    let mut dry_calls = 0;
    rewind_with_progress(j, &s.excl(), 1, dry(), &mut |_, _| dry_calls += 1).expect("dry run");
    assert_eq!(
        dry_calls, 0,
        "a dry run restores nothing, so reports nothing"
    );

    let mut seen: Vec<(u64, u64)> = Vec::new();
    let report = rewind_with_progress(j, &s.excl(), 1, real(), &mut |d, t| seen.push((d, t)))
        .expect("rewind");
    assert!(report.conflicts.is_empty(), "{:?}", report.conflicts);
    // Each path recorded, each removal, each path restored: 20 created
    // files go, src/main.rs is rewritten.
    let total = crate::restore::apply::work_units(&report.plan);
    assert!(total >= 21 * 2 + 20, "{total}");
    assert!(seen.iter().all(|&(d, t)| t == total && d <= t), "{seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0].0 <= w[1].0),
        "done never goes back: {seen:?}"
    );
    assert_eq!(
        seen.last(),
        Some(&(total, total)),
        "the last call reaches the total"
    );
    let distinct: std::collections::BTreeSet<u64> = seen.iter().map(|&(d, _)| d).collect();
    assert_eq!(
        distinct.len() as u64,
        total,
        "every unit is reported: {seen:?}"
    );
}
