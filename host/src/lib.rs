//! hfx: an exporter host for PyTorch / Hugging Face models whose backend
//! workarounds are sandboxed WebAssembly plugins.
//!
//! The pipeline, as the modules are laid out: `trace` (the worker) → `stages`
//! (the plugins of each stage) → `onnx` (the ONNX side) → `pipeline` (the
//! steps of `hfx run`, in order) → `report` (`--report`: the run as a page);
//! `graph` is the IR, `weights` where a weight's bytes come from and how they
//! are written (below the IR), `plugins` the platform, `selftest` the
//! plugins' own test cases, `cli` the command line on top.

pub mod atomic;
pub mod cli;
pub mod executorch;
pub mod graph;
pub mod input;
pub mod installed;
pub mod onnx;
pub mod openvino;
pub mod pipeline;
pub mod plugins;
pub mod private;
pub mod report;
pub mod selftest;
pub mod stages;
pub mod trace;
pub mod weights;
