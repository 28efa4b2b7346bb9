//! The one reader of a path's *current* state in the project.
//!
//! Rewind plans against [`Current`] (what is there, without reading a
//! file's bytes); history and export compare with recorded states and need
//! a file's bytes and BLAKE3 ([`read_version`]). Both go through [`read`].

use std::io::{self, Read};

use crate::record::{PreImage, Special, Stat};
use crate::tree::Dir;

use super::Version;

/// What the project holds at a path now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Current {
    /// Nothing (the name does not exist).
    Absent,
    /// A regular file, with its `lstat`.
    File {
        /// The file's `lstat`.
        stat: Stat,
    },
    /// A directory.
    Dir {
        /// Its permission bits (`mode & 0o7777`).
        perm: u32,
    },
    /// A symbolic link.
    Symlink {
        /// Its target, bytes as stored.
        target: Vec<u8>,
    },
    /// A fifo, socket or device node.
    Special {
        /// The `S_IFMT` bits of its mode.
        type_bits: u32,
        /// Its permission bits.
        perm: u32,
        /// Its device number (devices only; else 0).
        rdev: u64,
    },
}

impl Current {
    /// `absent`, `file`, `dir`, `symlink` or `special`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Current::Absent => "absent",
            Current::File { .. } => "file",
            Current::Dir { .. } => "dir",
            Current::Symlink { .. } => "symlink",
            Current::Special { .. } => "special",
        }
    }
}

/// Reads what the project holds at `path` now (one `lstat`, plus a
/// `readlink` for a symlink). A missing path is [`Current::Absent`].
///
/// Errors: the path cannot be read (permission, I/O, a symlink on its way:
/// `ELOOP`).
pub fn read(backing: &Dir, path: &[u8]) -> io::Result<Current> {
    let Some(st) = backing.lstat(path)? else {
        return Ok(Current::Absent);
    };
    Ok(match st.file_type() {
        libc::S_IFREG => Current::File { stat: st },
        libc::S_IFDIR => Current::Dir { perm: st.perm() },
        libc::S_IFLNK => Current::Symlink {
            target: backing.read_link(path)?,
        },
        t => Current::Special {
            type_bits: t,
            perm: st.perm(),
            rdev: st.rdev,
        },
    })
}

/// Reads `path`'s current state as a path state. A regular file's bytes
/// are read and hashed (BLAKE3), so the result compares with recorded
/// states.
///
/// Errors: the path cannot be read (permission, I/O). A missing path is
/// `PreImage::Absent`, not an error.
pub fn read_version(backing: &Dir, path: &[u8]) -> io::Result<Version> {
    version_with(backing, path, |f, stat| {
        let mut bytes = Vec::with_capacity(stat.size as usize);
        f.read_to_end(&mut bytes)?;
        Ok((
            *blake3::hash(&bytes).as_bytes(),
            bytes.len() as u64,
            Some(bytes),
        ))
    })
}

/// [`read_version`] in bounded memory: a regular file is hashed as it is
/// read, in [`super::ranges::CHUNK`]s, and its bytes are kept in
/// [`Version::bytes`] only when it is shorter than `keep_below` bytes
/// (`None` otherwise: the state's BLAKE3 and size are all there is). For
/// a reader that needs only the hash of a big file (the export, whose
/// files of 8 MiB or more are pointer files). As with [`read_version`],
/// a file written while it is read gives the hash of the bytes read: the
/// caller re-reads the records after (see [`super::reader`]).
///
/// Errors: as [`read_version`].
pub fn read_version_bounded(backing: &Dir, path: &[u8], keep_below: u64) -> io::Result<Version> {
    version_with(backing, path, |f, _| {
        super::ranges::hash_stream(f, keep_below)
    })
}

/// `path`'s current state, a regular file's content read through `file`
/// (its BLAKE3, length and bytes, if kept).
fn version_with(
    backing: &Dir,
    path: &[u8],
    file: impl FnOnce(
        &mut std::fs::File,
        &Stat,
    ) -> io::Result<(crate::record::Hash, u64, Option<Vec<u8>>)>,
) -> io::Result<Version> {
    Ok(match read(backing, path)? {
        Current::Absent => Version::recorded(PreImage::Absent),
        Current::File { stat } => {
            // O_NONBLOCK: if the file was replaced by a fifo after the
            // lstat, opening it must not hang.
            let mut f = backing.open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
            let (blob, size, bytes) = file(&mut f, &stat)?;
            Version {
                state: PreImage::File {
                    blob,
                    size,
                    perm: stat.perm(),
                    ino: stat.ino,
                },
                bytes,
            }
        }
        Current::Dir { perm } => Version::recorded(PreImage::Dir { perm }),
        Current::Symlink { target } => Version::recorded(PreImage::Symlink { target }),
        Current::Special {
            type_bits,
            perm,
            rdev,
        } => Version::recorded(PreImage::Special {
            kind: Special::from_type_bits(type_bits).unwrap_or(Special::Block),
            perm,
            rdev,
        }),
    })
}
