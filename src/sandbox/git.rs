//! What git executes or trusts, made read-only inside the sandbox
//! (guarantee 8; `docs/sandbox.md` "What git runs stays read-only").
//!
//! The project's `.git` stays writable inside (objects, refs, the index,
//! `HEAD`, logs: `git add`, `commit`, `branch`, `checkout -b` and `stash`
//! work), but every file git reads as configuration or runs is bound
//! read-only over itself, so the command cannot plant code that git runs
//! later outside the sandbox (`core.fsmonitor`, a hook):
//!
//! - the repository's `config`, `config.worktree`, `commondir`, `hooks/`
//!   and `info/`, in its git dir and in its common dir;
//! - the same in every submodule's git dir under `modules/` and for every
//!   linked worktree under `worktrees/` (their `config.worktree` and
//!   `commondir`);
//! - `.git` itself: a gitfile (`gitdir: ...`) read-only, a directory bound
//!   onto itself so it cannot be renamed away and replaced;
//! - every file a configuration includes (`include.path`,
//!   `includeIf.*.path`, followed recursively), the `core.hooksPath`
//!   directory, and the program of each command-valued key (`core.fsmonitor`,
//!   `core.editor`, filter and diff drivers, aliases starting with `!`...)
//!   when it is a path inside the project (or a writable root).
//!
//! Every folder between the project's root (or the writable root holding
//! it) and a protected path is bound writable onto itself, as `.git` is,
//! so the command cannot rename or remove it (`EBUSY`) and make the path
//! anew under a fresh folder (`mv .husky .husky-old; mkdir -p .husky/_`);
//! what else it holds stays writable. The binds come parents first.
//!
//! A path that does not exist cannot be bound over. Its nearest existing
//! parent is made read-only instead when that parent lies inside the
//! project but is neither the project's root nor a git dir (which must stay
//! writable); otherwise the run is refused, naming the path and how to
//! create it. `.git/commondir`, which git never makes in a repository's own
//! git dir, is refused by the mount itself (`crate::capture`), so it needs
//! nothing here.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use super::RunError;

/// One read-only bind: `source` in the host's view over `dest` inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitBind {
    /// The path as the host sees it (through the mount for the project).
    pub source: PathBuf,
    /// Where it is inside the sandbox.
    pub dest: PathBuf,
    /// Bound writable onto itself (the `.git` directory: only so that it
    /// cannot be renamed), not read-only.
    pub writable: bool,
}

/// Where the paths live: `view` is what the sandbox shows at `project`
/// (the mountpoint, in the host's view); `writable` the writable roots
/// (a git path under one must be protected too); `user_home` for `~/` and
/// the global configuration; `git` the git binary, if found (without it,
/// configuration files are not read: includes and command paths are not
/// followed).
#[derive(Debug, Clone)]
pub struct GitScope<'a> {
    /// The host path whose content shows at `project` inside.
    pub view: &'a Path,
    /// The project's path inside.
    pub project: &'a Path,
    /// Writable roots of the sandbox.
    pub writable: &'a [PathBuf],
    /// The user's home directory.
    pub user_home: Option<&'a Path>,
    /// The git binary.
    pub git: Option<&'a Path>,
}

/// What [`git_binds`] needs besides the paths, owned: kept by the run for
/// the worktrees it binds into the sandbox while it runs (`share.rs`).
#[derive(Debug, Clone, Default)]
pub struct GitGuard {
    /// False with `--writable-git-config` (and outside `workspace-write`):
    /// [`GitGuard::binds`] gives nothing.
    pub enabled: bool,
    /// The git binary.
    pub git: Option<PathBuf>,
    /// The user's home directory.
    pub user_home: Option<PathBuf>,
    /// Writable roots of the sandbox.
    pub writable: Vec<PathBuf>,
}

impl GitGuard {
    /// [`git_binds`] for the tree the host sees at `view`, shown at
    /// `project`; nothing when not enabled.
    ///
    /// Errors: as [`git_binds`].
    pub fn binds(&self, view: &Path, project: &Path) -> Result<Vec<GitBind>, RunError> {
        if !self.enabled {
            return Ok(Vec::new());
        }
        git_binds(&GitScope {
            view,
            project,
            writable: &self.writable,
            user_home: self.user_home.as_deref(),
            git: self.git.as_deref(),
        })
    }
}

