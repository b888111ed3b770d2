//! `.pt2` archives as `torch.export.save` writes them (torch 2.13–2.15):
//!
//! ```text
//! <name>/archive_format            "pt2"
//! <name>/archive_version           archive layout version
//! <name>/models/<model>.json       the serialized ExportedProgram (schema.rs)
//! <name>/data/weights/...          parameters, stored and 64-byte aligned,
//!                                  described by model_weights_config.json
//! <name>/data/constants/...        tensor constants, likewise
//! <name>/data/sample_inputs/...    pickled sample inputs (may be empty)
//! ```
//!
//! Weights are never copied into memory: they are byte ranges of the memory
//! map, and writing copies every entry hfx did not change byte for byte.

pub mod archive;
pub mod convert;
pub mod schema;
pub mod sympy;

use std::collections::BTreeMap;
use std::path::Path;

use archive::{Archive, ArchiveError, ArchiveWriter, Entry};
use schema::{ExportedProgram, PayloadConfig, NEWEST_MINOR, SUPPORTED_MAJOR};

#[derive(Debug, thiserror::Error)]
pub enum Pt2Error {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path}: writing: {source}")]
    Write { path: String, source: std::io::Error },
}

/// An opened `.pt2`: its entries, and its programs parsed.
pub struct Pt2 {
    archive: Archive,
    /// The archive's top folder with a trailing `/` (`model/`).
    prefix: String,
    /// Programs by model name (`model` for `models/model.json`).
    pub programs: BTreeMap<String, ExportedProgram>,
    /// Where each weight and constant is stored, per model name.
    pub weights: BTreeMap<String, PayloadConfig>,
    pub constants: BTreeMap<String, PayloadConfig>,
    /// Storages the trace worker wrote beside the archive (an ONNX export's
    /// intermediate `.pt2` holds them empty); looked up before the archive.
    side: Option<SideWeights>,
}

/// `<archive>.weights`, memory-mapped, and its index `<archive>.weights.json`:
/// each fqn's whole storage as `[offset, length]`.
struct SideWeights {
    map: memmap2::Mmap,
    weights: BTreeMap<String, (usize, usize)>,
    constants: BTreeMap<String, (usize, usize)>,
}

/// The side file of weights the trace worker writes for `archive`.
pub fn side_weights_path(archive: &Path) -> std::path::PathBuf {
    let mut name = archive.as_os_str().to_owned();
    name.push(".weights");
    name.into()
}

impl Pt2 {
    pub fn open(path: &Path) -> Result<Pt2, Pt2Error> {
        Self::read(Archive::open(path)?)
    }

    /// Parses an opened archive (from a file or, for fuzzing, from memory).
    pub fn read(archive: Archive) -> Result<Pt2, Pt2Error> {
        let path = archive.path().to_path_buf();
        let path = path.as_path();
        let invalid = |reason: String| Pt2Error::Invalid { path: path.display().to_string(), reason };
        let format = archive
            .entries()
            .iter()
            .find(|e| e.name.ends_with("/archive_format") && e.name.matches('/').count() == 1)
            .ok_or_else(|| invalid("no archive_format entry: not a torch.export archive".into()))?;
        let prefix = format.name.trim_end_matches("archive_format").to_string();
        let format_text = String::from_utf8_lossy(archive.checked_bytes(format)?).trim().to_string();
        if format_text != "pt2" {
            return Err(invalid(format!("archive_format is `{format_text}`, expected `pt2`")));
        }
        let mut pt2 = Pt2 { archive, prefix, programs: BTreeMap::new(), weights: BTreeMap::new(), constants: BTreeMap::new(), side: None };
        let models: Vec<Entry> = pt2.entries_under("models/").filter(|e| e.name.ends_with(".json")).cloned().collect();
        if models.is_empty() {
            return Err(invalid(format!("no model JSON under {}models/", pt2.prefix)));
        }
        for entry in models {
            let model = entry.name.rsplit('/').next().unwrap_or("").trim_end_matches(".json").to_string();
            let program: ExportedProgram = pt2.json(&entry).map_err(invalid)?;
            check_schema_version(&program).map_err(|r| invalid(format!("{}: {r}", entry.name)))?;
            for kind in ["weights", "constants"] {
                let name = format!("{}data/{kind}/{model}_{kind}_config.json", pt2.prefix);
                if let Some(config) = pt2.archive.entry(&name).cloned() {
                    let config: PayloadConfig = pt2.json(&config).map_err(invalid)?;
                    let table = if kind == "weights" { &mut pt2.weights } else { &mut pt2.constants };
                    table.insert(model.clone(), config);
                }
            }
            pt2.programs.insert(model, program);
        }
        Ok(pt2)
    }

