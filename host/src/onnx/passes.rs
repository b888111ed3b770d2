//! The generic passes over an ONNX model's nodes and initializers, run by the
//! pipeline between `emit::lower` and `emit::plan`: identities, common
//! subexpressions and dead code (`optimize`), constant folding (`fold`), and
//! dead code again for what folding left unread. None changes a graph
//! output's name.

use std::collections::{HashMap, HashSet};

use super::optimize::{self, OptimizeReport};
use super::weights::Initializer;
use super::{fold, Node};

/// Runs every pass; `outputs` are the graph outputs' names, kept;
/// `static_shapes` the values of a shape fixed on every axis, by name.
pub fn run(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer>,
    outputs: &[String],
    static_shapes: &HashMap<String, Vec<i64>>,
) -> OptimizeReport {
    let mut report = optimize::optimize(nodes, outputs);
    let keep: HashSet<&str> = outputs.iter().map(String::as_str).collect();
    report.folding = fold::fold(nodes, initializers, &keep, static_shapes);
    report.dead_removed += optimize::remove_dead_code(nodes, outputs);
    report
}
