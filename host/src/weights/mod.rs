//! Weights: where a weight's bytes come from, how they are converted or
//! transposed, and how they are written into an artifact, whatever the
//! artifact's format.
//!
//! Streamed from a model folder, an artifact's weights are the checkpoint's
//! bytes, converted or transposed as they are written. Before torch.export
//! runs, the worker says which weights the artifact will start with and
//! where each one's bytes are (a [`plan::PlannedWeight`] each); a thread
//! ([`prewrite::Prewriter`]) writes them into the artifact's temp file
//! meanwhile, on the core the trace leaves idle. The emit step keeps what
//! the artifact it writes starts with, each entry compared by what it was
//! written from ([`place::Place`]), and writes the rest: the artifact's
//! bytes are the same either way.
//!
//! Below the graph IR and every artifact format: it knows neither the worker
//! protocol nor plugins, nor what a `.pt2` or an ONNX model is. Each format
//! lays its weights out itself (`graph::pt2::prewrite`: a `.pt2`'s weight
//! entries; `onnx::prewrite` and `onnx::external`: an ONNX model's external
//! data file) from what this module gives.
//!
//! - [`caller`]: the shared memory of `hfx.export`'s process, which serves
//!   weights from its own tensors.
//! - [`checkpoint`]: opening a model folder's checkpoint files, and the
//!   bytes a plan's weight names in them.
//! - [`plan`]: the weights the worker announces, in hfx's own type.
//! - [`place`]: what a written weight was written from.
//! - [`map`]: slices of memory maps: where they are, releasing their pages.
//! - [`cast`]: conversion between the floating dtypes, as weights stream.
//! - [`transpose`]: a 2-D weight transposed as it streams.
//! - [`quantize`]: a 2-D weight quantized to 4 bits (`MatMulNBits`,
//!   `GatherBlockQuantized`) as it streams.
//! - [`bytes`]: a weight's bytes on their way into an artifact.
//! - [`files`]: where written bytes are read from and released.
//! - [`prewrite`]: the thread that writes a plan's weights while the worker traces.

pub mod bytes;
pub mod caller;
pub mod cast;
pub mod checkpoint;
pub mod files;
pub mod map;
pub mod place;
pub mod plan;
pub mod prewrite;
pub mod quantize;
pub mod transpose;