/// Keys whose value is a command git runs: the first word of the value
/// (after a leading `!`) is protected when it is a path inside the
/// project. A `*` stands for one subsection name.
const COMMAND_KEYS: &[&str] = &[
    "core.fsmonitor",
    "core.editor",
    "core.pager",
    "core.sshcommand",
    "core.askpass",
    "core.gitproxy",
    "sequence.editor",
    "diff.external",
    "interactive.difffilter",
    "gpg.program",
    "gpg.*.program",
    "credential.helper",
    "credential.*.helper",
    "filter.*.clean",
    "filter.*.smudge",
    "filter.*.process",
    "diff.*.command",
    "diff.*.textconv",
    "merge.*.driver",
    "mergetool.*.cmd",
    "difftool.*.cmd",
    "pager.*",
    "alias.*",
    "uploadpack.packobjectshook",
    "web.browser",
    "browser.*.cmd",
    "man.*.cmd",
    "sendemail.sendmailcmd",
    "ssh.variant",
];

/// The binds that keep what git executes or trusts read-only inside, in
/// bind order (parents before children).
///
/// Errors: [`RunError::GitPath`] for a path git would read that does not
/// exist and whose parent must stay writable.
pub fn git_binds(scope: &GitScope<'_>) -> Result<Vec<GitBind>, RunError> {
    let mut c = Collector {
        scope,
        binds: Vec::new(),
        seen: BTreeSet::new(),
        configs: BTreeSet::new(),
        git_dirs: Vec::new(),
    };
    let dotgit = scope.view.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&dotgit) else {
        // No repository (yet): a repository the command makes is its own
        // (docs/sandbox.md, known gaps), so nothing here is guarded, not
        // even a relative hooksPath of the user's configuration.
        return Ok(c.binds);
    };
    let git_dir = if meta.is_dir() {
        c.binds.push(GitBind {
            source: dotgit.clone(),
            dest: c.inside(&dotgit),
            writable: true,
        });
        Some(dotgit.clone())
    } else if meta.is_file() {
        c.protect(&dotgit, Missing::Skip)?;
        read_gitfile(&dotgit)
    } else {
        // A symlink: its target is what git uses; the link itself cannot
        // be bound over (docs/sandbox.md, known gaps).
        std::fs::canonicalize(&dotgit).ok()
    };
    if let Some(g) = git_dir {
        c.git_dir(&g, true)?;
    }
    c.global_configs()?;
    let configs: Vec<PathBuf> = c.configs.iter().cloned().collect();
    for f in configs {
        c.config_file(&f, 0)?;
    }
    Ok(c.with_parents())
}

/// What to do when a protected path does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// Git does not read it when absent unless something else changes
    /// (which is protected): nothing to do.
    Skip,
    /// Git would read it once created: protect its parent, or refuse.
    Guard,
}

struct Collector<'s, 'a> {
    scope: &'s GitScope<'a>,
    binds: Vec<GitBind>,
    seen: BTreeSet<PathBuf>,
    /// Configuration files to read (for includes, hooksPath and commands).
    configs: BTreeSet<PathBuf>,
    /// Git dirs found (bound writable or not): a missing path's parent
    /// may not be one of them.
    git_dirs: Vec<PathBuf>,
}

impl Collector<'_, '_> {
    /// Where host path `p` (under the view) is inside; other paths are
    /// where they are.
    fn inside(&self, p: &Path) -> PathBuf {
        match p.strip_prefix(self.scope.view) {
            Ok(rest) => self.scope.project.join(rest),
            Err(_) => p.to_path_buf(),
        }
    }

    /// Whether a write to host path `p` would persist from inside: under
    /// the view (the project) or a writable root.
    fn reachable(&self, p: &Path) -> bool {
        p.starts_with(self.scope.view) || self.scope.writable.iter().any(|w| p.starts_with(w))
    }

    /// `p` as the host sees a path given as the sandbox sees it (a
    /// configuration value naming the project's own path).
    fn to_view(&self, p: &Path) -> PathBuf {
        match p.strip_prefix(self.scope.project) {
            Ok(rest) if self.scope.view != self.scope.project => self.scope.view.join(rest),
            _ => p.to_path_buf(),
        }
    }

