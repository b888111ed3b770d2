//! The worker protocol from one definition: the message types of
//! `host/src/trace/protocol.rs`, serde structs and enums as the host writes
//! and reads them, are read here (with syn) and written out as the worker's
//! Python (`hfx_worker/messages.py`); their canonical form (names, fields,
//! types, serde attributes and request methods, not their docs) is hashed
//! into `PROTOCOL`, the version both ends check at `hello`, written into both
//! files. `cargo run -p protocol-gen` rewrites them; a host unit test fails
//! while either is stale.
//!
//! A message is a struct or enum deriving `Serialize` or `Deserialize`; an
//! `impl Method for T` makes `T` a request (its name, its reply). In Python:
//! - a struct is a dataclass with the same fields (a field the host may leave
//!   out, `skip_serializing_if`, defaults to None), or a `TypedDict` where a
//!   field is named by a Python keyword (`import`);
//! - an enum of unit variants is a `Literal` of their names;
//! - an internally tagged enum (`tag = "kind"`) is a union of one dataclass
//!   per variant (`{Enum}{Variant}`), whose `kind` field is the variant's name;
//! - an externally tagged enum (`{"variant": payload}`) is a dataclass with one
//!   optional field per variant, exactly one present (`ONE_OF`);
//! - an untagged enum is the union of its payloads;
//! - a tuple is a list, `serde_json::Value` and the custom-serialized
//!   [`OPAQUE`] types are `Any`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use sha2::{Digest, Sha256};
use syn::{Attribute, Expr, ExprLit, Fields, GenericArgument, Lit, LitStr, PathArguments, Type};

/// The definition, from the repository's root.
pub const RUST: &str = "host/src/trace/protocol.rs";
/// The generated worker side, from the repository's root.
pub const PYTHON: &str = "host/worker/hfx_worker/messages.py";
/// What regenerates both.
pub const COMMAND: &str = "cargo run -p protocol-gen";

/// The line of [`RUST`] that holds the version (the number follows it).
const VERSION_LINE: &str = "pub const PROTOCOL: u64 = ";

/// Types the protocol uses that serde does not derive here: their Python form
/// and why.
pub const OPAQUE: &[(&str, &str, &str)] = &[
    ("Value", "Any", "any JSON, passed through"),
    ("WireScalar", "Any", "null, a bool, a number or a string (serialized by hand)"),
    ("Versions", "dict[str, str]", "package name to version"),
];

/// Both generated files and the version they carry.
#[derive(Debug)]
pub struct Generated {
    pub version: u64,
    /// [`RUST`] with its version line set.
    pub rust: String,
    /// [`PYTHON`].
    pub python: String,
}

/// The generated side of `rust` (the text of [`RUST`]).
pub fn generate(rust: &str) -> Result<Generated, String> {
    let file = syn::parse_file(rust).map_err(|e| format!("{RUST}: {e}"))?;
    let items = messages(&file)?;
    let version = version(&items);
    Ok(Generated { version, rust: with_version(rust, version)?, python: python(&items, version)? })
}

// ── The definition, read ──

/// A type as written: a path's last segment and its generic arguments, or a tuple.
#[derive(Debug, Clone)]
enum Ty {
    Path(String, Vec<Ty>),
    Tuple(Vec<Ty>),
}

/// `serde(...)` entries: key, and value where one is given.
type Serde = Vec<(String, Option<String>)>;

#[derive(Debug)]
struct Field {
    /// The wire name (after `rename`).
    name: String,
    ty: Ty,
    serde: Serde,
    docs: Vec<String>,
}

#[derive(Debug)]
enum Payload {
    Unit,
    Tuple(Vec<Ty>),
    Struct(Vec<Field>),
}

#[derive(Debug)]
struct Variant {
    rust: String,
    /// The wire name (after `rename_all` / `rename`).
    name: String,
    payload: Payload,
    docs: Vec<String>,
}

#[derive(Debug)]
enum Shape {
    Struct(Vec<Field>),
    Enum(Vec<Variant>),
}

#[derive(Debug)]
struct Item {
    name: String,
    /// `Serialize`, `Deserialize`: which way the message goes.
    derives: Vec<String>,
    serde: Serde,
    shape: Shape,
    /// A request: its method name and reply type.
    method: Option<(String, Ty)>,
    docs: Vec<String>,
}

