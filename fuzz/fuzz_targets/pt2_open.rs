//! The `.pt2` reader end to end: the zip, the schema, conversion to the IR
//! and back, the IR's JSON round trip, every weight and constant read and
//! checked, and the ONNX initializers planned from them (the part of ONNX
//! emission that reads the file; the nodes come from plugins, not run here).
//! Any input must give a program or an error, never a panic.
//!
//!     cargo xtask fuzz --seconds 600 pt2_open
#![no_main]

use hfx::graph::pt2::{archive::Archive, convert, Pt2};
use hfx::graph::Graph;
use hfx::onnx::{emit, TranslationBuilder};
use hfx::stages::onnx_translation::input_roles;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(archive) = Archive::from_bytes(std::path::Path::new("fuzz.pt2"), data.to_vec()) else { return };
    let Ok(pt2) = Pt2::read(archive) else { return };
    let _ = pt2.check_payloads();
    for (model, config) in pt2.weights.iter().chain(&pt2.constants) {
        for fqn in config.config.keys() {
            let _ = pt2.weight(model, fqn);
            let _ = pt2.constant(model, fqn);
        }
    }
    for program in pt2.programs.values() {
        let Ok(graph) = convert::to_ir(program) else { continue };
        let _ = convert::from_ir(&graph, program);
        let again = Graph::from_json(&graph.to_json()).expect("a converted graph reloads from its JSON");
        assert_eq!(again.fingerprint(), graph.fingerprint());
        let roles = input_roles(program);
        let builder = TranslationBuilder::new(18);
        let parts = emit::ModelParts {
            graph: &graph,
            roles: &roles,
            pt2: &pt2,
            builder: &builder,
            metadata: vec![],
            graph_name: "fuzz".into(),
            output_names: vec![],
            optimize: true,
        };
        let _ = emit::plan(&parts);
    }
});