    fn protect(&mut self, p: &Path, missing: Missing) -> Result<(), RunError> {
        let p = normalize(&self.to_view(p));
        if !self.reachable(&p) {
            return Ok(());
        }
        if std::fs::symlink_metadata(&p).is_ok() {
            // A symlink is bound as its target: protect where it leads.
            let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
            let target = if real != p && self.reachable(&real) {
                real
            } else {
                p
            };
            return self.bind(target);
        }
        if missing == Missing::Skip {
            return Ok(());
        }
        let mut parent = p.parent().map(Path::to_path_buf);
        while let Some(d) = parent {
            if std::fs::symlink_metadata(&d).is_ok() {
                // Stays writable: the project's root, a writable root, or
                // anything above them.
                let inside_writable = self
                    .scope
                    .writable
                    .iter()
                    .any(|w| d.starts_with(w) && d != *w);
                let root =
                    d == self.scope.view || (!d.starts_with(self.scope.view) && !inside_writable);
                if root || self.git_dirs.contains(&d) || self.scope.writable.contains(&d) {
                    return Err(RunError::GitPath {
                        path: self.inside(&p),
                        parent: self.inside(&d),
                    });
                }
                // Bound as the path it really is (its parents are bound
                // onto themselves by `with_parents`).
                let real = std::fs::canonicalize(&d).unwrap_or_else(|_| d.clone());
                let target = if self.reachable(&real) { real } else { d };
                return self.bind(target);
            }
            parent = d.parent().map(Path::to_path_buf);
        }
        Ok(())
    }

    fn bind(&mut self, source: PathBuf) -> Result<(), RunError> {
        if self.seen.insert(source.clone()) {
            let dest = self.inside(&source);
            self.binds.push(GitBind {
                source,
                dest,
                writable: false,
            });
        }
        Ok(())
    }

    /// The root a host path `p` lies under: the view or the deepest
    /// writable root holding it.
    fn root_of(&self, p: &Path) -> Option<PathBuf> {
        std::iter::once(self.scope.view)
            .chain(self.scope.writable.iter().map(PathBuf::as_path))
            .filter(|r| p.starts_with(r))
            .max_by_key(|r| r.components().count())
            .map(Path::to_path_buf)
    }

    /// The binds with, for each read-only one, every directory between
    /// its root (the project or the writable root holding it, exclusive)
    /// and itself bound writable onto itself: a mountpoint cannot be
    /// renamed or removed (`EBUSY`), so the command cannot move a parent
    /// away and make the protected path anew under a fresh one, while what
    /// else such a folder holds stays writable. A path below another
    /// read-only bind needs nothing (that bind covers it, and a writable
    /// bind there would open it). Sorted parents first (a bind made over a
    /// parent after its child's would hide the child's).
    fn with_parents(mut self) -> Vec<GitBind> {
        let read_only: Vec<PathBuf> = self
            .binds
            .iter()
            .filter(|b| !b.writable)
            .map(|b| b.source.clone())
            .collect();
        let mut have: BTreeSet<PathBuf> = self.binds.iter().map(|b| b.source.clone()).collect();
        let mut parents = Vec::new();
        for p in &read_only {
            if read_only.iter().any(|r| r != p && p.starts_with(r)) {
                continue;
            }
            let Some(root) = self.root_of(p) else {
                continue;
            };
            let mut up = p.parent();
            while let Some(d) = up {
                if d == root || !d.starts_with(&root) {
                    break;
                }
                if have.insert(d.to_path_buf()) {
                    parents.push(GitBind {
                        source: d.to_path_buf(),
                        dest: self.inside(d),
                        writable: true,
                    });
                }
                up = d.parent();
            }
        }
        self.binds.extend(parents);
        // Stable: the order found stays among binds of one depth.
        self.binds.sort_by_key(|b| b.dest.components().count());
        self.binds
    }

    /// Protects git dir `g` (and its common dir); `top` for the project's
    /// own, whose `modules/` and `worktrees/` are walked too.
    fn git_dir(&mut self, g: &Path, top: bool) -> Result<(), RunError> {
        self.git_dirs.push(g.to_path_buf());
        let common = read_commondir(g).unwrap_or_else(|| g.to_path_buf());
        if common != g {
            self.git_dirs.push(common.clone());
        }
        for d in [g.to_path_buf(), common.clone()] {
            self.protect(&d.join("config"), Missing::Skip)?;
            self.protect(&d.join("commondir"), Missing::Skip)?;
            self.protect(&d.join("hooks"), Missing::Guard)?;
            self.protect(&d.join("info"), Missing::Guard)?;
        }
        self.configs.insert(common.join("config"));
        let worktree_config = g.join("config.worktree");
        // Read only with the extension on (which config, protected, says).
        let per_worktree = if config_bool(
            self.scope.git,
            &common.join("config"),
            "extensions.worktreeconfig",
        ) {
            Missing::Guard
        } else {
            Missing::Skip
        };
        self.protect(&worktree_config, per_worktree)?;
        if worktree_config.exists() {
            self.configs.insert(worktree_config);
        }
        if top {
            for m in submodule_git_dirs(&common.join("modules")) {
                self.git_dir(&m, false)?;
            }
            if let Ok(rd) = std::fs::read_dir(common.join("worktrees")) {
                for e in rd.flatten() {
                    let w = e.path();
                    self.protect(&w.join("config.worktree"), per_worktree)?;
                    self.protect(&w.join("commondir"), Missing::Skip)?;
                    self.protect(&w.join("gitdir"), Missing::Skip)?;
                }
            }
        }
        Ok(())
    }

