//! Opening the export repository: refusing a place inside the project,
//! creating the bare repository atomically, and the `opfs-project` marker
//! that ties it to one project.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{ExportError, GitContext, IoContext};
use crate::store::StateDir;

/// The marker file naming the project a repository belongs to.
const PROJECT_MARKER: &str = "opfs-project";

/// Opens (creating if needed) the bare repository at `git_dir`, marks it as
/// belonging to `state`'s project, and refuses one made for another
/// project.
///
/// Errors: [`ExportError::InsideProject`] when `git_dir` is inside the
/// project or its mount; [`ExportError::Foreign`] when the marker names
/// another project; [`ExportError::Io`] / [`ExportError::Git`] when the
/// repository or the marker cannot be created or read.
pub(super) fn open(state: &StateDir, git_dir: &Path) -> Result<gix::Repository, ExportError> {
    let project = &state.project;
    refuse_inside_project(state, git_dir)?;
    if !git_dir.join("HEAD").exists() {
        init_atomically(git_dir)?;
    }
    let marker = git_dir.join(PROJECT_MARKER);
    match std::fs::read(&marker) {
        Ok(other) if other != project.as_os_str().as_bytes() => {
            return Err(ExportError::Foreign {
                git_dir: git_dir.to_path_buf(),
                other: String::from_utf8_lossy(&other).into_owned(),
                project: project.to_path_buf(),
            })
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::write(&marker, project.as_os_str().as_bytes()).at(&marker)?;
        }
        Err(e) => return Err(e).at(&marker),
    }
    gix::open_opts(git_dir, gix::open::Options::isolated()).git(git_dir, "opening the repository")
}

/// Zero intrusion: the repository must be neither inside the project nor
/// inside its mount (which writes to the project).
fn refuse_inside_project(state: &StateDir, git_dir: &Path) -> Result<(), ExportError> {
    let project = &state.project;
    // Resolve through the parent, which exists more often than the repo.
    let abs = match (git_dir.parent(), git_dir.file_name()) {
        (Some(p), Some(name)) if !p.as_os_str().is_empty() => crate::state::absolute(p).join(name),
        _ => crate::state::absolute(git_dir),
    };
    let mountpoint = crate::state::registry::recorded_mountpoint(state);
    if abs.starts_with(project) || mountpoint.is_some_and(|m| abs.starts_with(m)) {
        return Err(ExportError::InsideProject {
            git_dir: abs,
            project: project.to_path_buf(),
        });
    }
    Ok(())
}

/// Creates the bare repository at `git_dir` in a temporary sibling and
/// renames it into place, so two exports starting at once (the daemon's and
/// a manual one) cannot both initialize it: the loser finds it made.
fn init_atomically(git_dir: &Path) -> Result<(), ExportError> {
    let parent = git_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).at(parent)?;
    let name = git_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| crate::store::layout::EXPORT_DIR.into());
    let tmp = parent.join(format!(".{name}.opfs-init-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    gix::init_bare(&tmp).git(git_dir, "creating the repository")?;
    // rename(2) replaces an empty directory (one the user made for
    // --git-dir) and fails on a non-empty one (another export won).
    if let Err(e) = std::fs::rename(&tmp, git_dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        if !git_dir.join("HEAD").exists() {
            return Err(e).at(git_dir);
        }
    }
    Ok(())
}
