//! The daemon's background export keeps its repository open between turns
//! (`docs/design.md` "The export keeps its repository open"), on real
//! mounts: it does not open the repository again for each turn, and a
//! repository changed under it (replaced, repacked) is opened again, so
//! every turn's commit stays complete.

// A failed unwrap is a failed test, with the error in the message.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::opens::Opens;
use common::*;

/// The daemon's default export repository.
fn export_dir(fx: &Fixture) -> PathBuf {
    fx.state_dir().join("export.git")
}

/// Waits (at most 60 s, under load) until the background export has
/// written `rel` (a ref such as `refs/opfs/turns/2`) in `git_dir`: its
/// loose file, or its line in `packed-refs` (an export that writes a
/// baseline packs the repository, refs included). Looks at the files
/// only: running git would open the repository itself.
fn wait_ref(git_dir: &Path, rel: &str) {
    let path = git_dir.join(rel);
    let packed = git_dir.join("packed-refs");
    let suffix = format!(" {rel}");
    assert!(
        wait_for(Duration::from_secs(60), || path.exists()
            || fs::read_to_string(&packed)
                .is_ok_and(|t| t.lines().any(|l| l.ends_with(&suffix)))),
        "the background export did not write {rel} within 60 s"
    );
}

/// Sets the modification time of the repository's pack directory and
/// `packed-refs` an hour back: what they look like a while after the
/// baseline was packed (a handle is kept only once they are some seconds
/// old, see `repo::Stamp`), without waiting for the clock.
fn age_packs(git_dir: &Path) {
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - 3600;
    for p in [git_dir.join("objects/pack"), git_dir.join("packed-refs")] {
        if !p.exists() {
            continue;
        }
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        let t = libc::timespec {
            tv_sec: hour_ago,
            tv_nsec: 0,
        };
        // SAFETY: a valid C string and two timespecs.
        let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) };
        assert_eq!(r, 0, "utimensat {}", p.display());
    }
}

/// Waits for the background export of the baseline to end (its packing
/// included: `opfs export` waits for the export lock), then ages the packs.
fn settle(fx: &Fixture, git_dir: &Path) {
    fx.opfs_c(&["export"]).ok();
    age_packs(git_dir);
}

/// One turn of edits through the mount, closed; waits for its export and
/// returns the project as it ended.
fn edit_and_close(fx: &Fixture, git_dir: &Path, n: u64) -> Manifest {
    fs::write(fx.m("a.txt"), format!("a in turn {n}\n")).unwrap();
    fs::write(fx.m(format!("d/f{n}.txt")), format!("new in turn {n}\n")).unwrap();
    let end = files(fx.tree_without_git());
    assert_eq!(fx.turn(&format!("turn {}", n + 1)), n + 1);
    wait_ref(git_dir, &format!("refs/opfs/turns/{n}"));
    end
}

/// The files of the tree at `rev` in `git_dir`, as git shows them.
fn git_tree(git_dir: &Path, rev: &str) -> Manifest {
    let work = git_dir.with_extension("work");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).unwrap();
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .arg("--work-tree")
        .arg(&work)
        .args(["checkout", "-f", rev, "--", "."])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git checkout {rev}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = files(manifest_without_git(&work));
    fs::remove_dir_all(&work).unwrap();
    m
}

/// The files of a manifest (git holds no directories of their own).
fn files(m: Manifest) -> Manifest {
    m.into_iter()
        .filter(|(_, e)| matches!(e, Entry::File { .. }))
        .collect()
}

