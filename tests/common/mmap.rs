//! A shared writable mapping of a whole file, for the tests that store
//! through mmap (`tests/rewind.rs`, `tests/model.rs`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// A shared writable mapping of a whole file, unmapped on drop (which writes
/// its dirty pages back). Its fd is closed once it is mapped and the mapping
/// is kept out of children (`MADV_DONTFORK`): the close of a FUSE fd, and
/// the unmap of a mapping a child inherited when the child execs (every
/// `opfs` command a test runs), write the file's dirty pages back, which
/// would hide what the mmap-across-a-boundary tests are about.
pub struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    /// Maps all of `file` (opened for reading and writing) and closes it.
    ///
    /// Errors: `fstat` or `mmap` fails (an empty file cannot be mapped:
    /// `EINVAL`).
    pub fn of(file: File) -> io::Result<Mapping> {
        let len = usize::try_from(file.metadata()?.len()).expect("file length fits usize");
        // SAFETY: a fresh shared mapping of the open file's `len` bytes;
        // nothing else refers to that memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = Mapping { ptr, len };
        // SAFETY: the mapping just made.
        let advised = unsafe { libc::madvise(ptr, len, libc::MADV_DONTFORK) };
        assert_eq!(advised, 0, "madvise: {}", io::Error::last_os_error());
        drop(file);
        Ok(map)
    }

    /// Opens `path` for reading and writing and maps all of it; panics on
    /// failure.
    pub fn new(path: &std::path::Path) -> Mapping {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open for mmap");
        Mapping::of(file).expect("mmap")
    }

    /// A plain store into the mapping (no msync): the page stays dirty in
    /// the kernel until something writes it back.
    pub fn store(&self, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= self.len, "store past the mapping");
        // SAFETY: inside the mapping, which lives as long as `self`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.cast::<u8>().add(offset),
                bytes.len(),
            );
        }
    }

    /// Makes the mapping read-only (`mprotect(PROT_READ)`): pages stored
    /// before stay dirty until something writes them back.
    pub fn protect_read_only(&self) {
        // SAFETY: the whole mapping made in `of`.
        let r = unsafe { libc::mprotect(self.ptr, self.len, libc::PROT_READ) };
        assert_eq!(r, 0, "mprotect: {}", io::Error::last_os_error());
    }

    /// Writes the dirty pages back and waits (`msync(MS_SYNC)`).
    pub fn sync(&self) {
        // SAFETY: the whole mapping made in `of`.
        let r = unsafe { libc::msync(self.ptr, self.len, libc::MS_SYNC) };
        assert_eq!(r, 0, "msync: {}", io::Error::last_os_error());
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `of`, unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}
