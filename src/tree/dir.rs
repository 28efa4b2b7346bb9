//! [`Dir`]: the project directory itself, reached through a confined
//! directory fd (today the only [`Tree`](super::Tree)).
//!
//! `Dir` holds a directory fd on the project root and resolves every path
//! beneath it with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` for the
//! parent directory and `*at(..., AT_SYMLINK_NOFOLLOW)` / `O_NOFOLLOW` for
//! the final name. A symlink anywhere in a path therefore fails with `ELOOP`
//! instead of being followed: nothing the core does can be redirected
//! outside the project (design §4). Every system call goes through `rustix`,
//! so this file has no `unsafe`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, StatxFlags, CWD};

use super::is_not_found;
use crate::paths;
use crate::record::Stat;

/// A directory fd on the project root and confined operations beneath it.
#[derive(Debug)]
pub struct Dir {
    root: OwnedFd,
    path: PathBuf,
}

fn cstr(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The fields of a `stat(2)` result the core uses.
fn stat_of(st: &rustix::fs::Stat) -> Stat {
    Stat {
        mode: st.st_mode,
        size: st.st_size as u64,
        mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64,
        ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64,
        dev: st.st_dev,
        ino: st.st_ino,
        rdev: st.st_rdev,
        nlink: st.st_nlink,
        uid: st.st_uid,
        gid: st.st_gid,
    }
}

/// [`stat_of`] of a `statx` result, and its birth time (ns since the Unix
/// epoch) when the filesystem reported one.
fn statx_of(stx: &rustix::fs::Statx) -> (Stat, Option<i64>) {
    let ns = |t: &rustix::fs::StatxTimestamp| t.tv_sec * 1_000_000_000 + i64::from(t.tv_nsec);
    let st = Stat {
        mode: u32::from(stx.stx_mode),
        size: stx.stx_size,
        mtime_ns: ns(&stx.stx_mtime),
        ctime_ns: ns(&stx.stx_ctime),
        dev: rustix::fs::makedev(stx.stx_dev_major, stx.stx_dev_minor),
        ino: stx.stx_ino,
        rdev: rustix::fs::makedev(stx.stx_rdev_major, stx.stx_rdev_minor),
        nlink: u64::from(stx.stx_nlink),
        uid: stx.stx_uid,
        gid: stx.stx_gid,
    };
    let born = (stx.stx_mask & StatxFlags::BTIME.bits() != 0).then(|| ns(&stx.stx_btime));
    (st, born)
}

/// `openat` flags from the `libc` ones callers pass (the same bits).
fn oflags(flags: libc::c_int) -> OFlags {
    OFlags::from_bits_retain(flags as u32)
}

impl Dir {
    /// Opens the project directory at `path`.
    ///
    /// Errors: the directory cannot be opened (missing, not a directory,
    /// permission).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let c = cstr(path.as_os_str().as_bytes())?;
        let root = rustix::fs::open(
            c.as_c_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Dir {
            root,
            path: path.to_path_buf(),
        })
    }

    /// The descriptor of the project root.
    pub(super) fn root_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The project directory this tree was opened on.
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
        self.openat2(target, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC)
    }

    /// An `O_PATH` descriptor of the entry at `rel` itself (a final
    /// symlink is not followed; one on the way is refused, `ELOOP`).
    pub fn open_path(&self, rel: &[u8]) -> io::Result<OwnedFd> {
        self.openat2(rel, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC)
    }

    fn openat2(&self, rel: &[u8], flags: OFlags) -> io::Result<OwnedFd> {
        let c = cstr(rel)?;
        Ok(rustix::fs::openat2(
            &self.root,
            c.as_c_str(),
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        )?)
    }

    /// The parent directory of `rel` (opened confined) and the final name.
    pub(super) fn parent(&self, rel: &[u8]) -> io::Result<(OwnedFd, CString)> {
        let (parent, name) =
            paths::split(rel).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok((self.open_dir(parent)?, cstr(name)?))
    }

    /// `lstat` of `rel`. `Ok(None)` when the path does not exist (missing
    /// name, or a parent that is not a directory, a symlink included: no
    /// path of the tree lies below a symlink).
    pub fn lstat(&self, rel: &[u8]) -> io::Result<Option<Stat>> {
        if rel.is_empty() {
            return Ok(Some(stat_of(&rustix::fs::fstat(&self.root)?)));
        }
        Ok(self.entry(rel)?.map(|(_, _, st)| stat_of(&st)))
    }

    /// One `fstatat` of `rel` from the root, without `AT_SYMLINK_NOFOLLOW`
    /// on the way (a symlinked parent is followed; the last component is
    /// not): [`crate::tree::Tree::lstat_hint`]. `Ok(None)` when absent.
    pub fn lstat_hint(&self, rel: &[u8]) -> io::Result<Option<Stat>> {
        if rel.is_empty() {
            return self.lstat(rel);
        }
        stat_nofollow(&self.root, rel)
    }

    /// The parent directory of `rel` (not empty), its name there and its
    /// `lstat`; `None` when the path does not exist. A symlink as the parent
    /// gives ENOTDIR (O_DIRECTORY | O_NOFOLLOW), one further up ELOOP
    /// (RESOLVE_NO_SYMLINKS): both mean the path is not in the tree. Writes
    /// below it still fail with ELOOP.
    fn entry(&self, rel: &[u8]) -> io::Result<Option<(OwnedFd, CString, rustix::fs::Stat)>> {
        let (dir, name) = match self.parent(rel) {
            Ok(p) => p,
            Err(e) if is_not_found(&e) || e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some((dir, name, st))),
            Err(e) => {
                let e = io::Error::from(e);
                if is_not_found(&e) {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// [`Dir::lstat`], and for a regular file also the file opened
    /// read-only, resolving the parent once (what a capture needs). The
    /// stat returned for a file is that of the opened descriptor, so it
    /// describes the bytes read from it even if the name was replaced in
    /// between.
    pub fn lstat_open(&self, rel: &[u8]) -> io::Result<Option<(Stat, Option<File>)>> {
        if rel.is_empty() {
            return Ok(self.lstat(rel)?.map(|st| (st, None)));
        }
        let Some((dir, name, st)) = self.entry(rel)? else {
            return Ok(None);
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(Some((stat_of(&st), None)));
        }
        let Some(file) = open_entry(&dir, &name) else {
            // Replaced or removed since the stat: report what is there now.
            return Ok(self.lstat(rel)?.map(|st| (st, None)));
        };
        let st = rustix::fs::fstat(&file)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(Some((stat_of(&st), None)));
        }
        Ok(Some((stat_of(&st), Some(file))))
    }

    /// [`Dir::lstat_open`] and [`Dir::born_ns`] at once: `statx` with the
    /// birth time takes the place of the `lstat` (and, for a regular file,
    /// of the `fstat` of the opened descriptor), so the birth time costs no
    /// system call of its own. The birth time is `None` when the
    /// filesystem does not report one.
    #[allow(clippy::type_complexity)]
    pub fn lstat_open_born(
        &self,
        rel: &[u8],
    ) -> io::Result<Option<(Stat, Option<File>, Option<i64>)>> {
        if rel.is_empty() {
            let born = self.born_ns(rel, None)?;
            return Ok(self.lstat(rel)?.map(|st| (st, None, born)));
        }
        let (dir, name) = match self.parent(rel) {
            Ok(p) => p,
            Err(e) if is_not_found(&e) || e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
            Err(e) => return Err(e),
        };
        entry_open_born(dir.as_fd(), &name)
    }

    /// [`Dir::lstat_open_born`] of the entry at `rel` read through
    /// `parent`, a descriptor of the directory holding it (what the FUSE
    /// layer is about to change it in, `MutationHook::before_in`): the
    /// parent is not resolved again, so what is read is the entry the
    /// mutation changes even if the directory moved since the layer named
    /// it. `None` resolves `rel` as [`Dir::lstat_open_born`] does.
    #[allow(clippy::type_complexity)]
    pub fn lstat_open_born_in(
        &self,
        rel: &[u8],
        parent: Option<BorrowedFd<'_>>,
    ) -> io::Result<Option<(Stat, Option<File>, Option<i64>)>> {
        match (parent, paths::split(rel)) {
            (Some(dir), Some((_, name))) => entry_open_born(dir, &cstr(name)?),
            _ => self.lstat_open_born(rel),
        }
    }

    /// [`Dir::lstat`] of the entry at `rel` read through `parent` (as for
    /// [`Dir::lstat_open_born_in`]; `None` resolves `rel`).
    pub fn lstat_in(&self, rel: &[u8], parent: Option<BorrowedFd<'_>>) -> io::Result<Option<Stat>> {
        let (Some(dir), Some((_, name))) = (parent, paths::split(rel)) else {
            return self.lstat(rel);
        };
        stat_nofollow(dir, name)
    }

    /// [`Dir::open_file`] of the entry at `rel` opened through `parent`, a
    /// descriptor of the directory holding it (as for
    /// [`Dir::lstat_open_born_in`]; `None` resolves `rel`).
    pub fn open_file_in(
        &self,
        rel: &[u8],
        parent: Option<BorrowedFd<'_>>,
        flags: libc::c_int,
    ) -> io::Result<File> {
        let (Some(dir), Some((_, name))) = (parent, paths::split(rel)) else {
            return self.open_file(rel, flags, 0);
        };
        let fd = rustix::fs::openat(
            dir,
            cstr(name)?.as_c_str(),
            oflags(flags) | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(File::from(fd))
    }

    /// [`Dir::read_link`] of the symlink at `rel` read through `parent`
    /// (as for [`Dir::lstat_open_born_in`]; `None` resolves `rel`).
    pub fn read_link_in(&self, rel: &[u8], parent: Option<BorrowedFd<'_>>) -> io::Result<Vec<u8>> {
        let (Some(dir), Some((_, name))) = (parent, paths::split(rel)) else {
            return self.read_link(rel);
        };
        Ok(rustix::fs::readlinkat(dir, cstr(name)?.as_c_str(), Vec::new())?.into_bytes())
    }

    /// When the inode at `rel` was born (created), ns since the Unix epoch,
    /// from `statx(2)` with `STATX_BTIME`; `file`, when given, is that
    /// inode already open (no path walk). `Ok(None)` when the path is gone
    /// or the filesystem does not report birth times (ext4, xfs, btrfs and
    /// tmpfs do). Timestamps come from the kernel's coarse clock, so the
    /// value may lie a few ms before the true instant.
    pub fn born_ns(&self, rel: &[u8], file: Option<&File>) -> io::Result<Option<i64>> {
        let res = match file {
            Some(f) => rustix::fs::statx(f, c"", AtFlags::EMPTY_PATH, StatxFlags::BTIME),
            None if rel.is_empty() => {
                rustix::fs::statx(&self.root, c"", AtFlags::EMPTY_PATH, StatxFlags::BTIME)
            }
            None => {
                let (dir, name) = match self.parent(rel) {
                    Ok(p) => p,
                    Err(e) if is_not_found(&e) || e.raw_os_error() == Some(libc::ELOOP) => {
                        return Ok(None)
                    }
                    Err(e) => return Err(e),
                };
                rustix::fs::statx(
                    &dir,
                    name.as_c_str(),
                    AtFlags::SYMLINK_NOFOLLOW,
                    StatxFlags::BTIME,
                )
            }
        };
        let stx = match res {
            Ok(stx) => stx,
            Err(e) => {
                let e = io::Error::from(e);
                return if is_not_found(&e) { Ok(None) } else { Err(e) };
            }
        };
        if stx.stx_mask & StatxFlags::BTIME.bits() == 0 {
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
        let fd = rustix::fs::openat(
            &dir,
            name.as_c_str(),
            oflags(flags) | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_bits_retain(mode),
        )?;
        Ok(File::from(fd))
    }

    /// The target of the symlink at `rel`, as bytes.
    pub fn read_link(&self, rel: &[u8]) -> io::Result<Vec<u8>> {
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::readlinkat(&dir, name.as_c_str(), Vec::new())?.into_bytes())
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

    /// [`Dir::list_dir`] with each entry's type (its `S_IFMT` bits) as the
    /// directory reports it (`d_type`; an `lstat` of the entry where the
    /// filesystem reports none, 0 when that fails).
    pub fn list_dir_typed(&self, rel: &[u8]) -> io::Result<Vec<(Vec<u8>, u32)>> {
        use std::os::unix::fs::FileTypeExt;
        let dir = self.open_dir(rel)?;
        let proc = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let mut names = Vec::new();
        for entry in std::fs::read_dir(proc)? {
            let entry = entry?;
            let kind = entry.file_type().map_or(0, |t| {
                if t.is_file() {
                    libc::S_IFREG
                } else if t.is_dir() {
                    libc::S_IFDIR
                } else if t.is_symlink() {
                    libc::S_IFLNK
                } else if t.is_fifo() {
                    libc::S_IFIFO
                } else if t.is_socket() {
                    libc::S_IFSOCK
                } else if t.is_char_device() {
                    libc::S_IFCHR
                } else if t.is_block_device() {
                    libc::S_IFBLK
                } else {
                    0
                }
            });
            names.push((entry.file_name().as_bytes().to_vec(), kind));
        }
        Ok(names)
    }

    /// Makes `dest` (an absolute path outside the project, on the same
    /// filesystem) another name of the file at `rel` (`linkat`, not
    /// following a final symlink).
    pub fn link_out(&self, rel: &[u8], dest: &Path) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        let d = cstr(dest.as_os_str().as_bytes())?;
        Ok(rustix::fs::linkat(
            &dir,
            name.as_c_str(),
            CWD,
            d.as_c_str(),
            AtFlags::empty(),
        )?)
    }

    /// Makes `rel` another name of the file at `src` (an absolute path
    /// outside the project, on the same filesystem).
    pub fn link_in(&self, src: &Path, rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        let s = cstr(src.as_os_str().as_bytes())?;
        Ok(rustix::fs::linkat(
            CWD,
            s.as_c_str(),
            &dir,
            name.as_c_str(),
            AtFlags::empty(),
        )?)
    }

    /// Makes `to` another name of the file at `from` (`linkat` within the
    /// project, not following a final symlink at `from`).
    ///
    /// Errors: `EEXIST` when `to` exists, `ENOENT` when `from` does not,
    /// `ELOOP` for a symlink on either way, else the kernel's error.
    pub fn link(&self, from: &[u8], to: &[u8]) -> io::Result<()> {
        let (from_dir, from_name) = self.parent(from)?;
        let (to_dir, to_name) = self.parent(to)?;
        Ok(rustix::fs::linkat(
            &from_dir,
            from_name.as_c_str(),
            &to_dir,
            to_name.as_c_str(),
            AtFlags::empty(),
        )?)
    }

    /// For each inode number in `inos`, one path of the tree that names a
    /// regular file with that inode on the project's filesystem, except
    /// the paths `skip` accepts and the excluded ones (`.git/`). Walks the
    /// whole tree: one `getdents` per directory (the directory entries'
    /// inode numbers), and one `lstat` per entry whose number matches, to
    /// confirm it (entries on another filesystem, or numbers a filesystem
    /// reports differently in `getdents`, are not taken). Stops early once
    /// every number has a name. Unreadable directories are skipped.
    ///
    /// Errors: the root cannot be listed.
    pub fn find_names(
        &self,
        inos: &std::collections::BTreeSet<u64>,
        skip: &dyn Fn(&[u8]) -> bool,
    ) -> io::Result<std::collections::BTreeMap<u64, Vec<u8>>> {
        use std::os::unix::fs::DirEntryExt;
        let mut found = std::collections::BTreeMap::new();
        let root_dev = rustix::fs::fstat(&self.root)?.st_dev;
        let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
        let mut first = true;
        while let Some(dir) = stack.pop() {
            let listing = self.open_dir(&dir).and_then(|fd| {
                std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd())).map(|it| (fd, it))
            });
            let (_fd, entries) = match listing {
                Ok(l) => l,
                Err(e) if first => return Err(e),
                Err(_) => continue,
            };
            first = false;
            for entry in entries.flatten() {
                let rel = paths::join(&dir, entry.file_name().as_bytes());
                if paths::is_excluded(&rel) {
                    continue;
                }
                let Ok(ft) = entry.file_type() else { continue };
                if ft.is_dir() {
                    stack.push(rel);
                } else if ft.is_file()
                    && inos.contains(&entry.ino())
                    && !found.contains_key(&entry.ino())
                    && !skip(&rel)
                {
                    if let Ok(Some(st)) = self.lstat(&rel) {
                        if st.ino == entry.ino()
                            && st.dev == root_dev
                            && st.file_type() == libc::S_IFREG
                        {
                            found.insert(st.ino, rel);
                            if found.len() == inos.len() {
                                return Ok(found);
                            }
                        }
                    }
                }
            }
        }
        Ok(found)
    }

    /// Removes the non-directory at `rel`.
    pub fn unlink(&self, rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::unlinkat(
            &dir,
            name.as_c_str(),
            AtFlags::empty(),
        )?)
    }

    /// Removes the empty directory at `rel`.
    pub fn rmdir(&self, rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::unlinkat(
            &dir,
            name.as_c_str(),
            AtFlags::REMOVEDIR,
        )?)
    }

    /// Creates the directory `rel` and gives it exactly `perm` (not masked by
    /// the umask).
    pub fn mkdir(&self, rel: &[u8], perm: u32) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        rustix::fs::mkdirat(&dir, name.as_c_str(), Mode::from_bits_retain(0o700))?;
        self.chmod(rel, perm)
    }

    /// Creates the symlink `rel` pointing at `target` (bytes, not resolved).
    pub fn symlink(&self, target: &[u8], rel: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        let t = cstr(target)?;
        Ok(rustix::fs::symlinkat(t.as_c_str(), &dir, name.as_c_str())?)
    }

    /// Creates a fifo, socket or device node at `rel` with `mode` (type and
    /// permission bits) and device number `rdev`.
    pub fn mknod(&self, rel: &[u8], mode: u32, rdev: u64) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        let file_type = match mode & libc::S_IFMT {
            // mknod(2) reads no type bits as a regular file.
            0 => FileType::RegularFile,
            // Invalid type bits stay invalid (EINVAL from the kernel).
            t => FileType::from_raw_mode(t),
        };
        rustix::fs::mknodat(
            &dir,
            name.as_c_str(),
            file_type,
            Mode::from_bits_retain(0o600),
            rdev,
        )?;
        self.chmod(rel, mode & 0o7777)
    }

    /// Sets the permission bits of `rel` without following a final symlink
    /// (symlinks themselves have no mode of their own on Linux: `EOPNOTSUPP`).
    pub fn chmod(&self, rel: &[u8], perm: u32) -> io::Result<()> {
        let target = if rel.is_empty() { &b"."[..] } else { rel };
        let fd = self.openat2(target, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC)?;
        let st = rustix::fs::fstat(&fd)?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        let proc = cstr(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()).as_bytes())?;
        Ok(rustix::fs::chmod(
            proc.as_c_str(),
            Mode::from_bits_retain(perm),
        )?)
    }

    /// True when the project directory this tree holds was removed (its
    /// link count dropped to 0): every path beneath it is gone and nothing
    /// can be created there any more.
    pub fn is_deleted(&self) -> bool {
        matches!(rustix::fs::fstat(&self.root), Ok(st) if st.st_nlink == 0)
    }

    /// Flushes the filesystem holding the project to stable storage
    /// (`syncfs(2)`). Errors: the kernel's (`EIO` after a write-back
    /// failure).
    pub fn syncfs(&self) -> io::Result<()> {
        Ok(rustix::fs::syncfs(&self.root)?)
    }
}

