//! The verify step (`--verify`): the artifact in its runtime, in the worker,
//! on the recorded inputs (and a second size for dynamic exports of a
//! generated model) against eager PyTorch: an `.onnx` in ONNX Runtime at
//! atol/rtol 1e-3 (the reference exporters' tolerance), a `.pt2` as
//! `torch.export.load` runs it at 1e-4 (float round-off only: it is the
//! same program torch traced), a `.pte` in the ExecuTorch runtime and an
//! OpenVINO IR on OpenVINO's CPU plugin at 1e-3;
//! an `.onnx` with quantized weights (`--quantize`) at its scheme's tolerance
//! ([`INT4`], [`INT8_DYNAMIC`], [`INT8_STATIC`]).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};

use super::options::{Artifact, OnnxOptions, OpenvinoOptions};
use crate::onnx::quantize::{Quantize, QuantizeReport};
use crate::trace::protocol::{
    Check, EagerQuantize, Int4RoundTrip, LinearScheme, Verify, VerifyModel,
};
use crate::trace::Worker;

/// Where an artifact is run.
#[derive(Debug, Clone)]
pub enum Runtime {
    /// `quantized`: the scheme its weights were quantized with
    /// (`--quantize int4`), if any; `int4`: an int4 model's weights, which
    /// the eager reference round-trips (where the worker holds the model).
    Onnx {
        quantized: Option<String>,
        int4: Option<Int4RoundTrip>,
    },
    Pt2,
    /// With the lowered program's input spec; `quantized`: how the eager
    /// model was quantized before the trace (`--quantize 8da4w`).
    Executorch {
        in_spec: String,
        quantized: Option<EagerQuantize>,
    },
    /// An OpenVINO IR on OpenVINO's CPU plugin, converted from an ONNX
    /// model quantized as `Onnx`'s fields say; `compressed`: its float32
    /// weights stored as float16 (`--compress-to-fp16`).
    Openvino {
        quantized: Option<String>,
        int4: Option<Int4RoundTrip>,
        compressed: bool,
    },
}

