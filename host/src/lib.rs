//! hfx: an exporter host for PyTorch / Hugging Face models whose backend
//! workarounds are sandboxed WebAssembly plugins.
//!
//! The pipeline, as the modules are laid out: trace → prepare → stages → emit.
//! Today the host has the plugin platform (`plugins`), the graph IR (`graph`),
//! the plugin stages (`stages`) and the start of the ONNX IR (`onnx`).

pub mod atomic;
pub mod cli;
pub mod graph;
pub mod input;
pub mod onnx;
pub mod plugins;
pub mod run;
pub mod stages;
pub mod trace;
