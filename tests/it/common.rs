//! Shared helpers of the end-to-end tests: where things are, and graphs shaped
//! like the ones torch.export produces for the patterns under test.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use hfx::graph::{
    Argument, Dim, Graph, NamedArgument, NodeId, OutputDecl, Sym, TensorMeta, ValueId, ValueMeta,
};
pub use hfx::plugins::kind;
use hfx::plugins::{self, discover, Kind, Limits, Plugin, PluginOf, Runtime, RuntimeOptions};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A plugin folder of the repository; its component must have been built.
pub fn plugin_dir(relative: &str) -> PathBuf {
    let dir = root().join(relative);
    let manifest = std::fs::read_to_string(dir.join("plugin.toml")).unwrap();
    // `plugin.wasm` unless the manifest names another file.
    let component = manifest
        .lines()
        .find_map(|l| l.strip_prefix("component = "))
        .map_or("plugin.wasm", |c| c.trim_matches('"'))
        .to_string();
    assert!(
        dir.join(&component).exists(),
        "{} is not built: run `cargo xtask build-plugins` (or `cargo xtask test`)",
        dir.join(component).display()
    );
    dir
}

/// The Python with torch and transformers (`cargo xtask setup-python` makes `.venv`).
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("HFX_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = root().join(".venv/bin/python");
    assert!(venv.exists(), "{} missing: run `cargo xtask setup-python`", venv.display());
    venv
}

/// Runs `hfx ARGS --python <the venv's python>` in `dir`, with the tests'
/// Python modules (`tests/python`) importable by `--model-fn` and the
/// compiled-component cache shared between tests.
pub fn hfx_with_python(dir: &Path, args: &[&str]) -> std::process::Output {
    let python = python();
    std::process::Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(args)
        .args(["--python", python.to_str().unwrap()])
        .current_dir(dir)
        .env("PYTHONPATH", root().join("tests/python"))
        .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
        .output()
        .unwrap()
}

/// `--set k=v,...` as the JSON object the Python checks take.
pub fn overrides_json(set: &str) -> String {
    let pairs: Vec<String> = set
        .split(',')
        .map(|kv| kv.split_once('=').unwrap())
        .map(|(k, v)| format!("\"{k}\": \"{v}\""))
        .collect();
    format!("{{{}}}", pairs.join(", "))
}

/// Fails when hfx left a scratch folder (`.hfx-*`) in `dir`.
pub fn assert_no_scratch_left(dir: &Path) {
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(".hfx"))
        .collect();
    assert!(leftovers.is_empty(), "scratch folders left behind: {leftovers:?}");
}

/// Runs `tests/python/<script>` with `args`; fails the test with its stderr.
pub fn run_python(script: &str, args: &[&str]) {
    let out = std::process::Command::new(python())
        .arg(root().join("tests/python").join(script))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{script} {args:?}:\n{}", String::from_utf8_lossy(&out.stderr));
}

pub fn runtime() -> Runtime {
    runtime_with(Limits::default())
}

pub fn runtime_with(limits: Limits) -> Runtime {
    Runtime::new(RuntimeOptions { limits, cache_dir: None }).unwrap()
}

pub fn load(runtime: &Runtime, relative: &str) -> Plugin {
    let mut all = plugins::load_all(runtime, &[plugin_dir(relative)]).unwrap();
    assert_eq!(all.len(), 1);
    all.remove(0)
}

pub fn discover_one(dir: &Path) -> Result<discover::Discovered, plugins::LoadError> {
    let mut found = discover::discover(dir)?;
    assert_eq!(found.len(), 1, "expected one plugin below {}", dir.display());
    found.remove(0)
}

pub fn f32_meta(shape: &[Dim]) -> TensorMeta {
    TensorMeta::new("float32", shape.to_vec())
}

pub fn meta(dtype: &str, shape: &[Dim]) -> TensorMeta {
    TensorMeta::new(dtype, shape.to_vec())
}

pub fn batch_by_8() -> Vec<Dim> {
    vec![Dim::Symbolic("s0".into()), Dim::Fixed(8)]
}

pub fn pos(name: &str, value: Argument) -> NamedArgument {
    NamedArgument::positional(name, value)
}

pub fn kw(name: &str, value: Argument) -> NamedArgument {
    NamedArgument::keyword(name, value)
}

pub fn first_output(graph: &Graph, node: NodeId) -> ValueId {
    graph.node(node).unwrap().output_values().next().unwrap()
}

/// `y = relu(x); z = add(y, x); w = mul(z, 2.0)`: three ops, one declared by the test fixes.
pub fn relu_add_mul() -> (Graph, [NodeId; 3]) {
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(f32_meta(&batch_by_8())));
    let t = || vec![OutputDecl::Tensor(f32_meta(&batch_by_8()))];
    let relu =
        g.push_node(0, "aten.relu.default", vec![pos("self", Argument::Tensor(x))], t()).unwrap();
    let y = first_output(&g, relu);
    let add = g
        .push_node(
            0,
            "aten.add.Tensor",
            vec![pos("self", Argument::Tensor(y)), pos("other", Argument::Tensor(x))],
            t(),
        )
        .unwrap();
    let z = first_output(&g, add);
    let mul = g
        .push_node(
            0,
            "aten.mul.Tensor",
            vec![pos("self", Argument::Tensor(z)), pos("other", Argument::Float(2.0))],
            t(),
        )
        .unwrap();
    let w = first_output(&g, mul);
    g.set_outputs(0, vec![Argument::Tensor(w)]).unwrap();
    (g, [relu, add, mul])
}

