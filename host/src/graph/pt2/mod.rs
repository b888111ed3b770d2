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
pub mod prewrite;
pub mod schema;
pub mod sympy;

use std::collections::BTreeMap;
use std::path::Path;

use archive::{Archive, ArchiveError, ArchiveWriter, Entry};
use schema::{ExportedProgram, PayloadConfig, PayloadMeta, NEWEST_MINOR, SUPPORTED_MAJOR};

use crate::graph::{Dim, TensorMeta};
use crate::weights::cast;
use crate::weights::checkpoint::{lexical, open_checkpoint};
use crate::weights::files::WeightFiles;
use crate::weights::map::{offset_in, release_from};
use crate::weights::place::Place;

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

/// Weights stored outside the archive, indexed by `<archive>.weights.json`:
/// each fqn's whole storage as `[file, offset, length]` in one of the files
/// the index lists — the trace worker's `<archive>.weights`, or a model
/// folder's safetensors the weights were streamed from — each memory-mapped.
struct SideWeights {
    files: Vec<SideFile>,
    weights: BTreeMap<String, SideEntry>,
    constants: BTreeMap<String, SideEntry>,
}

/// Where a side-stored storage is: `[file, offset, length]`, or with a fourth
/// element the dtype it is stored in when that is not the tensor's (a
/// checkpoint's bfloat16 weight exported as float32: converted as it is
/// written, [`cast::Cast`]).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(untagged)]
enum SideEntry {
    Same(usize, usize, usize),
    Stored(usize, usize, usize, String),
}

impl SideEntry {
    fn place(&self) -> (usize, usize, usize) {
        match self {
            SideEntry::Same(f, o, l) | SideEntry::Stored(f, o, l, _) => (*f, *o, *l),
        }
    }
}

/// A stored tensor's bytes, and the conversion they need to be the tensor's
/// dtype (none but for streamed weights exported in another dtype).
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub bytes: &'a [u8],
    pub cast: Option<cast::Cast>,
}

impl Source<'_> {
    /// Bytes of the tensor's dtype these make.
    pub fn len(&self) -> usize {
        self.cast.map_or(self.bytes.len(), |c| c.output_len(self.bytes.len()))
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// A contiguous tensor of a program: its sizes, its dtype, and its bytes
/// in its storage ([`Pt2::contiguous_tensor`]).
#[derive(Debug, Clone)]
pub struct StoredTensor<'a> {
    pub dims: Vec<i64>,
    pub dtype: hfx_dtype::DType,
    pub source: Source<'a>,
}

/// Why a tensor's bytes cannot be read as a contiguous tensor.
#[derive(Debug, thiserror::Error)]
pub enum TensorError {
    #[error("unknown dtype `{0}`")]
    Dtype(String),
    #[error("weight `{0}` is not in the archive")]
    Missing(String),
    #[error("weight `{fqn}`: {reason}")]
    Invalid { fqn: String, reason: String },
    #[error(transparent)]
    Storage(#[from] Pt2Error),
}

/// Row-major strides (or none given), sizes of 1 aside.
fn is_contiguous(strides: &[i64], dims: &[i64]) -> bool {
    if strides.is_empty() {
        return true;
    }
    if strides.len() != dims.len() {
        return false;
    }
    let mut expected = Some(1i64);
    for (&stride, &size) in strides.iter().zip(dims).rev() {
        if size != 1 && Some(stride) != expected {
            return false;
        }
        expected = expected.and_then(|e| e.checked_mul(size.max(1)));
    }
    true
}

struct SideFile {
    path: std::path::PathBuf,
    /// Whether the file is one of hfx's caller's (its descriptor there).
    caller_fd: Option<i32>,
    /// The file behind the map, for kernel-side copies of its bytes.
    file: std::fs::File,
    map: memmap2::Mmap,
}

/// A file a side index places weights in: a path, or a shared-memory file
/// of hfx's caller by its descriptor there ([`crate::weights::caller`]).
#[derive(serde::Deserialize, serde::Serialize)]
#[serde(untagged)]
enum IndexedFile {
    Path(std::path::PathBuf),
    Caller {
        #[serde(rename = "caller_fd")]
        fd: i32,
    },
}

/// Most bytes the side weights' index (`<archive>.weights.json`) may hold.
const SIDE_INDEX_LIMIT: u64 = 64 << 20;

/// The `path_name` prefix torch loads a constant by as a raw tensor storage
/// (every other prefix is an object it unpickles).
const TENSOR_CONSTANT_PREFIX: &str = "tensor_";

/// Where a tensor's bytes are stored: `data/weights/` or `data/constants/`.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Weight,
    Constant,
}

impl Kind {
    /// The folder of the archive's `data/` that holds this kind.
    fn folder(self) -> &'static str {
        match self {
            Kind::Weight => "weights",
            Kind::Constant => "constants",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Kind::Weight => "weight",
            Kind::Constant => "constant",
        }
    }
}

/// Bytes of storage the tensor a payload entry describes reaches.
fn needed_bytes(meta: &PayloadMeta) -> Result<u64, String> {
    let t = meta.tensor_meta.as_ref().ok_or("has no tensor metadata")?;
    let ints = |dims: &[schema::SymInt], what: &str| -> Result<Vec<i64>, String> {
        dims.iter()
            .map(|d| match d {
                schema::SymInt::AsInt(i) => Ok(*i),
                schema::SymInt::AsExpr(e) => Err(format!("symbolic {what} `{}`", e.expr_str)),
            })
            .collect()
    };
    let sizes = ints(&t.sizes, "size")?;
    let strides = ints(&t.strides, "stride")?;
    let offset = ints(std::slice::from_ref(&t.storage_offset), "storage offset")?[0];
    let dtype =
        convert::dtype_name(t.dtype).ok_or_else(|| format!("unknown dtype code {}", t.dtype))?;
    let element = crate::graph::element_size(dtype)
        .ok_or_else(|| format!("dtype {dtype} has no known element size"))?;
    crate::graph::storage_bytes(&sizes, &strides, offset, element)
}

/// Bytes of a weight read at most this many at a time, each chunk's pages
/// released once used: no entry is resident whole, neither while the worker
/// traces nor at the emit step (a 3B Llama's bfloat16 embedding is 788 MB).
/// Whole elements of every dtype hfx converts.
const WEIGHT_CHUNK: usize = 8 << 20;

/// Adds a weight's `bytes` (a file map's, converted by `cast`) as entry
/// `name`: its CRC-32 over the bytes written, then the bytes, a chunk at a
/// time, each chunk handed to `release` once used (the pages are read again
/// from the page cache for the second pass).
pub(crate) fn add_weight(
    writer: &mut ArchiveWriter,
    name: &str,
    bytes: &[u8],
    cast: Option<cast::Cast>,
    release: impl Fn(&[u8]),
) -> std::io::Result<()> {
    add_weight_in(writer, name, bytes, cast, release, WEIGHT_CHUNK)
}

fn add_weight_in(
    writer: &mut ArchiveWriter,
    name: &str,
    bytes: &[u8],
    cast: Option<cast::Cast>,
    release: impl Fn(&[u8]),
    chunk: usize,
) -> std::io::Result<()> {
    let mut crc = crc32fast::Hasher::new();
    for piece in bytes.chunks(chunk) {
        match cast {
            None => crc.update(piece),
            Some(cast) => {
                let converted: Result<(), std::convert::Infallible> =
                    cast.each_chunk(piece, |out| {
                        crc.update(out);
                        Ok(())
                    });
                let Ok(()) = converted;
            }
        }
        release(piece);
    }
    let len = cast.map_or(bytes.len(), |c| c.output_len(bytes.len()));
    writer.add_streamed(name, len as u64, crc.finalize(), |w| {
        for piece in bytes.chunks(chunk) {
            match cast {
                None => w.write_all(piece)?,
                Some(cast) => cast.write(piece, &mut &mut *w)?,
            }
            release(piece);
        }
        Ok(())
    })
}

/// The side file of weights the trace worker writes for `archive`.
pub fn side_weights_path(archive: &Path) -> std::path::PathBuf {
    let mut name = archive.as_os_str().to_owned();
    name.push(".weights");
    name.into()
}

impl Pt2 {
    /// Opens the `.pt2` at `path` (a regular file: a FIFO or device is refused
    /// at once) and parses its programs. Weights are checked when first read.
    pub fn open(path: &Path) -> Result<Pt2, Pt2Error> {
        Self::read(Archive::open(path)?)
    }

