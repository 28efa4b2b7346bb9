//! Which files of a filesystem are mapped shared by some process
//! (`/proc/PID/maps`), for a mount that has no handles to tell it which
//! files may hold dirty pages (`FUSE_NO_OPEN_SUPPORT`).
//!
//! Reading another process's `maps` takes that process's `mmap_lock` for
//! reading and never touches the file itself, so the daemon may do it for
//! its own mount without sending itself a request.

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::cvt;

/// The device number (major, minor) of the filesystem mounted at `path`,
/// read without asking it anything (`statx` with `AT_STATX_DONT_SYNC`: a
/// FUSE mount answers from its cache, and the device is the superblock's).
pub(crate) fn mount_dev(path: &Path) -> io::Result<(u32, u32)> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))?;
    let mut stx = MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: a valid C string and a writable statx buffer.
    cvt(unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_STATX_DONT_SYNC | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_INO,
            stx.as_mut_ptr(),
        )
    })?;
    // SAFETY: filled by statx.
    let stx = unsafe { stx.assume_init() };
    Ok((stx.stx_dev_major, stx.stx_dev_minor))
}

/// What [`shared_mappings`] found.
#[derive(Debug, Default)]
pub(crate) struct SharedMappings {
    /// Inode numbers (as the filesystem reports them, `st_ino`) of the
    /// files some process maps `MAP_SHARED`, sorted, without repeats.
    pub(crate) inos: Vec<u64>,
    /// Processes whose `maps` could not be read (`EACCES` for another
    /// user's process when the daemon is not root); they may hold more.
    pub(crate) unreadable: usize,
}

/// The files of the filesystem with device `dev` that any process maps
/// shared (`MAP_SHARED`, any protection: a mapping made read-only with
/// `mprotect` after a store still holds its dirty pages). A process that
/// exits or unmaps first has written its pages back (a FUSE mapping is
/// written back and waited for at `munmap`), so with no cache of written
/// pages (no `FUSE_WRITEBACK_CACHE`) these are the only files of a FUSE
/// mount that can hold dirty pages. Costs one read of `/proc/PID/maps` per
/// process that has a memory map (a few milliseconds for a few hundred
/// processes), one `kcmp` per kernel thread (where the daemon may compare
/// processes, see [`no_memory_map`]), nothing per file of the tree.
///
/// # Errors
///
/// `/proc` cannot be listed. A process that exits meanwhile is skipped; one
/// whose `maps` is unreadable is counted in
/// [`SharedMappings::unreadable`].
pub(crate) fn shared_mappings(dev: (u32, u32)) -> io::Result<SharedMappings> {
    let mut found = SharedMappings::default();
    let mut text = Vec::new();
    let mut query = true;
    let mut kcmp = kthreadd_comparable();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        if !name.as_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        if kcmp {
            match no_memory_map(&name) {
                Ok(true) => continue,
                Ok(false) => {}
                // A kernel without kcmp, or a seccomp filter that refuses
                // it: the maps of every process, from now on.
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => kcmp = false,
                // Exited meanwhile (ESRCH), not ours to inspect (EPERM):
                // as the maps say.
                Err(_) => {}
            }
        }
        let mut path = std::path::PathBuf::from("/proc");
        path.push(&name);
        path.push("maps");
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                found.unreadable += 1;
                continue;
            }
            // Exited meanwhile (ENOENT, ESRCH).
            Err(_) => continue,
        };
        if query {
            match query_shared(&file, dev, &mut found.inos) {
                Ok(()) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                    found.unreadable += 1;
                    continue;
                }
                // Exited meanwhile (ESRCH), or a kernel thread (no mm).
                Err(e) if e.raw_os_error() != Some(libc::ENOTTY) => continue,
                // A kernel without PROCMAP_QUERY: the text, from now on.
                Err(_) => query = false,
            }
        }
        text.clear();
        match std::io::Read::read_to_end(&mut file, &mut text) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                found.unreadable += 1;
                continue;
            }
            // Exited meanwhile (ENOENT, ESRCH), or a kernel thread.
            Err(_) => continue,
        }
        for line in text.split(|&b| b == b'\n') {
            if let Some(ino) = shared_ino(line, dev) {
                found.inos.push(ino);
            }
        }
    }
    found.inos.sort_unstable();
    found.inos.dedup();
    Ok(found)
}

/// `KCMP_VM` of `<linux/kcmp.h>`: do two processes share one memory map.
const KCMP_VM: libc::c_int = 1;

/// The inode number of the initial pid namespace (`PROC_PID_INIT_INO` of
/// `<linux/proc_ns.h>`, fixed).
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

