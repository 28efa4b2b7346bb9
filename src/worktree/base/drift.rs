//! The drift list's file format: one path a line, in lowercase hex (see
//! the module docs of `base.rs`, "Drift").

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::paths;

/// The drift list: paths served from the project although they changed
/// behind its mount after the base turn began.
pub(super) struct Drift {
    pub(super) seen: BTreeSet<Vec<u8>>,
    pub(super) file: Option<File>,
}

impl Drift {
    /// Notes `path` as drifted: logged and appended to the list file the
    /// first time only.
    pub(super) fn note(&mut self, path: &[u8]) {
        if self.seen.insert(path.to_vec()) {
            log::warn!(
                "{} changed in the project behind its mount after the worktree's base turn began: \
                 the worktree shows the project's bytes",
                paths::display(path)
            );
            if let Some(f) = self.file.as_mut() {
                let mut line = hex(path);
                line.push('\n');
                if let Err(e) = f.write_all(line.as_bytes()) {
                    log::warn!("cannot append to the drift list: {e}");
                }
            }
        }
    }
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes one line of [`hex`]; `None` for a malformed line.
fn unhex(line: &str) -> Option<Vec<u8>> {
    let line = line.trim();
    if !line.len().is_multiple_of(2) {
        return None;
    }
    (0..line.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(line.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The paths of a drift list file (missing: none).
pub fn read_drift(path: &Path) -> BTreeSet<Vec<u8>> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().filter_map(unhex).collect())
        .unwrap_or_default()
}
