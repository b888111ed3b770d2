//! Lines from the trace worker: `read_line_bounded` splits a byte stream into
//! lines of at most a limit, `parse_message` types each one.
#![no_main]

use hfx::trace::protocol::{parse_message, read_line_bounded, Incoming};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A small reader buffer and limit, so long lines and split reads happen.
    let mut reader = std::io::BufReader::with_capacity(7, data);
    while let Ok(Some(incoming)) = read_line_bounded(&mut reader, 4096) {
        match incoming {
            Incoming::Line(line) => {
                assert!(line.len() <= 4096);
                let _ = parse_message(&line);
            }
            Incoming::TooLong(_) => break,
            _ => {}
        }
    }
});
