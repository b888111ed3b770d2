//! Hostile: grows memory without end. The memory cap must stop it.

use hfx_sdk::prelude::*;

struct Hog;

impl Guest for Hog {
    fn describe() -> Vec<String> {
        targets(&["aten.relu.default"])
    }

    fn apply(_graph: &Graph, _node: NodeId) -> Result<bool, Error> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

hfx_sdk::register_fx_node_fix!(Hog);
