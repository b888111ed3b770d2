//! `hfx generate DIR`: an export folder written with `--generation` (ONNX,
//! `.pt2`, `.pte`, OpenVINO IR, or an ONNX Runtime GenAI package) generates text from a
//! prompt with the folder's tokenizer, each component in its runtime. The
//! worker drives it as it drives the generation check
//! (`hfx_worker/generation.py`: transformers' `generate` loop with the
//! model's forward replaced by the components, or GenAI's `Generator`), and
//! sends the text as it is produced. `--compare` generates eagerly from the
//! source model folder too and names the first token that differs.
//!
//! The folder is untrusted input: `export.json` is read bounded and typed,
//! each file it names must be a plain file of the folder (no link, no path),
//! a `.pt2` is parsed by the host first (pickled payloads refused, as for
//! `hfx run FILE.pt2`), and the worker reads it in its OS sandbox, which
//! grants the folder (and the `--compare` model folder) alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::trace::protocol::{
    FolderComponent, Generate, GenerateReply, GeneratedTokens, Sampling, VerifyModel,
};
use crate::trace::{Worker, WorkerOptions};

/// The longest `export.json` read (its specs grow with the layers; the
/// largest seen are well under 1 MiB).
const MAX_MANIFEST: u64 = 64 << 20;

/// The files a folder's tokenizer may be; one must be there.
const TOKENIZER_FILES: &[&str] =
    &["tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt"];

/// What `hfx generate` does.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub folder: PathBuf,
    pub prompt: String,
    pub max_new_tokens: u32,
    pub sampling: Option<Sampling>,
    pub seed: u64,
    pub compare: Compare,
    pub python: String,
    pub worker: WorkerOptions,
    pub deadline: Duration,
}

/// Whether, and against which model folder, eager transformers generates too.
#[derive(Debug, Clone, PartialEq)]
pub enum Compare {
    No,
    /// The folder's recorded Hub model (`export.json`'s `hfx.model`), else refused.
    Recorded,
    Folder(PathBuf),
}

/// An export folder's `export.json`, the fields `hfx generate` reads.
#[derive(Debug, Deserialize)]
struct Manifest {
    schema_version: u64,
    export_format: String,
    components: BTreeMap<String, ManifestEntry>,
}

#[derive(Debug, Deserialize)]
struct ManifestEntry {
    file: String,
    metadata: ComponentMetadata,
}

#[derive(Debug, Deserialize)]
struct ComponentMetadata {
    /// In the traced order (`serde_json`'s `preserve_order`).
    #[serde(default)]
    kwargs: serde_json::Map<String, Value>,
    in_spec: Option<String>,
    out_spec: Option<String>,
    #[serde(default)]
    out_constants: Vec<Value>,
    #[serde(default)]
    hfx: Option<Value>,
}

/// An export folder checked for `hfx generate`: its components, whether it
/// is a GenAI package, and the Hub model it records having been exported from.
#[derive(Debug)]
pub struct GenerationFolder {
    pub components: BTreeMap<String, FolderComponent>,
    pub genai: bool,
    pub hub_model: Option<(String, String)>,
}

