//! sympy `srepr` strings of symbolic sizes (`.pt2` tensor metadata).
#![no_main]

use hfx::graph::pt2::sympy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(expr) = sympy::parse(text) {
        let _ = sympy::print(&expr);
    } else if let Err(e) = sympy::printed(text) {
        assert!(!e.contains('\n'), "multi-line error: {e}");
    }
});
