//! The unprivileged backend: one inotify watch per directory, added through
//! `/proc/self/fd/N` (the inode table holds `O_PATH` fds). A watch's id is
//! its watch descriptor. inotify events carry no pid, so the changes the
//! daemon makes itself (every mutation it serves) come back as events and
//! invalidate once more: extra work, never a missed change.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::{owned, proc_path, Backend, Raw, Read, What};

const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_ONLYDIR;

/// Size of `struct inotify_event` without the name.
const EVENT_LEN: usize = 16;

pub(super) struct Inotify {
    fd: OwnedFd,
}

impl Inotify {
    pub(super) fn new() -> io::Result<Inotify> {
        // SAFETY: plain flags.
        let fd = owned(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) })?;
        Ok(Inotify { fd })
    }
}

impl Backend for Inotify {
    fn name(&self) -> &'static str {
        "inotify"
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn add(&self, fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
        let path = proc_path(fd);
        // SAFETY: valid inotify fd and C string.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), MASK) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(wd.to_ne_bytes().to_vec())
    }

    fn remove(&self, id: &[u8]) {
        let Ok(wd) = <[u8; 4]>::try_from(id) else {
            return;
        };
        // SAFETY: valid inotify fd; an unknown wd is EINVAL, harmless.
        unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), i32::from_ne_bytes(wd)) };
    }

    fn read(&self, buf: &mut [u8]) -> io::Result<Read> {
        // SAFETY: valid fd and buffer.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EAGAIN) {
                return Ok(Read::Events(Vec::new()));
            }
            return Err(err);
        }
        Ok(parse(&buf[..n as usize]))
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn parse(buf: &[u8]) -> Read {
    let mut out = Vec::new();
    let mut overflow = false;
    let mut at = 0;
    while at + EVENT_LEN <= buf.len() {
        let wd = u32_at(buf, at).to_ne_bytes();
        let mask = u32_at(buf, at + 4);
        let len = u32_at(buf, at + 12) as usize;
        let Some(raw_name) = buf.get(at + EVENT_LEN..at + EVENT_LEN + len) else {
            break;
        };
        at += EVENT_LEN + len;
        if mask & libc::IN_Q_OVERFLOW != 0 {
            overflow = true;
            continue;
        }
        let end = raw_name.iter().position(|&b| b == 0).unwrap_or(len);
        let name = (end > 0).then(|| raw_name[..end].to_vec());
        out.push(Raw {
            id: wd.to_vec(),
            name,
            what: What {
                entry: mask
                    & (libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO)
                    != 0,
                content: mask & libc::IN_MODIFY != 0,
                attr: mask & libc::IN_ATTRIB != 0,
            },
            gone: mask & libc::IN_IGNORED != 0,
        });
    }
    if overflow {
        Read::Overflow(out)
    } else {
        Read::Events(out)
    }
}
