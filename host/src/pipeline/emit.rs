//! The emit step: the program after the FX stages becomes the artifact.
//! One function per artifact (IR JSON, `.pt2`, `.onnx`, portable `.pte`,
//! delegated `.pte`); each writes atomically. Which one runs, and from what,
//! the pipeline decides (its emit step, `emit_artifact`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::options::{OnnxOptions, OpenvinoOptions};
use super::summary::Lowered;
use super::Progress;
use crate::graph::pt2::prewrite::PrewrittenEntries;
use crate::graph::pt2::{convert, Pt2};
use crate::graph::Graph;
use crate::onnx::optimize::OptimizeReport;
use crate::openvino::ir::WeightInput;
use crate::plugins::loading::LoadedSet;
use crate::plugins::{kind, Backend};
use crate::stages::onnx_translation::{ProgramSource, TranslationError};
use crate::stages::{self, onnx_ir_fix, onnx_translation, OnPluginError, StageReport};
use crate::trace::protocol::{ConvertOpenvino, Delegate, EdgeProgram, Lower, MemoryPlanning};
use crate::trace::Worker;

/// What an emission that runs plugins runs them with.
#[derive(Clone, Copy)]
pub struct EmitContext<'a> {
    pub loaded: &'a LoadedSet,
    pub on_plugin_error: OnPluginError,
    pub progress: Progress,
}

/// The program as read: a `.pt2` (kept open: its weights are written from
/// the map) with its graph, or a graph from IR JSON.
pub enum Program {
    Archive { pt2: Box<Pt2>, graph: Graph },
    IrJson { graph: Graph },
}

impl Program {
    pub fn graph(&self) -> &Graph {
        match self {
            Program::Archive { graph, .. } | Program::IrJson { graph } => graph,
        }
    }

    pub fn graph_mut(&mut self) -> &mut Graph {
        match self {
            Program::Archive { graph, .. } | Program::IrJson { graph } => graph,
        }
    }
}

/// The IR's JSON form.
pub fn ir_json(graph: &Graph, output: &Path) -> Result<()> {
    crate::atomic::write_bytes_atomically(output, graph.to_json().as_bytes())
        .with_context(|| format!("writing {}", output.display()))
}

/// A `.pt2`: the program converted back, the weights copied from the map
/// (after those `prewritten` while the worker traced, when the archive starts
/// with them). Returns how many were.
pub fn pt2(
    pt2: &Pt2,
    graph: &Graph,
    output: &Path,
    prewritten: Option<PrewrittenEntries>,
) -> Result<usize> {
    Ok(pt2.write_continuing(output, &model_program(pt2, graph, output)?, prewritten)?)
}

/// A traced `.pt2` the FX stages left as it was, its weights inside: the
/// file torch wrote, linked into place.
pub fn pt2_as_traced(traced: &Path, output: &Path) -> Result<()> {
    crate::atomic::link_into_place(traced, output)
        .with_context(|| format!("writing {}", output.display()))
}

/// As [`pt2`], for the worker's ExecuTorch steps: the weights stay where they
/// are, indexed beside it ([`Pt2::write_indexed`]).
pub fn pt2_for_worker(pt2: &Pt2, graph: &Graph, output: &Path) -> Result<()> {
    pt2.write_indexed(output, &model_program(pt2, graph, output)?)?;
    Ok(())
}

/// `graph` as the archive's `model` program, to be written at `output`.
fn model_program(
    pt2: &Pt2,
    graph: &Graph,
    output: &Path,
) -> Result<std::collections::BTreeMap<String, crate::graph::pt2::schema::ExportedProgram>> {
    let program = convert::from_ir(graph, &pt2.programs["model"])
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("{}", output.display()))?;
    Ok([("model".to_string(), program)].into())
}

/// What the ONNX model takes from where its program came from.
pub struct OnnxInput {
    /// Traced or read as saved, which an op without a translation says.
    pub source: ProgramSource,
    /// The tensor inputs' and outputs' names (empty: the program's own).
    pub input_names: Vec<String>,
    pub output_names: Vec<String>,
    /// The external data file's first initializers, written while the worker traced.
    pub prewritten: Option<crate::onnx::prewrite::PrewrittenData>,
    /// torch.export's guards on input sizes that some size breaks (`SizeGuard::guard`):
    /// the model checks each it can at run time ([`crate::onnx::guards`]).
    pub size_guards: Vec<String>,
}

