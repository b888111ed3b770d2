//! The attribute macros of `hfx-sdk` (use them through `hfx_sdk::…`, never
//! from this crate): one per plugin kind, named after the reference's
//! decorators, and `onnx_translations!`, a translation table.
//!
//! Each turns one function (or one table) into the whole plugin: the world's
//! `Guest` implementation calling it, the export, `describe()` answering the
//! declared targets, and a custom section `hfx:plugin-meta` that tells the
//! host the plugin's kind, contract version, name, version and targets
//! without running it:
//!
//! ```text
//! {"api":"0.2","kind":"fx-node-fix","name":"onnx-fix-alias","version":"1.0.0","targets":["aten.alias.default"]}
//! ```
//!
//! (UTF-8 JSON, these five fields, in this order; name and version are the
//! crate's `package.name` / `package.version` unless `name = "…"` is given.)
//! So the kind is stated by the attribute's name, the targets by its
//! arguments, name and version by `Cargo.toml`, and `plugin.toml` keeps only
//! what the code cannot say (backend, order, upstream ranges, why).

use proc_macro::TokenStream;
use proc_macro2::{Literal, Span, TokenStream as Tokens};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Expr, ItemFn, LitStr, Token};

/// The custom section's name; the host reads it (`hfx::plugins::manifest::META_SECTION`).
const SECTION: &str = "hfx:plugin-meta";
/// The contract version the SDK's bindings are generated from (`wit/0.2.0`).
const API: &str = "0.2";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    FxNodeFix,
    FxProgramFix,
    Patch,
    OnnxTranslation,
    OnnxIrFix,
}

const KINDS: [Kind; 5] =
    [Kind::FxNodeFix, Kind::FxProgramFix, Kind::Patch, Kind::OnnxTranslation, Kind::OnnxIrFix];

impl Kind {
    /// The manifest / WIT name, which is also the SDK feature.
    fn name(self) -> &'static str {
        match self {
            Kind::FxNodeFix => "fx-node-fix",
            Kind::FxProgramFix => "fx-program-fix",
            Kind::Patch => "patch",
            Kind::OnnxTranslation => "onnx-translation",
            Kind::OnnxIrFix => "onnx-ir-fix",
        }
    }

    fn attribute(self) -> &'static str {
        match self {
            Kind::FxNodeFix => "#[hfx_sdk::fx_node_fix]",
            Kind::FxProgramFix => "#[hfx_sdk::fx_program_fix]",
            Kind::Patch => "#[hfx_sdk::patch]",
            Kind::OnnxTranslation => "#[hfx_sdk::onnx_translation] / hfx_sdk::onnx_translations!",
            Kind::OnnxIrFix => "#[hfx_sdk::onnx_ir_fix]",
        }
    }

    /// Whether hfx-sdk was built with this kind's feature (it forwards it here).
    fn enabled(self) -> bool {
        match self {
            Kind::FxNodeFix => cfg!(feature = "fx-node-fix"),
            Kind::FxProgramFix => cfg!(feature = "fx-program-fix"),
            Kind::Patch => cfg!(feature = "patch"),
            Kind::OnnxTranslation => cfg!(feature = "onnx-translation"),
            Kind::OnnxIrFix => cfg!(feature = "onnx-ir-fix"),
        }
    }

    /// Kinds dispatched per target need at least one.
    fn needs_targets(self) -> bool {
        self != Kind::FxProgramFix
    }

    /// The function's signature, for messages.
    fn signature(self) -> &'static str {
        match self {
            Kind::FxNodeFix => "fn(graph: &Graph, node: NodeId) -> Result<bool>",
            Kind::FxProgramFix => "fn(graph: &Graph) -> Result<()>",
            Kind::Patch => "fn(call: PatchedCall) -> Result<Program>",
            Kind::OnnxTranslation => {
                "fn(graph: &Graph, node: NodeId, builder: &Builder) -> Result<()>"
            }
            Kind::OnnxIrFix => "fn(model: &Model, node: OnnxNodeId) -> Result<bool>",
        }
    }

    fn arity(self) -> usize {
        match self {
            Kind::FxProgramFix | Kind::Patch => 1,
            Kind::FxNodeFix | Kind::OnnxIrFix => 2,
            Kind::OnnxTranslation => 3,
        }
    }
}

