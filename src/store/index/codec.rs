//! How Rust values are written to and read from the index's columns
//! (`docs/format.md`): the record-kind codes, a record's columns, and the
//! integer conversions between Rust's `u64` and SQLite's signed 64-bit
//! `INTEGER`.
//!
//! Two kinds of `u64` go into SQLite:
//! - **quantities** ([`Uint`]: turn numbers, counts, sizes, offsets,
//!   lengths) are stored as the same non-negative number. One that does not
//!   fit (`> i64::MAX`) is refused on write, and a negative one read back
//!   is corruption ([`IndexError::Corrupt`]), never a silent wrap;
//! - **identifiers** ([`Id`]: inode and device numbers) are opaque 64-bit
//!   values stored as the `i64` with the same bits, so every value
//!   round-trips (as every version of the format has stored them).

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

use super::IndexError;
use crate::record::{Hash, PreImage, Special};

/// The `kind` codes of the `preimages` table; the capture log uses the
/// same codes ([`PreImage::code`]).
pub(super) mod kind {
    /// Nothing existed at the path.
    pub const ABSENT: i64 = 0;
    /// A regular file whose content is one blob.
    pub const FILE: i64 = 1;
    /// A directory.
    pub const DIR: i64 = 2;
    /// A symbolic link.
    pub const SYMLINK: i64 = 3;
    /// A named pipe.
    pub const FIFO: i64 = 4;
    /// A Unix domain socket node.
    pub const SOCKET: i64 = 5;
    /// A character device.
    pub const CHAR: i64 = 6;
    /// A block device.
    pub const BLOCK: i64 = 7;
    /// A regular file captured as ranges (`docs/ranges.md`).
    pub const RANGED: i64 = 8;
    /// Not known (schema version 4).
    pub const UNKNOWN: i64 = 10;
}

/// The record kind of a special file.
fn special_code(kind: Special) -> i64 {
    match kind {
        Special::Fifo => kind::FIFO,
        Special::Socket => kind::SOCKET,
        Special::Char => kind::CHAR,
        Special::Block => kind::BLOCK,
    }
}

/// The special file kind of record kind `code`, if it is one.
fn special_of(code: i64) -> Option<Special> {
    match code {
        kind::FIFO => Some(Special::Fifo),
        kind::SOCKET => Some(Special::Socket),
        kind::CHAR => Some(Special::Char),
        kind::BLOCK => Some(Special::Block),
        _ => None,
    }
}

/// A quantity (turn number, count, size, offset, length) as a
/// non-negative SQLite integer. Writing one above `i64::MAX` fails;
/// reading a negative one fails with `IntegralValueOutOfRange`, which
/// [`sqlite_error`] reports as corruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Uint(pub u64);

impl ToSql for Uint {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        i64::try_from(self.0)
            .map(ToSqlOutput::from)
            .map_err(|_| rusqlite::Error::ToSqlConversionFailure(Box::new(TooLarge(self.0))))
    }
}

impl FromSql for Uint {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let v = i64::column_result(value)?;
        u64::try_from(v)
            .map(Uint)
            .map_err(|_| FromSqlError::OutOfRange(v))
    }
}

/// An opaque 64-bit identifier (inode or device number) stored as the
/// `i64` with the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Id(pub u64);

impl ToSql for Id {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(i64::from_ne_bytes(self.0.to_ne_bytes())))
    }
}

impl FromSql for Id {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        i64::column_result(value).map(|v| Id(u64::from_ne_bytes(v.to_ne_bytes())))
    }
}

/// A quantity too large for a SQLite integer (a caller's error: no turn,
/// size or offset opfs handles comes near it).
#[derive(Debug)]
struct TooLarge(u64);

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} does not fit in a SQLite integer (at most {})",
            self.0,
            i64::MAX
        )
    }
}

impl std::error::Error for TooLarge {}

/// The [`IndexError`] for a SQLite error on the database `path`: a
/// negative quantity read back ([`Uint`]) is corruption, anything else is
/// SQLite's.
pub(super) fn sqlite_error(path: &std::path::Path, source: rusqlite::Error) -> IndexError {
    if let rusqlite::Error::IntegralValueOutOfRange(_, value) = source {
        return IndexError::Corrupt {
            path: path.to_path_buf(),
            what: format!("a stored turn number, count, size or offset is {value}"),
        };
    }
    IndexError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

/// A record as the `preimages` columns kind, perm, blob, size, target,
/// rdev, ino.
pub(super) type Columns<'a> = (
    i64,
    Option<i64>,
    Option<&'a [u8]>,
    Option<Uint>,
    Option<&'a [u8]>,
    Option<Id>,
    Option<Id>,
);