impl Runtime {
    pub fn name(&self) -> &'static str {
        match self {
            Runtime::Onnx { .. } => "ONNX Runtime",
            Runtime::Pt2 => "torch.export",
            Runtime::Executorch { .. } => "the ExecuTorch runtime",
            Runtime::Openvino { .. } => "OpenVINO (CPU)",
        }
    }

    /// The tolerance, absolute and relative; of a quantized model, the
    /// fraction of each output's largest eager magnitude its max abs error
    /// may reach.
    pub fn tolerance(&self) -> f64 {
        match self {
            Runtime::Onnx { quantized, int4 } | Runtime::Openvino { quantized, int4, .. } => {
                match (quantized.as_deref(), int4) {
                    (Some("int8-dynamic"), _) => INT8_DYNAMIC,
                    (Some("int8-static"), _) => INT8_STATIC,
                    (Some(_), Some(_)) => INT4_OF_ROUND_TRIP,
                    (Some(_), None) => INT4,
                    (None, _) if self.compressed() => COMPRESSED_TO_FP16,
                    (None, _) => OTHER_RUNTIME,
                }
            }
            Runtime::Executorch { quantized: Some(q), .. }
                if q.linear == Some(LinearScheme::Int8DynamicInt4Weight) =>
            {
                EXECUTORCH_8DA4W
            }
            Runtime::Executorch { quantized: Some(_), .. } => EXECUTORCH_WEIGHT_ONLY,
            Runtime::Executorch { quantized: None, .. } => OTHER_RUNTIME,
            Runtime::Pt2 => SAME_PROGRAM,
        }
    }

    /// The tolerance as the summary states it.
    pub fn tolerance_text(&self) -> String {
        let tolerance = self.tolerance();
        match self {
            Runtime::Onnx { quantized: Some(scheme), int4: Some(_) }
            | Runtime::Openvino { quantized: Some(scheme), int4: Some(_), .. } => {
                format!(
                    "{scheme} tolerance: max abs error within {tolerance} x each output's max |eager {scheme}| (eager: the model with the artifact's {scheme} weights, dequantized)"
                )
            }
            Runtime::Onnx { quantized: Some(scheme), int4: None }
            | Runtime::Openvino { quantized: Some(scheme), int4: None, .. } => {
                format!(
                    "{scheme} tolerance: max abs error within {tolerance} x each output's max |eager|"
                )
            }
            Runtime::Openvino { quantized: None, compressed: true, .. } => format!(
                "compress_to_fp16 tolerance: max abs error within {tolerance} x each output's max |eager| (float16 weights, computed in float32)"
            ),
            Runtime::Executorch { quantized: Some(q), .. } => {
                let scheme = q.name();
                format!(
                    "{scheme} tolerance: max abs error within {tolerance} x each output's max |eager {scheme}| (eager: the model torchao quantized, which was traced)"
                )
            }
            _ => format!("atol/rtol {tolerance:e}"),
        }
    }

    /// Whether the artifact's weights are quantized (or compressed): its
    /// error is held to a fraction of each output's largest eager value.
    fn quantized(&self) -> bool {
        matches!(
            self,
            Runtime::Onnx { quantized: Some(_), .. }
                | Runtime::Openvino { quantized: Some(_), .. }
                | Runtime::Openvino { compressed: true, .. }
                | Runtime::Executorch { quantized: Some(_), .. }
        )
    }

    /// An OpenVINO IR whose float32 weights are stored as float16.
    fn compressed(&self) -> bool {
        matches!(self, Runtime::Openvino { compressed: true, .. })
    }

    /// An int4 model's weights, which its eager reference round-trips.
    fn int4(&self) -> Option<&Int4RoundTrip> {
        match self {
            Runtime::Onnx { int4, .. } | Runtime::Openvino { int4, .. } => int4.as_ref(),
            Runtime::Pt2 | Runtime::Executorch { .. } => None,
        }
    }
}

/// An ExecuTorch program of an eager model torchao quantized `8da4w`, against
/// that eager model: XNNPACK quantizes the activations per token at run time
/// as torchao's eager reference does, but rounds apart from it, which put a
/// random tiny Llama's logits 0.0058 off (0.8% of their largest); this holds
/// the lowering to a few times that.
pub const EXECUTORCH_8DA4W: f64 = 0.05;

/// An ExecuTorch program of an eager model whose weights torchao quantized
/// weight-only (`4w`, `8w`), against that eager model: both dequantize the
/// same integers, so only float round-off differs; held to 1%.
pub const EXECUTORCH_WEIGHT_ONLY: f64 = 0.01;

/// The first node of an ONNX model that ONNX Runtime's CPU provider, which
/// `--verify` runs, has no kernel for, as a phrase naming it and why; none
/// when it runs them all. `com.microsoft::MoE` with its gate and up weights
/// apart (`fc3`, `--ort-fusions cuda`): onnxruntime 1.32's CPU kernel fails
/// with "FC3 is not implemented for CPU MoE".
pub fn cpu_unrunnable(nodes: &[crate::onnx::Node]) -> Option<String> {
    nodes
        .iter()
        .find(|n| {
            n.domain == "com.microsoft"
                && n.op_type == "MoE"
                && n.inputs.get(6).is_some_and(|fc3| !fc3.is_empty())
        })
        .map(|n| {
            format!(
                "com.microsoft::MoE `{}` (separate gate and up weights, a CUDA kernel's: the CPU one has no `fc3`)",
                n.outputs.first().map_or("", String::as_str)
            )
        })
}

