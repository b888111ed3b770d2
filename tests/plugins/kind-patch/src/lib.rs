// Test plugin: the `hfx plugins new --kind patch` template, compiled as is, so
// the template is exercised by the tests of its kind.
include!("../../../../sdk/templates/patch.rs");
