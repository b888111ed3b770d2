//! What each fuzz target does with an input, shared by the libFuzzer targets
//! (`fuzz_targets/*.rs`) and the replay of seeds and saved crashers in
//! `tests/it/pt2.rs`. Any input must end in a value or an error; a panic
//! (overflow included: the fuzz build has overflow checks) is a finding.

use hfx::graph::pt2::{archive::Archive, convert, sympy, Pt2};
use hfx::graph::Graph;

/// The `.pt2` reader end to end: the zip, the schema, conversion to the IR
/// and back, the IR's JSON round trip, every weight and constant read and
/// checked, and the ONNX initializers planned from them (the part of ONNX
/// emission that reads the file; its nodes come from plugins, not run here).
pub fn pt2_open(data: &[u8]) {
    use hfx::onnx::inputs::input_roles;
    use hfx::onnx::{emit, passes, TranslationBuilder};
    let Ok(archive) = Archive::from_bytes(std::path::Path::new("fuzz.pt2"), data.to_vec()) else {
        return;
    };
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
        let again =
            Graph::from_json(&graph.to_json()).expect("a converted graph reloads from its JSON");
        assert_eq!(again.fingerprint(), graph.fingerprint());
        let roles = input_roles(program);
        let builder = TranslationBuilder::new(18);
        let parts = emit::ModelParts {
            graph: &graph,
            roles: &roles,
            weights: Some(&pt2),
            builder: &builder,
            output_names: vec![],
        };
        if let Ok(mut lowered) = emit::lower(&parts) {
            passes::run(
                &mut lowered.nodes,
                &mut lowered.initializers,
                &lowered.output_names,
                &lowered.static_shapes,
                None,
                None,
                true,
            );
            let _ = emit::plan(lowered, "fuzz", &[]);
        }
    }
}

/// IR JSON (`hfx run x.json`, plugin self-tests): `Graph::from_json` accepts
/// only well-formed programs; what it accepts writes back to the same JSON,
/// survives the graph's queries and dead-code elimination, and reloads after.
pub fn ir_json(data: &[u8]) {
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
    Graph::from_json(&graph.to_json()).expect("a graph after dead-code elimination reloads");
}

/// sympy `srepr` strings of symbolic sizes (`.pt2` tensor metadata).
pub fn sympy(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match sympy::parse(text) {
        Ok(expr) => drop(sympy::print(&expr)),
        Err(e) => assert!(!e.contains('\n'), "multi-line error: {e}"),
    }
}

/// A size guard as hfx prints it (`x.shape[1] // 4 == 2`): an expression
/// whose check an ONNX model computes, or a one-line refusal.
pub fn size_guard(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(e) = hfx::onnx::guards::parse(text) {
        assert!(!e.contains('\n'), "multi-line error: {e}");
    }
}

/// `plugin.toml`: a manifest or a one-line error.
pub fn manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(e) = hfx::plugins::manifest::Manifest::parse(text) {
        assert!(!e.contains('\n'), "multi-line error: {e}");
    }
}

/// `hfx.lock`, read as `Lock::read` does (TOML into the typed lock), compared
/// with itself and written back as `Lock::write` does.
pub fn lock(data: &[u8]) {
    use hfx::plugins::lock::Lock;
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(lock) = toml::from_str::<Lock>(text) else { return };
    assert!(lock.differences(&lock).is_empty(), "a lock differs from itself");
    let written = toml::to_string_pretty(&lock).expect("a lock read serializes");
    let again: Lock = toml::from_str(&written).expect("a written lock reads back");
    assert!(again.differences(&lock).is_empty());
}

/// The `--config` run file: TOML into `RunConfig`, as `cli::merge` reads it.
pub fn run_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = toml::from_str::<hfx::cli::RunConfig>(text);
}

/// Lines from the trace worker: `read_line_bounded` splits a byte stream into
/// lines of at most a limit, `parse_message` types each one.
pub fn worker_line(data: &[u8]) {
    use hfx::trace::protocol::{parse_message, read_line_bounded, Incoming};
    // A small reader buffer and limit, so long lines and split reads happen.
    let mut reader = std::io::BufReader::with_capacity(7, data);
    while let Ok(Some(incoming)) = read_line_bounded(&mut reader, 4096) {
        match incoming {
            Incoming::Line(line) => {
                assert!(line.len() <= 4096);
                let _ = parse_message(&line);
            }
            Incoming::TooLong(_) => break,
            _ => {}
        }
    }
}

/// A component's `hfx:plugin-meta` section, read as loading reads it (any
/// bytes as a WebAssembly binary): the declaration, nothing, or a one-line error.
pub fn plugin_meta(data: &[u8]) {
    if let Err(e) = hfx::plugins::manifest::ComponentMeta::read(data) {
        assert!(!e.contains('\n'), "multi-line error: {e}");
    }
}

