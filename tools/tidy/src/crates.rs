//! The crate order: `docs/ARCHITECTURE.md` §1 holds a table of every workspace crate with its
//! layer and its Tessera dependencies. The manifests must agree with the table, and every
//! dependency (normal or build) must sit on a lower layer. Dev-dependencies may point
//! anywhere: an integration test may start servers from crates above it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::{read, relative, TidyError, Violation};

/// Where the table lives, relative to the workspace root.
pub const ORDER_DOC: &str = "docs/ARCHITECTURE.md";
/// The header of the order table (its first three columns).
const ORDER_HEADER: &str = "| layer | crate | depends on |";

/// One workspace crate as its manifest describes it.
#[derive(Debug)]
pub struct Crate {
    /// The package name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Its `[dependencies]` and `[build-dependencies]` (all targets) that are workspace crates.
    pub depends_on: BTreeSet<String>,
}

/// The workspace's crates.
#[derive(Debug)]
pub struct Workspace {
    /// Every member, in the root manifest's order.
    pub crates: Vec<Crate>,
}

impl Workspace {
    /// Reads the root manifest and every member's.
    pub fn load(root: &Path) -> Result<Workspace, TidyError> {
        let manifest = root.join("Cargo.toml");
        let table = manifest_table(&manifest)?;
        let members = table
            .get("workspace")
            .and_then(|workspace| workspace.get("members"))
            .and_then(toml::Value::as_array)
            .ok_or_else(|| TidyError(format!("{}: no [workspace] members", manifest.display())))?;
        let mut crates = Vec::new();
        for member in members.iter().filter_map(toml::Value::as_str) {
            let dir = root.join(member);
            let manifest = dir.join("Cargo.toml");
            let table = manifest_table(&manifest)?;
            let name = table
                .get("package")
                .and_then(|package| package.get("name"))
                .and_then(toml::Value::as_str)
                .ok_or_else(|| TidyError(format!("{}: no package name", manifest.display())))?
                .to_owned();
            crates.push(Crate {
                name,
                dir,
                depends_on: dependency_names(&table),
            });
        }
        let names: BTreeSet<String> = crates.iter().map(|krate| krate.name.clone()).collect();
        for krate in &mut crates {
            krate.depends_on.retain(|name| names.contains(name));
        }
        Ok(Workspace { crates })
    }

    /// Checks the manifests against the order table of [`ORDER_DOC`].
    pub fn check_order(&self, root: &Path) -> Result<Vec<Violation>, TidyError> {
        let doc = root.join(ORDER_DOC);
        let rows = order_table(&read(&doc)?);
        let file = relative(root, &doc);
        let mut violations = Vec::new();
        let mut breach = |file: &Path, message: String| {
            violations.push(Violation {
                file: file.to_path_buf(),
                message,
            });
        };
        if rows.is_empty() {
            breach(
                &file,
                format!("no crate order table (a table headed `{ORDER_HEADER}`)"),
            );
            return Ok(violations);
        }
        for krate in &self.crates {
            let manifest = relative(root, &krate.dir.join("Cargo.toml"));
            let Some(row) = rows.get(&krate.name) else {
                breach(
                    &file,
                    format!("crate {} is missing from the order table", krate.name),
                );
                continue;
            };
            if row.depends_on != krate.depends_on {
                breach(
                    &file,
                    format!(
                        "the order table says {} depends on {{{}}}, its Cargo.toml says {{{}}}",
                        krate.name,
                        join(&row.depends_on),
                        join(&krate.depends_on)
                    ),
                );
            }
            for dependency in &krate.depends_on {
                match rows.get(dependency) {
                    Some(lower) if lower.layer < row.layer => {}
                    Some(lower) => breach(
                        &manifest,
                        format!(
                            "{} (layer {}) depends on {dependency} (layer {}), which is not below it",
                            krate.name, row.layer, lower.layer
                        ),
                    ),
                    None => {}
                }
            }
        }
        for name in rows.keys() {
            if !self.crates.iter().any(|krate| &krate.name == name) {
                breach(
                    &file,
                    format!("the order table names {name}, which is no workspace member"),
                );
            }
        }
        Ok(violations)
    }
}

/// One row of the order table.
#[derive(Debug, PartialEq, Eq)]
pub struct OrderRow {
    /// Lower layers come first; a crate uses only crates of lower layers.
    pub layer: u32,
    /// The Tessera crates it depends on.
    pub depends_on: BTreeSet<String>,
}

