//! Self-tests a plugin ships: `selftest/*.json` in its folder. A case is a
//! piece of a real traced program, cut out around the nodes the plugin
//! targets by `hfx plugins capture` (`capture.rs`), with the values that
//! flowed into it there, and optionally what the stage must leave:
//!
//! ```json
//! { "about": "llama (hfx plugins capture --node aten.alias.default)",
//!   "input": { ...the piece, in the IR's JSON form... },
//!   "values": { "x": {"tensor": {"dtype": "float32", "shape": [2, 8], "data": "<base64>"}},
//!               "sym_size_int": {"int": 2} },
//!   "expect-targets": ["aten.mul.Tensor"],
//!   "expect-ranges": { "s0": [2, 4096] } }
//! ```
//!
//! Each case runs the plugin through its real stage (a translation or IR fix
//! with the set's translations filling in the piece's other nodes) and must see it act
//! (a fix changes the piece, a translation translates a node of it, an IR fix
//! changes an ONNX node of the piece's translation by the set's translations):
//! a case that does not exercise its plugin fails. With `values`, `hfx plugins test`
//! also checks the result in the worker: the piece after a fix against the
//! piece before, both in the worker's interpreter; a translation's ONNX model
//! in ONNX Runtime against the piece in PyTorch; each within its check's
//! tolerance, or float16's for a piece that computes in float16 (`tolerance`).
//! `hfx plugins verify` runs the structural half only (no Python). A patch
//! plugin's case is a model to trace with the patch and without it instead
//! (`patch.rs`).

pub mod capture;
pub mod ops;
pub mod patch;

use std::collections::BTreeMap;
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use hfx_dtype::DType;
use serde::{Deserialize, Serialize};

use crate::graph::{Graph, RangeConstraint, ValueMeta};
use crate::onnx::inputs::InputRole;
use crate::plugins::kind::{self, Typed};
use crate::plugins::{LoadError, Plugin, PluginOf, Runtime};
use crate::stages::{fx_node_fix, fx_program_fix, onnx_ir_fix, onnx_translation, OnPluginError};
use crate::trace::protocol::{Candidate, CaseValue, Comparison, RunCase};
use crate::trace::Worker;

const FOLDER: &str = "selftest";
/// A self-test case larger than this is refused before it is read.
pub const MAX_CASE_BYTES: u64 = 4 << 20;
/// A fix must leave the piece computing the same: float round-off only.
const FIX_TOLERANCE: f64 = 1e-4;
/// A translation against PyTorch, as `--verify` checks a model.
const TRANSLATION_TOLERANCE: f64 = 1e-3;
/// A piece computing in float16, either check. float16 keeps 11 significant
/// bits (~3 decimal digits): one rounding step is 2.4e-4 at |x| in [0.25, 0.5)
/// and 9.8e-4 in [1, 2), beyond a fix's 1e-4 there and as much as `--verify`'s
/// 1e-3 holds absolutely. fuse-group-query-attention's float16 cases are off
/// by one step (decode 2.4e-4, prefill 9.8e-4; in float32 2.4e-7), and a wider
/// reduction rounds more: 1e-2 leaves ten steps at |x| ~ 1, as `hfx plugins
/// test-ops` holds float16 samples.
const FLOAT16_TOLERANCE: f64 = 1e-2;
/// The opset a translation case is emitted at.
const CASE_OPSET: u32 = 18;
const CASE_DEADLINE: Duration = Duration::from_secs(120);

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Case {
    /// Where the piece comes from (informative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<String>,
    pub input: serde_json::Value,
    /// The values at the piece's inputs, by name; without them the case is structural only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, CaseValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_targets: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub expect_ranges: BTreeMap<String, (i64, Option<i64>)>,
}

/// What a case's result is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compared {
    /// A fix's piece with the piece before it, both in the worker's interpreter.
    Piece,
    /// An ONNX model (a translation's, or the piece translated and IR-fixed) in
    /// ONNX Runtime with the piece in PyTorch.
    OnnxRuntime,
}

