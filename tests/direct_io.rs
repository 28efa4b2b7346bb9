//! Direct I/O (`O_DIRECT`) through a real mount: it works
//! as on the backing filesystem, alignment errors included, and a direct
//! write is captured like any other (whole file and ranged), so a rewind
//! gives the old bytes back. Needs `/dev/fuse` and `fusermount3`.
//!
//! The project directory is the "plain directory" side of the comparisons:
//! it lives on the same filesystem as the mount's backing files.

mod common;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use common::mmap::Mapping;
use common::*;
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};

/// Memory alignment of the buffers handed to direct reads and writes: a
/// page, enough for any logical block size.
const ALIGN: usize = 4096;

/// A zeroed buffer of `len` bytes whose first byte is `ALIGN`-aligned
/// (plus `skew` bytes, to make a misaligned one).
struct Aligned {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        Aligned::skewed(len, 0)
    }

    fn skewed(len: usize, skew: usize) -> Aligned {
        let buf = vec![0u8; len + 2 * ALIGN];
        let start = (ALIGN - (buf.as_ptr() as usize) % ALIGN) % ALIGN + skew;
        Aligned { buf, start, len }
    }

    fn of(bytes: &[u8]) -> Aligned {
        let mut a = Aligned::new(bytes.len());
        a.bytes_mut().copy_from_slice(bytes);
        a
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// Opens `path` read-write with `O_DIRECT` (and `O_CREAT` if `create`).
fn open_direct(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// All of `file` from offset 0 by direct reads of 64 KiB.
fn read_all_direct(file: &File) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = Aligned::new(64 * 1024);
    loop {
        let n = file
            .read_at(buf.bytes_mut(), out.len() as u64)
            .expect("direct read");
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf.bytes()[..n]);
    }
}

/// A direct write of all of `bytes` at `offset`; asserts it was not short.
fn write_direct(file: &File, bytes: &[u8], offset: u64) {
    let buf = Aligned::of(bytes);
    let n = file.write_at(buf.bytes(), offset).expect("direct write");
    assert_eq!(n, bytes.len(), "short direct write at {offset}");
}

/// Writes `bytes` over `model` at `offset`, growing it with zeros.
fn model_write(model: &mut Vec<u8>, bytes: &[u8], offset: usize) {
    if model.len() < offset + bytes.len() {
        model.resize(offset + bytes.len(), 0);
    }
    model[offset..offset + bytes.len()].copy_from_slice(bytes);
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Bytes of the blob store of the fixture's project.
fn store_bytes(f: &Fixture) -> u64 {
    fn walk(p: &Path) -> u64 {
        let Ok(rd) = std::fs::read_dir(p) else {
            return 0;
        };
        rd.flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => walk(&e.path()),
                _ => e.metadata().map(|m| m.len()).unwrap_or(0),
            })
            .sum()
    }
    walk(&f.state_dir().join("blobs"))
}

