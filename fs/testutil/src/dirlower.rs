//! [`DirLower`]: a plain directory as the lower layer of an overlay, so
//! `opfs-fs` can test (and its example can serve) `mount_overlay` without
//! the core. Not for production: it reads the directory live, so it is a
//! fixed snapshot only while nobody changes the directory.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use opfs_fs::overlay::{Attr, DirEntry, Kind, Lent, Lower};

/// A directory served as a read-only lower layer. Origins are the
/// directory's inode numbers (it must lie on one filesystem).
#[derive(Debug, Clone)]
pub struct DirLower {
    root: PathBuf,
}

impl DirLower {
    /// The lower layer of the directory `root`.
    pub fn new(root: impl Into<PathBuf>) -> DirLower {
        DirLower { root: root.into() }
    }

    fn full(&self, path: &[u8]) -> PathBuf {
        if path.is_empty() {
            self.root.clone()
        } else {
            self.root.join(OsStr::from_bytes(path))
        }
    }
}

/// `Ok(None)` for absence (also a parent that is not a directory).
fn absent<T>(res: io::Result<T>) -> io::Result<Option<T>> {
    match res {
        Ok(v) => Ok(Some(v)),
        // ENOENT, ENOTDIR
        Err(e) if matches!(e.raw_os_error(), Some(2 | 20)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn kind_of(ft: fs::FileType) -> Kind {
    if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_socket() {
        Kind::Socket
    } else if ft.is_char_device() {
        Kind::CharDevice
    } else if ft.is_block_device() {
        Kind::BlockDevice
    } else {
        Kind::File
    }
}

fn attr_of(md: &fs::Metadata) -> Attr {
    let kind = kind_of(md.file_type());
    let mtime = if md.mtime() >= 0 {
        UNIX_EPOCH + Duration::new(md.mtime().unsigned_abs(), md.mtime_nsec() as u32)
    } else {
        UNIX_EPOCH - Duration::new(md.mtime().unsigned_abs(), 0)
    };
    let ctime = if md.ctime() >= 0 {
        UNIX_EPOCH + Duration::new(md.ctime().unsigned_abs(), md.ctime_nsec() as u32)
    } else {
        UNIX_EPOCH - Duration::new(md.ctime().unsigned_abs(), 0)
    };
    Attr {
        kind,
        ctime,
        perm: md.mode() & 0o7777,
        size: match kind {
            Kind::File | Kind::Symlink => md.size(),
            _ => 0,
        },
        uid: md.uid(),
        gid: md.gid(),
        mtime,
        nlink: u32::try_from(md.nlink()).unwrap_or(u32::MAX),
        rdev: md.rdev(),
        origin: md.ino(),
    }
}

impl Lower for DirLower {
    fn getattr(&self, path: &[u8]) -> io::Result<Option<Attr>> {
        Ok(absent(fs::symlink_metadata(self.full(path)))?.map(|md| attr_of(&md)))
    }

    fn read_at(&self, path: &[u8], offset: u64, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let full = self.full(path);
        let Some(md) = absent(fs::symlink_metadata(&full))? else {
            return Ok(None);
        };
        if md.is_dir() {
            return Err(io::Error::from_raw_os_error(21)); // EISDIR
        }
        if !md.is_file() {
            return Err(io::Error::from_raw_os_error(22)); // EINVAL
        }
        let file = fs::File::open(&full)?;
        let mut done = 0;
        while done < buf.len() {
            let n = file.read_at(&mut buf[done..], offset + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(Some(done))
    }

    fn with_file(
        &self,
        path: &[u8],
        use_fd: &mut dyn FnMut(BorrowedFd<'_>) -> io::Result<()>,
    ) -> io::Result<Option<Lent>> {
        let full = self.full(path);
        let Some(md) = absent(fs::symlink_metadata(&full))? else {
            return Ok(None);
        };
        if md.is_dir() {
            return Err(io::Error::from_raw_os_error(21)); // EISDIR
        }
        if !md.is_file() {
            return Err(io::Error::from_raw_os_error(22)); // EINVAL
        }
        let Some(file) = absent(fs::File::open(&full))? else {
            return Ok(None);
        };
        use_fd(file.as_fd())?;
        Ok(Some(Lent::Fd))
    }

    fn readdir(&self, path: &[u8]) -> io::Result<Option<Vec<DirEntry>>> {
        let Some(rd) = absent(fs::read_dir(self.full(path)))? else {
            return Ok(None);
        };
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent?;
            out.push(DirEntry {
                name: ent.file_name().as_bytes().to_vec(),
                kind: kind_of(ent.file_type()?),
            });
        }
        Ok(Some(out))
    }

    fn readlink(&self, path: &[u8]) -> io::Result<Option<Vec<u8>>> {
        Ok(absent(fs::read_link(self.full(path)))?.map(|t| t.as_os_str().as_bytes().to_vec()))
    }
}

/// The root directory a [`DirLower`] serves.
impl AsRef<Path> for DirLower {
    fn as_ref(&self) -> &Path {
        &self.root
    }
}
