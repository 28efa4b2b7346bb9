//! Records: pure data the store keeps and the core passes around, with no
//! I/O: a path's state ([`PreImage`]: what one path looked like just before
//! its first mutation in a turn), blob hashes, the [`Stat`] fields the core
//! reads, the [`Fingerprint`] it remembers and a path's owner and extended
//! attributes ([`Meta`]).

mod fingerprint;
mod meta;
mod stat;
mod turn;

pub use fingerprint::Fingerprint;
pub use meta::{Meta, Xattr};
pub use stat::Stat;
pub use turn::{Turn, TurnKind};

/// A BLAKE3 digest (32 bytes) naming a blob.
pub type Hash = [u8; 32];

/// Renders a hash as 64 lowercase hex digits.
pub fn hex(hash: &Hash) -> String {
    blake3::Hash::from_bytes(*hash).to_hex().to_string()
}

/// The kinds of special file a pre-image can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// A named pipe.
    Fifo,
    /// A Unix domain socket node.
    Socket,
    /// A character device.
    Char,
    /// A block device.
    Block,
}

impl Special {
    /// The kind whose `S_IFMT` bits are `bits`; `None` for regular files,
    /// directories and symlinks.
    pub fn from_type_bits(bits: u32) -> Option<Special> {
        match bits {
            libc::S_IFIFO => Some(Special::Fifo),
            libc::S_IFSOCK => Some(Special::Socket),
            libc::S_IFCHR => Some(Special::Char),
            libc::S_IFBLK => Some(Special::Block),
            _ => None,
        }
    }

    /// The kind stored under record kind code `code` (4-7, see
    /// [`PreImage::code`]).
    pub fn from_code(code: u8) -> Option<Special> {
        match code {
            4 => Some(Special::Fifo),
            5 => Some(Special::Socket),
            6 => Some(Special::Char),
            7 => Some(Special::Block),
            _ => None,
        }
    }

    /// The `S_IFMT` bits of this kind.
    pub fn type_bits(self) -> u32 {
        match self {
            Special::Fifo => libc::S_IFIFO,
            Special::Socket => libc::S_IFSOCK,
            Special::Char => libc::S_IFCHR,
            Special::Block => libc::S_IFBLK,
        }
    }
}

/// The state of one path at a rewind point (design §1 "pre-image").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreImage {
    /// Nothing existed at the path.
    Absent,
    /// A regular file: its bytes are the blob `blob` of `size` bytes.
    File {
        /// BLAKE3 of the content.
        blob: Hash,
        /// Content length in bytes.
        size: u64,
        /// Permission bits (`mode & 0o7777`).
        perm: u32,
        /// The inode number the path had when recorded (0: unknown). A
        /// rewind rewrites a file in place only while the path still names
        /// that inode, so a hard link made since can never carry the
        /// restore into another path's file.
        ino: u64,
    },
    /// A directory (its entries are recorded as paths of their own).
    Dir {
        /// Permission bits.
        perm: u32,
    },
    /// A symbolic link.
    Symlink {
        /// The link target, bytes as stored, never resolved.
        target: Vec<u8>,
    },
    /// A regular file of `size` bytes captured as ranges (a large file
    /// written in place, see `docs/ranges.md`): its bytes are those of the
    /// path's next recorded state (or, with none, of the project's file as
    /// the mount left it), except where the turn saved the old bytes of a
    /// range before overwriting it (`Index::ranges_of`), cut or zero-extended
    /// to `size`.
    Ranged {
        /// Content length in bytes when the turn began.
        size: u64,
        /// Permission bits.
        perm: u32,
        /// The inode number the path had when recorded.
        ino: u64,
    },
    /// Not known: the inode at the path was created (or put there) outside
    /// the mount after this turn began, and the mount has no record of the
    /// path between then and its capture, so what the path held when the
    /// turn began cannot be told (`docs/design.md`, "What fingerprints
    /// cannot see"). A rewind to a turn whose target this is leaves the path
    /// alone and reports it, even with `--force`.
    Unknown,
    /// A fifo, socket or device node.
    Special {
        /// Which kind.
        kind: Special,
        /// Permission bits.
        perm: u32,
        /// Device number (devices only; 0 otherwise).
        rdev: u64,
    },
}

impl PreImage {
    /// A short word for the kind: `absent`, `file`, `dir`, `symlink`, `fifo`,
    /// `socket`, `char`, `block`, `unknown`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            PreImage::Absent => "absent",
            PreImage::Unknown => "unknown",
            PreImage::File { .. } | PreImage::Ranged { .. } => "file",
            PreImage::Dir { .. } => "dir",
            PreImage::Symlink { .. } => "symlink",
            PreImage::Special { kind, .. } => match kind {
                Special::Fifo => "fifo",
                Special::Socket => "socket",
                Special::Char => "char",
                Special::Block => "block",
            },
        }
    }

    /// The kind's code in the index and the capture log (`docs/format.md`):
    /// 0 absent, 1 file, 2 dir, 3 symlink, 4 fifo, 5 socket, 6 char, 7 block,
    /// 8 file captured as ranges, 10 unknown.
    pub fn code(&self) -> u8 {
        match self {
            PreImage::Ranged { .. } => 8,
            PreImage::Unknown => 10,
            PreImage::Absent => 0,
            PreImage::File { .. } => 1,
            PreImage::Dir { .. } => 2,
            PreImage::Symlink { .. } => 3,
            PreImage::Special { kind, .. } => match kind {
                Special::Fifo => 4,
                Special::Socket => 5,
                Special::Char => 6,
                Special::Block => 7,
            },
        }
    }

    /// True for [`PreImage::Dir`].
    pub fn is_dir(&self) -> bool {
        matches!(self, PreImage::Dir { .. })
    }
}
