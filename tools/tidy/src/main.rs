//! `tessera-tidy [ROOT]`: prints every breach of the workspace's shape rules and exits 1 if
//! there is any (see the library's documentation for the rules).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let root = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
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
