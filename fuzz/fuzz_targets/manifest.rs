//! `plugin.toml`: `Manifest::parse` gives a manifest or a one-line error.
#![no_main]

use hfx::plugins::manifest::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(e) = Manifest::parse(text) {
        assert!(!e.contains('\n'), "multi-line error: {e}");
    }
});
