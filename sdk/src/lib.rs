//! Guest SDK for hfx plugins.
//!
//! A plugin is one function under the attribute of its kind, which states the
//! kind and the targets once:
//!
//! ```ignore
//! use hfx_sdk::prelude::*;
//!
//! #[hfx_sdk::fx_node_fix(targets = ["aten.alias.default"])]
//! fn fix_alias(graph: &Graph, node: NodeId) -> Result<bool> {
//!     graph.forward_input(node, "self")?;
//!     Ok(true)
//! }
//! ```
//!
//! The attribute generates the world's `Guest` implementation, its export,
//! `describe()` and the `hfx:plugin-meta` custom section from which the host
//! learns kind, contract version, name, version (the crate's) and targets
//! without running the plugin. One attribute per kind: [`fx_node_fix`],
//! [`fx_program_fix`], [`patch`], [`onnx_translation`] (or the table
//! [`onnx_translations!`], one line per op) and [`onnx_ir_fix`]. The crate
//! enables the SDK feature of the same kind (it selects the bindings); an
//! attribute of another kind does not compile.
//!
//! The bindings are wit-bindgen's, generated from `wit/0.2.0` (with the
//! interfaces it keeps from `wit/0.1.0`) and re-exported here unchanged, the
//! interfaces also under [`contract`]; [`helpers`] adds the common rewrites. The `register_*!`
//! macros remain for a plugin that writes `Guest` (and `describe`) itself; its
//! `plugin.toml` then states `kind` and `targets`, as the component carries no
//! `hfx:plugin-meta`.

#[cfg(any(
    all(
        feature = "fx-node-fix",
        any(
            feature = "fx-program-fix",
            feature = "patch",
            feature = "onnx-translation",
            feature = "onnx-ir-fix"
        )
    ),
    all(
        feature = "fx-program-fix",
        any(feature = "patch", feature = "onnx-translation", feature = "onnx-ir-fix")
    ),
    all(feature = "patch", any(feature = "onnx-translation", feature = "onnx-ir-fix")),
    all(feature = "onnx-translation", feature = "onnx-ir-fix"),
))]
compile_error!("hfx-sdk: enable exactly one plugin-kind feature (a component exports one world)");

#[cfg(not(any(
    feature = "fx-node-fix",
    feature = "fx-program-fix",
    feature = "patch",
    feature = "onnx-translation",
    feature = "onnx-ir-fix"
)))]
compile_error!("hfx-sdk: enable the feature of the plugin's kind: fx-node-fix, fx-program-fix, patch, onnx-translation or onnx-ir-fix");

macro_rules! bindings {
    ($feature:literal, $world:literal) => {
        #[cfg(feature = $feature)]
        mod bindings {
        wit_bindgen::generate!({
            path: ["../wit/0.1.0", "../wit/0.2.0"],
            world: $world,
            generate_all,
            pub_export_macro: true,
            export_macro_name: "export_plugin",
            default_bindings_module: "hfx_sdk",
            // Plugins compare shapes, arguments and metadata.
            additional_derives: [PartialEq],
        });
        }
    };
}

bindings!("fx-node-fix", "hfx:plugin/fx-node-fix@0.2.0");
bindings!("fx-program-fix", "hfx:plugin/fx-program-fix@0.2.0");
bindings!("patch", "hfx:plugin/patch@0.2.0");
bindings!("onnx-translation", "hfx:plugin/onnx-translation@0.2.0");
bindings!("onnx-ir-fix", "hfx:plugin/onnx-ir-fix@0.2.0");

pub use bindings::*;

/// The contract's interfaces under version-neutral names: `types`, `graph`
/// and `patching` are 0.1.0's (unchanged in 0.2.0), `onnx` is 0.2.0's.
pub mod contract {
    #[cfg(any(
        feature = "fx-node-fix",
        feature = "fx-program-fix",
        feature = "onnx-translation"
    ))]
    pub use crate::hfx::plugin0_1_0::graph;
    #[cfg(feature = "patch")]
    pub use crate::hfx::plugin0_1_0::patching;
    pub use crate::hfx::plugin0_1_0::types;
    #[cfg(any(feature = "onnx-translation", feature = "onnx-ir-fix"))]
    pub use crate::hfx::plugin0_2_0::onnx;
}