/// The atol/rtol of a case: its check's, unless the dtype the piece computes
/// in rounds coarser. bfloat16 and the float8 formats keep their check's: no
/// case of them has measured its own.
fn tolerance(compared: Compared, dtype: DType) -> f64 {
    let check = match compared {
        Compared::Piece => FIX_TOLERANCE,
        Compared::OnnxRuntime => TRANSLATION_TOLERANCE,
    };
    match dtype {
        DType::Float16 => check.max(FLOAT16_TOLERANCE),
        _ => check,
    }
}

/// The float dtype `graph` computes in: the least precise of its tensor values'
/// (inputs, intermediates, outputs), float32 when it holds no float tensor.
fn computes_in(graph: &Graph) -> DType {
    /// Significand bits, the implicit one included: what a float dtype tells apart.
    fn significand_bits(dtype: DType) -> u32 {
        match dtype {
            DType::Float64 => 53,
            DType::Float32 => 24,
            DType::Float16 => 11,
            DType::Bfloat16 => 8,
            DType::Float8E4m3fn | DType::Float8E4m3fnuz => 4,
            DType::Float8E5m2 | DType::Float8E5m2fnuz => 3,
            _ => 1,
        }
    }
    let inputs = (0..)
        .map_while(|index| graph.subgraph(index).ok())
        .flat_map(|subgraph| subgraph.inputs.iter().copied());
    let outputs =
        graph.nodes().filter_map(|n| graph.node(n).ok()).flat_map(|node| node.output_values());
    inputs
        .chain(outputs)
        .filter_map(|v| match &graph.value(v).ok()?.meta {
            ValueMeta::Tensor(tensor) => DType::from_name(&tensor.dtype),
            _ => None,
        })
        .filter(|dtype| dtype.is_floating())
        .min_by_key(|&dtype| significand_bits(dtype))
        .unwrap_or(DType::Float32)
}

/// What a case says it was held to: `atol/rtol 1e-3`, `float16's atol/rtol 1e-2`.
fn held_to(compared: Compared, dtype: DType) -> String {
    let held = tolerance(compared, dtype);
    if held == tolerance(compared, DType::Float32) {
        format!("atol/rtol {held:e}")
    } else {
        format!("{}'s atol/rtol {held:e}", dtype.name())
    }
}

/// How far a run checks: the structure only, or numerically too, in a worker.
pub enum Depth<'w> {
    Structural,
    Numeric(&'w mut Worker),
}

#[derive(Debug)]
pub struct Outcome {
    pub case: String,
    /// What the case checked, when it passed (`2 nodes changed; max abs error 0`).
    pub passed: Option<String>,
    /// None when the case passed.
    pub failure: Option<String>,
}

/// The case files of `plugin`, sorted; none when it has no `selftest/` folder.
/// The folder holds JSON cases only: a case is data, and anything else there
/// (a `.py` a case could try to reach, a folder) refuses the plugin's self-tests.
fn case_names(plugin: &Plugin) -> Result<Option<(Dir, Vec<String>)>, LoadError> {
    let dir = Dir::open_ambient_dir(&plugin.dir, ambient_authority())
        .map_err(|e| LoadError::new(&plugin.dir, e.to_string()))?;
    if !dir.is_dir(FOLDER) {
        return Ok(None);
    }
    let folder = plugin.dir.join(FOLDER);
    let cases = dir.open_dir(FOLDER).map_err(|e| LoadError::new(&folder, e.to_string()))?;
    let mut names = Vec::new();
    for entry in cases.entries().map_err(|e| LoadError::new(&folder, e.to_string()))? {
        let entry = entry.map_err(|e| LoadError::new(&folder, e.to_string()))?;
        let name = entry.file_name();
        match name.to_str() {
            Some(name) if name.ends_with(".json") && name.len() > ".json".len() => {
                names.push(name.to_string())
            }
            _ => {
                return Err(LoadError::new(
                    folder.join(&name),
                    format!(
                        "a self-test folder holds only `.json` cases; remove `{FOLDER}/{}`",
                        name.to_string_lossy()
                    ),
                ))
            }
        }
    }
    names.sort();
    Ok(Some((cases, names)))
}

