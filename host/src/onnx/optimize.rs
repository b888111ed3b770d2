//! ── onnx-optimize: the generic passes ──
//!
//! Generic graph passes that need no knowledge of what an op computes, so they
//! live in the host (op-specific rewrites are IR-fix plugins):
//! - identity removal: readers of `Identity(x)` read `x` (kept where the
//!   identity names a graph output),
//! - common-subexpression elimination: nodes with the same op, inputs and
//!   attributes compute the same value (translations emit their own copies of
//!   small constants; every layer reads the same ones after this),
//! - dead-code elimination: nodes no graph output depends on.
//!
//! Ops with hidden state or randomness are never merged.

use std::collections::{HashMap, HashSet};

use super::{Attribute, Node};

/// Ops whose two calls with equal inputs may differ.
const NONDETERMINISTIC: &[&str] = &[
    "RandomUniform",
    "RandomNormal",
    "RandomUniformLike",
    "RandomNormalLike",
    "Multinomial",
    "Bernoulli",
    "Dropout",
];

/// What the passes did (`passes.rs` runs them).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OptimizeReport {
    pub identities_removed: usize,
    pub merged: usize,
    pub dead_removed: usize,
    /// Constant folding and what runs after it (`fold/`).
    pub folding: super::fold::FoldReport,
    /// `--quantize` (`quantize.rs`).
    pub quantized: super::quantize::QuantizeReport,
    /// A 16-bit model's weights for OpenVINO (`compress.rs`).
    pub compressed: super::compress::CompressReport,
}

/// Renames every read of a value per `renames` (followed transitively).
fn apply_renames(nodes: &mut [Node], renames: &HashMap<String, String>) {
    let resolve = |name: &str| {
        let mut current = name;
        while let Some(next) = renames.get(current) {
            current = next;
        }
        current.to_string()
    };
    for node in nodes.iter_mut() {
        for input in node.inputs.iter_mut().filter(|i| !i.is_empty()) {
            if renames.contains_key(input.as_str()) {
                *input = resolve(input);
            }
        }
    }
}

/// Readers of `Identity(x)` read `x`; an identity naming a graph output
/// (`keep`) stays unless its producer can take the name. How many went.
pub fn remove_identities(nodes: &mut Vec<Node>, keep: &HashSet<&str>) -> usize {
    let is_identity = |n: &Node| {
        n.op_type == "Identity"
            && n.domain.is_empty()
            && n.inputs.len() == 1
            && n.outputs.len() == 1
    };
    let before = nodes.len();
    // Copies under internal names: readers read the original.
    let mut renames = HashMap::new();
    nodes.retain(|n| {
        let removable = is_identity(n) && !keep.contains(n.outputs[0].as_str());
        if removable {
            renames.insert(n.outputs[0].clone(), n.inputs[0].clone());
        }
        !removable
    });
    apply_renames(nodes, &renames);
    // A copy naming a graph output gives its name to the value it copies
    // instead, when a node computes that value and nothing else names it.
    let produced: HashSet<String> =
        nodes.iter().filter(|n| !is_identity(n)).flat_map(|n| n.outputs.iter().cloned()).collect();
    let mut named: HashMap<String, String> = HashMap::new();
    nodes.retain(|n| {
        if !is_identity(n) {
            return true;
        }
        let (input, output) = (&n.inputs[0], &n.outputs[0]);
        let renameable = produced.contains(input)
            && !keep.contains(input.as_str())
            && !named.contains_key(input);
        if renameable {
            named.insert(input.clone(), output.clone());
        }
        !renameable
    });
    for node in nodes.iter_mut() {
        for name in node.inputs.iter_mut().chain(node.outputs.iter_mut()) {
            if let Some(new) = named.get(name.as_str()) {
                *name = new.clone();
            }
        }
    }
    before - nodes.len()
}

/// A node's identity for CSE: op, domain, inputs, attributes.
fn key(node: &Node) -> String {
    let attributes: Vec<String> = node
        .attributes
        .iter()
        .map(|(name, a)| match a {
            // Float bits, so -0.0 and NaN payloads compare exactly.
            Attribute::Float(f) => format!("{name}=f{:08x}", f.to_bits()),
            Attribute::Floats(v) => {
                format!("{name}=F{:?}", v.iter().map(|f| f.to_bits()).collect::<Vec<_>>())
            }
            other => format!("{name}={other:?}"),
        })
        .collect();
    format!(
        "{}|{}|{}|{}|{}",
        node.domain,
        node.op_type,
        node.outputs.len(),
        node.inputs.join(","),
        attributes.join(";")
    )
}

/// Each node computing what an earlier one computes goes, its readers read
/// the earlier one's outputs; graph outputs (`keep`) keep their nodes. How
/// many went.
pub fn eliminate_common_subexpressions(nodes: &mut Vec<Node>, keep: &HashSet<&str>) -> usize {
    // In topological order, a node's inputs are final (already renamed) when it is keyed.
    let mut seen: HashMap<String, Vec<String>> = HashMap::new();
    let mut renames: HashMap<String, String> = HashMap::new();
    let mut merged = 0;
    let mut kept = Vec::with_capacity(nodes.len());
    for mut node in std::mem::take(nodes) {
        for input in node.inputs.iter_mut() {
            if let Some(new) = renames.get(input.as_str()) {
                *input = new.clone();
            }
        }
        let mergeable = !NONDETERMINISTIC.contains(&node.op_type.as_str())
            && node.outputs.iter().all(|o| !keep.contains(o.as_str()));
        if mergeable {
            let k = key(&node);
            if let Some(existing) = seen.get(&k) {
                for (old, new) in node.outputs.iter().zip(existing) {
                    renames.insert(old.clone(), new.clone());
                }
                merged += 1;
                continue;
            }
            seen.insert(k, node.outputs.clone());
        }
        kept.push(node);
    }
    *nodes = kept;
    merged
}

