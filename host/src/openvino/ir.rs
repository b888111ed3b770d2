//! The IR OpenVINO saved with its weights as inputs ([`super`]), rewritten
//! so it reads them as constants: each weight's `Parameter` becomes a
//! `Const` at the weight's bytes in the data file, which starts the `.bin`;
//! OpenVINO's own constants follow it, from `base` on. Everything else
//! passes through as OpenVINO wrote it.

use std::collections::HashMap;

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, Writer, XmlVersion};

/// An input of the saved IR (`name`) standing for the constant `constant`:
/// `size` bytes of the `.bin` from `offset` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightInput<'a> {
    pub name: &'a str,
    pub constant: &'a str,
    pub offset: u64,
    pub size: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum IrError {
    #[error("OpenVINO's IR is not XML hfx reads: {0}")]
    Xml(String),
    #[error("OpenVINO's IR: {0}")]
    Layout(String),
}

impl From<quick_xml::Error> for IrError {
    fn from(e: quick_xml::Error) -> IrError {
        IrError::Xml(e.to_string())
    }
}

impl From<quick_xml::events::attributes::AttrError> for IrError {
    fn from(e: quick_xml::events::attributes::AttrError) -> IrError {
        IrError::Xml(e.to_string())
    }
}

/// What a layer is to the rewrite.
enum Layer<'w> {
    /// A weight's input in the model's own graph: it becomes a constant.
    Weight(&'w WeightInput<'w>),
    /// A constant OpenVINO saved in its `.bin`: it moves by `base`.
    Const,
    Other,
}

/// `xml` (the IR OpenVINO saved) with each of `weights`' `Parameter`s a
/// `Const` at its bytes, which are in the first `base` bytes of the `.bin`,
/// and every other constant's offset moved on by `base`. Only the model's
/// own graph has the weights' inputs (an op's body graph binds its
/// `Parameter`s to the outer graph's values). Refuses an IR without every
/// weight's input, one whose bytes are not its element type and shape's or
/// lie past `base`, and one that names a weight on another layer.
pub fn weights_as_constants(
    xml: &[u8],
    weights: &[WeightInput],
    base: u64,
) -> Result<Vec<u8>, IrError> {
    let by_name: HashMap<&str, &WeightInput> = weights.iter().map(|w| (w.name, w)).collect();
    let mut reader = Reader::from_reader(xml);
    let mut writer = Writer::new(Vec::with_capacity(xml.len()));
    // The open elements' names, and the open layers' kinds.
    let mut open: Vec<String> = Vec::new();
    let mut layers: Vec<Layer> = Vec::new();
    let mut constants = 0;
    loop {
        let event = reader.read_event()?;
        match &event {
            Event::Start(e) | Event::Empty(e) => {
                let name = e.name().as_ref().to_string();
                let in_layer = open.last().is_some_and(|n| n == "layer");
                let rewritten = match (name.as_str(), layers.last()) {
                    ("layer", _) => {
                        let attrs = attributes(e)?;
                        let top_level = open.len() == 2 && open[0] == "net" && open[1] == "layers";
                        let layer_name = attrs.get("name").map(String::as_str).unwrap_or_default();
                        let layer = match attrs.get("type").map(String::as_str) {
                            Some("Parameter") if top_level => match by_name.get(layer_name) {
                                Some(weight) => Layer::Weight(weight),
                                None => Layer::Other,
                            },
                            Some("Const") => Layer::Const,
                            _ => Layer::Other,
                        };
                        let start = match layer {
                            Layer::Weight(weight) => Some(with_attributes(
                                e,
                                &[("type", "Const"), ("name", weight.constant)],
                            )?),
                            _ => None,
                        };
                        if matches!(event, Event::Start(_)) {
                            layers.push(layer);
                        }
                        start
                    }
                    ("data", Some(Layer::Weight(weight))) if in_layer => {
                        constants += 1;
                        Some(weight_data(&attributes(e)?, weight, base)?)
                    }
                    ("data", Some(Layer::Const)) if in_layer => Some(moved_data(e, base)?),
                    ("port", Some(Layer::Other)) if top_level_port(&open) => {
                        names_no_weight(e, &by_name)?;
                        None
                    }
                    _ => None,
                };
                if matches!(event, Event::Start(_)) {
                    open.push(name);
                }
                match (rewritten, &event) {
                    (Some(start), Event::Start(_)) => writer.write_event(Event::Start(start)),
                    (Some(start), _) => writer.write_event(Event::Empty(start)),
                    (None, _) => writer.write_event(event.borrow()),
                }
                .map_err(|e| IrError::Xml(e.to_string()))?;
                continue;
            }
            Event::End(e) => {
                if e.name().as_ref() == "layer" {
                    layers.pop();
                }
                open.pop();
            }
            Event::Eof => break,
            _ => {}
        }
        writer.write_event(event.borrow()).map_err(|e| IrError::Xml(e.to_string()))?;
    }
    if constants != weights.len() {
        return Err(IrError::Layout(format!(
            "{} of the {} weights' inputs are in its graph",
            constants,
            weights.len()
        )));
    }
    Ok(writer.into_inner())
}