/// A plugin's self-test case, read as `hfx plugins test` reads it; a piece
/// cut from its graph (`hfx plugins capture`'s cut) reloads.
pub fn selftest_case(data: &[u8]) {
    use hfx::graph::Graph;
    let Ok(text) = std::str::from_utf8(data) else { return };
    // A patch plugin's case: read, never a panic.
    let _ = serde_json::from_str::<hfx::selftest::patch::PatchCase>(text);
    let Ok(case) = serde_json::from_str::<hfx::selftest::Case>(text) else { return };
    let Ok(graph) = Graph::from_json(&case.input.to_string()) else { return };
    let first: Vec<_> =
        graph.nodes().filter(|&n| graph.node(n).is_ok_and(|n| n.subgraph == 0)).take(2).collect();
    if let Ok(cut) = graph.cut(&graph.neighbourhood(&first, 1)) {
        Graph::from_json(&cut.program.to_json()).expect("a cut piece reloads");
    }
}

/// The contract's host functions (`graph`, `builder`, `model`) called with
/// whatever a hostile guest could pass: counts up to `u32::MAX`, identifiers
/// and lists up to what one host call may lift. Each call is bounded before
/// the host allocates; a trapped call rolls back to exactly what was lent.
pub fn host_calls(data: &[u8]) {
    hfx::plugins::sandbox::host_calls::drive(data);
}

/// Every target by name, for replays.
/// The side-weights index (`<archive>.weights.json`: the trace worker's, a
/// `--trace-cache` entry's) attached to a real archive whose weights it
/// places: whatever it holds ends in a value or an error, it reaches no file
/// but its own side file and the checkpoint it is given, and what it
/// accepts reads (converted where it says), writes and indexes again
/// without a panic. `$CHECKPOINT` in an input stands for the checkpoint's
/// path, which is made for each input.
pub fn side_weights(data: &[u8]) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: &[u8] = include_bytes!("seeds/pt2_open/small_static.pt2");
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "hfx-fuzz-side-weights-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let side = dir.join("p.pt2.weights");
    let checkpoint = dir.join("model.safetensors");
    let index =
        String::from_utf8_lossy(data).replace("$CHECKPOINT", &checkpoint.display().to_string());
    let written = std::fs::write(&side, &SEED[..SEED.len().min(4096)])
        .and_then(|_| std::fs::write(&checkpoint, SEED))
        .and_then(|_| std::fs::write(dir.join("p.pt2.weights.json"), index));
    if written.is_ok() {
        let archive = Archive::from_bytes(std::path::Path::new("fuzz.pt2"), SEED.to_vec())
            .expect("the seed archive reads");
        let mut pt2 = Pt2::read(archive).expect("the seed archive parses");
        if pt2.attach_side_weights(&side, std::slice::from_ref(&checkpoint)).is_ok() {
            let named: Vec<(String, String)> = pt2
                .weights
                .iter()
                .chain(&pt2.constants)
                .flat_map(|(m, c)| c.config.keys().map(move |f| (m.clone(), f.clone())))
                .collect();
            for (model, fqn) in &named {
                let _ = pt2.weight_source(model, fqn);
                let _ = pt2.constant_source(model, fqn);
                if let Ok(Some(bytes)) = pt2.weight(model, fqn) {
                    let _ = pt2.origin(bytes);
                }
            }
            let programs = pt2.programs.clone();
            let _ = pt2.write(&dir.join("out.pt2"), &programs);
            let _ = pt2.write_indexed(&dir.join("indexed.pt2"), &programs);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An OpenVINO IR's XML as the worker saved it, its weight `hfx.weight.0`
/// made a constant (`openvino::ir`, which reads what the conversion wrote):
/// a value or an error, and an IR it rewrote reads again.
pub fn openvino_ir(data: &[u8]) {
    use hfx::openvino::ir::{weights_as_constants, WeightInput};
    let weight =
        WeightInput { name: "hfx.weight.0", constant: "embed.weight", offset: 64, size: 128 };
    if let Ok(rewritten) = weights_as_constants(data, &[weight], 4096) {
        assert!(
            weights_as_constants(&rewritten, &[], 0).is_ok(),
            "a rewritten IR does not read again"
        );
    }
}

/// A fuzz target: its name and the body that takes one input.
pub type Target = (&'static str, fn(&[u8]));

pub const TARGETS: &[Target] = &[
    ("pt2_open", pt2_open),
    ("ir_json", ir_json),
    ("sympy", sympy),
    ("size_guard", size_guard),
    ("manifest", manifest),
    ("lock", lock),
    ("run_config", run_config),
    ("worker_line", worker_line),
    ("plugin_meta", plugin_meta),
    ("selftest_case", selftest_case),
    ("side_weights", side_weights),
    ("host_calls", host_calls),
    ("openvino_ir", openvino_ir),
];