impl Item {
    fn serde(&self, key: &str) -> Option<Option<&str>> {
        self.serde.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_deref())
    }
}

fn messages(file: &syn::File) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    for item in &file.items {
        let attrs: &[Attribute] = match item {
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            _ => &[],
        };
        let derives = derives(attrs)?;
        let (name, attrs, shape) = match item {
            _ if derives.is_empty() && !matches!(item, syn::Item::Impl(_)) => continue,
            syn::Item::Struct(s) => {
                if serde(&s.attrs)?.iter().any(|(k, _)| k == "rename_all") {
                    return Err(format!("{}: rename_all on a struct is not supported", s.ident));
                }
                (s.ident.to_string(), &s.attrs, Shape::Struct(fields(&s.fields)?))
            }
            syn::Item::Enum(e) => {
                let rename_all = serde(&e.attrs)?
                    .into_iter()
                    .find(|(k, _)| k == "rename_all")
                    .and_then(|(_, v)| v);
                let mut variants = Vec::new();
                for v in &e.variants {
                    let rust = v.ident.to_string();
                    let renamed = serde(&v.attrs)?.into_iter().find(|(k, _)| k == "rename");
                    let name = match (renamed, rename_all.as_deref()) {
                        (Some((_, Some(name))), _) => name,
                        (_, Some("snake_case")) => snake_case(&rust),
                        (_, None) => rust.clone(),
                        (_, Some(rule)) => {
                            return Err(format!(
                                "{}: rename_all = {rule:?} is not supported",
                                e.ident
                            ))
                        }
                    };
                    let payload = match &v.fields {
                        Fields::Unit => Payload::Unit,
                        Fields::Unnamed(u) => Payload::Tuple(
                            u.unnamed.iter().map(|f| ty(&f.ty)).collect::<Result<_, _>>()?,
                        ),
                        named @ Fields::Named(_) => Payload::Struct(fields(named)?),
                    };
                    variants.push(Variant { rust, name, payload, docs: docs(&v.attrs) });
                }
                (e.ident.to_string(), &e.attrs, Shape::Enum(variants))
            }
            syn::Item::Impl(i) => {
                let is_method = i
                    .trait_
                    .as_ref()
                    .is_some_and(|(_, path, _)| path.segments.last().unwrap().ident == "Method");
                if is_method {
                    let Type::Path(target) = &*i.self_ty else {
                        return Err("an `impl Method` for a type that is not a path".into());
                    };
                    let target = target.path.segments.last().unwrap().ident.to_string();
                    let (method, reply) = method(i).ok_or_else(|| {
                        format!("impl Method for {target}: no `NAME` string or `Reply` type")
                    })?;
                    let item = items
                        .iter_mut()
                        .find(|item: &&mut Item| item.name == target)
                        .ok_or_else(|| format!("impl Method for {target}: not a message above"))?;
                    item.method = Some((method, ty(reply)?));
                }
                continue;
            }
            _ => continue,
        };
        items.push(Item {
            name,
            derives,
            serde: serde(attrs)?,
            shape,
            method: None,
            docs: docs(attrs),
        });
    }
    Ok(items)
}

fn method(i: &syn::ItemImpl) -> Option<(String, &Type)> {
    let mut name = None;
    let mut reply = None;
    for item in &i.items {
        match item {
            syn::ImplItem::Const(c) if c.ident == "NAME" => {
                if let Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) = &c.expr {
                    name = Some(s.value());
                }
            }
            syn::ImplItem::Type(t) if t.ident == "Reply" => reply = Some(&t.ty),
            _ => {}
        }
    }
    Some((name?, reply?))
}

fn fields(fields: &Fields) -> Result<Vec<Field>, String> {
    let Fields::Named(named) = fields else {
        return Err(
            "a message struct with unnamed fields (serialize it by hand, as WireScalar)".into()
        );
    };
    named
        .named
        .iter()
        .map(|f| {
            let serde = serde(&f.attrs)?;
            let rust = f.ident.as_ref().unwrap().to_string();
            let name = serde
                .iter()
                .find(|(k, _)| k == "rename")
                .and_then(|(_, v)| v.clone())
                .unwrap_or(rust);
            Ok(Field { name, ty: ty(&f.ty)?, serde, docs: docs(&f.attrs) })
        })
        .collect()
}

