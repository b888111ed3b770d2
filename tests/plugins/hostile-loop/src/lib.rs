//! Hostile: never returns. Fuel (or the epoch deadline) must stop it.

use hfx_sdk::prelude::*;

struct Spin;

impl Guest for Spin {
    fn describe() -> Vec<String> {
        targets(&["aten.relu.default"])
    }

    fn apply(_graph: &Graph, node: NodeId) -> Result<bool, Error> {
        let mut x = node as u64;
        loop {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

hfx_sdk::register_fx_node_fix!(Spin);
