//! libFuzzer target `selftest_case`: see `selftest_case` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N selftest_case`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::selftest_case(data));
