//! The overlay on real mounts: the cases from public bug reports of
//! overlay tools, and what the core relies on (the lower dir is never
//! written; the hook's stream explains every upper entry; inode numbers
//! survive copy-up). Each test ends with `check_upper`.

#![allow(clippy::unwrap_used)]

#[path = "overlay_support/mod.rs"]
mod support;

use std::ffi::{CString, OsStr};
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use support::{names, Overlay, Seen};

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

fn errno_of(res: std::io::Result<impl Sized>) -> i32 {
    res.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

/// The errno of appending a byte to `path`: of the open, or, when the
/// open succeeds, of the write. Without OPEN (the default) a refusal of a
/// lower file's change comes at its first write, not at the open.
fn append_errno(path: &Path) -> i32 {
    use std::io::Write;
    match fs::OpenOptions::new().append(true).open(path) {
        Ok(mut f) => errno_of(f.write_all(b"x")),
        Err(e) => e.raw_os_error().unwrap_or(0),
    }
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> i32 {
    let (a, b) = (
        CString::new(from.as_os_str().as_bytes()).unwrap(),
        CString::new(to.as_os_str().as_bytes()).unwrap(),
    );
    // SAFETY: valid C strings.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    }
}

fn tree(lower: &Path) {
    fs::create_dir_all(lower.join("d/sub")).unwrap();
    fs::write(lower.join("a"), b"lower a").unwrap();
    fs::write(lower.join("b"), b"lower b").unwrap();
    fs::write(lower.join("d/f"), b"lower d/f").unwrap();
    fs::write(lower.join("d/sub/g"), b"lower d/sub/g").unwrap();
    fs::write(lower.join("d/h"), b"lower d/h").unwrap();
}

#[test]
fn reads_show_the_lower_tree() {
    let mut o = Overlay::new(tree);
    assert_eq!(names(&o.mnt), ["a", "b", "d"]);
    assert_eq!(names(&o.m("d")), ["f", "h", "sub"]);
    assert_eq!(fs::read(o.m("d/sub/g")).unwrap(), b"lower d/sub/g");
    assert_eq!(fs::metadata(o.m("a")).unwrap().len(), 7);
    assert!(names(&o.upper).is_empty(), "reading copied something up");
    o.check_upper();
}

#[test]
fn a_deletion_does_not_reappear_after_remount() {
    let mut o = Overlay::new(tree);
    fs::remove_file(o.m("a")).unwrap();
    fs::remove_file(o.m("d/sub/g")).unwrap();
    fs::remove_dir(o.m("d/sub")).unwrap();
    assert_eq!(names(&o.mnt), ["b", "d"]);
    assert_eq!(names(&o.m("d")), ["f", "h"]);
    o.check_upper();
    o.remount();
    assert_eq!(names(&o.mnt), ["b", "d"]);
    assert_eq!(names(&o.m("d")), ["f", "h"]);
    assert_eq!(errno_of(fs::metadata(o.m("a"))), libc::ENOENT);
    assert_eq!(errno_of(fs::metadata(o.m("d/sub"))), libc::ENOENT);
    // The whiteouts are files of the upper dir, reported as created.
    assert!(o.u(".wh.a").is_file());
    assert!(o.u("d/.wh.sub").is_file());
    o.check_upper();
}

#[test]
fn rm_r_then_mkdir_shows_only_the_new_child() {
    let mut o = Overlay::new(tree);
    fs::remove_dir_all(o.m("d")).unwrap();
    fs::create_dir(o.m("d")).unwrap();
    fs::write(o.m("d/new"), b"new").unwrap();
    assert_eq!(names(&o.m("d")), ["new"]);
    o.check_upper();
    o.remount();
    assert_eq!(names(&o.m("d")), ["new"]);
    assert_eq!(errno_of(fs::metadata(o.m("d/f"))), libc::ENOENT);
    assert!(o.u("d/.wh..wh..opq").is_file(), "the new d is opaque");
    assert!(!o.u(".wh.d").exists(), "the whiteout of d went");
    // rmdir of the opaque d works once it is empty in the merged view.
    fs::remove_file(o.m("d/new")).unwrap();
    fs::remove_dir(o.m("d")).unwrap();
    assert_eq!(names(&o.mnt), ["a", "b"]);
    o.check_upper();
}

#[test]
fn rmdir_needs_the_merged_dir_empty() {
    let mut o = Overlay::new(tree);
    assert_eq!(errno_of(fs::remove_dir(o.m("d/sub"))), libc::ENOTEMPTY);
    assert_eq!(errno_of(fs::remove_dir(o.m("a"))), libc::ENOTDIR);
    assert_eq!(errno_of(fs::remove_file(o.m("d"))), libc::EISDIR);
    o.check_upper();
}

#[test]
fn rename_a_lower_dir_then_edit_a_file_inside() {
    let mut o = Overlay::new(tree);
    let ino = fs::metadata(o.m("d/sub/g")).unwrap().ino();
    fs::rename(o.m("d"), o.m("d2")).unwrap();
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(o.m("d2/sub/g"))
        .unwrap();
    f.write_all(b" edited").unwrap();
    drop(f);
    assert_eq!(fs::read(o.m("d2/sub/g")).unwrap(), b"lower d/sub/g edited");
    assert_eq!(fs::metadata(o.m("d2/sub/g")).unwrap().ino(), ino);
    assert_eq!(names(&o.mnt), ["a", "b", "d2"]);
    assert_eq!(names(&o.m("d2")), ["f", "h", "sub"]);
    assert_eq!(fs::read(o.m("d2/h")).unwrap(), b"lower d/h");
    o.check_upper();
    o.remount();
    assert_eq!(names(&o.mnt), ["a", "b", "d2"]);
    assert_eq!(fs::read(o.m("d2/sub/g")).unwrap(), b"lower d/sub/g edited");
    // A new dir at the old name shows none of the lower d.
    fs::create_dir(o.m("d")).unwrap();
    assert!(names(&o.m("d")).is_empty());
    o.check_upper();
}

#[test]
fn rename_a_dir_onto_a_lower_dir_hides_its_lower_children() {
    let mut o = Overlay::new(|l| {
        tree(l);
        fs::create_dir(l.join("e")).unwrap();
        fs::write(l.join("e/old"), b"old").unwrap();
    });
    fs::remove_file(o.m("e/old")).unwrap();
    fs::create_dir(o.m("x")).unwrap();
    fs::write(o.m("x/mine"), b"mine").unwrap();
    fs::rename(o.m("x"), o.m("e")).unwrap();
    assert_eq!(names(&o.m("e")), ["mine"]);
    o.remount();
    assert_eq!(names(&o.m("e")), ["mine"]);
    o.check_upper();
}

#[test]
fn rename_a_lower_file_over_a_lower_file() {
    let mut o = Overlay::new(tree);
    let ino = fs::metadata(o.m("a")).unwrap().ino();
    fs::rename(o.m("a"), o.m("b")).unwrap();
    assert_eq!(fs::read(o.m("b")).unwrap(), b"lower a");
    assert_eq!(fs::metadata(o.m("b")).unwrap().ino(), ino);
    assert_eq!(names(&o.mnt), ["b", "d"]);
    o.check_upper();
    o.remount();
    assert_eq!(names(&o.mnt), ["b", "d"]);
    assert_eq!(fs::read(o.m("b")).unwrap(), b"lower a");
    o.check_upper();
}

#[test]
fn rename_noreplace_and_exchange() {
    let mut o = Overlay::new(tree);
    assert_eq!(
        renameat2(&o.m("a"), &o.m("b"), libc::RENAME_NOREPLACE),
        libc::EEXIST
    );
    assert_eq!(renameat2(&o.m("a"), &o.m("c"), libc::RENAME_NOREPLACE), 0);
    assert_eq!(renameat2(&o.m("c"), &o.m("d"), libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(o.m("d")).unwrap(), b"lower a");
    assert_eq!(names(&o.m("c")), ["f", "h", "sub"]);
    assert_eq!(fs::read(o.m("c/sub/g")).unwrap(), b"lower d/sub/g");
    o.check_upper();
    o.remount();
    assert_eq!(names(&o.mnt), ["b", "c", "d"]);
    assert_eq!(names(&o.m("c")), ["f", "h", "sub"]);
    o.check_upper();
}

#[test]
fn hard_link_of_a_lower_file() {
    let mut o = Overlay::new(tree);
    fs::hard_link(o.m("a"), o.m("d/a2")).unwrap();
    let (m1, m2) = (
        fs::metadata(o.m("a")).unwrap(),
        fs::metadata(o.m("d/a2")).unwrap(),
    );
    assert_eq!(m1.ino(), m2.ino());
    assert_eq!(m1.nlink(), 2);
    fs::write(o.m("d/a2"), b"via the link").unwrap();
    assert_eq!(fs::read(o.m("a")).unwrap(), b"via the link");
    o.check_upper();
    o.remount();
    assert_eq!(fs::read(o.m("a")).unwrap(), b"via the link");
    assert_eq!(fs::metadata(o.m("a")).unwrap().nlink(), 2);
    o.check_upper();
}

#[test]
fn lower_hard_links_share_an_inode_and_known_names_stay_linked() {
    let mut o = Overlay::new(|l| {
        fs::write(l.join("x"), b"linked").unwrap();
        fs::hard_link(l.join("x"), l.join("y")).unwrap();
    });
    let (x, y) = (
        fs::metadata(o.m("x")).unwrap(),
        fs::metadata(o.m("y")).unwrap(),
    );
    assert_eq!(x.ino(), y.ino());
    assert_eq!(x.nlink(), 2);
    // Both names are known to the kernel: the copy-up links them.
    fs::write(o.m("x"), b"changed through x").unwrap();
    assert_eq!(fs::read(o.m("y")).unwrap(), b"changed through x");
    assert_eq!(fs::metadata(o.m("y")).unwrap().ino(), x.ino());
    assert_eq!(
        fs::metadata(o.u("y")).unwrap().ino(),
        fs::metadata(o.u("x")).unwrap().ino()
    );
    o.check_upper();
    o.remount();
    assert_eq!(fs::read(o.m("y")).unwrap(), b"changed through x");
    assert_eq!(fs::metadata(o.m("x")).unwrap().nlink(), 2);
    o.check_upper();
}

#[test]
fn a_lower_hard_link_not_looked_up_breaks_at_copy_up() {
    let mut o = Overlay::new(|l| {
        fs::write(l.join("x"), b"linked").unwrap();
        fs::hard_link(l.join("x"), l.join("y")).unwrap();
    });
    fs::write(o.m("x"), b"changed").unwrap();
    // y was never looked up: it still shows the lower file (as overlayfs
    // without `index`).
    assert_eq!(fs::read(o.m("y")).unwrap(), b"linked");
    o.check_upper();
}

#[test]
fn renaming_a_lower_dir_keeps_hard_links_inside_it() {
    let mut o = Overlay::new(|l| {
        fs::create_dir(l.join("d")).unwrap();
        fs::write(l.join("d/p"), b"pq").unwrap();
        fs::hard_link(l.join("d/p"), l.join("d/q")).unwrap();
        fs::create_dir(l.join("f")).unwrap();
        fs::write(l.join("f/p"), b"pq").unwrap();
        fs::hard_link(l.join("f/p"), l.join("f/q")).unwrap();
    });
    // f's names are known to the kernel before the rename, d's are not.
    assert_eq!(
        fs::metadata(o.m("f/p")).unwrap().ino(),
        fs::metadata(o.m("f/q")).unwrap().ino()
    );
    fs::rename(o.m("f"), o.m("g")).unwrap();
    let (p, q) = (
        fs::metadata(o.u("g/p")).unwrap(),
        fs::metadata(o.u("g/q")).unwrap(),
    );
    assert_eq!((p.ino(), p.nlink()), (q.ino(), 2));
    fs::rename(o.m("d"), o.m("e")).unwrap();
    let (p, q) = (
        fs::metadata(o.u("e/p")).unwrap(),
        fs::metadata(o.u("e/q")).unwrap(),
    );
    assert_eq!(p.ino(), q.ino());
    assert_eq!(p.nlink(), 2);
    fs::write(o.m("e/p"), b"both").unwrap();
    assert_eq!(fs::read(o.m("e/q")).unwrap(), b"both");
    o.check_upper();
}

#[test]
fn symlinks_fifos_and_non_utf8_names() {
    let bad = OsStr::from_bytes(b"bad\xffname");
    let mut o = Overlay::new(|l| {
        std::os::unix::fs::symlink("target/of/link", l.join("sl")).unwrap();
        mkfifo(&l.join("fifo"));
        fs::write(l.join(bad), b"non-utf8").unwrap();
    });
    assert_eq!(
        fs::read_link(o.m("sl")).unwrap(),
        Path::new("target/of/link")
    );
    assert!(fs::symlink_metadata(o.m("fifo"))
        .unwrap()
        .file_type()
        .is_fifo_like());
    assert_eq!(fs::read(o.m(bad)).unwrap(), b"non-utf8");
    // Renames copy each up as what it is.
    fs::rename(o.m("sl"), o.m("sl2")).unwrap();
    fs::rename(o.m("fifo"), o.m("fifo2")).unwrap();
    let bad2 = OsStr::from_bytes(b"bad2\xfe");
    fs::rename(o.m(bad), o.m(bad2)).unwrap();
    assert_eq!(
        fs::read_link(o.u("sl2")).unwrap(),
        Path::new("target/of/link")
    );
    assert!(fs::symlink_metadata(o.u("fifo2"))
        .unwrap()
        .file_type()
        .is_fifo_like());
    assert_eq!(fs::read(o.u(bad2)).unwrap(), b"non-utf8");
    o.remount();
    let mut want = vec!["bad2\u{fffd}", "fifo2", "sl2"];
    want.sort();
    assert_eq!(names(&o.mnt), want);
    // A new symlink and fifo in the upper layer.
    std::os::unix::fs::symlink("x", o.m("sl3")).unwrap();
    mkfifo(&o.m("fifo3"));
    assert_eq!(fs::read_link(o.m("sl3")).unwrap(), Path::new("x"));
    o.check_upper();
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}
impl FifoLike for fs::FileType {
    fn is_fifo_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_fifo(self)
    }
}

#[test]
fn truncate_and_append_on_lower_files() {
    let mut o = Overlay::new(tree);
    let f = fs::OpenOptions::new().write(true).open(o.m("a")).unwrap();
    f.set_len(3).unwrap();
    drop(f);
    assert_eq!(fs::read(o.m("a")).unwrap(), b"low");
    let mut f = fs::OpenOptions::new().append(true).open(o.m("b")).unwrap();
    f.write_all(b"+more").unwrap();
    drop(f);
    assert_eq!(fs::read(o.m("b")).unwrap(), b"lower b+more");
    // O_TRUNC copies no bytes up.
    fs::write(o.m("d/f"), b"new").unwrap();
    assert_eq!(fs::read(o.m("d/f")).unwrap(), b"new");
    // Truncate by path (setattr without a handle).
    let c = CString::new(o.m("d/h").as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::truncate(c.as_ptr(), 20) }, 0);
    let mut want = b"lower d/h".to_vec();
    want.resize(20, 0);
    assert_eq!(fs::read(o.m("d/h")).unwrap(), want);
    let seen = o.take_seen();
    for p in ["a", "b", "d/f", "d/h"] {
        let create = seen.iter().position(|s| *s == Seen::Create(p.into()));
        let content = seen.iter().position(|s| *s == Seen::Content(p.into()));
        assert!(
            create.is_some() && create < content,
            "copy-up of {p} reported before its content change: {seen:?}"
        );
    }
    assert!(
        seen.contains(&Seen::Create(b"d".to_vec())),
        "parent d copied up first"
    );
    o.remount();
    assert_eq!(fs::read(o.m("a")).unwrap(), b"low");
    assert_eq!(fs::read(o.m("b")).unwrap(), b"lower b+more");
    o.check_upper();
}

#[test]
fn metadata_changes_copy_up_and_keep_the_rest() {
    let mut o = Overlay::new(tree);
    fs::set_permissions(o.m("a"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(o.m("a")).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(fs::read(o.m("a")).unwrap(), b"lower a");
    assert_eq!(fs::metadata(o.u("a")).unwrap().mode() & 0o7777, 0o600);
    // A new file in a lower dir copies the dir up with its mode.
    fs::set_permissions(o.lower.join("d"), fs::Permissions::from_mode(0o755)).ok();
    fs::write(o.m("d/sub/new"), b"n").unwrap();
    assert!(o.u("d/sub").is_dir());
    o.check_upper();
}

#[test]
fn whiteout_names_are_refused() {
    let mut o = Overlay::new(|l| {
        tree(l);
        fs::write(l.join(".wh.lowername"), b"shown").unwrap();
    });
    assert_eq!(errno_of(fs::write(o.m(".wh.x"), b"")), libc::EINVAL);
    assert_eq!(errno_of(fs::create_dir(o.m(".wh.y"))), libc::EINVAL);
    assert_eq!(
        errno_of(fs::create_dir(o.m("d/.wh..wh..opq"))),
        libc::EINVAL
    );
    assert_eq!(errno_of(fs::rename(o.m("a"), o.m(".wh.a"))), libc::EINVAL);
    // A lower name with the prefix shows, read only.
    assert_eq!(fs::read(o.m(".wh.lowername")).unwrap(), b"shown");
    assert_eq!(errno_of(fs::remove_file(o.m(".wh.lowername"))), libc::EROFS);
    assert_eq!(append_errno(&o.m(".wh.lowername")), libc::EROFS);
    // Whiteouts of the upper dir never show.
    fs::remove_file(o.m("a")).unwrap();
    assert_eq!(names(&o.mnt), [".wh.lowername", "b", "d"]);
    assert_eq!(errno_of(fs::metadata(o.m(".wh.a"))), libc::ENOENT);
    o.check_upper();
}

#[test]
fn st_ino_is_unchanged_across_copy_up() {
    let mut o = Overlay::new(tree);
    let before: Vec<u64> = ["a", "d", "d/sub", "d/sub/g"]
        .iter()
        .map(|p| fs::metadata(o.m(p)).unwrap().ino())
        .collect();
    fs::write(o.m("d/sub/g"), b"changed").unwrap();
    fs::write(o.m("a"), b"changed").unwrap();
    let after: Vec<u64> = ["a", "d", "d/sub", "d/sub/g"]
        .iter()
        .map(|p| fs::metadata(o.m(p)).unwrap().ino())
        .collect();
    assert_eq!(before, after);
    assert!(o.u("d/sub/g").is_file());
    o.check_upper();
}

#[test]
fn a_read_handle_sees_a_later_copy_up() {
    let mut o = Overlay::new(tree);
    let mut r = fs::File::open(o.m("a")).unwrap();
    fs::write(o.m("a"), b"upper a!").unwrap();
    let mut s = String::new();
    r.seek(SeekFrom::Start(0)).unwrap();
    std::io::Read::read_to_string(&mut r, &mut s).unwrap();
    assert_eq!(s, "upper a!");
    o.check_upper();
}

#[test]
fn create_over_a_whiteout_removes_it() {
    let mut o = Overlay::new(tree);
    fs::remove_file(o.m("a")).unwrap();
    fs::write(o.m("a"), b"again").unwrap();
    assert!(!o.u(".wh.a").exists());
    let seen = o.take_seen();
    assert!(seen.contains(&Seen::Remove(b".wh.a".to_vec())), "{seen:?}");
    o.remount();
    assert_eq!(fs::read(o.m("a")).unwrap(), b"again");
    o.check_upper();
}

#[test]
fn big_merged_listing_has_every_name_once() {
    let mut o = Overlay::new(|l| {
        fs::create_dir(l.join("big")).unwrap();
        for i in 0..300 {
            fs::write(l.join(format!("big/lower{i:03}")), b"").unwrap();
        }
    });
    for i in 0..300 {
        fs::write(o.m(format!("big/upper{i:03}")), b"").unwrap();
    }
    for i in (0..300).step_by(3) {
        fs::remove_file(o.m(format!("big/lower{i:03}"))).unwrap();
    }
    let got = names(&o.m("big"));
    assert_eq!(got.len(), 500);
    let mut dedup = got.clone();
    dedup.dedup();
    assert_eq!(dedup, got);
    o.check_upper();
}

#[test]
fn invalidate_takes_upper_paths() {
    let mut o = Overlay::new(tree);
    fs::remove_file(o.m("a")).unwrap();
    fs::remove_dir_all(o.m("d")).unwrap();
    fs::create_dir(o.m("d")).unwrap();
    assert_eq!(names(&o.mnt), ["b", "d"]);
    o.check_upper();
    // What a rewind of the upper dir does: undo the whiteout of a and the
    // opaque marker of d behind the mount, then invalidate.
    fs::remove_file(o.u(".wh.a")).unwrap();
    fs::remove_file(o.u("d/.wh..wh..opq")).unwrap();
    o.ctl()
        .invalidate(&[b".wh.a".to_vec(), b"d/.wh..wh..opq".to_vec()]);
    assert_eq!(fs::read(o.m("a")).unwrap(), b"lower a");
    assert_eq!(names(&o.m("d")), ["f", "h", "sub"]);
    let _ = o.take_seen();
}

#[test]
fn write_back_reaches_the_upper_file() {
    let o = Overlay::new(tree);
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(0)
        .open(o.m("a"))
        .unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: maps 7 bytes of an open file shared; unmapped below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            7,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(ptr, libc::MAP_FAILED);
    // SAFETY: the mapping is 7 bytes long.
    unsafe { *ptr.cast::<u8>() = b'L' };
    o.ctl().write_back().unwrap();
    assert_eq!(fs::read(o.u("a")).unwrap(), b"Lower a");
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(ptr, 7) };
}

#[test]
fn long_names() {
    let long_lower = "l".repeat(252);
    let short_enough = "s".repeat(251);
    let mut o = Overlay::new(|l| {
        fs::write(l.join(&long_lower), b"long").unwrap();
        fs::write(l.join(&short_enough), b"short").unwrap();
    });
    // A 255-byte name made in the upper layer works like anywhere else.
    let max = "m".repeat(255);
    fs::write(o.m(&max), b"max").unwrap();
    fs::rename(o.m(&max), o.m("n".repeat(255))).unwrap();
    fs::remove_file(o.m("n".repeat(255))).unwrap();
    // A lower name has room for its whiteout up to 251 bytes.
    fs::remove_file(o.m(&short_enough)).unwrap();
    assert_eq!(
        errno_of(fs::remove_file(o.m(&long_lower))),
        libc::ENAMETOOLONG
    );
    assert_eq!(fs::read(o.m(&long_lower)).unwrap(), b"long");
    o.check_upper();
}

#[test]
fn a_refusing_hook_leaves_the_upper_dir_alone() {
    let mut o = Overlay::new(tree);
    fs::write(o.m("made"), b"before the refusal").unwrap();
    o.check_upper();
    let upper_before = support::manifest(&o.upper);
    *o.hook.fail.lock().unwrap() = Some(libc::EACCES);
    assert_eq!(errno_of(fs::write(o.m("d/sub/g"), b"x")), libc::EACCES);
    assert_eq!(append_errno(&o.m("a")), libc::EACCES);
    assert_eq!(errno_of(fs::remove_file(o.m("b"))), libc::EACCES);
    assert_eq!(errno_of(fs::remove_file(o.m("made"))), libc::EACCES);
    assert_eq!(errno_of(fs::create_dir(o.m("d/new"))), libc::EACCES);
    assert_eq!(errno_of(fs::rename(o.m("d"), o.m("e"))), libc::EACCES);
    assert_eq!(
        errno_of(fs::set_permissions(
            o.m("a"),
            fs::Permissions::from_mode(0o600)
        )),
        libc::EACCES
    );
    assert_eq!(support::manifest(&o.upper), upper_before);
    *o.hook.fail.lock().unwrap() = None;
    assert_eq!(names(&o.mnt), ["a", "b", "d", "made"]);
    assert_eq!(fs::read(o.m("d/sub/g")).unwrap(), b"lower d/sub/g");
    o.check_upper();
}

#[test]
fn many_cached_nodes_within_a_small_fd_budget() {
    let opts = opfs_fs::Options {
        inode_fds: Some(16),
        ..opfs_fs::Options::default()
    };
    let mut o = Overlay::with(opts, |l| {
        fs::create_dir(l.join("many")).unwrap();
        for i in 0..200 {
            fs::write(l.join(format!("many/f{i}")), format!("lower {i}")).unwrap();
        }
    });
    // Keep files open across the budget's closing of node fds.
    let mut open = Vec::new();
    for i in 0..200 {
        let p = o.m(format!("many/f{i}"));
        let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b" +").unwrap();
        if i % 20 == 0 {
            open.push(f);
        }
    }
    for i in (0..200).step_by(2) {
        fs::rename(o.m(format!("many/f{i}")), o.m(format!("many/g{i}"))).unwrap();
    }
    for i in (1..200).step_by(4) {
        fs::remove_file(o.m(format!("many/f{i}"))).unwrap();
    }
    for (n, f) in open.iter_mut().enumerate() {
        // Open files still work after their names moved or went.
        f.write_all(b"!").unwrap();
        assert!(f.metadata().unwrap().len() > 0, "file {n}");
    }
    drop(open);
    for i in 0..200 {
        let name = if i % 2 == 0 {
            format!("g{i}")
        } else {
            format!("f{i}")
        };
        let got = fs::read(o.m(format!("many/{name}")));
        if i % 4 == 1 {
            assert_eq!(errno_of(got), libc::ENOENT);
        } else {
            let want = if i % 20 == 0 {
                format!("lower {i} +!")
            } else {
                format!("lower {i} +")
            };
            assert_eq!(String::from_utf8(got.unwrap()).unwrap(), want, "{name}");
        }
    }
    o.check_upper();
    o.remount();
    assert_eq!(names(&o.m("many")).len(), 150);
    o.check_upper();
}

#[test]
fn a_copy_up_cut_short_leaves_nothing_visible() {
    let mut o = Overlay::new(tree);
    o.unmount();
    // What a kill during copy-up leaves: a temporary file in the work dir,
    // nothing in the upper dir.
    fs::write(o.work.join("copyup.1.0"), b"half a cop").unwrap();
    fs::create_dir(o.work.join("stray")).unwrap();
    o.mount();
    assert!(names(&o.work).is_empty(), "the mount empties the work dir");
    assert_eq!(fs::read(o.m("a")).unwrap(), b"lower a");
    fs::write(o.m("a"), b"now").unwrap();
    assert!(
        names(&o.work).is_empty(),
        "a copy-up leaves nothing in work"
    );
    o.check_upper();
}

/// What git's index compares (`st_ino`, `st_ctime`, `st_mtime`, size,
/// owner): a lower entry shows the lower directory's own, through `stat`
/// and through a listing's `d_ino`, so `git status` in a worktree finds
/// the project's index entries clean instead of re-reading every file.
#[test]
fn lower_entries_show_the_lower_inode_numbers_and_times() {
    let mut o = Overlay::new(tree);
    let listed: std::collections::BTreeMap<_, _> = fs::read_dir(o.m("d"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name(), std::os::unix::fs::DirEntryExt::ino(&e))
        })
        .collect();
    for rel in ["a", "d", "d/f", "d/sub/g"] {
        let (through, direct) = (
            fs::symlink_metadata(o.m(rel)).unwrap(),
            fs::symlink_metadata(o.lower.join(rel)).unwrap(),
        );
        let key = |m: &fs::Metadata| {
            (
                m.ino(),
                m.ctime(),
                m.ctime_nsec(),
                m.mtime(),
                m.mtime_nsec(),
                if m.is_dir() { 0 } else { m.size() },
                m.uid(),
                m.gid(),
            )
        };
        assert_eq!(key(&through), key(&direct), "{rel}");
    }
    for (name, ino) in &listed {
        let direct = fs::symlink_metadata(o.lower.join("d").join(name)).unwrap();
        assert_eq!(*ino, direct.ino(), "d_ino of d/{name:?}");
    }
    // A copied-up file keeps the number it was shown with.
    let before = fs::metadata(o.m("d/f")).unwrap().ino();
    fs::OpenOptions::new()
        .append(true)
        .open(o.m("d/f"))
        .unwrap()
        .write_all(b"!")
        .unwrap();
    assert_eq!(fs::metadata(o.m("d/f")).unwrap().ino(), before);
    o.check_upper();
}
