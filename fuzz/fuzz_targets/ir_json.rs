//! libFuzzer target `ir_json`: see `ir_json` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N ir_json`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::ir_json(data));
