//! Conversions between the backing filesystem's `stat` world and FUSE's:
//! attributes, file types, device numbers and timestamps. Pure functions,
//! no system calls.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo, TimeOrNow};

/// `sec` seconds and `nsec` nanoseconds after the epoch (`sec` may be
/// negative; `nsec` is clamped to `0..1e9`).
pub(crate) fn time(sec: i64, nsec: i64) -> SystemTime {
    let nsec = u32::try_from(nsec.clamp(0, 999_999_999)).unwrap_or(0);
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec.unsigned_abs(), nsec)
    } else {
        UNIX_EPOCH - Duration::new(sec.unsigned_abs(), 0) + Duration::new(0, nsec)
    }
}

/// The FUSE file type of a `st_mode`.
pub(crate) fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// The FUSE file type of a dirent's `d_type`.
pub(crate) fn dtype_kind(d_type: u8) -> FileType {
    match d_type {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// The kernel's 32-bit device encoding (`new_encode_dev`) of a `dev_t`.
pub(crate) fn encode_dev(dev: u64) -> u32 {
    let major = libc::major(dev as libc::dev_t);
    let minor = libc::minor(dev as libc::dev_t);
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// The `dev_t` of the kernel's 32-bit device encoding (`new_decode_dev`).
pub(crate) fn decode_dev(dev: u32) -> u64 {
    let major = (dev & 0xfff00) >> 8;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    libc::makedev(major, minor)
}

/// The FUSE attributes of FUSE inode `ino` whose backing inode is `st`.
pub(crate) fn attr(ino: u64, st: &libc::stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size.max(0) as u64,
        blocks: st.st_blocks.max(0) as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: kind_of(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: encode_dev(st.st_rdev),
        blksize: u32::try_from(st.st_blksize).unwrap_or(4096),
        flags: 0,
    }
}

/// Placeholder attributes for a readdirplus `.` or `..` entry: the kernel
/// never links these, it only uses the dirent part.
pub(crate) fn dot_attr(ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::Directory,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// The `utimensat` timespec for one `setattr` time: `None` leaves it
/// (`UTIME_OMIT`), `Now` is `UTIME_NOW`, a time before the epoch becomes a
/// negative seconds count with a non-negative nanosecond part.
pub(crate) fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
            },
            Err(before) => {
                let d = before.duration();
                let mut sec = -(d.as_secs() as libc::time_t);
                let mut nsec = libc::c_long::from(d.subsec_nanos() as i32);
                if nsec > 0 {
                    sec -= 1;
                    nsec = 1_000_000_000 - nsec;
                }
                libc::timespec {
                    tv_sec: sec,
                    tv_nsec: nsec,
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_round_trip() {
        for (major, minor) in [(0, 0), (1, 3), (8, 17), (259, 0), (4095, 1_048_575)] {
            let dev = libc::makedev(major, minor);
            assert_eq!(decode_dev(encode_dev(dev)), dev, "{major}:{minor}");
        }
        // The classic 8-bit layout is kept for small numbers: 8:1 is 0x801.
        assert_eq!(encode_dev(libc::makedev(8, 1)), 0x801);
    }

    #[test]
    fn times_before_and_after_the_epoch() {
        assert_eq!(time(0, 0), UNIX_EPOCH);
        assert_eq!(time(2, 5), UNIX_EPOCH + Duration::new(2, 5));
        assert_eq!(
            time(-2, 250_000_000),
            UNIX_EPOCH - Duration::from_millis(1750)
        );
        // Out-of-range nanoseconds are clamped, not wrapped.
        assert_eq!(
            time(1, 2_000_000_000),
            UNIX_EPOCH + Duration::new(1, 999_999_999)
        );
    }

    #[test]
    fn timespec_round_trips_time() {
        for (sec, nsec) in [(0, 0), (5, 1), (-1, 500_000_000), (-3, 0)] {
            let ts = timespec(Some(TimeOrNow::SpecificTime(time(sec, nsec))));
            assert_eq!((ts.tv_sec, ts.tv_nsec), (sec, nsec));
        }
        assert_eq!(timespec(None).tv_nsec, libc::UTIME_OMIT);
        assert_eq!(timespec(Some(TimeOrNow::Now)).tv_nsec, libc::UTIME_NOW);
    }
}
