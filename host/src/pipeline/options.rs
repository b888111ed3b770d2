//! What a run does, fixed once before any work starts: where the program
//! comes from, which artifact is written where, with which plugins. The CLI
//! builds a [`RunOptions`] from flags and the config file; every combination
//! that cannot work is refused there, so the pipeline matches on variants and
//! never re-checks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};

use super::model_id::HubModel;
use crate::plugins::loading::SetOptions;
use crate::plugins::Backend;
use crate::stages::OnPluginError;
use crate::trace::protocol::{Delegate, MemoryPlanning};
use crate::trace::{ModelSource, TraceRequest, WorkerOptions};

/// Where the program comes from.
#[derive(Debug)]
pub enum Source {
    /// A `.pt2` written by `torch.export.save` (or by hfx).
    Pt2(PathBuf),
    /// The IR's JSON form (tests and debugging).
    IrJson(PathBuf),
    /// A model the trace worker builds and traces.
    Trace(Box<Trace>),
}

/// A model to trace, and how long the trace may take.
#[derive(Debug)]
pub struct Trace {
    pub request: TraceRequest,
    pub deadline: Duration,
    /// The Hub model `--model-id` named, as resolved in the local cache (the
    /// request loads its snapshot folder); the summary and the export folder
    /// record it.
    pub hub: Option<HubModel>,
    /// Read a model folder's weights in the worker (`--load-weights`) rather
    /// than stream them from its checkpoint into the artifact.
    pub load_weights: bool,
    /// Where traced programs are kept by what made them (`--trace-cache DIR`).
    pub cache: Option<PathBuf>,
    /// Verify on the model folder's first N layers instead of the whole model
    /// (`--verify-layers N`: a model whose weights do not fit is checked on a
    /// truncated config over the same checkpoint).
    pub verify_layers: Option<u32>,
}

impl Trace {
    /// The generation component `component` of the model a worker captured
    /// (`--generation`), traced as this model is; the capture saved the configs.
    pub fn captured(&self, component: &str) -> Trace {
        let mut request = self.request.clone();
        request.source = ModelSource::Captured { component: component.to_string() };
        request.folder = None;
        Trace {
            request,
            deadline: self.deadline,
            hub: self.hub.clone(),
            load_weights: self.load_weights,
            cache: None,
            verify_layers: None,
        }
    }

    /// The model folder's first `layers` layers (`--verify-layers`: a
    /// truncated config over the same checkpoint), traced as this model is,
    /// with its eager reference.
    pub fn truncated(&self, layers: u32) -> Result<Trace> {
        let ModelSource::Directory { path, trust_remote_code, .. } = &self.request.source else {
            bail!(
                "--verify-layers truncates a model folder's config: give --model-dir or --model-id"
            )
        };
        let mut request = self.request.clone();
        request.source = ModelSource::Directory {
            path: path.clone(),
            trust_remote_code: *trust_remote_code,
            layers: Some(layers),
        };
        request.reference = true;
        request.folder = None;
        Ok(Trace {
            request,
            deadline: self.deadline,
            hub: None,
            load_weights: self.load_weights,
            cache: None,
            verify_layers: None,
        })
    }
}

/// What is written. A new backend adds a variant here, and its emission in
/// `pipeline::emit`.
#[derive(Debug, Clone, PartialEq)]
pub enum Artifact {
    /// The program after the backend's FX stages, as a `.pt2` (the dynamo
    /// backend's artifact; for the others what their lowering starts from).
    Pt2,
    /// The IR's JSON form.
    IrJson,
    /// An ONNX model (`--backend onnx`).
    Onnx(OnnxOptions),
    /// An ExecuTorch program: portable (`--backend executorch`, emitted by
    /// hfx) or with a delegate (`--backend executorch.xnnpack`, lowered by
    /// ExecuTorch with the delegate's partitioner in the worker).
    Pte(PteOptions),
    /// An OpenVINO IR (`--backend openvino`): the ONNX model its options
    /// describe, written by hfx's ONNX stages into a scratch folder, read by
    /// OpenVINO's ONNX frontend in the worker and saved as `.xml` + `.bin`.
    Openvino(OpenvinoOptions),
}

/// An OpenVINO IR: the ONNX model OpenVINO's frontend reads, and whether
/// its cache becomes OpenVINO state (the reference's `OpenVINOConfig.stateful`,
/// on unless `--stateless`).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenvinoOptions {
    pub onnx: OnnxOptions,
    pub stateful: bool,
    /// float32 weights stored as float16 and computed in float32
    /// (`--compress-to-fp16`, the reference's `OpenVINOConfig.compress_to_fp16`).
    pub compress_to_fp16: bool,
}

/// A `.pte`: how it is made, and what its arena holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PteOptions {
    pub lowering: Pte,
    pub memory: MemoryPlanning,
}