/// `#[hfx_sdk::fx_node_fix(targets = ["aten.alias.default"])]` on
/// `fn(graph: &Graph, node: NodeId) -> Result<bool>`: an FX node fix
/// (`@register_fx_node_fix`), called for each node of a declared target.
#[proc_macro_attribute]
pub fn fx_node_fix(args: TokenStream, item: TokenStream) -> TokenStream {
    plugin(Kind::FxNodeFix, args, item)
}

/// `#[hfx_sdk::fx_program_fix]` on `fn(graph: &Graph) -> Result<()>`: an FX
/// program fix (`@register_fx_program_fix`), called once per program.
#[proc_macro_attribute]
pub fn fx_program_fix(args: TokenStream, item: TokenStream) -> TokenStream {
    plugin(Kind::FxProgramFix, args, item)
}

/// `#[hfx_sdk::patch(targets = ["torch.roll"])]` on
/// `fn(call: PatchedCall) -> Result<Program>`: a trace-time patch
/// (`@register_patch`) of the dotted targets.
#[proc_macro_attribute]
pub fn patch(args: TokenStream, item: TokenStream) -> TokenStream {
    plugin(Kind::Patch, args, item)
}

/// `#[hfx_sdk::onnx_translation(targets = ["aten.relu.default"])]` on
/// `fn(graph: &Graph, node: NodeId, builder: &Builder) -> Result<()>`: one
/// translation for all its targets. For one function per op, see
/// `onnx_translations!`.
#[proc_macro_attribute]
pub fn onnx_translation(args: TokenStream, item: TokenStream) -> TokenStream {
    plugin(Kind::OnnxTranslation, args, item)
}

/// `#[hfx_sdk::onnx_ir_fix(targets = ["TopK"])]` on
/// `fn(model: &Model, node: OnnxNodeId) -> Result<bool>`: an ONNX IR fix
/// (an entry of `_IR_FIXES`), called for each node of a declared op type.
#[proc_macro_attribute]
pub fn onnx_ir_fix(args: TokenStream, item: TokenStream) -> TokenStream {
    plugin(Kind::OnnxIrFix, args, item)
}

/// A translation plugin as a table, one line per ATen op (the way
/// `_ONNX_TRANSLATION_TABLE` is one entry per op):
///
/// ```ignore
/// hfx_sdk::onnx_translations! {
///     "aten.relu.default" => |e| unary(e, "Relu"),
///     "aten.mm.default" => matmul,
/// }
/// ```
///
/// Each right-hand side is a function or closure `(&Emit) -> Result<()>`.
/// The table is the plugin's targets (describe and `hfx:plugin-meta`, in
/// table order) and its dispatch; a target listed twice does not compile.
/// Optionally `name = "…";` first, as for the attributes.
#[proc_macro]
pub fn onnx_translations(input: TokenStream) -> TokenStream {
    let table = syn::parse_macro_input!(input as Table);
    let kind = Kind::OnnxTranslation;
    if let Some(error) = wrong_kind(kind, Span::call_site()) {
        return error.into();
    }
    let targets: Vec<LitStr> = table.entries.iter().map(|(t, _)| t.clone()).collect();
    let meta = match meta_section(kind, table.name.as_ref(), &targets, Span::call_site()) {
        Ok(meta) => meta,
        Err(e) => return e.to_compile_error().into(),
    };
    let arms = table.entries.iter().map(|(target, function)| {
        quote_spanned! {function.span()=> #target => ::hfx_sdk::translate::__translate_with(&emit, #function), }
    });
    let describe = describe(&targets);
    quote! {
        const _: () = {
            #[doc(hidden)]
            pub struct __HfxPlugin;
            impl ::hfx_sdk::Guest for __HfxPlugin {
                #describe
                fn translate(
                    graph: &::hfx_sdk::prelude::Graph,
                    node: ::hfx_sdk::prelude::NodeId,
                    builder: &::hfx_sdk::prelude::Builder,
                ) -> ::core::result::Result<(), ::hfx_sdk::prelude::Error> {
                    let emit = ::hfx_sdk::translate::Emit::new(graph, node, builder);
                    let target = graph.target(node)?;
                    match target.as_str() {
                        #(#arms)*
                        _ => ::core::result::Result::Err(emit.fail(::std::format!("{target} is not translated by this plugin"))),
                    }
                }
            }
            ::hfx_sdk::export_plugin!(__HfxPlugin with_types_in ::hfx_sdk);
            #meta
        };
    }
    .into()
}

/// `targets = [...]` and `name = "..."`, in any order.
struct Args {
    targets: Vec<LitStr>,
    name: Option<LitStr>,
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = Args { targets: Vec::new(), name: None };
        let mut seen_targets = false;
        while !input.is_empty() {
            let key: syn::Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            match key.to_string().as_str() {
                "targets" if !seen_targets => {
                    let content;
                    syn::bracketed!(content in input);
                    let list = content.parse_terminated(|p| p.parse::<LitStr>(), Token![,])?;
                    args.targets = list.into_iter().collect();
                    seen_targets = true;
                }
                "name" if args.name.is_none() => args.name = Some(input.parse()?),
                "targets" | "name" => {
                    return Err(syn::Error::new(key.span(), format!("`{key}` is given twice")))
                }
                _ => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!(
                        "unknown argument `{key}` (expected `targets = [\"…\"]` or `name = \"…\"`)"
                    ),
                    ))
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(args)
    }
}

