//! The generic passes over an ONNX model's nodes and initializers, run by the
//! pipeline between `emit::lower` and `emit::plan`: identities, common
//! subexpressions and dead code (`optimize`), constant folding (`fold`), and
//! dead code again for what folding left unread. None changes a graph
//! output's name.

use std::collections::HashSet;

use super::optimize::{self, OptimizeReport};
use super::weights::Initializer;
use super::{fold, Node};

/// Runs every pass; `outputs` are the graph outputs' names, kept.
pub fn run(nodes: &mut Vec<Node>, initializers: &mut Vec<Initializer>, outputs: &[String]) -> OptimizeReport {
    let mut report = optimize::optimize(nodes, outputs);
    let keep: HashSet<&str> = outputs.iter().map(String::as_str).collect();
    report.folding = fold::fold(nodes, initializers, &keep);
    report.dead_removed += optimize::remove_dead_code(nodes, outputs);
    report
}