    /// Parses an opened archive (from a file or, for fuzzing, from memory).
    pub fn read(archive: Archive) -> Result<Pt2, Pt2Error> {
        let path = archive.path().to_path_buf();
        let path = path.as_path();
        let invalid =
            |reason: String| Pt2Error::Invalid { path: path.display().to_string(), reason };
        let format = archive
            .entries()
            .iter()
            .find(|e| e.name.ends_with("/archive_format") && e.name.matches('/').count() == 1)
            .ok_or_else(|| invalid("no archive_format entry: not a torch.export archive".into()))?;
        let prefix = format.name.trim_end_matches("archive_format").to_string();
        let format_text =
            String::from_utf8_lossy(archive.checked_bytes(format)?).trim().to_string();
        if format_text != "pt2" {
            return Err(invalid(format!("archive_format is `{format_text}`, expected `pt2`")));
        }
        let mut pt2 = Pt2 {
            archive,
            prefix,
            programs: BTreeMap::new(),
            weights: BTreeMap::new(),
            constants: BTreeMap::new(),
            side: None,
        };
        let models: Vec<Entry> =
            pt2.entries_under("models/").filter(|e| e.name.ends_with(".json")).cloned().collect();
        if models.is_empty() {
            return Err(invalid(format!("no model JSON under {}models/", pt2.prefix)));
        }
        for entry in models {
            let model =
                entry.name.rsplit('/').next().unwrap_or("").trim_end_matches(".json").to_string();
            let program: ExportedProgram = pt2.json(&entry).map_err(invalid)?;
            check_schema_version(&program).map_err(|r| invalid(format!("{}: {r}", entry.name)))?;
            for kind in ["weights", "constants"] {
                let name = format!("{}data/{kind}/{model}_{kind}_config.json", pt2.prefix);
                if let Some(config) = pt2.archive.entry(&name).cloned() {
                    let config: PayloadConfig = pt2.json(&config).map_err(invalid)?;
                    let table =
                        if kind == "weights" { &mut pt2.weights } else { &mut pt2.constants };
                    table.insert(model.clone(), config);
                }
            }
            pt2.programs.insert(model, program);
        }
        pt2.refuse_pickles().map_err(invalid)?;
        Ok(pt2)
    }

