//! `hfx.lock`: read as `Lock::read` does (TOML into the typed lock, version
//! checked), then compared with itself and written back as `Lock::write` does.
#![no_main]

use hfx::plugins::lock::Lock;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(lock) = toml::from_str::<Lock>(text) else { return };
    assert!(lock.differences(&lock).is_empty(), "a lock differs from itself");
    // What `Lock::write` serializes must serialize (it `expect`s so) and read back.
    let written = toml::to_string_pretty(&lock).expect("a lock read serializes");
    let again: Lock = toml::from_str(&written).expect("a written lock reads back");
    assert!(again.differences(&lock).is_empty());
});
