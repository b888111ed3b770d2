//! `operator.pow(size, n)` on a sym-int, for a small integer `n`, as a product.
//!
//! ExecuTorch has no sym op for a power: a `size ** 2` in model code
//! (seamless_m4t's relative positional bias) stops `to_executorch` with
//! "invalid target for call_function <built-in function pow>", and hfx's
//! native portable emitter has no kernel for `_operator.pow` either. Both take
//! `operator.mul` on sizes (as `executorch_prim.mul.Scalar`). The reference's
//! `_fix_sym_pow_as_mul` (transformers 5.24), which writes
//! `executorch_prim.mul.Scalar` itself; `operator.mul` is what torch.export
//! records for `a * b` on sizes and what both of hfx's ExecuTorch programs
//! lower, so the fix writes that.
//!
//! `size ** 1` is the size itself; `size ** 2` one product, whose result is
//! the power's own (`s0**2`). A higher power needs the products in between
//! (`s0**2` on the way to `s0**3`), each a symbolic size of its own, and a
//! plugin can only declare sizes the program already has: that is an error
//! naming the size, where the lowering would fail anyway.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["_operator.pow"])]
fn fix_sym_pow_as_mul(graph: &Graph, node: NodeId) -> Result<bool> {
    let (Some(Argument::SymInt(SymInt::Value(base))), Some(Argument::Int(exponent))) =
        (graph.input(node, "a")?, graph.input(node, "b")?)
    else {
        return Ok(false); // not a sym-int to a constant power
    };
    let power = graph.single_output(node)?;
    let ValueMeta::SymInt(power_size) = graph.value_meta(power)? else { return Ok(false) };
    let product = match exponent {
        1 => base,
        2 => {
            let operands = [positional("a", sym_int(base)), positional("b", sym_int(base))];
            graph.insert_value(node, "_operator.mul", &operands, OutputDecl::SymInt(power_size))?
        }
        n if n > 2 => {
            let ValueMeta::SymInt(base_size) = graph.value_meta(base)? else { return Ok(false) };
            let message = format!(
                "`{base_size}` to the power {n}: the products on the way (`{base_size}` squared) are symbolic sizes this program does not have, and a plugin cannot declare new ones"
            );
            return Err(error(message, Some(node)));
        }
        _ => return Ok(false), // a power below 1 is no product
    };
    graph.replace_uses(power, Replacement::Value(product))?;
    graph.erase(node)?;
    Ok(true)
}

fn sym_int(value: ValueId) -> Argument {
    Argument::SymInt(SymInt::Value(value))
}
