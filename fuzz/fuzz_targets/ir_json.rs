//! IR JSON (`hfx run x.json`, plugin self-tests): `Graph::from_json` accepts
//! only well-formed programs (ids that exist, one producer per value, reads
//! after definitions, acyclic sub-graph calls); what it accepts writes back to
//! the same JSON and survives the graph's queries and dead-code elimination.
#![no_main]

use hfx::graph::Graph;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(mut graph) = Graph::from_json(text) else { return };
    let json = graph.to_json();
    let again = Graph::from_json(&json).expect("an accepted graph reloads from its own JSON");
    assert_eq!(again.to_json(), json);
    let nodes: Vec<_> = graph.nodes().collect();
    for &node in &nodes {
        let _ = graph.node_users(node);
        let _ = graph.node_name(node);
        if let Ok(n) = graph.node(node) {
            for value in n.output_values().collect::<Vec<_>>() {
                let _ = graph.value_users(value);
            }
        }
    }
    graph.eliminate_dead_code();
    let _ = Graph::from_json(&graph.to_json()).expect("a graph after dead-code elimination reloads");
});