/// An int4 model's max abs error, as a fraction of each output's largest
/// eager magnitude. Round-to-nearest 4-bit blocks of 32, symmetric, put a
/// random Llama's logits 0.41 of their largest off at 12 layers, hidden 768
/// (1.165 of 2.867), 0.17 at 2 layers, hidden 64 (0.119 of 0.694; 0.11 with
/// asymmetric blocks): each exactly as far as ONNX Runtime's own
/// `MatMulNBitsQuantizer` on the same model (`bench/int4.py`), which leaves
/// the embedding float; hfx's, its embedding quantized too, 0.37 at 12
/// layers (1.068 of 2.867). A random
/// model's error grows with its depth; this holds the quantizer to what
/// ONNX Runtime's gives a 12-layer one, with a little room.
pub const INT4: f64 = 0.5;

/// An int8-dynamic model's max abs error, as a fraction of each output's
/// largest eager magnitude. Symmetric int8 weights per output channel and
/// uint8 activations quantized per tensor at run time put a random Llama's
/// logits 0.060 of their largest off at 12 layers, hidden 768 (0.171 of
/// 2.867), where ONNX Runtime's own `quantize_dynamic(per_channel=True)` of
/// the same float export puts them 0.062 off (0.177; `bench/int4.py
/// --scheme int8-dynamic`). This holds the quantizer to that, with room.
pub const INT8_DYNAMIC: f64 = 0.1;

/// An int8-static model's max abs error, as a fraction of each output's
/// largest eager magnitude. Symmetric int8 weights per output channel and
/// uint8 activations per tensor, MinMax-calibrated on 8 samples of 128
/// random tokens, put a random Llama's logits 0.079 of their largest off on
/// held-out tokens at 12 layers, hidden 768 (0.207 of 2.631), where ONNX
/// Runtime's own `quantize_static(QDQ, per_channel=True)` of the same float
/// export on the same samples puts them 0.122 off (0.321; it also quantizes
/// the attention's activation x activation MatMuls; `bench/int8_static.py`);
/// 0.008 at 2 layers, hidden 32. This holds the quantizer to ONNX Runtime's,
/// with room.
pub const INT8_STATIC: f64 = 0.15;

/// An int4 model against the eager model with the same weights round-tripped
/// through int4 (`Int4RoundTrip`): only `MatMulNBits`' activations differ,
/// computed in int8 at its default `accuracy_level` 4, which put the
/// sweep's tiny random decoders' logits within 2.5e-3 to 4.6e-3 of the
/// round-tripped model's, and identical greedy tokens; held to 5% of the
/// largest output.
pub const INT4_OF_ROUND_TRIP: f64 = 0.05;

/// An OpenVINO IR whose float32 weights are stored as float16
/// (`--compress-to-fp16`), against float32 eager: each weight rounded to
/// float16 (a relative 4.9e-4 at most) put a tiny random Llama's logits
/// 3.0e-4 off (0.04% of their largest); larger models add up more roundings.
/// Held to 1%.
pub const COMPRESSED_TO_FP16: f64 = 0.01;

/// A `.pt2` is the program torch traced: only float round-off differs.
const SAME_PROGRAM: f64 = 1e-4;
/// Another runtime's kernels (the reference exporters' tolerance).
const OTHER_RUNTIME: f64 = 1e-3;

/// The tolerance `artifact` is held to, of a model `eager` says was
/// quantized before its trace, or whose `int4` weights eager round-trips:
/// that of the runtime it runs in; and the scheme its weights were quantized
/// with, if any.
pub fn tolerance(
    artifact: &Artifact,
    eager: Option<&EagerQuantize>,
    int4: Option<&Int4RoundTrip>,
) -> (f64, Option<String>) {
    match artifact {
        Artifact::Pt2 | Artifact::IrJson => (SAME_PROGRAM, None),
        Artifact::Onnx(o) => {
            let scheme = o.quantize.as_ref().map(|q| q.name().to_string());
            let runtime = Runtime::Onnx { quantized: scheme.clone(), int4: int4.cloned() };
            (runtime.tolerance(), scheme)
        }
        Artifact::Openvino(o) => {
            let scheme = o.onnx.quantize.as_ref().map(|q| q.name().to_string());
            let compressed = o.compress_to_fp16;
            let runtime =
                Runtime::Openvino { quantized: scheme.clone(), int4: int4.cloned(), compressed };
            let named = scheme.or_else(|| compressed.then(|| "compress_to_fp16".to_string()));
            (runtime.tolerance(), named)
        }
        Artifact::Pte(_) => {
            let runtime = Runtime::Executorch { in_spec: String::new(), quantized: eager.cloned() };
            (runtime.tolerance(), eager.map(EagerQuantize::name))
        }
    }
}

