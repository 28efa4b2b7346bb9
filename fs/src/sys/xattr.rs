//! Extended attributes of the inode behind an fd (through `/proc`).

use std::ffi::CString;
use std::io;
use std::os::fd::BorrowedFd;

use super::{cvt, cvt_size, proc::proc_path};

fn xattr_result(ret: libc::ssize_t) -> io::Result<usize> {
    cvt_size(ret)
}

/// `getxattr` on the inode behind `fd`; with an empty `buf`, returns the size.
pub(crate) fn getxattr(fd: BorrowedFd<'_>, name: &CString, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_path(fd);
    // SAFETY: valid C strings and buffer (a null pointer with length 0 is allowed).
    xattr_result(unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })
}

/// `listxattr` on the inode behind `fd`; with an empty `buf`, returns the size.
pub(crate) fn listxattr(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_path(fd);
    // SAFETY: valid C string and buffer.
    xattr_result(unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })
}

pub(crate) fn setxattr(
    fd: BorrowedFd<'_>,
    name: &CString,
    value: &[u8],
    flags: i32,
) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: valid C strings and buffer.
    cvt(unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })?;
    Ok(())
}

pub(crate) fn removexattr(fd: BorrowedFd<'_>, name: &CString) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: valid C strings.
    cvt(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) })?;
    Ok(())
}
