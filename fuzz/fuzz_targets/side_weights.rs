//! libFuzzer target `side_weights`: see `side_weights` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N side_weights`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::side_weights(data));
