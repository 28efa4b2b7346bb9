//! `opfs show N:PATH`: the raw bytes; with `--json` one object
//! (`docs/export.md`).

use opfs::control::client::commit_through_daemon;
use std::io::Write;

use opfs::history::{self, Opened, Shown};
use opfs::paths;

use crate::cli::args::ShowArgs;
use crate::cli::error::CommandError;
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &ShowArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let project = ctx.project()?;
    project.commit_pending()?;
    let spec = &a.spec;
    let (n, path) = spec
        .split_once(':')
        .ok_or_else(|| CommandError::usage(format!("{spec:?} is not N:PATH")))?;
    let turn = match n.parse::<u64>() {
        Ok(t) if t >= 1 => t,
        _ => {
            return Err(CommandError::usage(format!(
                "{n:?} is not a turn number (turns start at 1)"
            )))
        }
    };
    let path = history::parse_path(path)?;
    let st = project.state().clone();
    let opened = Opened::open(
        project.state(),
        Box::new(move || commit_through_daemon(&st)),
    )?;
    let shown = history::show_entry(&opened.sources(), turn, &path)?;
    if !ctx.format.is_json() {
        let bytes = match &shown {
            Shown::File { bytes, .. } => bytes,
            Shown::Symlink { target } => target,
        };
        out.write_all(bytes)?;
        return Ok(());
    }
    let mut v = serde_json::json!({ "turn": turn, "path": paths::display(&path) });
    match &shown {
        Shown::File { bytes, perm } => {
            v["kind"] = "file".into();
            v["perm"] = format!("{perm:04o}").into();
            v["size"] = bytes.len().into();
            v["content_base64"] = base64(bytes).into();
        }
        Shown::Symlink { target } => {
            v["kind"] = "symlink".into();
            v["target"] = paths::display(target).into();
            v["target_base64"] = base64(target).into();
        }
    }
    writeln!(out, "{v}")?;
    Ok(())
}

/// Standard base64 (RFC 4648, with `=` padding).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }
}