/// The reproduction: `dd oflag=direct` into a new file and direct
/// writes into an existing one through the mount; the bytes round-trip by
/// direct reads, the project holds them, and a rewind to the turn before
/// gives the old file back and removes the new one.
#[test]
fn direct_writes_round_trip_and_a_rewind_undoes_them() {
    let f = Fixture::new();
    let old = Rng::new(61).bytes(256 * 1024);
    write_file(&f.p("db.img"), &old, 0o644);
    f.mount();
    let t = f.turn("direct writes");

    // dd creates the file with O_CREAT|O_TRUNC|O_DIRECT and writes 4 KiB
    // blocks from its own aligned buffer (EINVAL before the fix).
    f.sh("dd if=/dev/urandom of=dd.bin bs=4k count=8 oflag=direct status=none");
    let dd = read(&f.p("dd.bin"));
    assert_eq!(dd.len(), 32 * 1024, "dd oflag=direct wrote a short file");

    let file = open_direct(&f.m("db.img"), false).expect("open db.img O_DIRECT");
    let mut model = old.clone();
    let mut rng = Rng::new(62);
    for (offset, len) in [
        (3 * 4096, 64 * 1024),
        (200 * 1024, 8192),
        (256 * 1024, 4096),
    ] {
        let bytes = rng.bytes(len);
        write_direct(&file, &bytes, offset as u64);
        model_write(&mut model, &bytes, offset);
    }
    assert!(
        read_all_direct(&file) == model,
        "a direct read through the mount does not return what the direct writes left"
    );
    drop(file);
    assert!(
        read(&f.p("db.img")) == model,
        "the project does not hold the direct writes"
    );
    let file = open_direct(&f.m("dd.bin"), false).expect("open dd.bin O_DIRECT");
    assert!(
        read_all_direct(&file) == dd,
        "a direct read of dd.bin differs"
    );
    drop(file);

    f.turn("after");
    f.rewind(t);
    assert!(
        read(&f.p("db.img")) == old,
        "rewind {t} did not give the old db.img back"
    );
    assert!(
        read(&f.m("db.img")) == old,
        "the mount does not show the rewound db.img"
    );
    assert!(
        !f.p("dd.bin").exists(),
        "rewind {t} left dd.bin, made in turn {t}"
    );
}

/// A file above the range minimum is captured by ranges: direct writes into
/// a 4 MiB file save only what they overwrite, and a rewind puts the old
/// bytes back.
#[test]
fn direct_writes_into_a_ranged_file_are_captured_as_ranges() {
    let f = Fixture::new();
    f.set_env("OPFS_RANGE_MIN", "1048576");
    let old = Rng::new(71).bytes(4 * 1024 * 1024);
    write_file(&f.p("vm.img"), &old, 0o644);
    f.mount();
    let t = f.turn("ranged direct writes");
    let before = store_bytes(&f);

    let file = open_direct(&f.m("vm.img"), false).expect("open vm.img O_DIRECT");
    let mut model = old.clone();
    let mut rng = Rng::new(72);
    let mut written = 0;
    for (offset, len) in [
        (0, 4096),
        (1024 * 1024 + 512, 65536),
        (3 * 1024 * 1024, 131072),
    ] {
        let bytes = rng.bytes(len);
        write_direct(&file, &bytes, offset as u64);
        model_write(&mut model, &bytes, offset);
        written += len as u64;
    }
    assert!(read_all_direct(&file) == model, "direct read-back differs");
    drop(file);
    assert!(read(&f.p("vm.img")) == model);
    let grew = store_bytes(&f) - before;
    assert!(
        grew < 1024 * 1024,
        "the store grew {grew} bytes for {written} bytes of direct writes into a ranged \
         4 MiB file: a whole-file pre-image instead of ranges"
    );

    f.turn("after");
    f.rewind(t);
    assert!(
        read(&f.p("vm.img")) == old,
        "rewind {t} did not give the old vm.img back"
    );
}

