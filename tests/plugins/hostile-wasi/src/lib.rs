//! Hostile: imports a WASI clock. No WASI is linked, so the host must refuse
//! the component at load time with an error naming the import.

wit_bindgen::generate!({ path: "wit", world: "test:hostile/wasi-node-fix", generate_all });

struct ReadsTheClock;

impl Guest for ReadsTheClock {
    fn describe() -> Vec<String> {
        vec!["aten.relu.default".into()]
    }

    fn apply(_graph: &Graph, _node: NodeId) -> Result<bool, Error> {
        let now = wasi::clocks::wall_clock::now();
        Ok(now.seconds % 2 == 0)
    }
}

export!(ReadsTheClock);
