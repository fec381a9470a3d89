//! A crate's module tree and the references between its files.
//!
//! Each target root (`src/lib.rs`, `src/main.rs`, `src/bin/*.rs`) is walked through its
//! `mod name;` declarations to files; modules declared under `cfg(test)` and items under
//! `cfg(test)` are left out, as they are not the production shape. A file reaches another
//! when it names a path into the other's module through `crate::` or `super::` (in a `use`
//! or anywhere in its code; a name the crate root re-exports counts as the module it comes
//! from). A file and its own ancestors or descendants are one unit (a module is expected to
//! use its children and a child its parent's types), so only references between unrelated
//! modules make edges, and a circle among those is a breach.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

use crate::graph::{self, Graph};
use crate::{parse, relative, TidyError, Violation};

/// A module path from the crate root, e.g. `["cache", "writeback"]`.
pub type ModPath = Vec<String>;

/// One production source file of a crate target.
pub struct SourceFile {
    /// The file.
    pub path: PathBuf,
    /// The module it holds.
    pub module: ModPath,
    /// Its syntax tree.
    pub syntax: syn::File,
}

/// One target's production files: the module tree reached from its root.
pub struct Target {
    /// Its files, the root first.
    pub files: Vec<SourceFile>,
    /// Every module (inline ones too) -> the index of the file holding it.
    modules: BTreeMap<ModPath, usize>,
    /// What the root re-exports by name: `pub use a::b::Name` gives `Name -> [a, b, Name]`.
    root_uses: BTreeMap<String, ModPath>,
}

/// The production module trees of every target of one crate.
pub struct CrateTree {
    /// The crate's directory.
    pub dir: PathBuf,
    /// One per target root found.
    pub targets: Vec<Target>,
}

impl CrateTree {
    /// Walks every target root of the crate in `dir`.
    pub fn load(_root: &Path, dir: &Path) -> Result<CrateTree, TidyError> {
        let source = dir.join("src");
        let mut roots = Vec::new();
        for name in ["lib.rs", "main.rs"] {
            if source.join(name).is_file() {
                roots.push(source.join(name));
            }
        }
        if let Ok(entries) = std::fs::read_dir(source.join("bin")) {
            let mut bins: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
                .collect();
            bins.sort();
            roots.extend(bins);
        }
        let targets = roots
            .iter()
            .map(|path| Target::load(path))
            .collect::<Result<_, _>>()?;
        Ok(CrateTree {
            dir: dir.to_path_buf(),
            targets,
        })
    }

    /// Every distinct production file of the crate (a file two targets share counts once).
    pub fn files(&self) -> impl Iterator<Item = &SourceFile> {
        let mut seen = BTreeSet::new();
        self.targets
            .iter()
            .flat_map(|target| target.files.iter())
            .filter(move |file| seen.insert(file.path.clone()))
    }

    /// The circles among the files of each target.
    pub fn circles(&self, root: &Path) -> Vec<Violation> {
        let mut found = BTreeSet::new();
        for target in &self.targets {
            for circle in graph::circles(&target.file_graph(root)) {
                found.insert(circle);
            }
        }
        found
            .into_iter()
            .map(|circle| Violation {
                file: PathBuf::from(&circle[0]),
                message: format!("module circle: {}", circle.join(" <-> ")),
            })
            .collect()
    }
}

impl Target {
    fn load(root_file: &Path) -> Result<Target, TidyError> {
        let mut target = Target {
            files: Vec::new(),
            modules: BTreeMap::new(),
            root_uses: BTreeMap::new(),
        };
        let children_dir = root_file.parent().unwrap_or(Path::new(".")).to_path_buf();
        target.add_file(root_file, ModPath::new(), &children_dir)?;
        target.root_uses = root_uses(&target.files[0].syntax);
        Ok(target)
    }