/// Removes the nodes no graph output (`keep`) depends on; how many went.
pub fn eliminate_dead_code(nodes: &mut Vec<Node>, keep: &HashSet<&str>) -> usize {
    let mut live: HashSet<String> = keep.iter().map(|s| s.to_string()).collect();
    let mut alive = vec![false; nodes.len()];
    for (i, node) in nodes.iter().enumerate().rev() {
        if node.outputs.iter().any(|o| live.contains(o)) {
            alive[i] = true;
            live.extend(node.inputs.iter().filter(|i| !i.is_empty()).cloned());
        }
    }
    let before = nodes.len();
    let mut index = 0;
    nodes.retain(|_| {
        index += 1;
        alive[index - 1]
    });
    before - nodes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(op: &str, inputs: &[&str], output: &str, attributes: Vec<(String, Attribute)>) -> Node {
        Node {
            op_type: op.into(),
            domain: String::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![output.into()],
            attributes,
            function: None,
        }
    }

    /// The three passes in `passes.rs`'s order: identities, copies, dead code.
    fn optimize(nodes: &mut Vec<Node>, outputs: &[&str]) -> [usize; 3] {
        let keep: HashSet<&str> = outputs.iter().copied().collect();
        [
            remove_identities(nodes, &keep),
            eliminate_common_subexpressions(nodes, &keep),
            eliminate_dead_code(nodes, &keep),
        ]
    }

    #[test]
    fn identities_copies_and_dead_nodes_go() {
        let axes = || vec![("value_ints".to_string(), Attribute::Ints(vec![0]))];
        let mut nodes = vec![
            node("Constant", &[], "c1", axes()),
            node("Constant", &[], "c2", axes()),
            node("Identity", &["x"], "i1", vec![]),
            node("Unsqueeze", &["i1", "c1"], "u1", vec![]),
            node("Unsqueeze", &["x", "c2"], "u2", vec![]),
            node("Add", &["u1", "u2"], "y", vec![]),
            node("Neg", &["x"], "unused", vec![]),
            node("RandomUniform", &[], "r1", vec![]),
            node("RandomUniform", &[], "r2", vec![]),
            node("Add", &["r1", "r2"], "z", vec![]),
        ];
        assert_eq!(optimize(&mut nodes, &["y", "z"]), [1, 2, 1]);
        let ops: Vec<&str> = nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Constant", "Unsqueeze", "Add", "RandomUniform", "RandomUniform", "Add"]);
        assert_eq!(nodes[2].inputs, ["u1", "u1"], "both unsqueezes are one");
    }

    #[test]
    fn an_identity_naming_a_graph_output_gives_the_name_to_its_producer() {
        let mut nodes = vec![
            node("Neg", &["x"], "n", vec![]),
            node("Identity", &["n"], "logits", vec![]),
            node("Exp", &["n"], "e", vec![]),
            node("Identity", &["x"], "echo", vec![]),
            node("Identity", &["x"], "copy", vec![]),
            node("Identity", &["copy"], "again", vec![]),
            node("Identity", &["again"], "echo_twice", vec![]),
        ];
        optimize(&mut nodes, &["logits", "e", "echo", "echo_twice"]);
        let ops: Vec<&str> = nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(
            ops,
            ["Neg", "Exp", "Identity", "Identity"],
            "copies of a graph input keep a node"
        );
        assert_eq!(nodes[3].inputs, ["x"], "through a chain of copies");
        assert_eq!(nodes[0].outputs, ["logits"]);
        assert_eq!(nodes[1].inputs, ["logits"], "readers follow the rename");
    }

    /// Attributes that differ (by a float's bits: -0.0 is not 0.0), another
    /// domain, or a graph output keep their nodes apart.
    #[test]
    fn nodes_merge_only_when_op_domain_inputs_and_attribute_bits_agree() {
        let float = |f: f32| vec![("alpha".to_string(), Attribute::Float(f))];
        let mut custom = node("Elu", &["x"], "custom", float(0.0));
        custom.domain = "com.microsoft".into();
        let mut nodes = vec![
            node("Elu", &["x"], "a", float(0.0)),
            node("Elu", &["x"], "b", float(-0.0)),
            custom,
            node("Elu", &["x"], "out", float(0.0)),
            node("Elu", &["x"], "same", float(0.0)),
            node("Concat", &["a", "b", "custom", "out", "same"], "y", vec![]),
        ];
        let keep = HashSet::from(["y", "out"]);
        assert_eq!(eliminate_common_subexpressions(&mut nodes, &keep), 1);
        assert_eq!(nodes.last().unwrap().inputs, ["a", "b", "custom", "out", "a"]);
    }
}
