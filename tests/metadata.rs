//! Pre-images that hold everything a path is, through a
//! real mount: owner and extended attributes (`user.*`, `trusted.*`, POSIX
//! ACLs as stored), and special files.
//!
//! Each test compares the project with a manifest that goes beyond the
//! shared one (`tests/common`: type, bits, bytes, link target): the owner,
//! every extended attribute and, for devices, the device number, taken
//! with `lstat`/`llistxattr` on the backing directory. The tests run as
//! root (as the suite does): `chown` to other users and `trusted.*` need
//! it.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::*;

/// What the shared manifest leaves out, per path: uid, gid, device number
/// and the extended attributes (sorted by name).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attrs {
    uid: u32,
    gid: u32,
    rdev: u64,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

type AttrManifest = BTreeMap<Vec<u8>, Attrs>;

fn xattrs_of(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut list = vec![0u8; 65536];
    let n = rustix::fs::llistxattr(path, &mut list[..])
        .unwrap_or_else(|e| panic!("llistxattr {}: {e}", path.display()));
    list.truncate(n);
    let mut out = Vec::new();
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let mut value = vec![0u8; 65536];
        let c = std::ffi::CString::new(name).expect("xattr name");
        let n = rustix::fs::lgetxattr(path, c.as_c_str(), &mut value[..])
            .unwrap_or_else(|e| panic!("lgetxattr {}: {e}", path.display()));
        value.truncate(n);
        out.push((name.to_vec(), value));
    }
    out.sort();
    out
}

fn attr_manifest(root: &Path) -> AttrManifest {
    walk_tree(root, &[b".git"])
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|f| {
            let a = Attrs {
                uid: f.meta.uid(),
                gid: f.meta.gid(),
                rdev: f.meta.rdev(),
                xattrs: xattrs_of(&f.path),
            };
            (f.rel, a)
        })
        .collect()
}

fn assert_attrs(ctx: &str, fx: &Fixture, want: &AttrManifest) {
    let got = attr_manifest(&fx.project);
    if &got == want {
        return;
    }
    let mut lines = Vec::new();
    for (path, w) in want {
        match got.get(path) {
            Some(g) if g == w => {}
            g => lines.push(format!(
                "  {}: expected {w:?}, found {g:?}",
                String::from_utf8_lossy(path)
            )),
        }
    }
    for path in got.keys().filter(|p| !want.contains_key(*p)) {
        lines.push(format!("  unexpected {}", String::from_utf8_lossy(path)));
    }
    panic!("{ctx}: owners or attributes differ:\n{}", lines.join("\n"));
}

fn set(path: &Path, name: &str, value: &[u8]) {
    rustix::fs::lsetxattr(path, name, value, rustix::fs::XattrFlags::empty())
        .unwrap_or_else(|e| panic!("setxattr {name} on {}: {e}", path.display()));
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("lchown {}: {e}", path.display()));
}

