//! The bytes behind the pointer files of the turns a push sends, uploaded
//! to the bucket before the refs go out, so a remote never holds a
//! pointer whose bytes are missing.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;

use crate::history::{self, Opened};
use crate::store::StateDir;

use super::bucket::{Bucket, BucketConfig, Upload};
use super::{parse_pointer, GitEnv, PushError, Target};

/// Git's largest pointer file: content above this is never a pointer.
const POINTER_MAX: u64 = 200;

/// Uploads the bytes of every pointer file that the commits of `refs`
/// (`(remote ref, commit)`: `.../turns/N` and `.../baseline`) added or
/// changed; returns the objects written and their bytes (objects already
/// in the bucket are not counted, nor written).
///
/// Errors: [`PushError::Bucket`], [`PushError::Unavailable`],
/// [`PushError::Git`].
pub(super) fn upload(
    state: &StateDir,
    git_dir: &Path,
    target: &Target,
    git: &GitEnv,
    cfg: &BucketConfig,
    refs: &[(String, String)],
) -> Result<(usize, u64), PushError> {
    // hash -> (path, turn whose start holds it)
    let mut wanted: BTreeMap<String, (Vec<u8>, u64)> = BTreeMap::new();
    for (r, commit) in refs {
        let start = if let Some(n) = r
            .rsplit_once("/turns/")
            .and_then(|(_, n)| n.parse::<u64>().ok())
        {
            n + 1
        } else if r.ends_with("/baseline") {
            let mut cmd = git.command(Some(git_dir));
            cmd.args([
                "log",
                "-1",
                "--format=%(trailers:key=opfs-baseline,valueonly)",
                commit,
            ]);
            let out = super::run_local(cmd, git_dir, target, "reading the baseline")?;
            match String::from_utf8_lossy(&out).trim().parse() {
                Ok(n) => n,
                Err(_) => continue,
            }
        } else {
            continue;
        };
        let mut cmd = git.command(Some(git_dir));
        cmd.args([
            "diff-tree",
            "-r",
            "-z",
            "--root",
            "--no-commit-id",
            "--no-renames",
            commit,
        ]);
        let out = super::run_local(cmd, git_dir, target, "listing a turn's changes")?;
        let mut fields = out.split(|b| *b == 0);
        let mut changed: Vec<(String, Vec<u8>)> = Vec::new();
        while let (Some(meta), Some(path)) = (fields.next(), fields.next()) {
            let meta = String::from_utf8_lossy(meta);
            let f: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
            if f.len() < 5 || !(f[1] == "100644" || f[1] == "100755") || f[4] == "D" {
                continue;
            }
            changed.push((f[3].to_string(), path.to_vec()));
        }
        let ids: Vec<&str> = changed.iter().map(|(id, _)| id.as_str()).collect();
        let sizes =
            batch(git_dir, git, "--batch-check", &ids).map_err(|e| io_git(e, git_dir, target))?;
        let small: Vec<(String, Vec<u8>)> = changed
            .into_iter()
            .zip(
                String::from_utf8_lossy(&sizes)
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            )
            .filter(|(_, line)| {
                line.rsplit(' ')
                    .next()
                    .and_then(|s| s.parse::<u64>().ok())
                    .is_some_and(|n| n <= POINTER_MAX)
            })
            .map(|(c, _)| c)
            .collect();
        let ids: Vec<&str> = small.iter().map(|(id, _)| id.as_str()).collect();
        let contents =
            batch(git_dir, git, "--batch", &ids).map_err(|e| io_git(e, git_dir, target))?;
        let mut rest = &contents[..];
        for (_, path) in small {
            let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
                break;
            };
            let header = String::from_utf8_lossy(&rest[..nl]).to_string();
            let size: usize = header
                .rsplit(' ')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let body = &rest[nl + 1..(nl + 1 + size).min(rest.len())];
            if let Some((hash, _)) = parse_pointer(body) {
                wanted.entry(hash).or_insert((path, start));
            }
            rest = &rest[(nl + 2 + size).min(rest.len())..];
        }
    }
    if wanted.is_empty() {
        return Ok((0, 0));
    }
    let bucket = Bucket::open(cfg).map_err(|source| PushError::Bucket {
        remote: target.url.clone(),
        source: Box::new(source),
    })?;
    let opened = Opened::open(state, Box::new(|| {})).map_err(|e| PushError::Unavailable {
        remote: target.url.clone(),
        path: String::new(),
        turn: 0,
        hash: String::new(),
        cause: e.to_string(),
    })?;
    let src = opened.sources();
    let (mut n, mut bytes) = (0, 0);
    for (hash, (path, start)) in wanted {
        let unavailable = |cause: String| PushError::Unavailable {
            remote: target.url.clone(),
            path: crate::paths::display(&path),
            turn: start - 1,
            hash: hash.clone(),
            cause,
        };
        let raw = blake3::Hash::from_hex(&hash).map_err(|e| unavailable(e.to_string()))?;
        let content = match src.blob(raw.as_bytes()) {
            Ok(b) => b,
            Err(_) => {
                let b =
                    history::show(&src, start, &path).map_err(|e| unavailable(e.to_string()))?;
                if blake3::hash(&b) != raw {
                    return Err(unavailable(
                        "the version found has other bytes (it was changed since and its earlier bytes were not kept)".into(),
                    ));
                }
                b
            }
        };
        let len = content.len() as u64;
        match bucket
            .put(&hash, content)
            .map_err(|source| PushError::Bucket {
                remote: target.url.clone(),
                source: Box::new(source),
            })? {
            Upload::Created => {
                n += 1;
                bytes += len;
            }
            Upload::Existed => {}
        }
    }
    Ok((n, bytes))
}

fn io_git(e: std::io::Error, git_dir: &Path, target: &Target) -> PushError {
    PushError::Git {
        remote: target.url.clone(),
        what: "reading objects".into(),
        git_dir: git_dir.to_path_buf(),
        cause: e.to_string(),
    }
}

/// `git cat-file MODE` (`--batch-check` or `--batch`) of `ids`: its whole
/// output. The ids are written by a thread of their own, so a large batch
/// cannot deadlock on the pipes.
fn batch(git_dir: &Path, git: &GitEnv, mode: &str, ids: &[&str]) -> std::io::Result<Vec<u8>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmd = git.command(Some(git_dir));
    cmd.args(["cat-file", mode])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn()?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?;
    let input: String = ids.iter().map(|id| format!("{id}\n")).collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?
        .read_to_end(&mut out)?;
    let _ = writer.join();
    child.wait()?;
    Ok(out)
}
