//! The `opfs` command line: parses arguments and prints; the work is in the
//! library.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
