// Test plugin: the `hfx plugins new --kind onnx-translation` template, compiled as is, so
// the template is exercised by the tests of its kind.
include!("../../../../sdk/templates/onnx_translation.rs");
