//! In-place ATen ops (`add_`, `mul_`, `masked_fill_`, ...) → their functional
//! form, when nothing can observe the mutation: the mutated tensor is not a
//! graph input and no node after this one reads it (the Python variable was
//! rebound to the result, as in `x += y`). ONNX values are immutable, and
//! torch.export keeps such ops in the training IR. A mutation something does
//! observe is left alone (and the translation stage then names the node).

use hfx_sdk::prelude::*;

struct InplaceFunctional;

const TARGETS: &[&str] = &[
    "aten.add_.Tensor", "aten.add_.Scalar", "aten.sub_.Tensor", "aten.sub_.Scalar", "aten.mul_.Tensor",
    "aten.mul_.Scalar", "aten.div_.Tensor", "aten.div_.Scalar", "aten.masked_fill_.Scalar", "aten.masked_fill_.Tensor",
    "aten.clamp_.default", "aten.clamp_min_.default", "aten.clamp_max_.default", "aten.neg_.default", "aten.exp_.default",
    "aten.relu_.default", "aten.tanh_.default", "aten.sigmoid_.default", "aten.pow_.Scalar", "aten.triu_.default",
    "aten.tril_.default",
];

impl Guest for InplaceFunctional {
    fn describe() -> Vec<String> {
        targets(TARGETS)
    }

    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        let target = graph.target(node)?;
        let mutated = graph.tensor_input(node, "self")?;
        if graph.producer(mutated)?.is_none() {
            return Ok(false); // a graph input: the mutation is visible to the caller
        }
        let order = graph.nodes();
        let position = |n: NodeId| order.iter().position(|&m| m == n);
        let here = position(node);
        for user in graph.value_users(mutated)? {
            if user != node && position(user) > here {
                return Ok(false); // read after the mutation: it would see the old value
            }
        }
        // `aten.add_.Tensor` → `aten.add.Tensor`: the op name without its trailing underscore.
        let mut parts: Vec<&str> = target.split('.').collect();
        let functional = parts[1].trim_end_matches('_').to_string();
        parts[1] = &functional;
        let inputs = graph.inputs(node)?;
        graph.replace_with_call(node, &parts.join("."), inputs)?;
        Ok(true)
    }
}

hfx_sdk::register_fx_node_fix!(InplaceFunctional);