fn ty(t: &Type) -> Result<Ty, String> {
    match t {
        Type::Path(p) => {
            let last = p.path.segments.last().ok_or("an empty type path")?;
            let args = match &last.arguments {
                PathArguments::None => Vec::new(),
                PathArguments::AngleBracketed(a) => a
                    .args
                    .iter()
                    .map(|arg| match arg {
                        GenericArgument::Type(t) => ty(t),
                        _ => Err(format!("{}: only type arguments are supported", last.ident)),
                    })
                    .collect::<Result<_, _>>()?,
                PathArguments::Parenthesized(_) => {
                    return Err(format!("{}: a function type", last.ident))
                }
            };
            Ok(Ty::Path(last.ident.to_string(), args))
        }
        Type::Tuple(t) => Ok(Ty::Tuple(t.elems.iter().map(ty).collect::<Result<_, _>>()?)),
        _ => Err("a message field's type is a path or a tuple".into()),
    }
}

fn derives(attrs: &[Attribute]) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        attr.parse_nested_meta(|meta| {
            let name = meta.path.segments.last().unwrap().ident.to_string();
            if name == "Serialize" || name == "Deserialize" {
                found.push(name);
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    }
    Ok(found)
}

fn serde(attrs: &[Attribute]) -> Result<Serde, String> {
    let mut found = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.parse_nested_meta(|meta| {
            let key = meta.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
            let value = if meta.input.peek(syn::Token![=]) {
                Some(meta.value()?.parse::<LitStr>()?.value())
            } else {
                None
            };
            found.push((key, value));
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    }
    Ok(found)
}

fn docs(attrs: &[Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .map(|line| line.strip_prefix(' ').unwrap_or(&line).trim_end().to_string())
        .collect()
}

fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.extend(c.to_lowercase());
    }
    out
}

// ── The version ──

/// The canonical form: one line per message, docs left out.
fn canonical(items: &[Item]) -> String {
    fn ty_text(t: &Ty) -> String {
        match t {
            Ty::Path(name, args) if args.is_empty() => name.clone(),
            Ty::Path(name, args) => {
                format!("{name}<{}>", args.iter().map(ty_text).collect::<Vec<_>>().join(","))
            }
            Ty::Tuple(elems) => {
                format!("({})", elems.iter().map(ty_text).collect::<Vec<_>>().join(","))
            }
        }
    }
    fn serde_text(serde: &Serde) -> String {
        let entries: Vec<String> = serde
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v:?}"),
                None => k.clone(),
            })
            .collect();
        format!("[{}]", entries.join(","))
    }
    fn fields_text(fields: &[Field]) -> String {
        let fields: Vec<String> = fields
            .iter()
            .map(|f| format!("{}:{}{}", f.name, ty_text(&f.ty), serde_text(&f.serde)))
            .collect();
        format!("{{{}}}", fields.join(";"))
    }
    let mut out = String::new();
    for item in items {
        let shape = match &item.shape {
            Shape::Struct(fields) => format!("struct{}", fields_text(fields)),
            Shape::Enum(variants) => {
                let variants: Vec<String> = variants
                    .iter()
                    .map(|v| match &v.payload {
                        Payload::Unit => v.name.clone(),
                        Payload::Tuple(elems) => {
                            format!("{}{}", v.name, ty_text(&Ty::Tuple(elems.clone())))
                        }
                        Payload::Struct(fields) => format!("{}{}", v.name, fields_text(fields)),
                    })
                    .collect();
                format!("enum{{{}}}", variants.join("|"))
            }
        };
        let method = match &item.method {
            Some((name, reply)) => format!(" method {name} -> {}", ty_text(reply)),
            None => String::new(),
        };
        writeln!(
            out,
            "{} {}{} {shape}{method}",
            item.name,
            item.derives.join("+"),
            serde_text(&item.serde)
        )
        .unwrap();
    }
    out
}

/// The first 32 bits of the canonical form's SHA-256.
fn version(items: &[Item]) -> u64 {
    let digest = Sha256::digest(canonical(items).as_bytes());
    u64::from(u32::from_be_bytes(digest[..4].try_into().unwrap()))
}