fn fsck(git_dir: &Path) {
    let out = git_in(git_dir, &["fsck", "--strict", "--no-dangling"]);
    assert!(
        out.status.success(),
        "git fsck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn project(fx: &Fixture) {
    write_file(&fx.p("a.txt"), b"a\n", 0o644);
    fs::create_dir(fx.p("d")).unwrap();
    write_file(&fx.p("d/keep.txt"), b"kept\n", 0o644);
}

/// Turn after turn, the background export reuses the repository it
/// opened: no turn's export opens the repository's `config` again (gix
/// reads it at each open), nor the index (its read-only connection is
/// kept too), and every commit holds its turn's end.
#[test]
fn the_background_export_opens_its_repository_once_across_turns() {
    require_fuse();
    let fx = Fixture::new();
    project(&fx);
    fx.mount();
    let git_dir = export_dir(&fx);
    settle(&fx, &git_dir);
    // The first turn's export opens the repository and keeps it.
    edit_and_close(&fx, &git_dir, 1);
    let opens = Opens::watch(&git_dir);
    let state_opens = Opens::watch(&fx.state_dir());
    let mut ends = Vec::new();
    for n in 2..=4 {
        ends.push((n, edit_and_close(&fx, &git_dir, n)));
    }
    let opened = opens.take();
    let configs = opened.iter().filter(|n| *n == "config").count();
    assert_eq!(
        configs, 0,
        "the exports of turns 2 to 4 opened the repository again: {opened:?}"
    );
    drop(opens);
    let state_opened = state_opens.take();
    // SQLite reuses this process's descriptor of `index.db` itself; each
    // new connection opens the write-ahead log.
    let index = state_opened
        .iter()
        .filter(|n| n.starts_with("index.db"))
        .count();
    assert_eq!(
        index, 0,
        "the exports of turns 2 to 4 opened the index again: {state_opened:?}"
    );
    drop(state_opens);
    fsck(&git_dir);
    for (n, end) in ends {
        assert_manifest_eq(
            &format!("turn {n}"),
            &end,
            &git_tree(&git_dir, &format!("refs/opfs/turns/{n}")),
        );
    }
}

/// The id of `rev` (`refs/opfs/turns/1^{tree}`, `refs/opfs/turns/1:d`).
fn rev_id(git_dir: &Path, rev: &str) -> String {
    String::from_utf8(git_in_ok(git_dir, &["rev-parse", rev]))
        .unwrap()
        .trim()
        .to_string()
}

/// The export of a turn starts from the trees the previous turn's export
/// wrote, remembered (`docs/design.md` "The export keeps the trees it
/// wrote"), and walks the history (for relabelled turns) through the
/// commits it wrote, remembered too: it opens none of their loose objects
/// to read them back, and its commit still holds the turn's end.
#[test]
fn the_export_of_a_turn_reads_back_neither_the_trees_nor_the_commits_the_last_ones_wrote() {
    require_fuse();
    let fx = Fixture::new();
    project(&fx);
    fx.mount();
    let git_dir = export_dir(&fx);
    settle(&fx, &git_dir);
    // Turn 1 changes the root (a.txt) and d/ (d/f1.txt): its export writes
    // both trees as loose objects.
    edit_and_close(&fx, &git_dir, 1);
    let written: Vec<String> = [
        "refs/opfs/turns/1^{tree}",
        "refs/opfs/turns/1:d",
        "refs/opfs/turns/1",
    ]
    .iter()
    .map(|rev| rev_id(&git_dir, rev))
    .collect();
    let mut watches = Vec::new();
    for id in &written {
        let loose = git_dir.join("objects").join(&id[..2]).join(&id[2..]);
        assert!(loose.exists(), "object {id} of turn 1 is not loose");
        watches.push((id, Opens::watch(loose.parent().unwrap())));
    }
    // Turn 2 changes both again: its edit starts from turn 1's trees.
    let end = edit_and_close(&fx, &git_dir, 2);
    for (id, opens) in &watches {
        let opened = opens.take();
        assert!(
            !opened.iter().any(|n| *n == id[2..]),
            "the export of turn 2 read back {id}, written by turn 1's: {opened:?}"
        );
    }
    drop(watches);
    fsck(&git_dir);
    assert_manifest_eq("turn 2", &end, &git_tree(&git_dir, "refs/opfs/turns/2"));
}

/// A repository removed under the daemon (and made again by its next
/// export), or repacked by hand, is not written through the handle kept
/// from before: that handle would take the objects of its deleted pack
/// for present and not write them, leaving commits with missing trees and
/// blobs.
#[test]
fn a_repository_replaced_or_repacked_under_the_daemon_is_opened_again() {
    require_fuse();
    let fx = Fixture::new();
    project(&fx);
    fx.mount();
    let git_dir = export_dir(&fx);
    settle(&fx, &git_dir);
    edit_and_close(&fx, &git_dir, 1);
    edit_and_close(&fx, &git_dir, 2);

    // Repacked by hand: the loose objects of turns 1-2 move to a pack,
    // the old pack goes.
    let out = git_in(&git_dir, &["gc", "--prune=now", "--quiet"]);
    assert!(out.status.success(), "git gc: {out:?}");
    let end3 = edit_and_close(&fx, &git_dir, 3);
    fsck(&git_dir);
    assert_manifest_eq("turn 3", &end3, &git_tree(&git_dir, "refs/opfs/turns/3"));

    // Removed: the next export writes a new baseline and every turn kept,
    // the objects the old packs held included.
    settle(&fx, &git_dir);
    edit_and_close(&fx, &git_dir, 4);
    fs::remove_dir_all(&git_dir).unwrap();
    let end5 = edit_and_close(&fx, &git_dir, 5);
    fsck(&git_dir);
    assert_manifest_eq("turn 5", &end5, &git_tree(&git_dir, "refs/opfs/turns/5"));
}
