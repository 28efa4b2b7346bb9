//! What opfs keeps on disk for one project (`opfs status`): every file of its state dir, counted by what it is for, and the
//! byte sizes the CLI accepts and prints (`10M`, `2G`, `512K`).
//!
//! Sizes are the disk space used (allocated blocks, as `du` counts them),
//! so a sparse file counts what it holds, not its length.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;

use crate::store::layout::{BLOBS, CAPTURE_LOG, DAEMON_LOG, EXPORT_DIR, INDEX, WORKTREES_DIR};
use crate::store::StateDir;

/// Bytes on disk of one state dir, by part. Every file is in exactly one
/// part; `total` is their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Blob files (`blobs/`, pre-images too large to live in the index).
    pub blobs: u64,
    /// The SQLite index (with its WAL and shared-memory files) and the
    /// capture log.
    pub index: u64,
    /// The daemon's log files.
    pub logs: u64,
    /// The shadow git export (`export.git`).
    pub export: u64,
    /// Worktrees: their upper layers and metadata (`opfs status` also
    /// adds each worktree's own history, a state dir of its own).
    pub worktrees: u64,
    /// Anything else (socket, lock, markers, leftovers).
    pub other: u64,
    /// All of it.
    pub total: u64,
}

/// Counts every file of `state`'s dir. Files that vanish or cannot be
/// read while it counts are left out: the figure is a snapshot, never an
/// error (a state dir that does not exist uses 0 bytes).
pub fn of(state: &StateDir) -> Usage {
    let mut u = Usage::default();
    let Ok(entries) = std::fs::read_dir(&state.dir) else {
        return u;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let bytes = disk_bytes(&e.path());
        let part = if name == BLOBS {
            &mut u.blobs
        } else if name.starts_with(INDEX) || name == CAPTURE_LOG {
            &mut u.index
        } else if name.starts_with(DAEMON_LOG) {
            &mut u.logs
        } else if name == EXPORT_DIR {
            &mut u.export
        } else if name == WORKTREES_DIR {
            &mut u.worktrees
        } else {
            &mut u.other
        };
        *part += bytes;
        u.total += bytes;
    }
    u
}

/// Bytes free for an unprivileged writer on the filesystem that holds
/// `dir` (`statvfs`: available blocks times the fragment size); `None`
/// when it cannot be asked.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let v = rustix::fs::statvfs(dir).ok()?;
    Some(v.f_bavail.saturating_mul(v.f_frsize))
}

/// Disk bytes of `path` and, for a directory, everything below it (not
/// following symlinks, not crossing into other filesystems' mounts).
pub fn disk_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut n = meta.blocks() * 512;
    if meta.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for e in entries.flatten() {
                let p = e.path();
                match e.metadata() {
                    Ok(m) if m.dev() != meta.dev() => {}
                    Ok(_) => n += disk_bytes(&p),
                    Err(_) => {}
                }
            }
        }
    }
    n
}

/// A size that is not one of the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not a size: give bytes (1048576) or a number with K, M, G or T (512K, 10M, 2G; \
     powers of 1024, an optional iB or B after the letter)"
)]
pub struct BadSize {
    /// The value as given.
    pub value: String,
}

/// Parses a size: plain bytes (`1048576`) or a number with a suffix `K`,
/// `M`, `G`, `T` (powers of 1024, any case, optionally followed by `iB` or
/// `B`: `10M`, `10MiB`, `2g`, `512KB`). A fraction is allowed with a
/// suffix (`1.5G`).
///
/// Errors: [`BadSize`] for anything else, an empty value, a negative one,
/// or one over `u64::MAX` bytes.
pub fn parse_size(value: &str) -> Result<u64, BadSize> {
    let bad = || BadSize {
        value: value.to_string(),
    };
    let v = value.trim();
    let digits = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, suffix) = v.split_at(digits);
    if num.is_empty() {
        return Err(bad());
    }
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    if shift == 0 {
        return num.parse::<u64>().map_err(|_| bad());
    }
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(1 << shift).ok_or_else(bad);
    }
    let f: f64 = num.parse().map_err(|_| bad())?;
    let bytes = f * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes.round() as u64)
}

/// `bytes` for people: `0 B`, `512 B`, `1.5 KiB`, `12.3 MiB`, `2.0 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_and_without_suffixes() {
        assert_eq!(parse_size("1048576"), Ok(1048576));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("10M"), Ok(10 << 20));
        assert_eq!(parse_size("10MiB"), Ok(10 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("2GB"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("7b"), Ok(7));
        for bad in ["", "M", "10Q", "-1", "1.5", "ten", "10 M M", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        let msg = match parse_size("10Q") {
            Err(e) => e.to_string(),
            Ok(n) => panic!("10Q parsed as {n}"),
        };
        assert!(msg.contains("512K, 10M, 2G"), "{msg}");
    }

    #[test]
    fn sizes_for_people() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(5 << 30), "5.0 GiB");
    }
}