/// Runs every self-test of `plugin` to `depth`; an unreadable case is a failure of that case.
/// `set` is the plugin set loaded with it: an ONNX IR fix's cases are
/// translated by the set's translations of its backend first.
pub fn run(
    runtime: &Runtime,
    plugin: &Plugin,
    set: &[Plugin],
    depth: &mut Depth,
) -> Result<Vec<Outcome>, LoadError> {
    let Some((cases, names)) = case_names(plugin)? else { return Ok(Vec::new()) };
    Ok(names
        .into_iter()
        .map(|name| {
            // Regular files only (a FIFO fails the case without blocking), bounded.
            let result = crate::plugins::discover::read_regular(&cases, &name, MAX_CASE_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "is not UTF-8".to_string()))
                .and_then(|text| run_case(runtime, plugin, set, &text, depth));
            let case = format!("{FOLDER}/{name}");
            match result {
                Ok(passed) => Outcome { case, passed: Some(passed), failure: None },
                Err(f) => Outcome { failure: Some(format!("{case}: {f}")), case, passed: None },
            }
        })
        .collect())
}

/// What is emitted as ONNX and checked in ONNX Runtime.
enum OnnxUnderTest<'a> {
    /// The translation under test, last (it wins the targets it shares), after
    /// the set's other translations (for the piece's other nodes).
    Translation {
        plugin: PluginOf<'a, kind::OnnxTranslation>,
        translations: Vec<PluginOf<'a, kind::OnnxTranslation>>,
    },
    IrFix {
        fix: PluginOf<'a, kind::OnnxIrFix>,
        translations: Vec<PluginOf<'a, kind::OnnxTranslation>>,
    },
}

fn run_case(
    runtime: &Runtime,
    plugin: &Plugin,
    set: &[Plugin],
    text: &str,
    depth: &mut Depth,
) -> Result<String, String> {
    let (case, mut graph, changes, dtype, candidate) = match plugin.typed() {
        Typed::Patch(patch) => {
            let case: patch::PatchCase = serde_json::from_str(text).map_err(|e| e.to_string())?;
            case.check()?;
            return match depth {
                Depth::Structural => {
                    Ok("read; a patch case is traced by `hfx plugins test`".into())
                }
                Depth::Numeric(worker) => patch::run(runtime, patch, &case, worker),
            };
        }
        Typed::FxNodeFix(fix) => {
            let (case, mut graph, changes, dtype) = piece(text)?;
            fx_node_fix::run(runtime, &[fix], &mut graph, "selftest", OnPluginError::Fail)
                .map_err(|e| e.to_string())?;
            changed(&graph, changes)?;
            (case, graph, changes, dtype, None)
        }
        Typed::FxProgramFix(fix) => {
            let (case, mut graph, changes, dtype) = piece(text)?;
            fx_program_fix::run(runtime, &[fix], &mut graph, "selftest", OnPluginError::Fail)
                .map_err(|e| e.to_string())?;
            changed(&graph, changes)?;
            (case, graph, changes, dtype, None)
        }
        Typed::OnnxTranslation(translation) => {
            let (case, graph, changes, dtype) = piece(text)?;
            let mut translations =
                crate::stages::select::<kind::OnnxTranslation>(set, crate::plugins::Backend::Onnx);
            translations.retain(|t| !std::ptr::eq(t.plugin, plugin));
            translations.push(translation);
            (
                case,
                graph,
                changes,
                dtype,
                Some(OnnxUnderTest::Translation { plugin: translation, translations }),
            )
        }
        Typed::OnnxIrFix(fix) => {
            let (case, graph, changes, dtype) = piece(text)?;
            let translations =
                crate::stages::select::<kind::OnnxTranslation>(set, crate::plugins::Backend::Onnx);
            if translations.is_empty() {
                return Err("an IR fix's case is translated first: load the onnx translations too (--plugins)".to_string());
            }
            (case, graph, changes, dtype, Some(OnnxUnderTest::IrFix { fix, translations }))
        }
    };
    if let Some(expected) = &case.expect_targets {
        let found: Vec<String> = graph
            .nodes()
            .map(|n| graph.node(n).map(|n| n.target.clone()).unwrap_or_default())
            .collect();
        if &found != expected {
            return Err(format!("expected targets {expected:?}, found {found:?}"));
        }
    }
    for (symbol, &(min, max)) in &case.expect_ranges {
        let found = graph.range_constraints().get(symbol).copied();
        if found != Some(RangeConstraint { min, max }) {
            return Err(format!("expected range of {symbol} [{min}, {max:?}], found {found:?}"));
        }
    }
    let numeric = matches!(depth, Depth::Numeric(_)) && !case.values.is_empty();
    // Only a numeric check writes (a temp folder of this process's own, removed on every exit path).
    let scratch = match depth {
        Depth::Numeric(worker) if numeric => {
            Some(worker.temp_dir(".hfx-selftest-").map_err(|e| e.to_string())?)
        }
        _ => None,
    };
    let onnx = scratch.as_ref().map(|s| s.path().join("case.onnx"));
    let (what, candidate, compared) = match candidate {
        Some(under_test) => {
            let what = emit_onnx(runtime, &under_test, &mut graph, &case.values, onnx.as_deref())?;
            (what, onnx.map(|path| Candidate::Onnx { path }), Compared::OnnxRuntime)
        }
        None => {
            let what = format!("{} graph edit(s)", graph.changes() - changes);
            (
                what,
                numeric.then(|| Candidate::Graph { program: graph.to_json_value() }),
                Compared::Piece,
            )
        }
    };
    let Depth::Numeric(worker) = depth else { return Ok(what) };
    let Some(candidate) = candidate else {
        return Ok(format!("{what}; no values: structural only"));
    };
    // The case's input is the piece before the plugin, already in JSON form.
    let request = RunCase {
        program: case.input,
        candidate,
        values: case.values,
        atol: tolerance(compared, dtype),
        rtol: tolerance(compared, dtype),
    };
    let held = held_to(compared, dtype);
    let reply = worker.request(&request, CASE_DEADLINE).map_err(|e| e.to_string())?;
    let worst = numeric_failures(&reply.outputs).map_err(|e| format!("{e}, beyond {held}"))?;
    Ok(format!(
        "{what}; max abs error {worst:.1e} on {} output(s), within {held}",
        reply.outputs.len()
    ))
}

