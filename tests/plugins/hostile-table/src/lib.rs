//! Hostile: mutates the graph, then grows its function table by 100000
//! elements with `table.grow` (inline wasm: Rust has no intrinsic for it; the
//! table is growable, see build.rs). Table elements live outside linear
//! memory, so the memory cap does not see them: the host's table cap must
//! refuse the growth, naming the cap, and the mutation must be rolled back.
#![cfg_attr(target_arch = "wasm32", feature(asm_experimental_arch))]

use hfx_sdk::prelude::*;

/// `table.grow` on the function table by `n` null references; the previous
/// size, or -1 when the growth is refused softly.
#[cfg(target_arch = "wasm32")]
fn table_grow(n: i32) -> i32 {
    let previous: i32;
    // SAFETY: grows the table with null references; nothing reads them.
    unsafe {
        core::arch::asm!(
            ".tabletype __indirect_function_table, funcref",
            "ref.null_func",
            "local.get {n}",
            "table.grow __indirect_function_table",
            "local.set {previous}",
            n = in(local) n,
            previous = lateout(local) previous,
        );
    }
    previous
}

#[cfg(not(target_arch = "wasm32"))]
fn table_grow(_n: i32) -> i32 {
    -1
}

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default"])]
fn hostile_table(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    graph.replace_with_call(
        node,
        "aten.neg.default",
        vec![positional("self", Argument::Tensor(input))],
    )?;
    if table_grow(100_000) < 0 {
        return Err(error("table.grow of 100000 elements was refused softly", Some(node)));
    }
    Ok(true)
}
