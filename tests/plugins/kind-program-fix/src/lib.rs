// Test plugin: the `hfx plugins new --kind fx-program-fix` template, compiled as is, so
// the template is exercised by the tests of its kind.
include!("../../../../sdk/templates/fx_program_fix.rs");
