//! libFuzzer target `manifest`: see `manifest` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N manifest`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::manifest(data));
