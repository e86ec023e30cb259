fn main() {
    eprintln!("rgrind: not yet implemented");
    std::process::exit(1);
}
