//! libFuzzer target `openvino_ir`: see `openvino_ir` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N openvino_ir`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::openvino_ir(data));