/// A POSIX access ACL as the kernel stores it (`system.posix_acl_access`,
/// version 2): owner rw, user `uid` r, group r, mask r, others r.
fn acl_granting_read_to(uid: u32) -> Vec<u8> {
    const UNDEFINED: u32 = u32::MAX;
    let entries = [
        (0x01u16, 6u16, UNDEFINED), // ACL_USER_OBJ
        (0x02, 4, uid),             // ACL_USER
        (0x04, 4, UNDEFINED),       // ACL_GROUP_OBJ
        (0x10, 4, UNDEFINED),       // ACL_MASK
        (0x20, 4, UNDEFINED),       // ACL_OTHER
    ];
    let mut out = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

/// Rewinds to `to` and checks both manifests; then rewinds that rewind
/// (redo) and checks the state after the turn; returns nothing.
fn rewind_and_redo(fx: &Fixture, to: u64, before: (&Manifest, &AttrManifest)) {
    let after = (fx.tree(), attr_manifest(&fx.project));
    assert_ne!(
        &after.1, before.1,
        "the turn changed no owner or attribute: the test cannot fail"
    );
    let r = fx.rewind(to);
    fx.assert_tree(&format!("after rewind {to}"), before.0);
    assert_attrs(&format!("after rewind {to}"), fx, before.1);
    fx.rewind(rewind_turn(&r));
    fx.assert_tree("after the redo", &after.0);
    assert_attrs("after the redo", fx, &after.1);
}

#[test]
fn chown_setxattr_and_setfacl_through_the_mount_are_rewound() {
    let fx = Fixture::new();
    fs::write(fx.p("f"), b"bytes\n").expect("write");
    fs::create_dir(fx.p("d")).expect("mkdir");
    std::os::unix::fs::symlink("f", fx.p("l")).expect("symlink");
    fs::write(fx.p("big"), vec![7u8; 2 << 20]).expect("write big");
    set(&fx.p("f"), "user.pre", b"there before");
    set(&fx.p("big"), "user.big", b"ranged");
    chown(&fx.p("big"), 7, 8);
    fx.mount();
    assert_eq!(fx.turn("metadata"), 2);
    let before = (fx.tree(), attr_manifest(&fx.project));

    chown(&fx.m("f"), 1000, 1001);
    set(&fx.m("f"), "user.x", b"new\0value");
    set(&fx.m("f"), "trusted.t", b"root only");
    set(
        &fx.m("f"),
        "system.posix_acl_access",
        &acl_granting_read_to(1000),
    );
    rustix::fs::lremovexattr(fx.m("f"), "user.pre").expect("removexattr");
    set(&fx.m("d"), "user.dir", b"d");
    set(
        &fx.m("d"),
        "system.posix_acl_default",
        &acl_granting_read_to(1000),
    );
    chown(&fx.m("d"), 1000, 1000);
    chown(&fx.m("l"), 1000, 1000);
    // A large file written in place is captured as ranges: its record
    // holds the owner and attributes too.
    {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new()
            .write(true)
            .open(fx.m("big"))
            .expect("open big");
        f.write_all_at(b"x", 4096).expect("write big");
    }
    chown(&fx.m("big"), 1000, 1000);
    rustix::fs::lremovexattr(fx.m("big"), "user.big").expect("removexattr big");
    let acl = xattrs_of(&fx.p("f"));
    assert!(
        acl.iter().any(|(n, _)| n == b"system.posix_acl_access"),
        "the ACL reached the project: {acl:?}"
    );

    rewind_and_redo(&fx, 2, (&before.0, &before.1));
}

#[test]
fn removed_entries_come_back_with_their_owner_and_attributes() {
    let fx = Fixture::new();
    fs::create_dir(fx.p("d")).expect("mkdir");
    fs::write(fx.p("d/f"), b"owned by someone else\n").expect("write");
    fs::set_permissions(fx.p("d/f"), fs::Permissions::from_mode(0o4755)).expect("chmod");
    set(&fx.p("d/f"), "user.a", b"1");
    set(&fx.p("d/f"), "trusted.b", b"2");
    set(
        &fx.p("d/f"),
        "system.posix_acl_access",
        &acl_granting_read_to(42),
    );
    set(&fx.p("d"), "user.dir", b"kept");
    chown(&fx.p("d/f"), 1000, 1001);
    // chown clears setuid: the bits again, so the rewind must redo both.
    fs::set_permissions(fx.p("d/f"), fs::Permissions::from_mode(0o4755)).expect("chmod");
    chown(&fx.p("d"), 1002, 1003);
    std::os::unix::fs::symlink("d/f", fx.p("l")).expect("symlink");
    chown(&fx.p("l"), 1004, 1005);
    set(&fx.p("l"), "trusted.link", b"of the link itself");
    let mode = fs::symlink_metadata(fx.p("d/f")).expect("stat").mode();
    assert_eq!(mode & 0o7777, 0o4755, "the manifests then compare setuid");
    fx.mount();
    assert_eq!(fx.turn("remove"), 2);
    let before = (fx.tree(), attr_manifest(&fx.project));

    fs::remove_file(fx.m("d/f")).expect("rm");
    fs::remove_dir(fx.m("d")).expect("rmdir");
    fs::remove_file(fx.m("l")).expect("rm link");
    // Something new at one of the names, with attributes of its own.
    fs::write(fx.m("l"), b"a file now").expect("write");
    set(&fx.m("l"), "user.new", b"n");

    rewind_and_redo(&fx, 2, (&before.0, &before.1));
}

fn mknod(path: &Path, kind: rustix::fs::FileType, perm: u32, rdev: u64) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        kind,
        rustix::fs::Mode::from_bits_retain(perm),
        rdev,
    )
    .unwrap_or_else(|e| panic!("mknod {}: {e}", path.display()));
}