/// The piece's parameters (inputs that require grad, as `torch.export` lifts
/// a module's weights) with a value in the case become initializers of
/// `lowered` holding it, as a run's weights are: an IR fix matching
/// constant weights (packing projections) sees them so. The worker feeds
/// the model's remaining inputs only.
fn parameters_as_weights(
    graph: &Graph,
    lowered: &mut crate::onnx::emit::Lowered,
    values: &BTreeMap<String, CaseValue>,
) -> Result<(), String> {
    let inputs = graph.subgraph(0).map_err(|e| e.to_string())?.inputs.clone();
    for input in inputs {
        let value = graph.value(input).map_err(|e| e.to_string())?;
        let ValueMeta::Tensor(meta) = &value.meta else { continue };
        let Some(CaseValue::Tensor(tensor)) = values.get(&value.name) else { continue };
        if !meta.requires_grad {
            continue;
        }
        let data_type = hfx_dtype::DType::from_name(&tensor.dtype).and_then(|d| d.onnx());
        let bytes = decode_base64(&tensor.data)
            .ok_or_else(|| format!("value `{}`: its data is not base64", value.name))?;
        lowered.inputs.retain(|i| i.name.as_deref() != Some(value.name.as_str()));
        lowered.initializers.push(crate::onnx::weights::Initializer {
            header: crate::onnx::proto::TensorProto {
                dims: tensor.shape.iter().map(|&d| d as i64).collect(),
                data_type,
                name: Some(value.name.clone()),
                ..Default::default()
            },
            bytes: crate::weights::bytes::Bytes::Owned(bytes),
        });
    }
    Ok(())
}

/// Standard base64 (padded), as the worker writes a case's values.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let text = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut count) = (0u32, 0);
    for &c in text {
        bits = (bits << 6 | u32::from(digit(c)?)) & 0xffff;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    Some(out)
}