/// What the ONNX emission reports.
pub struct OnnxEmitted {
    /// The translation and IR-fix stages.
    pub stages: Vec<StageReport>,
    pub optimized: Option<OptimizeReport>,
    pub nodes: usize,
    /// Initializers of the data file written while the worker traced.
    pub weights_prewritten: usize,
    /// A node ONNX Runtime's CPU provider cannot run, and why
    /// ([`super::verify::cpu_unrunnable`]).
    pub cpu_unrunnable: Option<String>,
    /// The size guards the model checks at run time.
    pub guards_checked: Vec<String>,
}

/// The translations, the generic passes, the IR fixes (on the optimized
/// model, constants known), then the model, written atomically to `target`.
/// The plugins are `backend`'s: the ONNX backend's, or for OpenVINO theirs
/// and its own (a translation of its own overrides theirs).
pub fn onnx(
    cx: EmitContext,
    backend: Backend,
    pt2: &Pt2,
    graph: &mut Graph,
    options: &OnnxOptions,
    input: OnnxInput,
    target: &Path,
) -> Result<OnnxEmitted> {
    use crate::onnx::{emit, passes, weights};
    let EmitContext { loaded, on_plugin_error, progress } = cx;
    let program = pt2.programs.get("model").context("no `model` program")?;
    let roles = crate::onnx::inputs::named_user_inputs(
        program,
        crate::onnx::inputs::input_roles(program),
        &input.input_names,
    );
    let output_names =
        crate::onnx::inputs::output_names(program, &input.input_names, &input.output_names);
    progress.step("onnx", "translations");
    let translations = stages::select::<kind::OnnxTranslation>(&loaded.set.plugins, backend);
    let (builder, translated) =
        onnx_translation::run(&loaded.runtime, &translations, graph, &roles, options.opset)
            .map_err(|mut e| {
                if let TranslationError::Missing { source_note, .. } = &mut e {
                    *source_note = input.source;
                }
                e
            })?;
    let parts = emit::ModelParts {
        graph,
        roles: &roles,
        weights: Some(pt2),
        builder: &builder,
        output_names,
    };
    let mut lowered = emit::lower(&parts)?;
    let optimized = options.optimize.then(|| {
        passes::run(
            &mut lowered.nodes,
            &mut lowered.initializers,
            &lowered.output_names,
            &lowered.static_shapes,
            options.quantize.as_ref(),
            options.weights_dtype,
            linear_weights_transposed(backend),
        )
    });
    progress.step("onnx", "IR fixes");
    let ir_fixes = stages::select::<kind::OnnxIrFix>(&loaded.set.plugins, backend);
    let types =
        onnx_ir_fix::traced_types(graph, &builder.value_names, &emit::dim_names(graph, &roles));
    let fixed = onnx_ir_fix::run_on_lowered(
        &loaded.runtime,
        &ir_fixes,
        &mut lowered,
        types,
        "onnx-ir-fixes",
        on_plugin_error,
    )?;
    // An ONNX model checks its size guards; the one OpenVINO converts does not
    // (its IR would compute the check, not stop on it).
    let guards = if backend == Backend::Onnx { &input.size_guards[..] } else { &[] };
    let (guards_checked, unchecked) = crate::onnx::guards::check(
        &mut lowered.nodes,
        &mut lowered.initializers,
        &lowered.inputs,
        guards,
    );
    for (guard, why) in unchecked {
        tracing::debug!("size guard `{guard}` not checked by the ONNX model: {why}");
    }
    // The custom domains the passes' and the fixes' nodes use (`MatMulNBits`), imported too.
    let domains = lowered.nodes.iter().map(|n| &n.domain).filter(|d| !d.is_empty()).cloned();
    lowered.domains.extend(domains.collect::<Vec<_>>());
    let cpu_unrunnable = super::verify::cpu_unrunnable(&lowered.nodes);
    let metadata = onnx_metadata(loaded, &[&translated, &fixed]);
    let planned = emit::plan(lowered, "main_graph", &metadata);
    let nodes = planned.graph.node.len();
    let storage = if options.external_data
        || weights::weight_bytes(&planned.initializers) >= emit::PROTOBUF_LIMIT
    {
        emit::WeightStorage::External { prewritten: input.prewritten.map(Box::new) }
    } else {
        emit::WeightStorage::Embedded
    };
    let weights_prewritten = emit::write(target, planned, storage, pt2)?;
    Ok(OnnxEmitted {
        stages: vec![translated, fixed],
        optimized,
        nodes,
        weights_prewritten,
        cpu_unrunnable,
        guards_checked,
    })
}