/// The columns of record `pre`. An inode number of 0 (unknown) is stored
/// as NULL.
pub(super) fn columns(pre: &PreImage) -> Columns<'_> {
    let ino = |ino: u64| (ino != 0).then_some(Id(ino));
    match pre {
        PreImage::Absent => (kind::ABSENT, None, None, None, None, None, None),
        PreImage::Unknown => (kind::UNKNOWN, None, None, None, None, None, None),
        PreImage::File {
            blob,
            size,
            perm,
            ino: i,
        } => (
            kind::FILE,
            Some(i64::from(*perm)),
            Some(&blob[..]),
            Some(Uint(*size)),
            None,
            None,
            ino(*i),
        ),
        PreImage::Ranged { size, perm, ino: i } => (
            kind::RANGED,
            Some(i64::from(*perm)),
            None,
            Some(Uint(*size)),
            None,
            None,
            ino(*i),
        ),
        PreImage::Dir { perm } => (
            kind::DIR,
            Some(i64::from(*perm)),
            None,
            None,
            None,
            None,
            None,
        ),
        PreImage::Symlink { target } => (
            kind::SYMLINK,
            None,
            None,
            None,
            Some(&target[..]),
            None,
            None,
        ),
        PreImage::Special { kind, perm, rdev } => (
            special_code(*kind),
            Some(i64::from(*perm)),
            None,
            None,
            None,
            Some(Id(*rdev)),
            None,
        ),
    }
}

/// The record in columns kind, perm, blob, size, target, rdev, ino of `r`,
/// starting at column `first`. `Err` says what is malformed.
pub(super) fn preimage_from_row(r: &rusqlite::Row<'_>, first: usize) -> Result<PreImage, String> {
    let get_err = |e: rusqlite::Error| e.to_string();
    let kind: i64 = r.get(first).map_err(get_err)?;
    let perm: Option<i64> = r.get(first + 1).map_err(get_err)?;
    let blob: Option<Vec<u8>> = r.get(first + 2).map_err(get_err)?;
    let size: Option<i64> = r.get(first + 3).map_err(get_err)?;
    let target: Option<Vec<u8>> = r.get(first + 4).map_err(get_err)?;
    let rdev: Option<Id> = r.get(first + 5).map_err(get_err)?;
    let ino: Option<Id> = r.get(first + 6).map_err(get_err)?;
    let perm = || -> Result<u32, String> {
        match perm.map(u32::try_from) {
            Some(Ok(p)) if p <= 0o7777 => Ok(p),
            _ => Err(format!("bad permission bits {perm:?}")),
        }
    };
    let size = |what: &str| -> Result<u64, String> {
        size.and_then(|s| u64::try_from(s).ok())
            .ok_or_else(|| format!("{what} without a size"))
    };
    let ino = ino.map_or(0, |i| i.0);
    Ok(match kind {
        kind::ABSENT => PreImage::Absent,
        kind::FILE => {
            let blob: Hash = blob
                .as_deref()
                .and_then(|b| b.try_into().ok())
                .ok_or("file record without a 32-byte blob hash")?;
            PreImage::File {
                blob,
                size: size("file record")?,
                perm: perm()?,
                ino,
            }
        }
        kind::RANGED => PreImage::Ranged {
            size: size("ranged file record")?,
            perm: perm()?,
            ino,
        },
        kind::DIR => PreImage::Dir { perm: perm()? },
        kind::UNKNOWN => PreImage::Unknown,
        kind::SYMLINK => PreImage::Symlink {
            target: target.ok_or("symlink record without a target")?,
        },
        k => match special_of(k) {
            Some(kind) => PreImage::Special {
                kind,
                perm: perm()?,
                rdev: rdev.map_or(0, |d| d.0),
            },
            None => return Err(format!("unknown pre-image kind {k}")),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_kinds_agree_with_the_capture_log() {
        let all = [
            PreImage::Absent,
            PreImage::Unknown,
            PreImage::File {
                blob: [1; 32],
                size: 1,
                perm: 0o644,
                ino: 7,
            },
            PreImage::Ranged {
                size: 1,
                perm: 0o644,
                ino: 7,
            },
            PreImage::Dir { perm: 0o755 },
            PreImage::Symlink {
                target: b"t".to_vec(),
            },
            PreImage::Special {
                kind: Special::Fifo,
                perm: 0o600,
                rdev: 0,
            },
            PreImage::Special {
                kind: Special::Socket,
                perm: 0o600,
                rdev: 0,
            },
            PreImage::Special {
                kind: Special::Char,
                perm: 0o600,
                rdev: 5,
            },
            PreImage::Special {
                kind: Special::Block,
                perm: 0o600,
                rdev: 5,
            },
        ];
        for pre in &all {
            assert_eq!(columns(pre).0, i64::from(pre.code()), "{pre:?}");
        }
    }

    #[test]
    fn quantities_are_checked_and_identifiers_keep_their_bits() {
        assert!(Uint(u64::MAX).to_sql().is_err());
        assert!(Uint(i64::MAX as u64).to_sql().is_ok());
        assert_eq!(
            Uint::column_result(ValueRef::Integer(-1)),
            Err(FromSqlError::OutOfRange(-1))
        );
        let id = Id(u64::MAX - 1);
        let Ok(ToSqlOutput::Owned(rusqlite::types::Value::Integer(stored))) = id.to_sql() else {
            panic!("an id is stored as an integer");
        };
        assert_eq!(Id::column_result(ValueRef::Integer(stored)), Ok(id));
    }
}