/// What each direct operation of a fixed list gives in `dir`: bytes done or
/// the errno. Misaligned offsets and lengths, aligned ones, and `O_DIRECT`
/// set and cleared with `fcntl(F_SETFL)` on an open file.
fn alignment_outcomes(dir: &Path) -> Vec<(&'static str, Result<usize, i32>)> {
    let path: PathBuf = dir.join("align.bin");
    write_file(&path, &Rng::new(81).bytes(16 * 1024), 0o644);
    let e = |r: io::Result<usize>| r.map_err(|e| e.raw_os_error().unwrap_or(-1));
    let file = open_direct(&path, false).expect("open align.bin O_DIRECT");
    let block = Aligned::of(&[7u8; 512]);
    let page = Aligned::of(&[9u8; 4096]);
    let mut read512 = Aligned::new(512);
    let mut read100 = Aligned::new(100);
    let mut out = vec![
        ("write 512 at 0", e(file.write_at(block.bytes(), 0))),
        ("write 4096 at 4096", e(file.write_at(page.bytes(), 4096))),
        ("write 512 at 1", e(file.write_at(block.bytes(), 1))),
        ("write 100 at 0", e(file.write_at(&block.bytes()[..100], 0))),
        (
            "write 612 at 512",
            e(file.write_at(&page.bytes()[..612], 512)),
        ),
        ("read 512 at 512", e(file.read_at(read512.bytes_mut(), 512))),
        ("read 512 at 7", e(file.read_at(read512.bytes_mut(), 7))),
        ("read 100 at 0", e(file.read_at(read100.bytes_mut(), 0))),
        (
            "read 512 at EOF",
            e(file.read_at(read512.bytes_mut(), 16 * 1024)),
        ),
    ];
    // Clearing O_DIRECT on a direct open makes it buffered again.
    let flags = fcntl_getfl(&file).expect("F_GETFL");
    fcntl_setfl(&file, flags - OFlags::DIRECT).expect("F_SETFL");
    out.push(("cleared: write 3 at 1", e(file.write_at(b"abc", 1))));
    drop(file);
    // Setting it on a buffered open makes it direct.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open align.bin");
    let flags = fcntl_getfl(&file).expect("F_GETFL");
    fcntl_setfl(&file, flags | OFlags::DIRECT).expect("F_SETFL O_DIRECT");
    out.push(("set: write 3 at 1", e(file.write_at(b"abc", 1))));
    out.push(("set: write 4096 at 0", e(file.write_at(page.bytes(), 0))));
    out.push((
        "set: read 100 at 0",
        e(file.read_at(read100.bytes_mut(), 0)),
    ));
    out
}

/// Misaligned direct I/O fails through the mount with the errno the
/// backing filesystem gives on the plain directory, aligned direct I/O
/// succeeds on both, and `fcntl(F_SETFL)` switches a file between the two
/// modes on both.
#[test]
fn direct_io_alignment_errors_are_the_backing_filesystems() {
    let f = Fixture::new();
    let plain = f.root().join("plain");
    std::fs::create_dir(&plain).expect("mkdir plain");
    let on_plain = alignment_outcomes(&plain);
    f.mount();
    let on_mount = alignment_outcomes(&f.mnt);
    assert_eq!(
        on_mount, on_plain,
        "direct I/O through the mount vs the plain directory"
    );
    // The comparison only means something if both kinds happened.
    assert!(
        on_plain.iter().any(|(_, r)| r == &Err(libc::EINVAL)),
        "{on_plain:?}"
    );
    assert!(
        on_plain.iter().any(|(_, r)| matches!(r, Ok(n) if *n > 0)),
        "{on_plain:?}"
    );
    assert!(read(&plain.join("align.bin")) == read(&f.p("align.bin")));
}

/// A shared mapping of a file opened with `O_DIRECT` is written back
/// through that direct handle's open: the writeback of the last, partial
/// page (cropped to the file's size, so misaligned for direct I/O) lands.
#[test]
fn mmap_writeback_through_a_direct_handle_lands() {
    let f = Fixture::new();
    let mut model = Rng::new(91).bytes(5000);
    write_file(&f.p("map.bin"), &model, 0o644);
    f.mount();
    let file = open_direct(&f.m("map.bin"), false).expect("open map.bin O_DIRECT");
    let map = Mapping::of(file).expect("mmap map.bin");
    map.store(0, b"front");
    map.store(4990, b"0123456789");
    map.sync();
    drop(map);
    model_write(&mut model, b"front", 0);
    model_write(&mut model, b"0123456789", 4990);
    assert!(
        read(&f.p("map.bin")) == model,
        "the mmap writeback did not reach the project"
    );
}

