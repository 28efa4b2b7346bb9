//! Unit tests of the base layer, the change walk and the merge, over a real
//! project directory and a hand-made upper layer (the overlay filesystem
//! that writes upper layers is tested in `fs/tests/overlay.rs`).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use opfs_fs::overlay::{Kind, Lower, LowerOpen};
use opfs_fs::{Mutation, MutationHook};

use super::base::Base;
use super::changes::{changes, Change, Entry};
use super::merge::{merge, MergeOptions};
use super::{Creator, Meta, Worktree};
use crate::capture::{Journal, NewTurn};
use crate::restore::ConflictReason;
use crate::store::{index::now_ns, StateDir};
use crate::tree::Dir;

struct Setup {
    _tmp: tempfile::TempDir,
    project: std::path::PathBuf,
    state: StateDir,
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
    setup_with(&[])
}

/// [`setup`] with `extra` files (path, bytes) in the project too. Every
/// file is made before the journal opens: a file made outside the mount
/// within a clock tick of a turn's start counts as born in that turn
/// (`capture::birth`), so one made between turns may have no known state
/// at the next turn's start.
fn setup_with(extra: &[(&str, &[u8])]) -> Setup {
    let tmp = tempfile::tempdir().expect("tempdir");
    let project = tmp.path().join("project");
    fs::create_dir_all(project.join("d/sub")).expect("mkdir");
    fs::write(project.join("a"), b"a0").expect("write");
    fs::write(project.join("d/b"), b"b0").expect("write");
    fs::write(project.join("d/c"), b"c0").expect("write");
    fs::write(project.join("d/sub/s"), b"s0").expect("write");
    fs::write(project.join("keep"), b"k0").expect("write");
    for (path, bytes) in extra {
        fs::write(project.join(path), bytes).expect("write");
    }
    let project = fs::canonicalize(&project).expect("canon");
    let state = StateDir::for_project(&tmp.path().join("home"), &project);
    let journal = Journal::open(&state, false).expect("journal");
    let lock = crate::state::lock::StateLock::try_acquire(&state)
        .expect("lock")
        .expect("unheld");
    Setup {
        _tmp: tmp,
        project,
        state,
        journal,
        lock,
    }
}

fn write_through(s: &Setup, path: &str, bytes: &[u8]) {
    s.journal
        .before(&Mutation::Content {
            path: path.as_bytes(),
        })
        .expect("hook");
    fs::write(s.project.join(path), bytes).expect("write");
}

fn base_of(s: &Setup, turn: u64) -> Base {
    s.journal.apply_pending().expect("commit");
    let since = s.journal.with_index(|ix| ix.turn(turn)).expect("turn");
    let since = since.map_or_else(now_ns, |t| t.started_at);
    Base::open(&s.state, turn, since, Box::new(|| {}), None).expect("base")
}

fn read(base: &Base, path: &str) -> Option<Vec<u8>> {
    super::changes::base_bytes(base, path.as_bytes()).expect("read")
}

