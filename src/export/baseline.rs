//! The baseline commit: the project as first seen, i.e. as it was when the
//! oldest turn kept began. Written once, by the first export into a
//! repository; the only step that reads the whole project.

use gix::ObjectId;

use super::commit::{baseline_message, Tip};
use super::{ExportError, Exporter, GitContext, Progress, ProjectContext, BASELINE_REF, BRANCH};
use crate::paths;
use crate::view::{Timeline, Version};

/// What [`write`] did.
pub(super) struct Baseline {
    /// The baseline commit (its `turn` is `first - 1`).
    pub(super) tip: Tip,
    /// Project entries the walk read.
    pub(super) entries: u64,
}

/// Writes the baseline commit: the project as it was when turn `first`
/// began, and points `refs/opfs/baseline`, [`BRANCH`] and `HEAD` at it.
///
/// One walk of the project in name order (paths with records are taken
/// from their earliest record instead), reporting progress every 1000
/// entries; then the records applied on top, loaded after the walk so that
/// nothing the agent changed during the walk leaks in.
pub(super) fn write(
    ex: &mut Exporter<'_>,
    first: u64,
    progress: &mut dyn FnMut(Progress),
) -> Result<Baseline, ExportError> {
    let mut editor = ex
        .repo
        .edit_tree(ObjectId::empty_tree(gix::hash::Kind::Sha1))
        .git(&ex.git_dir, "starting the baseline tree")?
        .detach();
    let entries = walk(ex, &mut editor, first, progress)?;
    (ex.src.commit)();
    let after = ex
        .src
        .reader()
        .timeline_bounded(first, super::POINTER_MIN)?;
    // The walk and the records are of turn `first`'s start only if gc did
    // not drop it meanwhile.
    super::check_kept(ex, first)?;
    for (p, _) in after.iter() {
        if let Some(pre) = after.state_at(p, first) {
            let g = ex.git_state_of(p, pre)?;
            ex.apply(&mut editor, p, g)?;
        }
    }
    let tree = ex.write_tree(&mut editor)?;
    let started = ex.src.index.turn(first)?.map(|t| t.started_at).unwrap_or(0);
    let commit = ex.commit(tree, None, baseline_message(first), started)?;
    ex.set_refs(&[BASELINE_REF, BRANCH], commit, started)?;
    ex.point_head(started)?;
    Ok(Baseline {
        tip: Tip {
            commit,
            tree,
            turn: first - 1,
        },
        entries,
    })
}

/// Walks the project into `editor`, leaving out the paths that have a
/// record from turn `first` on (directories excepted: they are walked).
/// Returns the entries read.
fn walk(
    ex: &mut Exporter<'_>,
    editor: &mut gix::objs::tree::Editor<'_>,
    first: u64,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, ExportError> {
    let recorded = Timeline::load(ex.src.index, first)?;
    let mut entries = 0u64;
    let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(dir) = stack.pop() {
        let mut names = ex.src.backing.list_dir(&dir).in_project(&dir)?;
        names.sort();
        for name in names {
            let p = paths::join(&dir, &name);
            if ex.exclude.excludes(&p) {
                continue;
            }
            if ex.ignore.is_some() {
                // The type decides dir-only patterns (`target/`); an
                // ignored directory is not read at all.
                let is_dir = match ex.src.backing.lstat(&p) {
                    Ok(Some(st)) => st.mode & libc::S_IFMT == libc::S_IFDIR,
                    Ok(None) => continue,
                    Err(e) => return Err(e).in_project(&p),
                };
                if ex.ignored(&p, is_dir) {
                    ex.ignored += 1;
                    continue;
                }
            }
            let rec = recorded.state_at(&p, first);
            let v: Version = match rec {
                // Taken from the records after the walk.
                Some(pre) if !pre.is_dir() => continue,
                _ => match crate::view::current::read_version_bounded(
                    ex.src.backing,
                    &p,
                    super::POINTER_MIN,
                ) {
                    Ok(v) => v,
                    // Removed during the walk: its record (made before the
                    // removal) is applied after the walk.
                    Err(e) if crate::tree::is_not_found(&e) => continue,
                    Err(e) => return Err(e).in_project(&p),
                },
            };
            entries += 1;
            if entries.is_multiple_of(1000) {
                progress(Progress::Baseline { entries });
            }
            if v.state.is_dir() {
                if !super::tree_edit::excluded(&p, false) {
                    stack.push(p);
                }
                continue;
            }
            if rec.is_some() {
                continue;
            }
            let g = ex.git_state(&p, &v)?;
            ex.apply(editor, &p, g)?;
        }
    }
    progress(Progress::Baseline { entries });
    Ok(entries)
}
