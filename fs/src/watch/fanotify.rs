//! The privileged backend: fanotify inode marks on directories, with
//! `FAN_EVENT_ON_CHILD` (events of the files in them) and
//! `FAN_REPORT_DFID_NAME` (each event names the directory by file handle
//! and the child by name). A mark's id is the directory's file handle
//! (`name_to_handle_at`), which is what its events carry; a mark is removed
//! through `open_by_handle_at`, so the inode table need not keep an fd for
//! it. Events whose pid is this process's are dropped.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::{owned, proc_path, Backend, Raw, Read, What};

/// The events a directory mark asks for.
const MASK: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MOVED_FROM
    | libc::FAN_MOVED_TO
    | libc::FAN_MODIFY
    | libc::FAN_ATTRIB
    | libc::FAN_ONDIR
    | libc::FAN_EVENT_ON_CHILD;

/// `MAX_HANDLE_SZ`.
const MAX_HANDLE: usize = 128;

/// Size of `struct fanotify_event_metadata`.
const META_LEN: usize = 24;

pub(super) struct Fanotify {
    fd: OwnedFd,
    /// A real (not `O_PATH`) fd on the backing filesystem, for
    /// `open_by_handle_at`.
    mount_fd: OwnedFd,
    pid: i32,
}

impl Fanotify {
    /// A notification group reporting directory handles and names.
    /// Fails without `CAP_SYS_ADMIN` (or on kernels before 5.9).
    pub(super) fn new(root: BorrowedFd<'_>) -> io::Result<Fanotify> {
        // SAFETY: plain flags.
        let fd = owned(unsafe {
            libc::fanotify_init(
                libc::FAN_CLASS_NOTIF
                    | libc::FAN_CLOEXEC
                    | libc::FAN_NONBLOCK
                    | libc::FAN_REPORT_DFID_NAME,
                (libc::O_RDONLY | libc::O_LARGEFILE) as libc::c_uint,
            )
        })?;
        let mount_fd = crate::sys::openat(
            root,
            &std::ffi::CString::from(c"."),
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        let me = Fanotify {
            fd,
            mount_fd,
            pid: i32::try_from(std::process::id()).unwrap_or(-1),
        };
        // Probe that marks work here (the filesystem can encode handles).
        me.add(root)?;
        Ok(me)
    }

    fn mark(&self, flags: libc::c_uint, fd: BorrowedFd<'_>) -> io::Result<()> {
        let path = proc_path(fd);
        // SAFETY: valid group fd and C string.
        let ret = unsafe {
            libc::fanotify_mark(
                self.fd.as_raw_fd(),
                flags,
                MASK,
                libc::AT_FDCWD,
                path.as_ptr(),
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The file handle of `fd` as fanotify reports it: the handle type, then
/// the handle bytes.
fn handle_of(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    // `struct file_handle`: u32 handle_bytes, i32 handle_type, bytes; u32
    // words keep it aligned.
    let mut buf = [0u32; 2 + MAX_HANDLE / 4];
    buf[0] = MAX_HANDLE as u32;
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `buf` is a `file_handle` with room for MAX_HANDLE bytes, as
    // its handle_bytes says; the empty path with AT_EMPTY_PATH names `fd`.
    let ret = unsafe {
        libc::name_to_handle_at(
            fd.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = (buf[0] as usize).min(MAX_HANDLE);
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok(bytes[4..8 + len].to_vec())
}

impl Backend for Fanotify {
    fn name(&self) -> &'static str {
        "fanotify"
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn add(&self, fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
        let id = handle_of(fd)?;
        self.mark(libc::FAN_MARK_ADD, fd)?;
        Ok(id)
    }

    fn remove(&self, id: &[u8]) {
        if id.len() < 4 || id.len() - 4 > MAX_HANDLE {
            return;
        }
        let mut buf = [0u32; 2 + MAX_HANDLE / 4];
        let mut bytes = Vec::with_capacity(8 + MAX_HANDLE);
        bytes.extend_from_slice(&((id.len() - 4) as u32).to_ne_bytes());
        bytes.extend_from_slice(id);
        for (i, chunk) in bytes.chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w[..chunk.len()].copy_from_slice(chunk);
            buf[i] = u32::from_ne_bytes(w);
        }
        // SAFETY: `buf` is a `file_handle` whose handle_bytes fit in it.
        let fd = owned(unsafe {
            libc::open_by_handle_at(
                self.mount_fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                libc::O_PATH | libc::O_CLOEXEC,
            )
        });
        // ESTALE: the directory is gone, and its mark with it.
        if let Ok(fd) = fd {
            if let Err(err) = self.mark(libc::FAN_MARK_REMOVE, fd.as_fd()) {
                log::debug!("fanotify mark removal: {err}");
            }
        }
    }

    fn ignore_modify_on_mount(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        // A mount mark holding only an ignore mask: `FAN_MARK_IGNORE`
        // (Linux 6.0) needs `IGNORED_SURV_MODIFY` on a mount; the older
        // `FAN_MARK_IGNORED_MASK` means the same for non-directories.
        // By path: an `O_PATH` fd (what `open_tree` returns) as the
        // directory fd gives `EBADF`.
        let path = proc_path(fd);
        let mark = |flags: libc::c_uint| {
            // SAFETY: valid group fd and C string.
            let ret = unsafe {
                libc::fanotify_mark(
                    self.fd.as_raw_fd(),
                    libc::FAN_MARK_ADD | libc::FAN_MARK_MOUNT | flags,
                    libc::FAN_MODIFY,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                )
            };
            if ret < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        };
        mark(libc::FAN_MARK_IGNORE | libc::FAN_MARK_IGNORED_SURV_MODIFY)
            .or_else(|_| mark(libc::FAN_MARK_IGNORED_MASK | libc::FAN_MARK_IGNORED_SURV_MODIFY))
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
        Ok(parse(&buf[..n as usize], self.pid))
    }
}

fn u16_at(b: &[u8], at: usize) -> usize {
    b.get(at..at + 2)
        .map_or(0, |s| u16::from_ne_bytes([s[0], s[1]]) as usize)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

/// The events in `buf`, without those caused by process `pid`.
fn parse(buf: &[u8], pid: i32) -> Read {
    let mut out = Vec::new();
    let mut overflow = false;
    let mut at = 0;
    while at + META_LEN <= buf.len() {
        let len = u32_at(buf, at) as usize;
        if len < META_LEN || at + len > buf.len() {
            break;
        }
        let ev = &buf[at..at + len];
        at += len;
        let meta_len = u16_at(ev, 6);
        let mask = ev
            .get(8..16)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map_or(0, u64::from_ne_bytes);
        let ev_pid = u32_at(ev, 20) as i32;
        if mask & libc::FAN_Q_OVERFLOW != 0 {
            overflow = true;
            continue;
        }
        if ev_pid == pid {
            continue;
        }
        let what = What {
            entry: mask
                & (libc::FAN_CREATE | libc::FAN_DELETE | libc::FAN_MOVED_FROM | libc::FAN_MOVED_TO)
                != 0,
            content: mask & libc::FAN_MODIFY != 0,
            attr: mask & libc::FAN_ATTRIB != 0,
        };
        let mut info = meta_len;
        while info + 4 <= ev.len() {
            let kind = ev[info];
            let ilen = u16_at(ev, info + 2);
            if ilen < 4 || info + ilen > ev.len() {
                break;
            }
            let rec = &ev[info..info + ilen];
            info += ilen;
            if kind != libc::FAN_EVENT_INFO_TYPE_DFID_NAME && kind != libc::FAN_EVENT_INFO_TYPE_DFID
            {
                continue;
            }
            // header (4), fsid (8), handle_bytes (4), handle_type (4), handle.
            let hlen = u32_at(rec, 12) as usize;
            let Some(id) = rec.get(16..20 + hlen) else {
                continue;
            };
            let name = match kind {
                libc::FAN_EVENT_INFO_TYPE_DFID_NAME => {
                    let rest = rec.get(20 + hlen..).unwrap_or_default();
                    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    let name = &rest[..end];
                    (!name.is_empty() && name != b".").then(|| name.to_vec())
                }
                _ => None,
            };
            out.push(Raw {
                id: id.to_vec(),
                name,
                what,
                gone: false,
            });
        }
    }
    if overflow {
        Read::Overflow(out)
    } else {
        Read::Events(out)
    }
}
