//! The layout of an ONNX model's external data file, which the emit step
//! writes ([`super::emit::write`]) and the thread writing weights while the
//! worker traces starts ([`super::prewrite`]).

/// Initializers smaller than this stay in the `.onnx` with external data, as
/// onnx's `convert_model_to_external_data` keeps them (its `size_threshold`).
pub const THRESHOLD: u64 = 1024;
/// Offsets in the external data file are aligned for memory mapping.
pub const ALIGNMENT: u64 = 64;

/// `model.onnx` → `model.onnx.data`, the external data file beside it.
pub fn data_file(model: &std::path::Path) -> std::path::PathBuf {
    model.with_file_name(format!(
        "{}.data",
        model.file_name().and_then(|n| n.to_str()).unwrap_or("model.onnx")
    ))
}