fn with_version(rust: &str, version: u64) -> Result<String, String> {
    let mut found = 0;
    let mut out = String::with_capacity(rust.len());
    for line in rust.split_inclusive('\n') {
        if line.starts_with(VERSION_LINE) {
            found += 1;
            writeln!(out, "{VERSION_LINE}{version};").unwrap();
        } else {
            out.push_str(line);
        }
    }
    match found {
        1 => Ok(out),
        n => Err(format!("{RUST}: {n} lines start with `{VERSION_LINE}`, expected one")),
    }
}

// ── The Python ──

/// Python's keywords (a field named by one cannot be a dataclass field).
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

const HEADER: &str = r#"# @generated by tools/protocol-gen from host/src/trace/protocol.rs: do not edit.
# `cargo run -p protocol-gen` rewrites it; `cargo test --lib trace::protocol` fails while it is stale.
"""The protocol's messages, from the host's `trace::protocol` types: a struct
is a dataclass (a `TypedDict` where a field is a Python keyword), an enum of
names a `Literal`, an enum tagged by `kind` a union of one dataclass per
variant, an enum written `{"variant": payload}` a dataclass of which exactly
one field is present (`ONE_OF`). `protocol.parse` reads a message and
refuses what its type does not allow; `PROTOCOL` is the definition's hash."""

from __future__ import annotations
"#;

struct Python<'a> {
    items: &'a [Item],
    out: String,
    /// Names the module has defined so far (for aliases evaluated at import).
    defined: BTreeSet<String>,
    /// Aliases waiting for a name they use: (the names, the text).
    pending: Vec<(Vec<String>, String)>,
    imports: BTreeSet<(&'static str, &'static str)>,
}

fn python(items: &[Item], version: u64) -> Result<String, String> {
    let mut py = Python {
        items,
        out: String::new(),
        defined: BTreeSet::new(),
        pending: Vec::new(),
        imports: BTreeSet::new(),
    };
    writeln!(
        py.out,
        "\n# The hash of the definition's canonical form; both ends check it at `hello`."
    )
    .unwrap();
    writeln!(py.out, "PROTOCOL = {version}").unwrap();
    for item in items {
        py.item(item)?;
        py.flush_pending();
    }
    if let Some((names, _)) = py.pending.first() {
        return Err(format!("a union uses {names:?}, not all of them messages"));
    }
    let mut imports = String::new();
    let modules: BTreeSet<&str> = py.imports.iter().map(|(m, _)| *m).collect();
    for module in modules {
        let names: Vec<&str> =
            py.imports.iter().filter(|(m, _)| *m == module).map(|(_, n)| *n).collect();
        writeln!(imports, "from {module} import {}", names.join(", ")).unwrap();
    }
    Ok(format!("{HEADER}\n{imports}{}", py.out))
}

