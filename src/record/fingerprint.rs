//! Fingerprints: what the mount last left at a path (design §2.6).
//!
//! After every mutation through the mount (and every path a rewind
//! restores) the journal remembers the path's type, inode number, size,
//! mtime and permission bits. A rewind compares each path it would write with that
//! fingerprint; a difference means someone changed the path directly in the
//! project, behind the mount's back, and the path is left alone and reported
//! unless `--force` is given.
//!
//! ctime is not compared: it also moves when another hard link to the same
//! inode is made or removed (by the mount or by a rewind), which is not a
//! change of this path. Same-tick changes are still caught: Linux 6.13+
//! gives ext4, xfs, btrfs and tmpfs multigrain timestamps, so once the
//! fingerprint's `stat` has read an inode's times, its next change gets a
//! fine-grained mtime (measured here: 0 of 3,000 immediate same-size
//! rewrites kept their mtime). On filesystems without that, a same-size
//! change within one timestamp tick of the mount's last write can go
//! unnoticed, and so can a change whose writer resets the mtime by hand;
//! `docs/design.md` says so.

use super::Stat;

/// The fingerprint of one path. `file_type == 0` means the path was absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    /// `S_IFMT` bits, or 0 for absent.
    pub file_type: u32,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// mtime, ns since the Unix epoch.
    pub mtime_ns: i64,
    /// Permission bits (`mode & 0o7777`).
    pub perm: u32,
}

impl Fingerprint {
    /// The fingerprint of a path whose `lstat` gave `stat` (`None`: absent).
    pub fn of(stat: Option<&Stat>) -> Fingerprint {
        match stat {
            None => Fingerprint {
                file_type: 0,
                ino: 0,
                size: 0,
                mtime_ns: 0,
                perm: 0,
            },
            Some(st) => Fingerprint {
                file_type: st.file_type(),
                ino: st.ino,
                size: st.size,
                mtime_ns: st.mtime_ns,
                perm: st.perm(),
            },
        }
    }

    /// Compares with the path's current `lstat`. Returns what differs, or
    /// `None` when the path is as the mount left it. Directories are
    /// compared by type and inode only: their times move with every entry
    /// added or removed inside them, which the entries' own fingerprints
    /// cover.
    pub fn differs(&self, current: Option<&Stat>) -> Option<String> {
        let now = Fingerprint::of(current);
        if now.file_type != self.file_type {
            return Some(match (self.file_type, now.file_type) {
                (0, _) => "it was created".to_string(),
                (_, 0) => "it was deleted".to_string(),
                _ => "its type changed".to_string(),
            });
        }
        if self.file_type == 0 {
            return None;
        }
        if now.ino != self.ino {
            return Some("it was replaced by another file".into());
        }
        if self.file_type == libc::S_IFDIR {
            return None;
        }
        if now.size != self.size {
            return Some(format!(
                "its size changed ({} -> {} bytes)",
                self.size, now.size
            ));
        }
        if now.mtime_ns != self.mtime_ns {
            return Some("its modification time changed".into());
        }
        if now.perm != self.perm {
            return Some(format!(
                "its permission bits changed ({:o} -> {:o})",
                self.perm, now.perm
            ));
        }
        None
    }
}