fn names(base: &Base, dir: &str) -> Vec<String> {
    let mut n: Vec<String> = base
        .readdir(dir.as_bytes())
        .expect("readdir")
        .unwrap_or_default()
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn the_base_is_frozen_against_later_changes_through_the_mount() {
    let s = setup();
    let base_turn = s.journal.open_turn();
    // The base is the project when `base_turn` began; change it since.
    write_through(&s, "a", b"a1");
    s.journal
        .before(&Mutation::Remove { path: b"d/c" })
        .expect("hook");
    fs::remove_file(s.project.join("d/c")).expect("rm");
    s.journal
        .before(&Mutation::Create { path: b"new" })
        .expect("hook");
    fs::write(s.project.join("new"), b"n").expect("write");
    let base = base_of(&s, base_turn);
    assert_eq!(read(&base, "a").as_deref(), Some(&b"a0"[..]));
    assert_eq!(read(&base, "d/c").as_deref(), Some(&b"c0"[..]));
    assert_eq!(read(&base, "keep").as_deref(), Some(&b"k0"[..]));
    assert_eq!(read(&base, "new"), None);
    assert_eq!(names(&base, ""), ["a", "d", "keep"]);
    assert_eq!(names(&base, "d"), ["b", "c", "sub"]);
    assert_eq!(
        base.getattr(b"d").expect("getattr").map(|a| a.kind),
        Some(Kind::Dir)
    );

    // A change made after the base was opened is seen too (the records
    // moved on, so the base reloads them before answering).
    write_through(&s, "keep", b"k1");
    s.journal.apply_pending().expect("commit");
    assert_eq!(read(&base, "keep").as_deref(), Some(&b"k0"[..]));
    // One whose record is still only in the capture log (not committed
    // to the index): the watch on the records sees the log's write too.
    write_through(&s, "d/b", b"b1");
    assert_eq!(read(&base, "d/b").as_deref(), Some(&b"b0"[..]));
    write_through(&s, "d/sub/s", b"s1");
    assert_eq!(names(&base, "d/sub"), ["s"]);
    assert_eq!(read(&base, "d/sub/s").as_deref(), Some(&b"s0"[..]));
    assert!(base.drifted().is_empty(), "{:?}", base.drifted());
}

/// A project file opened for a handle before a capture of it reads the
/// base's bytes after the capture, the record still only in the capture
/// log: the look after the read notices the log's write.
#[test]
fn a_file_opened_before_a_capture_reads_the_base_after_it() {
    let s = setup();
    let base_turn = s.journal.open_turn();
    let base = base_of(&s, base_turn);
    let Some(LowerOpen::File(file)) = base.open(b"keep").expect("open") else {
        panic!("keep is not opened as a file");
    };
    let mut buf = vec![0u8; 64];
    let n = file.read_at(0, &mut buf).expect("read");
    assert_eq!(&buf[..n], b"k0");
    write_through(&s, "keep", b"k1, longer");
    let n = file.read_at(0, &mut buf).expect("read");
    assert_eq!(&buf[..n], b"k0", "after the capture");
}

#[test]
fn a_change_behind_the_mount_is_reported_as_drift() {
    let s = setup();
    s.journal
        .next_turn(&s.excl(), NewTurn::agent())
        .expect("turn");
    let base_turn = s.journal.open_turn();
    let base = base_of(&s, base_turn);
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(s.project.join("keep"), b"behind").expect("write");
    assert_eq!(read(&base, "keep").as_deref(), Some(&b"behind"[..]));
    assert_eq!(base.drifted(), vec![b"keep".to_vec()]);
}

fn upper_of(s: &Setup, name: &str, base_turn: u64) -> Worktree {
    let wt = Worktree::of(&s.state, name);
    let since = s
        .journal
        .with_index(|ix| ix.turn(base_turn))
        .expect("turn")
        .map_or_else(now_ns, |t| t.started_at);
    wt.create(&Meta {
        name: name.into(),
        base_turn,
        base_ns: since,
        created_ns: now_ns(),
        mountpoint: wt.default_mountpoint(),
        created_by: Creator::User,
    })
    .expect("create");
    wt
}

fn put(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(p, bytes).expect("write");
}

fn manifest(root: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).expect("read_dir") {
            let p = e.expect("entry").path();
            let rel = p
                .strip_prefix(root)
                .expect("prefix")
                .as_os_str()
                .as_bytes()
                .to_vec();
            if p.is_dir() {
                stack.push(p.clone());
                out.insert(rel, b"<dir>".to_vec());
            } else {
                out.insert(rel, fs::read(&p).expect("read"));
            }
        }
    }
    out
}

/// Each change as (path, kind before, kind after).
fn kinds(found: &[Change]) -> Vec<(String, &'static str, &'static str)> {
    found
        .iter()
        .map(|c| {
            (
                String::from_utf8_lossy(&c.path).into_owned(),
                c.before.kind_name(),
                c.after.kind_name(),
            )
        })
        .collect()
}

