//! Regenerates the worker's `hfx_worker/messages.py` and the version line of
//! `host/src/trace/protocol.rs` from that file's message types (the crate's
//! documentation says how). Run after changing a message:
//!
//!     cargo run -p protocol-gen

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let rust_path = root.join(protocol_gen::RUST);
    let result = std::fs::read_to_string(&rust_path)
        .map_err(|e| format!("{}: {e}", rust_path.display()))
        .and_then(|rust| protocol_gen::generate(&rust))
        .and_then(|generated| {
            std::fs::write(&rust_path, &generated.rust)
                .map_err(|e| format!("{}: {e}", rust_path.display()))?;
            let python_path = root.join(protocol_gen::PYTHON);
            std::fs::write(&python_path, &generated.python)
                .map_err(|e| format!("{}: {e}", python_path.display()))?;
            println!(
                "protocol {}: wrote {} and {}",
                generated.version,
                protocol_gen::RUST,
                protocol_gen::PYTHON
            );
            Ok(())
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("protocol-gen: {e}");
            ExitCode::FAILURE
        }
    }
}
