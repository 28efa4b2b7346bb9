//! Names on a checkpoint remote: the namespace a project is pushed under,
//! the machine's name as it spells it, and a remote URL's checks and
//! normal form (`docs/remote.md`, "What is pushed, and where").

use std::path::Path;

use super::bucket;
use crate::store::layout::key_of;

/// The root of every namespace opfs pushes to on a remote.
pub const NAMESPACE_ROOT: &str = "refs/opfs/";

/// Where and as whom a project is pushed.
#[derive(Debug, Clone)]
pub struct Target {
    /// The remote: any URL or path `git push` takes (`git://host/repo`,
    /// `ssh://...`, `https://...`, `/srv/checkpoints.git`).
    pub url: String,
    /// The machine's name in the namespace, as [`machine_name`] makes it.
    pub machine: String,
    /// The bucket that receives the bytes behind pointer files, if any
    /// (`docs/remote.md`, "Big files").
    pub bucket: Option<bucket::BucketConfig>,
}

/// The namespace of `project` (canonical) pushed from `machine`:
/// `refs/opfs/<machine>/<project key>` (the key is the state dir's, 16
/// hex digits of the BLAKE3 of the project's path).
pub fn namespace(machine: &str, project: &Path) -> String {
    format!("{NAMESPACE_ROOT}{machine}/{}", key_of(project))
}

/// Why `url` cannot name a checkpoint remote, if it cannot:
///
/// - it starts with `-`, which git would read as an option (a remote
///   named `--upload-pack=CMD` would run CMD);
/// - it holds a password (`scheme://user:password@host/...`): opfs keeps
///   the URL in `push.json`, the daemon log and `opfs status`, and the
///   configuration is readable inside `opfs run`, so a password there
///   would be shown to anyone who reads those; git's credential helpers
///   or an SSH key keep it out of the URL.
///
/// The message never repeats the password.
pub fn url_problem(url: &str) -> Option<String> {
    if url.starts_with('-') {
        return Some(format!(
            "{url:?} is not a remote: it starts with '-', which git would take as an option; \
             give the remote's URL (git://, ssh://, https://, file://) or path"
        ));
    }
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (userinfo, host) = authority.rsplit_once('@')?;
    let (user, _password) = userinfo.split_once(':')?;
    Some(format!(
        "the remote {scheme}://{user}:***@{host}/... holds a password: opfs keeps remote URLs \
         in its state, its log and `opfs status`, so it refuses one with a password; remove \
         it from the URL and let git supply it (`git config --global credential.helper store` \
         or `cache`, or an SSH key)"
    ))
}

/// `url` as opfs keys a remote by (its `push.json` entry, its local copy
/// for `opfs remote`): a local repository named by a path or by a
/// `file://` URL becomes its canonical path (symbolic links resolved, `..`
/// gone; as given, made absolute, when it does not exist), so one
/// repository is one remote however it is spelled. Any other URL
/// (`git://`, `ssh://`, `https://`, `host:path`) is kept as it is.
/// A relative path is taken from the current directory: the CLI calls
/// this where it reads the URL.
pub fn normalize_url(url: &str) -> String {
    let path = match url.strip_prefix("file://") {
        Some(rest) => rest,
        None if url.contains("://") => return url.to_string(),
        // git's `[user@]host:path`: a ':' before any '/'.
        None if url.find(':').is_some_and(|c| !url[..c].contains('/')) => return url.to_string(),
        None if url.is_empty() || url.starts_with('-') => return url.to_string(),
        None => url,
    };
    let p = Path::new(path);
    std::fs::canonicalize(p)
        .or_else(|_| std::path::absolute(p))
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| path.to_string())
}

/// The machine's name as the namespace spells it: `configured` (the
/// configuration's `[push] machine`) if given, else the host name
/// (`/proc/sys/kernel/hostname`), else `localhost`. Characters other
/// than ASCII letters, digits, `-` and `_` become `-`, so every name is
/// one valid ref component.
pub fn machine_name(configured: Option<&str>) -> String {
    let host;
    let raw = match configured {
        Some(c) => c,
        None => {
            host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            host.trim()
        }
    };
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "localhost".to_string()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_names_are_one_ref_component() {
        assert_eq!(machine_name(Some("ci runner/7.x")), "ci-runner-7-x");
        assert_eq!(machine_name(Some("")), "localhost");
    }

    #[test]
    fn a_local_repository_is_one_remote_as_a_path_or_a_file_url() {
        let d = tempfile::tempdir().expect("temp");
        let repo = d.path().join("r.git");
        std::fs::create_dir(&repo).expect("mkdir");
        std::fs::create_dir(d.path().join("sub")).expect("mkdir");
        std::os::unix::fs::symlink(&repo, d.path().join("link")).expect("symlink");
        let canon = std::fs::canonicalize(&repo)
            .expect("canonical")
            .to_string_lossy()
            .into_owned();
        let spellings = [
            repo.display().to_string(),
            format!("file://{}", repo.display()),
            format!("{}/sub/../r.git", d.path().display()),
            d.path().join("link").display().to_string(),
            format!("file://{}/link", d.path().display()),
        ];
        for s in spellings {
            assert_eq!(normalize_url(&s), canon, "{s}");
        }
        for kept in [
            "git://h/r.git",
            "ssh://git@h/r.git",
            "https://h/r.git",
            "git@h:team/r.git",
            "-x",
        ] {
            assert_eq!(normalize_url(kept), kept);
        }
    }
}