impl From<Pte> for PteOptions {
    fn from(lowering: Pte) -> Self {
        PteOptions { lowering, memory: MemoryPlanning::default() }
    }
}

/// How a `.pte` is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pte {
    /// Every op a portable kernel: hfx's native emitter (`crate::executorch`).
    Portable,
    /// A delegate's payload, built by ExecuTorch's own code in the worker.
    Delegated(Delegate),
}

impl Pte {
    /// The name the export folder records (`ExecutorchConfig.backend`).
    pub fn name(self) -> &'static str {
        match self {
            Pte::Portable => "portable",
            Pte::Delegated(d) => d.name(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct OnnxOptions {
    /// The opset of the default domain (18..=23).
    pub opset: u32,
    /// Weights in `<out>.onnx.data` (always past protobuf's 2 GB limit).
    pub external_data: bool,
    /// Run the generic graph passes (identities, duplicates, folding, dead code).
    pub optimize: bool,
    /// Quantize the weights (`--quantize`), among the passes.
    pub quantize: Option<crate::onnx::quantize::Quantize>,
    /// The weights matmuls and gathers read stored in this 16-bit dtype and
    /// cast to float32 in the graph (`--dtype bfloat16|float16 --backend
    /// openvino`: [`crate::onnx::compress`]); None: as traced.
    pub weights_dtype: Option<hfx_dtype::DType>,
}

/// Where the artifact lands.
#[derive(Debug, Clone, PartialEq)]
pub enum Destination {
    /// This file (written atomically).
    File(PathBuf),
    /// An export folder, as the reference's `ExportedModel.save_pretrained`
    /// writes it (only for a traced model: its metadata comes from the trace).
    Folder(PathBuf),
}

impl Destination {
    /// The path the user named.
    pub fn path(&self) -> &Path {
        match self {
            Destination::File(p) | Destination::Folder(p) => p,
        }
    }
}

/// One artifact a run writes: a backend's, at its destination.
#[derive(Debug, Clone)]
pub struct Target {
    pub backend: Backend,
    pub artifact: Artifact,
    pub destination: Destination,
}

/// `hfx run`'s options after the config file and the flags are merged.
#[derive(Debug)]
pub struct RunOptions {
    pub source: Source,
    /// What is written, one per backend asked for (`--backend onnx,dynamo`),
    /// never empty: a traced model is traced once for all of them.
    pub targets: Vec<Target>,
    pub plugins: SetOptions,
    pub on_plugin_error: OnPluginError,
    /// Run the artifact in its runtime against eager PyTorch before it lands
    /// (`.onnx`, `.pt2` and `.pte`).
    pub verify: bool,
    /// Keep the eager reference beside every artifact, not only a verified
    /// one or a `.pt2` (`--keep-reference`).
    pub keep_reference: bool,
    /// How trace workers start (memory limit); also the one `--verify` starts
    /// when nothing was traced.
    pub worker: WorkerOptions,
    /// Deadline of a worker request that is not a trace (ExecuTorch's lowering, verification).
    pub verify_deadline: Duration,
}

impl RunOptions {
    /// Whether a target's `.pte` is lowered by the worker, which then stays
    /// after the trace.
    pub fn lowers_in_worker(&self) -> bool {
        self.targets.iter().any(|t| matches!(t.artifact, Artifact::Pte(_)))
    }
}

impl Artifact {
    /// A component's file name in an export folder: `model.onnx`,
    /// `decode.pte`, `openvino_model.xml` (the reference's `program_prefix`).
    pub fn folder_file(&self, component: &str) -> String {
        let extension = match self {
            Artifact::Openvino(_) => return format!("openvino_{component}.xml"),
            Artifact::Onnx(_) => "onnx",
            Artifact::Pte(_) => "pte",
            Artifact::Pt2 => "pt2",
            Artifact::IrJson => "json",
        };
        format!("{component}.{extension}")
    }
}

/// Refuses, before any work, an output (`-o`) that cannot be written: one
/// ending in `/` (a folder) that is a file, or one under a path that is a
/// file. Named as the user gave it, not as the scratch folder beside it that
/// would fail first.
pub fn check_output(output: &Path) -> Result<()> {
    let given = output.as_os_str().to_string_lossy();
    let bare = Path::new(given.trim_end_matches('/'));
    if given.len() > 1 && given.ends_with('/') && bare.is_file() {
        bail!(
            "-o {given}: {} is a file, and the trailing / names a folder: give -o {} to replace the file, or the path of a folder",
            bare.display(),
            bare.display()
        );
    }
    for above in bare.ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()) {
        match std::fs::metadata(above) {
            Ok(found) if found.is_dir() => break,
            Ok(_) => bail!(
                "-o {given}: {} is a file, not a folder to write in: give -o a path under a folder",
                above.display()
            ),
            Err(_) => continue,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_output_under_a_file_or_a_file_named_as_a_folder_is_refused_by_its_given_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.onnx");
        std::fs::write(&file, "").unwrap();
        let refused = |output: &str| check_output(Path::new(output)).unwrap_err().to_string();
        let as_folder = format!("{}/", file.display());
        assert_eq!(
            refused(&as_folder),
            format!("-o {as_folder}: {} is a file, and the trailing / names a folder: give -o {} to replace the file, or the path of a folder", file.display(), file.display())
        );
        let under = format!("{}/sub/y.onnx", file.display());
        assert_eq!(
            refused(&under),
            format!(
                "-o {under}: {} is a file, not a folder to write in: give -o a path under a folder",
                file.display()
            )
        );
        for fine in [file.clone(), dir.path().join("new/deeper/y.onnx"), dir.path().join("out/")] {
            check_output(&fine).unwrap();
        }
        check_output(Path::new("relative.onnx")).unwrap();
    }

    use super::*;

    fn trace(source: ModelSource) -> Trace {
        let mut request = TraceRequest::new(source);
        request.folder = Some("scratch".into());
        request.reference = false;
        Trace {
            request,
            deadline: Duration::from_secs(60),
            hub: Some(HubModel {
                id: "org/tiny".into(),
                revision: "main".into(),
                commit: "c0".into(),
            }),
            load_weights: true,
            cache: Some("cache".into()),
            verify_layers: Some(2),
        }
    }

    fn model_folder() -> ModelSource {
        ModelSource::Directory {
            path: "/models/tiny".into(),
            trust_remote_code: true,
            layers: None,
        }
    }

    #[test]
    fn a_generation_component_is_traced_as_its_model_without_cache_or_configs() {
        let model = trace(model_folder());
        let component = model.captured("decode");
        assert!(matches!(
            &component.request.source,
            ModelSource::Captured { component } if component == "decode"
        ));
        assert_eq!(component.request.folder, None);
        assert_eq!((component.cache, component.verify_layers), (None, None));
        assert_eq!(component.hub, model.hub);
        assert!(component.load_weights);
        assert_eq!(component.request.batch, model.request.batch);
    }

    #[test]
    fn only_a_model_folder_is_truncated_and_its_truncation_is_verified() {
        let model = trace(model_folder());
        let small = model.truncated(3).unwrap();
        assert!(matches!(
            &small.request.source,
            ModelSource::Directory { path, trust_remote_code: true, layers: Some(3) }
                if path == Path::new("/models/tiny")
        ));
        assert!(small.request.reference);
        assert_eq!(small.request.folder, None);
        assert_eq!((small.hub, small.cache, small.verify_layers), (None, None, None));

        let built =
            trace(ModelSource::Architecture { name: "llama".into(), overrides: Vec::new() });
        assert_eq!(
            built.truncated(3).err().unwrap().to_string(),
            "--verify-layers truncates a model folder's config: give --model-dir or --model-id"
        );
    }

    #[test]
    fn a_run_lowers_in_the_worker_when_it_writes_a_pte() {
        let target = |backend, artifact| Target {
            backend,
            artifact,
            destination: Destination::File("out".into()),
        };
        let mut options = RunOptions {
            source: Source::Pt2("in.pt2".into()),
            targets: vec![target(Backend::Dynamo, Artifact::Pt2)],
            plugins: SetOptions::default(),
            on_plugin_error: OnPluginError::default(),
            verify: false,
            keep_reference: false,
            worker: WorkerOptions::default(),
            verify_deadline: Duration::from_secs(60),
        };
        assert!(!options.lowers_in_worker());
        options.targets.push(target(
            Backend::ExecutorchXnnpack,
            Artifact::Pte(Pte::Delegated(Delegate::Xnnpack).into()),
        ));
        assert!(options.lowers_in_worker());
    }

    #[test]
    fn components_are_named_as_the_reference_names_them() {
        let onnx = Artifact::Onnx(OnnxOptions {
            opset: 18,
            external_data: true,
            optimize: true,
            quantize: None,
            weights_dtype: None,
        });
        assert_eq!(onnx.folder_file("model"), "model.onnx");
        assert_eq!(Artifact::Pte(Pte::Portable.into()).folder_file("decode"), "decode.pte");
        assert_eq!(Artifact::Pt2.folder_file("prefill"), "prefill.pt2");
        assert_eq!(Artifact::IrJson.folder_file("model"), "model.json");
        assert_eq!(
            Artifact::Openvino(OpenvinoOptions {
                onnx: OnnxOptions {
                    opset: 18,
                    external_data: true,
                    optimize: true,
                    quantize: None,
                    weights_dtype: None,
                },
                stateful: true,
                compress_to_fp16: false,
            })
            .folder_file("model"),
            "openvino_model.xml"
        );
        assert_eq!(Pte::Portable.name(), "portable");
        assert_eq!(Pte::Delegated(Delegate::Xnnpack).name(), "xnnpack");
    }
}
