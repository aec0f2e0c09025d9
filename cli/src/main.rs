//! The `idem` command.

fn main() {
    eprintln!("idem: the command line is not built yet");
    std::process::exit(1);
}
