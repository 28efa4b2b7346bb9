//! Sparse files: holes stay holes through a capture and a restore.
//!
//! A file's data is walked with `SEEK_DATA`/`SEEK_HOLE` ([`segments`]), so
//! a 10 GiB image holding a few KiB is read (and stored) as those KiB: a
//! blob file gets the same holes ([`BlobStore::put_file`]; chunks of zeros
//! inside data are left as holes too), and writing a blob back
//! ([`copy_sparse`]) writes its data and punches holes where the target
//! held bytes (`fallocate(FALLOC_FL_PUNCH_HOLE)`, or zeros where the
//! filesystem cannot punch). The BLAKE3 of a blob is still that of every
//! byte, holes as zeros, so a hole costs hashing, not reading or storage.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use rustix::fs::{FallocateFlags, SeekFrom};

use super::blob::{BlobError, BlobStore, IN_MEMORY_LIMIT};
use crate::record::Hash;

/// Bytes read or written at a time.
const CHUNK: usize = 1 << 20;

/// The data runs `(offset, len)` of the first `size` bytes of `file`, in
/// order; everything between them reads as zeros. A filesystem without
/// `SEEK_DATA` gives one run of everything.
///
/// Errors: the kernel's, other than "not supported".
pub fn segments(file: &File, size: u64) -> io::Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut at = 0u64;
    while at < size {
        let data = match rustix::fs::seek(file, SeekFrom::Data(at)) {
            Ok(d) => d,
            Err(rustix::io::Errno::NXIO) => break,
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) if at == 0 => {
                return Ok(vec![(0, size)]);
            }
            Err(e) => return Err(e.into()),
        };
        if data >= size {
            break;
        }
        let hole = match rustix::fs::seek(file, SeekFrom::Hole(data)) {
            Ok(h) => h.min(size),
            Err(rustix::io::Errno::NXIO) => size,
            Err(e) => return Err(e.into()),
        };
        if hole <= data {
            break;
        }
        out.push((data, hole - data));
        at = hole;
    }
    Ok(out)
}

/// Feeds `len` zero bytes to `hasher`.
fn hash_zeros(hasher: &mut blake3::Hasher, zeros: &[u8], mut len: u64) {
    while len > 0 {
        let n = len.min(zeros.len() as u64) as usize;
        hasher.update(&zeros[..n]);
        len -= n as u64;
    }
}

/// Writes `len` zero bytes at `offset` of `out`: a punched hole, or zeros
/// where the filesystem cannot punch one.
fn zero_range(out: &File, zeros: &[u8], offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    match rustix::fs::fallocate(
        out,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        offset,
        len,
    ) {
        Ok(()) => return Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {}
        Err(e) => return Err(e.into()),
    }
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(zeros.len() as u64) as usize;
        out.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Makes `out` hold exactly the first `size` bytes of `src`: its data runs
/// written at their offsets, every other byte a hole (punched where `out`
/// held bytes before), the length `size`. Leaves `out`'s position alone.
///
/// Errors: reading `src` or writing `out` failed (`out` is then partly
/// written).
pub fn copy_sparse(src: &File, size: u64, out: &File) -> io::Result<()> {
    let old_len = out.metadata()?.len().min(size);
    let zeros = vec![0u8; CHUNK];
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    for (offset, len) in segments(src, size)? {
        zero_range(out, &zeros, at, offset.min(old_len).saturating_sub(at))?;
        let mut pos = offset;
        while pos < offset + len {
            let n = (offset + len - pos).min(CHUNK as u64) as usize;
            src.read_exact_at(&mut buf[..n], pos)?;
            out.write_all_at(&buf[..n], pos)?;
            pos += n as u64;
        }
        at = offset + len;
    }
    zero_range(out, &zeros, at, old_len.saturating_sub(at))?;
    out.set_len(size)
}

impl BlobStore {
    /// Stores the first `size` bytes of `file` (the capture's descriptor,
    /// at position 0) and returns the digest and `size`. Above
    /// [`IN_MEMORY_LIMIT`] bytes the file is read at offsets in one pass:
    /// its holes are not read, and they (and any zero chunk) stay holes in
    /// the blob file. A file that is shorter than `size` by the time it is
    /// read is an error.
    ///
    /// After `Ok` the blob is complete under its name; after `Err` nothing
    /// is stored under any name (as [`BlobStore::put`]).
    pub fn put_file(&self, file: &File, size: u64) -> Result<(Hash, u64), BlobError> {
        if size <= IN_MEMORY_LIMIT {
            return self.put(&mut &*file, size);
        }
        let src_err = |source| BlobError::Io {
            path: PathBuf::from("<source file>"),
            source,
        };
        let runs = segments(file, size).map_err(src_err)?;
        let tmp = self.tmp_path();
        let tmp_err = |source| BlobError::Io {
            path: tmp.clone(),
            source,
        };
        let result = (|| {
            let out = File::create(&tmp).map_err(tmp_err)?;
            let zeros = vec![0u8; CHUNK];
            let mut buf = vec![0u8; CHUNK];
            let mut hasher = blake3::Hasher::new();
            let mut at = 0u64;
            for &(offset, len) in &runs {
                hash_zeros(&mut hasher, &zeros, offset - at);
                let mut pos = offset;
                while pos < offset + len {
                    let n = (offset + len - pos).min(CHUNK as u64) as usize;
                    file.read_exact_at(&mut buf[..n], pos).map_err(src_err)?;
                    hasher.update(&buf[..n]);
                    if buf[..n].iter().any(|&b| b != 0) {
                        out.write_all_at(&buf[..n], pos).map_err(tmp_err)?;
                    }
                    pos += n as u64;
                }
                at = offset + len;
            }
            hash_zeros(&mut hasher, &zeros, size - at);
            out.set_len(size).map_err(tmp_err)?;
            if self.is_sync() {
                out.sync_all().map_err(tmp_err)?;
            }
            Ok(*hasher.finalize().as_bytes())
        })();
        match result {
            Ok(hash) => {
                self.mark_fresh(&hash);
                if self.contains(&hash) {
                    let _ = std::fs::remove_file(&tmp);
                } else {
                    self.install(&tmp, &hash)?;
                }
                Ok((hash, size))
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                match e {
                    // Cut short under the capture (a truncation through
                    // another handle): store what it holds now, streamed.
                    BlobError::Io { ref source, .. }
                        if source.kind() == io::ErrorKind::UnexpectedEof =>
                    {
                        self.put(&mut Reader(file, 0), size)
                    }
                    e => Err(e),
                }
            }
        }
    }
}

/// Reads `file` from offset `.1` on, without moving its position.
struct Reader<'a>(&'a File, u64);

impl io::Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.0.read_at(buf, self.1)?;
        self.1 += n as u64;
        Ok(n)
    }
}
