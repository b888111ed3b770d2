//! libFuzzer target `size_guard`: see `size_guard` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N size_guard`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::size_guard(data));
