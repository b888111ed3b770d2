//! `-o DIR`: what the reference's `ExportedModel.save_pretrained` writes, so
//! `ExportedModel.from_pretrained(DIR)` loads and runs an hfx export: the
//! component (`model.onnx` + `model.onnx.data`, `model.pt2` or `model.pte`), `export.json`
//! (schema 1: format, component file and metadata), `config.json` and
//! `generation_config.json`, and the model folder's tokenizer and processor
//! files. ONNX components of one model keep their weights
//! in one `weights.onnx.data`, each weight once (their own `.onnx.data`
//! empty). Written in a scratch folder beside DIR; each file is renamed into
//! DIR at the end.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::json;

use super::options::{Artifact, Trace};
use super::scratch::Scratch;
use crate::plugins::manifest::Backend;
use crate::plugins::PluginSet;

/// The components an export folder may hold (a single export's `model`, the
/// generation components) and their files, of every backend: an export
/// removes the ones it did not write.
const FOLDER_COMPONENTS: &[&str] = &[
    "model",
    "encoder",
    "prefill",
    "decode",
    "image_encoder",
    "audio_encoder",
    "multi_modal_projector",
    "connector",
    "embed_vision",
    "embed_audio",
    "language_model",
    "lm_head",
];
const FOLDER_FILES: &[&str] = &[".onnx", ".onnx.data", ".pt2", ".pte", ".reference.pt"];
/// An OpenVINO component's files carry the reference's prefix: `openvino_model.xml`, its `.bin`.
const OPENVINO_FILES: &[&str] = &[".xml", ".bin", ".reference.pt"];

pub struct ExportFolder {
    dir: PathBuf,
    scratch: Scratch,
}

impl ExportFolder {
    pub fn beside(dir: &Path) -> Result<ExportFolder> {
        let scratch = Scratch::beside(dir, "folder")?;
        Ok(ExportFolder { dir: dir.to_path_buf(), scratch })
    }

    /// Where the pipeline writes a component's artifact (in the scratch folder).
    pub fn component(&self, name: &str, artifact: &Artifact) -> PathBuf {
        self.scratch.path().join(artifact.folder_file(name))
    }