    /// Adds `path` as `module`, then the files of the modules it declares.
    fn add_file(
        &mut self,
        path: &Path,
        module: ModPath,
        children_dir: &Path,
    ) -> Result<(), TidyError> {
        let syntax = parse(path)?;
        if is_test_only(&syntax.attrs) {
            return Ok(());
        }
        let index = self.files.len();
        let mut declared = Vec::new();
        collect_modules(&syntax.items, &module, children_dir, path, &mut declared);
        self.files.push(SourceFile {
            path: path.to_path_buf(),
            module: module.clone(),
            syntax,
        });
        self.modules.insert(module, index);
        for declaration in declared {
            match declaration {
                Declared::Inline(module) => {
                    self.modules.insert(module, index);
                }
                Declared::File {
                    module,
                    file,
                    children_dir,
                } => {
                    self.add_file(&file, module, &children_dir)?;
                }
            }
        }
        Ok(())
    }

    /// File -> files it reaches, between modules neither of which contains the other.
    fn file_graph(&self, root: &Path) -> Graph {
        let mut graph = Graph::new();
        for file in &self.files {
            let name = relative(root, &file.path).display().to_string();
            let edges = graph.entry(name).or_default();
            let mut paths = PathCollector {
                module: file.module.clone(),
                paths: Vec::new(),
            };
            paths.visit_file(&file.syntax);
            for (context, path) in paths.paths {
                let Some(target) = self.resolve(&context, &path) else {
                    continue;
                };
                let other = &self.files[target];
                let related = other.module.starts_with(&file.module)
                    || file.module.starts_with(&other.module);
                if !related {
                    edges.insert(relative(root, &other.path).display().to_string());
                }
            }
        }
        graph
    }

    /// The file holding the module `path` (as written in module `context`) points into.
    fn resolve(&self, context: &ModPath, path: &[String]) -> Option<usize> {
        let mut absolute: ModPath = match path.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("super" | "self") => context.clone(),
            _ => return None,
        };
        let mut rest = &path[1..];
        if path[0] == "super" {
            absolute.pop();
            while rest.first().is_some_and(|segment| segment == "super") {
                absolute.pop();
                rest = &rest[1..];
            }
        }
        absolute.extend(rest.iter().cloned());
        if absolute.len() == 1 || absolute.is_empty() {
            // `crate::Name`: a name the root re-exports points into its module.
            if let Some(source) = absolute.first().and_then(|name| self.root_uses.get(name)) {
                absolute.clone_from(source);
            }
        }
        (0..=absolute.len())
            .rev()
            .find_map(|length| self.modules.get(&absolute[..length]))
            .copied()
    }
}

enum Declared {
    Inline(ModPath),
    File {
        module: ModPath,
        file: PathBuf,
        children_dir: PathBuf,
    },
}

/// The production modules `items` declare (recursing into inline ones).
fn collect_modules(
    items: &[syn::Item],
    module: &ModPath,
    children_dir: &Path,
    file: &Path,
    declared: &mut Vec<Declared>,
) {
    for item in items {
        let syn::Item::Mod(declaration) = item else {
            continue;
        };
        if is_test_only(&declaration.attrs) {
            continue;
        }
        let name = declaration.ident.to_string();
        let mut child = module.clone();
        child.push(name.clone());
        if let Some((_, items)) = &declaration.content {
            declared.push(Declared::Inline(child.clone()));
            collect_modules(items, &child, &children_dir.join(&name), file, declared);
            continue;
        }
        let (path, dir) = if let Some(explicit) = path_attribute(&declaration.attrs) {
            let path = file.parent().unwrap_or(Path::new(".")).join(explicit);
            let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
            (path, dir)
        } else {
            let flat = children_dir.join(format!("{name}.rs"));
            let nested = children_dir.join(&name);
            if flat.is_file() {
                (flat, nested)
            } else {
                (nested.join("mod.rs"), nested)
            }
        };
        if path.is_file() {
            declared.push(Declared::File {
                module: child,
                file: path,
                children_dir: dir,
            });
        }
    }
}

