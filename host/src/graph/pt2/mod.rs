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
use schema::{ExportedProgram, PayloadConfig, PayloadMeta, NEWEST_MINOR, SUPPORTED_MAJOR};

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
    path: std::path::PathBuf,
    map: memmap2::Mmap,
    weights: BTreeMap<String, (usize, usize)>,
    constants: BTreeMap<String, (usize, usize)>,
}

/// Most bytes the side weights' index (`<archive>.weights.json`) may hold.
const SIDE_INDEX_LIMIT: u64 = 64 << 20;

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
    let dtype = convert::dtype_name(t.dtype).ok_or_else(|| format!("unknown dtype code {}", t.dtype))?;
    let element = crate::graph::element_size(dtype).ok_or_else(|| format!("dtype {dtype} has no known element size"))?;
    crate::graph::storage_bytes(&sizes, &strides, offset, element)
}

/// The side file of weights the trace worker writes for `archive`.
/// `MADV_DONTNEED` on the whole pages of `bytes` inside `map`, if it lies there.
pub(crate) fn release_from(map: &memmap2::Mmap, bytes: &[u8]) {
    const PAGE: usize = 4096;
    let (start, base) = (bytes.as_ptr() as usize, map.as_ptr() as usize);
    if start < base || start + bytes.len() > base + map.len() {
        return;
    }
    let offset = start - base;
    let first = offset.next_multiple_of(PAGE);
    let end = (offset + bytes.len()) / PAGE * PAGE;
    if end > first {
        // SAFETY: a read-only private mapping of a file nobody writes while it
        // is mapped: dropped pages are read from the file again when touched,
        // so every slice of the map keeps its contents.
        let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, end - first) };
    }
}

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
    /// The side file has no CRC: each storage's length is checked against the
    /// tensors the archive's payload configs say it holds.
    pub fn attach_side_weights(&mut self, path: &Path) -> Result<(), Pt2Error> {
        let invalid = |reason: String| Pt2Error::Invalid { path: path.display().to_string(), reason };
        let mut index_path = path.as_os_str().to_owned();
        index_path.push(".json");
        let text = crate::input::read_bounded(Path::new(&index_path), SIDE_INDEX_LIMIT)
            .map_err(|e| invalid(format!("reading its index: {e}")))?;
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Index {
            weights: BTreeMap<String, (usize, usize)>,
            constants: BTreeMap<String, (usize, usize)>,
        }
        let index: Index = serde_json::from_slice(&text).map_err(|e| invalid(format!("its index: {e}")))?;
        let file = crate::input::open_regular(path).map_err(|e| invalid(e.to_string()))?;
        // SAFETY: the file is hfx's own scratch output, not modified while mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| invalid(e.to_string()))?;
        for (kind, table) in [(Kind::Weight, &index.weights), (Kind::Constant, &index.constants)] {
            for (fqn, &(offset, length)) in table {
                if offset.checked_add(length).is_none_or(|end| end > map.len()) {
                    return Err(invalid(format!("{} `{fqn}`: bytes {offset}+{length} past the end ({})", kind.what(), map.len())));
                }
                for (model, meta) in self.metas(kind, fqn) {
                    let need = needed_bytes(meta).map_err(|r| invalid(format!("{} `{fqn}` of `{model}`: {r}", kind.what())))?;
                    if (length as u64) < need {
                        return Err(invalid(format!("{} `{fqn}`: holds {length} bytes, the tensor needs {need}", kind.what())));
                    }
                }
            }
        }
        self.side = Some(SideWeights { path: path.to_path_buf(), map, weights: index.weights, constants: index.constants });
        Ok(())
    }

    /// Drops `bytes` (a weight's slice of this archive's or its side file's
    /// map, once streamed into an artifact) from the process's resident
    /// memory: the kernel reads the pages from the file again if they are
    /// touched. A slice of no file map of this `.pt2` is left alone.
    pub fn release(&self, bytes: &[u8]) {
        if let Some(side) = &self.side {
            release_from(&side.map, bytes);
        }
        self.archive.release(bytes);
    }

    /// The payload entries for `fqn` in every model.
    fn metas<'a>(&'a self, kind: Kind, fqn: &'a str) -> impl Iterator<Item = (&'a str, &'a PayloadMeta)> + 'a {
        let tables = match kind {
            Kind::Weight => &self.weights,
            Kind::Constant => &self.constants,
        };
        tables.iter().filter_map(move |(model, config)| Some((model.as_str(), config.config.get(fqn)?)))
    }

    fn side_bytes(&self, kind: Kind, fqn: &str) -> Option<&[u8]> {
        let side = self.side.as_ref()?;
        let table = match kind {
            Kind::Weight => &side.weights,
            Kind::Constant => &side.constants,
        };
        let &(offset, length) = table.get(fqn)?;
        side.map.get(offset..offset.checked_add(length)?)
    }

    /// The stored bytes of weight `fqn` of `model` (tied weights share bytes):
    /// `None` if `model` has no such weight; an error if it has one whose
    /// storage is missing, empty, shorter than the tensor or corrupt (CRC-32,
    /// checked the first time an entry is read).
    pub fn weight(&self, model: &str, fqn: &str) -> Result<Option<&[u8]>, Pt2Error> {
        self.stored(Kind::Weight, model, fqn)
    }

    /// The stored bytes of tensor constant `fqn` of `model`, checked as [`Pt2::weight`]'s.
    pub fn constant(&self, model: &str, fqn: &str) -> Result<Option<&[u8]>, Pt2Error> {
        self.stored(Kind::Constant, model, fqn)
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
                        let name = format!("{}data/{}/{}", self.prefix, kind.folder(), meta.path_name);
                        let entry = self.archive.entry(&name).ok_or_else(|| Pt2Error::Invalid {
                            path: self.archive.path().display().to_string(),
                            reason: format!("{} `{fqn}`: its entry `{name}` is missing", kind.what()),
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

    fn stored(&self, kind: Kind, model: &str, fqn: &str) -> Result<Option<&[u8]>, Pt2Error> {
        let what = kind.what();
        let side = self.side_bytes(kind, fqn);
        let table = match kind {
            Kind::Weight => &self.weights,
            Kind::Constant => &self.constants,
        };
        let Some(meta) = table.get(model).and_then(|c| c.config.get(fqn)) else { return Ok(side) };
        let invalid = |path: &Path, reason: String| Pt2Error::Invalid { path: path.display().to_string(), reason: format!("{what} `{fqn}`: {reason}") };
        let archive_path = self.archive.path();
        if meta.use_pickle {
            return Err(invalid(archive_path, "is stored pickled (a tensor subclass); hfx reads plain tensors only".into()));
        }
        let need = needed_bytes(meta).map_err(|r| invalid(archive_path, r))?;
        if let (Some(bytes), Some(s)) = (side, &self.side) {
            if (bytes.len() as u64) < need {
                return Err(invalid(&s.path, format!("holds {} bytes, the tensor needs {need}", bytes.len())));
            }
            return Ok(Some(bytes));
        }
        let name = format!("{}data/{}/{}", self.prefix, kind.folder(), meta.path_name);
        let entry = self.archive.entry(&name).ok_or_else(|| invalid(archive_path, format!("its entry `{name}` is missing")))?;
        if entry.len < need {
            let held = if entry.len == 0 { "is empty".to_string() } else { format!("holds {} bytes", entry.len) };
            return Err(invalid(archive_path, format!("its entry `{name}` {held}, the tensor needs {need}")));
        }
        match self.archive.checked_bytes(entry) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(ArchiveError::Malformed { reason, .. }) => Err(invalid(archive_path, reason)),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the archive with `programs` in place of the ones read; every other
    /// entry is copied byte for byte from the memory map. Atomic.
    /// Every weight and constant is checked first ([`Pt2::check_payloads`]): a
    /// `.pt2` torch would refuse to load is not written.
    pub fn write(&self, path: &Path, programs: &BTreeMap<String, ExportedProgram>) -> Result<(), Pt2Error> {
        self.check_payloads()?;
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
                None => self.archive.copy_entry(entry, &mut out)?,
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

    /// The bytes of a `.pt2` with model `model` and float32 weights `weights`.
    pub fn archive(weights: &[Stored]) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pt2");
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add("t/archive_format", b"pt2").unwrap();
        w.add("t/models/model.json", program_json().as_bytes()).unwrap();
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
            let meta = PayloadMeta { path_name: format!("weight_{i}"), is_param: true, use_pickle: false, tensor_meta: Some(tensor_meta) };
            config.config.insert(t.fqn.to_string(), meta);
            if let Some(bytes) = &t.bytes {
                w.add(&format!("t/data/weights/weight_{i}"), bytes).unwrap();
            }
        }
        w.add("t/data/weights/model_weights_config.json", &serde_json::to_vec(&config).unwrap()).unwrap();
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

    fn weight(sizes: &[i64], strides: &[i64], offset: i64, bytes: Option<Vec<u8>>) -> Stored<'static> {
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
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing written, no temp file");
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
        assert_eq!(e, "t.pt2: weight `w`: its entry `t/data/weights/weight_0` is empty, the tensor needs 24");
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
        assert_eq!(e, "t.pt2: weight `w`: entry `t/data/weights/weight_0` is corrupt (CRC-32 mismatch)");
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(pt2.write(&dir.path().join("o.pt2"), &BTreeMap::new()).err().unwrap().to_string(), e);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn side_weights_are_checked_against_the_tensors() {
        let dir = tempfile::tempdir().unwrap();
        let side = dir.path().join("p.pt2.weights");
        std::fs::write(&side, floats(10)).unwrap();
        let index = |length: usize| format!(r#"{{"weights": {{"w": [0, {length}]}}, "constants": {{}}}}"#);
        // The archive holds the weight empty, as the worker's hand-off save does.
        let mut pt2 = open(archive(&[weight(&[2, 4], &[4, 1], 0, Some(vec![]))]));
        std::fs::write(dir.path().join("p.pt2.weights.json"), index(32)).unwrap();
        pt2.attach_side_weights(&side).unwrap();
        assert_eq!(pt2.weight("model", "w").unwrap().unwrap(), &floats(8)[..]);
        let mut pt2 = open(archive(&[weight(&[2, 4], &[4, 1], 0, Some(vec![]))]));
        std::fs::write(dir.path().join("p.pt2.weights.json"), index(28)).unwrap();
        let e = pt2.attach_side_weights(&side).err().unwrap().to_string();
        assert_eq!(e, format!("{}: weight `w`: holds 28 bytes, the tensor needs 32", side.display()));
        std::fs::write(dir.path().join("p.pt2.weights.json"), index(41)).unwrap();
        let e = pt2.attach_side_weights(&side).err().unwrap().to_string();
        assert!(e.contains("weight `w`: bytes 0+41 past the end (40)"), "{e}");
        // Without a side entry the archive's empty entry is what there is.
        std::fs::write(dir.path().join("p.pt2.weights.json"), r#"{"weights": {}, "constants": {}}"#).unwrap();
        pt2.attach_side_weights(&side).unwrap();
        assert!(pt2.weight("model", "w").err().unwrap().to_string().contains("is empty, the tensor needs 32"));
    }

    #[test]
    fn fifos_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("in.pt2");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let (send, receive) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || send.send(Pt2::open(&path).err().map(|e| e.to_string())));
        let e = receive.recv_timeout(std::time::Duration::from_secs(10)).expect("Pt2::open hung on a FIFO").unwrap();
        assert_eq!(e, format!("{}: is a FIFO (named pipe), not a regular file; give the path of a regular file", fifo.display()));
        // The side weights file too.
        let mut pt2 = open(archive(&[]));
        std::fs::write(dir.path().join("in.pt2.json"), r#"{"weights": {}, "constants": {}}"#).unwrap();
        let e = pt2.attach_side_weights(&fifo).err().unwrap().to_string();
        assert!(e.contains("FIFO"), "{e}");
    }
}
