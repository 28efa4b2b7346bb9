//! The one place where errors become errnos.

use std::io;

use fuser::Errno;

/// Maps an I/O error to the errno the kernel sees.
///
/// Errors that carry an OS code keep it; anything else (which should not
/// happen in a callback) becomes `EIO` so a failure is never reported as
/// success.
pub(crate) fn to_errno(err: &io::Error) -> Errno {
    match err.raw_os_error() {
        Some(code) => Errno::from_i32(code),
        None => match err.kind() {
            io::ErrorKind::NotFound => Errno::ENOENT,
            io::ErrorKind::PermissionDenied => Errno::EACCES,
            io::ErrorKind::AlreadyExists => Errno::EEXIST,
            io::ErrorKind::InvalidInput => Errno::EINVAL,
            _ => Errno::EIO,
        },
    }
}

/// An `io::Error` carrying `code`.
pub(crate) fn os(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// [`to_errno`] by value, for `.map_err(errno)`.
pub(crate) fn errno(err: io::Error) -> Errno {
    to_errno(&err)
}