/// The int4 weights of an `artifact` exported `--quantize int4`, as eager
/// round-trips them: every weight any of its `reports` quantized, in the
/// blocks its options give. None for other schemes, or where nothing was
/// quantized.
pub fn int4_round_trip<'a>(
    artifact: &Artifact,
    reports: impl IntoIterator<Item = &'a QuantizeReport>,
) -> Option<Int4RoundTrip> {
    let onnx = match artifact {
        Artifact::Onnx(onnx) | Artifact::Openvino(OpenvinoOptions { onnx, .. }) => onnx,
        Artifact::Pt2 | Artifact::IrJson | Artifact::Pte(_) => return None,
    };
    let OnnxOptions { quantize: Some(Quantize::Int4(options)), .. } = onnx else {
        return None;
    };
    let mut weights = std::collections::BTreeMap::new();
    for report in reports {
        weights.extend(report.weights.iter().map(|(name, axis)| (name.clone(), *axis)));
    }
    (!weights.is_empty()).then_some(Int4RoundTrip {
        weights,
        block: options.block as u32,
        symmetric: options.symmetric,
    })
}

/// Runs the artifact against the eager reference; any output out of tolerance
/// is an error naming it. The checks are returned for the summary.
pub fn run(
    worker: &mut Worker,
    runtime: &Runtime,
    artifact: &Path,
    reference: &Path,
    deadline: Duration,
) -> Result<Vec<Check>> {
    if !reference.exists() {
        bail!(
            "--verify: no eager reference at {} (hfx writes one when it traces)",
            reference.display()
        );
    }
    let answer = worker.request(&request(runtime, artifact, reference), deadline)?;
    let failed: Vec<String> = answer
        .checks
        .iter()
        .flat_map(|c| {
            c.outputs
                .iter()
                .enumerate()
                .filter(|(_, o)| !o.ok)
                .map(move |(i, _)| format!("output {i} for inputs {}", shapes(&c.inputs)))
        })
        .collect();
    if !failed.is_empty() {
        print(&answer.checks, runtime);
        bail!(
            "--verify: {} differs from eager PyTorch beyond {} ({}); the output was not written",
            runtime.name(),
            runtime.tolerance_text(),
            failed.join("; ")
        );
    }
    Ok(answer.checks)
}

/// The worker's `verify` request for `artifact` in `runtime`, at its tolerance,
/// on the recorded inputs and (for a dynamic export of a generated model) a second size.
pub fn request(runtime: &Runtime, artifact: &Path, reference: &Path) -> Verify {
    let tolerance = runtime.tolerance();
    let quantized = runtime.quantized();
    Verify {
        model: runtime.model(artifact),
        reference: reference.into(),
        second_size: true,
        atol: tolerance,
        rtol: if quantized { 0.0 } else { tolerance },
        atol_of_max: quantized,
        int4: runtime.int4().cloned(),
    }
}

impl Runtime {
    /// The artifact at `path`, as the worker runs it in this runtime.
    pub fn model(&self, path: &Path) -> VerifyModel {
        match self {
            Runtime::Onnx { .. } => VerifyModel::Onnx { path: path.into() },
            Runtime::Pt2 => VerifyModel::Pt2 { path: path.into() },
            Runtime::Executorch { in_spec, .. } => {
                VerifyModel::Pte { path: path.into(), in_spec: in_spec.clone() }
            }
            Runtime::Openvino { .. } => VerifyModel::Openvino { path: path.into() },
        }
    }
}