/// The `statx` (with the birth time) of the entry `name` of `dir` and, for
/// a regular file, the file opened read-only, whose own `statx` is then
/// the one returned (it describes the bytes read from it even if the name
/// was replaced in between). `None` when the name is absent (or `dir` is
/// no longer a directory).
#[allow(clippy::type_complexity)]
fn entry_open_born(
    dir: BorrowedFd<'_>,
    name: &std::ffi::CStr,
) -> io::Result<Option<(Stat, Option<File>, Option<i64>)>> {
    let want = StatxFlags::BASIC_STATS | StatxFlags::BTIME;
    let stat_name = || match rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, want) {
        Ok(stx) => Ok(Some(statx_of(&stx))),
        Err(e) => {
            let e = io::Error::from(e);
            if is_not_found(&e) {
                Ok(None)
            } else {
                Err(e)
            }
        }
    };
    let Some((st, born)) = stat_name()? else {
        return Ok(None);
    };
    if st.file_type() != libc::S_IFREG {
        return Ok(Some((st, None, born)));
    }
    let Some(file) = open_entry(&dir, name) else {
        // Replaced or removed since the stat: report what is there now.
        return Ok(stat_name()?.map(|(st, born)| (st, None, born)));
    };
    let stx = rustix::fs::statx(&file, c"", AtFlags::EMPTY_PATH, want)?;
    let (st, born) = statx_of(&stx);
    if st.file_type() != libc::S_IFREG {
        return Ok(Some((st, None, born)));
    }
    Ok(Some((st, Some(file), born)))
}

