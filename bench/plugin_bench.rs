//! Plugin platform benchmark (not a test): per-call cost of a node fix across
//! the component boundary, and component load time cold vs cached.
//!
//!     cargo xtask build-plugins && cargo run --release -p hfx-bench
//!
//! Targets (issue 2): a node-fix call that reads a node and replaces it
//! ≤ 10 µs; loading a cached component ≤ 2 ms; compiling a typical plugin
//! cold ≤ 100 ms.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hfx::graph::{Argument, Dim, Graph, NamedArgument, NodeId, OutputDecl, TensorMeta, ValueMeta};
use hfx::plugins::{cache::CacheOutcome, discover, kind, Runtime, RuntimeOptions, Session};
use hfx::stages::{fx_node_fix, OnPluginError};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A chain `x → relu → relu → …` of `n` nodes.
fn relu_chain(n: usize) -> (Graph, Vec<NodeId>) {
    let meta = TensorMeta::new("float32", vec![Dim::Symbolic("s0".into()), Dim::Fixed(64)]);
    let mut g = Graph::new();
    let mut prev = g.add_input(0, "x", ValueMeta::Tensor(meta.clone()));
    let mut nodes = Vec::with_capacity(n);
    for _ in 0..n {
        let id = g
            .push_node(
                0,
                "aten.relu.default",
                vec![NamedArgument::positional("self", Argument::Tensor(prev))],
                vec![OutputDecl::Tensor(meta.clone())],
            )
            .unwrap();
        prev = g.node(id).unwrap().output_values().next().unwrap();
        nodes.push(id);
    }
    g.set_outputs(0, vec![Argument::Tensor(prev)]).unwrap();
    (g, nodes)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

fn main() -> Result<()> {
    let plugin_dir = root().join("tests/plugins/kind-node-fix");
    let found = discover::discover(&plugin_dir)?
        .remove(0)
        .context("run `cargo xtask build-plugins` first")?;
    let cache = tempfile::tempdir()?;

    // ── Load: cold compile vs cached ──
    let mut cold = Vec::new();
    for _ in 0..5 {
        let runtime = Runtime::new(RuntimeOptions { cache_dir: None, ..Default::default() })?;
        let t = Instant::now();
        let plugin = runtime.load(&found)?;
        cold.push(micros(t.elapsed()));
        assert_eq!(plugin.cache, CacheOutcome::Compiled);
    }
    let runtime = Runtime::new(RuntimeOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..Default::default()
    })?;
    runtime.load(&found)?; // fills the cache
    let mut cached = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let plugin = runtime.load(&found)?;
        cached.push(micros(t.elapsed()));
        assert_eq!(plugin.cache, CacheOutcome::Hit);
    }
    let loaded = runtime.load(&found)?;
    let plugin =
        loaded.of_kind::<kind::FxNodeFix>().context("the benchmark plugin is an fx-node-fix")?;

    // ── Calls: read a node and replace it (relu → clamp_min), and a declined call ──
    let n = 2000;
    let mut replace = Vec::new();
    let mut stage = Vec::new();
    for _ in 0..5 {
        let (mut graph, nodes) = relu_chain(n);
        let mut session = Session::new(&runtime, plugin, "bench");
        session.fx_node_fix(&mut graph, nodes[0])?; // instantiate outside the timing
        let t = Instant::now();
        for &node in &nodes[1..] {
            assert!(session.fx_node_fix(&mut graph, node)?);
        }
        replace.push(micros(t.elapsed()) / (n - 1) as f64);

        let (mut graph, _) = relu_chain(n);
        let t = Instant::now();
        fx_node_fix::run(&runtime, &[plugin], &mut graph, "bench", OnPluginError::Fail)?;
        stage.push(micros(t.elapsed()) / n as f64);
    }

    // Host-side cost of the same rewrite without the boundary, for the ratio.
    let mut native = Vec::new();
    for _ in 0..5 {
        let (mut graph, nodes) = relu_chain(n);
        let t = Instant::now();
        for &node in &nodes {
            let input = graph.node(node)?.inputs.clone();
            let output = graph.node(node)?.output_values().next().unwrap();
            let meta = match &graph.value(output)?.meta {
                ValueMeta::Tensor(m) => m.clone(),
                _ => unreachable!(),
            };
            let mut inputs = input;
            inputs.push(NamedArgument::positional("min", Argument::Int(0)));
            graph.begin();
            let new = graph.insert_before(
                node,
                "aten.clamp_min.default",
                inputs,
                vec![OutputDecl::Tensor(meta)],
            )?;
            let new_out = graph.node(new)?.output_values().next().unwrap();
            graph.replace_uses(output, hfx::graph::Replacement::Value(new_out))?;
            graph.erase(node)?;
            graph.commit();
        }
        native.push(micros(t.elapsed()) / n as f64);
    }

    let (cold, cached, replace, stage, native) =
        (median(cold), median(cached), median(replace), median(stage), median(native));
    println!("plugin: {} ({} bytes component)", plugin.name(), found.component.len());
    println!(
        "load, cold compile (no cache)      {:>9.1} µs   target ≤ 100000 µs   ({:.2}x of target)",
        cold,
        cold / 100_000.0
    );
    println!(
        "load, cached (verified + deser.)   {:>9.1} µs   target ≤   2000 µs   ({:.2}x of target)",
        cached,
        cached / 2_000.0
    );
    println!(
        "node-fix call, read + replace      {:>9.2} µs   target ≤     10 µs   ({:.2}x of target)",
        replace,
        replace / 10.0
    );
    println!(
        "  same rewrite in the host, no wasm {:>8.2} µs   (boundary overhead {:.1}x)",
        native,
        replace / native
    );
    println!(
        "fx-node-fix stage per node (incl. instantiation, DCE) {:.2} µs on a {n}-node chain",
        stage
    );
    Ok(())
}
