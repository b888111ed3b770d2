//! The five plugin kinds as types. A loaded [`Plugin`] carries its kind as a
//! value (it comes from the component); [`Plugin::of_kind`] checks it once and
//! yields a [`PluginOf<K>`], the proof a [`Session<K>`](super::Session) is
//! built from. From there on the kind is a type: a session holds exactly the
//! instance of its kind's world and offers exactly that kind's call.

use wasmtime::Store;

use super::bindings::{fx_node_fix, fx_program_fix, onnx_ir_fix, onnx_translation, patch};
use super::manifest::PluginKind;
use super::runtime::{KindPre, Plugin};
use super::store::PluginState;

/// A plugin kind: its world's pre-linked component and instance, and the
/// `describe` every world exports.
pub trait Kind {
    const KIND: PluginKind;
    type Pre;
    type Instance;
    fn pre(pre: &KindPre) -> Option<&Self::Pre>;
    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<PluginState>,
    ) -> wasmtime::Result<Self::Instance>;
    fn describe(
        instance: &Self::Instance,
        store: &mut Store<PluginState>,
    ) -> wasmtime::Result<Vec<String>>;
}

macro_rules! kinds {
    ($($(#[$doc:meta])* $kind:ident => $module:ident :: $world:ident, $pre:ident;)*) => {
        $(
        $(#[$doc])*
        pub enum $kind {}

        impl Kind for $kind {
            const KIND: PluginKind = PluginKind::$kind;
            type Pre = $module::$pre<PluginState>;
            type Instance = $module::$world;
            fn pre(pre: &KindPre) -> Option<&Self::Pre> {
                match pre {
                    KindPre::$kind(p) => Some(p),
                    _ => None,
                }
            }
            fn instantiate(pre: &Self::Pre, store: &mut Store<PluginState>) -> wasmtime::Result<Self::Instance> {
                pre.instantiate(store)
            }
            fn describe(instance: &Self::Instance, store: &mut Store<PluginState>) -> wasmtime::Result<Vec<String>> {
                instance.call_describe(store)
            }
        }
    )*

        /// A plugin as its kind: one match covers every kind.
        pub enum Typed<'a> {
            $($kind(PluginOf<'a, $kind>),)*
        }

        impl Plugin {
            /// This plugin as the one kind it is.
            pub fn typed(&self) -> Typed<'_> {
                match &self.pre {
                    $(KindPre::$kind(pre) => Typed::$kind(PluginOf { plugin: self, pre }),)*
                }
            }
        }
    };
}

kinds! {
    /// Rewrites one FX node of a declared target.
    FxNodeFix => fx_node_fix::FxNodeFix, FxNodeFixPre;
    /// Repairs the whole program once (ranges, placeholder metadata).
    FxProgramFix => fx_program_fix::FxProgramFix, FxProgramFixPre;
    /// Answers a patched call at trace time with a straight-line program.
    Patch => patch::Patch, PatchPre;
    /// Translates FX nodes of declared targets into ONNX nodes.
    OnnxTranslation => onnx_translation::OnnxTranslation, OnnxTranslationPre;
    /// Repairs ONNX nodes of declared op types in the finished model.
    OnnxIrFix => onnx_ir_fix::OnnxIrFix, OnnxIrFixPre;
}

/// A plugin known to be of kind `K`.
pub struct PluginOf<'a, K: Kind> {
    pub plugin: &'a Plugin,
    pub(super) pre: &'a K::Pre,
}

impl<K: Kind> Clone for PluginOf<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K: Kind> Copy for PluginOf<'_, K> {}

impl<'a, K: Kind> std::ops::Deref for PluginOf<'a, K> {
    type Target = Plugin;
    fn deref(&self) -> &Plugin {
        self.plugin
    }
}

impl Plugin {
    /// This plugin as one of kind `K`, if it is one.
    pub fn of_kind<K: Kind>(&self) -> Option<PluginOf<'_, K>> {
        K::pre(&self.pre).map(|pre| PluginOf { plugin: self, pre })
    }
}
