//! `hfx plugins capture`: a self-test case cut from a real trace. The model
//! goes through `hfx run`'s pipeline as given (its plugin set, its backend's
//! FX stages) into a `.pt2` in a scratch folder; the first nodes of the op
//! asked for are cut out (`Graph::cut`), and the worker runs the program on
//! its sample inputs to record the values that reach the piece.
//!
//! `--program` captures a patch plugin's case instead: the forward of a
//! `--model-fn` model as a Python-level program (`patch.rs`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::patch::{CaseModel, Expect, PatchCase};
use super::{Case, MAX_CASE_BYTES};
use crate::graph::pt2::{convert, Pt2};
use crate::graph::NodeId;
use crate::pipeline::scratch::Scratch;
use crate::pipeline::{Artifact, Destination, Progress, RunOptions, Source, Target};
use crate::trace::protocol::{CaptureProgram, CaptureValues};
use crate::trace::{ModelSource, Worker};

/// What to cut, and where the case goes.
pub struct CaptureOptions {
    /// The op the case is cut around (`aten.alias.default`).
    pub target: String,
    /// How many of its nodes, in program order.
    pub count: usize,
    /// Also the nodes this many hops away (producers and readers): the
    /// context a plugin looks at (the `clone` an in-place op mutates).
    pub radius: usize,
    pub case: PathBuf,
}

/// What was written.
pub struct Captured {
    pub nodes: usize,
    pub inputs: usize,
    pub bytes: usize,
}

/// Runs the pipeline of `run` (its source, plugins and backend; its artifact
/// and destination are replaced by a `.pt2` in a scratch folder beside the
/// case) and writes the case.
pub fn capture(
    mut run: RunOptions,
    options: &CaptureOptions,
    progress: Progress,
) -> Result<Captured> {
    if let Some(dir) = options.case.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let scratch = Scratch::beside(&options.case, "capture")?;
    let program_path = scratch.path().join("model.pt2");
    let model = match &run.source {
        Source::Trace(trace) => format!(
            "{}{}{}",
            trace.request.source,
            if trace.request.dynamic { "" } else { " --static" },
            match trace.request.dtype.as_str() {
                "float32" => String::new(),
                dtype => format!(" --dtype {dtype}"),
            }
        ),
        Source::Pt2(_) | Source::IrJson(_) => {
            bail!("capture needs a model to trace (--model, --model-dir or --model-fn), not a file")
        }
    };
    let backend = run.targets.first().context("no backend")?.backend;
    run.targets = vec![Target {
        backend,
        artifact: Artifact::Pt2,
        destination: Destination::File(program_path.clone()),
    }];
    // The values at the piece's inputs come from the eager reference: the weights are read.
    if let Source::Trace(trace) = &mut run.source {
        trace.load_weights = true;
    }
    let python = run.plugins.python();
    let worker_options = run.worker.clone();
    let deadline = run.verify_deadline;
    let summaries = crate::pipeline::run(run, progress)?;
    let reference = summaries
        .first()
        .and_then(|s| s.single())
        .and_then(|c| c.reference.clone())
        .context("the pipeline wrote no eager reference")?;

    let pt2 = Pt2::open(&program_path)?;
    let program = pt2.programs.get("model").context("the traced archive has no `model` program")?;
    let graph = convert::to_ir(program)
        .map_err(anyhow::Error::msg)
        .context("reading the traced program")?;
    let nodes: Vec<NodeId> = graph
        .nodes_by_target(&options.target)
        .filter(|&n| graph.node(n).is_ok_and(|n| n.subgraph == 0))
        .take(options.count)
        .collect();
    if nodes.is_empty() {
        bail!("{} is not in the traced program ({} nodes): capture from a model that has it, or after other plugins (--plugins)", options.target, graph.node_count());
    }
    let cut = graph.cut(&graph.neighbourhood(&nodes, options.radius))?;

    progress.step("capture", "recording the values at the piece's inputs");
    let mut worker = Worker::start_with(&python, deadline, &worker_options)?;
    let request = CaptureValues { program: program_path, reference, names: cut.inputs.clone() };
    let values = worker.request(&request, deadline)?.values;
    drop(worker);

    let case = Case {
        about: Some(format!(
            "hfx plugins capture --backend {backend} {model} --node {} --count {} --radius {}",
            options.target, options.count, options.radius
        )),
        input: cut.program.to_json_value(),
        values,
        expect_targets: None,
        expect_ranges: Default::default(),
    };
    let bytes = write_case(&options.case, &case)?;
    Ok(Captured { nodes: cut.program.node_count(), inputs: cut.inputs.len(), bytes })
}

/// `--program`: the forward of `run`'s `--model-fn` model as a patch case
/// (expecting the default: the traced program changes with the patch).
pub fn capture_program(run: RunOptions, case_path: &Path) -> Result<Captured> {
    let Source::Trace(trace) = &run.source else {
        bail!("--program captures a model function (--model-fn), not a file")
    };
    let ModelSource::Function(spec) = &trace.request.source else {
        bail!("--program captures a model function (--model-fn python:module:function); an architecture can be a case as it is (see docs/plugins.md)")
    };
    let mut worker = Worker::start_with(&run.plugins.python(), run.verify_deadline, &run.worker)?;
    let captured = worker.request(&CaptureProgram { spec: spec.clone() }, run.verify_deadline)?;
    drop(worker);
    let dynamic = trace.request.dynamic;
    let nodes = captured.program.get("nodes").and_then(|n| n.as_array()).map_or(0, Vec::len);
    let inputs = captured.inputs.len();
    let case = PatchCase {
        about: Some(format!(
            "hfx plugins capture --program {}{}",
            trace.request.source,
            if dynamic { "" } else { " --static" }
        )),
        model: CaseModel::Program { program: captured.program, inputs: captured.inputs },
        dynamic,
        expect: Expect::Changes,
        compare_outputs: None,
    };
    let bytes = write_case(case_path, &case)?;
    Ok(Captured { nodes, inputs, bytes })
}

/// Writes `case` atomically, refusing one larger than a case may be; its size.
fn write_case(path: &Path, case: &impl serde::Serialize) -> Result<usize> {
    let text = serde_json::to_string_pretty(case)? + "\n";
    if text.len() as u64 > MAX_CASE_BYTES {
        bail!(
            "the case is {} KiB, more than a self-test case may be ({} KiB): capture from a smaller config (--set) or fewer nodes",
            text.len() >> 10,
            MAX_CASE_BYTES >> 10
        );
    }
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    crate::atomic::write_bytes_atomically(path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(text.len())
}
