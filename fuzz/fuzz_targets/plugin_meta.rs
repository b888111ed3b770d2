//! libFuzzer target `plugin_meta`: see `plugin_meta` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N plugin_meta`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::plugin_meta(data));
