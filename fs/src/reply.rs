//! Sending an operation's result to the kernel in one call.
//!
//! Every callback ends the same way: the value on success, the errno on
//! failure. [`Answer::answer`] is that tail; each reply type says, through
//! [`Reply`], which value it carries and how it is sent. A reply that needs
//! more than the value (a TTL, a generation) gets it inside the value, so an
//! operation decides its caching and the callback stays a one-liner.

use std::io;
use std::time::Duration;

use crate::errno::errno;
use fuser::{
    Errno, FileAttr, FileHandle, FopenFlags, Generation, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr,
};

/// The result of a FUSE operation: the reply's value, or the errno the
/// kernel sees.
pub(crate) type Res<T> = Result<T, Errno>;

/// A FUSE reply: the value it carries on success and how to send it.
pub(crate) trait Reply {
    /// What a successful operation hands to this reply.
    type Value;
    /// Sends `value`.
    fn send(self, value: Self::Value);
    /// Sends `err`.
    fn fail(self, err: Errno);
}

/// Sends a result to a reply: `res.answer(reply)`.
pub(crate) trait Answer<R> {
    /// Sends the value with `reply`, or the errno.
    fn answer(self, reply: R);
}

impl<R: Reply> Answer<R> for Res<R::Value> {
    fn answer(self, reply: R) {
        match self {
            Ok(value) => reply.send(value),
            Err(err) => reply.fail(err),
        }
    }
}

/// An entry reply: the new or found inode and how long the kernel may cache
/// its attributes and its name.
pub(crate) struct Entry {
    pub(crate) attr: FileAttr,
    pub(crate) attr_ttl: Duration,
    pub(crate) entry_ttl: Duration,
}

/// An attribute reply and how long the kernel may cache it.
pub(crate) struct Attr {
    pub(crate) attr: FileAttr,
    pub(crate) ttl: Duration,
}

/// A created and opened file: its entry, cached for `ttl`, and its handle.
pub(crate) struct Created {
    pub(crate) attr: FileAttr,
    pub(crate) ttl: Duration,
    pub(crate) fh: u64,
    /// `FOPEN_*` flags of the new handle.
    pub(crate) flags: FopenFlags,
}

/// An opened file or directory: its handle and the `FOPEN_*` flags.
pub(crate) struct Opened {
    pub(crate) fh: u64,
    pub(crate) flags: FopenFlags,
}

/// A `getxattr`/`listxattr` answer: the size a zero-sized request asked
/// for, or the bytes.
pub(crate) enum Xattr {
    /// Bytes needed (the request's size was 0).
    Size(usize),
    /// The value or the name list.
    Data(Vec<u8>),
}

impl Xattr {
    /// An xattr value or name list read by `read` into a buffer of `size`
    /// bytes: the size it needs when `size` is 0 (a size probe), else the
    /// bytes (`ERANGE` from `read` if they do not fit).
    pub(crate) fn read(size: u32, read: impl FnOnce(&mut [u8]) -> io::Result<usize>) -> Res<Xattr> {
        let mut buf = vec![0u8; size as usize];
        let n = read(&mut buf).map_err(errno)?;
        if size == 0 {
            return Ok(Xattr::Size(n));
        }
        buf.truncate(n);
        Ok(Xattr::Data(buf))
    }
}

impl Reply for ReplyEmpty {
    type Value = ();
    fn send(self, (): ()) {
        self.ok();
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

impl Reply for ReplyEntry {
    type Value = Entry;
    fn send(self, e: Entry) {
        self.entry_with_ttls(&e.attr_ttl, &e.entry_ttl, &e.attr, Generation(0));
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

impl Reply for ReplyAttr {
    type Value = Attr;
    fn send(self, a: Attr) {
        self.attr(&a.ttl, &a.attr);
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

impl Reply for ReplyCreate {
    type Value = Created;
    fn send(self, c: Created) {
        self.created(&c.ttl, &c.attr, Generation(0), FileHandle(c.fh), c.flags);
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

impl Reply for ReplyOpen {
    type Value = Opened;
    fn send(self, o: Opened) {
        self.opened(FileHandle(o.fh), o.flags);
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

impl Reply for ReplyData {
    type Value = Vec<u8>;
    fn send(self, data: Vec<u8>) {
        self.data(&data);
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

/// Bytes written (capped at `u32::MAX`, all FUSE can say).
impl Reply for ReplyWrite {
    type Value = usize;
    fn send(self, n: usize) {
        self.written(u32::try_from(n).unwrap_or(u32::MAX));
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

impl Reply for ReplyLseek {
    type Value = i64;
    fn send(self, offset: i64) {
        self.offset(offset);
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

impl Reply for ReplyStatfs {
    type Value = libc::statvfs;
    fn send(self, st: libc::statvfs) {
        self.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            u32::try_from(st.f_bsize).unwrap_or(4096),
            u32::try_from(st.f_namemax).unwrap_or(255),
            u32::try_from(st.f_frsize).unwrap_or(4096),
        );
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

impl Reply for ReplyXattr {
    type Value = Xattr;
    fn send(self, x: Xattr) {
        match x {
            Xattr::Size(n) => self.size(u32::try_from(n).unwrap_or(u32::MAX)),
            Xattr::Data(data) => self.data(&data),
        }
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

/// The entries were added to the reply already; `()` ends the listing.
impl Reply for ReplyDirectory {
    type Value = ();
    fn send(self, (): ()) {
        self.ok();
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}

/// The entries were added to the reply already; `()` ends the listing.
impl Reply for ReplyDirectoryPlus {
    type Value = ();
    fn send(self, (): ()) {
        self.ok();
    }
    fn fail(self, err: Errno) {
        self.error(err);
    }
}
