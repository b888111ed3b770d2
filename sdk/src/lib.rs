//! Guest SDK for hfx plugins.
//!
//! A plugin crate depends on `hfx-sdk` with the feature of its kind, implements
//! [`Guest`] and registers it with the kind's macro:
//!
//! ```ignore
//! use hfx_sdk::prelude::*;
//!
//! struct FixAlias;
//!
//! impl Guest for FixAlias {
//!     fn describe() -> Vec<String> {
//!         targets(&["aten.alias.default"])
//!     }
//!     fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
//!         graph.forward_input(node, "self")?;
//!         Ok(true)
//!     }
//! }
//!
//! hfx_sdk::register_fx_node_fix!(FixAlias);
//! ```
//!
//! The bindings are wit-bindgen's, generated from `wit/0.1.0` and re-exported
//! here unchanged; [`helpers`] adds the common rewrites.

#[cfg(any(
    all(feature = "fx-node-fix", any(feature = "fx-program-fix", feature = "patch", feature = "onnx-translation", feature = "onnx-ir-fix")),
    all(feature = "fx-program-fix", any(feature = "patch", feature = "onnx-translation", feature = "onnx-ir-fix")),
    all(feature = "patch", any(feature = "onnx-translation", feature = "onnx-ir-fix")),
    all(feature = "onnx-translation", feature = "onnx-ir-fix"),
))]
compile_error!("hfx-sdk: enable exactly one plugin-kind feature (a component exports one world)");

macro_rules! bindings {
    ($feature:literal, $world:literal) => {
        #[cfg(feature = $feature)]
        mod bindings {
        wit_bindgen::generate!({
            path: "../wit/0.1.0",
            world: $world,
            pub_export_macro: true,
            export_macro_name: "export_plugin",
            default_bindings_module: "hfx_sdk",
            // Plugins compare shapes, arguments and metadata.
            additional_derives: [PartialEq],
        });
        }
    };
}

bindings!("fx-node-fix", "hfx:plugin/fx-node-fix@0.1.0");
bindings!("fx-program-fix", "hfx:plugin/fx-program-fix@0.1.0");
bindings!("patch", "hfx:plugin/patch@0.1.0");
bindings!("onnx-translation", "hfx:plugin/onnx-translation@0.1.0");
bindings!("onnx-ir-fix", "hfx:plugin/onnx-ir-fix@0.1.0");

pub use bindings::*;

pub mod helpers;
#[cfg(feature = "patch")]
pub mod program;
#[cfg(feature = "onnx-translation")]
pub mod translate;

/// Everything a plugin usually needs, in one import.
pub mod prelude {
    pub use crate::helpers::*;
    pub use crate::hfx::plugin::types::*;
    pub use crate::Guest;

    #[cfg(any(feature = "fx-node-fix", feature = "fx-program-fix", feature = "onnx-translation"))]
    pub use crate::hfx::plugin::graph::{
        Argument, Graph, NamedArgument, OutputDecl, RangeConstraint, Replacement, SymBool, SymFloat, SymInt,
    };
    #[cfg(any(feature = "onnx-translation", feature = "onnx-ir-fix"))]
    pub use crate::hfx::plugin::onnx::{Attribute, Builder, Model, NamedAttribute, OnnxNodeId};
    #[cfg(feature = "patch")]
    pub use crate::hfx::plugin::patching::{
        Callback, CallValue, LiveTensor, ObjectValue, OpCall, PatchedCall, Program, Scalar, Slot, Step, SymValue, ValueCall,
    };
    #[cfg(feature = "patch")]
    pub use crate::program::*;
    #[cfg(feature = "onnx-translation")]
    pub use crate::translate::*;
}

/// Registers an FX node fix (the counterpart of `@register_fx_node_fix`).
#[cfg(feature = "fx-node-fix")]
#[macro_export]
macro_rules! register_fx_node_fix {
    ($fix:ident) => {
        $crate::export_plugin!($fix with_types_in $crate);
    };
}

/// Registers an FX program fix (the counterpart of `@register_fx_program_fix`).
#[cfg(feature = "fx-program-fix")]
#[macro_export]
macro_rules! register_fx_program_fix {
    ($fix:ident) => {
        $crate::export_plugin!($fix with_types_in $crate);
    };
}

/// Registers a trace-time patch (the counterpart of `@register_patch`).
#[cfg(feature = "patch")]
#[macro_export]
macro_rules! register_patch {
    ($patch:ident) => {
        $crate::export_plugin!($patch with_types_in $crate);
    };
}

/// Registers an ATen → ONNX translation (an entry of `_ONNX_TRANSLATION_TABLE`).
#[cfg(feature = "onnx-translation")]
#[macro_export]
macro_rules! register_onnx_translation {
    ($translation:ident) => {
        $crate::export_plugin!($translation with_types_in $crate);
    };
}

/// Registers an ONNX IR fix (an entry of `_IR_FIXES`).
#[cfg(feature = "onnx-ir-fix")]
#[macro_export]
macro_rules! register_onnx_ir_fix {
    ($fix:ident) => {
        $crate::export_plugin!($fix with_types_in $crate);
    };
}