/// `x[..., :] = ...` style chain as torch.export records it: `alias → mul`.
pub fn alias_graph() -> (Graph, NodeId) {
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(f32_meta(&batch_by_8())));
    let alias = g
        .push_node(
            0,
            "aten.alias.default",
            vec![pos("self", Argument::Tensor(x))],
            vec![OutputDecl::Tensor(f32_meta(&batch_by_8()))],
        )
        .unwrap();
    let a = first_output(&g, alias);
    let mul = g
        .push_node(
            0,
            "aten.mul.Tensor",
            vec![pos("self", Argument::Tensor(a)), pos("other", Argument::Float(2.0))],
            vec![OutputDecl::Tensor(f32_meta(&batch_by_8()))],
        )
        .unwrap();
    g.set_outputs(0, vec![Argument::Tensor(first_output(&g, mul))]).unwrap();
    (g, alias)
}

/// `torch.sort(x, stable=True, descending=True)`; both outputs are graph outputs.
pub fn sort_stable_graph() -> (Graph, NodeId) {
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(f32_meta(&batch_by_8())));
    let sort = g
        .push_node(
            0,
            "aten.sort.stable",
            vec![
                pos("self", Argument::Tensor(x)),
                kw("stable", Argument::Bool(true)),
                kw("dim", Argument::Int(1)),
                kw("descending", Argument::Bool(true)),
            ],
            vec![
                OutputDecl::Tensor(f32_meta(&batch_by_8())),
                OutputDecl::Tensor(meta("int64", &batch_by_8())),
            ],
        )
        .unwrap();
    let outs: Vec<Argument> = g.node(sort).unwrap().outputs.clone();
    g.set_outputs(0, outs).unwrap();
    (g, sort)
}

/// What a dynamic-batch trace leaves behind: `sym_size → ge → _assert_scalar`,
/// plus `_assert_tensor_metadata` and `sym_constrain_range_for_size`.
pub fn assertion_graph() -> Graph {
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(f32_meta(&batch_by_8())));
    let s0 = push_batch_assert(&mut g, x);
    g.push_node(
        0,
        "aten._assert_tensor_metadata.default",
        vec![pos("a", Argument::Tensor(x)), kw("dtype", Argument::Dtype("float32".into()))],
        vec![OutputDecl::None],
    )
    .unwrap();
    g.push_node(
        0,
        "aten.sym_constrain_range_for_size.default",
        vec![pos("size", Argument::SymInt(Sym::Value(s0))), kw("min", Argument::Int(2))],
        vec![OutputDecl::None],
    )
    .unwrap();
    let add = g
        .push_node(
            0,
            "aten.add.Tensor",
            vec![pos("self", Argument::Tensor(x)), pos("other", Argument::Tensor(x))],
            vec![OutputDecl::Tensor(f32_meta(&batch_by_8()))],
        )
        .unwrap();
    g.set_outputs(0, vec![Argument::Tensor(first_output(&g, add))]).unwrap();
    g
}

/// `s0 = sym_size(x, 0); _assert_scalar(s0 >= 2)`, as a dynamic batch leaves it. Returns `s0`.
fn push_batch_assert(g: &mut Graph, x: ValueId) -> ValueId {
    let size = g
        .push_node(
            0,
            "aten.sym_size.int",
            vec![pos("self", Argument::Tensor(x)), pos("dim", Argument::Int(0))],
            vec![OutputDecl::SymInt("s0".into())],
        )
        .unwrap();
    let s0 = first_output(g, size);
    let ge = g
        .push_node(
            0,
            "_operator.ge",
            vec![pos("a", Argument::SymInt(Sym::Value(s0))), pos("b", Argument::Int(2))],
            vec![OutputDecl::SymBool("s0 >= 2".into())],
        )
        .unwrap();
    let ok = first_output(g, ge);
    g.push_node(
        0,
        "aten._assert_scalar.default",
        vec![
            pos("self", Argument::SymBool(Sym::Value(ok))),
            pos(
                "assert_msg",
                Argument::Str("Runtime assertion failed for expression s0 >= 2".into()),
            ),
        ],
        vec![OutputDecl::None],
    )
    .unwrap();
    s0
}

pub fn targets(graph: &Graph) -> Vec<String> {
    graph.nodes().map(|n| graph.node(n).unwrap().target.clone()).collect()
}