/// Reads and checks the export folder `dir`; every refusal is one line
/// naming the file and what to do.
pub fn read_folder(dir: &Path) -> Result<GenerationFolder> {
    let export = || format!("export one with `hfx run ... --generation -o {}`", dir.display());
    if !dir.is_dir() {
        bail!("{}: not a folder; hfx generate runs an export folder ({})", dir.display(), export());
    }
    let manifest_path = dir.join("export.json");
    if std::fs::symlink_metadata(&manifest_path).is_err() {
        bail!(
            "{}: missing, so {} is not an export folder; {}",
            manifest_path.display(),
            dir.display(),
            export()
        );
    }
    // Links: hfx writes none, and one could lead the runtime out of the folder.
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_symlink() {
            bail!(
                "{}: a symbolic link; hfx generate reads an export folder's own files only (copy the file in its place)",
                entry.path().display()
            );
        }
    }
    let text = crate::input::read_to_string_bounded(&manifest_path, MAX_MANIFEST)
        .with_context(|| format!("reading {}", manifest_path.display()))?;
    let manifest: Manifest = serde_json::from_str(&text).with_context(|| {
        format!("{}: not an export folder's manifest; {}", manifest_path.display(), export())
    })?;
    if manifest.schema_version != 1 {
        bail!(
            "{}: schema_version {} (hfx reads 1); re-export the folder with this hfx",
            manifest_path.display(),
            manifest.schema_version
        );
    }
    let extension = match manifest.export_format.as_str() {
        "onnx" => "onnx",
        "dynamo" => "pt2",
        "executorch" => "pte",
        "openvino" => "xml",
        other => bail!(
            "{}: export_format `{other}` (hfx generate runs onnx, dynamo, executorch and openvino)",
            manifest_path.display()
        ),
    };
    if !manifest.components.contains_key("decode") {
        let names: Vec<&str> = manifest.components.keys().map(String::as_str).collect();
        bail!(
            "{}: components {}, no `decode`: not a generation export; re-export with `hfx run ... --generation -o {}`",
            manifest_path.display(),
            names.join(", "),
            dir.display()
        );
    }
    if !dir.join("config.json").is_file() {
        bail!(
            "{}: missing; re-export the folder (hfx writes the model's config into it)",
            dir.join("config.json").display()
        );
    }
    if !TOKENIZER_FILES.iter().any(|f| dir.join(f).is_file()) {
        bail!(
            "{}: no tokenizer (tokenizer.json): export from a model folder that has one (`--model-dir`, `--model-id`; the export copies it), or copy the model's tokenizer files into the folder",
            dir.display()
        );
    }
    let mut components = BTreeMap::new();
    let mut hub_model = None;
    for (name, entry) in manifest.components {
        let plain = Path::new(&entry.file).file_name().is_some_and(|f| f == entry.file.as_str());
        if !plain || !entry.file.ends_with(&format!(".{extension}")) {
            bail!(
                "{}: component `{name}` names `{}`, not a .{extension} file of the folder",
                manifest_path.display(),
                entry.file
            );
        }
        let path = dir.join(&entry.file);
        if !path.is_file() {
            bail!(
                "{}: missing (export.json's `{name}` component); re-export the folder",
                path.display()
            );
        }
        let metadata = entry.metadata;
        let (Some(in_spec), Some(out_spec)) = (metadata.in_spec, metadata.out_spec) else {
            bail!(
                "{}: component `{name}` records no in_spec and out_spec, which hfx generate calls it by; re-export the folder with hfx",
                manifest_path.display()
            );
        };
        let artifact = match extension {
            "onnx" => VerifyModel::Onnx { path },
            // An IR is a graph and its weights: reading it runs no code.
            "xml" => VerifyModel::Openvino { path },
            "pt2" => {
                // Parsed here first: a pickled payload never reaches torch's loader.
                crate::graph::pt2::Pt2::open(&path)?;
                VerifyModel::Pt2 { path }
            }
            _ => VerifyModel::Pte { path, in_spec: in_spec.clone() },
        };
        if let Some(model) = metadata.hfx.as_ref().and_then(|h| h.get("model")) {
            if let (Some(id), Some(commit)) = (model["id"].as_str(), model["commit"].as_str()) {
                hub_model = Some((id.to_string(), commit.to_string()));
            }
        }
        components.insert(
            name,
            FolderComponent {
                artifact,
                kwargs: metadata.kwargs.keys().cloned().collect(),
                in_spec,
                out_spec,
                out_constants: metadata.out_constants,
            },
        );
    }
    let genai = extension == "onnx" && dir.join(super::genai::CONFIG).is_file();
    Ok(GenerationFolder { components, genai, hub_model })
}

/// The model folder `--compare` generates eagerly from.
fn compare_folder(compare: &Compare, folder: &GenerationFolder) -> Result<Option<PathBuf>> {
    match compare {
        Compare::No => Ok(None),
        Compare::Folder(dir) => {
            if !dir.join("config.json").is_file() {
                bail!(
                    "--model {}: no config.json: not a model folder (the one the export was made from)",
                    dir.display()
                );
            }
            Ok(Some(dir.clone()))
        }
        Compare::Recorded => {
            let Some((id, commit)) = &folder.hub_model else {
                bail!("--compare: the export folder does not record the model it was exported from (only a --model-id export does): name its model folder with --model DIR");
            };
            let id = super::model_id::ModelId::parse(&format!("{id}@{commit}"))?;
            let cache = super::model_id::HubCache::from_env()?;
            // Pickled weights are not loaded for a comparison: a snapshot without safetensors is refused.
            Ok(Some(super::model_id::resolve(&id, &cache, false)?.snapshot))
        }
    }
}

/// Generates from `options.folder`; `on_text` gets the text as it is produced.
pub fn generate(options: &GenerateOptions, on_text: Box<dyn FnMut(&str)>) -> Result<GenerateReply> {
    let folder = read_folder(&options.folder)?;
    let compare = compare_folder(&options.compare, &folder)?;
    let mut sandbox = crate::trace::Sandbox::default();
    sandbox.read.push(options.folder.clone());
    if let Some(model) = &compare {
        sandbox.read.extend(super::trace::model_folder_reads(model));
    }
    let worker_options = WorkerOptions { sandbox: Some(sandbox), ..options.worker.clone() };
    let mut worker = Worker::start_with(&options.python, super::WORKER_START, &worker_options)?;
    if !worker.sandbox.off().is_empty() {
        tracing::warn!(
            "the generate worker runs with part of its OS sandbox off: {}",
            worker.sandbox.line()
        );
    }
    worker.on_generated = Some(on_text);
    let request = Generate {
        folder: options.folder.clone(),
        components: folder.components,
        genai: folder.genai,
        prompt: options.prompt.clone(),
        max_new_tokens: options.max_new_tokens,
        sampling: options.sampling.clone(),
        seed: options.seed,
        compare,
    };
    worker
        .request(&request, options.deadline)
        .with_context(|| format!("generating from {}", options.folder.display()))
}

