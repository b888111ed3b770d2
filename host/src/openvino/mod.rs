//! The OpenVINO IR's weights, which no process but the host writes.
//!
//! hfx's ONNX stages write the model OpenVINO converts, its weights in an
//! external data file that the host streams from the checkpoint (while the
//! worker traces, where it can). OpenVINO's ONNX frontend maps that file,
//! and its constants are views of it until a transformation makes a new one
//! (a weight compressed, unpacked, or folded into another). Before the IR is
//! saved, the worker makes each constant still a view of the file an input
//! of the model, named with the bytes it views (`convert_openvino`), so
//! OpenVINO's `.bin` holds only the constants it made. The host turns those
//! inputs back into constants at their bytes in the data file ([`ir`]),
//! which becomes the IR's `.bin` with OpenVINO's appended, or, where
//! OpenVINO made most weights anew, gives the `.bin` only the bytes still
//! read ([`bin`]). So the weights are written once, and OpenVINO sees the
//! model it would have converted.

pub mod bin;
pub mod ir;
