//! libFuzzer target `host_calls`: see `host_calls` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N host_calls`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::host_calls(data));
