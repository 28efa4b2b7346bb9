//! Where the root of all state is, given the environment the CLI read.

use std::ffi::OsStr;
use std::path::PathBuf;

/// The root of all state: `opfs_home` (`$OPFS_HOME`) if set and not empty,
/// else `xdg_data_home/opfs` (`$XDG_DATA_HOME`), else
/// `home/.local/share/opfs` (`$HOME`, `/root` when unset).
pub fn resolve_home(
    opfs_home: Option<&OsStr>,
    xdg_data_home: Option<&OsStr>,
    home: Option<&OsStr>,
) -> PathBuf {
    if let Some(h) = opfs_home.filter(|v| !v.is_empty()) {
        return PathBuf::from(h);
    }
    if let Some(x) = xdg_data_home.filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("opfs");
    }
    PathBuf::from(home.unwrap_or(OsStr::new("/root"))).join(".local/share/opfs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opfs_home_then_xdg_then_home() {
        let s = |v: &'static str| Some(OsStr::new(v));
        assert_eq!(resolve_home(s("/o"), s("/x"), s("/h")), PathBuf::from("/o"));
        assert_eq!(
            resolve_home(s(""), s("/x"), s("/h")),
            PathBuf::from("/x/opfs")
        );
        assert_eq!(
            resolve_home(None, None, s("/h")),
            PathBuf::from("/h/.local/share/opfs")
        );
        assert_eq!(
            resolve_home(None, None, None),
            PathBuf::from("/root/.local/share/opfs")
        );
    }
}
