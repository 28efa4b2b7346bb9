//! The answer to `ioctl`: opfs passes no ioctl through to the backing
//! files, so every request is refused with `ENOTTY` (what a regular file
//! answers to a terminal ioctl such as `TCGETS`, which shells and `isatty`
//! send all the time). fuser's default answer logs a warning per call;
//! here each ioctl number is logged once per daemon (at `info`), every
//! later call at `trace`, so the daemon log stays quiet.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use fuser::{Errno, ReplyIoctl};

/// The ioctl numbers already logged.
fn seen() -> &'static Mutex<HashSet<u32>> {
    static SEEN: OnceLock<Mutex<HashSet<u32>>> = OnceLock::new();
    SEEN.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Whether `cmd` is seen for the first time (a poisoned set counts as
/// seen: logging is all it guards).
fn first_time(cmd: u32) -> bool {
    seen().lock().map(|mut s| s.insert(cmd)).unwrap_or(false)
}

/// Refuses ioctl `cmd` with `ENOTTY`, logging it once per number.
pub(crate) fn unsupported(cmd: u32, reply: ReplyIoctl) {
    if first_time(cmd) {
        log::info!("ioctl {cmd:#x} is not supported: answered ENOTTY (logged once per number)");
    } else {
        log::trace!("ioctl {cmd:#x}: ENOTTY");
    }
    reply.error(Errno::ENOTTY);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_number_is_first_once() {
        assert!(first_time(0x5401_0000));
        assert!(!first_time(0x5401_0000));
        assert!(first_time(0x5401_0001));
    }
}