/// One seeded run of random direct writes, direct and buffered reads (each
/// checked against the model), truncates and fsyncs on one file, with a
/// turn boundary halfway; then rewinds to both turns must give their start
/// bytes back. What `fsx -Z` does, checked against a model of our own.
fn direct_exerciser(f: &Fixture, seed_var: &str, default_seed: u64) {
    const OPS: usize = 1500;
    const MAX_LEN: usize = 2 * 1024 * 1024;
    let (mut rng, seed) = Rng::from_env(seed_var, default_seed);
    let start = rng.bytes(768 * 1024 + 123);
    write_file(&f.p("fsx.dat"), &start, 0o644);
    f.mount();
    let t1 = f.turn("direct exerciser, first half");
    let mut model = start.clone();
    let mut t2 = None;
    let mut halfway = Vec::new();
    let mut file = open_direct(&f.m("fsx.dat"), false).expect("open fsx.dat O_DIRECT");
    let buffered = File::open(f.m("fsx.dat")).expect("open fsx.dat");
    for op in 0..OPS {
        if op == OPS / 2 {
            drop(file);
            halfway = model.clone();
            t2 = Some(f.turn("direct exerciser, second half"));
            file = open_direct(&f.m("fsx.dat"), false).expect("reopen fsx.dat O_DIRECT");
        }
        let ctx = format!("seed {seed:#x}, op {op}");
        let offset = rng.below(MAX_LEN / 512) * 512;
        let len = (1 + rng.below(256)) * 512;
        match rng.below(10) {
            0..=3 => {
                let bytes = rng.bytes(len.min(MAX_LEN - offset));
                write_direct(&file, &bytes, offset as u64);
                model_write(&mut model, &bytes, offset);
            }
            4..=6 => {
                let mut buf = Aligned::new(len);
                let n = file
                    .read_at(buf.bytes_mut(), offset as u64)
                    .unwrap_or_else(|e| panic!("{ctx}: direct read: {e}"));
                let want = &model[offset.min(model.len())..(offset + len).min(model.len())];
                assert!(
                    &buf.bytes()[..n] == want,
                    "{ctx}: direct read of {len} at {offset}"
                );
            }
            7 => {
                let mut buf = vec![0u8; rng.below(100_000) + 1];
                let at = rng.below(MAX_LEN);
                let n = buffered
                    .read_at(&mut buf, at as u64)
                    .unwrap_or_else(|e| panic!("{ctx}: buffered read: {e}"));
                let want = &model[at.min(model.len())..(at + buf.len()).min(model.len())];
                assert!(&buf[..n] == want, "{ctx}: buffered read at {at}");
            }
            8 => {
                let size = rng.below(MAX_LEN);
                file.set_len(size as u64)
                    .unwrap_or_else(|e| panic!("{ctx}: truncate to {size}: {e}"));
                model.resize(size, 0);
            }
            _ => file
                .sync_data()
                .unwrap_or_else(|e| panic!("{ctx}: fdatasync: {e}")),
        }
    }
    drop(file);
    assert!(
        read(&f.p("fsx.dat")) == model,
        "seed {seed:#x}: the project differs from the model"
    );
    let t2 = t2.expect("the run crossed its turn boundary");
    f.turn("after the exerciser");
    f.rewind(t2);
    assert!(
        read(&f.m("fsx.dat")) == halfway,
        "seed {seed:#x}: rewind {t2}"
    );
    f.rewind(t1);
    assert!(
        read(&f.m("fsx.dat")) == start,
        "seed {seed:#x}: rewind {t1}"
    );
    assert!(
        read(&f.p("fsx.dat")) == start,
        "seed {seed:#x}: rewind {t1}, project"
    );
}

/// The exerciser with whole-file pre-images (the file is under the range
/// minimum).
#[test]
fn direct_exerciser_with_whole_file_capture() {
    let f = Fixture::new();
    direct_exerciser(&f, "OPFS_DIRECT_SEED", 0xd1ec7);
}

/// The exerciser with range pre-images for every file (`OPFS_RANGE_MIN=0`).
#[test]
fn direct_exerciser_with_ranged_capture() {
    let f = Fixture::new();
    f.set_env("OPFS_RANGE_MIN", "0");
    direct_exerciser(&f, "OPFS_DIRECT_SEED_RANGED", 0xd1ec8);
}
