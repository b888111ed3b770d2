//! Coverage-guided fuzzing of the `.pt2` reader and its conversion to the IR:
//!
//!     cargo install cargo-fuzz
//!     RUSTC_BOOTSTRAP=1 cargo fuzz run pt2_open -- -max_total_time=300
//!
//! Seed the corpus with real archives (`target/pt2-fixtures/*.pt2`, made by
//! the tests): `mkdir -p fuzz/corpus/pt2_open && cp target/pt2-fixtures/*.pt2 fuzz/corpus/pt2_open/`.
//! Any input must give a program or an error, never a panic.
#![no_main]

use hfx::graph::pt2::{archive::Archive, convert, Pt2};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(archive) = Archive::from_bytes(std::path::Path::new("fuzz.pt2"), data.to_vec()) else { return };
    if let Ok(pt2) = Pt2::read(archive) {
        for program in pt2.programs.values() {
            let _ = convert::to_ir(program);
        }
    }
});
