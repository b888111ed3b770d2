//! Weights written while the worker traces.
//!
//! Streamed from a model folder, an artifact's weights are the checkpoint's
//! bytes (converted, or transposed, as they are written). Before
//! torch.export runs, the worker says which weights the artifact will start
//! with and where each one's bytes are ([`PlannedWeight`], the worker's
//! `checkpoint.weights_plan`); a thread writes them into the artifact's temp
//! file meanwhile, on the core the trace leaves idle. The emit step keeps
//! what the artifact it writes starts with (each entry compared by the bytes
//! it was written from: file, offset, length, conversion, transposition) and
//! writes the rest: the artifact's bytes are the same either way.
//!
//! - A `.pt2`'s weight entries, in torch's archive order
//!   ([`crate::graph::pt2::prewrite`]): measured on a 125M Llama from a model
//!   folder (536 MB, 111 entries), the `.pt2` emit step 0.50-0.57 s -> 31-33 ms.
//! - An ONNX model's external data, its initializers in the program's
//!   signature order ([`crate::onnx::prewrite`]).
//!
//! Only into an export folder's scratch folder, which goes on every way out
//! (Ctrl-C included); a `--verify` run writes its artifact elsewhere first.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::graph::pt2::cast::Cast;
use crate::trace::protocol::PlannedWeight;

/// A thread writing a plan's weights; stopped (its temp file removed with
/// what it wrote) when dropped unfinished.
pub struct Prewriting<T> {
    thread: Option<JoinHandle<Option<T>>>,
    stop: Arc<AtomicBool>,
}

impl<T: Send + 'static> Prewriting<T> {
    /// Runs `write` on a thread of its own; `write` stops early once the
    /// flag it is given is set.
    pub fn start(write: impl FnOnce(&AtomicBool) -> Option<T> + Send + 'static) -> Prewriting<T> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        match std::thread::Builder::new().name("hfx-prewrite".into()).spawn(move || write(&flag)) {
            Ok(thread) => Prewriting { thread: Some(thread), stop },
            Err(e) => {
                tracing::info!("weights are written at the emit step: no thread to write them earlier ({e})");
                Prewriting { thread: None, stop }
            }
        }
    }

    /// What was written, once the thread is done; None if nothing was.
    pub fn finish(mut self) -> Option<T> {
        self.thread.take()?.join().ok().flatten()
    }
}

impl<T> Drop for Prewriting<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join(); // what it wrote, dropped unfinished, removes its temp file
        }
    }
}

/// One artifact's weights, being written while the worker traces.
pub enum Prewrite {
    /// A `.pt2`'s first weight entries.
    Archive(Prewriting<crate::graph::pt2::prewrite::Prewritten>),
    /// An ONNX model's external data file, its first initializers.
    OnnxData(Prewriting<crate::onnx::prewrite::PrewrittenData>),
}

impl Prewrite {
    /// A `.pt2`'s, or itself back (`Traced::prewritten` keeps it for another target).
    pub fn archive(self) -> Result<Prewriting<crate::graph::pt2::prewrite::Prewritten>, Prewrite> {
        match self {
            Prewrite::Archive(p) => Ok(p),
            other => Err(other),
        }
    }

    /// An ONNX model's external data, or itself back.
    pub fn onnx_data(self) -> Result<Prewriting<crate::onnx::prewrite::PrewrittenData>, Prewrite> {
        match self {
            Prewrite::OnnxData(p) => Ok(p),
            other => Err(other),
        }
    }
}

/// What the worker is asked to plan for the artifact at `path`, and how the
/// plan is written there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrewriteFor {
    /// A `.pt2`.
    Archive,
    /// An ONNX model with external data; `transposed_linear`: the optimizer
    /// stores a `torch.nn.Linear`'s weight transposed (it does, unless
    /// `--no-optimize`).
    OnnxData { transposed_linear: bool },
}

impl PrewriteFor {
    /// The plan the worker sends for it.
    pub fn planned(self) -> crate::trace::protocol::PlannedWeights {
        use crate::trace::protocol::PlannedWeights;
        match self {
            PrewriteFor::Archive => PlannedWeights::ArchiveEntries,
            PrewriteFor::OnnxData { .. } => PlannedWeights::Parameters,
        }
    }

    /// Starts writing `plan` for the artifact at `path`, reading only `sources`.
    pub fn start(self, path: &Path, plan: Vec<PlannedWeight>, sources: &[PathBuf]) -> Prewrite {
        let (path, checkpoints) = (path.to_path_buf(), Checkpoints::new(sources));
        match self {
            PrewriteFor::Archive => Prewrite::Archive(Prewriting::start(move |stop| crate::graph::pt2::prewrite::write(&path, plan, checkpoints, stop))),
            PrewriteFor::OnnxData { transposed_linear } => {
                let data = crate::onnx::emit::data_file(&path);
                Prewrite::OnnxData(Prewriting::start(move |stop| crate::onnx::prewrite::write(&data, plan, checkpoints, transposed_linear, stop)))
            }
        }
    }
}

/// The checkpoint files a plan may read: the model folder's, and no other
/// (the plan is a worker line, and the side weights' index may name no
/// other file either: [`crate::graph::pt2::Pt2::attach_side_weights`]).
pub struct Checkpoints {
    allowed: Vec<PathBuf>,
    opened: Vec<Opened>,
}

/// A checkpoint file, opened and mapped read-only.
pub struct Opened {
    /// Its canonical path.
    pub path: PathBuf,
    pub file: std::fs::File,
    pub map: memmap2::Mmap,
}

/// A planned weight's bytes: where they are, and the conversion they are
/// written through (None: written as stored).
pub struct PlannedBytes<'a> {
    pub from: &'a Opened,
    pub bytes: &'a [u8],
    pub offset: u64,
    pub cast: Option<Cast>,
}

impl Checkpoints {
    pub fn new(sources: &[PathBuf]) -> Checkpoints {
        Checkpoints { allowed: sources.iter().filter_map(|s| s.canonicalize().ok()).collect(), opened: Vec::new() }
    }

    /// `planned`'s bytes; None if it names a file that is not allowed, does
    /// not open or is shorter, or a dtype pair hfx does not convert.
    pub fn get(&mut self, planned: &PlannedWeight) -> Option<PlannedBytes<'_>> {
        let path = planned.file.canonicalize().ok().filter(|f| self.allowed.contains(f))?;
        let at = match self.opened.iter().position(|o| o.path == path) {
            Some(at) => at,
            None => {
                let file = std::fs::File::open(&path).ok()?;
                // SAFETY: a read-only private mapping of a checkpoint nobody
                // writes while hfx runs (as `Pt2` maps it to write the same bytes).
                let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
                self.opened.push(Opened { path, file, map });
                self.opened.len() - 1
            }
        };
        let from = &self.opened[at];
        let start = usize::try_from(planned.offset).ok()?;
        let bytes = from.map.get(start..start.checked_add(usize::try_from(planned.length).ok()?)?)?;
        let cast = match planned.stored == planned.dtype {
            true => None,
            false => Cast::of_stored(&planned.stored, hfx_dtype::DType::from_name(&planned.dtype)?).ok()?,
        };
        Some(PlannedBytes { from, bytes, offset: planned.offset, cast })
    }
}

/// What an artifact's written weight was written from: two entries with the
/// same place are the same bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The checkpoint file (canonical), and the stored bytes' range in it.
    pub file: PathBuf,
    pub offset: u64,
    pub length: u64,
    pub cast: Option<Cast>,
    /// Written transposed: the stored tensor's rows and columns.
    pub transposed: Option<(usize, usize)>,
}
