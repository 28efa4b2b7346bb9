//! Guards of the test suite itself (in the spirit of jj's
//! `test_no_forgotten_test_files`): every `tests/*.rs` file is a test target
//! and builds on the shared harness `tests/common`, and the helpers that are
//! shared stay shared (One manifest, one mount-table reader, one
//! pinned environment).
//!
//! This file is the one exception to its own rules: it reads the others as
//! text and needs none of the harness.

use std::fs;
use std::path::{Path, PathBuf};

/// This file's name, exempt from the checks below.
const SELF: &str = "suite.rs";

/// Test files that read the sources as text and mount nothing, so they
/// need no harness: this one and the layering check.
const SOURCE_ONLY: &[&str] = &[SELF, "layering.rs"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `*.rs` files directly in `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no test files in {}", dir.display());
    out
}

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The `[[test]]` targets a manifest names explicitly, by `path` (or, with
/// no path, `tests/NAME.rs`), and whether it turned `autotests` off.
fn declared_tests(cargo_toml: &Path) -> (bool, Vec<String>) {
    let table: toml::Table = read(cargo_toml)
        .parse()
        .unwrap_or_else(|e| panic!("parse {}: {e}", cargo_toml.display()));
    let package = table.get("package").and_then(|p| p.as_table());
    let autotests = package
        .and_then(|p| p.get("autotests"))
        .and_then(|v| v.as_bool())
        .unwrap_or(true);
    let listed = table
        .get("test")
        .and_then(|t| t.as_array())
        .map(|targets| {
            targets
                .iter()
                .filter_map(|t| {
                    let t = t.as_table()?;
                    match t.get("path").and_then(|p| p.as_str()) {
                        Some(path) => Some(path.to_owned()),
                        None => Some(format!("tests/{}.rs", t.get("name")?.as_str()?)),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    (autotests, listed)
}

/// Every `tests/*.rs` (and `fs/tests/*.rs`) file is built and run by
/// `cargo test`: either cargo discovers it (`autotests` on) or a `[[test]]`
/// names it. A file that is neither would silently never run.
#[test]
fn no_test_file_is_forgotten() {
    for package in [root().to_path_buf(), root().join("fs")] {
        let manifest = package.join("Cargo.toml");
        let (autotests, listed) = declared_tests(&manifest);
        if autotests {
            continue;
        }
        for file in rust_files(&package.join("tests")) {
            let rel = format!("tests/{}", name(&file));
            assert!(
                listed.contains(&rel),
                "{rel} is not a test target of {}: autotests is off and no [[test]] names it",
                manifest.display()
            );
        }
    }
}

/// Every integration test of `opfs` declares `mod common;` and so builds on
/// the shared fixture (pinned environment, manifest, mount table) instead of
/// a copy of its own.
#[test]
fn every_test_file_uses_the_shared_harness() {
    let missing: Vec<String> = rust_files(&root().join("tests"))
        .iter()
        .filter(|p| !SOURCE_ONLY.contains(&name(p).as_str()))
        .filter(|p| !read(p).lines().any(|l| l.trim() == "mod common;"))
        .map(|p| name(p))
        .collect();
    assert!(
        missing.is_empty(),
        "these test files do not use tests/common (add `mod common;` and use its \
         Fixture, TestEnv and manifest instead of copies): {missing:?}"
    );
}

/// The shared helpers have no copies: the mount table is read only by
/// `opfs-testutil` (`fs/testutil`), and only `tests/common` pins the
/// environment of the `opfs` commands and names the binary under test.
#[test]
fn shared_helpers_are_not_copied_into_test_files() {
    // Spelled in pieces so that this file does not match itself.
    let mountinfo = ["/proc/self/", "mountinfo"].concat();
    let pins = [
        [".env(\"", "OPFS_HOME\""].concat(),
        [".env(\"", "HOME\""].concat(),
        [".env(\"", "OPFS_CONFIG\""].concat(),
        [".env(\"", "XDG_"].concat(),
        ["CARGO_BIN_", "EXE_opfs"].concat(),
    ];
    let mut found = Vec::new();
    let files = rust_files(&root().join("tests"))
        .into_iter()
        .chain(rust_files(&root().join("fs/tests")));
    let this = root().join("tests").join(SELF);
    for file in files.filter(|p| *p != this) {
        let text = read(&file);
        let shown = file.strip_prefix(root()).unwrap_or(&file).display();
        if text.contains(&mountinfo) {
            found.push(format!("{shown} reads {mountinfo} (use opfs_testutil)"));
        }
        for pin in &pins {
            if text.contains(pin.as_str()) {
                found.push(format!("{shown} has {pin} (use common::TestEnv / Fixture)"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "copies of shared test helpers:\n{}",
        found.join("\n")
    );
}