/// Prints the checks' lines ([`write`]) on stdout.
pub fn print(checks: &[Check], runtime: &Runtime) {
    let mut out = String::new();
    write(&mut out, checks, runtime).expect("writing to a String");
    print!("{out}");
}

/// The max abs/rel error per output, under a line per set of inputs.
/// A quantized model's checks end with the tolerance they were held to.
pub fn write(
    out: &mut impl std::fmt::Write,
    checks: &[Check],
    runtime: &Runtime,
) -> std::fmt::Result {
    let quantized = runtime.quantized();
    for check in checks {
        writeln!(out, "verify inputs {}", shapes(&check.inputs))?;
        for (i, output) in check.outputs.iter().enumerate() {
            writeln!(
                out,
                "  output {i:<3} {:<18} max abs {:>9.2e}  max rel {:>9.2e}  {}",
                shapes(&output.shape),
                output.max_abs.unwrap_or(f64::NAN),
                output.max_rel.unwrap_or(f64::NAN),
                verdict(output, quantized)
            )?;
        }
    }
    if quantized && !checks.is_empty() {
        writeln!(out, "  {}", runtime.tolerance_text())?;
    }
    Ok(())
}

/// What an output's line ends with. An element passes within `atol + rtol *
/// |eager|`: a max rel error past every tolerance hfx uses (a float16 logit
/// of 0.001 off by 0.0002) passed by the absolute term, which the line says
/// so that a reader does not take it for a failure. A quantized model's
/// outputs are held to their max abs error alone. An output whose shape is
/// not eager's names eager's; one compared on its last positions alone (a
/// sliding-window cache layer) says how many.
fn verdict(output: &crate::trace::protocol::Comparison, quantized: bool) -> String {
    let verdict = match (output.ok, output.max_rel) {
        (false, _) if output.shape != output.expected_shape && output.trailing.is_none() => {
            return format!("MISMATCH (eager's shape is {})", shapes(&output.expected_shape));
        }
        (false, _) => "MISMATCH",
        (true, Some(rel)) if rel > OTHER_RUNTIME && !quantized => {
            "ok (rel err large only where eager is near 0: abs err within atol)"
        }
        (true, _) => "ok",
    };
    match (output.trailing, output.shape.iter().rev().nth(1)) {
        (Some(kept), Some(all)) => format!(
            "{verdict} (the last {kept} of {all} positions: eager's sliding-window cache keeps those)"
        ),
        _ => verdict.to_string(),
    }
}