/// The README's example: one dynamic-batch graph with the three patterns the
/// first ONNX fixes handle (alias, stable sort, runtime asserts).
pub fn example_graph() -> Graph {
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(f32_meta(&batch_by_8())));
    push_batch_assert(&mut g, x);
    let alias = g
        .push_node(
            0,
            "aten.alias.default",
            vec![pos("self", Argument::Tensor(x))],
            vec![OutputDecl::Tensor(f32_meta(&batch_by_8()))],
        )
        .unwrap();
    let a = first_output(&g, alias);
    let sort = g
        .push_node(
            0,
            "aten.sort.stable",
            vec![
                pos("self", Argument::Tensor(a)),
                kw("stable", Argument::Bool(true)),
                kw("dim", Argument::Int(-1)),
                kw("descending", Argument::Bool(true)),
            ],
            vec![
                OutputDecl::Tensor(f32_meta(&batch_by_8())),
                OutputDecl::Tensor(meta("int64", &batch_by_8())),
            ],
        )
        .unwrap();
    let outs = g.node(sort).unwrap().outputs.clone();
    g.set_outputs(0, outs).unwrap();
    g.set_range_constraint("s0", hfx::graph::RangeConstraint { min: 2, max: None }).unwrap();
    g
}

/// Runs `tests/python/<script>` with `args`: its stdout, or its stderr (the
/// last lines) when it fails. For checks a negative control expects to fail.
pub fn try_python(script: &str, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(python())
        .arg(root().join("tests/python").join(script))
        .args(args)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        Err(format!("{script} {args:?}: {}", tail.into_iter().rev().collect::<Vec<_>>().join("\n")))
    }
}

/// A fixture a Python script builds: `tests/python/<script> target/<folder>`
/// rebuilds the folder and prints JSON about it, returned parsed with the
/// folder. Callers keep it in a `OnceLock`: the script runs once per test binary.
pub fn python_fixture<T: serde::de::DeserializeOwned>(script: &str, folder: &str) -> (PathBuf, T) {
    let folder = root().join("target").join(folder);
    let printed = try_python(script, &[folder.to_str().unwrap()]).unwrap_or_else(|e| panic!("{e}"));
    let parsed = serde_json::from_str(&printed)
        .unwrap_or_else(|e| panic!("{script} printed no JSON: {e}:\n{printed}"));
    (folder, parsed)
}

/// A model folder of `kind` (`tests/python/model_folders.py`, as
/// `save_pretrained` writes it) copied to `dir/<kind>`. The script is seeded,
/// so every test would write the same files: it runs once per kind and test
/// binary, into `target/model-folders/`, and each test gets its own copy to
/// change.
pub fn model_folder(kind: &str, dir: &Path) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static BUILT: OnceLock<Mutex<HashMap<String, Arc<OnceLock<PathBuf>>>>> = OnceLock::new();
    let once =
        BUILT.get_or_init(Default::default).lock().unwrap().entry(kind.into()).or_default().clone();
    let built = once.get_or_init(|| {
        let folder = root().join("target/model-folders").join(kind);
        // A folder an earlier run left may come from an older script.
        let _ = std::fs::remove_dir_all(&folder);
        run_python("model_folders.py", &[kind, folder.to_str().unwrap()]);
        folder
    });
    let copy = dir.join(kind);
    copy_folder(built, &copy);
    copy
}

pub fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_folder(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The stdout of a run that must succeed (else the test fails with its stderr).
pub fn succeeded(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The one line of error of a run that must fail.
pub fn one_line_error(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    assert!(!out.status.success(), "succeeded: {}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(stderr.lines().count(), 1, "not one line:\n{stderr}");
    stderr
}

/// `plugin` as one of kind `K`: the kind the test loaded it for.
pub fn of<K: Kind>(plugin: &Plugin) -> PluginOf<'_, K> {
    plugin
        .of_kind::<K>()
        .unwrap_or_else(|| panic!("`{}` is a {} plugin", plugin.name(), plugin.kind()))
}

/// Tiny random configs (`--set`) of the architectures several modules export.
pub mod tiny {
    pub const LLAMA: &str = "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,max_position_embeddings=64";
    pub const QWEN3: &str = "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,head_dim=8,max_position_embeddings=64";
    pub const GEMMA: &str = QWEN3;
    pub const GPT2: &str = "vocab_size=128,n_embd=32,n_layer=2,n_head=4,n_positions=64";
    pub const BERT: &str = "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,max_position_embeddings=64";
    pub const VIT: &str = "image_size=32,patch_size=8,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4";
    pub const PHI3: &str = "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,max_position_embeddings=64,pad_token_id=0";
    pub const WHISPER: &str = "vocab_size=128,d_model=32,encoder_layers=2,decoder_layers=2,encoder_attention_heads=4,decoder_attention_heads=4,encoder_ffn_dim=64,decoder_ffn_dim=64,num_mel_bins=16,max_source_positions=16,max_target_positions=32";
    pub const T5: &str =
        "vocab_size=128,d_model=32,d_kv=8,d_ff=64,num_layers=2,num_decoder_layers=2,num_heads=4";
}
