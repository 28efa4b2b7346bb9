#![allow(clippy::unwrap_used)]

//! Which files of one directory are opened, by name (inotify `IN_OPEN`):
//! for tests that check a process does not open a file again.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Counts the opens of files in one directory (inotify `IN_OPEN`), by
/// name.
pub struct Opens {
    fd: i32,
}

impl Opens {
    pub fn watch(dir: &Path) -> Opens {
        // SAFETY: plain syscalls on a new descriptor and a valid C string.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(fd >= 0, "inotify_init1");
            let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
            assert!(
                libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_OPEN) >= 0,
                "inotify_add_watch {}",
                dir.display()
            );
            Opens { fd }
        }
    }

    /// The names opened since the last call (or the watch), in order.
    pub fn take(&self) -> Vec<String> {
        let mut names = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: reads into a buffer of its length.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return names;
            }
            let mut at = 0usize;
            while at + 16 <= n as usize {
                let len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap()) as usize;
                let name = &buf[at + 16..at + 16 + len];
                let name = name.split(|&b| b == 0).next().unwrap_or(b"");
                names.push(String::from_utf8_lossy(name).into_owned());
                at += 16 + len;
            }
        }
    }
}

impl Drop for Opens {
    fn drop(&mut self) {
        // SAFETY: our descriptor.
        unsafe { libc::close(self.fd) };
    }
}