/// Whether the open elements are a port list of a layer of the model's own graph.
fn top_level_port(open: &[String]) -> bool {
    matches!(open, [net, layers, layer, _] if net == "net" && layers == "layers" && layer == "layer")
}

/// An element's attributes, unescaped.
fn attributes(e: &BytesStart) -> Result<HashMap<String, String>, IrError> {
    let mut attrs = HashMap::new();
    for attr in e.attributes() {
        let attr = attr?;
        let key = attr.key.as_ref().to_string();
        attrs.insert(key, attr.normalized_value(XmlVersion::Implicit1_0)?.into_owned());
    }
    Ok(attrs)
}

/// `e` with each of its attributes `set` names set to the value given, its
/// others as they were.
fn with_attributes(e: &BytesStart, set: &[(&str, &str)]) -> Result<BytesStart<'static>, IrError> {
    let mut out = BytesStart::new(e.name().as_ref().to_string());
    for attr in e.attributes() {
        let attr = attr?;
        match set.iter().find(|(key, _)| *key == attr.key.as_ref()) {
            Some(&pair) => out.push_attribute(pair),
            None => out.push_attribute(attr),
        }
    }
    Ok(out)
}

/// Bits per element of the element types a weight may have, as OpenVINO's IR names them.
const ELEMENT_BITS: &[(&str, u64)] = &[
    ("f64", 64),
    ("f32", 32),
    ("f16", 16),
    ("bf16", 16),
    ("i64", 64),
    ("i32", 32),
    ("i16", 16),
    ("i8", 8),
    ("u64", 64),
    ("u32", 32),
    ("u16", 16),
    ("u8", 8),
    ("boolean", 8),
    ("i4", 4),
    ("u4", 4),
];

/// A weight's `Parameter` data (`shape`, `element_type`) as its `Const`'s,
/// if its bytes are as many as its shape holds, within the first `base`.
fn weight_data(
    attrs: &HashMap<String, String>,
    weight: &WeightInput,
    base: u64,
) -> Result<BytesStart<'static>, IrError> {
    let element_type = attrs.get("element_type").map(String::as_str).unwrap_or_default();
    let shape = attrs.get("shape").map(String::as_str).unwrap_or_default();
    let dims: Option<Vec<u64>> =
        shape.split(',').filter(|d| !d.trim().is_empty()).map(|d| d.trim().parse().ok()).collect();
    let bits = ELEMENT_BITS.iter().find(|(t, _)| *t == element_type).map(|(_, b)| *b);
    let bytes = dims.as_ref().zip(bits).and_then(|(dims, bits)| {
        dims.iter().try_fold(bits, |n, &d| n.checked_mul(d)).map(|b| b.div_ceil(8))
    });
    let within = weight.offset.checked_add(weight.size).is_some_and(|end| end <= base);
    if bytes != Some(weight.size) || !within {
        return Err(IrError::Layout(format!(
            "the input of weight `{}` is {element_type} [{shape}], which is not {} bytes at {} of the {base} bytes of weights",
            weight.name, weight.size, weight.offset
        )));
    }
    let shape = dims.unwrap_or_default().iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    Ok(BytesStart::new("data").with_attributes([
        ("element_type", element_type),
        ("shape", shape.as_str()),
        ("offset", weight.offset.to_string().as_str()),
        ("size", weight.size.to_string().as_str()),
    ]))
}

/// A constant's data with its `offset` moved on by `base`.
fn moved_data(e: &BytesStart, base: u64) -> Result<BytesStart<'static>, IrError> {
    let attrs = attributes(e)?;
    let Some(offset) = attrs.get("offset") else {
        return Ok(e.to_owned().into_owned());
    };
    let moved = offset
        .parse::<u64>()
        .ok()
        .and_then(|o| o.checked_add(base))
        .ok_or_else(|| IrError::Layout(format!("a constant's offset `{offset}`")))?;
    with_attributes(e, &[("offset", &moved.to_string())])
}

