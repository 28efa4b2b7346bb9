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
    /// The most bytes of objects one turn (a commit of the export: a
    /// turn, the baseline, a worktree's turn) sends to the bucket
    /// (`[push] bucket_turn_budget`); `None`: no limit. The objects a
    /// turn added or changed are sent smallest first while they fit; the
    /// others are withheld (`docs/remote.md`, "The per-turn budget").
    pub turn_budget: Option<u64>,
}

/// The per-turn budget of the bucket when the configuration sets none:
/// 2 GiB.
pub const DEFAULT_TURN_BUDGET: u64 = 2 << 30;

/// The namespace of `project` (canonical) pushed from `machine`:
/// `refs/opfs/<machine>/<project key>` (the key is the state dir's, 16
/// hex digits of the BLAKE3 of the project's path).
pub fn namespace(machine: &str, project: &Path) -> String {
    format!("{NAMESPACE_ROOT}{machine}/{}", key_of(project))
}

/// The longest machine name, in bytes: it is one component of every ref
/// opfs pushes (`refs/opfs/<machine>/...`), and remotes refuse refs with
/// long components (an atomic push then fails as a whole).
pub const MACHINE_MAX: usize = 64;

/// The schemes whose user name is a credential: a token as the user name
/// (`https://TOKEN@host/...`) is accepted by forges.
const SECRET_USER_SCHEMES: [&str; 5] = ["http", "https", "git", "ftp", "ftps"];

/// How to pass credentials instead of putting them in a URL.
const CREDENTIALS_FIX: &str = "remove it from the URL and let git supply the credential \
     (a credential helper: `git config --global credential.helper store` or `cache`, \
     or an SSH key and agent with an ssh:// or host:path remote)";

/// The parts of a `scheme://` URL: its scheme (lower case), userinfo
/// (before `@` in the authority), query (after `?`) and
/// fragment (after `#`). `None` when `url` has no `scheme://`.
struct UrlParts<'a> {
    scheme: String,
    userinfo: Option<&'a str>,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

/// The `<transport>` of git's `<transport>::<address>` form and the
/// address behind it, when `url` has that form: git reads a name of
/// letters (first), digits, `+`, `-` and `.` followed by `::` as the name
/// of a remote helper (`git-remote-<transport>`) it runs with the
/// address (`ext::` runs any command; `https::https://...`).
pub(super) fn transport_prefix(url: &str) -> Option<(&str, &str)> {
    let (transport, address) = url.split_once("::")?;
    let mut chars = transport.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some((transport, address))
}

fn url_parts(url: &str) -> Option<UrlParts<'_>> {
    // The address behind a `<transport>::` is what holds a credential.
    let url = transport_prefix(url).map_or(url, |(_, address)| address);
    let (scheme, rest) = url.split_once("://")?;
    let (rest, fragment) = match rest.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (rest, None),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let userinfo = authority.rsplit_once('@').map(|(u, _)| u);
    Some(UrlParts {
        scheme: scheme.to_ascii_lowercase(),
        userinfo,
        query,
        fragment,
    })
}

impl UrlParts<'_> {
    /// The secret parts of the URL, each with the delimiter before it: the
    /// userinfo of a scheme whose user name can be a token (after `//`),
    /// else a password (after `user:`), the query (after `?`) and the
    /// fragment (after `#`; both in any scheme but `file`).
    fn secrets(&self) -> Vec<(&'static str, &str)> {
        let mut out = Vec::new();
        if let Some(u) = self.userinfo {
            if SECRET_USER_SCHEMES.contains(&self.scheme.as_str()) {
                out.push(("//", u));
            } else if let Some((_, password)) = u.split_once(':') {
                out.push((":", password));
            }
        }
        if self.scheme != "file" {
            out.extend(self.query.map(|q| ("?", q)));
            out.extend(self.fragment.map(|f| ("#", f)));
        }
        out.retain(|(_, s)| !s.is_empty());
        out
    }
}

