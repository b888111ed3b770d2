//! Which artifact's weights are written while the worker traces, and the
//! worker's plan handed to that artifact's writer ([`crate::weights`]): a
//! `.pt2`'s weight entries ([`crate::graph::pt2::prewrite`]) or an ONNX
//! model's external data ([`crate::onnx::prewrite`]). One artifact per run,
//! only into an export folder's scratch folder, which goes on every way out
//! (Ctrl-C included); a `--verify` run writes its artifact elsewhere first.

use std::path::{Path, PathBuf};

use crate::graph::pt2::prewrite::PrewrittenEntries;
use crate::onnx::prewrite::PrewrittenData;
use crate::trace::protocol;
use crate::weights::checkpoint::Checkpoints;
use crate::weights::plan::PlannedWeight;
use crate::weights::prewrite::Prewriter;

/// What the worker is asked to plan for the artifact at `path`, and how the
/// plan is written there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrewriteTarget {
    /// A `.pt2`.
    Archive,
    /// An ONNX model with external data; `transposed_linear`: the optimizer
    /// stores a `torch.nn.Linear`'s weight transposed (it does, unless
    /// `--no-optimize`).
    OnnxData { transposed_linear: bool },
}

/// One artifact's weights, being written while the worker traces.
pub enum ArtifactPrewriter {
    /// A `.pt2`'s first weight entries.
    Archive(Prewriter<PrewrittenEntries>),
    /// An ONNX model's external data file, its first initializers.
    OnnxData(Prewriter<PrewrittenData>),
}

impl ArtifactPrewriter {
    /// A `.pt2`'s, or itself back (`Traced::prewritten` keeps it for another target).
    pub fn archive(self) -> Result<Prewriter<PrewrittenEntries>, ArtifactPrewriter> {
        match self {
            ArtifactPrewriter::Archive(p) => Ok(p),
            other => Err(other),
        }
    }

    /// An ONNX model's external data, or itself back.
    pub fn onnx_data(self) -> Result<Prewriter<PrewrittenData>, ArtifactPrewriter> {
        match self {
            ArtifactPrewriter::OnnxData(p) => Ok(p),
            other => Err(other),
        }
    }
}

impl PrewriteTarget {
    /// The plan the worker sends for it.
    pub fn planned(self) -> protocol::PlannedWeights {
        match self {
            PrewriteTarget::Archive => protocol::PlannedWeights::ArchiveEntries,
            PrewriteTarget::OnnxData { .. } => protocol::PlannedWeights::Parameters,
        }
    }

    /// Starts writing the worker's `plan` for the artifact at `path`,
    /// reading only `sources`.
    pub fn start(
        self,
        path: &Path,
        plan: Vec<protocol::PlannedWeight>,
        sources: &[PathBuf],
    ) -> ArtifactPrewriter {
        let plan: Vec<PlannedWeight> = plan.into_iter().map(planned_weight).collect();
        let (path, checkpoints) = (path.to_path_buf(), Checkpoints::new(sources));
        match self {
            PrewriteTarget::Archive => ArtifactPrewriter::Archive(Prewriter::start(move |stop| {
                crate::graph::pt2::prewrite::write(&path, plan, checkpoints, stop)
            })),
            PrewriteTarget::OnnxData { transposed_linear } => {
                let data = crate::onnx::external::data_file(&path);
                ArtifactPrewriter::OnnxData(Prewriter::start(move |stop| {
                    crate::onnx::prewrite::write(&data, plan, checkpoints, transposed_linear, stop)
                }))
            }
        }
    }
}

/// A weight of the worker's plan as hfx's weights take it.
fn planned_weight(planned: protocol::PlannedWeight) -> PlannedWeight {
    let protocol::PlannedWeight { name, file, offset, length, stored, dtype, shape, linear_weight } =
        planned;
    PlannedWeight { name, file, offset, length, stored, dtype, shape, linear_weight }
}