/// Fifos, sockets and device nodes keep their type, bits, device number,
/// owner and attributes across a rewind and its redo.
#[test]
fn special_files_keep_type_mode_and_device_number() {
    use rustix::fs::FileType;
    let fx = Fixture::new();
    mknod(&fx.p("fifo"), FileType::Fifo, 0o640, 0);
    let _listener =
        std::os::unix::net::UnixListener::bind(fx.p("sock")).expect("bind a socket node");
    fs::set_permissions(fx.p("sock"), fs::Permissions::from_mode(0o700)).expect("chmod");
    let null = rustix::fs::makedev(1, 3);
    let loop0 = rustix::fs::makedev(7, 0);
    mknod(&fx.p("chr"), FileType::CharacterDevice, 0o620, null);
    mknod(&fx.p("blk"), FileType::BlockDevice, 0o600, loop0);
    chown(&fx.p("chr"), 1000, 5);
    set(&fx.p("fifo"), "trusted.kind", b"fifo");
    fx.mount();
    assert_eq!(fx.turn("specials"), 2);
    let start = (fx.tree(), attr_manifest(&fx.project));

    fs::remove_file(fx.m("fifo")).expect("rm fifo");
    fs::write(fx.m("fifo"), b"a file now").expect("a file at the fifo's name");
    fs::remove_file(fx.m("sock")).expect("rm socket");
    fs::set_permissions(fx.m("chr"), fs::Permissions::from_mode(0o666)).expect("chmod chr");
    fs::remove_file(fx.m("blk")).expect("rm blk");
    mknod(
        &fx.m("blk"),
        FileType::BlockDevice,
        0o600,
        rustix::fs::makedev(7, 1),
    );
    mknod(&fx.m("new-fifo"), FileType::Fifo, 0o600, 0);
    rewind_and_redo(&fx, 2, (&start.0, &start.1));
}

/// Allocated bytes of `path` (`st_blocks` is in 512-byte units).
fn allocated(path: &Path) -> u64 {
    fs::symlink_metadata(path).expect("stat").blocks() * 512
}

/// A 256 MiB file holding 8 KiB of data: captured whole (removed;
/// truncated and refilled), stored and written back with its holes. (256
/// MiB, not the 1 GiB of the issue: the debug build hashes the holes at
/// about 50 MB/s; the allocation limits below are what makes it fail.)
#[test]
fn sparse_files_come_back_sparse() {
    use std::os::unix::fs::FileExt;
    const SIZE: u64 = 256 << 20;
    let fx = Fixture::new();
    for name in ["removed", "refilled"] {
        let f = fs::File::create(fx.p(name)).expect("create");
        f.set_len(SIZE).expect("set_len");
        f.write_all_at(&[b'a'; 4096], 0).expect("write");
        f.write_all_at(&[b'z'; 4096], SIZE / 2).expect("write");
    }
    let sparse = |p: &Path| allocated(p) < 16 << 20;
    assert!(
        sparse(&fx.p("removed")),
        "the backing filesystem keeps holes"
    );
    fx.mount();
    assert_eq!(fx.turn("sparse"), 2);
    // Not walked through the mount: reading it all through FUSE is slow.
    let start = manifest(&fx.project);

    fs::remove_file(fx.m("removed")).expect("rm");
    {
        // O_TRUNC: captured whole; then 64 MiB of data, holes before.
        let f = fs::File::create(fx.m("refilled")).expect("truncate");
        let chunk = vec![b'x'; 1 << 20];
        for i in 0..64u64 {
            f.write_all_at(&chunk, i << 20).expect("write");
        }
    }
    assert!(allocated(&fx.p("refilled")) >= 64 << 20);
    let blobs = fx.state_dir().join("blobs");
    let stored: u64 = walk_tree(&blobs, &[])
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|f| f.meta.blocks() * 512)
        .sum();
    assert!(
        stored < 16 << 20,
        "the blobs of two 256 MiB pre-images allocate {stored} bytes"
    );

    fx.rewind(2);
    assert_manifest_eq("after rewind 2", &start, &manifest(&fx.project));
    for name in ["removed", "refilled"] {
        let a = allocated(&fx.p(name));
        assert!(a < 16 << 20, "{name} allocates {a} bytes after the rewind");
    }
}
