//! Function and file budgets of production code: a function over [`FUNCTION_LINES_MAX`]
//! lines or a file over [`FILE_LINES_MAX`] is a breach unless the allow-list names it. Tests
//! (`cfg(test)` modules and items, `tests/`) have no budget.

use std::path::PathBuf;

use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::modules::{is_test_only, item_attrs, CrateTree};
use crate::relative;

/// The longest production function, in lines from `fn` to its closing brace.
pub const FUNCTION_LINES_MAX: usize = 120;
/// The longest production file, in lines.
pub const FILE_LINES_MAX: usize = 1_200;

/// Something over its budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    /// The file, relative to the workspace root.
    pub file: PathBuf,
    /// The function (`Type::method` or `function`), or `None` for the file itself.
    pub function: Option<String>,
    /// Its length in lines.
    pub lines: usize,
    /// The budget it is over.
    pub budget: usize,
}

/// Every production file and function of `tree` over its budget.
pub fn measure(root: &std::path::Path, tree: &CrateTree) -> Vec<OverBudget> {
    sizes(root, tree)
        .into_iter()
        .filter(|size| size.lines > size.budget)
        .collect()
}

/// Every production file and function of `tree` with its length, over budget or not.
pub fn sizes(root: &std::path::Path, tree: &CrateTree) -> Vec<OverBudget> {
    let mut over = Vec::new();
    for file in tree.files() {
        let path = relative(root, &file.path);
        let lines = std::fs::read_to_string(&file.path).map_or(0, |text| text.lines().count());
        over.push(OverBudget {
            file: path.clone(),
            function: None,
            lines,
            budget: FILE_LINES_MAX,
        });
        let mut functions = Functions {
            owner: Vec::new(),
            found: Vec::new(),
        };
        functions.visit_file(&file.syntax);
        for (function, lines) in functions.found {
            over.push(OverBudget {
                file: path.clone(),
                function: Some(function),
                lines,
                budget: FUNCTION_LINES_MAX,
            });
        }
    }
    over
}

/// Lines from the start of `start` to the end of `end`.
fn span_lines(start: proc_macro2::Span, end: proc_macro2::Span) -> usize {
    end.end().line.saturating_sub(start.start().line) + 1
}

/// Every production function's name and length.
struct Functions {
    /// The enclosing `impl`/`trait` type and functions, for names.
    owner: Vec<String>,
    found: Vec<(String, usize)>,
}

impl Functions {
    fn record(&mut self, name: &syn::Ident, signature: &syn::Signature, block: &syn::Block) {
        let mut full = self.owner.clone();
        full.push(name.to_string());
        let lines = span_lines(signature.fn_token.span, block.brace_token.span.close());
        self.found.push((full.join("::"), lines));
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if item_attrs(item).is_some_and(is_test_only) {
            return;
        }
        match item {
            syn::Item::Impl(block) => {
                let owner = match &*block.self_ty {
                    syn::Type::Path(path) => path
                        .path
                        .segments
                        .last()
                        .map_or_else(|| "impl".to_owned(), |segment| segment.ident.to_string()),
                    other => other.span().start().line.to_string(),
                };
                self.owner.push(owner);
                syn::visit::visit_item_impl(self, block);
                self.owner.pop();
            }
            syn::Item::Trait(block) => {
                self.owner.push(block.ident.to_string());
                syn::visit::visit_item_trait(self, block);
                self.owner.pop();
            }
            syn::Item::Fn(function) => {
                self.record(&function.sig.ident, &function.sig, &function.block);
                self.owner.push(function.sig.ident.to_string());
                syn::visit::visit_item_fn(self, function);
                self.owner.pop();
            }
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item_fn(&mut self, function: &'ast syn::ImplItemFn) {
        if is_test_only(&function.attrs) {
            return;
        }
        self.record(&function.sig.ident, &function.sig, &function.block);
        syn::visit::visit_impl_item_fn(self, function);
    }

    fn visit_trait_item_fn(&mut self, function: &'ast syn::TraitItemFn) {
        if let Some(block) = &function.default {
            self.record(&function.sig.ident, &function.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, function);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_production_functions_and_files_are_measured() {
        let dir = crate::tempdir("budgets");
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let body = "    let _ = 1;\n".repeat(FUNCTION_LINES_MAX);
        let text = format!(
            "struct S;\nimpl S {{\n    fn long(&self) {{\n{body}    }}\n    fn short() {{}}\n}}\n\
             #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{body}    }}\n}}\n{}",
            "// filler\n".repeat(FILE_LINES_MAX)
        );
        std::fs::write(dir.join("src/lib.rs"), text).unwrap();
        let tree = CrateTree::load(&dir, &dir).unwrap();
        let over = measure(&dir, &tree);
        assert_eq!(over.len(), 2, "{over:?}");
        assert_eq!(over[0].function, None);
        assert_eq!(over[1].function.as_deref(), Some("S::long"));
        assert_eq!(over[1].lines, FUNCTION_LINES_MAX + 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
