//! Directory listings: raw `getdents64` records and their parser.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Reads raw `linux_dirent64` records from a directory fd at its current
/// offset into `buf`; returns the number of bytes filled (0 at the end).
pub(crate) fn getdents(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: valid fd and buffer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// One parsed directory entry.
pub(crate) struct Dirent<'a> {
    pub(crate) ino: u64,
    pub(crate) offset: u64,
    pub(crate) kind: u8,
    pub(crate) name: &'a [u8],
}

/// Parses the records `getdents` produced.
pub(crate) fn parse_dirents(buf: &[u8]) -> Vec<Dirent<'_>> {
    // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 19 <= buf.len() {
        let rec = &buf[pos..];
        let ino = u64::from_ne_bytes(rec[0..8].try_into().unwrap_or([0; 8]));
        let off = u64::from_ne_bytes(rec[8..16].try_into().unwrap_or([0; 8]));
        let reclen = u16::from_ne_bytes(rec[16..18].try_into().unwrap_or([0; 2])) as usize;
        if reclen < 19 || pos + reclen > buf.len() {
            break;
        }
        let kind = rec[18];
        let raw = &rec[19..reclen];
        let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        out.push(Dirent {
            ino,
            offset: off,
            kind,
            name: &raw[..len],
        });
        pos += reclen;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::parse_dirents;

    /// One `linux_dirent64` record, padded to 8 bytes as the kernel does.
    fn record(ino: u64, off: u64, kind: u8, name: &[u8]) -> Vec<u8> {
        let len = (19 + name.len() + 1).div_ceil(8) * 8;
        let mut rec = Vec::new();
        rec.extend_from_slice(&ino.to_ne_bytes());
        rec.extend_from_slice(&off.to_ne_bytes());
        rec.extend_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_ne_bytes());
        rec.push(kind);
        rec.extend_from_slice(name);
        rec.resize(len, 0);
        rec
    }

    #[test]
    fn parses_records_and_stops_at_a_torn_one() {
        let mut buf = record(7, 1, libc::DT_DIR, b".");
        buf.extend(record(42, 2, libc::DT_REG, b"a long file name\xff"));
        let torn = record(43, 3, libc::DT_LNK, b"cut");
        buf.extend_from_slice(&torn[..torn.len() - 4]);
        let ents = parse_dirents(&buf);
        assert_eq!(ents.len(), 2);
        assert_eq!(
            (ents[0].ino, ents[0].offset, ents[0].kind),
            (7, 1, libc::DT_DIR)
        );
        assert_eq!(ents[0].name, b".");
        assert_eq!(
            (ents[1].ino, ents[1].offset, ents[1].kind),
            (42, 2, libc::DT_REG)
        );
        assert_eq!(ents[1].name, b"a long file name\xff");
        assert!(parse_dirents(&[]).is_empty());
    }
}
