//! The background daemon's log file (`daemon.log` in the state dir) and
//! its rotation: when it passes [`LOG_CAP`] bytes it is renamed to
//! `daemon.log.1` (`.1` to `.2`, and so on; the oldest beyond [`LOG_KEEP`]
//! is dropped) and a new one is started. [`rotate_if_over`] runs before a
//! daemon starts; [`RotatingLog`] is the writer the daemon's logger writes
//! through, so a long-running daemon rotates too. What the daemon writes
//! to its stderr without the logger (a panic message) goes to the file
//! that was `daemon.log` when it started.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Size (bytes) past which the log is rotated.
pub const LOG_CAP: u64 = 4 << 20;

/// How many rotated logs are kept (`daemon.log.1` .. `daemon.log.N`).
pub const LOG_KEEP: u32 = 3;

/// `path` with `.n` appended.
fn numbered(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// Shifts `path.1 .. path.{keep-1}` up by one (dropping `path.{keep}`)
/// and renames `path` to `path.1`. A missing file is skipped.
///
/// Errors: a rename fails for another reason than a missing file (the
/// log then grows on; nothing is lost).
pub fn rotate(path: &Path, keep: u32) -> io::Result<()> {
    let skip_missing = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    };
    if keep == 0 {
        return skip_missing(std::fs::remove_file(path));
    }
    for n in (1..keep).rev() {
        skip_missing(std::fs::rename(numbered(path, n), numbered(path, n + 1)))?;
    }
    skip_missing(std::fs::rename(path, numbered(path, 1)))
}

/// Rotates `path` ([`rotate`]) when it holds more than `cap` bytes.
///
/// Errors: as [`rotate`].
pub fn rotate_if_over(path: &Path, cap: u64, keep: u32) -> io::Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > cap => rotate(path, keep),
        _ => Ok(()),
    }
}

/// An append-only log file that rotates itself past `cap` bytes.
#[derive(Debug)]
pub struct RotatingLog {
    path: PathBuf,
    file: File,
    len: u64,
    cap: u64,
    keep: u32,
}

impl RotatingLog {
    /// Opens (creating) `path` for appending.
    ///
    /// Errors: the file cannot be opened or its size read.
    pub fn open(path: &Path, cap: u64, keep: u32) -> io::Result<RotatingLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let len = file.metadata()?.len();
        Ok(RotatingLog {
            path: path.to_path_buf(),
            file,
            len,
            cap,
            keep,
        })
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Write for RotatingLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.len > 0 && self.len + buf.len() as u64 > self.cap {
            // A failed rotation leaves the log growing; the record is
            // written all the same.
            if rotate(&self.path, self.keep).is_ok() {
                if let Ok(f) = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                {
                    self.file = f;
                    self.len = 0;
                }
            }
        }
        let n = self.file.write(buf)?;
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_rotates_past_its_cap_and_keeps_n() {
        let dir = std::env::temp_dir().join(format!("opfs-logfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("daemon.log");
        let mut log = RotatingLog::open(&path, 100, 2).expect("open");
        for i in 0..10 {
            // 50 bytes a line, in one write (as the logger writes a record).
            log.write_all(format!("{i:<49}\n").as_bytes())
                .expect("write");
        }
        // 10 lines of 50 bytes, 2 per file: the newest two files and two
        // rotated ones; the oldest were dropped.
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        assert_eq!(read(&path).lines().count(), 2);
        assert!(read(&path).starts_with('8'), "{}", read(&path));
        assert!(read(&numbered(&path, 1)).starts_with('6'));
        assert!(read(&numbered(&path, 2)).starts_with('4'));
        assert!(!numbered(&path, 3).exists());
        std::fs::write(&path, vec![b'x'; 200]).expect("write");
        rotate_if_over(&path, 100, 2).expect("rotate");
        assert!(!path.exists());
        assert_eq!(read(&numbered(&path, 1)).len(), 200);
        std::fs::remove_dir_all(&dir).expect("rm");
    }
}