/// `#[cfg(test)]`, or a `cfg` that holds only under test (`all(test, ..)`); `not(test)` is
/// production.
pub fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if !attr.path().is_ident("cfg") {
            return false;
        }
        let text = attr
            .meta
            .require_list()
            .map(|list| list.tokens.to_string())
            .unwrap_or_default();
        let text = text.replace(' ', "");
        text == "test"
            || text.starts_with("all(")
                && ["(test,", ",test,", ",test)"]
                    .iter()
                    .any(|arg| text.contains(arg))
    })
}

/// The literal of a `#[path = ".."]` attribute.
pub fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs
        .iter()
        .find(|attr| attr.path().is_ident("path"))
        .and_then(|attr| {
            let syn::Meta::NameValue(value) = &attr.meta else {
                return None;
            };
            let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) = &value.value
            else {
                return None;
            };
            Some(text.value())
        })
}

/// The root's `use` items by the name they bring in: `pub use cache::Cache` -> `Cache ->
/// [cache, Cache]`.
fn root_uses(root: &syn::File) -> BTreeMap<String, ModPath> {
    let mut names = BTreeMap::new();
    for item in &root.items {
        let syn::Item::Use(item) = item else { continue };
        let mut paths = Vec::new();
        use_paths(&item.tree, &mut Vec::new(), &mut paths);
        for mut path in paths {
            if path
                .first()
                .is_some_and(|first| first == "crate" || first == "self")
            {
                path.remove(0);
            }
            if let Some(name) = path.last().cloned().filter(|name| name != "*") {
                names.insert(name, path);
            }
        }
    }
    names
}

/// Every full path a `use` tree names.
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_paths(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let mut path = prefix.clone();
            if name.ident != "self" {
                path.push(name.ident.to_string());
            }
            out.push(path);
        }
        syn::UseTree::Rename(rename) => {
            let mut path = prefix.clone();
            path.push(rename.ident.to_string());
            out.push(path);
        }
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                use_paths(tree, prefix, out);
            }
        }
    }
}