/// The worker's ExecuTorch steps: the worker, the deadline of each request,
/// and the scratch folder they write in.
pub struct Lowering<'w> {
    pub worker: &'w mut Worker,
    pub deadline: Duration,
    pub work: &'w Path,
}

/// A `.pte` with a delegate: ExecuTorch lowers `program` in the worker with
/// the delegate's partitioner, into the scratch folder; the file then moves
/// to `output`, so a `.pte` is never half there.
pub fn pte_delegated(
    progress: Progress,
    lowering: Lowering,
    program: PathBuf,
    delegate: Delegate,
    memory: MemoryPlanning,
    output: &Path,
) -> Result<Lowered> {
    progress.step(
        "lower",
        &format!("ExecuTorch edge + {} partitioner, to_executorch", delegate.name()),
    );
    let pte = lowering.work.join("model.pte");
    let request = Lower { program, output: pte.clone(), delegate, memory };
    let reply =
        lowering.worker.request(&request, lowering.deadline).context("lowering with ExecuTorch")?;
    crate::atomic::move_into_place(&pte, output)
        .with_context(|| format!("writing {}", output.display()))?;
    Ok(Lowered::Delegated(reply))
}

/// Whether the ONNX model for `backend` stores a `torch.nn.Linear`'s weight
/// transposed (`[in, out]`), which ONNX Runtime's `MatMul` reads without a
/// transpose. OpenVINO's conversion would transpose such a weight back into
/// a copy (`MatMulConstTransposesExtraction`), so its model keeps the
/// checkpoint's layout, which its `MatMul` reads with `transpose_b`.
pub fn linear_weights_transposed(backend: Backend) -> bool {
    backend != Backend::Openvino
}

/// An OpenVINO IR: the ONNX model at `onnx` (which hfx's ONNX stages wrote)
/// converted by OpenVINO's ONNX frontend in the worker, into the scratch
/// folder, the constants that are still its data file's bytes saved as
/// inputs; the host makes them constants at those bytes, and the data file,
/// OpenVINO's `.bin` appended, becomes the IR's ([`crate::openvino`]). The
/// `.bin`, then the graph, move to `output` (`.xml`), as `options` say (its
/// cache round-trips folded into OpenVINO state, its weights compressed).
/// The ONNX model is removed.
pub fn openvino(
    progress: Progress,
    conversion: Lowering,
    onnx: &Path,
    options: &OpenvinoOptions,
    output: &Path,
) -> Result<crate::trace::protocol::ConvertOpenvinoReply> {
    progress.step("convert", "OpenVINO's ONNX frontend, to IR");
    let data = crate::onnx::external::data_file(onnx);
    let xml = conversion.work.join("openvino_model.xml");
    let request = ConvertOpenvino {
        model: onnx.to_path_buf(),
        output: xml.clone(),
        precision: "f32".into(),
        stateful: options.stateful,
        compress_to_fp16: options.compress_to_fp16,
        weights_file: data.exists().then(|| data.clone()),
    };
    let reply = conversion
        .worker
        .request(&request, conversion.deadline)
        .context("converting to OpenVINO IR")?;
    tracing::info!(
        "OpenVINO: {} ops, {} state variables, read and transformed in {:.2} s, saved in {:.2} s; {} weights left in the ONNX model's data file",
        reply.ops,
        reply.states,
        reply.convert_seconds,
        reply.save_seconds,
        reply.weights.len(),
    );
    let bin = output.with_extension("bin");
    let saved_bin = xml.with_extension("bin");
    let write_error = |path: &Path| format!("writing {}", path.display());
    if reply.weights.is_empty() {
        crate::atomic::move_into_place(&saved_bin, &bin).with_context(|| write_error(&bin))?;
        crate::atomic::move_into_place(&xml, output).with_context(|| write_error(output))?;
    } else {
        let saved = std::fs::read(&xml).with_context(|| format!("reading {}", xml.display()))?;
        let mut weights: Vec<_> = reply
            .weights
            .iter()
            .map(|w| WeightInput {
                name: &w.name,
                constant: &w.constant,
                offset: w.offset,
                size: w.size,
            })
            .collect();
        // Into the scratch folder first: nothing moves into place before the IR is checked.
        let written = conversion.work.join("weights.bin");
        let base = crate::openvino::bin::write(&data, &saved_bin, &mut weights, &written)
            .with_context(|| write_error(&bin))?;
        let ir = crate::openvino::ir::weights_as_constants(&saved, &weights, base)
            .with_context(|| format!("{}", xml.display()))?;
        crate::atomic::move_into_place(&written, &bin).with_context(|| write_error(&bin))?;
        crate::atomic::write_atomically(output, |file| std::io::Write::write_all(file, &ir))
            .with_context(|| write_error(output))?;
    }
    for scratch in [onnx, data.as_path()] {
        if let Err(e) = std::fs::remove_file(scratch) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(e).with_context(|| format!("removing {}", scratch.display()));
            }
        }
    }
    Ok(reply)
}