impl Python<'_> {
    fn import(&mut self, module: &'static str, name: &'static str) {
        self.imports.insert((module, name));
    }

    /// The Python type of `t`, and the messages it names.
    fn ty(&mut self, t: &Ty, names: &mut Vec<String>) -> Result<String, String> {
        let Ty::Path(name, args) = t else {
            self.import("typing", "Any");
            return Ok("list[Any]".into());
        };
        let mut arg = |py: &mut Self, i: usize| match args.get(i) {
            Some(a) => py.ty(a, names),
            None => Err(format!("{name} needs a type argument")),
        };
        Ok(match name.as_str() {
            "String" | "PathBuf" => "str".into(),
            "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" => "int".into(),
            "f32" | "f64" => "float".into(),
            "bool" => "bool".into(),
            "Option" => format!("{} | None", arg(self, 0)?),
            "Vec" => format!("list[{}]", arg(self, 0)?),
            "BTreeMap" | "HashMap" | "Map" => format!("dict[{}, {}]", arg(self, 0)?, arg(self, 1)?),
            other => match OPAQUE.iter().find(|(rust, _, _)| *rust == other) {
                Some((_, python, _)) => {
                    if python.contains("Any") {
                        self.import("typing", "Any");
                    }
                    python.to_string()
                }
                None if self.items.iter().any(|i| i.name == other) => {
                    names.push(other.to_string());
                    other.to_string()
                }
                None => return Err(format!("`{other}` is neither a message nor in OPAQUE")),
            },
        })
    }

    fn comments(&mut self, docs: &[String], indent: &str) {
        for line in docs {
            if line.is_empty() {
                writeln!(self.out, "{indent}#").unwrap();
            } else {
                writeln!(self.out, "{indent}# {line}").unwrap();
            }
        }
    }

    fn docstring(&mut self, docs: &[String]) {
        if docs.is_empty() {
            return;
        }
        let text = docs.join("\n").replace('\\', "\\\\").replace("\"\"\"", "\\\"\\\"\\\"");
        let indented: Vec<String> = text
            .lines()
            .enumerate()
            .map(|(i, l)| if i == 0 || l.is_empty() { l.to_string() } else { format!("    {l}") })
            .collect();
        writeln!(self.out, "    \"\"\"{}\"\"\"\n", indented.join("\n")).unwrap();
    }

    fn item(&mut self, item: &Item) -> Result<(), String> {
        match &item.shape {
            Shape::Struct(fields) => {
                let name = item.method.as_ref().map(|(m, _)| format!("`{m}` request"));
                self.class(&item.name, &item.docs, name.as_deref(), fields, None)
            }
            Shape::Enum(variants)
                if variants.iter().all(|v| matches!(v.payload, Payload::Unit)) =>
            {
                self.import("typing", "Literal");
                let names: Vec<String> = variants.iter().map(|v| format!("{:?}", v.name)).collect();
                self.out.push_str("\n\n");
                self.comments(&item.docs, "");
                self.alias(&item.name, &format!("Literal[{}]", names.join(", ")), "[", "]", ", ");
                Ok(())
            }
            Shape::Enum(variants) => {
                if let Some(Some(tag)) = item.serde("tag") {
                    let mut classes = Vec::new();
                    for v in variants {
                        let class = format!("{}{}", item.name, v.rust);
                        let fields = match &v.payload {
                            Payload::Unit => &[][..],
                            Payload::Struct(fields) => fields,
                            Payload::Tuple(_) => {
                                return Err(format!("{class}: a tagged variant holds named fields"))
                            }
                        };
                        let name = format!("`{}` {}", v.name, item.name);
                        self.class(&class, &v.docs, Some(&name), fields, Some((tag, &v.name)))?;
                        classes.push(class);
                    }
                    self.out.push_str("\n\n");
                    self.comments(&item.docs, "");
                    self.alias(&item.name, &classes.join(" | "), "", "", " | ");
                    Ok(())
                } else if item.serde("untagged").is_some() {
                    let mut names = Vec::new();
                    let mut options = Vec::new();
                    for v in variants {
                        match &v.payload {
                            Payload::Tuple(elems) if elems.len() == 1 => {
                                options.push(self.ty(&elems[0], &mut names)?)
                            }
                            _ => {
                                return Err(format!(
                                    "{}: an untagged variant holds one value",
                                    item.name
                                ))
                            }
                        }
                    }
                    let mut text = String::new();
                    for line in &item.docs {
                        writeln!(text, "# {line}").unwrap();
                    }
                    let alias = format!("\n\n{text}{} = {}\n", item.name, options.join(" | "));
                    self.pending.push((names, alias));
                    Ok(())
                } else {
                    self.one_of(item, variants)
                }
            }
        }
    }

    /// `name = <text>`, split as ruff formats a line over 100 columns.
    fn alias(&mut self, name: &str, text: &str, open: &str, close: &str, sep: &str) {
        let line = format!("{name} = {text}");
        if line.len() <= 100 {
            writeln!(self.out, "{line}").unwrap();
        } else if open.is_empty() {
            let parts: Vec<&str> = text.split(sep).collect();
            writeln!(
                self.out,
                "{name} = (\n    {}\n)",
                parts.join(&format!("\n    {}", sep.trim_start()))
            )
            .unwrap();
        } else {
            let (head, inner) = text.split_once(open).unwrap();
            let inner = inner.strip_suffix(close).unwrap();
            let parts: Vec<&str> = inner.split(sep).collect();
            writeln!(self.out, "{name} = {head}{open}\n    {},\n{close}", parts.join(",\n    "))
                .unwrap();
        }
        self.defined.insert(name.to_string());
    }

    fn flush_pending(&mut self) {
        let defined = &self.defined;
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(names, _)| names.iter().all(|n| defined.contains(n)));
        self.pending = waiting;
        for (_, text) in ready {
            self.out.push_str(&text);
        }
    }

    fn class(
        &mut self,
        class: &str,
        docs: &[String],
        name: Option<&str>,
        fields: &[Field],
        tag: Option<(&str, &str)>,
    ) -> Result<(), String> {
        if fields.iter().any(|f| KEYWORDS.contains(&f.name.as_str())) {
            return self.typed_dict(class, docs, fields);
        }
        self.import("dataclasses", "dataclass");
        self.out.push_str("\n\n@dataclass\n");
        writeln!(self.out, "class {class}:").unwrap();
        self.docstring(docs);
        if let Some(name) = name {
            self.import("typing", "ClassVar");
            writeln!(self.out, "    NAME: ClassVar[str] = {name:?}").unwrap();
        }
        let mut optional = false;
        for f in fields {
            let ty = self.ty(&f.ty, &mut Vec::new())?;
            self.comments(&f.docs, "    ");
            let may_be_absent = f.serde.iter().any(|(k, _)| k == "skip_serializing_if");
            if may_be_absent {
                optional = true;
                writeln!(self.out, "    {}: {ty} = None", f.name).unwrap();
            } else if optional {
                return Err(format!(
                    "{class}.{}: a field the host always sends follows one it may leave out",
                    f.name
                ));
            } else {
                writeln!(self.out, "    {}: {ty}", f.name).unwrap();
            }
        }
        if let Some((tag, value)) = tag {
            self.import("dataclasses", "field");
            writeln!(self.out, "    {tag}: str = field(default={value:?}, init=False)").unwrap();
        } else if fields.is_empty() && name.is_none() {
            writeln!(self.out, "    pass").unwrap();
        }
        self.defined.insert(class.to_string());
        Ok(())
    }

    fn typed_dict(&mut self, class: &str, docs: &[String], fields: &[Field]) -> Result<(), String> {
        self.import("typing", "TypedDict");
        let mut entries = Vec::new();
        for f in fields {
            if !f.docs.is_empty() {
                return Err(format!(
                    "{class}.{}: a TypedDict's field has no place for docs",
                    f.name
                ));
            }
            entries.push(format!("{:?}: {}", f.name, self.ty(&f.ty, &mut Vec::new())?));
        }
        self.out.push_str("\n\n");
        self.comments(docs, "");
        let entries = format!("{{{}}}", entries.join(", "));
        let line = format!("{class} = TypedDict({class:?}, {entries})");
        if line.len() <= 100 {
            writeln!(self.out, "{line}").unwrap();
        } else {
            writeln!(self.out, "{class} = TypedDict(\n    {class:?},\n    {entries},\n)").unwrap();
        }
        self.defined.insert(class.to_string());
        Ok(())
    }

    fn one_of(&mut self, item: &Item, variants: &[Variant]) -> Result<(), String> {
        // Struct variants first: their dataclasses are the fields' types.
        let mut types = Vec::new();
        for v in variants {
            let ty = match &v.payload {
                Payload::Unit => {
                    return Err(format!(
                        "{}::{}: a unit variant among variants with data",
                        item.name, v.rust
                    ))
                }
                Payload::Tuple(elems) if elems.len() == 1 => self.ty(&elems[0], &mut Vec::new())?,
                Payload::Tuple(elems) => self.ty(&Ty::Tuple(elems.clone()), &mut Vec::new())?,
                Payload::Struct(fields) => {
                    let class = format!("{}{}", item.name, v.rust);
                    self.class(&class, &[], None, fields, None)?;
                    class
                }
            };
            types.push(ty);
        }
        self.import("dataclasses", "dataclass");
        self.import("typing", "ClassVar");
        self.out.push_str("\n\n@dataclass\n");
        writeln!(self.out, "class {}:", item.name).unwrap();
        self.docstring(&item.docs);
        writeln!(self.out, "    ONE_OF: ClassVar[bool] = True").unwrap();
        for (v, ty) in variants.iter().zip(types) {
            self.comments(&v.docs, "    ");
            let ty = if ty.ends_with("| None") { ty } else { format!("{ty} | None") };
            writeln!(self.out, "    {}: {ty} = None", v.name).unwrap();
        }
        self.defined.insert(item.name.clone());
        Ok(())
    }
}
