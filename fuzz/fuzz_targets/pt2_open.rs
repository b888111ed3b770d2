//! libFuzzer target `pt2_open`: see `pt2_open` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N pt2_open`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::pt2_open(data));
