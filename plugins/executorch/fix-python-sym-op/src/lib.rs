//! Python functions on sizes (`torch.sym_max`, `torch.sym_min`, `math.trunc`)
//! swapped for ExecuTorch's own sym ops (`executorch_prim.*.Scalar`).
//!
//! torch.export records these calls as the Python functions themselves.
//! ExecuTorch's edge verifier, run by `to_edge_transform_and_lower`, admits a
//! Python function only if it is `alloc` (`assert op.__name__ in ("alloc",)`,
//! `exir/verification/verifier.py`), and the pass that swaps them
//! (`EdgeToBackendOpsPass`, with `_PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS`) runs
//! only later, in `to_executorch`. The reference's `_fix_python_sym_op`
//! (transformers 5.24) does the swap first; so does this fix.
//!
//! `math.trunc` is a builtin the verifier lets through, and is swapped for
//! parity (the program `to_executorch` makes is the same). Not here:
//! - `math.ceil` and `round`, which the reference also swaps: torch's `.pt2`
//!   serializer cannot write them (not in its `_SYM_OPS`), so a trace holding
//!   them never reaches hfx;
//! - `torch.sym_float` (and a `sym_max`/`sym_min` of floats): the result is a
//!   sym-float, and `hfx:plugin@0.1.0` can declare no sym-float output (nor
//!   re-target a node), so a plugin cannot build the replacement.
//!
//! hfx's native portable emitter maps the Python functions to the same kernels
//! itself, and runs no edge verifier: only the XNNPACK delegate needs this.
//! The replacement takes the ExecuTorch op schema's argument names (`a`, `b`).

use hfx_sdk::prelude::*;

/// The ExecuTorch op for each Python function, and its schema's argument names.
const SYM_OPS: &[(&str, &str, &[&str])] = &[
    ("torch.sym_max", "executorch_prim.sym_max.Scalar", &["a", "b"]),
    ("torch.sym_min", "executorch_prim.sym_min.Scalar", &["a", "b"]),
    ("math.trunc", "executorch_prim.trunc.Scalar", &["a"]),
];

#[hfx_sdk::fx_node_fix(targets = ["torch.sym_max", "torch.sym_min", "math.trunc"])]
fn fix_python_sym_op(graph: &Graph, node: NodeId) -> Result<bool> {
    let target = graph.target(node)?;
    let Some(&(_, replacement, names)) = SYM_OPS.iter().find(|(python, _, _)| *python == target)
    else {
        return Ok(false);
    };
    // A sym-int result only: a sym-float one cannot be declared by a plugin.
    let [Argument::SymInt(SymInt::Value(_))] = graph.outputs(node)?[..] else { return Ok(false) };
    let inputs = graph.inputs(node)?;
    if inputs.len() != names.len() || inputs.iter().any(|input| input.keyword) {
        return Ok(false);
    }
    let renamed =
        inputs.into_iter().zip(names).map(|(input, name)| positional(name, input.value)).collect();
    graph.replace_with_call(node, replacement, renamed)?;
    Ok(true)
}
