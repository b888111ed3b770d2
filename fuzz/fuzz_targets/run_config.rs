//! libFuzzer target `run_config`: see `run_config` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N run_config`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::run_config(data));
