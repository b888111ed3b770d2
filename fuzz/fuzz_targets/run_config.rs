//! The `--config` run file: TOML into `RunConfig`, as `cli::merge` reads it.
#![no_main]

use hfx::cli::RunConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = toml::from_str::<RunConfig>(text);
});
