//! The regenerable build output and dependency trees opfs does not record
//! by default (`docs/design.md` "What opfs keeps by default"): each entry
//! of [`REGENERABLE`] is left out of recording when the project's own
//! ignore rules ignore it, so what git would commit is always recorded,
//! and what is ignored but not on the list (`.env`, local configuration,
//! data files) is recorded as everything else.

use crate::tree::Dir;

use super::ignore::IgnoreRules;

/// One kind of regenerable directory: the gitignore pattern that leaves
/// it out, and the tool that makes it again (its own documentation says
/// the directory is output or a cache it rebuilds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regenerable {
    /// The directory's name, as it appears anywhere in the project.
    pub name: &'static str,
    /// The tool that makes it again, and how.
    pub remade_by: &'static str,
}

/// The directories left out of recording by default when ignored. Only
/// names whose tools document them as output or cache (most mark them
/// with `CACHEDIR.TAG` or a `.gitignore` of `*` of their own); never
/// `build/`, `dist/`, `data/` or `.env`, which are often the user's.
pub const REGENERABLE: &[Regenerable] = &[
    Regenerable {
        name: "target",
        remade_by: "cargo build (Cargo's build directory; cargo clean removes it)",
    },
    Regenerable {
        name: "node_modules",
        remade_by: "npm ci / npm install, yarn, pnpm (from the lockfile)",
    },
    Regenerable {
        name: ".venv",
        remade_by: "python -m venv, then pip install / uv sync / poetry install",
    },
    Regenerable {
        name: "venv",
        remade_by: "python -m venv, then pip install",
    },
    Regenerable {
        name: "__pycache__",
        remade_by: "Python, when it imports the module (PEP 3147 bytecode cache)",
    },
    Regenerable {
        name: ".pytest_cache",
        remade_by: "pytest (its cache plugin)",
    },
    Regenerable {
        name: ".mypy_cache",
        remade_by: "mypy (its incremental cache)",
    },
    Regenerable {
        name: ".ruff_cache",
        remade_by: "ruff (its lint cache)",
    },
    Regenerable {
        name: ".hypothesis",
        remade_by: "Hypothesis (its example database)",
    },
    Regenerable {
        name: ".tox",
        remade_by: "tox (its environments)",
    },
    Regenerable {
        name: ".nox",
        remade_by: "nox (its sessions)",
    },
    Regenerable {
        name: ".gradle",
        remade_by: "Gradle (its project cache)",
    },
    Regenerable {
        name: ".next",
        remade_by: "next build / next dev",
    },
    Regenerable {
        name: ".parcel-cache",
        remade_by: "Parcel (its build cache)",
    },
];

/// The `[record] exclude` patterns (`NAME/`, any depth) of the
/// [`REGENERABLE`] directories the project at `project` ignores now: its
/// `.gitignore` at the root, `.git/info/exclude` or the user's global
/// excludes ignore `NAME` as a directory, or a `NAME/.gitignore` of its
/// own ignores what is in it (a venv, pytest's and mypy's caches write
/// one holding `*`). Read when a mount starts; a `.gitignore` deeper than
/// the root is not looked at (such a directory is recorded: the safe
/// side). A project that cannot be opened gives none.
pub fn regenerable_ignored(project: &std::path::Path) -> Vec<String> {
    let dir = match Dir::open(project) {
        Ok(d) => d,
        Err(e) => {
            log::debug!("{}: {e}", project.display());
            return Vec::new();
        }
    };
    let mut rules = IgnoreRules::load(&dir);
    REGENERABLE
        .iter()
        .filter(|r| {
            let inside = format!("{}/opfs-probe", r.name);
            rules.is_ignored(r.name.as_bytes(), true) || rules.is_ignored(inside.as_bytes(), false)
        })
        .map(|r| format!("{}/", r.name))
        .collect()
}

/// The [`REGENERABLE`] entry named `name`, if any.
pub fn regenerable(name: &str) -> Option<&'static Regenerable> {
    REGENERABLE.iter().find(|r| r.name == name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_what_the_project_ignores() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(
            t.path().join(".gitignore"),
            "/target\n.env\nnode_modules/\n",
        )
        .unwrap();
        std::fs::create_dir_all(t.path().join(".venv")).unwrap();
        std::fs::write(t.path().join(".venv/.gitignore"), "*\n").unwrap();
        let got = regenerable_ignored(t.path());
        assert_eq!(got, ["target/", "node_modules/", ".venv/"]);
        let bare = tempfile::tempdir().unwrap();
        assert!(regenerable_ignored(bare.path()).is_empty());
    }
}
