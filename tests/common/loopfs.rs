//! A small real filesystem on a loop device, for the tests that need one
//! of a given kind (reflinks on XFS) or of a given size (a full disk).
//! Root only: [`LoopFs::make`] says why it cannot, and the caller skips
//! with that reason printed.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use opfs_testutil::{is_mounted, mount_points};

use super::which;

/// A fresh filesystem made by `mkfs` on an image of a given size, loop
/// mounted (`-o loop` attaches with autoclear, so unmounting frees the
/// loop device). `Drop` unmounts whatever is still mounted below it (a
/// failed test's FUSE mount), then it, and removes the image, even while
/// a failed test unwinds.
pub struct LoopFs {
    /// Where it is mounted.
    pub mnt: PathBuf,
    /// Holds the image (and `mnt` when it was not given); removed when
    /// dropped, after `Drop::drop` unmounted.
    _dir: tempfile::TempDir,
}

impl LoopFs {
    /// A filesystem of `bytes` made by `mkfs ARGS IMAGE`, mounted in a
    /// temp dir of its own. `Err(why)` when this machine cannot make one
    /// (not root, `mkfs` or loop devices missing): the caller skips.
    pub fn make(mkfs: &str, args: &[&str], bytes: u64) -> Result<LoopFs, String> {
        Self::make_in(mkfs, args, bytes, None)
    }

    /// [`LoopFs::make`], mounted over the existing directory `at`.
    pub fn make_at(mkfs: &str, args: &[&str], bytes: u64, at: &Path) -> Result<LoopFs, String> {
        Self::make_in(mkfs, args, bytes, Some(at))
    }

    fn make_in(mkfs: &str, args: &[&str], bytes: u64, at: Option<&Path>) -> Result<LoopFs, String> {
        // SAFETY: no arguments, no memory.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root (a loop mount needs it)".into());
        }
        if which(mkfs).is_none() {
            return Err(format!(
                "{mkfs} is missing (apt-get install e2fsprogs xfsprogs)"
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("opfs-loopfs-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let img = dir.path().join("image");
        let mnt = match at {
            Some(at) => at.to_path_buf(),
            None => {
                let mnt = dir.path().join("mnt");
                fs::create_dir(&mnt).map_err(|e| e.to_string())?;
                mnt
            }
        };
        fs::File::create(&img)
            .and_then(|f| f.set_len(bytes))
            .map_err(|e| e.to_string())?;
        let quiet = |cmd: &mut Command| {
            cmd.stdin(Stdio::null())
                .output()
                .map_err(|e| e.to_string())
                .and_then(|o| {
                    if o.status.success() {
                        Ok(())
                    } else {
                        Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
                    }
                })
        };
        quiet(Command::new(mkfs).args(args).arg(&img))
            .map_err(|e| format!("{mkfs} failed: {e}"))?;
        quiet(
            Command::new("mount")
                .arg("-o")
                .arg("loop")
                .arg(&img)
                .arg(&mnt),
        )
        .map_err(|e| format!("cannot loop-mount the image (no loop devices?): {e}"))?;
        Ok(LoopFs { mnt, _dir: dir })
    }

    /// Fills the filesystem from outside opfs (a file `fill` at its root,
    /// written until `ENOSPC` and synced), then frees `leave` bytes of it.
    pub fn fill(&self, leave: u64) {
        let path = self.mnt.join("fill");
        let mut f = fs::File::create(&path).expect("create fill");
        let chunk = vec![0x5a_u8; 1 << 20];
        let mut size: u64 = 0;
        for len in [1 << 20, 4096, 512] {
            while f.write_all(&chunk[..len]).is_ok() {
                size += len as u64;
            }
            // What delayed allocation accepted is on disk after this.
            let _ = f.sync_all();
        }
        assert!(size > 0, "nothing could be written to fill the filesystem");
        f.set_len(size.saturating_sub(leave))
            .expect("free some room");
        f.sync_all().expect("sync fill");
    }

    /// Removes what [`LoopFs::fill`] wrote, and syncs.
    pub fn unfill(&self) {
        fs::remove_file(self.mnt.join("fill")).expect("remove fill");
        // SAFETY: no arguments.
        unsafe { libc::sync() };
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // Never panic here: this also runs while a failed test unwinds.
        let mut below: Vec<PathBuf> = mount_points()
            .into_iter()
            .filter(|m| m.starts_with(&self.mnt) && *m != self.mnt)
            .collect();
        below.reverse();
        for m in below {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&m)
                .stdin(Stdio::null())
                .status();
        }
        for _ in 0..50 {
            let ok = Command::new("umount")
                .arg(&self.mnt)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok || !is_mounted(&self.mnt) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!("{} stayed busy; unmounting it lazily", self.mnt.display());
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}