/// Collects `crate::`/`super::`/`self::` paths with the module they are written in, leaving
/// out `cfg(test)` items.
struct PathCollector {
    module: ModPath,
    paths: Vec<(ModPath, Vec<String>)>,
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if item_attrs(item).is_some_and(is_test_only) {
            return;
        }
        if let syn::Item::Mod(declaration) = item {
            if let Some((_, items)) = &declaration.content {
                self.module.push(declaration.ident.to_string());
                for item in items {
                    self.visit_item(item);
                }
                self.module.pop();
            }
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        if let syn::ImplItem::Fn(function) = item {
            if is_test_only(&function.attrs) {
                return;
            }
        }
        syn::visit::visit_impl_item(self, item);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        use_paths(&item.tree, &mut Vec::new(), &mut paths);
        for path in paths {
            if path
                .first()
                .is_some_and(|first| matches!(first.as_str(), "crate" | "super" | "self"))
            {
                self.paths.push((self.module.clone(), path));
            }
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path
            .segments
            .iter()
            .map(|segment| segment.ident.to_string())
            .collect();
        if segments
            .first()
            .is_some_and(|first| matches!(first.as_str(), "crate" | "super" | "self"))
        {
            self.paths.push((self.module.clone(), segments));
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(in crate::a)` and `pub(super)` name where an item may be seen, not a use.
    }
}

/// The attributes of any item kind.
pub fn item_attrs(item: &syn::Item) -> Option<&[syn::Attribute]> {
    use syn::Item;
    Some(match item {
        Item::Const(item) => &item.attrs,
        Item::Enum(item) => &item.attrs,
        Item::ExternCrate(item) => &item.attrs,
        Item::Fn(item) => &item.attrs,
        Item::ForeignMod(item) => &item.attrs,
        Item::Impl(item) => &item.attrs,
        Item::Macro(item) => &item.attrs,
        Item::Mod(item) => &item.attrs,
        Item::Static(item) => &item.attrs,
        Item::Struct(item) => &item.attrs,
        Item::Trait(item) => &item.attrs,
        Item::TraitAlias(item) => &item.attrs,
        Item::Type(item) => &item.attrs,
        Item::Union(item) => &item.attrs,
        Item::Use(item) => &item.attrs,
        _ => return None,
    })
}

/// Every `#[path]` in the crate's Rust files (sources, tests, benches, examples) that points
/// outside the crate's directory.
pub fn foreign_paths(root: &Path, dir: &Path) -> Result<Vec<Violation>, TidyError> {
    let mut violations = Vec::new();
    let crate_dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    for file in rust_files(dir) {
        let syntax = parse(&file)?;
        let mut found = Vec::new();
        foreign_in(&syntax.items, &mut found);
        for literal in found {
            let target = file.parent().unwrap_or(Path::new(".")).join(&literal);
            let target = target.canonicalize().unwrap_or(target);
            if !target.starts_with(&crate_dir) {
                violations.push(Violation {
                    file: relative(root, &file),
                    message: format!(
                        "#[path = \"{literal}\"] leaves the crate; share test code through a crate (tessera-testing)"
                    ),
                });
            }
        }
    }
    Ok(violations)
}

fn foreign_in(items: &[syn::Item], found: &mut Vec<String>) {
    for item in items {
        let syn::Item::Mod(declaration) = item else {
            continue;
        };
        found.extend(path_attribute(&declaration.attrs));
        if let Some((_, items)) = &declaration.content {
            foreign_in(items, found);
        }
    }
}

/// The `.rs` files under `dir`, leaving out build output.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name != "target") {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_crate(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = crate::tempdir(name);
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn two_siblings_that_use_each_other_are_a_circle() {
        let dir = fake_crate(
            "circle",
            &[
                ("src/lib.rs", "mod a; mod b; mod c; pub use b::Thing;"),
                ("src/a.rs", "use crate::Thing; pub struct A;"),
                (
                    "src/b.rs",
                    "pub struct Thing; fn f() -> super::c::C { todo!() }",
                ),
                ("src/c.rs", "pub struct C; fn g(_: crate::a::A) {}"),
            ],
        );
        let tree = CrateTree::load(&dir, &dir).unwrap();
        let circles = tree.circles(&dir);
        assert_eq!(circles.len(), 1, "{circles:?}");
        assert_eq!(
            circles[0].message,
            "module circle: src/a.rs <-> src/b.rs <-> src/c.rs"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parents_children_and_tests_make_no_circle() {
        let dir = fake_crate(
            "tree",
            &[
                ("src/lib.rs", "mod a; mod b;"),
                ("src/a.rs", "mod child; pub struct A; fn f() { child::g() }"),
                ("src/a/child.rs", "pub fn g() { let _ = super::A; }"),
                (
                    "src/b.rs",
                    "use crate::a::A; #[cfg(test)] mod tests { use crate::b; }",
                ),
                (
                    "src/a/more.rs",
                    "this file is not declared and does not parse {",
                ),
            ],
        );
        let tree = CrateTree::load(&dir, &dir).unwrap();
        assert!(tree.circles(&dir).is_empty());
        assert_eq!(tree.files().count(), 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_path_out_of_the_crate_is_a_breach() {
        let dir = fake_crate(
            "path",
            &[
                ("other/shared.rs", "pub fn f() {}"),
                ("krate/src/lib.rs", "#[path = \"inner.rs\"] mod inner;"),
                ("krate/src/inner.rs", ""),
                (
                    "krate/tests/t.rs",
                    "#[path = \"../../other/shared.rs\"] mod shared;",
                ),
            ],
        );
        let found = foreign_paths(&dir, &dir.join("krate")).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].file, PathBuf::from("krate/tests/t.rs"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
