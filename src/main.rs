//! The `opfs` command line: parses arguments and prints; the work is in the
//! library. Like the library, it has no `unsafe` (see the crate docs of
//! `opfs`).
#![forbid(unsafe_code)]

mod cli;

fn main() {
    std::process::exit(cli::main());
}
