//! Hostile: never returns. Fuel (or the epoch deadline) must stop it.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default"])]
fn hostile_loop(_graph: &Graph, node: NodeId) -> Result<bool> {
    let mut x = node as u64;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}
