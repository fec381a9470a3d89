//! Build script: records the git commit the binary was built from (`TESSERA_GIT_COMMIT`, the
//! short hash, or "unknown" outside a git checkout) for the `meta` of every bench report.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    // A new commit moves HEAD (detached) or the branch HEAD names; a worktree keeps its HEAD
    // apart from the common refs, which `--git-path` resolves.
    // (A path that does not exist would rerun the script on every build, so only those that
    // do are named.)
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in &watched {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", name]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rustc-env=TESSERA_GIT_COMMIT={commit}");
}
