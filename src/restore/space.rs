//! The room check: before a restore writes anything, the state dir must
//! have room for what the restore records (the current state of every path
//! it changes, and the index rows) and the project for the bytes it writes
//! back. A restore that could not finish for space is refused before it
//! starts instead of failing halfway (`docs/design.md`, "A rewind that
//! cannot finish").
//!
//! The figures are estimates that err on the large side: a file's bytes
//! count whole even when the store already holds them, freed blocks are
//! not counted back, and a margin is added
//! ([`MARGIN_FIXED`] + 1/[`MARGIN_SHARE`] of the need).

use std::io;
use std::path::{Path, PathBuf};

use crate::record::PreImage;
use crate::store::INLINE_MAX;
use crate::view::current::Current;

use super::plan::{PathPlan, Step};

/// Bytes always kept free on top of the estimate (SQLite's write-ahead
/// log and checkpoint, directory blocks, the filesystem's own metadata).
pub const MARGIN_FIXED: u64 = 256 << 10;

/// The share of the estimate added as margin: need / 16.
pub const MARGIN_SHARE: u64 = 16;

/// Bytes counted per planned path in the state dir: its record in the
/// capture log and in the index (written twice: the write-ahead log, then
/// the database), its fingerprint row.
const PER_PATH_STATE: u64 = 1024;

/// Bytes counted per path the restore creates in the project (an inode's
/// first block, a directory block).
const PER_CREATE: u64 = 4096;

/// Block size the estimates round file sizes up to.
const BLOCK: u64 = 4096;

fn blocks(bytes: u64) -> u64 {
    bytes.div_ceil(BLOCK) * BLOCK
}

/// What a plan needs, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    /// In the state dir: the recorded current states and the index rows.
    pub state: u64,
    /// In the project: the bytes written back beyond what is there now.
    pub project: u64,
}

/// The estimate of what executing `plan` needs (without the margin).
pub fn need(plan: &[PathPlan]) -> Need {
    let mut n = Need::default();
    for p in plan {
        n.state += PER_PATH_STATE + p.raw.len() as u64;
        // The record of the current state.
        if let Current::File { stat } = &p.current_state {
            let recorded = match &p.patch {
                // Only the runs it overwrites, and what lies past the target's end.
                Some(segments) => {
                    let runs: u64 = segments.iter().map(|s| s.len).sum();
                    let target = match &p.target_state {
                        PreImage::Ranged { size, .. } => *size,
                        _ => 0,
                    };
                    runs + stat.size.saturating_sub(target)
                }
                None => stat.size,
            };
            // Small content travels in the log record and then in the
            // index (its write-ahead log, then the database): three copies.
            n.state += if recorded <= INLINE_MAX {
                3 * recorded
            } else {
                blocks(recorded)
            };
        }
        // What the project gains.
        let target = match &p.target_state {
            PreImage::File { size, .. } | PreImage::Ranged { size, .. } => blocks(*size),
            _ => 0,
        };
        if p.steps.contains(&Step::Create) {
            n.project += target + PER_CREATE;
        } else if p.steps.contains(&Step::Rewrite) {
            let now = match &p.current_state {
                Current::File { stat } => blocks(stat.size),
                _ => 0,
            };
            n.project += target.saturating_sub(now);
        }
    }
    n
}

/// The margin added to a need of `bytes`.
pub fn with_margin(bytes: u64) -> u64 {
    bytes + MARGIN_FIXED + bytes / MARGIN_SHARE
}

/// One filesystem a restore writes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortage {
    /// Which filesystem: `the filesystem holding the state dir`, `... the
    /// project` or `... the state dir and the project`.
    pub what: &'static str,
    /// A directory on that filesystem.
    pub dir: PathBuf,
    /// Bytes needed there, margin included.
    pub needed: u64,
    /// Bytes free there for this process.
    pub free: u64,
}

/// The device and the bytes this process may still allocate on the
/// filesystem holding `dir` (free blocks for root, which may use the
/// reserved ones; available blocks otherwise).
fn room(dir: &Path) -> io::Result<(u64, u64)> {
    let st = rustix::fs::stat(dir)?;
    let vfs = rustix::fs::statvfs(dir)?;
    let blocks = if rustix::process::geteuid().is_root() {
        vfs.f_bfree
    } else {
        vfs.f_bavail
    };
    Ok((st.st_dev, blocks.saturating_mul(vfs.f_frsize)))
}