/// A portable `.pte`: ExecuTorch's edge decomposition of `program` in the
/// worker, then hfx's native emitter, every op a portable kernel. The edge
/// program's weights stay where the worker found them: in `side_files`, the
/// files the traced program's are in. `provenance` (JSON) goes in as named data.
pub fn pte_portable(
    progress: Progress,
    lowering: Lowering,
    program: PathBuf,
    side_files: &[PathBuf],
    memory: MemoryPlanning,
    provenance: &[u8],
    output: &Path,
) -> Result<Lowered> {
    progress.step("lower", "ExecuTorch's edge decomposition (worker)");
    let edge_path = lowering.work.join("edge.pt2");
    let request = EdgeProgram { program, output: edge_path.clone() };
    let edge = lowering
        .worker
        .request(&request, lowering.deadline)
        .context("decomposing for ExecuTorch's edge dialect")?;
    progress.step("emit", "portable .pte (hfx's native emitter)");
    let started = Instant::now();
    let mut edge_pt2 = Pt2::open(&edge_path)?;
    if edge.side_weights {
        edge_pt2
            .attach_side_weights(&crate::graph::pt2::side_weights_path(&edge_path), side_files)?;
    }
    let model = edge_pt2
        .programs
        .get("model")
        .with_context(|| format!("{}: no `model` program", edge_path.display()))?;
    let edge_graph = convert::to_ir(model)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("{}", edge_path.display()))?;
    let specs = crate::executorch::write::Specs { inputs: &edge.in_spec, outputs: &edge.out_spec };
    let emitted =
        crate::executorch::emit(&edge_pt2, &edge_graph, specs, memory, provenance, output)?;
    Ok(Lowered::Portable { edge, emitted, emit: started.elapsed() })
}

/// `metadata_props`: who wrote the model, against which upstream versions,
/// with which plugins, and what each changed.
fn onnx_metadata(loaded: &LoadedSet, reports: &[&StageReport]) -> Vec<(String, String)> {
    let mut metadata = vec![("hfx.version".to_string(), env!("CARGO_PKG_VERSION").to_string())];
    for (package, version) in &loaded.set.upstream {
        metadata.push((format!("hfx.upstream.{package}"), version.clone()));
    }
    for plugin in &loaded.set.plugins {
        let p = &plugin.manifest.plugin;
        metadata.push((
            format!("hfx.plugin.{}", p.name),
            format!("{} sha256:{}", p.version, plugin.component_sha256),
        ));
    }
    for report in reports {
        for (plugin, counts) in &report.plugins {
            metadata.push((
                format!("hfx.stage.{}.{plugin}", report.stage),
                format!("changed {}", counts.changed),
            ));
        }
    }
    metadata
}
