//! The kernel's mount table (`/proc/self/mountinfo`): whether a path is a
//! mount point, and which opfs mounts exist.

use std::path::{Path, PathBuf};

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// One line of the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    /// The mount point, unescaped.
    point: String,
    /// The filesystem type (`fuse.opfs`, `fuse`, `ext4`, ...).
    fstype: String,
    /// The mount source, unescaped (`opfs:<project>` for opfs's mounts).
    source: String,
}

/// The mount table read once: a caller that asks several questions of it
/// (the daemon's start-up checks) reads `/proc/self/mountinfo` once. An
/// unreadable table is empty.
#[derive(Debug, Clone, Default)]
pub struct Table {
    lines: Vec<Line>,
}

impl Table {
    /// Reads `/proc/self/mountinfo` (empty when it cannot be read).
    pub fn read() -> Table {
        std::fs::read_to_string(MOUNTINFO)
            .map(|t| Table::parse(&t))
            .unwrap_or_default()
    }

    /// The table `text` (the format of `/proc/self/mountinfo`) describes;
    /// malformed lines are left out.
    pub fn parse(text: &str) -> Table {
        let lines = text
            .lines()
            .filter_map(|l| {
                let (left, right) = l.split_once(" - ")?;
                let mut fields = right.split(' ');
                let (fstype, source) = (fields.next()?, fields.next()?);
                Some(Line {
                    point: unescape(left.split(' ').nth(4)?),
                    fstype: fstype.to_string(),
                    source: unescape(source),
                })
            })
            .collect();
        Table { lines }
    }

    /// True when `path` is a mount point.
    pub fn is_mount_point(&self, path: &Path) -> bool {
        let want = path.to_string_lossy();
        self.lines.iter().any(|l| l.point == want)
    }

    /// The mountpoints of every opfs mount (type `fuse.opfs`, or a FUSE
    /// mount whose source is `opfs:<project>`, the name the daemon gives
    /// its mounts).
    pub fn opfs_mountpoints(&self) -> Vec<PathBuf> {
        self.lines
            .iter()
            .filter(|l| {
                l.fstype == "fuse.opfs"
                    || (l.fstype.starts_with("fuse") && l.source.starts_with("opfs:"))
            })
            .map(|l| PathBuf::from(&l.point))
            .collect()
    }

    /// Every opfs mount as `(mountpoint, project)`: the project is the
    /// source's path after `opfs:` (the name the daemon gives its mount).
    pub fn opfs_mounts(&self) -> Vec<(PathBuf, PathBuf)> {
        self.lines
            .iter()
            .filter(|l| l.fstype.starts_with("fuse"))
            .filter_map(|l| {
                let project = l.source.strip_prefix("opfs:")?;
                Some((PathBuf::from(&l.point), PathBuf::from(project)))
            })
            .collect()
    }

    /// The mountpoints of the FUSE mounts whose source is `source`.
    pub fn fuse_mounts_of(&self, source: &str) -> Vec<PathBuf> {
        self.lines
            .iter()
            .filter(|l| l.fstype.starts_with("fuse") && l.source == source)
            .map(|l| PathBuf::from(&l.point))
            .collect()
    }
}

/// True when `path` is a mount point (listed in `/proc/self/mountinfo`).
/// An unreadable mount table counts as "not a mount point".
pub fn is_mount_point(path: &Path) -> bool {
    Table::read().is_mount_point(path)
}

/// The mount points at or below `dir` (in `/proc/self/mountinfo`), each
/// once, deepest first: the order in which they can be unmounted. An
/// unreadable mount table gives none.
pub fn mount_points_under(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Table::read()
        .lines
        .into_iter()
        .map(|l| PathBuf::from(l.point))
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by(|a, b| {
        b.components()
            .count()
            .cmp(&a.components().count())
            .then_with(|| a.cmp(b))
    });
    found.dedup();
    found
}

/// The mountpoints of every opfs mount on this machine
/// ([`Table::opfs_mountpoints`] of the table now).
pub fn opfs_mountpoints() -> Vec<PathBuf> {
    Table::read().opfs_mountpoints()
}

/// A mountinfo field with its octal escapes (`\040` for a space, `\011`,
/// `\012`, `\134`) decoded; bytes that are not UTF-8 are replaced.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            out.push(v as u8);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_under_the_root_come_deepest_first() {
        let all = mount_points_under(Path::new("/"));
        assert_eq!(all.last().map(PathBuf::as_path), Some(Path::new("/")));
        assert!(all
            .windows(2)
            .all(|w| w[0].components().count() >= w[1].components().count()));
        assert!(mount_points_under(Path::new("/nonexistent-opfs-test")).is_empty());
    }

    #[test]
    fn one_read_of_the_table_answers_every_question() {
        let t = Table::parse(concat!(
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n",
            "40 22 0:50 / /tmp/m\\040n rw,nosuid - fuse.opfs opfs:/tmp/p\\040q rw\n",
            "41 22 0:51 / /tmp/w rw - fuse opfs:/tmp/p\\040q rw\n",
            "42 22 0:52 / /tmp/other rw - fuse.sshfs host:/x rw\n",
            "garbage\n",
        ));
        assert!(t.is_mount_point(Path::new("/tmp/m n")));
        assert!(!t.is_mount_point(Path::new("/tmp")));
        assert_eq!(
            t.opfs_mountpoints(),
            [PathBuf::from("/tmp/m n"), PathBuf::from("/tmp/w")]
        );
        assert_eq!(
            t.fuse_mounts_of("opfs:/tmp/p q"),
            [PathBuf::from("/tmp/m n"), PathBuf::from("/tmp/w")]
        );
        assert!(t.fuse_mounts_of("host:/x").len() == 1);
    }

    #[test]
    fn octal_escapes_are_decoded() {
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape(r"/x\134y\011z"), "/x\\y\tz");
        assert_eq!(unescape(r"/trailing\04"), r"/trailing\04");
    }
}