/// True when process ID 2 is `kthreadd`, for this process and for `/proc`
/// alike, and this process may compare it with `kcmp`: this process is in
/// the initial pid namespace, and `/proc` is that namespace's (only there
/// does `/proc/self` name a process of the initial namespace), where
/// process 2 is always `kthreadd`, a kernel thread that never exits.
fn kthreadd_comparable() -> bool {
    use std::os::unix::fs::MetadataExt;
    let in_initial =
        std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() == PROC_PID_INIT_INO);
    // kcmp of kthreadd with itself: allowed (root, or `CAP_SYS_PTRACE`;
    // another user's daemon is refused) and built in (`CONFIG_KCMP`).
    in_initial && kcmp_vm(2, 2).is_ok_and(|order| order == 0)
}

/// True when the process `pid` (a name of `/proc`) has no memory map: a
/// kernel thread, or a process past the point of its exit where its
/// memory map is released (its shared mappings written back then, as at
/// `munmap`). It shares `kthreadd`'s (process 2, see
/// [`kthreadd_comparable`]), which is none. One system call without a path
/// lookup or a descriptor, where opening `/proc/PID/maps` costs several
/// times as much; most processes of a machine are kernel threads.
///
/// Errors: `ESRCH` (exited), `EPERM` (not allowed to inspect it),
/// `ENOSYS` (no `kcmp`), `EINVAL` (not a process ID).
fn no_memory_map(pid: &std::ffi::OsStr) -> io::Result<bool> {
    let pid = std::str::from_utf8(pid.as_bytes())
        .ok()
        .and_then(|p| p.parse::<libc::pid_t>().ok())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    if pid == 2 {
        return Ok(true);
    }
    Ok(kcmp_vm(pid, 2)? == 0)
}