/// The index of the first token where `generated` and `eager` differ (one
/// ending before the other differs where it ends), or None.
pub fn first_difference(generated: &GeneratedTokens, eager: &GeneratedTokens) -> Option<usize> {
    let same = generated.ids.iter().zip(&eager.ids).take_while(|(a, b)| a == b).count();
    (same < generated.ids.len().max(eager.ids.len())).then_some(same)
}

/// A token of `tokens` for a line: its id and text, or that there is none.
pub fn token_at(tokens: &GeneratedTokens, at: usize) -> String {
    match (tokens.ids.get(at), tokens.pieces.get(at)) {
        (Some(id), Some(piece)) => format!("{id} {piece:?}"),
        (Some(id), None) => id.to_string(),
        _ => "nothing (it had stopped)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(ids: &[i64]) -> GeneratedTokens {
        GeneratedTokens {
            ids: ids.to_vec(),
            pieces: ids.iter().map(|i| format!("w{i}")).collect(),
            text: String::new(),
        }
    }

    #[test]
    fn the_first_difference_is_the_first_unequal_token_or_where_one_stops() {
        assert_eq!(first_difference(&tokens(&[1, 2, 3]), &tokens(&[1, 2, 3])), None);
        assert_eq!(first_difference(&tokens(&[1, 5, 3]), &tokens(&[1, 2, 3])), Some(1));
        assert_eq!(first_difference(&tokens(&[1, 2]), &tokens(&[1, 2, 3])), Some(2));
        assert_eq!(token_at(&tokens(&[1, 2]), 2), "nothing (it had stopped)");
        assert_eq!(token_at(&tokens(&[1, 2]), 1), "2 \"w2\"");
    }

    /// A folder written by an export, `export.json` as `folder.rs` writes it.
    fn folder(dir: &Path, format: &str, file: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let manifest = serde_json::json!({
            "schema_version": 1,
            "export_format": format,
            "components": {
                "prefill": {"file": file.replace("decode", "prefill"), "metadata": {"kwargs": {"input_ids": {}, "attention_mask": {}}, "in_spec": "[]", "out_spec": "[]"}},
                "decode": {"file": file, "metadata": {"kwargs": {"input_ids": {}}, "in_spec": "[]", "out_spec": "[]"}},
            },
        });
        std::fs::write(dir.join("export.json"), manifest.to_string()).unwrap();
        for f in ["config.json", "tokenizer.json", "prefill.onnx", "decode.onnx"] {
            std::fs::write(dir.join(f), "{}").unwrap();
        }
    }

    fn refusal(dir: &Path) -> String {
        let error = read_folder(dir).unwrap_err();
        let line = format!("{error:#}");
        assert!(!line.contains('\n'), "{line}");
        line
    }

    #[test]
    fn a_generation_folder_is_read_with_its_components_kwargs_in_order() {
        let dir = tempfile::tempdir().unwrap();
        folder(dir.path(), "onnx", "decode.onnx");
        let read = read_folder(dir.path()).unwrap();
        assert!(!read.genai);
        assert_eq!(read.components["prefill"].kwargs, ["input_ids", "attention_mask"]);
        std::fs::write(dir.path().join("genai_config.json"), "{}").unwrap();
        assert!(read_folder(dir.path()).unwrap().genai);
    }

    #[test]
    fn what_is_not_a_generation_folder_is_refused_in_one_line_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let line = refusal(dir.path());
        assert!(line.contains("export.json: missing") && line.contains("--generation"), "{line}");

        folder(dir.path(), "onnx", "decode.onnx");
        std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
        let line = refusal(dir.path());
        assert!(line.contains("no tokenizer (tokenizer.json)"), "{line}");

        std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
        std::fs::remove_file(dir.path().join("decode.onnx")).unwrap();
        let line = refusal(dir.path());
        assert!(line.contains("decode.onnx: missing"), "{line}");

        folder(dir.path(), "onnx", "../decode.onnx");
        let line = refusal(dir.path());
        assert!(line.contains("not a .onnx file of the folder"), "{line}");

        folder(dir.path(), "onnx", "decode.onnx");
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("weights.onnx.data")).unwrap();
        let line = refusal(dir.path());
        assert!(line.contains("weights.onnx.data: a symbolic link"), "{line}");
    }
}
