//! hfx's end-to-end tests, one binary (each module used to be its own, and
//! each linked wasmtime: ten links of the same crates on every change).
//! Run one module with `cargo test --test it <module>::`.

mod common;

mod cli;
mod complex;
mod confine;
mod cuda_fusions;
mod encoder_fusions;
mod executorch;
mod executorch_fixes;
mod executorch_lowering;
mod executorch_patches;
mod fusions;
mod fx_fixes;
mod generate;
mod generation;
mod hub_download;
mod install;
mod loading;
mod model_id;
mod onnx;
mod openvino;
mod parity;
mod patches;
mod plugin_kinds;
mod plugin_sets;
mod progress;
mod pt2;
mod python_api;
mod report;
mod sandbox;
mod scale;
mod selftests;
mod trace;

/// The bodies the fuzz targets run, replayed on their seeds by `pt2`.
#[path = "../../fuzz/bodies.rs"]
mod fuzz_bodies;
