//! libFuzzer target `worker_line`: see `worker_line` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N worker_line`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::worker_line(data));
