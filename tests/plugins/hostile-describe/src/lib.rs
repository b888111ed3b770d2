//! Hostile: `describe` answers a 1 MiB target name. The host must refuse the
//! plugin at load, naming the size cap of `describe`.

use hfx_sdk::prelude::*;

struct Name;

impl Guest for Name {
    fn describe() -> Vec<String> {
        vec!["aten.relu.default".into(), "aten.".repeat((1 << 20) / 5)]
    }

    fn apply(_graph: &Graph, _node: NodeId) -> Result<bool> {
        Ok(false)
    }
}

hfx_sdk::register_fx_node_fix!(Name);