/// Opens the entry `name` of `dir` read-only for a capture, without
/// following a symlink or blocking on a fifo; `None` when that fails (the
/// entry was replaced or removed since it was stat'ed: the caller reports
/// what is there now).
///
/// With `O_NOATIME`: the capture's read must not change the file's access
/// time (zero intrusion), and a fresh file's first read would otherwise
/// dirty its inode (`relatime`), a journal update per captured file. The
/// kernel allows the flag only to the file's owner or with `CAP_FOWNER`;
/// on `EPERM` the file is opened without it.
fn open_entry(dir: &impl rustix::fd::AsFd, name: &std::ffi::CStr) -> Option<File> {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    match rustix::fs::openat(dir, name, flags | OFlags::NOATIME, Mode::empty()) {
        Ok(fd) => Some(File::from(fd)),
        Err(rustix::io::Errno::PERM) => rustix::fs::openat(dir, name, flags, Mode::empty())
            .ok()
            .map(File::from),
        Err(_) => None,
    }
}

/// One `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `Ok(None)` when absent.
fn stat_nofollow<Fd: rustix::fd::AsFd>(dir: Fd, name: &[u8]) -> io::Result<Option<Stat>> {
    match rustix::fs::statat(dir, cstr(name)?.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(stat_of(&st))),
        Err(e) => {
            let e = io::Error::from(e);
            if is_not_found(&e) {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}
