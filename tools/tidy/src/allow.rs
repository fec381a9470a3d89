//! The allow-list, `tools/tidy/allow.toml`: what may stay over its budget (`[[allow]]`), and
//! circles that may stay (`[[circle]]`, the files of one circle), each with a reason. An
//! entry that matches nothing is a breach too, so the list can only shrink.

use std::path::{Path, PathBuf};

use crate::budgets::OverBudget;
use crate::{read, TidyError, Violation};

/// Where the list lives, relative to the workspace root.
pub const ALLOW_FILE: &str = "tools/tidy/allow.toml";

/// One entry: a file, or a function in it, and why it may stay over budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// The file, relative to the workspace root.
    pub file: PathBuf,
    /// The function as the check names it (`Type::method`), or `None` for the file.
    pub function: Option<String>,
    /// Why it stays.
    pub reason: String,
}

/// A circle that may stay: its files, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedCircle {
    /// The files of the circle, sorted, relative to the workspace root.
    pub files: Vec<String>,
    /// Why it stays.
    pub reason: String,
}

/// The parsed list.
#[derive(Debug, Default)]
pub struct AllowList {
    /// Its budget entries, in file order.
    pub entries: Vec<Allowed>,
    /// Its circles, in file order.
    pub circles: Vec<AllowedCircle>,
}

impl AllowList {
    /// Reads the list; a missing file is an empty list.
    pub fn load(path: &Path) -> Result<AllowList, TidyError> {
        if !path.exists() {
            return Ok(AllowList::default());
        }
        AllowList::parse(&read(path)?)
            .map_err(|message| TidyError(format!("{}: {message}", path.display())))
    }

    /// Parses `[[allow]]` tables with `file`, optional `function` and `reason`.
    pub fn parse(text: &str) -> Result<AllowList, String> {
        let table: toml::Table = text.parse().map_err(|error| format!("not TOML: {error}"))?;
        let mut entries = Vec::new();
        let items = table
            .get("allow")
            .and_then(toml::Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (index, item) in items.iter().enumerate() {
            let field = |name: &str| {
                item.get(name)
                    .and_then(toml::Value::as_str)
                    .map(str::to_owned)
            };
            let file = field("file").ok_or(format!("entry {} has no `file`", index + 1))?;
            entries.push(Allowed {
                file: PathBuf::from(file),
                function: field("function"),
                reason: field("reason").unwrap_or_default(),
            });
        }
        let mut circles = Vec::new();
        let items = table
            .get("circle")
            .and_then(toml::Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (index, item) in items.iter().enumerate() {
            let mut files: Vec<String> = item
                .get("files")
                .and_then(toml::Value::as_array)
                .ok_or(format!("circle {} has no `files`", index + 1))?
                .iter()
                .filter_map(toml::Value::as_str)
                .map(str::to_owned)
                .collect();
            files.sort();
            let reason = item
                .get("reason")
                .and_then(toml::Value::as_str)
                .unwrap_or_default()
                .to_owned();
            circles.push(AllowedCircle { files, reason });
        }
        Ok(AllowList { entries, circles })
    }

    /// `circles` (each message ending in its files joined by ` <-> `) less those listed;
    /// listed circles without a reason, or that no longer exist, are breaches.
    pub fn judge_circles(&self, circles: &[Violation]) -> Vec<Violation> {
        let joined = |allowed: &AllowedCircle| allowed.files.join(" <-> ");
        let mut violations: Vec<Violation> = circles
            .iter()
            .filter(|circle| {
                !self
                    .circles
                    .iter()
                    .any(|allowed| circle.message.ends_with(&format!(": {}", joined(allowed))))
            })
            .cloned()
            .collect();
        for allowed in &self.circles {
            let file = PathBuf::from(allowed.files.first().cloned().unwrap_or_default());
            if allowed.reason.trim().is_empty() {
                violations.push(Violation {
                    file: file.clone(),
                    message: format!(
                        "{ALLOW_FILE} lists the circle {} without a reason",
                        joined(allowed)
                    ),
                });
            }
            if !circles
                .iter()
                .any(|circle| circle.message.ends_with(&format!(": {}", joined(allowed))))
            {
                violations.push(Violation {
                    file,
                    message: format!(
                        "{ALLOW_FILE} lists the circle {}, which is gone: remove the entry",
                        joined(allowed)
                    ),
                });
            }
        }
        violations
    }

    /// The breaches: what is over budget and not listed, listed entries without a reason, and
    /// entries that match nothing over budget.
    pub fn judge(&self, over_budget: &[OverBudget]) -> Vec<Violation> {
        let mut violations = Vec::new();
        let listed = |over: &OverBudget| {
            self.entries
                .iter()
                .any(|entry| entry.file == over.file && entry.function == over.function)
        };
        for over in over_budget.iter().filter(|over| !listed(over)) {
            let what = over
                .function
                .as_ref()
                .map_or_else(|| "the file".to_owned(), |name| format!("fn {name}"));
            violations.push(Violation {
                file: over.file.clone(),
                message: format!(
                    "{what} is {} lines, over the budget of {}: split it, or list it in {ALLOW_FILE} with a reason",
                    over.lines, over.budget
                ),
            });
        }
        for entry in &self.entries {
            let what = entry
                .function
                .as_ref()
                .map_or_else(|| "the file".to_owned(), |name| format!("fn {name}"));
            if entry.reason.trim().is_empty() {
                violations.push(Violation {
                    file: entry.file.clone(),
                    message: format!("{ALLOW_FILE} lists {what} without a reason"),
                });
            }
            let used = over_budget
                .iter()
                .any(|over| over.file == entry.file && over.function == entry.function);
            if !used {
                violations.push(Violation {
                    file: entry.file.clone(),
                    message: format!("{ALLOW_FILE} lists {what}, which is within its budget now: remove the entry"),
                });
            }
        }
        violations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn over(file: &str, function: Option<&str>) -> OverBudget {
        OverBudget {
            file: file.into(),
            function: function.map(str::to_owned),
            lines: 200,
            budget: 120,
        }
    }

    #[test]
    fn listed_items_pass_and_unlisted_or_stale_ones_do_not() {
        let list = AllowList::parse(
            "[[allow]]\nfile = \"a.rs\"\nfunction = \"S::f\"\nreason = \"one match over many opcodes\"\n\
             [[allow]]\nfile = \"b.rs\"\nreason = \"\"\n",
        )
        .unwrap();
        let found = list.judge(&[
            over("a.rs", Some("S::f")),
            over("b.rs", None),
            over("c.rs", Some("g")),
        ]);
        let messages: Vec<&str> = found
            .iter()
            .map(|violation| violation.message.as_str())
            .collect();
        assert_eq!(found.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("fn g is 200 lines"));
        assert!(messages[1].contains("without a reason"));
        let circles = AllowList::parse(
            "[[circle]]\nfiles = [\"b.rs\", \"a.rs\"]\nreason = \"types own each other\"\n",
        )
        .unwrap();
        let found = |files: &str| Violation {
            file: "a.rs".into(),
            message: format!("module circle: {files}"),
        };
        assert!(circles.judge_circles(&[found("a.rs <-> b.rs")]).is_empty());
        let other = circles.judge_circles(&[found("a.rs <-> c.rs")]);
        assert_eq!(other.len(), 2, "{other:?}");
        assert!(other[1].message.contains("which is gone"));
        let stale = list.judge(&[over("b.rs", None)]);
        assert!(stale
            .iter()
            .any(|violation| violation.message.contains("within its budget now")));
        assert!(AllowList::parse("[[allow]]\nreason = \"x\"\n").is_err());
    }
}
