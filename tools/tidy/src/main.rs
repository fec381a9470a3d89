//! `tessera-tidy [ROOT]`: prints every breach of the workspace's shape rules and exits 1 if
//! there is any (see the library's documentation for the rules). `tessera-tidy --largest N
//! [ROOT]` prints the N longest production files and functions instead.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|arg| arg == "--largest") {
        let Some(count) = args.get(1).and_then(|count| count.parse().ok()) else {
            eprintln!("tidy: --largest takes a count");
            return ExitCode::FAILURE;
        };
        let root = args
            .get(2)
            .map_or_else(|| PathBuf::from("."), PathBuf::from);
        return match tessera_tidy::largest(&root, count) {
            Ok((files, functions)) => {
                for size in files.iter().chain(&functions) {
                    let name = size.function.as_deref().unwrap_or("(file)");
                    println!("{:>6}  {}  {name}", size.lines, size.file.display());
                }
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("tidy: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let root = args.pop().map_or_else(|| PathBuf::from("."), PathBuf::from);
    match tessera_tidy::check(&root) {
        Ok(violations) if violations.is_empty() => {
            println!("tidy: the workspace's shape holds");
            ExitCode::SUCCESS
        }
        Ok(violations) => {
            for violation in &violations {
                eprintln!("tidy: {violation}");
            }
            eprintln!("tidy: {} breach(es) of the shape rules", violations.len());
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("tidy: {error}");
            ExitCode::FAILURE
        }
    }
}
