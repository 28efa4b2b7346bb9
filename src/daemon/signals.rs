//! The daemon's signal handling: SIGTERM, SIGINT and SIGHUP unmount.

use std::io;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// Starts a thread that unmounts through `ctl` on SIGTERM, SIGINT or
/// SIGHUP. The daemon must go even if the mount is in use: the mount is
/// detached and disappears once its last user leaves.
///
/// Errors: the signal handlers cannot be installed.
pub fn unmount_on_signals(ctl: opfs_fs::Controller) -> io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    std::thread::spawn(move || {
        for sig in signals.forever() {
            log::info!("signal {sig}: unmounting");
            if let Err(e) = ctl.unmount() {
                log::error!("unmount on signal failed: {e}");
            }
        }
    });
    Ok(())
}