    fn entries_under<'a>(&'a self, folder: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        let full = format!("{}{folder}", self.prefix);
        self.archive.entries().iter().filter(move |e| e.name.starts_with(&full))
    }

    fn json<T: serde::de::DeserializeOwned>(&self, entry: &Entry) -> Result<T, String> {
        let bytes = self.archive.checked_bytes(entry).map_err(|e| e.to_string())?;
        serde_json::from_slice(bytes).map_err(|e| format!("{}: {e}", entry.name))
    }

    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// Reads weights from `path` (and its `.json` index) instead of the archive.
    pub fn attach_side_weights(&mut self, path: &Path) -> Result<(), Pt2Error> {
        let invalid = |reason: String| Pt2Error::Invalid { path: path.display().to_string(), reason };
        let mut index_path = path.as_os_str().to_owned();
        index_path.push(".json");
        let text = std::fs::read(&index_path).map_err(|e| invalid(format!("reading its index: {e}")))?;
        #[derive(serde::Deserialize)]
        struct Index {
            weights: BTreeMap<String, (usize, usize)>,
            constants: BTreeMap<String, (usize, usize)>,
        }
        let index: Index = serde_json::from_slice(&text).map_err(|e| invalid(format!("its index: {e}")))?;
        let file = std::fs::File::open(path).map_err(|e| invalid(e.to_string()))?;
        // SAFETY: the file is hfx's own scratch output, not modified while mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| invalid(e.to_string()))?;
        for (fqn, &(offset, length)) in index.weights.iter().chain(&index.constants) {
            if offset.checked_add(length).is_none_or(|end| end > map.len()) {
                return Err(invalid(format!("{fqn}: bytes {offset}+{length} past the end ({})", map.len())));
            }
        }
        self.side = Some(SideWeights { map, weights: index.weights, constants: index.constants });
        Ok(())
    }

    fn side_bytes(&self, constant: bool, fqn: &str) -> Option<&[u8]> {
        let side = self.side.as_ref()?;
        let &(offset, length) = if constant { side.constants.get(fqn)? } else { side.weights.get(fqn)? };
        Some(&side.map[offset..offset + length])
    }

    /// The stored bytes of weight `fqn` of `model` (tied weights share bytes).
    pub fn weight(&self, model: &str, fqn: &str) -> Option<&[u8]> {
        if let Some(bytes) = self.side_bytes(false, fqn) {
            return Some(bytes);
        }
        let meta = self.weights.get(model)?.config.get(fqn)?;
        let entry = self.archive.entry(&format!("{}data/weights/{}", self.prefix, meta.path_name))?;
        Some(self.archive.bytes(entry))
    }

    /// The stored bytes of tensor constant `fqn` of `model`.
    pub fn constant(&self, model: &str, fqn: &str) -> Option<&[u8]> {
        if let Some(bytes) = self.side_bytes(true, fqn) {
            return Some(bytes);
        }
        let meta = self.constants.get(model)?.config.get(fqn)?;
        if meta.use_pickle {
            return None;
        }
        let entry = self.archive.entry(&format!("{}data/constants/{}", self.prefix, meta.path_name))?;
        Some(self.archive.bytes(entry))
    }

    /// Writes the archive with `programs` in place of the ones read; every other
    /// entry is copied byte for byte from the memory map. Atomic.
    pub fn write(&self, path: &Path, programs: &BTreeMap<String, ExportedProgram>) -> Result<(), Pt2Error> {
        let write_error = |source| Pt2Error::Write { path: path.display().to_string(), source };
        let mut out = ArchiveWriter::create(path).map_err(write_error)?;
        for entry in self.archive.entries() {
            let model = entry
                .name
                .strip_prefix(&format!("{}models/", self.prefix))
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| programs.get(n));
            match model {
                Some(program) => {
                    let json = serde_json::to_vec(program).expect("programs serialize");
                    out.add(&entry.name, &json).map_err(write_error)?;
                }
                None => self.archive.copy_entry(entry, &mut out).map_err(write_error)?,
            }
        }
        out.finish().map_err(write_error)
    }
}

fn check_schema_version(program: &ExportedProgram) -> Result<(), String> {
    let v = program.schema_version;
    if v.major != SUPPORTED_MAJOR {
        return Err(format!(
            "schema version {}.{} is not supported (this hfx reads {SUPPORTED_MAJOR}.0 to {SUPPORTED_MAJOR}.{NEWEST_MINOR}, torch 2.13-2.15)",
            v.major, v.minor
        ));
    }
    Ok(())
}
