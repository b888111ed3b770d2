//! libFuzzer target `sympy`: see `sympy` in `../bodies.rs`. Run with
//! `cargo xtask fuzz --seconds N sympy`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::sympy(data));