/// `kcmp(a, b, KCMP_VM)`: 0 when the two processes share one memory map
/// (or both have none), else 1 or 2 (an order).
fn kcmp_vm(a: libc::pid_t, b: libc::pid_t) -> io::Result<libc::c_long> {
    // SAFETY: kcmp takes two process IDs, a type and two indexes unused
    // for KCMP_VM; it reads and writes no memory of the caller.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, a, b, KCMP_VM, 0, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// `struct procmap_query` of `<linux/fs.h>` (Linux 6.11).
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `PROCMAP_QUERY`: `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: libc::c_ulong = (3 << 30)
    | ((std::mem::size_of::<ProcmapQuery>() as libc::c_ulong) << 16)
    | ((b'f' as libc::c_ulong) << 8)
    | 17;
const PROCMAP_QUERY_VMA_SHARED: u64 = 0x08;
const PROCMAP_QUERY_COVERING_OR_NEXT_VMA: u64 = 0x10;
const PROCMAP_QUERY_FILE_BACKED_VMA: u64 = 0x20;

/// Adds to `inos` the inodes of device `dev` that the process of the open
/// `maps` file maps shared, asking the kernel for its shared file-backed
/// mappings one by one (`PROCMAP_QUERY`; the same `VM_MAYSHARE` test as
/// the `s` of the text). `ENOTTY`: the kernel has no `PROCMAP_QUERY`;
/// `ESRCH`/`ENOENT` at the first query: the process has exited or has no
/// memory map (a kernel thread).
fn query_shared(maps: &std::fs::File, dev: (u32, u32), inos: &mut Vec<u64>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut addr = 0u64;
    loop {
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_flags: PROCMAP_QUERY_COVERING_OR_NEXT_VMA
                | PROCMAP_QUERY_VMA_SHARED
                | PROCMAP_QUERY_FILE_BACKED_VMA,
            query_addr: addr,
            ..ProcmapQuery::default()
        };
        // SAFETY: an open /proc/PID/maps and a `procmap_query` whose size
        // field says its size; no name or build-id buffer is given (their
        // sizes are 0), so the kernel writes only into `q`.
        let r = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY as _, &mut q) };
        if r < 0 {
            let e = io::Error::last_os_error();
            // No shared file mapping at or after `addr`.
            if e.raw_os_error() == Some(libc::ENOENT) {
                return Ok(());
            }
            return Err(e);
        }
        if (q.dev_major, q.dev_minor) == dev && q.inode != 0 {
            inos.push(q.inode);
        }
        if q.vma_end <= addr {
            return Ok(());
        }
        addr = q.vma_end;
    }
}

/// The inode of one `maps` line (`START-END PERMS OFFSET MAJ:MIN INODE
/// [PATH]`) when it maps a file of device `dev` shared.
fn shared_ino(line: &[u8], dev: (u32, u32)) -> Option<u64> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty()).skip(1);
    let perms = fields.next()?;
    if perms.get(3) != Some(&b's') {
        return None;
    }
    let _offset = fields.next()?;
    let (major, minor) = {
        let d = std::str::from_utf8(fields.next()?).ok()?;
        let (a, b) = d.split_once(':')?;
        (
            u32::from_str_radix(a, 16).ok()?,
            u32::from_str_radix(b, 16).ok()?,
        )
    };
    if (major, minor) != dev {
        return None;
    }
    let ino: u64 = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    (ino != 0).then_some(ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_mapping_of_the_device_is_found() {
        let dev = (0, 0x35);
        let line = b"7f1c2a000000-7f1c2a010000 rw-s 00000000 00:35 1234   /mnt/f.bin";
        assert_eq!(shared_ino(line, dev), Some(1234));
        let ro = b"7f1c2a000000-7f1c2a010000 r--s 00000000 00:35 99 /mnt/g";
        assert_eq!(shared_ino(ro, dev), Some(99));
        let private = b"7f1c2a000000-7f1c2a010000 rw-p 00000000 00:35 1234 /mnt/f.bin";
        assert_eq!(shared_ino(private, dev), None);
        let other = b"7f1c2a000000-7f1c2a010000 rw-s 00000000 08:01 1234 /x";
        assert_eq!(shared_ino(other, dev), None);
        let anon = b"7f1c2a000000-7f1c2a010000 rw-s 00000000 00:35 0 ";
        assert_eq!(shared_ino(anon, dev), None);
        assert_eq!(shared_ino(b"", dev), None);
    }

    /// Where the daemon may compare processes with kthreadd (root, in
    /// the initial pid namespace): every kernel thread is told apart
    /// without opening its maps, and no process with a memory map is
    /// taken for one (this one, a child, the init process if it may be
    /// inspected).
    #[test]
    fn kernel_threads_and_only_they_have_no_memory_map() {
        if !kthreadd_comparable() {
            eprintln!("skipped: kcmp with kthreadd is not allowed here");
            return;
        }
        let me = std::process::id().to_string();
        assert!(!no_memory_map(std::ffi::OsStr::new(&me)).expect("self"));
        // The init process, unless it is not ours to inspect (its maps are
        // not readable then either: the scan counts it as unreadable).
        match no_memory_map(std::ffi::OsStr::new("1")) {
            Ok(none) => assert!(!none, "init"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "init: {e}"),
        }
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id().to_string();
        let child_has_one = !no_memory_map(std::ffi::OsStr::new(&pid)).expect("child");
        let _ = child.kill();
        let _ = child.wait();
        assert!(child_has_one);
        // kthreadd's children are kernel threads (and the helpers the
        // kernel starts, which have a memory map: none is running here,
        // or it is told as such by its `stat`).
        let children = std::fs::read_to_string("/proc/2/task/2/children").expect("children");
        let mut kthreads = 0;
        for pid in children.split_whitespace() {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // The flags, the 9th field (the 7th after the name's ')').
            let flags: u64 = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(6))
                .and_then(|f| f.parse().ok())
                .expect("flags");
            let kthread = flags & 0x0020_0000 != 0;
            match no_memory_map(std::ffi::OsStr::new(pid)) {
                Ok(none) if none == kthread => {}
                // A helper the kernel started, exiting meanwhile (its
                // memory map released): a zombie or gone by now.
                Ok(_) => {
                    let now = std::fs::read_to_string(format!("/proc/{pid}/stat"));
                    let state = now.as_deref().ok().and_then(|s| s.rsplit_once(')'));
                    let exited =
                        state.is_none_or(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']));
                    assert!(exited, "process {pid}: kernel thread {kthread}");
                }
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "{pid}: {e}"),
            }
            kthreads += usize::from(kthread);
        }
        assert!(kthreads > 0, "no kernel thread seen: {children}");
    }

    #[test]
    fn this_process_mapping_a_file_shared_is_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m");
        std::fs::write(&path, vec![0u8; 4096]).expect("write");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open");
        let st = super::super::fstat(std::os::fd::AsFd::as_fd(&f)).expect("fstat");
        // SAFETY: a fresh shared mapping of a 4096-byte file, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let dev = mount_dev(&path).expect("dev");
        assert_eq!(
            dev,
            (libc::major(st.st_dev), libc::minor(st.st_dev)),
            "statx and stat agree on the device"
        );
        let found = shared_mappings(dev).expect("scan");
        // The kernel's answer to PROCMAP_QUERY, and the text, for this
        // process: the same shared inodes of the device.
        let maps = std::fs::File::open("/proc/self/maps").expect("maps");
        let mut queried = Vec::new();
        let asked = query_shared(&maps, dev, &mut queried);
        let text = std::fs::read("/proc/self/maps").expect("maps text");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, 4096) };
        assert!(found.inos.contains(&st.st_ino), "{found:?}");
        let mut from_text: Vec<u64> = text
            .split(|&b| b == b'\n')
            .filter_map(|l| shared_ino(l, dev))
            .collect();
        from_text.sort_unstable();
        from_text.dedup();
        match asked {
            Ok(()) => {
                queried.sort_unstable();
                queried.dedup();
                assert_eq!(queried, from_text);
            }
            // A kernel before 6.11: the scan reads the text.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}"),
        }
    }
}
