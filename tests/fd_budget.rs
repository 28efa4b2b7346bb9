//! The inode table keeps at most a budget of fds (`OPFS_INODE_FDS`, by
//! default derived from `RLIMIT_NOFILE`): past it, nodes are closed and
//! reopened by name. Thousands of cached inodes must work with a budget of
//! 64: create, read back, chmod, rename, hard link, remove, turn and rewind,
//! and the daemon's open fds stay near the budget.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;

const BUDGET: usize = 64;
/// The daemon's other fds: the index and its WAL, the capture log, the
/// control socket, `/dev/fuse`, open file handles of requests in flight.
const OTHERS: usize = 64;

fn daemon_fds(fx: &Fixture) -> usize {
    let status = fx.opfs_c(&["status", "--json"]).ok();
    let pid = status.json()["pid"].as_u64().expect("daemon pid");
    fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read the daemon's fds")
        .count()
}

fn assert_fds_within_budget(fx: &Fixture) {
    let n = daemon_fds(fx);
    assert!(
        n <= BUDGET + OTHERS,
        "the daemon holds {n} fds with a budget of {BUDGET}"
    );
}

fn rewind_without_conflicts(fx: &Fixture, turn: &str) {
    let run = fx.opfs_c(&["rewind", turn, "--json"]).ok();
    assert_eq!(
        run.json()["conflicts"].as_array().map(Vec::len),
        Some(0),
        "{run}"
    );
}

#[test]
fn thousands_of_cached_inodes_work_within_an_fd_budget_of_64() {
    let fx = Fixture::new();
    fx.set_env("OPFS_INODE_FDS", &BUDGET.to_string());
    fs::create_dir(fx.p("old")).expect("mkdir");
    for i in 0..200 {
        fs::write(fx.p(format!("old/f{i}")), format!("old {i}\n")).expect("write");
    }
    fx.mount();
    let start = manifest(&fx.project);

    // Turn 1: 2,000 new files in 40 directories, all cached by the kernel.
    for d in 0..40 {
        fs::create_dir(fx.m(format!("d{d}"))).expect("mkdir via mount");
        for i in 0..50 {
            fs::write(
                fx.m(format!("d{d}/f{i}")),
                format!("{d}/{i}\n").repeat(i + 1),
            )
            .expect("write via mount");
        }
    }
    // Old files are looked up (and cached) and edited.
    for i in 0..200 {
        let p = fx.m(format!("old/f{i}"));
        assert_eq!(
            fs::read(&p).expect("read"),
            format!("old {i}\n").into_bytes()
        );
        fs::write(&p, format!("new {i}\n")).expect("rewrite");
    }
    assert_fds_within_budget(&fx);
    let after_1 = manifest(&fx.mnt);
    assert_eq!(after_1.len(), 1 + 200 + 40 + 2000);

    // Turn 2: every cached inode used again, most of them reopened by name.
    assert_eq!(fx.turn("more"), 2);
    for d in 0..40 {
        for i in 0..50 {
            let p = fx.m(format!("d{d}/f{i}"));
            assert_eq!(
                fs::read(&p).expect("read back"),
                format!("{d}/{i}\n").repeat(i + 1).into_bytes()
            );
            match i % 5 {
                0 => fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).expect("chmod"),
                1 => fs::rename(&p, fx.m(format!("d{d}/r{i}"))).expect("rename"),
                2 => fs::hard_link(&p, fx.m(format!("d{d}/l{i}"))).expect("link"),
                3 => fs::remove_file(&p).expect("unlink"),
                _ => fs::write(&p, b"overwritten\n").expect("overwrite"),
            }
        }
    }
    fs::remove_dir_all(fx.m("old")).expect("rm -rf via mount");
    assert_fds_within_budget(&fx);

    // Both turn starts come back exactly.
    rewind_without_conflicts(&fx, "2");
    assert_manifest_eq(
        "rewind to turn 2 (mountpoint)",
        &after_1,
        &manifest(&fx.mnt),
    );
    rewind_without_conflicts(&fx, "1");
    assert_manifest_eq("rewind to turn 1 (mountpoint)", &start, &manifest(&fx.mnt));
    assert_manifest_eq("rewind to turn 1 (project)", &start, &manifest(&fx.project));
    fx.umount();
}

/// A file still open when it is unlinked through the mount, after the
/// budget closed its node's fd: requests on the inode that carry no file
/// handle (here `fgetxattr`) still work, because the node is reopened
/// before the unlink takes its last name.
#[test]
fn an_open_file_unlinked_past_the_budget_stays_usable() {
    use std::os::fd::AsRawFd;
    let fx = Fixture::new();
    fx.set_env("OPFS_INODE_FDS", "16");
    fx.mount();
    let keep = fx.m("keep");
    fs::write(&keep, b"kept\n").expect("write");
    let name = std::ffi::CString::new("user.opfs-test").expect("name");
    let path = std::ffi::CString::new(keep.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: valid C strings and buffer.
    let set = unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), b"v1".as_ptr().cast(), 2, 0) };
    assert_eq!(set, 0, "setxattr: {}", std::io::Error::last_os_error());
    let file = fs::File::open(&keep).expect("open");
    // Many more cached inodes than the budget: most nodes lose their fds.
    for i in 0..300 {
        fs::write(fx.m(format!("f{i}")), b"x").expect("write");
    }
    fs::remove_file(&keep).expect("unlink while open");
    let mut buf = [0u8; 16];
    // SAFETY: valid fd, C string and buffer.
    let n = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert_eq!(
        n,
        2,
        "fgetxattr after unlink: {}",
        std::io::Error::last_os_error()
    );
    assert_eq!(&buf[..2], b"v1");
    drop(file);
    fx.umount();
}
