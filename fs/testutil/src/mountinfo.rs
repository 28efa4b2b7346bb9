//! The mount table, as `/proc/self/mountinfo` lists it.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The mount points of this process's mount namespace, in table order (the
/// fifth field of every line of `/proc/self/mountinfo`, unescaped).
///
/// Panics when the table cannot be read: a test that cannot see the mount
/// table must fail, not conclude that nothing is mounted.
pub fn mount_points() -> Vec<PathBuf> {
    let info = fs::read("/proc/self/mountinfo").expect("read /proc/self/mountinfo");
    info.split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(4))
        .map(|field| PathBuf::from(OsString::from_vec(unescape(field))))
        .collect()
}

/// Whether `path` is a mount point right now (compared byte for byte with
/// the unescaped table entries; `path` is not canonicalized).
pub fn is_mounted(path: &Path) -> bool {
    let want = path.as_os_str().as_bytes();
    mount_points()
        .iter()
        .any(|m| m.as_os_str().as_bytes() == want)
}

/// Polls the mount table until `path` is (`mounted`) or is no longer a
/// mount point; false if that did not happen within `timeout`.
pub fn wait_mount_state(path: &Path, mounted: bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if is_mounted(path) == mounted {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Undoes the octal escapes of a mountinfo field (`\040` for a space,
/// `\011` tab, `\012` newline, `\134` backslash); anything else is kept.
pub fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\' && i + 4 <= field.len() {
            let digits = &field[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                out.push(v as u8);
                i += 4;
                continue;
            }
        }
        out.push(field[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_undoes_the_kernel_escapes_and_keeps_the_rest() {
        assert_eq!(unescape(br"/tmp/a\040b"), b"/tmp/a b");
        assert_eq!(unescape(br"/x\011y\012z\134w"), b"/x\ty\nz\\w");
        assert_eq!(unescape(br"/plain"), b"/plain");
        // Not three octal digits: kept as they are.
        assert_eq!(unescape(br"/a\09x"), br"/a\09x");
        assert_eq!(unescape(br"/end\04"), br"/end\04");
    }

    #[test]
    fn the_root_is_mounted_and_a_fresh_dir_is_not() {
        assert!(is_mounted(Path::new("/")));
        let dir = std::env::temp_dir().join(format!("opfs-testutil-{}", std::process::id()));
        assert!(!is_mounted(&dir));
    }
}
