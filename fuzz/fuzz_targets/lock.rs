//! libFuzzer target `lock`: see `lock` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N lock`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::lock(data));