/// Checks that `need` (margin added here) fits: the state dir's share on
/// the filesystem of `state_dir`, the project's on that of `project`, both
/// on one when they share it.
///
/// Returns the first filesystem short of room, if any. A filesystem whose
/// free space cannot be read is not reported (the restore then finds out
/// as it writes, and rolls back).
pub fn shortage(need: Need, state_dir: &Path, project: &Path) -> Option<Shortage> {
    let (Ok((state_dev, state_free)), Ok((project_dev, project_free))) =
        (room(state_dir), room(project))
    else {
        return None;
    };
    if state_dev == project_dev {
        let needed = with_margin(need.state + need.project);
        return (needed > state_free).then(|| Shortage {
            what: "the filesystem holding the state dir and the project",
            dir: state_dir.to_path_buf(),
            needed,
            free: state_free,
        });
    }
    let needed = with_margin(need.state);
    if needed > state_free {
        return Some(Shortage {
            what: "the filesystem holding the state dir",
            dir: state_dir.to_path_buf(),
            needed,
            free: state_free,
        });
    }
    let needed = with_margin(need.project);
    (needed > project_free).then(|| Shortage {
        what: "the filesystem holding the project",
        dir: project.to_path_buf(),
        needed,
        free: project_free,
    })
}

/// `bytes` for people: `12.3 MiB` (KiB under one MiB).
pub fn human(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Stat;
    use crate::view::ranges::Segment;

    fn file(size: u64) -> Current {
        Current::File {
            stat: Stat {
                mode: libc::S_IFREG | 0o644,
                size,
                mtime_ns: 0,
                ctime_ns: 0,
                dev: 0,
                ino: 1,
                rdev: 0,
                nlink: 1,
                uid: 0,
                gid: 0,
            },
        }
    }

    fn entry(current: Current, target: PreImage, steps: Vec<Step>) -> PathPlan {
        PathPlan {
            path: "p".into(),
            raw: b"p".to_vec(),
            current: crate::restore::StateKind::of_current(&current),
            target: crate::restore::StateKind::of_target(&target),
            steps,
            detail: String::new(),
            link_to: None,
            link_raw: None,
            target_state: target,
            target_meta: None,
            current_state: current,
            patch: None,
        }
    }

    fn target_file(size: u64) -> PreImage {
        PreImage::File {
            blob: [0; 32],
            size,
            perm: 0o644,
            ino: 0,
        }
    }

    #[test]
    fn a_rewrite_needs_its_current_bytes_in_the_store_and_its_growth_in_the_project() {
        let n = need(&[entry(
            file(1 << 20),
            target_file(3 << 20),
            vec![Step::Rewrite],
        )]);
        assert_eq!(n.state, PER_PATH_STATE + 1 + (1 << 20));
        assert_eq!(n.project, 2 << 20);
    }

    #[test]
    fn small_content_counts_three_times_and_a_creation_its_blocks() {
        let n = need(&[
            entry(file(100), PreImage::Absent, vec![Step::Remove]),
            entry(Current::Absent, target_file(5000), vec![Step::Create]),
        ]);
        assert_eq!(n.state, 2 * (PER_PATH_STATE + 1) + 300);
        assert_eq!(n.project, 8192 + PER_CREATE);
    }

    #[test]
    fn an_in_place_restore_of_ranges_records_only_the_runs_it_overwrites() {
        let mut p = entry(
            file(6 << 20),
            PreImage::Ranged {
                size: 6 << 20,
                perm: 0o644,
                ino: 1,
            },
            vec![Step::Rewrite],
        );
        p.patch = Some(vec![Segment {
            offset: 0,
            len: 1 << 20,
            blob: [0; 32],
            skip: 0,
            at: None,
        }]);
        let n = need(&[p]);
        assert_eq!(n.state, PER_PATH_STATE + 1 + (1 << 20));
        assert_eq!(n.project, 0);
    }

    #[test]
    fn the_margin_is_fixed_plus_a_sixteenth() {
        assert_eq!(with_margin(0), MARGIN_FIXED);
        assert_eq!(with_margin(16 << 20), (17 << 20) + MARGIN_FIXED);
    }
}
