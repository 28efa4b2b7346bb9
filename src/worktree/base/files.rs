//! The files the base lends an overlay handle: the project's own file
//! (checked against the records at each read), a pre-image's blob file,
//! or a pre-image's bytes held in memory.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use opfs_fs::overlay::{Lower, LowerFile};

use super::Core;

/// The project's own file, opened once for an overlay handle. Each read
/// reads the open file, then checks that the project's records still
/// hold nothing for the path ([`Core::still_current`]: one index query
/// and one `stat` of the capture log, against a lookup, an `lstat`, an
/// `open`, a `close` and two such checks per read before); when a
/// capture gave the path a record meanwhile, the read is answered again
/// from the record, as every later read of the handle is.
pub(super) struct ProjectFile {
    pub(super) core: Arc<Core>,
    pub(super) path: Vec<u8>,
    pub(super) file: File,
    pub(super) generation: AtomicU64,
}

impl LowerFile for ProjectFile {
    /// One `pread` and one `fstat` (the drift check's) for a read that
    /// reaches the file's end, where reading until a `pread` returns 0
    /// took a second `pread`: a short read is taken as the end only when
    /// the `fstat` after it says the file ends there.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = read_some_at(&self.file, offset, buf)?;
        let mut st = self.file.metadata();
        if n > 0 && n < buf.len() && st.as_ref().map_or(true, |m| m.len() > offset + n as u64) {
            n += read_full_at(&self.file, offset + n as u64, &mut buf[n..])?;
            st = self.file.metadata();
        }
        if self.core.still_current(&self.path, &self.generation)? {
            if let Ok(st) = st {
                self.core.check_drift(&self.path, &st);
            }
            return Ok(n);
        }
        self.core
            .read_at(&self.path, offset, buf)?
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }
}

/// A pre-image's blob file.
pub(super) struct BlobFile(pub(super) File);

impl LowerFile for BlobFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        read_full_at(&self.0, offset, buf)
    }
}

/// A pre-image's bytes, held in memory (at most the inline size).
pub(super) struct BytesFile(pub(super) Vec<u8>);

impl LowerFile for BytesFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.0.len());
        let n = (self.0.len() - start).min(buf.len());
        buf[..n].copy_from_slice(&self.0[start..start + n]);
        Ok(n)
    }
}

/// One `pread` of `file` at `offset` into `buf` (retried when
/// interrupted): the bytes read.
fn read_some_at(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match file.read_at(buf, offset) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// Reads `buf.len()` bytes of `file` at `offset`, fewer only at its end.
pub(super) fn read_full_at(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