#[test]
fn changes_of_an_upper_layer_with_whiteouts_and_an_opaque_directory() {
    let s = setup();
    let base_turn = s.journal.open_turn();
    let wt = upper_of(&s, "w", base_turn);
    let up = wt.upper();
    put(&up, "d/b", b"b-new"); // modified (d copied up as a parent)
    put(&up, "d/.wh.c", b""); // deleted
    put(&up, "keep", b"k0"); // copied up, unchanged
    put(&up, "n/new", b"n"); // new tree
    put(&up, "d/sub/.wh..wh..opq", b""); // d/sub made again, empty
    put(&up, "d/sub/t", b"t");
    fs::set_permissions(up.join("d"), fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::set_permissions(s.project.join("d"), fs::Permissions::from_mode(0o755)).expect("chmod");
    let base = base_of(&s, base_turn);
    let found = changes(&Dir::open(&up).expect("upper"), &base).expect("changes");
    let summary = kinds(&found);
    assert_eq!(
        summary,
        [
            ("d/b".to_string(), "file", "file"),
            ("d/c".to_string(), "file", "absent"),
            ("d/sub/s".to_string(), "file", "absent"),
            ("d/sub/t".to_string(), "absent", "file"),
            ("n".to_string(), "absent", "dir"),
            ("n/new".to_string(), "absent", "file"),
        ]
    );
    assert!(matches!(found[0].before, Entry::File { size: 2, .. }));
}

/// Found by `tests/model.rs` (`worktree_agrees_with_model`): directories
/// exchanged in a worktree leave an opaque `d` whose copied-up child
/// directory `sub` holds other names than the base's `d/sub`; below the
/// opaque directory nothing of the base shows at any depth, so the base's
/// `d/sub/s` is gone too, and a base directory under a name that became a
/// file loses its children (the merge then planned to remove `d/sub`
/// "holding entries opfs did not record").
#[test]
fn regression_below_an_opaque_directory_no_base_entry_shows_at_any_depth() {
    let s = setup();
    let base_turn = s.journal.open_turn();
    let wt = upper_of(&s, "w", base_turn);
    let up = wt.upper();
    put(&up, "d/.wh..wh..opq", b""); // d replaced whole
    put(&up, "d/sub/u", b"u"); // d/sub again, but no d/sub/s
    put(&up, "d/b", b"b0"); // d/b again, unchanged
    fs::create_dir(up.join("a")).expect("mkdir"); // a file became a directory
    put(&up, "a/x/y", b"y"); // and beneath it a path through a base file
    let base = base_of(&s, base_turn);
    let found = changes(&Dir::open(&up).expect("upper"), &base).expect("changes");
    let summary = kinds(&found);
    assert_eq!(
        summary,
        [
            ("a".to_string(), "file", "dir"),
            ("a/x".to_string(), "absent", "dir"),
            ("a/x/y".to_string(), "absent", "file"),
            ("d/c".to_string(), "file", "absent"),
            ("d/sub/s".to_string(), "file", "absent"),
            ("d/sub/u".to_string(), "absent", "file"),
        ]
    );
}

#[test]
fn merge_applies_the_worktree_as_one_rewindable_turn_and_keeps_conflicts() {
    let s = setup();
    let base_turn = s.journal.open_turn();
    let before = manifest(&s.project);
    let wt = upper_of(&s, "w", base_turn);
    let up = wt.upper();
    put(&up, "d/b", b"b-new");
    put(&up, "d/.wh.c", b"");
    put(&up, "n/new", b"n");
    put(&up, "a", b"a-worktree"); // the project changes `a` too: conflict
    fs::set_permissions(up.join("d"), fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::set_permissions(s.project.join("d"), fs::Permissions::from_mode(0o755)).expect("chmod");
    write_through(&s, "a", b"a-project");
    s.journal
        .next_turn(&s.excl(), NewTurn::agent())
        .expect("turn");
    let project_before_merge = manifest(&s.project);

    let dry = merge(
        &s.journal,
        &s.excl(),
        "w",
        MergeOptions {
            dry_run: true,
            partial: true,
            ..MergeOptions::default()
        },
    )
    .expect("dry run");
    assert_eq!(
        manifest(&s.project),
        project_before_merge,
        "a dry run writes nothing"
    );
    assert_eq!(dry.merged, ["d/b", "d/c", "n", "n/new"]);
    assert_eq!(dry.conflicts.len(), 1);
    assert_eq!(dry.conflicts[0].path, b"a");
    assert!(matches!(
        dry.conflicts[0].reason,
        ConflictReason::ChangedInProject { base } if base == base_turn
    ));

    let partial = MergeOptions {
        partial: true,
        ..MergeOptions::default()
    };
    let report = merge(&s.journal, &s.excl(), "w", partial).expect("merge");
    let turn = report.turn.expect("a merge turn");
    assert_eq!(report.merged, dry.merged);
    assert_eq!(report.conflicts.len(), 1);
    let kind = s
        .journal
        .with_index(|ix| ix.turn(turn))
        .expect("turn")
        .expect("exists")
        .kind;
    assert_eq!(kind, crate::record::TurnKind::Merge);
    let after = manifest(&s.project);
    assert_eq!(
        after.get(&b"d/b"[..]).map(Vec::as_slice),
        Some(&b"b-new"[..])
    );
    assert!(!after.contains_key(&b"d/c"[..]));
    assert_eq!(after.get(&b"n/new"[..]).map(Vec::as_slice), Some(&b"n"[..]));
    assert_eq!(
        after.get(&b"a"[..]).map(Vec::as_slice),
        Some(&b"a-project"[..])
    );

    // The merge is a turn like any other: rewinding to its start undoes it.
    let r = crate::rewind::rewind(&s.journal, &s.excl(), turn, Default::default()).expect("rewind");
    assert!(r.conflicts.is_empty(), "{:?}", r.conflicts);
    assert_eq!(manifest(&s.project), project_before_merge);
    // And the base turn is the project before everything.
    crate::rewind::rewind(&s.journal, &s.excl(), base_turn, Default::default()).expect("rewind");
    assert_eq!(manifest(&s.project), before);

    // --force takes the worktree's side.
    let forced = merge(
        &s.journal,
        &s.excl(),
        "w",
        MergeOptions {
            force: true,
            ..MergeOptions::default()
        },
    )
    .expect("forced merge");
    assert!(forced.conflicts.is_empty(), "{:?}", forced.conflicts);
    assert_eq!(fs::read(s.project.join("a")).expect("read"), b"a-worktree");
}

#[test]
fn text_changed_on_both_sides_is_merged_three_way_when_clean() {
    let s = setup_with(&[
        ("t", b"one\ntwo\nthree\nfour\nfive\n"),
        ("u", b"one\ntwo\nthree\n"),
    ]);
    s.journal
        .next_turn(&s.excl(), NewTurn::agent())
        .expect("turn");
    let base_turn = s.journal.open_turn();
    let wt = upper_of(&s, "w", base_turn);
    let up = wt.upper();
    put(&up, "t", b"one\ntwo\nthree\nfour\nFIVE (worktree)\n");
    put(&up, "u", b"one\nTWO (worktree)\nthree\n");
    write_through(&s, "t", b"ONE (project)\ntwo\nthree\nfour\nfive\n");
    write_through(&s, "u", b"one\nTWO (project)\nthree\n");
    let partial = MergeOptions {
        partial: true,
        ..MergeOptions::default()
    };
    let report = merge(&s.journal, &s.excl(), "w", partial).expect("merge");
    assert_eq!(report.three_way, ["t"]);
    assert!(
        report.merged.contains(&"t".to_string()),
        "{:?}",
        report.merged
    );
    assert_eq!(
        fs::read(s.project.join("t")).expect("read"),
        b"ONE (project)\ntwo\nthree\nfour\nFIVE (worktree)\n"
    );
    assert_eq!(report.conflicts.len(), 1, "{:?}", report.conflicts);
    assert_eq!(report.conflicts[0].path, b"u");
    assert_eq!(
        fs::read(s.project.join("u")).expect("read"),
        b"one\nTWO (project)\nthree\n"
    );
}
