//! A property test of the overlay against a reference: a random lower tree,
//! then a random sequence of operations (write, append, truncate, unlink,
//! mkdir, rmdir, rename, symlink, chmod, remount) applied both to the
//! overlay mount and to a plain directory that started as a copy of the
//! lower tree. After each operation the outcome (the errno, exactly) and
//! the whole merged view (types, modes, bytes, targets) must match the
//! plain directory's; at the end the lower dir is unchanged and the hook's
//! stream explains the upper dir. The reference is a real directory rather
//! than an in-memory map so Linux decides which errno wins when several
//! apply. Shrinking finds a minimal failing sequence.

#![allow(clippy::unwrap_used)]

#[path = "overlay_support/mod.rs"]
mod support;

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use proptest::prelude::*;

use support::{manifest, Overlay};

/// Paths from a small pool, so operations collide often.
fn path() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec!["a", "b", "c"]);
    prop::collection::vec(name, 1..=3).prop_map(|v| v.join("/"))
}

#[derive(Debug, Clone)]
enum Op {
    Write(String, Vec<u8>),
    Append(String, Vec<u8>),
    Truncate(String, u64),
    Unlink(String),
    Mkdir(String),
    Rmdir(String),
    Rename(String, String),
    Symlink(String),
    Chmod(String, u32),
    Remount,
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..16)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (path(), data()).prop_map(|(p, d)| Op::Write(p, d)),
        2 => (path(), data()).prop_map(|(p, d)| Op::Append(p, d)),
        1 => (path(), 0u64..20).prop_map(|(p, n)| Op::Truncate(p, n)),
        2 => path().prop_map(Op::Unlink),
        2 => path().prop_map(Op::Mkdir),
        2 => path().prop_map(Op::Rmdir),
        4 => (path(), path()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => path().prop_map(Op::Symlink),
        1 => (path(), prop::sample::select(vec![0o600u32, 0o644, 0o755])).prop_map(|(p, m)| Op::Chmod(p, m)),
        1 => Just(Op::Remount),
    ]
}

/// A lower tree: entries created in order, skipping ones that conflict.
#[derive(Debug, Clone)]
enum Make {
    File(String, Vec<u8>),
    Dir(String),
    Link(String),
}

fn lower_tree() -> impl Strategy<Value = Vec<Make>> {
    prop::collection::vec(
        prop_oneof![
            3 => (path(), data()).prop_map(|(p, d)| Make::File(p, d)),
            3 => path().prop_map(Make::Dir),
            1 => path().prop_map(Make::Link),
        ],
        0..10,
    )
}

fn build(root: &Path, tree: &[Make]) {
    for m in tree {
        let _ = match m {
            Make::File(p, d) => fs::write(root.join(p), d),
            Make::Dir(p) => fs::create_dir(root.join(p)),
            Make::Link(p) => std::os::unix::fs::symlink("nowhere", root.join(p)),
        };
    }
}

/// True when `p` or a directory on the way is a symlink in `root` (the op
/// would follow it out of the tree: not what this test is about).
fn through_symlink(root: &Path, p: &str) -> bool {
    let mut cur = root.to_path_buf();
    for part in p.split('/') {
        cur.push(part);
        if fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink()) {
            return true;
        }
    }
    false
}

fn errno(r: std::io::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// Applies `op` under `root`; the errno (0 for success).
fn apply(root: &Path, op: &Op) -> i32 {
    let at = |p: &str| root.join(p);
    errno(match op {
        Op::Write(p, d) => fs::write(at(p), d),
        Op::Append(p, d) => fs::OpenOptions::new()
            .append(true)
            .open(at(p))
            .and_then(|mut f| f.write_all(d)),
        Op::Truncate(p, n) => fs::OpenOptions::new()
            .write(true)
            .open(at(p))
            .and_then(|f| f.set_len(*n)),
        Op::Unlink(p) => fs::remove_file(at(p)),
        Op::Mkdir(p) => fs::create_dir(at(p)),
        Op::Rmdir(p) => fs::remove_dir(at(p)),
        Op::Rename(a, b) => fs::rename(at(a), at(b)),
        Op::Symlink(p) => std::os::unix::fs::symlink("nowhere", at(p)),
        Op::Chmod(p, m) => fs::set_permissions(at(p), fs::Permissions::from_mode(*m)),
        Op::Remount => Ok(()),
    })
}

fn follows(op: &Op) -> Option<&str> {
    match op {
        Op::Write(p, _) | Op::Append(p, _) | Op::Truncate(p, _) | Op::Chmod(p, _) => Some(p),
        _ => None,
    }
}

fn run(tree: &[Make], ops: &[Op], small_budget: bool) -> Result<(), TestCaseError> {
    let refdir = tempfile::tempdir().unwrap();
    let reference = refdir.path().join("ref");
    fs::create_dir(&reference).unwrap();
    build(&reference, tree);
    // The smallest fd budget makes the overlay close and reopen node fds
    // all the time.
    let opts = opfs_fs::Options {
        inode_fds: small_budget.then_some(16),
        ..opfs_fs::Options::default()
    };
    let mut o = Overlay::with(opts, |l| build(l, tree));
    prop_assert_eq!(
        manifest(&o.mnt),
        manifest(&reference),
        "the lower tree as mounted"
    );
    for (i, op) in ops.iter().enumerate() {
        if let Op::Remount = op {
            o.remount();
        } else {
            // Ops that follow a symlink, or whose path crosses one, are
            // skipped (the targets dangle outside the tree).
            let crosses = |p: &str| through_symlink(&reference, p);
            let skip = match op {
                Op::Rename(a, b) => {
                    crosses(a.rsplit_once('/').map_or("", |x| x.0))
                        || crosses(b.rsplit_once('/').map_or("", |x| x.0))
                }
                _ => {
                    follows(op).is_some_and(crosses)
                        || [op]
                            .iter()
                            .filter_map(|o| match o {
                                Op::Unlink(p) | Op::Mkdir(p) | Op::Rmdir(p) | Op::Symlink(p) => {
                                    Some(p.as_str())
                                }
                                _ => None,
                            })
                            .any(|p| crosses(p.rsplit_once('/').map_or("", |x| x.0)))
                }
            };
            if skip {
                continue;
            }
            let want = apply(&reference, op);
            let got = apply(&o.mnt, op);
            prop_assert_eq!(got, want, "errno of op {} {:?}", i, op);
        }
        prop_assert_eq!(
            manifest(&o.mnt),
            manifest(&reference),
            "view after op {} {:?}",
            i,
            op
        );
    }
    o.check_upper();
    o.remount();
    prop_assert_eq!(
        manifest(&o.mnt),
        manifest(&reference),
        "view after the final remount"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    })]

    #[test]
    fn overlay_matches_a_plain_directory(
        tree in lower_tree(),
        ops in prop::collection::vec(op(), 1..30),
        small_budget in any::<bool>(),
    ) {
        run(&tree, &ops, small_budget)?;
    }
}