/// The case, its piece as a graph, the graph's change count before the
/// plugin, and the float dtype the piece computes in.
fn piece(text: &str) -> Result<(Case, Graph, u64, DType), String> {
    let case: Case = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let graph = Graph::from_json(&case.input.to_string()).map_err(|e| format!("input: {e}"))?;
    let changes = graph.changes();
    let dtype = computes_in(&graph);
    Ok((case, graph, changes, dtype))
}

fn changed(graph: &Graph, before: u64) -> Result<(), String> {
    if graph.changes() == before {
        return Err("the plugin left the piece unchanged: the case does not exercise it".into());
    }
    Ok(())
}

/// The largest error, or which output is off and by how much.
fn numeric_failures(outputs: &[Comparison]) -> Result<f64, String> {
    let mut worst = 0f64;
    for (index, c) in outputs.iter().enumerate() {
        if !c.ok {
            return Err(match c.max_abs {
                _ if c.shape != c.expected_shape => format!(
                    "output {index} has shape {:?}, expected {:?}",
                    c.shape, c.expected_shape
                ),
                Some(err) => format!("output {index} differs by {err:.3e}"),
                None => format!("output {index} differs (not finite)"),
            });
        }
        worst = worst.max(c.max_abs.unwrap_or(0.0));
    }
    Ok(worst)
}

