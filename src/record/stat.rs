//! The part of a `stat(2)` result the core uses, as plain data.

/// The part of `struct stat` the core uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `st_mode`: file type and permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the Unix epoch.
    pub mtime_ns: i64,
    /// Change time, ns since the Unix epoch.
    pub ctime_ns: i64,
    /// Device number of the containing filesystem.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Device number for character and block devices.
    pub rdev: u64,
    /// Hard link count.
    pub nlink: u64,
    /// Owner user id.
    pub uid: u32,
    /// Owner group id.
    pub gid: u32,
}

impl Stat {
    /// The fields of a `stat(2)` result.
    pub fn from_raw(st: &libc::stat) -> Stat {
        Stat {
            mode: st.st_mode,
            size: st.st_size as u64,
            mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec,
            ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec,
            dev: st.st_dev,
            ino: st.st_ino,
            rdev: st.st_rdev,
            nlink: st.st_nlink,
            uid: st.st_uid,
            gid: st.st_gid,
        }
    }

    /// The fields of a `stat(2)` result as std reads them (`fstat` of an
    /// open file: `File::metadata`).
    pub fn from_metadata(m: &std::fs::Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt;
        Stat {
            mode: m.mode(),
            size: m.size(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            dev: m.dev(),
            ino: m.ino(),
            rdev: m.rdev(),
            nlink: m.nlink(),
            uid: m.uid(),
            gid: m.gid(),
        }
    }

    /// The file type bits (`S_IFMT` part) of the mode.
    pub fn file_type(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    /// The permission bits (including setuid, setgid, sticky).
    pub fn perm(&self) -> u32 {
        self.mode & 0o7777
    }
}
