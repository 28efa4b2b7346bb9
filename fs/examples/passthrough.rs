//! Serves a directory through opfs-fs with no hook, in the foreground:
//! `passthrough BACKING MOUNTPOINT [--allow-other]`. Stop it with
//! `fusermount3 -u MOUNTPOINT` (or `umount`).

use std::path::PathBuf;
use std::sync::Arc;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(backing), Some(mountpoint)) = (args.first(), args.get(1)) else {
        eprintln!("usage: passthrough BACKING MOUNTPOINT [--allow-other]");
        std::process::exit(2);
    };
    let opts = opfs_fs::Options {
        allow_other: args.iter().any(|a| a == "--allow-other"),
        fsname: "opfs-passthrough".to_string(),
        ..opfs_fs::Options::default()
    };
    let mount = opfs_fs::mount(
        &PathBuf::from(backing),
        &PathBuf::from(mountpoint),
        Arc::new(opfs_fs::NoHook),
        &opts,
    )?;
    mount.run()
}
