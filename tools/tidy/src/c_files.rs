//! The MPI-IO library's C files (`mpiio/src/*.c`): a file reaches another when it calls a
//! function the other defines (not `static`); a circle among them is a breach, as between
//! Rust modules. C files have the same file budget as Rust ones.
//!
//! A small scanner, not a C parser: comments, strings and character constants are blanked,
//! preprocessor lines dropped, and at brace depth 0 an identifier followed by a parenthesised
//! list and then `{` is a definition.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::budgets::{OverBudget, FILE_LINES_MAX};
use crate::graph::{self, Graph};
use crate::{read, relative, TidyError, Violation};

/// What one C file defines and calls.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CFile {
    /// Functions defined without `static`.
    pub exported: BTreeSet<String>,
    /// Functions defined `static`.
    pub private: BTreeSet<String>,
    /// Names called inside function bodies.
    pub calls: BTreeSet<String>,
}

/// Circles among the `.c` files of `dir`.
pub fn circles(root: &Path, dir: &Path) -> Result<Vec<Violation>, TidyError> {
    let files = scan_dir(dir)?;
    let mut definer: BTreeMap<&str, &Path> = BTreeMap::new();
    for (path, file) in &files {
        for name in &file.exported {
            definer.insert(name, path);
        }
    }
    let mut graph = Graph::new();
    for (path, file) in &files {
        let edges = graph
            .entry(relative(root, path).display().to_string())
            .or_default();
        for call in &file.calls {
            if file.exported.contains(call) || file.private.contains(call) {
                continue;
            }
            if let Some(other) = definer.get(call.as_str()) {
                edges.insert(relative(root, other).display().to_string());
            }
        }
    }
    Ok(graph::circles(&graph)
        .into_iter()
        .map(|circle| Violation {
            file: PathBuf::from(&circle[0]),
            message: format!(
                "C file circle (each calls functions of the next): {}",
                circle.join(" <-> ")
            ),
        })
        .collect())
}

/// The `.c` and `.h` files of `dir` over the file budget.
pub fn budgets(root: &Path, dir: &Path) -> Result<Vec<OverBudget>, TidyError> {
    let mut over = Vec::new();
    for path in c_paths(dir, &["c", "h"])? {
        let lines = read(&path)?.lines().count();
        if lines > FILE_LINES_MAX {
            over.push(OverBudget {
                file: relative(root, &path),
                function: None,
                lines,
                budget: FILE_LINES_MAX,
            });
        }
    }
    Ok(over)
}

fn c_paths(dir: &Path, extensions: &[&str]) -> Result<Vec<PathBuf>, TidyError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|error| TidyError(format!("{}: cannot list: {error}", dir.display())))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| extensions.iter().any(|e| ext == *e))
        })
        .collect();
    paths.sort();
    Ok(paths)
}

fn scan_dir(dir: &Path) -> Result<Vec<(PathBuf, CFile)>, TidyError> {
    c_paths(dir, &["c"])?
        .into_iter()
        .map(|path| Ok((path.clone(), scan(&read(&path)?))))
        .collect()
}

/// C keywords that a `(` may follow.
const KEYWORDS: [&str; 8] = [
    "if", "while", "for", "switch", "return", "sizeof", "_Alignof", "defined",
];

/// What `text` defines and calls.
pub fn scan(text: &str) -> CFile {
    let code = blank(text);
    let tokens = tokenize(&code);
    let mut file = CFile::default();
    let mut depth = 0usize;
    // Whether `static` appeared since the last `;` or `}` at depth 0.
    let mut is_static = false;
    for (index, token) in tokens.iter().enumerate() {
        match token.as_str() {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    is_static = false;
                }
            }
            ";" if depth == 0 => is_static = false,
            "static" if depth == 0 => is_static = true,
            _ => {}
        }
        let is_name = token.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        if !is_name || tokens.get(index + 1).is_none_or(|next| next != "(") {
            continue;
        }
        if depth > 0 {
            if !KEYWORDS.contains(&token.as_str()) {
                file.calls.insert(token.clone());
            }
        } else if closes_into_body(&tokens, index + 1) {
            if is_static {
                &mut file.private
            } else {
                &mut file.exported
            }
            .insert(token.clone());
        }
    }
    file
}

/// Whether the parenthesised list opening at `open` is followed by `{` (a definition).
fn closes_into_body(tokens: &[String], open: usize) -> bool {
    let mut depth = 0usize;
    for (index, token) in tokens.iter().enumerate().skip(open) {
        match token.as_str() {
            "(" => depth += 1,
            ")" => {
                depth -= 1;
                if depth == 0 {
                    return tokens.get(index + 1).is_some_and(|next| next == "{");
                }
            }
            _ => {}
        }
    }
    false
}

/// `text` with comments, string and character literals blanked and preprocessor lines
/// dropped.
fn blank(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut line_start = true;
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for next in chars.by_ref() {
                    if next == '\n' {
                        out.push('\n');
                        break;
                    }
                }
                line_start = true;
                continue;
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for next in chars.by_ref() {
                    if last == '*' && next == '/' {
                        break;
                    }
                    last = next;
                }
                out.push(' ');
            }
            '"' | '\'' => {
                let mut escaped = false;
                for next in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if next == '\\' {
                        escaped = true;
                    } else if next == c {
                        break;
                    }
                }
                out.push_str(" 0 ");
            }
            '#' if line_start => {
                // A directive, with its continuation lines.
                let mut last = ' ';
                for next in chars.by_ref() {
                    if next == '\n' && last != '\\' {
                        break;
                    }
                    last = next;
                }
                out.push('\n');
                line_start = true;
                continue;
            }
            _ => out.push(c),
        }
        if c == '\n' {
            line_start = true;
        } else if !c.is_whitespace() {
            line_start = false;
        }
    }
    out
}

/// Identifiers and single punctuation characters.
fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in code.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if !c.is_whitespace() {
            tokens.push(c.to_string());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_calls_and_statics_are_told_apart() {
        let file = scan(
            "#include \"shim.h\"\n#define X(a) call_in_macro(a)\n/* f( */\n\
             static int helper(int a) { return a; }\n\
             int tsr_open(const char *path, int flags)\n{\n  if (flags) { return helper(tsr_other(\"g(\")); }\n  return 0;\n}\n\
             int declared_only(void);\n",
        );
        assert_eq!(file.exported, ["tsr_open".to_owned()].into());
        assert_eq!(file.private, ["helper".to_owned()].into());
        assert_eq!(
            file.calls,
            ["helper".to_owned(), "tsr_other".to_owned()].into()
        );
    }

    #[test]
    fn two_files_calling_each_other_are_a_circle() {
        let dir = crate::tempdir("cfiles");
        std::fs::write(dir.join("a.c"), "int a(void) { return b(); }\n").unwrap();
        std::fs::write(
            dir.join("b.c"),
            "int b(void) { return 0; }\nint b2(void) { return a(); }\n",
        )
        .unwrap();
        std::fs::write(dir.join("c.c"), "int c(void) { return a(); }\n").unwrap();
        let found = circles(&dir, &dir).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].message.ends_with("a.c <-> b.c"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
