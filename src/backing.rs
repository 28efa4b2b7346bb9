//! Confined access to the project directory.
//!
//! Everything the core reads or writes in the project goes through a
//! [`Backing`], which holds a directory fd on the project root and resolves
//! every path beneath it with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! for the parent directory and `*at(..., AT_SYMLINK_NOFOLLOW)` / `O_NOFOLLOW`
//! for the final name. A symlink anywhere in a path therefore fails with
//! `ELOOP` instead of being followed: nothing the core does can be redirected
//! outside the project (design §4).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::paths;
use crate::record::Stat;

/// A directory fd on the project root and confined operations beneath it.
#[derive(Debug)]
pub struct Backing {
    root: OwnedFd,
    path: PathBuf,
}

fn cstr(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// True when the error means "no such path" (a missing name or a parent that
/// is not a directory).
pub fn is_not_found(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR))
}

impl Backing {
    /// Opens the project directory at `path`.
    ///
    /// Errors: the directory cannot be opened (missing, not a directory,
    /// permission).
    pub fn open(path: &Path) -> io::Result<Backing> {
        let c = cstr(path.as_os_str().as_bytes())?;
        // SAFETY: `c` is a valid NUL-terminated string; the returned fd is owned below.
        let fd = check(unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        let root = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Backing {
            root,
            path: path.to_path_buf(),
        })
    }

    /// The project directory this backing was opened on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the directory at project-relative `rel` (`""` is the root) for
    /// reading, refusing symlinks anywhere on the way (`ELOOP`).
    pub fn open_dir(&self, rel: &[u8]) -> io::Result<OwnedFd> {
        let target = if rel.is_empty() { &b"."[..] } else { rel };
        // No O_NOFOLLOW: RESOLVE_NO_SYMLINKS already refuses a symlink in
        // every position, and reports it as ELOOP. With O_NOFOLLOW a final
        // symlink would be ENOTDIR, which `lstat` reads as "absent": a
        // directory swapped for a symlink would look like a deleted one.
        self.openat2(target, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC)
    }

    fn openat2(&self, rel: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
        let c = cstr(rel)?;
        // SAFETY: zeroed open_how is a valid value; fields set below.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = flags as u64;
        how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS;
        // SAFETY: valid fd, string and struct pointers for the duration of the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.root.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a new fd that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
    }

    fn parent(&self, rel: &[u8]) -> io::Result<(OwnedFd, CString)> {
        let (parent, name) =
            paths::split(rel).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok((self.open_dir(parent)?, cstr(name)?))
    }

    /// `lstat` of `rel`. `Ok(None)` when the path does not exist (missing
    /// name, or a parent that is not a directory, a symlink included: no
    /// path of the tree lies below a symlink).
    pub fn lstat(&self, rel: &[u8]) -> io::Result<Option<Stat>> {
        if rel.is_empty() {
            // SAFETY: zeroed stat is a valid out-parameter.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: valid fd and out pointer.
            check(unsafe { libc::fstat(self.root.as_raw_fd(), &mut st) })?;
            return Ok(Some(Stat::from_raw(&st)));
        }
        Ok(self.entry(rel)?.map(|(_, _, st)| Stat::from_raw(&st)))
    }

