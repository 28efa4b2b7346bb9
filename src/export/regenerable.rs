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

/// The `[record] exclude` patterns of the [`REGENERABLE`] directories the
/// project at `project` ignores now, each no wider than what is ignored:
///
/// - `NAME/` (any depth) when its ignore rules ignore a directory `NAME`
///   at the root and below (`target/`, `**/node_modules`): its `.gitignore`
///   at the root, `.git/info/exclude` or the user's global excludes;
/// - `/NAME/` (the root's only) when they ignore it at the root alone
///   (`/target`), or when a `NAME/.gitignore` of its own at the root
///   ignores what is in it (a venv, pytest's and mypy's caches write one
///   holding `*`).
///
/// So a directory of that name that git would commit is always recorded.
/// Read when a mount starts; a `.gitignore` deeper than the root is not
/// looked at (such a directory is recorded: the safe side). A project that
/// cannot be opened gives none.
pub fn regenerable_ignored(project: &std::path::Path) -> Vec<String> {
    let dir = match Dir::open(project) {
        Ok(d) => d,
        Err(e) => {
            log::debug!("{}: {e}", project.display());
            return Vec::new();
        }
    };
    let mut rules = IgnoreRules::load(&dir);
    // Directories no rule names: a rule that ignores one of them would make
    // everything below it ignored, whatever its name.
    const PROBE: &str = "opfs-probe-0c1d";
    let probes_plain = !rules.is_ignored(PROBE.as_bytes(), true)
        && !rules.is_ignored(format!("{PROBE}/{PROBE}").as_bytes(), true);
    REGENERABLE
        .iter()
        .filter_map(|r| {
            let at = |parents: &str| format!("{parents}{}", r.name);
            let root = rules.is_ignored(r.name.as_bytes(), true);
            let deeper = probes_plain
                && rules.is_ignored(at(&format!("{PROBE}/")).as_bytes(), true)
                && rules.is_ignored(at(&format!("{PROBE}/{PROBE}/")).as_bytes(), true);
            if root && deeper {
                return Some(format!("{}/", r.name));
            }
            let inside = format!("{}/opfs-probe", r.name);
            (root || rules.is_ignored(inside.as_bytes(), false)).then(|| format!("/{}/", r.name))
        })
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
        // `/target` is the root's only; `node_modules/` any depth; a venv
        // that ignores itself, the root's.
        assert_eq!(got, ["/target/", "node_modules/", "/.venv/"]);
        let deep = tempfile::tempdir().unwrap();
        std::fs::write(
            deep.path().join(".gitignore"),
            "target/\n**/__pycache__\n*/.tox\n",
        )
        .unwrap();
        // `*/.tox` ignores `x/.tox` only: not the root's, not deeper.
        assert_eq!(
            regenerable_ignored(deep.path()),
            ["target/", "__pycache__/"]
        );
        let everything = tempfile::tempdir().unwrap();
        std::fs::write(everything.path().join(".gitignore"), "*\n").unwrap();
        // Everything ignored: every name, at the root (the probes are
        // ignored too, so no depth can be told).
        assert_eq!(
            regenerable_ignored(everything.path()).len(),
            REGENERABLE.len()
        );
        let bare = tempfile::tempdir().unwrap();
        assert!(regenerable_ignored(bare.path()).is_empty());
    }
}