/// Why `url` cannot name a checkpoint remote, if it cannot:
///
/// - it starts with `-`, which git would read as an option (a remote
///   named `--upload-pack=CMD` would run CMD);
/// - it holds a credential: a user name in an `http://`, `https://`,
///   `git://` or `ftp(s)://` URL (`https://TOKEN@host/...`: forges take
///   a token as the user name), a password in any URL
///   (`ssh://user:password@host/...`), or a query string or fragment in
///   any URL but `file://` (`?private_token=...`: git remotes take no
///   query, so there is no honest use for one). opfs keeps the URL in
///   `push.json`, the daemon log and `opfs status`, passes it to git on
///   its command line, and the configuration is readable inside `opfs
///   run`, so a credential there would be shown to anyone who reads
///   those. The user name of `ssh://git@host/...` or `git@host:path` is
///   no secret and is kept.
/// - it has git's `<transport>::<address>` form (`https::https://...`,
///   `ext::CMD`, `fd::3`): git runs the remote helper the URL names
///   (`ext::` runs any command, blocked only by git's `protocol.allow`
///   default), and the address would escape the checks above.
///
/// The message never repeats the credential ([`redact_url`]).
pub fn url_problem(url: &str) -> Option<String> {
    if url.starts_with('-') {
        return Some(format!(
            "{url:?} is not a remote: it starts with '-', which git would take as an option; \
             give the remote's URL (git://, ssh://, https://, file://) or path"
        ));
    }
    if let Some((transport, _)) = transport_prefix(url) {
        return Some(format!(
            "the remote {} uses git's '{transport}::<address>' form, which runs the remote \
             helper it names: opfs refuses that form, since it can run any program \
             (ext::) and hides the address from opfs's credential check; give the address \
             itself (git://, ssh://, https://, file://, host:path or a path)",
            redact_url(url)
        ));
    }
    let parts = url_parts(url)?;
    let what = match &parts {
        p if p.userinfo.is_some_and(|u| u.contains(':')) => "a password (after 'user:')",
        p if p
            .userinfo
            .is_some_and(|u| SECRET_USER_SCHEMES.contains(&p.scheme.as_str()) && !u.is_empty()) =>
        {
            "a user name or token (before '@')"
        }
        p if p.scheme != "file" && (p.query.is_some() || p.fragment.is_some()) => {
            "a query string or fragment (after '?' or '#'), where tokens are passed"
        }
        _ => return None,
    };
    Some(format!(
        "the remote {} holds {what}: opfs refuses a credential in a remote URL, since it \
         would store it in push.json, print it in `opfs status` and its log, pass it on git's \
         command line, and the configuration is readable inside `opfs run`; {CREDENTIALS_FIX}",
        redact_url(url)
    ))
}

/// `url` with its credentials replaced by `***` (the user name or token
/// of an `http(s)://`, `git://`, `ftp(s)://` URL, a password, a query
/// string, a fragment; see [`url_problem`]): the form every printed URL
/// takes, so an entry of `push.json` written before those URLs were
/// refused does not show its secret.
pub fn redact_url(url: &str) -> String {
    redact(url, url)
}

/// `text` (a message about `url`: git's error, a log line) with every
/// credential of `url` ([`redact_url`]) replaced by `***`, wherever it
/// occurs (git may quote the URL in a form of its own).
pub fn redact(text: &str, url: &str) -> String {
    let Some(parts) = url_parts(url) else {
        return text.to_string();
    };
    let mut secrets = parts.secrets();
    // The longest first, so one that holds another is replaced whole.
    secrets.sort_by_key(|(_, s)| std::cmp::Reverse(s.len()));
    let mut out = text.to_string();
    for (before, secret) in secrets {
        // Where the URL is quoted: after its delimiter.
        out = out.replace(&format!("{before}{secret}"), &format!("{before}***"));
        // Elsewhere too (git may quote it in a form of its own), unless it
        // is so short that other text would be mangled.
        if secret.len() >= 8 {
            out = out.replace(secret, "***");
        }
    }
    out
}

/// True when `url` is a relative path (no `scheme://`, not git's
/// `[user@]host:path`, not starting with `/`): taken from the current
/// directory, which differs between the daemon and each command, so a
/// configured remote must not be one (`docs/remote.md`).
pub fn is_relative_path(url: &str) -> bool {
    !(url.contains("://")
        || url.starts_with('/')
        || url.find(':').is_some_and(|c| !url[..c].contains('/')))
}

