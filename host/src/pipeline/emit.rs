//! The emit step: the program after the FX stages becomes the artifact.
//! One function per [`Artifact`] variant; each writes atomically.

use std::path::Path;

use anyhow::{Context, Result};

use super::options::OnnxOptions;
use super::Progress;
use crate::graph::pt2::prewrite::PrewrittenEntries;
use crate::graph::pt2::{convert, Pt2};
use crate::graph::Graph;
use crate::onnx::optimize::OptimizeReport;
use crate::plugins::loading::LoadedSet;
use crate::plugins::{kind, Backend};
use crate::stages::{self, onnx_ir_fix, onnx_translation, OnPluginError, StageReport};

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

/// What the ONNX emission reports.
pub struct OnnxEmitted {
    /// The translation and IR-fix stages.
    pub stages: Vec<StageReport>,
    pub optimized: Option<OptimizeReport>,
    pub nodes: usize,
    /// Initializers of the data file written while the worker traced.
    pub weights_prewritten: usize,
}

/// The ONNX stages (translations, IR fixes), the generic passes, then the
/// model, written atomically to `target`.
#[allow(clippy::too_many_arguments)] // the emission's inputs, each distinct
pub fn onnx(
    pt2: &Pt2,
    graph: &mut Graph,
    loaded: &LoadedSet,
    options: &OnnxOptions,
    on_plugin_error: OnPluginError,
    (input_names, output_names): (Vec<String>, Vec<String>),
    target: &Path,
    prewritten: Option<crate::onnx::prewrite::PrewrittenData>,
    progress: Progress,
) -> Result<OnnxEmitted> {
    use crate::onnx::{emit, passes, weights};
    let program = pt2.programs.get("model").context("no `model` program")?;
    let roles = crate::onnx::inputs::named_user_inputs(
        program,
        crate::onnx::inputs::input_roles(program),
        &input_names,
    );
    let output_names = crate::onnx::inputs::output_names(program, &input_names, &output_names);
    progress.step("onnx", "translations");
    let translations = stages::select::<kind::OnnxTranslation>(&loaded.set.plugins, Backend::Onnx);
    let (mut builder, translated) =
        onnx_translation::run(&loaded.runtime, &translations, graph, &roles, options.opset)?;
    progress.step("onnx", "IR fixes");
    let ir_fixes = stages::select::<kind::OnnxIrFix>(&loaded.set.plugins, Backend::Onnx);
    let mut model = crate::onnx::Model { nodes: std::mem::take(&mut builder.nodes) };
    let fixed =
        onnx_ir_fix::run(&loaded.runtime, &ir_fixes, &mut model, "onnx-ir-fixes", on_plugin_error)?;
    builder.nodes = model.nodes;
    let metadata = onnx_metadata(loaded, &[&translated, &fixed]);
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
        )
    });
    let planned = emit::plan(lowered, "main_graph", &metadata);
    let nodes = planned.graph.node.len();
    let storage = if options.external_data
        || weights::weight_bytes(&planned.initializers) >= emit::PROTOBUF_LIMIT
    {
        emit::WeightStorage::External { prewritten: prewritten.map(Box::new) }
    } else {
        emit::WeightStorage::Embedded
    };
    let weights_prewritten = emit::write(target, planned, storage, pt2)?;
    Ok(OnnxEmitted { stages: vec![translated, fixed], optimized, nodes, weights_prewritten })
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
