//! The mount's inode table: from the kernel's inode numbers back to Tessera paths.
//!
//! Tessera's namespace calls take paths; the kernel names files by inode number. A file's
//! inode number is its Tessera handle (the root's handle is 1, FUSE's root inode), so it
//! stays the same across renames. The table keeps, for every inode the kernel has looked
//! up and not yet forgotten, its parent's inode and its name: a path is found by walking up
//! to the root, and a rename through the mount moves one entry. At most [`INODES_MAX`]
//! entries; a lookup beyond is refused (`ENFILE`) until the kernel forgets some.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// The root directory's inode number (FUSE's, and Tessera's root handle).
pub const ROOT: u64 = 1;

/// Inodes the table remembers at once.
pub const INODES_MAX: usize = 1 << 20;

/// Directory levels a path may have (a deeper walk means a broken table: refused).
pub const DEPTH_MAX: usize = 4096;

/// The table was full (`INODES_MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull;

#[derive(Debug)]
struct Node {
    parent: u64,
    name: String,
    /// Lookups the kernel holds (the root is never forgotten).
    lookups: u64,
}

/// Inode numbers of the kernel's cache, with where each file was last seen.
#[derive(Debug)]
pub struct Inodes {
    nodes: Mutex<HashMap<u64, Node>>,
}

impl Inodes {
    /// A table holding the root.
    pub fn new() -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                parent: ROOT,
                name: String::new(),
                lookups: u64::MAX,
            },
        );
        Self {
            nodes: Mutex::new(nodes),
        }
    }

    /// The Tessera path of `inode`, if the table knows it.
    pub fn path(&self, inode: u64) -> Option<String> {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut names = Vec::new();
        let mut current = inode;
        while current != ROOT {
            let node = nodes.get(&current)?;
            names.push(node.name.as_str());
            if names.len() > DEPTH_MAX {
                return None;
            }
            current = node.parent;
        }
        if names.is_empty() {
            return Some("/".to_owned());
        }
        let mut path = String::new();
        for name in names.iter().rev() {
            path.push('/');
            path.push_str(name);
        }
        Some(path)
    }

    /// The path of `name` in directory `parent`.
    pub fn child_path(&self, parent: u64, name: &str) -> Option<String> {
        let directory = self.path(parent)?;
        Some(if directory == "/" {
            format!("/{name}")
        } else {
            format!("{directory}/{name}")
        })
    }

    /// The parent directory of `inode` (the root's is itself).
    pub fn parent(&self, inode: u64) -> Option<u64> {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        nodes.get(&inode).map(|node| node.parent)
    }

    /// The kernel looked `inode` up as `name` in `parent`: one more lookup held, and the
    /// name is where the file is now.
    pub fn remember(&self, inode: u64, parent: u64, name: &str) -> Result<(), TableFull> {
        if inode == ROOT {
            return Ok(());
        }
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(node) = nodes.get_mut(&inode) {
            node.lookups = node.lookups.saturating_add(1);
            node.parent = parent;
            name.clone_into(&mut node.name);
            return Ok(());
        }
        if nodes.len() >= INODES_MAX {
            return Err(TableFull);
        }
        nodes.insert(
            inode,
            Node {
                parent,
                name: name.to_owned(),
                lookups: 1,
            },
        );
        Ok(())
    }

    /// A rename through the mount moved `inode` to `name` in `parent` (no lookup added).
    pub fn moved(&self, inode: u64, parent: u64, name: &str) {
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(node) = nodes.get_mut(&inode).filter(|_| inode != ROOT) {
            node.parent = parent;
            name.clone_into(&mut node.name);
        }
    }

    /// The kernel dropped `count` lookups of `inode`; at none left, the entry goes.
    pub fn forget(&self, inode: u64, count: u64) {
        if inode == ROOT {
            return;
        }
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(node) = nodes.get_mut(&inode) {
            node.lookups = node.lookups.saturating_sub(count);
            if node.lookups == 0 {
                nodes.remove(&inode);
            }
        }
    }

    /// Entries held (the root included).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_lookups_renames_and_forgets() {
        let inodes = Inodes::new();
        assert_eq!(inodes.path(ROOT).as_deref(), Some("/"));
        inodes.remember(10, ROOT, "a").unwrap();
        inodes.remember(11, 10, "b").unwrap();
        inodes.remember(12, 11, "c").unwrap();
        assert_eq!(inodes.path(12).as_deref(), Some("/a/b/c"));
        assert_eq!(inodes.child_path(11, "d").as_deref(), Some("/a/b/d"));
        assert_eq!(inodes.child_path(ROOT, "x").as_deref(), Some("/x"));
        assert_eq!(inodes.parent(11), Some(10));
        // Moving a directory moves everything under it.
        inodes.moved(11, ROOT, "z");
        assert_eq!(inodes.path(12).as_deref(), Some("/z/c"));
        // Two lookups need two forgets.
        inodes.remember(12, 11, "c").unwrap();
        inodes.forget(12, 1);
        assert_eq!(inodes.path(12).as_deref(), Some("/z/c"));
        inodes.forget(12, 1);
        assert_eq!(inodes.path(12), None);
        assert_eq!(inodes.len(), 3);
        inodes.forget(ROOT, 5);
        assert_eq!(inodes.path(ROOT).as_deref(), Some("/"));
        // An inode whose parent was forgotten has no path.
        inodes.remember(20, ROOT, "p").unwrap();
        inodes.remember(21, 20, "q").unwrap();
        assert_eq!(inodes.path(21).as_deref(), Some("/p/q"));
        inodes.forget(20, 1);
        assert_eq!(inodes.path(21), None);
    }
}