    /// Where the worker saves the model's configs.
    pub fn scratch(&self) -> &Path {
        self.scratch.path()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `export.json` and moves every file into the folder. The
    /// metadata gains `hfx`: who wrote the export and with which plugins (the
    /// `.pte` and `.pt2` formats have no field for it; ONNX models also carry
    /// it in `metadata_props`). The reference's `ExportMetadata.from_dict`
    /// skips fields it does not know.
    pub fn finish(
        self,
        artifact: &Artifact,
        trace: &Trace,
        components: &[(String, serde_json::Value)],
        set: &PluginSet,
        backend: Backend,
    ) -> Result<()> {
        let versions = &set.upstream;
        let (format, required): (&str, &[&str]) = match artifact {
            Artifact::Onnx(_) => ("onnx", &["torch", "onnx", "onnxscript"]),
            Artifact::Openvino(_) => ("openvino", &["torch", "openvino"]),
            Artifact::Pte(_) => ("executorch", &["torch", "executorch"]),
            Artifact::Pt2 | Artifact::IrJson => ("dynamo", &["torch"]),
        };
        let packages: serde_json::Map<String, serde_json::Value> = std::iter::once("transformers")
            .chain(required.iter().copied())
            .filter_map(|p| Some((p.to_string(), json!(versions.get(p)?))))
            .collect();
        let request = &trace.request;
        let mut config = json!({
            "dynamic": request.dynamic,
            "dynamic_shapes": if request.dynamic_shapes.is_empty() { serde_json::Value::Null } else { json!(request.dynamic_shapes.iter().map(ToString::to_string).collect::<Vec<_>>()) },
            "export_format": format,
            "prefer_deferred_runtime_asserts_over_guards": !request.dynamic_shapes.is_empty(),
            "strict": false,
        });
        match artifact {
            Artifact::Onnx(onnx) => {
                config["opset_version"] = json!(onnx.opset);
                config["optimize"] = json!(onnx.optimize);
                config["ort_fusions"] = serde_json::Value::Null;
            }
            // The reference's `ExecutorchConfig` fields.
            Artifact::Pte(pte) => {
                config["backend"] = json!(pte.lowering.name());
                config["alloc_graph_input"] = json!(pte.memory.graph_inputs);
                config["alloc_graph_output"] = json!(pte.memory.graph_outputs);
                config["alloc_mutable_buffers"] = json!(pte.memory.mutable_buffers);
            }
            // The reference's `OpenVINOConfig` fields: whether float32 weights are stored
            // as float16; whether a cache becomes state.
            Artifact::Openvino(openvino) => {
                config["compress_to_fp16"] = json!(openvino.compress_to_fp16);
                config["stateful"] = json!(openvino.stateful);
            }
            Artifact::Pt2 | Artifact::IrJson => {}
        }
        if let crate::trace::ModelSource::Directory { path, .. } = &trace.request.source {
            copy_processor_files(path, self.scratch.path())?;
        }
        // The components of one model hold the same weights: on disk once.
        if matches!(artifact, Artifact::Onnx(_)) && components.len() > 1 {
            let models: Vec<PathBuf> =
                components.iter().map(|(name, _)| self.component(name, artifact)).collect();
            let shared = crate::onnx::external::share_weights(&models)
                .context("sharing the components' weights in one file")?;
            tracing::info!(
                "the components share {} ({} bytes; {} bytes not written twice)",
                crate::onnx::external::SHARED_DATA,
                shared.bytes,
                shared.saved
            );
        }
        let mut entries = serde_json::Map::new();
        for (name, metadata) in components {
            let mut metadata = metadata.clone();
            metadata["packages"] = json!(packages);
            metadata["export_config"] = config.clone();
            metadata["hfx"] = provenance(set, backend);
            // The reference records no model name (`config.json` drops `_name_or_path`): hfx's own field does.
            if let Some(hub) = &trace.hub {
                metadata["hfx"]["model"] =
                    json!({"id": hub.id, "revision": hub.revision, "commit": hub.commit});
            }
            entries.insert(
                name.clone(),
                json!({"file": artifact.folder_file(name), "metadata": metadata}),
            );
        }
        let manifest = json!({
            "schema_version": 1,
            "export_format": format,
            "components": entries,
        });
        let text = serde_json::to_string_pretty(&manifest)? + "\n";
        crate::atomic::write_bytes_atomically(
            &self.scratch.path().join("export.json"),
            text.as_bytes(),
        )?;
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let mut written = Vec::new();
        for entry in std::fs::read_dir(self.scratch.path())? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                let to = self.dir.join(entry.file_name());
                std::fs::rename(entry.path(), &to)
                    .with_context(|| format!("writing {}", to.display()))?;
                written.push(entry.file_name());
            }
        }
        // A folder exported before with another backend (or with its weights
        // inline, or as a GenAI package): the files hfx names that this export did not write go.
        let files = FOLDER_COMPONENTS
            .iter()
            .flat_map(|c| {
                let openvino = OPENVINO_FILES.iter().map(move |f| format!("openvino_{c}{f}"));
                FOLDER_FILES.iter().map(move |f| format!("{c}{f}")).chain(openvino)
            })
            .chain([crate::onnx::external::SHARED_DATA.to_string(), super::genai::CONFIG.into()]);
        for stale in
            files.filter(|f| !written.iter().any(|w| w.as_os_str() == std::ffi::OsStr::new(f)))
        {
            let path = self.dir.join(stale);
            if path.is_file() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing the stale {}", path.display()))?;
            }
        }
        Ok(())
    }
}

/// The files of a model folder a `from_pretrained` of the export folder
/// needs besides the model's configs: the tokenizer's (`AutoTokenizer`), a
/// feature extractor's or image processor's (`AutoProcessor`, Whisper's log-mel
/// settings), a chat template.
const PROCESSOR_FILES: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "normalizer.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
];

