//! What the mount answers to `SEEK_DATA`/`SEEK_HOLE` (docs/bench/2026-12-03-agent-requests-floor.md,
//! "The agent session's requests"): by default LSEEK is answered `ENOSYS`
//! once, so the kernel answers every later probe itself from the file's
//! size (no holes reported, no round trip), while the bytes read through
//! the mount stay those of the sparse backing file; `OPFS_NO_LSEEK=0`
//! serves the backing file's own hole map. Needs /dev/fuse (the fixture
//! says so when it is missing).

mod common;

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::Fixture;

const DATA: usize = 64 << 10;
const HOLE: u64 = 1 << 20;

/// `lseek(fd, offset, whence)`; the new offset or the OS error.
fn seek(f: &File, offset: i64, whence: i32) -> std::io::Result<i64> {
    // SAFETY: a plain system call on a descriptor `f` owns for the call.
    let r = unsafe { libc::lseek(f.as_raw_fd(), offset, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A file of DATA bytes, a hole of HOLE bytes, DATA bytes; its size.
fn make_sparse(path: &Path, seed: u8) -> u64 {
    let f = File::create(path).expect("create sparse file");
    let bytes: Vec<u8> = (0..DATA).map(|i| (i as u8) ^ seed).collect();
    f.write_all_at(&bytes, 0).expect("write head");
    f.write_all_at(&bytes, DATA as u64 + HOLE)
        .expect("write tail");
    f.sync_all().expect("sync");
    DATA as u64 * 2 + HOLE
}

/// Whether the project's filesystem reports the hole of `path`.
fn backing_has_holes(path: &Path) -> bool {
    let f = File::open(path).expect("open backing file");
    seek(&f, 0, libc::SEEK_HOLE).expect("SEEK_HOLE on the project") == DATA as i64
}

/// Seeds two sparse files, mounts with `env`, and returns, for each file
/// through the mount: (SEEK_HOLE from 0, SEEK_DATA from inside the hole),
/// after checking that its bytes equal the project's.
fn probe(env: &[(&str, &str)]) -> Option<Vec<(i64, i64)>> {
    let fx = Fixture::new();
    let sizes = [
        make_sparse(&fx.p("a.bin"), 1),
        make_sparse(&fx.p("b.bin"), 2),
    ];
    if !backing_has_holes(&fx.p("a.bin")) {
        eprintln!("the filesystem of the test's temp dir reports no holes: not checked");
        return None;
    }
    for (k, v) in env {
        fx.set_env(k, v);
    }
    fx.mount_with(&["--no-export"]);
    let mut out = Vec::new();
    for (name, size) in ["a.bin", "b.bin"].iter().zip(sizes) {
        let f = File::open(fx.m(name)).expect("open through the mount");
        let hole = seek(&f, 0, libc::SEEK_HOLE).expect("SEEK_HOLE through the mount");
        let data = seek(&f, DATA as i64 + 10, libc::SEEK_DATA).expect("SEEK_DATA");
        let past =
            seek(&f, size as i64, libc::SEEK_DATA).expect_err("SEEK_DATA at the end of the file");
        assert_eq!(past.raw_os_error(), Some(libc::ENXIO), "{name}: {past}");
        assert_eq!(
            fs::read(fx.m(name)).expect("read through the mount"),
            fs::read(fx.p(name)).expect("read the project"),
            "{name}: the bytes through the mount differ from the project's"
        );
        out.push((hole, data));
    }
    fx.umount();
    Some(out)
}

/// Default: the kernel answers the probes from the size (the hole is not
/// reported), for the first file (after LSEEK's one `ENOSYS`) and the next.
#[test]
fn seek_hole_is_answered_by_the_kernel_from_the_size() {
    let Some(got) = probe(&[]) else { return };
    let size = (DATA as u64 * 2 + HOLE) as i64;
    for (i, (hole, data)) in got.into_iter().enumerate() {
        assert_eq!(hole, size, "file {i}: SEEK_HOLE from 0 through the mount");
        assert_eq!(
            data,
            DATA as i64 + 10,
            "file {i}: SEEK_DATA inside the hole"
        );
    }
}

/// `OPFS_NO_LSEEK=0`: each probe reaches the daemon, which answers with
/// the project's own hole map.
#[test]
fn with_the_knob_off_the_holes_are_reported() {
    let Some(got) = probe(&[("OPFS_NO_LSEEK", "0")]) else {
        return;
    };
    for (i, (hole, data)) in got.into_iter().enumerate() {
        assert_eq!(
            hole, DATA as i64,
            "file {i}: SEEK_HOLE from 0 through the mount"
        );
        assert_eq!(
            data,
            DATA as i64 + HOLE as i64,
            "file {i}: SEEK_DATA inside the hole"
        );
    }
}
