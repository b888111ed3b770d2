//! Erase or constant-fold sym-int comparisons (`_operator.le` and kin).
//!
//! torch.export guards sizes with comparisons such as `s0 <= int_oo`, which
//! the ONNX translator lowers to a C long and overflows. Two cases:
//! - nobody reads the comparison: erase it (FX's own DCE skips Python callables);
//! - its outcome is decided, because both sides are constants or the
//!   program's range constraints settle it (`u0 >= 0` with `u0` in [0, 3],
//!   `s0 <= int_oo` for an unbounded `s0`): its readers get the constant.

use hfx_sdk::prelude::*;

/// A side of the comparison as a range of values: a constant is [c, c];
/// a size symbol is its range constraint (an unbounded max is `int_oo`).
fn range_of(graph: &Graph, side: &Argument) -> Result<Option<(i64, Option<i64>)>> {
    let value = match side {
        Argument::Int(c) | Argument::SymInt(SymInt::Constant(c)) => {
            return Ok(Some((*c, Some(*c))))
        }
        Argument::SymInt(SymInt::Value(v)) => *v,
        _ => return Ok(None),
    };
    let ValueMeta::SymInt(expr) = graph.value_meta(value)? else { return Ok(None) };
    if let Ok(c) = expr.parse::<i64>() {
        return Ok(Some((c, Some(c))));
    }
    Ok(graph.range_constraints().into_iter().find(|r| r.symbol == expr).map(|r| (r.min, r.max)))
}

/// The comparison's outcome when the two ranges decide it.
fn decide(
    op: &str,
    (a_min, a_max): (i64, Option<i64>),
    (b_min, b_max): (i64, Option<i64>),
) -> Option<bool> {
    let lt = |x_max: Option<i64>, y_min: i64| x_max.is_some_and(|m| m < y_min); // every x < every y
    let le = |x_max: Option<i64>, y_min: i64| x_max.is_some_and(|m| m <= y_min);
    match op {
        "_operator.lt" if lt(a_max, b_min) => Some(true),
        "_operator.lt" if le(b_max, a_min) => Some(false),
        "_operator.le" if le(a_max, b_min) => Some(true),
        "_operator.le" if lt(b_max, a_min) => Some(false),
        "_operator.gt" => decide("_operator.lt", (b_min, b_max), (a_min, a_max)),
        "_operator.ge" => decide("_operator.le", (b_min, b_max), (a_min, a_max)),
        "_operator.eq" if a_max == Some(a_min) && b_max == Some(b_min) => Some(a_min == b_min),
        "_operator.eq" if lt(a_max, b_min) || lt(b_max, a_min) => Some(false),
        "_operator.ne" => decide("_operator.eq", (a_min, a_max), (b_min, b_max)).map(|eq| !eq),
        _ => None,
    }
}

#[hfx_sdk::fx_node_fix(targets = [
    "_operator.le", "_operator.lt", "_operator.ge", "_operator.gt", "_operator.eq", "_operator.ne",
])]
fn fix_dead_comparison(graph: &Graph, node: NodeId) -> Result<bool> {
    let outputs = graph.output_values(node)?;
    let read = outputs
        .iter()
        .map(|&v| Ok(!graph.value_users(v)?.is_empty() || graph.is_graph_output(v)?))
        .collect::<Result<Vec<bool>, Error>>()?;
    if !read.contains(&true) {
        graph.erase(node)?;
        return Ok(true);
    }
    let inputs = graph.inputs(node)?;
    let [a, b] = &inputs[..] else { return Ok(false) };
    let (Some(ra), Some(rb)) = (range_of(graph, &a.value)?, range_of(graph, &b.value)?) else {
        return Ok(false);
    };
    let Some(outcome) = decide(&graph.target(node)?, ra, rb) else { return Ok(false) };
    for output in outputs {
        graph.replace_uses(output, Replacement::Boolean(outcome))?;
    }
    graph.erase(node)?;
    Ok(true)
}
