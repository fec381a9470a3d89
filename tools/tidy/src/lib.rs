//! Tessera's shape check (`make tidy`, part of `make test`).
//!
//! Reads the workspace's sources and manifests, never builds them, and reports every breach of
//! the rules `docs/ARCHITECTURE.md` §1 states:
//! - the crate order: the table of §1 gives each crate a layer and its Tessera dependencies;
//!   the manifests must say the same, and a crate depends only on crates of lower layers
//!   ([`crates`]);
//! - no module circle inside a crate: two files that reach each other through `crate::` or
//!   `super::` paths, directly or round a longer loop ([`modules`]); the same between the
//!   MPI-IO library's C files ([`c_files`]);
//! - no `#[path]` that leaves its crate ([`modules`]);
//! - budgets: a production function over [`budgets::FUNCTION_LINES_MAX`] lines or a file over
//!   [`budgets::FILE_LINES_MAX`], unless `tools/tidy/allow.toml` lists it with a reason; an
//!   entry that no longer matches anything is itself a breach, so the list only shrinks
//!   ([`allow`]). A circle may be listed there too, with its reason.

pub mod allow;
pub mod budgets;
pub mod c_files;
pub mod crates;
pub mod graph;
pub mod modules;

use std::fmt;
use std::path::{Path, PathBuf};

/// One breach of a rule, with the file it is in (relative to the workspace root).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// The file, relative to the workspace root.
    pub file: PathBuf,
    /// What is wrong, in a sentence naming the function, module or crate.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message)
    }
}

/// Why the check could not run at all (an unreadable or unparsable file).
#[derive(Debug)]
pub struct TidyError(pub String);

impl fmt::Display for TidyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TidyError {}

/// Reads a file, naming it in the error.
pub fn read(path: &Path) -> Result<String, TidyError> {
    std::fs::read_to_string(path)
        .map_err(|error| TidyError(format!("{}: cannot read: {error}", path.display())))
}

/// Parses a Rust file, naming it in the error.
pub fn parse(path: &Path) -> Result<syn::File, TidyError> {
    let text = read(path)?;
    syn::parse_file(&text)
        .map_err(|error| TidyError(format!("{}: cannot parse: {error}", path.display())))
}

/// `path` relative to `root`, for messages.
pub fn relative(root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(root).unwrap_or(path).to_path_buf()
}

/// The `count` longest production files and functions of the workspace at `root`, longest
/// first (`tessera-tidy --largest N`: the figures a change to the shape reports).
pub fn largest(
    root: &Path,
    count: usize,
) -> Result<(Vec<budgets::OverBudget>, Vec<budgets::OverBudget>), TidyError> {
    let workspace = crates::Workspace::load(root)?;
    let mut all = Vec::new();
    for krate in &workspace.crates {
        all.extend(budgets::sizes(
            root,
            &modules::CrateTree::load(root, &krate.dir)?,
        ));
    }
    all.sort_by_key(|size| std::cmp::Reverse(size.lines));
    let (files, functions): (Vec<_>, Vec<_>) =
        all.into_iter().partition(|size| size.function.is_none());
    Ok((
        files.into_iter().take(count).collect(),
        functions.into_iter().take(count).collect(),
    ))
}

/// Runs every check over the workspace at `root`.
pub fn check(root: &Path) -> Result<Vec<Violation>, TidyError> {
    let workspace = crates::Workspace::load(root)?;
    let mut violations = workspace.check_order(root)?;
    let allow = allow::AllowList::load(&root.join("tools/tidy/allow.toml"))?;
    let mut over_budget = Vec::new();
    let mut circles = Vec::new();
    for krate in &workspace.crates {
        let tree = modules::CrateTree::load(root, &krate.dir)?;
        circles.extend(tree.circles(root));
        violations.extend(modules::foreign_paths(root, &krate.dir)?);
        over_budget.extend(budgets::measure(root, &tree));
    }
    let mpiio = root.join("mpiio/src");
    if mpiio.is_dir() {
        circles.extend(c_files::circles(root, &mpiio)?);
        over_budget.extend(c_files::budgets(root, &mpiio)?);
    }
    violations.extend(allow.judge(&over_budget));
    violations.extend(allow.judge_circles(&circles));
    violations.sort();
    Ok(violations)
}

/// A fresh directory for a test's small fake workspace.
#[cfg(test)]
pub(crate) fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-tidy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
