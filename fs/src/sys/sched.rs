//! The scheduling class of the threads that keep the kernel's caches
//! coherent with the backing directory (the watch's and the invalidation
//! thread, `docs/coherence.md`, "What limits promptness").

use std::io;

/// A thread's class while it keeps the kernel coherent: real-time
/// (`SCHED_FIFO`, lowest priority) while it may, so a change behind the
/// mount is invalidated as soon as its event arrives however busy the
/// CPUs are; the normal class (`SCHED_OTHER`) for a batch of more than
/// [`Urgency::STORM`] invalidations (a `git checkout`, an `rm -rf` in the
/// project), so a storm of events never holds a CPU away from the rest of
/// the machine.
pub(crate) struct Urgency {
    /// The thread may run real-time (the first switch worked).
    allowed: bool,
    /// The thread runs real-time now.
    now: bool,
}

impl Urgency {
    /// Batches larger than this run in the normal class.
    pub(crate) const STORM: usize = 4096;

    /// When `wanted`, moves the calling thread to `SCHED_FIFO` priority 1
    /// (with `SCHED_RESET_ON_FORK`: a child never inherits it) and answers
    /// `Ok(true)`. Without `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of at
    /// least 1 the kernel says `EPERM`: the thread stays as it is, the
    /// error is returned, and the `Urgency` changes nothing. Not `wanted`:
    /// `Ok(false)`, nothing changes.
    pub(crate) fn claim(wanted: bool) -> (Urgency, io::Result<bool>) {
        let res = if wanted {
            set_class(true).map(|()| true)
        } else {
            Ok(false)
        };
        let ok = matches!(res, Ok(true));
        (
            Urgency {
                allowed: ok,
                now: ok,
            },
            res,
        )
    }

    /// Before a batch of `n` invalidations: the class it runs in.
    pub(crate) fn batch(&mut self, n: usize) {
        if !self.allowed {
            return;
        }
        let want = n <= Self::STORM;
        if want != self.now && set_class(want).is_ok() {
            self.now = want;
        }
    }
}

fn set_class(realtime: bool) -> io::Result<()> {
    let (policy, prio) = if realtime {
        (libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, 1)
    } else {
        (libc::SCHED_OTHER | libc::SCHED_RESET_ON_FORK, 0)
    };
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class() -> libc::c_int {
        // SAFETY: pid 0 is the calling thread.
        let policy = unsafe { libc::sched_getscheduler(0) };
        policy & !libc::SCHED_RESET_ON_FORK
    }

    #[test]
    fn real_time_for_small_batches_normal_for_storms() {
        std::thread::spawn(|| {
            let (mut u, res) = Urgency::claim(true);
            match res {
                Ok(true) => {}
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    eprintln!("skipped: no CAP_SYS_NICE or RLIMIT_RTPRIO here ({e})");
                    assert_eq!(class(), libc::SCHED_OTHER);
                    return;
                }
                other => panic!("claim: {other:?}"),
            }
            assert_eq!(class(), libc::SCHED_FIFO);
            u.batch(Urgency::STORM + 1);
            assert_eq!(class(), libc::SCHED_OTHER);
            u.batch(Urgency::STORM);
            assert_eq!(class(), libc::SCHED_FIFO);
        })
        .join()
        .expect("test thread");
    }

    #[test]
    fn not_wanted_changes_nothing() {
        std::thread::spawn(|| {
            let (mut u, res) = Urgency::claim(false);
            assert!(matches!(res, Ok(false)));
            u.batch(0);
            assert_eq!(class(), libc::SCHED_OTHER);
        })
        .join()
        .expect("test thread");
    }
}
