//! Host bindings of the `hfx:plugin` contract: one module per world of
//! 0.1.0, and [`v0_2`] for what 0.2.0 adds.
//!
//! The interfaces shared between worlds (`types`, `graph`, `onnx`) are generated
//! once, in the first world that uses them, and the other worlds reuse them
//! through `with`, so the host implements each interface exactly once. 0.2.0
//! keeps 0.1.0's `types`, `graph` and `patching` and its worlds' exports, and
//! replaces `onnx`: its module generates only that interface, whose resources
//! are the same host types as 0.1.0's, so one world's pre-linked component
//! serves both versions and a linker holding both `onnx` interfaces links
//! either (as Zed keeps one `bindgen!` per API track).

/// Host-side value behind the guest's `graph` handle: the graph itself lives in
/// the store data; the handle only marks the call it was lent for.
pub struct GraphRef;
/// Host-side value behind an ONNX `builder` handle.
pub struct BuilderRef;
/// Host-side value behind an ONNX `model` handle.
pub struct ModelRef;

/// What the interfaces that hold only types (`types`, `patching`) are linked
/// with: no part of the store at all.
pub struct NoState;
impl wasmtime::component::HasData for NoState {
    type Data<'a> = NoState;
}

pub mod fx_node_fix {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "hfx:plugin/fx-node-fix",
        imports: { default: trappable },
        with: { "hfx:plugin/graph.graph": super::GraphRef },
    });
}

pub mod fx_program_fix {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "hfx:plugin/fx-program-fix",
        imports: { default: trappable },
        with: {
            "hfx:plugin/types": super::fx_node_fix::hfx::plugin::types,
            "hfx:plugin/graph": super::fx_node_fix::hfx::plugin::graph,
        },
    });
}

pub mod onnx_translation {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "hfx:plugin/onnx-translation",
        imports: { default: trappable },
        with: {
            "hfx:plugin/types": super::fx_node_fix::hfx::plugin::types,
            "hfx:plugin/graph": super::fx_node_fix::hfx::plugin::graph,
            "hfx:plugin/onnx.builder": super::BuilderRef,
            "hfx:plugin/onnx.model": super::ModelRef,
        },
    });
}

pub mod onnx_ir_fix {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "hfx:plugin/onnx-ir-fix",
        imports: { default: trappable },
        with: {
            "hfx:plugin/types": super::fx_node_fix::hfx::plugin::types,
            "hfx:plugin/onnx": super::onnx_translation::hfx::plugin::onnx,
        },
    });
}

pub mod patch {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "hfx:plugin/patch",
        imports: { default: trappable },
        with: { "hfx:plugin/types": super::fx_node_fix::hfx::plugin::types },
    });
}

/// `hfx:plugin@0.2.0`: its `onnx` interface (the worlds' exports are 0.1.0's).
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: ["../wit/0.1.0", "../wit/0.2.0"],
        world: "hfx:plugin/onnx-ir-fix@0.2.0",
        imports: { default: trappable },
        with: {
            "hfx:plugin/types@0.1.0": super::fx_node_fix::hfx::plugin::types,
            "hfx:plugin/onnx@0.2.0.builder": super::BuilderRef,
            "hfx:plugin/onnx@0.2.0.model": super::ModelRef,
        },
    });
}

pub use fx_node_fix::hfx::plugin::{graph as wit_graph, types as wit_types};
pub use onnx_translation::hfx::plugin::onnx as wit_onnx;
pub use patch::hfx::plugin::patching as wit_patching;
pub use v0_2::hfx::plugin0_2_0::onnx as wit_onnx_v0_2;
