fn main() -> std::process::ExitCode {
    zarrfs::cli::main()
}