/// Copies the [`PROCESSOR_FILES`] `model` has into `scratch`, so the export
/// folder is what a user deploys: the model and what turns text or audio
/// into its inputs. A file the export wrote itself is kept. Each is opened
/// as a checkpoint file is: a regular file of the folder, a link only as the
/// Hub cache's own, so a `tokenizer.json` linking to a key does not put the
/// key into the folder the user ships.
fn copy_processor_files(model: &Path, scratch: &Path) -> Result<()> {
    for name in PROCESSOR_FILES {
        let (from, to) = (model.join(name), scratch.join(name));
        if std::fs::symlink_metadata(&from).is_err() || to.exists() {
            continue;
        }
        let copy = || -> Result<()> {
            let (_, mut file) =
                crate::weights::checkpoint::open_checkpoint(&from, std::slice::from_ref(&from))
                    .map_err(anyhow::Error::msg)?;
            std::io::copy(&mut file, &mut std::fs::File::create(&to)?)?;
            Ok(())
        };
        copy().with_context(|| format!("copying {} into the export folder", from.display()))?;
    }
    Ok(())
}

/// hfx's version and the plugins that served `backend`, each with its
/// version and component hash (what `hfx.lock` pins).
pub fn provenance(set: &PluginSet, backend: Backend) -> serde_json::Value {
    let plugins: Vec<serde_json::Value> = set
        .plugins
        .iter()
        .filter(|p| p.manifest.plugin.backend.serve(backend))
        .map(|p| json!({"name": p.manifest.plugin.name, "version": p.manifest.plugin.version, "sha256": p.component_sha256}))
        .collect();
    json!({"version": env!("CARGO_PKG_VERSION"), "plugins": plugins})
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::trace::{ModelSource, TraceRequest};

    /// The names of the files in `dir`, sorted.
    fn file_names(dir: &Path) -> Vec<String> {
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        files.sort();
        files
    }

    fn trace() -> Trace {
        let mut request = TraceRequest::new(ModelSource::Architecture {
            name: "llama".into(),
            overrides: Vec::new(),
        });
        request.dynamic = true;
        Trace {
            request,
            deadline: std::time::Duration::from_secs(60),
            hub: None,
            load_weights: false,
            cache: None,
            verify_layers: None,
        }
    }

    fn set() -> PluginSet {
        let upstream = [("torch", "2.13.0"), ("transformers", "5.24.0"), ("onnx", "1.19.0")];
        PluginSet {
            plugins: Vec::new(),
            skipped: Vec::new(),
            upstream: upstream.iter().map(|(p, v)| (p.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn a_finished_folder_holds_what_this_export_wrote_and_its_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("export");
        // A folder exported before as `.pte` and as a GenAI package, with a file of the user's.
        std::fs::create_dir(&out).unwrap();
        for stale in ["model.pte", "decode.pte", "genai_config.json", "notes.txt"] {
            std::fs::write(out.join(stale), "before").unwrap();
        }
        let folder = ExportFolder::beside(&out).unwrap();
        let artifact = Artifact::Onnx(super::super::OnnxOptions {
            opset: 18,
            external_data: true,
            optimize: true,
            quantize: None,
            weights_dtype: None,
        });
        let model = folder.component("model", &artifact);
        assert_eq!(model, folder.scratch().join("model.onnx"));
        for file in ["model.onnx", "model.onnx.data", "model.reference.pt", "config.json"] {
            std::fs::write(folder.scratch().join(file), file).unwrap();
        }
        let scratch = folder.scratch().to_path_buf();
        let metadata = serde_json::json!({"task": "text-generation"});
        folder
            .finish(&artifact, &trace(), &[("model".into(), metadata)], &set(), Backend::Onnx)
            .unwrap();
        assert!(!scratch.exists());
        let files = file_names(&out);
        assert_eq!(
            files,
            [
                "config.json",
                "export.json",
                "model.onnx",
                "model.onnx.data",
                "model.reference.pt",
                "notes.txt"
            ]
        );
        assert_eq!(std::fs::read_to_string(out.join("model.onnx")).unwrap(), "model.onnx");
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("export.json")).unwrap()).unwrap();
        assert_eq!(manifest["schema_version"], 1);
        assert_eq!(manifest["export_format"], "onnx");
        let model = &manifest["components"]["model"];
        assert_eq!(model["file"], "model.onnx");
        let metadata = &model["metadata"];
        assert_eq!(metadata["task"], "text-generation");
        // The reference's packages: transformers and the format's, those installed.
        assert_eq!(
            metadata["packages"],
            serde_json::json!({"transformers": "5.24.0", "torch": "2.13.0", "onnx": "1.19.0"})
        );
        let config = &metadata["export_config"];
        assert_eq!(config["dynamic"], true);
        assert_eq!(config["dynamic_shapes"], serde_json::Value::Null);
        assert_eq!(config["opset_version"], 18);
        assert_eq!(config["optimize"], true);
        assert_eq!(metadata["hfx"]["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(metadata["hfx"]["plugins"], serde_json::json!([]));
    }

    /// A `.pt2` export of the model folder `model` finished into `out`.
    fn finish_from_folder(model: PathBuf, out: &Path) -> Result<()> {
        let mut trace = trace();
        trace.request.source =
            ModelSource::Directory { path: model, trust_remote_code: false, layers: None };
        let folder = ExportFolder::beside(out).unwrap();
        let artifact = Artifact::Pt2;
        std::fs::write(folder.component("model", &artifact), "pt2").unwrap();
        let components = [("model".into(), serde_json::json!({}))];
        folder.finish(&artifact, &trace, &components, &set(), Backend::Dynamo)
    }

    #[test]
    fn a_folder_exported_from_a_model_folder_holds_its_tokenizer_and_processor_files() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        std::fs::create_dir(&model).unwrap();
        for file in ["tokenizer.json", "preprocessor_config.json", "model.safetensors", "notes.md"]
        {
            std::fs::write(model.join(file), file).unwrap();
        }
        let out = dir.path().join("export");
        finish_from_folder(model, &out).unwrap();
        let files = file_names(&out);
        assert_eq!(
            files,
            ["export.json", "model.pt2", "preprocessor_config.json", "tokenizer.json"]
        );
        assert_eq!(std::fs::read_to_string(out.join("tokenizer.json")).unwrap(), "tokenizer.json");
    }

    /// A processor file that links out of the model folder (to a key, say)
    /// stops the export naming it, and nothing is written.
    #[test]
    fn a_processor_file_linking_out_of_the_model_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        std::fs::create_dir(&model).unwrap();
        std::fs::write(dir.path().join("id_rsa"), "secret").unwrap();
        std::os::unix::fs::symlink(dir.path().join("id_rsa"), model.join("tokenizer.json"))
            .unwrap();
        let out = dir.path().join("export");
        let error = finish_from_folder(model, &out).unwrap_err();
        let line = format!("{error:#}");
        assert!(line.contains("tokenizer.json") && line.contains("symbolic link"), "{line}");
        assert!(!out.exists());
    }

    #[test]
    fn a_pte_folder_records_the_reference_executorch_config() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("export");
        let folder = ExportFolder::beside(&out).unwrap();
        let artifact = Artifact::Pte(super::super::Pte::Portable.into());
        std::fs::write(folder.component("model", &artifact), "pte").unwrap();
        let metadata = serde_json::json!({});
        folder
            .finish(&artifact, &trace(), &[("model".into(), metadata)], &set(), Backend::Executorch)
            .unwrap();
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("export.json")).unwrap()).unwrap();
        assert_eq!(manifest["export_format"], "executorch");
        let config = &manifest["components"]["model"]["metadata"]["export_config"];
        assert_eq!(config["backend"], "portable");
        for field in ["alloc_graph_input", "alloc_graph_output", "alloc_mutable_buffers"] {
            assert_eq!(config[field], true, "{field}");
        }
        assert_eq!(config.get("opset_version"), None);
    }
}