/// The piece as an ONNX model, every input a model input: translated (by the
/// translation under test, the set's others filling in), then for an IR fix
/// optimized and repaired by the fix under test, as in a run; written to `onnx` if given. Says what the
/// plugin did.
fn emit_onnx(
    runtime: &Runtime,
    under_test: &OnnxUnderTest,
    graph: &mut Graph,
    values: &BTreeMap<String, CaseValue>,
    onnx: Option<&std::path::Path>,
) -> Result<String, String> {
    use crate::onnx::emit;
    let inputs = graph.subgraph(0).map_err(|e| e.to_string())?.inputs.clone();
    let roles: Vec<InputRole> = inputs
        .iter()
        .map(|&v| graph.value(v).map(|v| InputRole::User(v.name.clone())))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let translations = match under_test {
        OnnxUnderTest::Translation { translations, .. }
        | OnnxUnderTest::IrFix { translations, .. } => translations.as_slice(),
    };
    let (builder, report) = onnx_translation::run(runtime, translations, graph, &roles, CASE_OPSET)
        .map_err(|e| e.to_string())?;
    let parts = emit::ModelParts {
        graph,
        roles: &roles,
        weights: None,
        builder: &builder,
        output_names: Vec::new(),
    };
    let mut lowered = emit::lower(&parts).map_err(|e| e.to_string())?;
    let what = match under_test {
        OnnxUnderTest::Translation { plugin, .. } => {
            let translated = report.plugins.get(plugin.name()).map_or(0, |c| c.changed);
            if translated == 0 {
                return Err("the plugin translated no node: the case does not exercise it".into());
            }
            format!("{translated} node(s) translated into {} ONNX node(s)", builder.nodes.len())
        }
        OnnxUnderTest::IrFix { fix, .. } => {
            // As in a run: the IR fix sees the optimized model, constants
            // folded, the piece's parameters weights.
            parameters_as_weights(graph, &mut lowered, values)?;
            crate::onnx::passes::run(
                &mut lowered.nodes,
                &mut lowered.initializers,
                &lowered.output_names,
                &lowered.static_shapes,
                None,
                None,
                true,
            );
            let types = onnx_ir_fix::traced_types(
                graph,
                &builder.value_names,
                &emit::dim_names(graph, &roles),
            );
            let report = onnx_ir_fix::run_on_lowered(
                runtime,
                &[*fix],
                &mut lowered,
                types,
                "selftest",
                OnPluginError::Fail,
            )
            .map_err(|e| e.to_string())?;
            let changed = report.plugins.get(fix.name()).map_or(0, |c| c.changed);
            if changed == 0 {
                return Err("the plugin changed no ONNX node: the case does not exercise it".into());
            }
            format!("{changed} ONNX node(s) changed")
        }
    };
    let planned = emit::plan(lowered, "selftest", &[]);
    if let Some(path) = onnx {
        emit::write(path, planned, emit::WeightStorage::Embedded, &crate::weights::files::InMemory)
            .map_err(|e| e.to_string())?;
    }
    Ok(what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Argument, Dim, NamedArgument, OutputDecl, TensorMeta};

    #[test]
    fn a_case_is_held_to_its_check_unless_its_dtype_rounds_coarser() {
        use Compared::{OnnxRuntime, Piece};
        for dtype in [DType::Float32, DType::Float64, DType::Bfloat16, DType::Int64] {
            assert_eq!(tolerance(Piece, dtype), FIX_TOLERANCE, "{dtype:?}");
            assert_eq!(tolerance(OnnxRuntime, dtype), TRANSLATION_TOLERANCE, "{dtype:?}");
        }
        assert_eq!(tolerance(Piece, DType::Float16), FLOAT16_TOLERANCE);
        assert_eq!(tolerance(OnnxRuntime, DType::Float16), FLOAT16_TOLERANCE);
        // One float16 rounding step at |x| in [1, 2): a fix's tolerance holds
        // none, float16's ten.
        let step = 2f64.powi(-10);
        assert!(step > FIX_TOLERANCE && 10.0 * step < FLOAT16_TOLERANCE);

        assert_eq!(held_to(Piece, DType::Float32), "atol/rtol 1e-4");
        assert_eq!(held_to(OnnxRuntime, DType::Float32), "atol/rtol 1e-3");
        assert_eq!(held_to(OnnxRuntime, DType::Float16), "float16's atol/rtol 1e-2");
    }

    /// `x (input) -> to(intermediate) -> relu`, an int64 index beside it.
    fn piece(input: &str, intermediate: &str) -> Graph {
        let meta = |dtype: &str| TensorMeta::new(dtype, vec![Dim::Fixed(2)]);
        let mut graph = Graph::new();
        let x = graph.add_input(0, "x", ValueMeta::Tensor(meta(input)));
        graph.add_input(0, "index", ValueMeta::Tensor(meta("int64")));
        let mut push = |target: &str, from, dtype: &str| {
            let node = graph
                .push_node(
                    0,
                    target,
                    vec![NamedArgument::positional("self", Argument::Tensor(from))],
                    vec![OutputDecl::Tensor(meta(dtype))],
                )
                .unwrap();
            graph.node(node).unwrap().output_values().next().unwrap()
        };
        let cast = push("aten.to.dtype", x, intermediate);
        let out = push("aten.relu.default", cast, intermediate);
        graph.set_outputs(0, vec![Argument::Tensor(out)]).unwrap();
        graph
    }

    #[test]
    fn a_piece_computes_in_its_least_precise_float() {
        assert_eq!(computes_in(&piece("float32", "float32")), DType::Float32);
        assert_eq!(computes_in(&piece("float32", "float16")), DType::Float16);
        assert_eq!(computes_in(&piece("float16", "float32")), DType::Float16);
        assert_eq!(computes_in(&piece("float64", "float64")), DType::Float64);
        assert_eq!(computes_in(&piece("bfloat16", "float16")), DType::Bfloat16);
        assert_eq!(computes_in(&piece("int64", "int64")), DType::Float32, "no float: float32's");
    }

    /// The shipped cases of fuse-group-query-attention: its float16 ones are
    /// told from their float32 ones by what they hold, with no field saying so.
    #[test]
    fn the_shipped_float16_cases_compute_in_float16() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../plugins/onnx-ort-cpu/fuse-group-query-attention/selftest");
        for (case, dtype) in [
            ("decode.json", DType::Float32),
            ("prefill.json", DType::Float32),
            ("decode-float16.json", DType::Float16),
            ("prefill-float16.json", DType::Float16),
        ] {
            let text = std::fs::read_to_string(folder.join(case)).unwrap();
            let (_, _, _, found) = super::piece(&text).unwrap();
            assert_eq!(found, dtype, "{case}");
        }
    }
}
