//! Serves an overlay of UPPER over the directory LOWER (through the test
//! lower layer `opfs_testutil::DirLower`) with no hook, in the foreground:
//! `overlay LOWER UPPER WORK MOUNTPOINT [--allow-other]`. Stop it with
//! `fusermount3 -u MOUNTPOINT` (or `umount`). LOWER is never written.

use std::path::PathBuf;
use std::sync::Arc;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(lower), Some(upper), Some(work), Some(mountpoint)) =
        (args.first(), args.get(1), args.get(2), args.get(3))
    else {
        eprintln!("usage: overlay LOWER UPPER WORK MOUNTPOINT [--allow-other]");
        std::process::exit(2);
    };
    let opts = opfs_fs::Options {
        allow_other: args.iter().any(|a| a == "--allow-other"),
        fsname: "opfs-overlay".to_string(),
        ..opfs_fs::Options::default()
    };
    let mount = opfs_fs::mount_overlay(
        &PathBuf::from(upper),
        &PathBuf::from(work),
        Arc::new(opfs_testutil::DirLower::new(lower)),
        &PathBuf::from(mountpoint),
        Arc::new(opfs_fs::NoHook),
        &opts,
    )?;
    mount.run()
}