pub use hfx_sdk_macros::{
    fx_node_fix, fx_program_fix, onnx_ir_fix, onnx_translation, onnx_translations, patch,
};

pub mod helpers;
#[cfg(feature = "patch")]
pub mod program;
#[cfg(feature = "onnx-translation")]
pub mod translate;

/// Everything a plugin usually needs, in one import.
pub mod prelude {
    pub use crate::contract::types::*;
    pub use crate::helpers::*;
    pub use crate::Guest;

    /// `Result<T>` is `Result<T, Error>`, the contract's error.
    pub type Result<T, E = crate::contract::types::Error> = core::result::Result<T, E>;

    #[cfg(any(
        feature = "fx-node-fix",
        feature = "fx-program-fix",
        feature = "onnx-translation"
    ))]
    pub use crate::contract::graph::{
        Argument, Graph, NamedArgument, OutputDecl, RangeConstraint, Replacement, SymBool,
        SymFloat, SymInt,
    };
    #[cfg(any(feature = "onnx-translation", feature = "onnx-ir-fix"))]
    pub use crate::contract::onnx::{Attribute, Builder, Model, NamedAttribute, OnnxNodeId};
    #[cfg(feature = "onnx-ir-fix")]
    pub use crate::contract::onnx::{Constant, ConstantData, Dim as OnnxDim, ValueType};
    #[cfg(feature = "patch")]
    pub use crate::contract::patching::{
        CallValue, Callback, LiveTensor, ObjectValue, OpCall, PatchedCall, Program, Scalar, Slot,
        Step, SymValue, ValueCall,
    };
    #[cfg(feature = "patch")]
    pub use crate::program::*;
    #[cfg(feature = "onnx-translation")]
    pub use crate::translate::*;
}

// Low-level registration: a type implementing `Guest` itself, `describe`
// included. The component then carries no `hfx:plugin-meta`, so its
// `plugin.toml` states `kind`, `targets`, `name` and `version`. In-repo only
// the hostile `describe` test uses it; plugins use the attributes above.

/// Registers an FX node fix that implements [`Guest`] itself (prefer [`fx_node_fix`]).
#[cfg(feature = "fx-node-fix")]
#[macro_export]
macro_rules! register_fx_node_fix {
    ($fix:ident) => {
        $crate::export_plugin!($fix with_types_in $crate);
    };
}

/// Registers an FX program fix that implements [`Guest`] itself (prefer [`fx_program_fix`]).
#[cfg(feature = "fx-program-fix")]
#[macro_export]
macro_rules! register_fx_program_fix {
    ($fix:ident) => {
        $crate::export_plugin!($fix with_types_in $crate);
    };
}

/// Registers a trace-time patch that implements [`Guest`] itself (prefer [`patch`]).
#[cfg(feature = "patch")]
#[macro_export]
macro_rules! register_patch {
    ($patch:ident) => {
        $crate::export_plugin!($patch with_types_in $crate);
    };
}

/// Registers a translation that implements [`Guest`] itself (prefer [`onnx_translations!`]).
#[cfg(feature = "onnx-translation")]
#[macro_export]
macro_rules! register_onnx_translation {
    ($translation:ident) => {
        $crate::export_plugin!($translation with_types_in $crate);
    };
}

/// Registers an ONNX IR fix that implements [`Guest`] itself (prefer [`onnx_ir_fix`]).
#[cfg(feature = "onnx-ir-fix")]
#[macro_export]
macro_rules! register_onnx_ir_fix {
    ($fix:ident) => {
        $crate::export_plugin!($fix with_types_in $crate);
    };
}