    /// Refuses every stored payload torch would unpickle when it loads the
    /// archive (`torch.load(weights_only=False)`, `pickle.loads`,
    /// `_pickle_load_obj`): a weight or constant marked `use_pickle` (a tensor
    /// subclass), a constant that is not a tensor (torch picks its loader by
    /// the `path_name` prefix alone: `custom_obj_`, `opaque_obj_`), and the
    /// legacy whole-state-dict files (`data/weights/<model>.pt`). An archive
    /// comes from whoever sent it, or from a cache another run filled: a
    /// pickle in it would run its code in the worker that loads it.
    fn refuse_pickles(&self) -> Result<(), String> {
        const FIX: &str = "pickled weights are not loaded from untrusted files; re-export with torch >= 2.13 from plain tensors, or save tensors plainly";
        for (kind, tables) in [(Kind::Weight, &self.weights), (Kind::Constant, &self.constants)] {
            for config in tables.values() {
                for (fqn, meta) in &config.config {
                    if meta.use_pickle {
                        return Err(format!(
                            "{} `{fqn}` is stored pickled (`{}`): {FIX}",
                            kind.what(),
                            meta.path_name
                        ));
                    }
                    if let Kind::Constant = kind {
                        if !meta.path_name.starts_with(TENSOR_CONSTANT_PREFIX) {
                            return Err(format!(
                                "constant `{fqn}` is an object, not a tensor (`{}`): {FIX}",
                                meta.path_name
                            ));
                        }
                    }
                }
            }
        }
        for model in self.programs.keys() {
            for kind in ["weights", "constants"] {
                let name = format!("{}data/{kind}/{model}.pt", self.prefix);
                if self.archive.entry(&name).is_some() {
                    return Err(format!(
                        "`{name}` is a pickled state dict (torch's legacy layout): {FIX}"
                    ));
                }
            }
        }
        Ok(())
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
    /// The index's first file is named relative to it (the worker's side
    /// file); any other must be one of `sources` (a model folder's checkpoint
    /// files, which the worker pointed the weights at), compared as paths
    /// and opened without following a link ([`open_checkpoint`]), or, in an
    /// export `hfx.export` serves, one of its process's shared-memory files
    /// by descriptor ([`crate::weights::caller`]): the index names no other file. Side bytes have no
    /// CRC: each storage's length is checked against the tensors the
    /// archive's payload configs say it holds.
    pub fn attach_side_weights(
        &mut self,
        path: &Path,
        sources: &[std::path::PathBuf],
    ) -> Result<(), Pt2Error> {
        let invalid = |at: &Path, reason: String| Pt2Error::Invalid {
            path: at.display().to_string(),
            reason,
        };
        let mut index_path = path.as_os_str().to_owned();
        index_path.push(".json");
        let index_path = std::path::PathBuf::from(index_path);
        let text = crate::input::read_bounded(&index_path, SIDE_INDEX_LIMIT)
            .map_err(|e| invalid(path, format!("reading its index: {e}")))?;
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Index {
            files: Vec<IndexedFile>,
            weights: BTreeMap<String, SideEntry>,
            constants: BTreeMap<String, SideEntry>,
        }
        let index: Index =
            serde_json::from_slice(&text).map_err(|e| invalid(path, format!("its index: {e}")))?;
        let mut files = Vec::new();
        for (i, name) in index.files.iter().enumerate() {
            let caller_fd = match name {
                IndexedFile::Caller { fd } => Some(*fd),
                IndexedFile::Path(_) => None,
            };
            let (file_path, file) = match name {
                IndexedFile::Path(name) if i == 0 => {
                    if name.components().count() != 1 || name.is_absolute() {
                        return Err(invalid(
                            &index_path,
                            format!(
                                "its side file `{}` is not a file name beside it",
                                name.display()
                            ),
                        ));
                    }
                    let file_path = path.with_file_name(name);
                    let file = crate::input::open_written(&file_path)
                        .map_err(|e| invalid(&file_path, e.to_string()))?;
                    (file_path, file)
                }
                IndexedFile::Path(name) => open_checkpoint(name, sources)
                    .map_err(|reason| invalid(&index_path, format!("names {reason}")))?,
                IndexedFile::Caller { fd } if i > 0 => {
                    let file = crate::weights::caller::open(*fd)
                        .map_err(|reason| invalid(&index_path, format!("names {reason}")))?;
                    (std::path::PathBuf::from(format!("caller's descriptor {fd}")), file)
                }
                IndexedFile::Caller { fd } => {
                    return Err(invalid(
                        &index_path,
                        format!(
                            "its side file is the caller's descriptor {fd}, not a file beside it"
                        ),
                    ));
                }
            };
            // SAFETY: hfx's own scratch output or the user's checkpoint, neither
            // modified while the export reads it (a checkpoint rewritten
            // meanwhile is the user's race, as for any input file).
            let map = unsafe { memmap2::Mmap::map(&file) }
                .map_err(|e| invalid(&file_path, e.to_string()))?;
            files.push(SideFile { path: file_path, caller_fd, file, map });
        }
        for (kind, table) in [(Kind::Weight, &index.weights), (Kind::Constant, &index.constants)] {
            for (fqn, entry) in table {
                let (file, offset, length) = entry.place();
                let Some(side) = files.get(file) else {
                    return Err(invalid(
                        &index_path,
                        format!("{} `{fqn}`: file {file} of {}", kind.what(), files.len()),
                    ));
                };
                if offset.checked_add(length).is_none_or(|end| end > side.map.len()) {
                    return Err(invalid(
                        &side.path,
                        format!(
                            "{} `{fqn}`: bytes {offset}+{length} past the end ({})",
                            kind.what(),
                            side.map.len()
                        ),
                    ));
                }
                for (model, meta) in self.metas(kind, fqn) {
                    let need = needed_bytes(meta).map_err(|r| {
                        invalid(&side.path, format!("{} `{fqn}` of `{model}`: {r}", kind.what()))
                    })?;
                    let cast = side_cast(entry, meta).map_err(|r| {
                        invalid(&index_path, format!("{} `{fqn}`: {r}", kind.what()))
                    })?;
                    let holds = cast.map_or(length, |c| c.output_len(length));
                    if (holds as u64) < need {
                        return Err(invalid(
                            &side.path,
                            format!(
                                "{} `{fqn}`: holds {holds} bytes, the tensor needs {need}",
                                kind.what()
                            ),
                        ));
                    }
                }
            }
        }
        self.side = Some(SideWeights { files, weights: index.weights, constants: index.constants });
        Ok(())
    }

    /// Drops `bytes` (a weight's slice of this archive's or its side files'
    /// maps, once streamed into an artifact) from the process's resident
    /// memory: the kernel reads the pages from the file again if they are
    /// touched. A slice of no file map of this `.pt2` is left alone.
    pub fn release(&self, bytes: &[u8]) {
        for file in self.side.iter().flat_map(|s| &s.files) {
            release_from(&file.map, bytes);
        }
        self.archive.release(bytes);
    }

    /// The file and offset `bytes` (a weight's slice of this archive's or its
    /// side files' maps) are stored at: where a writer reads them instead of
    /// touching the map ([`crate::atomic::DirectWriter::write_or_copy`]).
    /// `None` for bytes of no file map.
    pub fn origin(&self, bytes: &[u8]) -> Option<(&std::fs::File, u64)> {
        self.side
            .iter()
            .flat_map(|s| &s.files)
            .find_map(|f| offset_in(&f.map, bytes).map(|offset| (&f.file, offset as u64)))
            .or_else(|| self.archive.origin(bytes))
    }

    /// The payload entries for `fqn` in every model.
    fn metas<'a>(
        &'a self,
        kind: Kind,
        fqn: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a PayloadMeta)> + 'a {
        let tables = match kind {
            Kind::Weight => &self.weights,
            Kind::Constant => &self.constants,
        };
        tables
            .iter()
            .filter_map(move |(model, config)| Some((model.as_str(), config.config.get(fqn)?)))
    }

    fn side_bytes(&self, kind: Kind, fqn: &str) -> Option<&[u8]> {
        self.side_file(kind, fqn).map(|(_, bytes, _)| bytes)
    }

    /// A side-stored tensor's file, bytes and index entry.
    fn side_file(&self, kind: Kind, fqn: &str) -> Option<(&Path, &[u8], &SideEntry)> {
        let side = self.side.as_ref()?;
        let table = match kind {
            Kind::Weight => &side.weights,
            Kind::Constant => &side.constants,
        };
        let entry = table.get(fqn)?;
        let (file, offset, length) = entry.place();
        let file = side.files.get(file)?;
        Some((&file.path, file.map.get(offset..offset.checked_add(length)?)?, entry))
    }

    /// The stored bytes of weight `fqn` of `model` (tied weights share bytes):
    /// `None` if `model` has no such weight; an error if it has one whose
    /// storage is missing, empty, shorter than the tensor or corrupt (CRC-32,
    /// checked the first time an entry is read).
    /// Weights streamed in another dtype ([`Pt2::weight_source`]) are refused here.
    pub fn weight(&self, model: &str, fqn: &str) -> Result<Option<&[u8]>, Pt2Error> {
        self.unconverted(Kind::Weight, model, fqn)
    }

    /// The stored bytes of tensor constant `fqn` of `model`, checked as [`Pt2::weight`]'s.
    pub fn constant(&self, model: &str, fqn: &str) -> Result<Option<&[u8]>, Pt2Error> {
        self.unconverted(Kind::Constant, model, fqn)
    }

    /// Weight `fqn`'s stored bytes and the conversion they need (streamed
    /// from a checkpoint in another dtype), checked as [`Pt2::weight`]'s.
    pub fn weight_source(&self, model: &str, fqn: &str) -> Result<Option<Source<'_>>, Pt2Error> {
        self.stored(Kind::Weight, model, fqn)
    }

    /// Constant `fqn`'s stored bytes and the conversion they need.
    pub fn constant_source(&self, model: &str, fqn: &str) -> Result<Option<Source<'_>>, Pt2Error> {
        self.stored(Kind::Constant, model, fqn)
    }

    /// The bytes of program `model`'s contiguous tensor `fqn` of graph
    /// metadata `meta`, in its storage: a weight's (or a constant's if
    /// `constant`, or if no weight has that name: non-persistent buffers are
    /// stored with the constants). Sizes, offsets and byte counts come from
    /// the file: every step is checked.
    pub fn contiguous_tensor(
        &self,
        fqn: &str,
        constant: bool,
        meta: &TensorMeta,
    ) -> Result<StoredTensor<'_>, TensorError> {
        let error = |reason: String| TensorError::Invalid { fqn: fqn.into(), reason };
        let source = match constant {
            true => self.constant_source("model", fqn)?,
            false => match self.weight_source("model", fqn)? {
                Some(source) => Some(source),
                None => self.constant_source("model", fqn)?,
            },
        };
        let Source { bytes, cast } = source.ok_or_else(|| TensorError::Missing(fqn.into()))?;
        let fixed = |dims: &[Dim], what: &str| {
            dims.iter()
                .map(|d| match d {
                    Dim::Fixed(n) => Ok(*n),
                    Dim::Symbolic(s) => Err(error(format!("symbolic {what} {s}"))),
                })
                .collect::<Result<Vec<i64>, _>>()
        };
        let dims = fixed(&meta.shape, "size")?;
        let strides = fixed(&meta.strides, "stride")?;
        let offset = fixed(std::slice::from_ref(&meta.storage_offset), "storage offset")?[0];
        let dtype = hfx_dtype::DType::from_name(&meta.dtype)
            .ok_or_else(|| TensorError::Dtype(meta.dtype.clone()))?;
        let size = dtype.size() as u64;
        if !is_contiguous(&strides, &dims) {
            return Err(error("non-contiguous storage".into()));
        }
        // Contiguous: the tensor is the bytes from `offset` elements up to `end` (0 when empty).
        let end = crate::graph::storage_bytes(&dims, &[], offset, size).map_err(error)?;
        // offset >= 0, and no larger than `end`.
        let start = if end == 0 { 0 } else { offset as u64 * size };
        // Stored in another dtype: the same elements, of the stored size.
        let stored = cast.map_or(size, |c| c.from().size() as u64);
        let (start, end) = (start / size * stored, end / size * stored);
        let raw = usize::try_from(start)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(s, e)| bytes.get(s..e));
        let raw = raw.ok_or_else(|| {
            error(format!("storage holds {} bytes, the tensor needs {start}..{end}", bytes.len()))
        })?;
        Ok(StoredTensor { dims, dtype, source: Source { bytes: raw, cast } })
    }

    fn unconverted(&self, kind: Kind, model: &str, fqn: &str) -> Result<Option<&[u8]>, Pt2Error> {
        match self.stored(kind, model, fqn)? {
            Some(Source { cast: Some(cast), .. }) => Err(Pt2Error::Invalid {
                path: self.archive.path().display().to_string(),
                reason: format!(
                    "{} `{fqn}`: stored as {}, read as {}: this step cannot convert it",
                    kind.what(),
                    cast.from().name(),
                    cast.to().name()
                ),
            }),
            other => Ok(other.map(|s| s.bytes)),
        }
    }

    /// Checks the storage of every weight and constant the payload configs
    /// list, as [`Pt2::weight`] does (pickled ones: their entry's CRC-32 only).
    pub fn check_payloads(&self) -> Result<(), Pt2Error> {
        // The CRCs first, on every core; the checks below then report in order.
        let mut names = Vec::new();
        for (kind, tables) in [(Kind::Weight, &self.weights), (Kind::Constant, &self.constants)] {
            for (fqn, meta) in tables.values().flat_map(|c| &c.config) {
                if meta.use_pickle || self.side_bytes(kind, fqn).is_none() {
                    names.push(format!("{}data/{}/{}", self.prefix, kind.folder(), meta.path_name));
                }
            }
        }
        self.archive.precheck(names.iter().map(String::as_str));
        for (kind, tables) in [(Kind::Weight, &self.weights), (Kind::Constant, &self.constants)] {
            for (model, config) in tables {
                for (fqn, meta) in &config.config {
                    if meta.use_pickle {
                        let name =
                            format!("{}data/{}/{}", self.prefix, kind.folder(), meta.path_name);
                        let entry = self.archive.entry(&name).ok_or_else(|| Pt2Error::Invalid {
                            path: self.archive.path().display().to_string(),
                            reason: format!(
                                "{} `{fqn}`: its entry `{name}` is missing",
                                kind.what()
                            ),
                        })?;
                        self.archive.checked_bytes(entry)?;
                    } else {
                        self.stored(kind, model, fqn)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn stored(&self, kind: Kind, model: &str, fqn: &str) -> Result<Option<Source<'_>>, Pt2Error> {
        let what = kind.what();
        let side = self.side_file(kind, fqn);
        let table = match kind {
            Kind::Weight => &self.weights,
            Kind::Constant => &self.constants,
        };
        let Some(meta) = table.get(model).and_then(|c| c.config.get(fqn)) else {
            // Not a tensor of `model`: only the bytes, unconverted.
            return Ok(side
                .filter(|(_, _, e)| matches!(e, SideEntry::Same(..)))
                .map(|(_, bytes, _)| Source { bytes, cast: None }));
        };
        let invalid = |path: &Path, reason: String| Pt2Error::Invalid {
            path: path.display().to_string(),
            reason: format!("{what} `{fqn}`: {reason}"),
        };
        let archive_path = self.archive.path();
        if meta.use_pickle {
            return Err(invalid(
                archive_path,
                "is stored pickled (a tensor subclass); hfx reads plain tensors only".into(),
            ));
        }
        let need = needed_bytes(meta).map_err(|r| invalid(archive_path, r))?;
        if let Some((path, bytes, entry)) = side {
            let cast = side_cast(entry, meta).map_err(|r| invalid(path, r))?;
            let source = Source { bytes, cast };
            if (source.len() as u64) < need {
                return Err(invalid(
                    path,
                    format!("holds {} bytes, the tensor needs {need}", source.len()),
                ));
            }
            return Ok(Some(source));
        }
        let name = format!("{}data/{}/{}", self.prefix, kind.folder(), meta.path_name);
        let entry = self
            .archive
            .entry(&name)
            .ok_or_else(|| invalid(archive_path, format!("its entry `{name}` is missing")))?;
        if entry.len < need {
            let held = if entry.len == 0 {
                "is empty".to_string()
            } else {
                format!("holds {} bytes", entry.len)
            };
            return Err(invalid(
                archive_path,
                format!("its entry `{name}` {held}, the tensor needs {need}"),
            ));
        }
        match self.archive.checked_bytes(entry) {
            Ok(bytes) => Ok(Some(Source { bytes, cast: None })),
            Err(ArchiveError::Malformed { reason, .. }) => Err(invalid(archive_path, reason)),
            Err(e) => Err(e.into()),
        }
    }

    /// The files the side weights are read from (absolute, as opened: a Hub
    /// cache link as its blob): what an index written from this `.pt2`'s
    /// programs may name. The caller's shared memory is not among them: an
    /// index names it by descriptor ([`crate::weights::caller`]).
    pub fn side_files(&self) -> Vec<std::path::PathBuf> {
        self.side
            .iter()
            .flat_map(|s| &s.files)
            .filter(|f| f.caller_fd.is_none())
            .map(|f| lexical(&f.path).unwrap_or_else(|| f.path.clone()))
            .collect()
    }

    /// Writes the archive with `programs` as [`Pt2::write`] does, but leaves
    /// side-stored weights where they are: their entries empty, indexed by
    /// `<path>.weights.json` with the same entries and every file named by its
    /// absolute path. For a step of hfx's own that maps them (ExecuTorch's edge
    /// decomposition and lowering in the worker), so the weights are never
    /// copied on their way: torch itself cannot load this `.pt2`.
    pub fn write_indexed(
        &self,
        path: &Path,
        programs: &BTreeMap<String, ExportedProgram>,
    ) -> Result<(), Pt2Error> {
        let Some(side) = &self.side else { return self.write(path, programs) };
        self.write_archive(path, programs, SideStored::LeftInPlace, None)?;
        #[derive(serde::Serialize)]
        struct Index<'a> {
            files: Vec<IndexedFile>,
            weights: &'a BTreeMap<String, SideEntry>,
            constants: &'a BTreeMap<String, SideEntry>,
        }
        let files = side
            .files
            .iter()
            .map(|f| match f.caller_fd {
                Some(fd) => IndexedFile::Caller { fd },
                None => IndexedFile::Path(lexical(&f.path).unwrap_or_else(|| f.path.clone())),
            })
            .collect();
        let index = Index { files, weights: &side.weights, constants: &side.constants };
        let mut index_path = side_weights_path(path).into_os_string();
        index_path.push(".json");
        let json = serde_json::to_vec(&index).expect("the index serializes");
        crate::atomic::write_bytes_atomically(Path::new(&index_path), &json)
            .map_err(|source| Pt2Error::Write { path: path.display().to_string(), source })
    }

    /// Writes the archive with `programs` in place of the ones read; every other
    /// entry is copied byte for byte from the memory map. Atomic.
    /// Every weight and constant is checked first ([`Pt2::check_payloads`]): a
    /// `.pt2` torch would refuse to load is not written.
    pub fn write(
        &self,
        path: &Path,
        programs: &BTreeMap<String, ExportedProgram>,
    ) -> Result<(), Pt2Error> {
        self.write_archive(path, programs, SideStored::Written, None).map(|_| ())
    }

    /// As [`Pt2::write`], continuing `prewritten` (the archive's first
    /// entries, written while the worker traced: [`prewrite`]) when this
    /// archive starts with exactly those entries, made of exactly those
    /// bytes; otherwise it is dropped (its temp file with it) and every entry
    /// is written. The bytes are the same either way. Returns how many
    /// entries were kept.
    pub fn write_continuing(
        &self,
        path: &Path,
        programs: &BTreeMap<String, ExportedProgram>,
        prewritten: Option<prewrite::PrewrittenEntries>,
    ) -> Result<usize, Pt2Error> {
        self.write_archive(path, programs, SideStored::Written, prewritten)
    }

    /// Whether `prewritten` is this archive's first entries, as
    /// `side_entries` would write them, at `path`.
    fn continues(
        &self,
        path: &Path,
        prewritten: &prewrite::PrewrittenEntries,
        side_entries: &BTreeMap<String, Source<'_>>,
    ) -> bool {
        prewritten.writer.target() == path
            && prewritten.entries.len() <= self.archive.entries().len()
            && prewritten.entries.iter().zip(self.archive.entries()).all(|(written, entry)| {
                let Some(source) = side_entries.get(&entry.name) else { return false };
                written.name == entry.name
                    && self
                        .place(source.bytes, source.cast, None)
                        .is_some_and(|place| place == written.place)
            })
    }

    /// What `bytes` (a slice of a side file's map: a model folder's
    /// checkpoint, or the worker's side file), written through `cast` and
    /// `transposed`, are written from.
    pub fn place(
        &self,
        bytes: &[u8],
        cast: Option<cast::Cast>,
        transposed: Option<(usize, usize)>,
    ) -> Option<Place> {
        let (file, offset) = self
            .side
            .iter()
            .flat_map(|s| &s.files)
            .find_map(|f| offset_in(&f.map, bytes).map(|offset| (&f.path, offset as u64)))?;
        Some(Place { file: lexical(file)?, offset, length: bytes.len() as u64, cast, transposed })
    }

    /// How `entry` goes into an archive written with `programs`.
    fn rebuilt(&self, entry: &Entry, programs: &BTreeMap<String, ExportedProgram>) -> Rebuilt {
        let Some(name) = entry.name.strip_prefix(&self.prefix) else { return Rebuilt::Dropped };
        if let Some(model) = name.strip_prefix("models/").and_then(|n| n.strip_suffix(".json")) {
            return match programs.get(model).or_else(|| self.programs.get(model)) {
                Some(program) => {
                    Rebuilt::Json(serde_json::to_vec(program).expect("programs serialize"))
                }
                None => Rebuilt::Dropped,
            };
        }
        for (kind, tables) in [(Kind::Weight, &self.weights), (Kind::Constant, &self.constants)] {
            let folder = kind.folder();
            let Some(file) = name.strip_prefix(&format!("data/{folder}/")) else { continue };
            if let Some(config) = file
                .strip_suffix(&format!("_{folder}_config.json"))
                .and_then(|model| tables.get(model))
            {
                return Rebuilt::Json(
                    serde_json::to_vec(config).expect("payload configs serialize"),
                );
            }
            let stored = tables
                .values()
                .flat_map(|c| c.config.values())
                .any(|meta| !meta.use_pickle && meta.path_name == file);
            return if stored { Rebuilt::Storage } else { Rebuilt::Dropped };
        }
        if name
            .strip_prefix("data/sample_inputs/")
            .and_then(|n| n.strip_suffix(".pt"))
            .is_some_and(|m| self.programs.contains_key(m))
        {
            return Rebuilt::Empty;
        }
        // The archive's small marker files, kept only when they hold what torch writes there.
        let bytes = self.archive.checked_bytes(entry).unwrap_or_default();
        let plain = match name {
            "archive_format" => bytes == b"pt2",
            "archive_version" | ".data/version" => {
                !bytes.is_empty()
                    && bytes.len() <= 16
                    && bytes.iter().all(|b| b.is_ascii_digit() || *b == b'\n')
            }
            "byteorder" => bytes == b"little" || bytes == b"big",
            ".data/serialization_id" => {
                !bytes.is_empty()
                    && bytes.len() <= 64
                    && bytes.iter().all(u8::is_ascii_alphanumeric)
            }
            _ => false,
        };
        if plain {
            Rebuilt::Storage
        } else {
            Rebuilt::Dropped
        }
    }

    fn write_archive(
        &self,
        path: &Path,
        programs: &BTreeMap<String, ExportedProgram>,
        side_stored: SideStored,
        prewritten: Option<prewrite::PrewrittenEntries>,
    ) -> Result<usize, Pt2Error> {
        self.check_payloads()?;
        let write_error = |source| Pt2Error::Write { path: path.display().to_string(), source };
        // Entries whose storage is stored beside the archive: written from there
        // (or left as the archive holds them, empty).
        let mut side_entries = BTreeMap::new();
        let written = match side_stored {
            SideStored::Written => {
                [(Kind::Weight, &self.weights), (Kind::Constant, &self.constants)].to_vec()
            }
            SideStored::LeftInPlace => Vec::new(),
        };
        for (kind, tables) in written {
            for (model, config) in tables {
                for (fqn, meta) in config
                    .config
                    .iter()
                    .filter(|(fqn, meta)| !meta.use_pickle && self.side_bytes(kind, fqn).is_some())
                {
                    if let Some(source) = self.stored(kind, model, fqn)? {
                        side_entries.insert(
                            format!("{}data/{}/{}", self.prefix, kind.folder(), meta.path_name),
                            source,
                        );
                    }
                }
            }
        }
        let (mut out, kept) = match prewritten {
            Some(p) if self.continues(path, &p, &side_entries) => {
                let kept = p.entries.len();
                (p.writer, kept)
            }
            _ => (ArchiveWriter::create(path).map_err(write_error)?, 0),
        };
        for entry in &self.archive.entries()[kept..] {
            if let Some(source) = side_entries.get(entry.name.as_str()) {
                // Its pages need not stay resident once written (a checkpoint of many GiB streams through).
                add_weight(&mut out, &entry.name, source.bytes, source.cast, |piece| {
                    self.release(piece)
                })
                .map_err(write_error)?;
                continue;
            }
            match self.rebuilt(entry, programs) {
                Rebuilt::Json(json) => out.add(&entry.name, &json).map_err(write_error)?,
                Rebuilt::Storage => self.archive.copy_entry(entry, &mut out)?,
                Rebuilt::Empty => out.add(&entry.name, &[]).map_err(write_error)?,
                Rebuilt::Dropped => {}
            }
        }
        out.finish().map_err(write_error)?;
        Ok(kept)
    }
}

/// A `.pt2`'s weights are read from the files they are stored in (the
/// archive, the side file, a model folder's checkpoint), their pages
/// released once written.
impl WeightFiles for Pt2 {
    fn origin(&self, bytes: &[u8]) -> Option<(&std::fs::File, u64)> {
        Pt2::origin(self, bytes)
    }
    fn release(&self, bytes: &[u8]) {
        Pt2::release(self, bytes)
    }
    fn place(
        &self,
        bytes: &[u8],
        cast: Option<cast::Cast>,
        transposed: Option<(usize, usize)>,
    ) -> Option<Place> {
        Pt2::place(self, bytes, cast, transposed)
    }
}

/// How an entry of a read archive is written into the archive hfx writes:
/// only from what was parsed and checked, so nothing torch would unpickle or
/// run passes through.
enum Rebuilt {
    /// A program or payload config, serialized from what was parsed.
    Json(Vec<u8>),
    /// A raw tensor storage a (non-pickled) payload config names, copied with its CRC-32 checked.
    Storage,
    /// Sample inputs: a pickle torch loads with a fallback to `weights_only=False`;
    /// written empty, which torch reads as none.
    Empty,
    /// Anything else (AOTInductor libraries, extra files, entries outside the top folder).
    Dropped,
}

/// What a written archive holds of the weights stored beside it.
#[derive(Debug, Clone, Copy)]
enum SideStored {
    /// Their bytes, in their entries (an artifact torch loads).
    Written,
    /// Nothing: their entries stay empty, as the trace wrote them.
    LeftInPlace,
}

/// The conversion a side entry's bytes need to be `meta`'s tensor: none when
/// stored in its dtype; an error for a pair hfx does not convert.
fn side_cast(entry: &SideEntry, meta: &PayloadMeta) -> Result<Option<cast::Cast>, String> {
    let SideEntry::Stored(.., stored) = entry else { return Ok(None) };
    let t = meta.tensor_meta.as_ref().ok_or("has no tensor metadata")?;
    let to = hfx_dtype::DType::from_pt2(i32::try_from(t.dtype).unwrap_or(-1))
        .ok_or_else(|| format!("unknown dtype code {}", t.dtype))?;
    cast::Cast::of_stored(stored, to)
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

#[cfg(test)]
pub(crate) mod testing {
    //! Tiny `.pt2` archives built in memory, for tests of what reads weights.

    use super::schema::{self, PayloadConfig, PayloadMeta, SymInt};
    use super::*;

    /// One stored tensor: its fqn, what its payload config says, and the bytes stored.
    pub struct Stored<'a> {
        pub fqn: &'a str,
        pub sizes: Vec<i64>,
        pub strides: Vec<i64>,
        pub offset: i64,
        /// None leaves the entry out of the archive.
        pub bytes: Option<Vec<u8>>,
    }

    pub fn program_json() -> String {
        r#"{"graph_module": {"graph": {"inputs": [], "outputs": [], "nodes": [], "tensor_values": {}, "sym_int_values": {}, "sym_bool_values": {}},
            "signature": {"input_specs": [], "output_specs": []}, "module_call_graph": []},
            "opset_version": {}, "range_constraints": {}, "schema_version": {"major": 8, "minor": 0}}"#
            .into()
    }

    /// The bytes of a `.pt2` with model `model` and float32 weights `weights`,
    /// its entries in torch's order (the weights first).
    pub fn archive(weights: &[Stored]) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pt2");
        let mut w = ArchiveWriter::create(&path).unwrap();
        let ints = |v: &[i64]| v.iter().map(|&i| SymInt::AsInt(i)).collect::<Vec<_>>();
        let mut config = PayloadConfig { config: BTreeMap::new() };
        for (i, t) in weights.iter().enumerate() {
            let tensor_meta = schema::TensorMeta {
                dtype: 7,
                sizes: ints(&t.sizes),
                requires_grad: false,
                device: schema::Device { kind: "cpu".into(), index: None },
                strides: ints(&t.strides),
                storage_offset: SymInt::AsInt(t.offset),
                layout: 7,
            };
            let meta = PayloadMeta {
                path_name: format!("weight_{i}"),
                is_param: true,
                use_pickle: false,
                tensor_meta: Some(tensor_meta),
            };
            config.config.insert(t.fqn.to_string(), meta);
            if let Some(bytes) = &t.bytes {
                w.add(&format!("t/data/weights/weight_{i}"), bytes).unwrap();
            }
        }
        w.add("t/data/weights/model_weights_config.json", &serde_json::to_vec(&config).unwrap())
            .unwrap();
        w.add("t/models/model.json", program_json().as_bytes()).unwrap();
        w.add("t/archive_format", b"pt2").unwrap();
        w.finish().unwrap();
        std::fs::read(&path).unwrap()
    }

    pub fn open(bytes: Vec<u8>) -> Pt2 {
        Pt2::read(Archive::from_bytes(Path::new("t.pt2"), bytes).unwrap()).unwrap()
    }

    pub fn floats(n: usize) -> Vec<u8> {
        (0..n as u32).flat_map(|i| (i as f32).to_le_bytes()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    /// Weight `w` (4 float32 stored) read as a contiguous tensor of sizes
    /// `shape`, `strides` and storage offset `offset`.
    fn contiguous_error(shape: &[i64], strides: &[i64], offset: i64) -> String {
        let pt2 = open(archive(&[Stored {
            fqn: "w",
            sizes: vec![4],
            strides: vec![1],
            offset: 0,
            bytes: Some(floats(4)),
        }]));
        let mut meta = TensorMeta::new("float32", shape.iter().map(|&n| Dim::Fixed(n)).collect());
        meta.strides = strides.iter().map(|&n| Dim::Fixed(n)).collect();
        meta.storage_offset = Dim::Fixed(offset);
        match pt2.contiguous_tensor("w", false, &meta) {
            Ok(tensor) => format!("ok {} bytes", tensor.source.len()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn weight_sizes_and_offsets_from_the_file_are_checked_not_wrapped() {
        assert_eq!(contiguous_error(&[2, 2], &[2, 1], 0), "ok 16 bytes");
        assert_eq!(contiguous_error(&[2], &[1], 2), "ok 8 bytes");
        assert_eq!(contiguous_error(&[0, 1 << 62], &[], 0), "ok 0 bytes");
        let e = contiguous_error(&[1 << 62], &[1], 0);
        assert!(e.starts_with("weight `w`: ") && e.contains("past 2^64"), "{e}");
        let e = contiguous_error(&[1 << 62, 1 << 62], &[], 0);
        assert!(e.contains("past 2^64"), "{e}");
        let e = contiguous_error(&[1 << 61], &[1], 0);
        assert!(
            e.contains("storage holds 16 bytes, the tensor needs 0..9223372036854775808"),
            "{e}"
        );
        let e = contiguous_error(&[-4], &[1], 0);
        assert!(e.contains("negative size -4"), "{e}");
        let e = contiguous_error(&[2], &[1], 1 << 62);
        assert!(e.contains("past 2^64"), "{e}");
        let e = contiguous_error(&[2], &[1], -1);
        assert!(e.contains("negative storage offset"), "{e}");
        let e = contiguous_error(&[2], &[1], 3);
        assert!(e.contains("storage holds 16 bytes, the tensor needs 12..20"), "{e}");
        let e = contiguous_error(&[1 << 40, 1 << 40], &[1 << 40, 1], 0);
        assert!(e.contains("past 2^64"), "{e}");
        let e = contiguous_error(&[2, 2], &[1, 2], 0);
        assert!(e.contains("non-contiguous"), "{e}");
    }

    /// Written a chunk at a time, an entry (plain or converted) has the bytes
    /// and CRC-32 it has written whole.
    #[test]
    fn an_entry_written_in_chunks_is_the_entry_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source");
        std::fs::write(
            &source,
            (0..40_000u32).flat_map(|i| (i as f32 * 0.37).to_le_bytes()).collect::<Vec<u8>>(),
        )
        .unwrap();
        // SAFETY: a file of this test's own.
        let map = unsafe { memmap2::Mmap::map(&std::fs::File::open(&source).unwrap()) }.unwrap();
        let bytes = &map[64..64 + 4 * 30_001];
        for cast in [
            None,
            cast::Cast::new(hfx_dtype::DType::Float32, hfx_dtype::DType::Bfloat16),
            cast::Cast::new(hfx_dtype::DType::Float32, hfx_dtype::DType::Float16),
        ] {
            let (chunked, whole) = (dir.path().join("chunked.pt2"), dir.path().join("whole.pt2"));
            let mut w = ArchiveWriter::create(&chunked).unwrap();
            add_weight_in(
                &mut w,
                "m/data/weights/weight_0",
                bytes,
                cast,
                |piece| release_from(&map, piece),
                4096 + 4,
            )
            .unwrap();
            w.finish().unwrap();
            let mut w = ArchiveWriter::create(&whole).unwrap();
            match cast {
                None => w.add("m/data/weights/weight_0", bytes).unwrap(),
                Some(c) => w
                    .add_streamed(
                        "m/data/weights/weight_0",
                        c.output_len(bytes.len()) as u64,
                        c.crc32(bytes),
                        |mut out| c.write(bytes, &mut out),
                    )
                    .unwrap(),
            }
            w.finish().unwrap();
            assert!(std::fs::read(&chunked).unwrap() == std::fs::read(&whole).unwrap(), "{cast:?}");
        }
    }

    fn weight(
        sizes: &[i64],
        strides: &[i64],
        offset: i64,
        bytes: Option<Vec<u8>>,
    ) -> Stored<'static> {
        Stored { fqn: "w", sizes: sizes.to_vec(), strides: strides.to_vec(), offset, bytes }
    }

    fn weight_error(t: Stored) -> String {
        let pt2 = open(archive(&[t]));
        let e = pt2.weight("model", "w").expect_err("must be refused").to_string();
        assert!(e.starts_with("t.pt2: weight `w`: ") && !e.contains('\n'), "{e}");
        // The `.pt2` writer checks the same before writing anything.
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o.pt2");
        assert_eq!(pt2.write(&out, &BTreeMap::new()).expect_err("write refused").to_string(), e);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing written, no temp file"
        );
        e
    }

    #[test]
    fn weights_are_checked_against_their_tensors() {
        let pt2 = open(archive(&[weight(&[2, 3], &[3, 1], 0, Some(floats(6)))]));
        assert_eq!(pt2.weight("model", "w").unwrap().unwrap(), &floats(6)[..]);
        assert!(pt2.weight("model", "other").unwrap().is_none());
        // A view at an offset into a larger storage is fine.
        let pt2 = open(archive(&[weight(&[2], &[1], 4, Some(floats(6)))]));
        assert!(pt2.weight("model", "w").is_ok());

        let e = weight_error(weight(&[2, 3], &[3, 1], 0, Some(floats(5))));
        assert_eq!(e, "t.pt2: weight `w`: its entry `t/data/weights/weight_0` holds 20 bytes, the tensor needs 24");
        let e = weight_error(weight(&[2, 3], &[3, 1], 0, Some(vec![])));
        assert_eq!(
            e,
            "t.pt2: weight `w`: its entry `t/data/weights/weight_0` is empty, the tensor needs 24"
        );
        let e = weight_error(weight(&[2, 3], &[3, 1], 0, None));
        assert_eq!(e, "t.pt2: weight `w`: its entry `t/data/weights/weight_0` is missing");
        let e = weight_error(weight(&[1 << 62], &[1], 0, Some(floats(4))));
        assert!(e.contains("reach past 2^64 bytes"), "{e}");
        let e = weight_error(weight(&[-4], &[1], 0, Some(floats(4))));
        assert!(e.contains("negative size -4"), "{e}");
        let e = weight_error(weight(&[4], &[1], 1 << 62, Some(floats(4))));
        assert!(e.contains("past 2^64"), "{e}");
        let e = weight_error(weight(&[4], &[1], 8, Some(floats(4))));
        assert!(e.contains("holds 16 bytes, the tensor needs 48"), "{e}");
    }

    #[test]
    fn corrupt_weights_are_refused_when_read_or_copied() {
        let mut bytes = archive(&[weight(&[64], &[1], 0, Some(floats(64)))]);
        let pt2 = open(bytes.clone());
        let entry = pt2.archive().entry("t/data/weights/weight_0").unwrap().clone();
        bytes[entry.offset as usize + 10] ^= 0x40;
        let pt2 = open(bytes);
        let e = pt2.weight("model", "w").err().unwrap().to_string();
        assert_eq!(
            e,
            "t.pt2: weight `w`: entry `t/data/weights/weight_0` is corrupt (CRC-32 mismatch)"
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            pt2.write(&dir.path().join("o.pt2"), &BTreeMap::new()).err().unwrap().to_string(),
            e
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn side_weights_are_checked_against_the_tensors() {
        let dir = tempfile::tempdir().unwrap();
        let side = dir.path().join("p.pt2.weights");
        std::fs::write(&side, floats(10)).unwrap();
        let index = |length: usize| {
            format!(
                r#"{{"files": ["p.pt2.weights"], "weights": {{"w": [0, 0, {length}]}}, "constants": {{}}}}"#
            )
        };
        // The archive holds the weight empty, as the worker's hand-off save does.
        let mut pt2 = open(archive(&[weight(&[2, 4], &[4, 1], 0, Some(vec![]))]));
        std::fs::write(dir.path().join("p.pt2.weights.json"), index(32)).unwrap();
        pt2.attach_side_weights(&side, &[]).unwrap();
        assert_eq!(pt2.weight("model", "w").unwrap().unwrap(), &floats(8)[..]);
        let mut pt2 = open(archive(&[weight(&[2, 4], &[4, 1], 0, Some(vec![]))]));
        std::fs::write(dir.path().join("p.pt2.weights.json"), index(28)).unwrap();
        let e = pt2.attach_side_weights(&side, &[]).err().unwrap().to_string();
        assert_eq!(
            e,
            format!("{}: weight `w`: holds 28 bytes, the tensor needs 32", side.display())
        );
        std::fs::write(dir.path().join("p.pt2.weights.json"), index(41)).unwrap();
        let e = pt2.attach_side_weights(&side, &[]).err().unwrap().to_string();
        assert!(e.contains("weight `w`: bytes 0+41 past the end (40)"), "{e}");
        // Without a side entry the archive's empty entry is what there is.
        std::fs::write(
            dir.path().join("p.pt2.weights.json"),
            r#"{"files": ["p.pt2.weights"], "weights": {}, "constants": {}}"#,
        )
        .unwrap();
        pt2.attach_side_weights(&side, &[]).unwrap();
        assert!(pt2
            .weight("model", "w")
            .err()
            .unwrap()
            .to_string()
            .contains("is empty, the tensor needs 32"));
    }

    /// A folder with an empty side file `p.pt2.weights` and a checkpoint
    /// `model.safetensors` holding 8 floats after a 16-byte header.
    fn side_file_and_checkpoint() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let side = dir.path().join("p.pt2.weights");
        std::fs::write(&side, b"").unwrap();
        let checkpoint = dir.path().join("model.safetensors");
        let mut bytes = vec![0u8; 16];
        bytes.extend(floats(8));
        std::fs::write(&checkpoint, &bytes).unwrap();
        (dir, side, checkpoint)
    }

    /// Weight entries written while the worker traced are kept only when the
    /// archive starts with exactly those entries from exactly those bytes;
    /// either way the archive's bytes are the same, and no temp file is left
    /// (a plan dropped unfinished, when the trace fails, included).
    #[test]
    fn weights_written_while_tracing_are_kept_only_where_the_archive_starts_with_them() {
        use crate::weights::checkpoint::Checkpoints;
        use crate::weights::plan::PlannedWeight;
        use crate::weights::prewrite::Prewriter;
        let prewritten = |out: &Path, plan: &Vec<PlannedWeight>, sources: &Path| {
            let (out, plan, checkpoints) =
                (out.to_path_buf(), plan.clone(), Checkpoints::new(&[sources.to_path_buf()]));
            Prewriter::start(move |stop| super::prewrite::write(&out, plan, checkpoints, stop))
        };
        let (dir, side, checkpoint) = side_file_and_checkpoint();
        let index = serde_json::json!({"files": ["p.pt2.weights", checkpoint], "weights": {"a": [1, 16, 32], "b": [1, 0, 32]}, "constants": {}});
        std::fs::write(dir.path().join("p.pt2.weights.json"), index.to_string()).unwrap();
        let stored = |fqn| Stored {
            fqn,
            sizes: vec![2, 4],
            strides: vec![4, 1],
            offset: 0,
            bytes: Some(vec![]),
        };
        let mut pt2 = open(archive(&[stored("a"), stored("b")]));
        pt2.attach_side_weights(&side, std::slice::from_ref(&checkpoint)).unwrap();
        let programs = pt2.programs.clone();
        let plain = dir.path().join("plain.pt2");
        pt2.write(&plain, &programs).unwrap();
        let planned = |entry: &str, offset, stored: &str| PlannedWeight {
            name: format!("t/data/weights/{entry}"),
            file: checkpoint.clone(),
            offset,
            length: 32,
            stored: stored.into(),
            dtype: "float32".into(),
            shape: vec![2, 4],
            linear_weight: false,
        };
        let cases = [
            (vec![planned("weight_0", 16, "float32"), planned("weight_1", 0, "float32")], 2),
            (vec![planned("weight_0", 16, "float32")], 1),
            // Other entries first, other bytes, a conversion the archive does not make, a dtype hfx does not know.
            (vec![planned("weight_1", 0, "float32"), planned("weight_0", 16, "float32")], 0),
            (vec![planned("weight_0", 0, "float32")], 0),
            (vec![planned("weight_0", 16, "bfloat16")], 0),
            (vec![planned("weight_0", 16, "complex32")], 0),
        ];
        let before: std::collections::BTreeSet<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        for (plan, kept) in cases {
            let out = dir.path().join("out.pt2");
            assert_eq!(
                pt2.write_continuing(
                    &out,
                    &programs,
                    prewritten(&out, &plan, &checkpoint).finish()
                )
                .unwrap(),
                kept,
                "{plan:?}"
            );
            assert!(
                std::fs::read(&out).unwrap() == std::fs::read(&plain).unwrap(),
                "{plan:?}: other bytes"
            );
            std::fs::remove_file(&out).unwrap();
            // Written for another path: not kept.
            let elsewhere =
                prewritten(&dir.path().join("elsewhere.pt2"), &plan, &checkpoint).finish();
            assert_eq!(pt2.write_continuing(&out, &programs, elsewhere).unwrap(), 0);
            std::fs::remove_file(&out).unwrap();
            // A plan naming a file that is not one of the checkpoint's: nothing is read.
            assert!(prewritten(&out, &plan, &side).finish().is_none(), "{plan:?}");
        }
        drop(prewritten(
            &dir.path().join("failed.pt2"),
            &vec![planned("weight_0", 16, "float32")],
            &checkpoint,
        ));
        let after: std::collections::BTreeSet<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(before, after, "temp files left");
    }

    /// Streamed weights point into a model folder's checkpoint: the index may
    /// name those files (any path reaching them) and no other.
    #[test]
    fn side_weights_read_only_the_checkpoint_files_they_were_given() {
        let (dir, side, checkpoint) = side_file_and_checkpoint();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, floats(8)).unwrap();
        let index = |file: &Path| {
            let files = serde_json::json!(["p.pt2.weights", file]);
            format!(r#"{{"files": {files}, "weights": {{"w": [1, 16, 32]}}, "constants": {{}}}}"#)
        };
        let mut pt2 = open(archive(&[weight(&[2, 4], &[4, 1], 0, Some(vec![]))]));
        // Named through another path (`dir/./model.safetensors`): the same file.
        std::fs::write(
            dir.path().join("p.pt2.weights.json"),
            index(&dir.path().join(".").join("model.safetensors")),
        )
        .unwrap();
        pt2.attach_side_weights(&side, std::slice::from_ref(&checkpoint)).unwrap();
        assert_eq!(pt2.weight("model", "w").unwrap().unwrap(), &floats(8)[..]);
        std::fs::write(dir.path().join("p.pt2.weights.json"), index(&secret)).unwrap();
        let e = pt2
            .attach_side_weights(&side, std::slice::from_ref(&checkpoint))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&format!(
                "names `{}`, which is not a checkpoint file of the model folder",
                secret.display()
            )),
            "{e}"
        );
        // The side file itself is a name beside the index, never a path.
        let outside =
            format!(r#"{{"files": ["{}"], "weights": {{}}, "constants": {{}}}}"#, secret.display());
        std::fs::write(dir.path().join("p.pt2.weights.json"), outside).unwrap();
        let e = pt2.attach_side_weights(&side, &[]).err().unwrap().to_string();
        assert!(e.contains("is not a file name beside it"), "{e}");
    }

    /// Only `hfx.export`'s run maps its caller's shared memory: an index
    /// naming a descriptor anywhere else (a started worker, a trace cache
    /// entry) is refused before anything is read.
    #[test]
    fn a_caller_descriptor_is_refused_without_a_caller() {
        let (dir, side, _) = side_file_and_checkpoint();
        let mut pt2 = open(archive(&[weight(&[2, 4], &[4, 1], 0, Some(vec![]))]));
        let index = r#"{"files": ["p.pt2.weights", {"caller_fd": 0}],
            "weights": {"w": [1, 0, 32]}, "constants": {}}"#;
        std::fs::write(dir.path().join("p.pt2.weights.json"), index).unwrap();
        let e = pt2.attach_side_weights(&side, &[]).err().unwrap().to_string();
        assert!(e.contains("the caller's descriptor 0, and this export has no caller"), "{e}");
        // Nor is a descriptor ever the side file beside the index.
        let first = r#"{"files": [{"caller_fd": 0}], "weights": {}, "constants": {}}"#;
        std::fs::write(dir.path().join("p.pt2.weights.json"), first).unwrap();
        let e = pt2.attach_side_weights(&side, &[]).err().unwrap().to_string();
        assert!(e.contains("its side file is the caller's descriptor 0"), "{e}");
    }

    /// A weight read from a checkpoint says where it is stored (what a
    /// kernel-side copy reads), and the program written for the worker's
    /// steps indexes it there, by absolute path, without its bytes.
    #[test]
    fn side_weights_tell_where_they_are_stored_and_are_indexed_in_place() {
        let (dir, side, checkpoint) = side_file_and_checkpoint();
        let index = serde_json::json!({"files": ["p.pt2.weights", checkpoint], "weights": {"w": [1, 16, 32]}, "constants": {}});
        std::fs::write(dir.path().join("p.pt2.weights.json"), index.to_string()).unwrap();
        let mut pt2 = open(archive(&[weight(&[2, 4], &[4, 1], 0, Some(vec![]))]));
        pt2.attach_side_weights(&side, std::slice::from_ref(&checkpoint)).unwrap();
        let w = pt2.weight("model", "w").unwrap().unwrap();
        let (file, offset) = pt2.origin(w).expect("a slice of the checkpoint's map");
        assert_eq!(offset, 16);
        assert_eq!(file.metadata().unwrap().len(), 48);
        assert!(pt2.origin(&floats(8)).is_none(), "bytes of no map have no origin");

        let out = dir.path().join("for-worker.pt2");
        pt2.write_indexed(&out, &pt2.programs.clone()).unwrap();
        let written: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("for-worker.pt2.weights.json")).unwrap(),
        )
        .unwrap();
        let canonical = checkpoint.canonicalize().unwrap();
        assert_eq!(written["files"][1], serde_json::json!(canonical), "{written}");
        assert_eq!(written["weights"]["w"], serde_json::json!([1, 16, 32]));
        // The archive holds no weight bytes; read back with the index, it has them all.
        let mut back = Pt2::open(&out).unwrap();
        let entry_lengths: u64 = back
            .archive()
            .entries()
            .iter()
            .filter(|e| e.name.contains("/data/weights/") && !e.name.ends_with(".json"))
            .map(|e| e.len)
            .sum();
        assert_eq!(entry_lengths, 0);
        // Every file is named by its absolute path: an index only the worker reads
        // (the host's own reading wants its first file beside the index).
        let e = back
            .attach_side_weights(&side_weights_path(&out), &pt2.side_files())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a file name beside it"), "{e}");
    }

    /// The bytes of a `.pt2` whose weight `w` and constants are as given, with
    /// `extra` entries after the programs.
    fn archive_with(
        weight: PayloadMeta,
        constants: &[(&str, PayloadMeta)],
        extra: &[(&str, &[u8])],
    ) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pt2");
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add(&format!("t/data/weights/{}", weight.path_name), &floats(4)).unwrap();
        let config = PayloadConfig { config: [("w".to_string(), weight)].into() };
        w.add("t/data/weights/model_weights_config.json", &serde_json::to_vec(&config).unwrap())
            .unwrap();
        if !constants.is_empty() {
            for (_, meta) in constants {
                w.add(&format!("t/data/constants/{}", meta.path_name), &floats(4)).unwrap();
            }
            let config = PayloadConfig {
                config: constants
                    .iter()
                    .map(|(fqn, meta)| (fqn.to_string(), meta.clone()))
                    .collect(),
            };
            w.add(
                "t/data/constants/model_constants_config.json",
                &serde_json::to_vec(&config).unwrap(),
            )
            .unwrap();
        }
        w.add("t/models/model.json", program_json().as_bytes()).unwrap();
        for (name, bytes) in extra {
            w.add(name, bytes).unwrap();
        }
        w.add("t/archive_format", b"pt2").unwrap();
        w.finish().unwrap();
        std::fs::read(&path).unwrap()
    }

    fn stored_meta(path_name: &str, use_pickle: bool) -> PayloadMeta {
        let ints = |v: &[i64]| v.iter().map(|&i| schema::SymInt::AsInt(i)).collect::<Vec<_>>();
        let tensor_meta = schema::TensorMeta {
            dtype: 7,
            sizes: ints(&[4]),
            requires_grad: false,
            device: schema::Device { kind: "cpu".into(), index: None },
            strides: ints(&[1]),
            storage_offset: schema::SymInt::AsInt(0),
            layout: 7,
        };
        PayloadMeta {
            path_name: path_name.into(),
            is_param: true,
            use_pickle,
            tensor_meta: (!use_pickle).then_some(tensor_meta),
        }
    }

    fn read_error(bytes: Vec<u8>) -> String {
        let e = Pt2::read(Archive::from_bytes(Path::new("t.pt2"), bytes).unwrap())
            .err()
            .expect("refused")
            .to_string();
        assert!(e.starts_with("t.pt2: ") && !e.contains('\n'), "{e}");
        e
    }

    /// Whatever torch would unpickle when loading an archive is refused when
    /// hfx reads it, for every backend: a `use_pickle` weight or constant, a
    /// constant torch loads as an object (by its name's prefix), torch's
    /// legacy pickled state dict.
    #[test]
    fn pickled_payloads_are_refused_when_read() {
        let e = read_error(archive_with(stored_meta("weight_0", true), &[], &[]));
        assert_eq!(
            e,
            "t.pt2: weight `w` is stored pickled (`weight_0`): pickled weights are not loaded from untrusted files; \
             re-export with torch >= 2.13 from plain tensors, or save tensors plainly"
        );
        let e = read_error(archive_with(
            stored_meta("weight_0", false),
            &[("c", stored_meta("tensor_0", true))],
            &[],
        ));
        assert!(e.contains("constant `c` is stored pickled"), "{e}");
        for object in ["custom_obj_0", "opaque_obj_0", "weight_0"] {
            let e = read_error(archive_with(
                stored_meta("weight_0", false),
                &[("c", stored_meta(object, false))],
                &[],
            ));
            assert!(
                e.contains(&format!("constant `c` is an object, not a tensor (`{object}`)")),
                "{e}"
            );
        }
        let e = read_error(archive_with(
            stored_meta("weight_0", false),
            &[],
            &[("t/data/weights/model.pt", b"pickle")],
        ));
        assert!(e.contains("`t/data/weights/model.pt` is a pickled state dict"), "{e}");
        // Plain tensors are read.
        let pt2 = open(archive_with(
            stored_meta("weight_0", false),
            &[("c", stored_meta("tensor_0", false))],
            &[],
        ));
        assert_eq!(pt2.weight("model", "w").unwrap().unwrap(), &floats(4)[..]);
    }

    /// An archive hfx writes holds only what it read and checked: the
    /// programs and payload configs as parsed, the storages they name, torch's
    /// marker files when they hold what torch writes; sample inputs (a pickle)
    /// written empty; anything else (AOTInductor libraries, extra files, an
    /// entry no config names) left out.
    #[test]
    fn written_archives_are_rebuilt_from_checked_parts() {
        let extra: &[(&str, &[u8])] = &[
            ("t/data/sample_inputs/model.pt", b"a pickle"),
            ("t/data/aotinductor/model/model.so", b"\x7fELF"),
            ("t/extra/notes", b"anything"),
            ("t/data/weights/weight_9", b"unnamed"),
            ("t/archive_version", b"0"),
            ("t/byteorder", b"little"),
            ("t/.data/version", b"code()"),
            ("elsewhere/file", b"outside"),
        ];
        let pt2 = open(archive_with(
            stored_meta("weight_0", false),
            &[("c", stored_meta("tensor_0", false))],
            extra,
        ));
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o.pt2");
        pt2.write(&out, &pt2.programs.clone()).unwrap();
        let written = Pt2::open(&out).unwrap();
        let names: Vec<&str> =
            written.archive().entries().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "t/data/weights/weight_0",
                "t/data/weights/model_weights_config.json",
                "t/data/constants/tensor_0",
                "t/data/constants/model_constants_config.json",
                "t/models/model.json",
                "t/data/sample_inputs/model.pt",
                "t/archive_version",
                "t/byteorder",
                "t/archive_format",
            ]
        );
        let bytes =
            |name: &str| written.archive().bytes(written.archive().entry(name).unwrap()).to_vec();
        assert!(bytes("t/data/sample_inputs/model.pt").is_empty());
        assert_eq!(bytes("t/data/weights/weight_0"), floats(4));
        assert_eq!(written.weights, pt2.weights);
        assert_eq!(written.programs, pt2.programs);
    }

    #[test]
    fn fifos_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("in.pt2");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let (send, receive) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || send.send(Pt2::open(&path).err().map(|e| e.to_string())));
        let e = receive
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("Pt2::open hung on a FIFO")
            .unwrap();
        assert_eq!(
            e,
            format!(
                "{}: is a FIFO (named pipe), not a regular file; give the path of a regular file",
                fifo.display()
            )
        );
        // The side weights file too.
        let mut pt2 = open(archive(&[]));
        std::fs::write(
            dir.path().join("in.pt2.json"),
            r#"{"files": ["in.pt2"], "weights": {}, "constants": {}}"#,
        )
        .unwrap();
        let e = pt2.attach_side_weights(&fifo, &[]).err().unwrap().to_string();
        assert!(e.contains("FIFO"), "{e}");
    }
}
