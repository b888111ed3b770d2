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
//! in ONNX Runtime against the piece in PyTorch. `hfx plugins verify` runs the
//! structural half only (no Python). A patch plugin's case is a model to
//! trace with the patch and without it instead (`patch.rs`).

pub mod capture;
pub mod ops;
pub mod patch;

use std::collections::BTreeMap;
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};

use crate::graph::{Graph, RangeConstraint};
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
    let (case, mut graph, changes, candidate) = match plugin.typed() {
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
            let (case, mut graph, changes) = piece(text)?;
            fx_node_fix::run(runtime, &[fix], &mut graph, "selftest", OnPluginError::Fail)
                .map_err(|e| e.to_string())?;
            changed(&graph, changes)?;
            (case, graph, changes, None)
        }
        Typed::FxProgramFix(fix) => {
            let (case, mut graph, changes) = piece(text)?;
            fx_program_fix::run(runtime, &[fix], &mut graph, "selftest", OnPluginError::Fail)
                .map_err(|e| e.to_string())?;
            changed(&graph, changes)?;
            (case, graph, changes, None)
        }
        Typed::OnnxTranslation(translation) => {
            let (case, graph, changes) = piece(text)?;
            let mut translations =
                crate::stages::select::<kind::OnnxTranslation>(set, crate::plugins::Backend::Onnx);
            translations.retain(|t| !std::ptr::eq(t.plugin, plugin));
            translations.push(translation);
            (
                case,
                graph,
                changes,
                Some(OnnxUnderTest::Translation { plugin: translation, translations }),
            )
        }
        Typed::OnnxIrFix(fix) => {
            let (case, graph, changes) = piece(text)?;
            let translations =
                crate::stages::select::<kind::OnnxTranslation>(set, crate::plugins::Backend::Onnx);
            if translations.is_empty() {
                return Err("an IR fix's case is translated first: load the onnx translations too (--plugins)".to_string());
            }
            (case, graph, changes, Some(OnnxUnderTest::IrFix { fix, translations }))
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
    let (what, candidate, tolerance) = match candidate {
        Some(under_test) => {
            let what = emit_onnx(runtime, &under_test, &mut graph, &case.values, onnx.as_deref())?;
            (what, onnx.map(|path| Candidate::Onnx { path }), TRANSLATION_TOLERANCE)
        }
        None => {
            let what = format!("{} graph edit(s)", graph.changes() - changes);
            (
                what,
                numeric.then(|| Candidate::Graph { program: graph.to_json_value() }),
                FIX_TOLERANCE,
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
        atol: tolerance,
        rtol: tolerance,
    };
    let reply = worker.request(&request, CASE_DEADLINE).map_err(|e| e.to_string())?;
    let worst = numeric_failures(&reply.outputs)?;
    Ok(format!("{what}; max abs error {worst:.1e} on {} output(s)", reply.outputs.len()))
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
    use crate::graph::ValueMeta;
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

/// The case, its piece as a graph, and the graph's change count before the plugin.
fn piece(text: &str) -> Result<(Case, Graph, u64), String> {
    let case: Case = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let graph = Graph::from_json(&case.input.to_string()).map_err(|e| format!("input: {e}"))?;
    let changes = graph.changes();
    Ok((case, graph, changes))
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