/// The rows of the first table headed [`ORDER_HEADER`] in `markdown`, by crate name: `| 2 |
/// \`tessera-net\` | \`tessera-proto\`, \`tessera-auth\` | ... |`, with `—` for none.
pub fn order_table(markdown: &str) -> BTreeMap<String, OrderRow> {
    let mut rows = BTreeMap::new();
    let mut lines = markdown
        .lines()
        .skip_while(|line| !line.starts_with(ORDER_HEADER))
        .skip(2);
    while let Some(line) = lines.next().filter(|line| line.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(layer), Some(name), Some(depends)) = (cells.get(1), cells.get(2), cells.get(3))
        else {
            continue;
        };
        let Ok(layer) = layer.parse() else { continue };
        let depends_on = depends
            .split(',')
            .map(|name| name.trim().trim_matches('`'))
            .filter(|name| !name.is_empty() && *name != "—")
            .map(str::to_owned)
            .collect();
        rows.insert(
            name.trim_matches('`').to_owned(),
            OrderRow { layer, depends_on },
        );
    }
    rows
}

fn join(names: &BTreeSet<String>) -> String {
    names
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

fn manifest_table(path: &Path) -> Result<toml::Table, TidyError> {
    read(path)?
        .parse()
        .map_err(|error| TidyError(format!("{}: not TOML: {error}", path.display())))
}

/// The names under `[dependencies]` and `[build-dependencies]`, including
/// `[target.'cfg(..)'.dependencies]`; a `package = ".."` rename counts by the package.
fn dependency_names(manifest: &toml::Table) -> BTreeSet<String> {
    let mut tables: Vec<&toml::Table> = Vec::new();
    for key in ["dependencies", "build-dependencies"] {
        tables.extend(manifest.get(key).and_then(toml::Value::as_table));
        let targets = manifest.get("target").and_then(toml::Value::as_table);
        for target in targets.into_iter().flat_map(toml::Table::values) {
            tables.extend(target.get(key).and_then(toml::Value::as_table));
        }
    }
    tables
        .into_iter()
        .flat_map(|table| table.iter())
        .map(|(name, spec)| {
            spec.get("package")
                .and_then(toml::Value::as_str)
                .unwrap_or(name)
                .to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_layers_and_dependencies() {
        let doc = "intro\n| layer | crate | depends on | owns |\n| --- | --- | --- | --- |\n\
                   | 0 | `a` | — | x |\n| 1 | `b` | `a` | y |\n| 2 | `c` | `a`, `b` | z |\n\nafter\n";
        let rows = order_table(doc);
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows["a"],
            OrderRow {
                layer: 0,
                depends_on: BTreeSet::new()
            }
        );
        assert_eq!(rows["c"].layer, 2);
        assert_eq!(rows["c"].depends_on, ["a", "b"].map(String::from).into());
    }

    #[test]
    fn an_upward_or_undeclared_dependency_is_a_breach() {
        let root = crate::tempdir("order");
        std::fs::create_dir_all(root.join("docs")).unwrap();
        for (name, deps) in [("a", ""), ("b", "a = { path = \"../a\" }\n")] {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("Cargo.toml"),
                format!("[package]\nname = \"{name}\"\n[dependencies]\n{deps}"),
            )
            .unwrap();
        }
        std::fs::write(
            root.join("Cargo.toml"),
            "[workspace]\nmembers = [\"a\", \"b\"]\n",
        )
        .unwrap();
        let workspace = Workspace::load(&root).unwrap();
        let table = |rows: &str| {
            std::fs::write(
                root.join(ORDER_DOC),
                format!("| layer | crate | depends on |\n| --- | --- | --- |\n{rows}"),
            )
            .unwrap();
            workspace.check_order(&root).unwrap()
        };
        assert!(table("| 0 | `a` | — |\n| 1 | `b` | `a` |\n").is_empty());
        let upward = table("| 1 | `a` | — |\n| 0 | `b` | `a` |\n");
        assert_eq!(upward.len(), 1, "{upward:?}");
        assert!(upward[0].message.contains("not below it"));
        let undeclared = table("| 0 | `a` | — |\n| 1 | `b` | — |\n");
        assert_eq!(undeclared.len(), 1, "{undeclared:?}");
        let missing = table("| 0 | `a` | — |\n");
        assert!(missing[0].message.contains("missing from the order table"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