    /// The parent directory of `rel` (not empty), its name there and its
    /// `lstat`; `None` when the path does not exist. A symlink as the parent
    /// gives ENOTDIR (O_DIRECTORY | O_NOFOLLOW), one further up ELOOP
    /// (RESOLVE_NO_SYMLINKS): both mean the path is not in the tree. Writes
    /// below it still fail with ELOOP.
    fn entry(&self, rel: &[u8]) -> io::Result<Option<(OwnedFd, CString, libc::stat)>> {
        let (dir, name) = match self.parent(rel) {
            Ok(p) => p,
            Err(e) if is_not_found(&e) || e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
            Err(e) => return Err(e),
        };
        // SAFETY: zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, name and out pointer.
        let res = check(unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        });
        match res {
            Ok(_) => Ok(Some((dir, name, st))),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// [`Backing::lstat`], and for a regular file also the file opened
    /// read-only, resolving the parent once (what a capture needs). The
    /// stat returned for a file is that of the opened descriptor, so it
    /// describes the bytes read from it even if the name was replaced in
    /// between.
    pub fn lstat_open(&self, rel: &[u8]) -> io::Result<Option<(Stat, Option<File>)>> {
        if rel.is_empty() {
            return Ok(self.lstat(rel)?.map(|st| (st, None)));
        }
        let Some((dir, name, mut st)) = self.entry(rel)? else {
            return Ok(None);
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(Some((Stat::from_raw(&st), None)));
        }
        // SAFETY: valid fd and name.
        let fd = match check(unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY
                    | libc::O_NOFOLLOW
                    | libc::O_CLOEXEC
                    | libc::O_NONBLOCK
                    | libc::O_NOCTTY,
            )
        }) {
            Ok(fd) => fd,
            // Replaced or removed since the stat: report what is there now.
            Err(_) => return Ok(self.lstat(rel)?.map(|st| (st, None))),
        };
        // SAFETY: new fd owned by the File.
        let file = unsafe { File::from_raw_fd(fd) };
        // SAFETY: valid fd and out pointer.
        check(unsafe { libc::fstat(file.as_raw_fd(), &mut st) })?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(Some((Stat::from_raw(&st), None)));
        }
        Ok(Some((Stat::from_raw(&st), Some(file))))
    }

    /// When the inode at `rel` was born (created), ns since the Unix epoch,
    /// from `statx(2)` with `STATX_BTIME`; `file`, when given, is that
    /// inode already open (no path walk). `Ok(None)` when the path is gone
    /// or the filesystem does not report birth times (ext4, xfs, btrfs and
    /// tmpfs do). Timestamps come from the kernel's coarse clock, so the
    /// value may lie a few ms before the true instant.
    pub fn born_ns(&self, rel: &[u8], file: Option<&File>) -> io::Result<Option<i64>> {
        let parent;
        let (fd, name, flags) = match file {
            Some(f) => (f.as_raw_fd(), c"", libc::AT_EMPTY_PATH),
            None if rel.is_empty() => (self.root.as_raw_fd(), c"", libc::AT_EMPTY_PATH),
            None => {
                parent = match self.parent(rel) {
                    Ok(p) => p,
                    Err(e) if is_not_found(&e) || e.raw_os_error() == Some(libc::ELOOP) => {
                        return Ok(None)
                    }
                    Err(e) => return Err(e),
                };
                (
                    parent.0.as_raw_fd(),
                    parent.1.as_c_str(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            }
        };
        // SAFETY: zeroed statx is a valid out-parameter.
        let mut stx: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, C string and out pointer.
        let res = unsafe { libc::statx(fd, name.as_ptr(), flags, libc::STATX_BTIME, &mut stx) };
        if res < 0 {
            let e = io::Error::last_os_error();
            return if is_not_found(&e) { Ok(None) } else { Err(e) };
        }
        if stx.stx_mask & libc::STATX_BTIME == 0 {
            return Ok(None);
        }
        Ok(Some(
            stx.stx_btime.tv_sec * 1_000_000_000 + i64::from(stx.stx_btime.tv_nsec),
        ))
    }

    /// True when a directory on the way to `rel` is a symlink (resolving its
    /// parent fails with `ELOOP`): nothing can be at `rel` in the tree, and
    /// nothing may be written there.
    pub fn parent_is_symlink(&self, rel: &[u8]) -> bool {
        let Some((parent, _)) = paths::split(rel) else {
            return false;
        };
        matches!(self.open_dir(parent), Err(e) if e.raw_os_error() == Some(libc::ELOOP))
    }

    /// Opens the regular file at `rel` with `flags` (`O_NOFOLLOW` and
    /// `O_CLOEXEC` are added). `mode` is used when `flags` has `O_CREAT`.
    pub fn open_file(&self, rel: &[u8], flags: libc::c_int, mode: u32) -> io::Result<File> {
        let (dir, name) = self.parent(rel)?;
        // SAFETY: valid fd and name.
        let fd = check(unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        })?;
        // SAFETY: new fd owned by the File.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// The target of the symlink at `rel`, as bytes.
    pub fn read_link(&self, rel: &[u8]) -> io::Result<Vec<u8>> {
        let (dir, name) = self.parent(rel)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        // SAFETY: valid fd, name and buffer of the given length.
        let n = unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// The names in the directory at `rel`, without `.` and `..`, in no
    /// particular order.
    pub fn list_dir(&self, rel: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        let dir = self.open_dir(rel)?;
        let proc = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let mut names = Vec::new();
        for entry in std::fs::read_dir(proc)? {
            names.push(entry?.file_name().as_bytes().to_vec());
        }
        Ok(names)
    }

    /// Makes `dest` (an absolute path outside the project, on the same
    /// filesystem) another name of the file at `rel` (`linkat`, not
    /// following a final symlink).
    pub fn link_out(&self, rel: &[u8], dest: &Path) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        let d = cstr(dest.as_os_str().as_bytes())?;
        // SAFETY: valid fds and strings.
        check(unsafe {
            libc::linkat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::AT_FDCWD,
                d.as_ptr(),
                0,
            )
        })
        .map(drop)
    }

    /// Makes `rel` another name of the file at `src` (an absolute path
    /// outside the project, on the same filesystem).
    pub fn link_in(&self, src: &Path, rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        let s = cstr(src.as_os_str().as_bytes())?;
        // SAFETY: valid fds and strings.
        check(unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                s.as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
                0,
            )
        })
        .map(drop)
    }

    /// Removes the non-directory at `rel`.
    pub fn unlink(&self, rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        // SAFETY: valid fd and name.
        check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) }).map(drop)
    }

    /// Removes the empty directory at `rel`.
    pub fn rmdir(&self, rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        // SAFETY: valid fd and name.
        check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) })
            .map(drop)
    }

    /// Creates the directory `rel` and gives it exactly `perm` (not masked by
    /// the umask).
    pub fn mkdir(&self, rel: &[u8], perm: u32) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        // SAFETY: valid fd and name.
        check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o700) })?;
        self.chmod(rel, perm)
    }

    /// Creates the symlink `rel` pointing at `target` (bytes, not resolved).
    pub fn symlink(&self, target: &[u8], rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        let t = cstr(target)?;
        // SAFETY: valid strings and fd.
        check(unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
    }

    /// Creates a fifo, socket or device node at `rel` with `mode` (type and
    /// permission bits) and device number `rdev`.
    pub fn mknod(&self, rel: &[u8], mode: u32, rdev: u64) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        // SAFETY: valid fd and name.
        check(unsafe {
            libc::mknodat(
                dir.as_raw_fd(),
                name.as_ptr(),
                (mode & libc::S_IFMT) | 0o600,
                rdev as libc::dev_t,
            )
        })?;
        self.chmod(rel, mode & 0o7777)
    }

    /// Sets the permission bits of `rel` without following a final symlink
    /// (symlinks themselves have no mode of their own on Linux: `EOPNOTSUPP`).
    pub fn chmod(&self, rel: &[u8], perm: u32) -> io::Result<()> {
        let target = if rel.is_empty() { &b"."[..] } else { rel };
        let fd = self.openat2(target, libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)?;
        // SAFETY: zeroed stat is a valid out parameter; fd is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        let proc = cstr(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_bytes())?;
        // SAFETY: valid path string.
        check(unsafe { libc::chmod(proc.as_ptr(), perm as libc::mode_t) }).map(drop)
    }

    /// True when the project directory this backing holds was removed
    /// (its link count dropped to 0): every path beneath it is gone and
    /// nothing can be created there any more.
    pub fn is_deleted(&self) -> bool {
        // SAFETY: zeroed stat is a valid out-parameter; the fd is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and out pointer.
        let r = unsafe { libc::fstat(self.root.as_raw_fd(), &mut st) };
        r == 0 && st.st_nlink == 0
    }

    /// Flushes the filesystem holding the project to stable storage
    /// (`syncfs`).
    pub fn syncfs(&self) -> io::Result<()> {
        // SAFETY: valid fd.
        check(unsafe { libc::syncfs(self.root.as_raw_fd()) }).map(drop)
    }
}