    /// The user's and the system's configuration files: read for what
    /// they point into the project, and protected themselves when a
    /// writable root holds them.
    fn global_configs(&mut self) -> Result<(), RunError> {
        let mut files = vec![PathBuf::from("/etc/gitconfig")];
        if let Some(h) = self.scope.user_home {
            files.push(h.join(".gitconfig"));
            files.push(h.join(".config/git/config"));
        }
        for f in files {
            self.protect(&f, Missing::Skip)?;
            self.configs.insert(f);
        }
        Ok(())
    }

    /// Reads configuration file `f`: protects what it includes (and reads
    /// that in turn), its hooksPath and the programs of its commands.
    fn config_file(&mut self, f: &Path, depth: u32) -> Result<(), RunError> {
        // git's own limit on nested includes is 10.
        if depth > 10 {
            return Ok(());
        }
        let base = f.parent().unwrap_or(Path::new("/")).to_path_buf();
        for (key, value) in config_entries(self.scope.git, f) {
            let path_of = |v: &str, rel_to: &Path| -> PathBuf {
                let v = v.trim();
                match (v.strip_prefix("~/"), self.scope.user_home) {
                    (Some(rest), Some(h)) => h.join(rest),
                    _ => rel_to.join(v),
                }
            };
            if key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path")) {
                let inc = path_of(&value, &base);
                self.protect(&inc, Missing::Guard)?;
                self.config_file(&self.to_view(&inc), depth + 1)?;
            } else if key == "core.hookspath" {
                // Relative: to where hooks run, the top of the worktree.
                let hooks = path_of(&value, self.scope.project);
                self.protect(&hooks, Missing::Guard)?;
            } else if is_command_key(&key) {
                if let Some(program) = command_program(&value) {
                    if program.contains('/') {
                        let p = path_of(&program, self.scope.project);
                        self.protect(&p, Missing::Guard)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether `key` (lower case, as `git config --list` prints it) is one of
/// [`COMMAND_KEYS`].
fn is_command_key(key: &str) -> bool {
    COMMAND_KEYS.iter().any(|pat| key_matches(pat, key))
}

fn key_matches(pat: &str, key: &str) -> bool {
    match pat.split_once('*') {
        None => pat == key,
        Some((head, tail)) => {
            key.len() > head.len() + tail.len() && key.starts_with(head) && key.ends_with(tail)
        }
    }
}

/// The program a command value runs: its first word, after a leading `!`,
/// without quotes; `None` for a boolean (`core.fsmonitor = true`) or an
/// empty value.
fn command_program(value: &str) -> Option<String> {
    let v = value.trim().trim_start_matches('!').trim_start();
    let first: String = if let Some(rest) = v.strip_prefix('"') {
        rest.split('"').next()?.to_string()
    } else if let Some(rest) = v.strip_prefix('\'') {
        rest.split('\'').next()?.to_string()
    } else {
        v.split_whitespace().next()?.to_string()
    };
    if first.is_empty() || matches!(first.as_str(), "true" | "false") {
        None
    } else {
        Some(first)
    }
}

/// `path` with `.` and `..` resolved lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The git dir a gitfile (`gitdir: PATH`) names, relative to its folder.
fn read_gitfile(f: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(f).ok()?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    Some(normalize(&f.parent()?.join(target)))
}

/// The common dir named by `g/commondir` (relative to `g`), if any.
fn read_commondir(g: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(g.join("commondir")).ok()?;
    let c = text.trim_end_matches(['\n', '\r']);
    Some(normalize(&g.join(c)))
}

/// The submodules' git dirs below `modules` (a submodule's name may hold
/// `/`, and a submodule may have its own `modules/`): every directory
/// holding a `HEAD` or a `config`.
fn submodule_git_dirs(modules: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![modules.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if p.join("HEAD").is_file() || p.join("config").is_file() {
                out.push(p);
            } else {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The entries of configuration file `f` (`git config --file F --list
/// -z`: keys in lower case but for subsection names), without following
/// includes (the caller follows them); empty when git or the file is
/// missing or unreadable.
fn config_entries(git: Option<&Path>, f: &Path) -> Vec<(String, String)> {
    let Some(git) = git else {
        return Vec::new();
    };
    if !f.is_file() {
        return Vec::new();
    }
    let out = Command::new(git)
        .arg("config")
        .arg("--file")
        .arg(f)
        .args(["--no-includes", "--list", "-z"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let Ok(out) = out else {
        return Vec::new();
    };
    if !out.status.success() {
        log::warn!(
            "git cannot read {}: its includes are not followed",
            f.display()
        );
        return Vec::new();
    }
    out.stdout
        .split(|b| *b == 0)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let text = String::from_utf8_lossy(e);
            match text.split_once('\n') {
                Some((k, v)) => (k.to_lowercase(), v.to_string()),
                None => (text.to_lowercase(), "true".to_string()),
            }
        })
        .collect()
}

/// Whether boolean `key` is set true in configuration file `f`.
fn config_bool(git: Option<&Path>, f: &Path, key: &str) -> bool {
    config_entries(git, f)
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .is_some_and(|(_, v)| matches!(v.to_lowercase().as_str(), "true" | "yes" | "on" | "1"))
}

/// The git binary on `search_path` (the value of `$PATH`), if any.
pub fn find_git(search_path: Option<&OsStr>) -> Option<PathBuf> {
    search_path
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_repository_gets_its_config_hooks_and_info_bound_and_a_missing_hooks_folder_refused() {
        let tmp = std::env::temp_dir().join(format!("opfs-git-unit-{}", std::process::id()));
        let view = tmp.join("view");
        std::fs::create_dir_all(view.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(view.join(".git/info")).unwrap();
        std::fs::write(view.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(view.join(".git/modules/sub/hooks")).unwrap();
        std::fs::create_dir_all(view.join(".git/modules/sub/info")).unwrap();
        std::fs::write(view.join(".git/modules/sub/config"), "").unwrap();
        let project = Path::new("/srv/app");
        let scope = GitScope {
            view: &view,
            project,
            writable: &[],
            user_home: None,
            git: None,
        };
        let binds = git_binds(&scope).unwrap();
        let dests: Vec<String> = binds.iter().map(|b| b.dest.display().to_string()).collect();
        assert_eq!(dests[0], "/srv/app/.git", "{dests:?}");
        assert!(binds[0].writable);
        for d in [
            "/srv/app/.git/config",
            "/srv/app/.git/hooks",
            "/srv/app/.git/info",
            "/srv/app/.git/modules/sub/config",
            "/srv/app/.git/modules/sub/hooks",
        ] {
            assert!(dests.iter().any(|x| x == d), "{d} in {dests:?}");
        }
        // The submodule's git dir and `modules/` are bound onto
        // themselves (they cannot be renamed away), after `.git` and
        // before what they hold; nothing else is writable.
        let writable: Vec<&str> = binds
            .iter()
            .filter(|b| b.writable)
            .map(|b| b.dest.to_str().unwrap())
            .collect();
        assert_eq!(
            writable,
            [
                "/srv/app/.git",
                "/srv/app/.git/modules",
                "/srv/app/.git/modules/sub"
            ],
            "{dests:?}"
        );
        let at = |d: &str| dests.iter().position(|x| x == d).unwrap();
        assert!(at("/srv/app/.git/modules/sub") < at("/srv/app/.git/modules/sub/hooks"));
        assert!(at("/srv/app/.git/modules") < at("/srv/app/.git/modules/sub"));
        assert!(!dests.iter().any(|x| x.ends_with("commondir")), "{dests:?}");
        std::fs::remove_dir(view.join(".git/hooks")).unwrap();
        let e = git_binds(&scope).unwrap_err().to_string();
        assert!(
            e.contains("/srv/app/.git/hooks") && e.contains("--writable-git-config"),
            "{e}"
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn command_values_name_their_program() {
        assert_eq!(command_program("true"), None);
        assert_eq!(command_program("./x.sh --a").as_deref(), Some("./x.sh"));
        assert_eq!(command_program("!tools/a b").as_deref(), Some("tools/a"));
        assert_eq!(
            command_program("\"my dir/x\" y").as_deref(),
            Some("my dir/x")
        );
        assert!(is_command_key("filter.lfs.clean"));
        assert!(is_command_key("alias.st"));
        assert!(!is_command_key("filter.clean"));
        assert!(!is_command_key("user.name"));
    }
}