/// Refuses a port of another layer of the model's own graph that names a weight: an input OpenVINO
/// renamed would stay an input the IR's caller would have to feed.
fn names_no_weight(e: &BytesStart, weights: &HashMap<&str, &WeightInput>) -> Result<(), IrError> {
    let attrs = attributes(e)?;
    let Some(names) = attrs.get("names") else { return Ok(()) };
    match names.split(',').map(str::trim).find(|n| weights.contains_key(n)) {
        Some(name) => Err(IrError::Layout(format!(
            "weight `{name}` names the output of a layer that is not its input"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IR: &str = r#"<?xml version="1.0"?>
<net name="m" version="11">
	<layers>
		<layer id="0" name="input_ids" type="Parameter" version="opset1">
			<data shape="?,?" element_type="i64" />
			<output>
				<port id="0" precision="I64" names="input_ids">
					<dim>-1</dim>
					<dim>-1</dim>
				</port>
			</output>
		</layer>
		<layer id="1" name="hfx.weight.0" type="Parameter" version="opset1">
			<data shape="8,4" element_type="f32" />
			<output>
				<port id="0" precision="FP32" names="embed.weight">
					<dim>8</dim>
					<dim>4</dim>
				</port>
			</output>
		</layer>
		<layer id="2" name="Constant_18" type="Const" version="opset1">
			<data element_type="i64" shape="" offset="8" size="8" />
			<output>
				<port id="0" precision="I64" />
			</output>
		</layer>
		<layer id="3" name="gather" type="Gather" version="opset8">
			<data batch_dims="0" />
			<input>
				<port id="0" precision="FP32"><dim>8</dim><dim>4</dim></port>
				<port id="1" precision="I64"><dim>-1</dim><dim>-1</dim></port>
				<port id="2" precision="I64" />
			</input>
			<output>
				<port id="3" precision="FP32" names="gathered"><dim>-1</dim><dim>-1</dim><dim>4</dim></port>
			</output>
		</layer>
	</layers>
	<edges>
		<edge from-layer="1" from-port="0" to-layer="3" to-port="0" />
	</edges>
	<rt_info>
		<runtime_options><INFERENCE_PRECISION_HINT value="f32" /></runtime_options>
	</rt_info>
</net>
"#;

    fn weight() -> WeightInput<'static> {
        WeightInput { name: "hfx.weight.0", constant: "embed.weight", offset: 64, size: 128 }
    }

    #[test]
    fn a_weights_input_becomes_a_constant_at_its_bytes_and_openvinos_constants_move_past_them() {
        let xml = weights_as_constants(IR.as_bytes(), &[weight()], 4096).unwrap();
        let xml = String::from_utf8(xml).unwrap();
        assert!(
            xml.contains(r#"<layer id="1" name="embed.weight" type="Const" version="opset1">"#),
            "{xml}"
        );
        assert!(
            xml.contains(r#"<data element_type="f32" shape="8, 4" offset="64" size="128"/>"#),
            "{xml}"
        );
        assert!(
            xml.contains(r#"<data element_type="i64" shape="" offset="4104" size="8"/>"#),
            "{xml}"
        );
        // The model's own input, the edges and the model's rt_info are as they were.
        assert!(
            xml.contains(r#"<layer id="0" name="input_ids" type="Parameter" version="opset1">"#)
        );
        assert!(xml.contains(r#"<edge from-layer="1" from-port="0" to-layer="3" to-port="0" />"#));
        assert!(xml.contains(r#"<INFERENCE_PRECISION_HINT value="f32" />"#));
        assert_eq!(xml.matches("<layer ").count(), 4);
    }

    #[test]
    fn an_input_that_is_not_its_weights_bytes_or_a_weight_named_elsewhere_is_refused() {
        let refused = |weights: &[WeightInput], base: u64| {
            weights_as_constants(IR.as_bytes(), weights, base).unwrap_err().to_string()
        };
        let short = WeightInput { size: 64, ..weight() };
        assert!(refused(&[short], 4096).contains("the input of weight `hfx.weight.0` is f32 [8,4], which is not 64 bytes at 64 of the 4096 bytes"));
        assert!(refused(&[weight()], 128).contains("which is not 128 bytes at 64 of the 128 bytes"));
        let missing = WeightInput { name: "hfx.weight.1", ..weight() };
        assert!(refused(&[weight(), missing], 4096)
            .contains("1 of the 2 weights' inputs are in its graph"));
        let renamed = WeightInput { name: "gathered", ..weight() };
        assert!(refused(&[renamed], 4096).contains("weight `gathered` names the output of a layer"));
        assert!(weights_as_constants(b"<net><layers><layer", &[weight()], 0).is_err());
    }
}