/// Shapes as JSON (`{"input_ids":[2,8]}`, `[2,8,32]`), as the summary always showed them.
fn shapes(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::protocol::Comparison;

    #[test]
    fn a_moe_with_separate_gate_and_up_weights_is_not_run_on_the_cpu() {
        let moe = |inputs: &[&str]| crate::onnx::Node {
            op_type: "MoE".into(),
            domain: "com.microsoft".into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec!["moe_out".into()],
            attributes: Vec::new(),
            function: None,
        };
        let cuda = moe(&["x", "logits", "gate", "", "down", "", "up"]);
        let why = cpu_unrunnable(&[cuda]).unwrap();
        assert!(why.starts_with("com.microsoft::MoE `moe_out` (separate gate and up"), "{why}");
        assert_eq!(cpu_unrunnable(&[moe(&["x", "logits", "gate_up", "", "down", "", ""])]), None);
        assert_eq!(cpu_unrunnable(&[moe(&["x", "logits", "gate_up", "", "down"])]), None);
    }

    #[test]
    fn a_pt2_is_held_to_round_off_and_other_runtimes_to_the_exporters_tolerance() {
        let pte = Runtime::Executorch { in_spec: "[1, ...]".into(), quantized: None };
        assert_eq!(Runtime::Pt2.tolerance(), 1e-4);
        assert_eq!(Runtime::Onnx { quantized: None, int4: None }.tolerance(), 1e-3);
        let int8 = Runtime::Onnx { quantized: Some("int8-dynamic".into()), int4: None };
        assert_eq!(int8.tolerance(), INT8_DYNAMIC);
        assert_eq!(
            int8.tolerance_text(),
            format!("int8-dynamic tolerance: max abs error within {INT8_DYNAMIC} x each output's max |eager|")
        );
        let int8_static = Runtime::Onnx { quantized: Some("int8-static".into()), int4: None };
        assert_eq!(int8_static.tolerance(), INT8_STATIC);
        assert_eq!(pte.tolerance(), 1e-3);
        assert_eq!(tolerance(&Artifact::Pt2, None, None), (1e-4, None));
        let pte_artifact = Artifact::Pte(super::super::Pte::Portable.into());
        assert_eq!(tolerance(&pte_artifact, None, None), (1e-3, None));
        let q = EagerQuantize {
            linear: Some(LinearScheme::Int8DynamicInt4Weight),
            embeddings: Some(crate::trace::protocol::WeightBits::Int8),
            group_size: 32,
        };
        assert_eq!(
            tolerance(&pte_artifact, Some(&q), None),
            (EXECUTORCH_8DA4W, Some("8da4w, embeddings 8w".into()))
        );
        let weight_only = EagerQuantize { linear: Some(LinearScheme::Int4Weight), ..q };
        assert_eq!(tolerance(&pte_artifact, Some(&weight_only), None).0, EXECUTORCH_WEIGHT_ONLY);
        let request = request(&pte, Path::new("m.pte"), Path::new("m.reference.pt"));
        assert_eq!((request.atol, request.rtol, request.second_size), (1e-3, 1e-3, true));
        let int4 = Runtime::Onnx { quantized: Some("int4".into()), int4: None };
        let quantized = super::request(&int4, Path::new("m.onnx"), Path::new("m.reference.pt"));
        assert_eq!((quantized.atol, quantized.rtol, quantized.atol_of_max), (INT4, 0.0, true));
        assert_eq!(
            int4.tolerance_text(),
            "int4 tolerance: max abs error within 0.5 x each output's max |eager|"
        );
        assert!(!request.atol_of_max);
        assert!(matches!(
            request.model,
            VerifyModel::Pte { path, in_spec } if path == Path::new("m.pte") && in_spec == "[1, ...]"
        ));
        // Against its weights round-tripped in eager: the request names them, held closer.
        let weights = Int4RoundTrip {
            weights: [("lm_head.weight".into(), 1)].into(),
            block: 32,
            symmetric: true,
        };
        let round_trip =
            Runtime::Onnx { quantized: Some("int4".into()), int4: Some(weights.clone()) };
        let request = super::request(&round_trip, Path::new("m.onnx"), Path::new("m.reference.pt"));
        assert_eq!((request.atol, request.int4), (INT4_OF_ROUND_TRIP, Some(weights.clone())));
        assert!(round_trip.tolerance_text().ends_with(
            "max |eager int4| (eager: the model with the artifact's int4 weights, dequantized)"
        ));
        assert_eq!(quantized.int4, None);
        // An IR of float16-stored weights: a fraction of each output's largest value.
        let compressed = Runtime::Openvino { quantized: None, int4: None, compressed: true };
        let request = super::request(&compressed, Path::new("m.xml"), Path::new("m.reference.pt"));
        assert_eq!((request.atol, request.atol_of_max), (COMPRESSED_TO_FP16, true));
        assert!(compressed.tolerance_text().starts_with("compress_to_fp16 tolerance"));
        let float = Runtime::Openvino { quantized: None, int4: None, compressed: false };
        assert_eq!((float.tolerance(), float.quantized()), (1e-3, false));
    }

    /// The weights eager round-trips: every one any component quantized,
    /// once, in the blocks `--quantize int4` asked for; none for other schemes.
    #[test]
    fn int4_weights_are_round_tripped_as_the_options_quantized_them() {
        use crate::onnx::quantize::Int4Options;
        let report = |weights: &[(&str, u32)]| QuantizeReport {
            weights: weights.iter().map(|(w, axis)| (w.to_string(), *axis)).collect(),
            ..QuantizeReport::default()
        };
        let (prefill, decode) =
            (report(&[("b.weight", 0), ("a.weight", 1)]), report(&[("a.weight", 1)]));
        let options = Int4Options { block: 64, symmetric: false, ..Int4Options::default() };
        let onnx = |quantize| {
            Artifact::Onnx(OnnxOptions {
                opset: 18,
                external_data: false,
                optimize: true,
                quantize,
                weights_dtype: None,
            })
        };
        let int4 = onnx(Some(Quantize::Int4(options)));
        assert_eq!(
            int4_round_trip(&int4, [&prefill, &decode]),
            Some(Int4RoundTrip {
                weights: [("a.weight".into(), 1), ("b.weight".into(), 0)].into(),
                block: 64,
                symmetric: false
            })
        );
        assert_eq!(int4_round_trip(&int4, [&report(&[])]), None);
        let int8 = onnx(Some(Quantize::Int8Dynamic { exclude: Vec::new() }));
        assert_eq!(int4_round_trip(&int8, [&prefill]), None);
    }

    #[test]
    fn each_output_is_a_line_under_its_inputs() {
        let checks = [Check {
            inputs: [("input_ids".to_string(), vec![2, 8])].into(),
            outputs: vec![
                Comparison {
                    shape: vec![2, 8, 32],
                    expected_shape: vec![2, 8, 32],
                    max_abs: Some(1.5e-6),
                    max_rel: Some(2e-5),
                    ok: true,
                    trailing: None,
                },
                Comparison {
                    shape: vec![2, 8, 128],
                    expected_shape: vec![2, 8, 128],
                    max_abs: Some(4e-4),
                    max_rel: Some(2.07e2),
                    ok: true,
                    trailing: None,
                },
                Comparison {
                    shape: vec![2, 8],
                    expected_shape: vec![2, 9],
                    max_abs: None,
                    max_rel: None,
                    ok: false,
                    trailing: None,
                },
                Comparison {
                    shape: vec![2, 2, 8, 8],
                    expected_shape: vec![2, 2, 3, 8],
                    max_abs: Some(5e-8),
                    max_rel: Some(1e-5),
                    ok: true,
                    trailing: Some(3),
                },
            ],
        }];
        let mut out = String::new();
        write(&mut out, &checks, &Runtime::Onnx { quantized: None, int4: None }).unwrap();
        assert_eq!(
            out,
            "verify inputs {\"input_ids\":[2,8]}\n\
             \x20 output 0   [2,8,32]           max abs   1.50e-6  max rel   2.00e-5  ok\n\
             \x20 output 1   [2,8,128]          max abs   4.00e-4  max rel    2.07e2  ok (rel err large only where eager is near 0: abs err within atol)\n\
             \x20 output 2   [2,8]              max abs       NaN  max rel       NaN  MISMATCH (eager's shape is [2,9])\n\
             \x20 output 3   [2,2,8,8]          max abs   5.00e-8  max rel   1.00e-5  ok (the last 3 of 8 positions: eager's sliding-window cache keeps those)\n"
        );
        // Held to the max abs error alone, and the line says to what.
        let mut out = String::new();
        write(&mut out, &checks[..], &Runtime::Onnx { quantized: Some("int4".into()), int4: None })
            .unwrap();
        assert!(out.contains("max rel    2.07e2  ok\n"), "{out}");
        assert!(out.ends_with("keeps those)\n  int4 tolerance: max abs error within 0.5 x each output's max |eager|\n"), "{out}");
    }
}
