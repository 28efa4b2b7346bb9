//! The kernel's mount table (`/proc/self/mountinfo`): whether a path is a
//! mount point, and which opfs mounts exist.

use std::path::{Path, PathBuf};

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// True when `path` is a mount point (listed in `/proc/self/mountinfo`).
/// An unreadable mount table counts as "not a mount point".
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string(MOUNTINFO) else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).map(unescape).is_some_and(|m| m == want))
}

/// The mount points at or below `dir` (in `/proc/self/mountinfo`), each
/// once, deepest first: the order in which they can be unmounted. An
/// unreadable mount table gives none.
pub fn mount_points_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string(MOUNTINFO) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(unescape).map(PathBuf::from))
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

/// The mountpoints of every opfs mount on this machine (in
/// `/proc/self/mountinfo`: type `fuse.opfs`, or a FUSE mount whose source is
/// `opfs:<project>`, the name the daemon gives its mounts).
pub fn opfs_mountpoints() -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string(MOUNTINFO) else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut fields = right.split(' ');
            let (fstype, source) = (fields.next()?, fields.next()?);
            if fstype != "fuse.opfs" && !(fstype.starts_with("fuse") && source.starts_with("opfs:"))
            {
                return None;
            }
            Some(PathBuf::from(unescape(left.split(' ').nth(4)?)))
        })
        .collect()
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
    fn octal_escapes_are_decoded() {
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape(r"/x\134y\011z"), "/x\\y\tz");
        assert_eq!(unescape(r"/trailing\04"), r"/trailing\04");
    }
}
