//! The `opfs` command line: parses arguments and prints; the work is in the
//! library.

mod cli;
mod history_cmd;

fn main() {
    std::process::exit(cli::main());
}
