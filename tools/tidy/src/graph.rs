//! Strongly connected components (Tarjan) of a small directed graph of names: every
//! component of more than one node is a circle.

use std::collections::{BTreeMap, BTreeSet};

/// A directed graph: node -> the nodes it reaches in one step.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The components of `graph` with more than one node, each sorted, in a stable order.
pub fn circles(graph: &Graph) -> Vec<Vec<String>> {
    let mut state = Tarjan::default();
    for node in graph.keys() {
        if !state.index.contains_key(node) {
            state.visit(graph, node);
        }
    }
    let mut found: Vec<Vec<String>> = state
        .components
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|mut component| {
            component.sort();
            component
        })
        .collect();
    found.sort();
    found
}

#[derive(Default)]
struct Tarjan {
    next: usize,
    index: BTreeMap<String, usize>,
    low: BTreeMap<String, usize>,
    stack: Vec<String>,
    on_stack: BTreeSet<String>,
    components: Vec<Vec<String>>,
}

impl Tarjan {
    // Recursive: the graphs are a crate's files (a few dozen), far from any stack limit.
    fn visit(&mut self, graph: &Graph, node: &str) {
        self.index.insert(node.to_owned(), self.next);
        self.low.insert(node.to_owned(), self.next);
        self.next += 1;
        self.stack.push(node.to_owned());
        self.on_stack.insert(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if !self.index.contains_key(next) {
                self.visit(graph, next);
                let low = self.low[node].min(self.low[next]);
                self.low.insert(node.to_owned(), low);
            } else if self.on_stack.contains(next) {
                let low = self.low[node].min(self.index[next]);
                self.low.insert(node.to_owned(), low);
            }
        }
        if self.low[node] == self.index[node] {
            let mut component = Vec::new();
            while let Some(top) = self.stack.pop() {
                self.on_stack.remove(&top);
                let done = top == node;
                component.push(top);
                if done {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &str)]) -> Graph {
        let mut graph = Graph::new();
        for (from, to) in edges {
            graph
                .entry((*from).into())
                .or_default()
                .insert((*to).into());
            graph.entry((*to).into()).or_default();
        }
        graph
    }

    #[test]
    fn a_chain_has_no_circle_and_a_loop_is_one() {
        assert!(circles(&graph(&[("a", "b"), ("b", "c")])).is_empty());
        assert_eq!(
            circles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
            vec![vec!["a".to_owned(), "b".into(), "c".into()]]
        );
        assert_eq!(
            circles(&graph(&[("a", "b"), ("b", "a"), ("x", "y"), ("y", "x")])).len(),
            2
        );
    }
}