/// Why `configured` (`[push] machine`) cannot name the machine, if it
/// cannot: empty, or longer than [`MACHINE_MAX`] bytes.
pub fn machine_problem(configured: &str) -> Option<String> {
    if configured.trim().is_empty() {
        return Some(
            "is empty: it names this machine in the remote's refs (refs/opfs/<machine>/...); \
             give it a name (letters, digits, '-', '_'), or remove the key to use the host name"
                .to_string(),
        );
    }
    if configured.len() > MACHINE_MAX {
        return Some(format!(
            "is {} bytes long: it is one component of every ref pushed \
             (refs/opfs/<machine>/...), at most {MACHINE_MAX} bytes, or the remote refuses \
             the refs; give a shorter name (letters, digits, '-', '_')",
            configured.len()
        ));
    }
    None
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
    fn credentials_in_a_remote_url_are_refused_and_never_repeated() {
        for (bad, secret) in [
            (
                "https://ghp_SECRETTOKEN123@127.0.0.1:1/x.git",
                "ghp_SECRETTOKEN123",
            ),
            ("https://u:pw5ecret@h/x.git", "pw5ecret"),
            ("HTTP://tok3n@h/x.git", "tok3n"),
            ("git://tok3n@h/x.git", "tok3n"),
            ("ssh://git:pw5ecret@h/x.git", "pw5ecret"),
            ("https://127.0.0.1:1/x.git?private_token=QSECRET", "QSECRET"),
            ("https://h/x.git?X-Amz-Signature=QSECRET", "QSECRET"),
            ("ssh://h/x.git?key=QSECRET", "QSECRET"),
            ("https://h/x.git#QSECRET", "QSECRET"),
            ("https::https://SECRET1234@127.0.0.1:1/x.git", "SECRET1234"),
            ("git+ssh::ssh://u:pw5ecret@h/x.git", "pw5ecret"),
            ("https::https://h/x.git?t=QSECRET", "QSECRET"),
        ] {
            let p = url_problem(bad).unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(!p.contains(secret), "{p}");
            assert!(
                p.contains("credential helper") || p.contains("::<address>' form"),
                "{p}"
            );
            assert!(!redact_url(bad).contains(secret), "{}", redact_url(bad));
            let msg = format!("fatal: unable to access '{bad}/': refused");
            assert!(!redact(&msg, bad).contains(secret), "{bad}");
        }
        for good in [
            "ssh://git@h/team/x.git",
            "git@h:team/x.git",
            "git://h/x.git",
            "https://h:8443/x.git",
            "/srv/x.git",
            "file:///srv/x?y.git",
        ] {
            assert_eq!(url_problem(good), None, "{good}");
            assert_eq!(redact_url(good), good);
        }
        assert_eq!(
            redact_url("https://tok@h/x.git?a=b#c"),
            "https://***@h/x.git?***#***"
        );
        assert_eq!(redact_url("ssh://git:pw@h/x"), "ssh://git:***@h/x");
        // git's `<transport>::<address>`: refused whatever the address,
        // and the address's credential redacted (an older push.json entry).
        assert_eq!(
            redact_url("https::https://SECRET1234@h/x.git"),
            "https::https://***@h/x.git"
        );
        for helper in [
            "ext::sh -c touch% /tmp/x",
            "fd::3",
            "https::https://h/x.git",
        ] {
            let p = url_problem(helper).unwrap_or_else(|| panic!("{helper} accepted"));
            assert!(p.contains("::<address>' form"), "{p}");
        }
        // A '::' that is no transport name (an IPv6 host, a path) is kept.
        for good in ["ssh://[::1]/x.git", "/srv/a::b.git", "git://[::1]:9418/x"] {
            assert_eq!(url_problem(good), None, "{good}");
        }
        // A short secret is replaced where the URL is, not in other words.
        assert_eq!(
            redact(
                "cannot push to https://a@h/x.git: a failure",
                "https://a@h/x.git"
            ),
            "cannot push to https://***@h/x.git: a failure"
        );
    }

    #[test]
    fn machine_names_are_bounded() {
        assert!(machine_problem(&"m".repeat(MACHINE_MAX)).is_none());
        let p = machine_problem(&"m".repeat(300)).expect("300 bytes");
        assert!(p.contains("300 bytes") && p.contains("64"), "{p}");
        assert!(machine_problem(" ").is_some());
    }

    #[test]
    fn relative_paths_are_told_apart() {
        for rel in ["rel.git", "./rel.git", "../x/r.git", "sub/r.git"] {
            assert!(is_relative_path(rel), "{rel}");
        }
        for abs in [
            "/srv/r.git",
            "file:///r.git",
            "git://h/r",
            "git@h:r.git",
            "h:r",
        ] {
            assert!(!is_relative_path(abs), "{abs}");
        }
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