/// `[name = "…";] "target" => function, …`
struct Table {
    name: Option<LitStr>,
    entries: Vec<(LitStr, Expr)>,
}

impl Parse for Table {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut name = None;
        if input.peek(syn::Ident) {
            let key: syn::Ident = input.parse()?;
            if key != "name" {
                return Err(syn::Error::new(key.span(), "expected `\"aten.op.overload\" => function` entries (or `name = \"…\";` first)"));
            }
            input.parse::<Token![=]>()?;
            name = Some(input.parse()?);
            input.parse::<Token![;]>()?;
        }
        let mut entries = Vec::new();
        while !input.is_empty() {
            let target: LitStr = input.parse()?;
            input.parse::<Token![=>]>()?;
            let function: Expr = input.parse()?;
            entries.push((target, function));
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(Table { name, entries })
    }
}

fn plugin(kind: Kind, args: TokenStream, item: TokenStream) -> TokenStream {
    let args = syn::parse_macro_input!(args as Args);
    let function = syn::parse_macro_input!(item as ItemFn);
    match expand(kind, args, &function) {
        Ok(tokens) => tokens.into(),
        // The function stays, so one mistake is one error.
        Err(e) => {
            let e = e.to_compile_error();
            quote!(#function #e).into()
        }
    }
}

fn expand(kind: Kind, args: Args, function: &ItemFn) -> syn::Result<Tokens> {
    if let Some(error) = wrong_kind(kind, function.sig.ident.span()) {
        return Ok(quote!(#function #error));
    }
    if function.sig.inputs.len() != kind.arity()
        || function.sig.asyncness.is_some()
        || !function.sig.generics.params.is_empty()
    {
        return Err(syn::Error::new(
            function.sig.span(),
            format!("{} is applied to a function `{}`", kind.attribute(), kind.signature()),
        ));
    }
    let meta = meta_section(kind, args.name.as_ref(), &args.targets, function.sig.ident.span())?;
    let describe = describe(&args.targets);
    let f = &function.sig.ident;
    let call = |args: Tokens| quote_spanned!(function.sig.span()=> #f(#args));
    let export = match kind {
        Kind::FxNodeFix => {
            let call = call(quote!(graph, node));
            quote! {
                fn apply(graph: &::hfx_sdk::prelude::Graph, node: ::hfx_sdk::prelude::NodeId) -> ::core::result::Result<bool, ::hfx_sdk::prelude::Error> {
                    #call
                }
            }
        }
        Kind::FxProgramFix => {
            let call = call(quote!(graph));
            quote! {
                fn apply(graph: &::hfx_sdk::prelude::Graph) -> ::core::result::Result<(), ::hfx_sdk::prelude::Error> {
                    #call
                }
            }
        }
        Kind::Patch => {
            let call = call(quote!(call));
            quote! {
                fn apply(call: ::hfx_sdk::prelude::PatchedCall) -> ::core::result::Result<::hfx_sdk::prelude::Program, ::hfx_sdk::prelude::Error> {
                    #call
                }
            }
        }
        Kind::OnnxTranslation => {
            let call = call(quote!(graph, node, builder));
            quote! {
                fn translate(
                    graph: &::hfx_sdk::prelude::Graph,
                    node: ::hfx_sdk::prelude::NodeId,
                    builder: &::hfx_sdk::prelude::Builder,
                ) -> ::core::result::Result<(), ::hfx_sdk::prelude::Error> {
                    #call
                }
            }
        }
        Kind::OnnxIrFix => {
            let call = call(quote!(model, node));
            quote! {
                fn apply(model: &::hfx_sdk::prelude::Model, node: ::hfx_sdk::prelude::OnnxNodeId) -> ::core::result::Result<bool, ::hfx_sdk::prelude::Error> {
                    #call
                }
            }
        }
    };
    let targets = &args.targets;
    Ok(quote! {
        #function
        /// The targets the plugin's attribute declares: stated there once,
        /// readable here (a rewrite that must know which ops it also handles).
        #[allow(dead_code)]
        pub const TARGETS: &[&str] = &[#(#targets),*];
        const _: () = {
            #[doc(hidden)]
            pub struct __HfxPlugin;
            impl ::hfx_sdk::Guest for __HfxPlugin {
                #describe
                #export
            }
            ::hfx_sdk::export_plugin!(__HfxPlugin with_types_in ::hfx_sdk);
            #meta
        };
    })
}

/// A `compile_error!` when hfx-sdk's feature is not this kind: the kind is
/// stated by the attribute, and the feature (which selects the bindings) must
/// follow it.
fn wrong_kind(kind: Kind, span: Span) -> Option<Tokens> {
    if kind.enabled() {
        return None;
    }
    let enabled: Vec<&str> = KINDS.iter().filter(|k| k.enabled()).map(|k| k.name()).collect();
    let message = match enabled.as_slice() {
        [] => format!(
            "{} makes a `{}` plugin, but hfx-sdk is built without a kind feature: in Cargo.toml, `hfx-sdk = {{ workspace = true, features = [\"{}\"] }}`",
            kind.attribute(),
            kind.name(),
            kind.name()
        ),
        other => format!(
            "{} makes a `{}` plugin, but this crate enables hfx-sdk's `{}` feature: a plugin is one kind; in Cargo.toml, use `features = [\"{}\"]`",
            kind.attribute(),
            kind.name(),
            other.join("`, `"),
            kind.name()
        ),
    };
    Some(quote_spanned!(span=> ::core::compile_error!(#message);))
}

fn describe(targets: &[LitStr]) -> Tokens {
    quote! {
        fn describe() -> ::std::vec::Vec<::std::string::String> {
            ::std::vec![#(::std::string::String::from(#targets)),*]
        }
    }
}

/// The `hfx:plugin-meta` custom section, after checking the targets.
fn meta_section(
    kind: Kind,
    name: Option<&LitStr>,
    targets: &[LitStr],
    span: Span,
) -> syn::Result<Tokens> {
    if kind.needs_targets() && targets.is_empty() {
        return Err(syn::Error::new(
            span,
            format!(
                "a `{}` plugin is dispatched by target: declare them, `targets = [\"…\"]`",
                kind.name()
            ),
        ));
    }
    let mut seen: Vec<String> = Vec::new();
    for target in targets {
        let value = target.value();
        if value.trim().is_empty() || value.trim() != value {
            return Err(syn::Error::new(
                target.span(),
                "a target is a name without blanks around it",
            ));
        }
        if seen.contains(&value) {
            return Err(syn::Error::new(
                target.span(),
                format!("target `{value}` is declared twice"),
            ));
        }
        seen.push(value);
    }
    let env = |var: &str| {
        std::env::var(var).map_err(|_| {
            syn::Error::new(
                span,
                format!("{var} is not set: build plugins with cargo (`hfx plugins build`)"),
            )
        })
    };
    let name = match name {
        Some(name) => name.value(),
        None => env("CARGO_PKG_NAME")?,
    };
    let version = env("CARGO_PKG_VERSION")?;
    let list: Vec<String> = seen.iter().map(|t| json_string(t)).collect();
    let json = format!(
        "{{\"api\":{},\"kind\":{},\"name\":{},\"version\":{},\"targets\":[{}]}}",
        json_string(API),
        json_string(kind.name()),
        json_string(&name),
        json_string(&version),
        list.join(",")
    );
    let bytes = Literal::byte_string(json.as_bytes());
    let len = json.len();
    Ok(quote! {
        #[cfg(target_arch = "wasm32")]
        #[unsafe(link_section = #SECTION)]
        #[used]
        static __HFX_PLUGIN_META: [u8; #len] = *#bytes;
    })
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
