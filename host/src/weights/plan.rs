//! The weights an artifact will start with, as the worker announces them
//! before torch.export runs (its `checkpoint.weights_plan`).

use std::path::PathBuf;

/// A weight the artifact will start with (`name`: a `.pt2` entry's, with the
/// archive's folder, or a parameter's), filled from `length` bytes of the
/// checkpoint `file` at `offset`, stored as `stored` and written as `dtype`,
/// of sizes `shape`; `linear_weight`: the `weight` of a `torch.nn.Linear`.
/// Its fields come from a worker line: nothing in it is trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWeight {
    pub name: String,
    pub file: PathBuf,
    pub offset: u64,
    pub length: u64,
    pub stored: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub linear_weight: bool,
}
