//! `--generation --genai`: the export folder is also an ONNX Runtime GenAI
//! package, which `onnxruntime_genai.Model(DIR)` loads. GenAI runs one
//! decoder for the prompt (past length 0) and for each new token, feeding its
//! `present` cache back as the next `past`: hfx's `decode` component exported
//! with a dynamic sequence axis (`--multi-token-decode`) is that model, as it
//! is. `genai_config.json` names its inputs and outputs as hfx wrote them
//! (GenAI takes the names from the config), the model's sizes from
//! `config.json` and the search defaults from `generation_config.json`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// The file GenAI reads a package from.
pub const CONFIG: &str = "genai_config.json";

/// The component GenAI runs.
pub const DECODER: &str = "decode";

/// `config.json`'s `model_type`s whose GenAI model type hfx writes (GenAI
/// knows more; these are the ones hfx's tests generate with), with that type.
const MODEL_TYPES: &[(&str, &str)] = &[
    ("llama", "llama"),
    ("mistral", "mistral"),
    ("qwen3", "qwen3"),
    ("phi3", "phi3"),
    ("gemma", "gemma"),
    ("gemma2", "gemma2"),
    ("gemma3_text", "gemma3_text"),
    ("olmo", "olmo"),
];

/// The decoder's inputs GenAI feeds, by GenAI's key, and the cache's names
/// (`%d` the layer) in hfx's decoder.
const INPUTS: &[&str] = &["input_ids", "attention_mask", "position_ids"];
const PAST: [(&str, &str); 2] = [
    ("past_key_names", "input.cache.layers.%d.keys"),
    ("past_value_names", "input.cache.layers.%d.values"),
];
const PRESENT: [(&str, &str); 2] = [
    ("present_key_names", "output.cache.layers.%d.keys"),
    ("present_value_names", "output.cache.layers.%d.values"),
];

/// Refuses captured components GenAI cannot run as one decoder: an
/// encoder-decoder's or a multimodal model's parts.
pub fn check_components<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let names: Vec<&str> = names.into_iter().collect();
    if names != ["prefill", DECODER] {
        bail!(
            "--genai: `generate` runs this model as {}, and ONNX Runtime GenAI runs a decoder-only model as one decoder: export it without --genai",
            names.join(" + ")
        );
    }
    Ok(())
}

/// The GenAI model type of the model whose `config.json` is in `folder`.
pub fn model_type(folder: &Path) -> Result<&'static str> {
    let config = read_json(&folder.join("config.json"))?;
    let model_type = config["model_type"].as_str().unwrap_or("");
    match MODEL_TYPES.iter().find(|(hf, _)| *hf == model_type) {
        Some((_, genai)) => Ok(genai),
        None => bail!(
            "--genai: no ONNX Runtime GenAI model type for model_type `{model_type}` ({}); hfx writes GenAI packages of {}: export it without --genai",
            config["architectures"][0].as_str().unwrap_or("no architecture named"),
            MODEL_TYPES.iter().map(|(hf, _)| *hf).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Writes `genai_config.json` into `folder`, which holds the model's
/// `config.json`, `generation_config.json` and the decoder `decoder_file`
/// (its inputs and outputs: `inputs`, `outputs`).
pub fn write_config(
    folder: &Path,
    decoder_file: &str,
    inputs: &[String],
    outputs: &[String],
) -> Result<()> {
    let model = read_json(&folder.join("config.json"))?;
    let generation = match folder.join("generation_config.json") {
        path if path.is_file() => read_json(&path)?,
        _ => json!({}),
    };
    let config = genai_config(&model, &generation, decoder_file, inputs, outputs)?;
    let text = serde_json::to_string_pretty(&config)? + "\n";
    crate::atomic::write_bytes_atomically(&folder.join(CONFIG), text.as_bytes())
        .with_context(|| format!("writing {CONFIG}"))
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))
}

/// The config's number `key`, or the error naming it.
fn size(config: &Value, key: &str) -> Result<u64> {
    config[key].as_u64().with_context(|| format!("config.json has no `{key}`"))
}

/// `genai_config.json` for the model `config` (`config.json`) with its
/// `generation` config, whose decoder `decoder_file` has these `inputs` and
/// `outputs`; an input GenAI does not feed, or a cache not named per layer as
/// GenAI expects, is an error naming it.
fn genai_config(
    config: &Value,
    generation: &Value,
    decoder_file: &str,
    inputs: &[String],
    outputs: &[String],
) -> Result<Value> {
    let model_type = config["model_type"].as_str().unwrap_or("");
    let genai_type = MODEL_TYPES
        .iter()
        .find(|(hf, _)| *hf == model_type)
        .map(|(_, genai)| *genai)
        .with_context(|| format!("no GenAI model type for `{model_type}`"))?;
    let layers = size(config, "num_hidden_layers")?;
    let hidden = size(config, "hidden_size")?;
    let heads = size(config, "num_attention_heads")?;
    let kv_heads = config["num_key_value_heads"].as_u64().unwrap_or(heads);
    let head_size = config["head_dim"].as_u64().unwrap_or(hidden / heads);
    let context = size(config, "max_position_embeddings")?;

    let cache: Vec<String> = (0..layers)
        .flat_map(|i| PAST.iter().map(move |(_, pattern)| pattern.replace("%d", &i.to_string())))
        .collect();
    let mut names = serde_json::Map::new();
    for input in inputs {
        if INPUTS.contains(&input.as_str()) {
            names.insert(input.clone(), json!(input));
        } else if !cache.contains(input) {
            bail!("--genai: the decoder takes `{input}`, which ONNX Runtime GenAI does not feed (it feeds {}, and the cache per layer)", INPUTS.join(", "));
        }
    }
    if !names.contains_key("input_ids") {
        bail!("--genai: the decoder takes no `input_ids`, and ONNX Runtime GenAI feeds token ids");
    }
    let present: Vec<String> = (0..layers)
        .flat_map(|i| PRESENT.iter().map(move |(_, pattern)| pattern.replace("%d", &i.to_string())))
        .collect();
    for (expected, given) in [(&cache, inputs), (&present, outputs)] {
        if let Some(missing) = expected.iter().find(|n| !given.contains(n)) {
            bail!("--genai: the decoder has no `{missing}`: ONNX Runtime GenAI needs each of the {layers} layers' keys and values as a past input and a present output");
        }
    }
    if !outputs.iter().any(|o| o == "logits") {
        bail!("--genai: the decoder has no `logits` output");
    }
    for (key, pattern) in PAST {
        names.insert(key.into(), json!(pattern));
    }
    let mut output_names = serde_json::Map::from_iter([("logits".to_string(), json!("logits"))]);
    for (key, pattern) in PRESENT {
        output_names.insert(key.into(), json!(pattern));
    }

    // A token id from generation_config.json, else config.json; eos may be a list.
    let token = |key: &str| -> Value {
        match &generation[key] {
            Value::Null => config[key].clone(),
            given => given.clone(),
        }
    };
    let eos = match token("eos_token_id") {
        Value::Array(ids) => Value::Array(ids),
        Value::Null => json!([]),
        id => json!([id]),
    };
    // GenAI pads a batch with `pad_token_id`; a model without one pads with its end token.
    let pad = match token("pad_token_id") {
        Value::Null => eos.get(0).cloned().unwrap_or(json!(0)),
        id => id,
    };
    let vocab = size(config, "vocab_size")?;
    let bos = token("bos_token_id");
    // The end tokens first: a missing pad token is the first of them.
    let ids = [("bos_token_id", &bos), ("pad_token_id", &pad)];
    let eos_ids = eos.as_array().into_iter().flatten().map(|id| ("eos_token_id", id));
    for (key, id) in eos_ids.chain(ids) {
        if !id.is_null() && id.as_u64().is_none_or(|id| id >= vocab) {
            bail!("--genai: {key} {id} is not a token of the model's vocabulary (vocab_size {vocab}), and ONNX Runtime GenAI refuses it: set it in config.json or generation_config.json");
        }
    }
    let search_value = |key: &str, default: Value| -> Value {
        match &generation[key] {
            Value::Null => default,
            given => given.clone(),
        }
    };
    let mut genai = json!({
        "model": {
            "type": genai_type,
            "context_length": context,
            "vocab_size": vocab,
            "bos_token_id": bos,
            "eos_token_id": eos,
            "pad_token_id": pad,
            "decoder": {
                "filename": decoder_file,
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "head_size": head_size,
                "hidden_size": hidden,
                "num_attention_heads": heads,
                "num_key_value_heads": kv_heads,
                "num_hidden_layers": layers,
                "inputs": names,
                "outputs": output_names,
            },
        },
        "search": {
            "max_length": context,
            "min_length": 0,
            "do_sample": search_value("do_sample", json!(false)),
            "num_beams": search_value("num_beams", json!(1)),
            "num_return_sequences": search_value("num_return_sequences", json!(1)),
            "temperature": search_value("temperature", json!(1.0)),
            "top_k": search_value("top_k", json!(50)),
            "top_p": search_value("top_p", json!(1.0)),
            "repetition_penalty": search_value("repetition_penalty", json!(1.0)),
            "length_penalty": search_value("length_penalty", json!(1.0)),
            "no_repeat_ngram_size": search_value("no_repeat_ngram_size", json!(0)),
            "early_stopping": true,
            // hfx's decoder returns the cache grown by the new tokens, a new tensor.
            "past_present_share_buffer": false,
        },
    });
    // GenAI reads a token id given as a number; a model without a start token has none.
    if genai["model"]["bos_token_id"].is_null() {
        genai["model"].as_object_mut().map(|m| m.remove("bos_token_id"));
    }
    Ok(genai)
}

/// A sliding-window cache layer's window, which transformers keeps as a
/// tensor of the cache (`_sliding_window_tensor`, `config.sliding_window`) and
/// the decoder takes as an input that GenAI does not feed.
const WINDOW_INPUT: &str = "._sliding_window_tensor";

/// Fits the decoder at `path` for GenAI and returns its graph inputs and
/// outputs by name: a sliding window's input becomes a constant of the graph
/// (the value of `config.json`'s `sliding_window`, in `folder`). ONNX
/// Runtime's callers bind the inputs the session takes, so the component
/// still runs as the reference runs it.
pub fn fit_decoder(path: &Path, folder: &Path) -> Result<(Vec<String>, Vec<String>)> {
    use crate::onnx::proto as p;
    use prost::Message;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut model = p::ModelProto::decode(bytes.as_slice())
        .with_context(|| format!("parsing {}", path.display()))?;
    let graph = model.graph.get_or_insert_with(Default::default);
    let (windows, inputs): (Vec<_>, Vec<_>) = std::mem::take(&mut graph.input)
        .into_iter()
        .partition(|v| v.name.as_deref().is_some_and(|n| n.ends_with(WINDOW_INPUT)));
    graph.input = inputs;
    if !windows.is_empty() {
        let config = read_json(&folder.join("config.json"))?;
        let window = config["sliding_window"].as_i64().context(
            "--genai: the decoder takes a sliding window, and config.json has no `sliding_window`",
        )?;
        for input in windows {
            let data_type = match input.r#type.and_then(|t| t.value) {
                Some(p::type_proto::Value::TensorType(t)) => t.elem_type,
                _ => None,
            };
            // transformers keeps the window as a `torch.long` scalar.
            if data_type != Some(p::tensor_proto::DataType::Int64 as i32) {
                bail!("--genai: the decoder's sliding window input is not an int64 scalar");
            }
            graph.initializer.push(p::TensorProto {
                name: input.name,
                data_type,
                int64_data: vec![window],
                ..Default::default()
            });
        }
        crate::atomic::write_bytes_atomically(path, &model.encode_to_vec())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let graph = model.graph.unwrap_or_default();
    let names = |values: Vec<p::ValueInfoProto>| {
        values.into_iter().filter_map(|v| v.name).collect::<Vec<_>>()
    };
    Ok((names(graph.input), names(graph.output)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// A two-layer decoder's inputs and outputs as hfx names them.
    fn decoder_io(extra_input: Option<&str>) -> (Vec<String>, Vec<String>) {
        let mut inputs = names(&["input_ids", "attention_mask"]);
        inputs.extend(extra_input.map(String::from));
        let mut outputs = names(&["logits"]);
        for i in 0..2 {
            for kind in ["keys", "values"] {
                inputs.push(format!("input.cache.layers.{i}.{kind}"));
                outputs.push(format!("output.cache.layers.{i}.{kind}"));
            }
        }
        (inputs, outputs)
    }

    fn llama() -> Value {
        json!({"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "num_attention_heads": 4,
               "num_hidden_layers": 2, "max_position_embeddings": 64, "eos_token_id": 2})
    }

    #[test]
    fn the_config_names_hfx_decoder_io_and_takes_the_generation_defaults() {
        let (inputs, outputs) = decoder_io(None);
        let generation = json!({"eos_token_id": [2, 5], "do_sample": true, "top_k": 20});
        let config = genai_config(&llama(), &generation, "decode.onnx", &inputs, &outputs).unwrap();
        let model = &config["model"];
        assert_eq!(model["type"], "llama");
        assert_eq!(model["context_length"], 64);
        assert_eq!(model["eos_token_id"], json!([2, 5]));
        // No pad token: GenAI pads with the end token; no start token: none written.
        assert_eq!(model["pad_token_id"], 2);
        assert!(model.get("bos_token_id").is_none());
        let decoder = &model["decoder"];
        assert_eq!(decoder["filename"], "decode.onnx");
        // Sizes the config leaves out: head size and key/value heads from the attention heads.
        assert_eq!(decoder["head_size"], 8);
        assert_eq!(decoder["num_key_value_heads"], 4);
        assert_eq!(
            decoder["inputs"],
            json!({"input_ids": "input_ids", "attention_mask": "attention_mask",
                   "past_key_names": "input.cache.layers.%d.keys",
                   "past_value_names": "input.cache.layers.%d.values"})
        );
        assert_eq!(decoder["outputs"]["present_value_names"], "output.cache.layers.%d.values");
        assert_eq!(config["search"]["do_sample"], true);
        assert_eq!(config["search"]["top_k"], 20);
        assert_eq!(config["search"]["max_length"], 64);
    }

    #[test]
    fn what_genai_cannot_feed_read_or_type_is_refused_naming_it() {
        let error = |config: &Value, io: (Vec<String>, Vec<String>)| {
            genai_config(config, &json!({}), "decode.onnx", &io.0, &io.1).unwrap_err().to_string()
        };
        let e = error(&llama(), decoder_io(Some("cache_position")));
        assert!(e.contains("takes `cache_position`"), "{e}");
        let (inputs, mut outputs) = decoder_io(None);
        outputs.pop();
        let e = error(&llama(), (inputs, outputs));
        assert!(e.contains("no `output.cache.layers.1.values`"), "{e}");
        let mut config = llama();
        config["eos_token_id"] = json!(32000);
        let e = error(&config, decoder_io(None));
        assert!(e.contains("eos_token_id 32000 is not a token"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let gpt2 = json!({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]});
        std::fs::write(dir.path().join("config.json"), gpt2.to_string()).unwrap();
        let e = model_type(dir.path()).unwrap_err().to_string();
        assert!(e.contains("model_type `gpt2` (GPT2LMHeadModel)"), "{e}");
        assert!(e.contains("llama, mistral, qwen3, phi3, gemma, gemma2, gemma3_text, olmo"), "{e}");
        assert!(check_components(["encoder", "prefill", "decode"]).is_err());
        assert!(check_components(["prefill", "decode"]).is_ok());
    }

    #[test]
    fn a_sliding_windows_cache_input_becomes_a_constant_of_the_decoder() {
        use crate::onnx::proto as p;
        use prost::Message;
        let dir = tempfile::tempdir().unwrap();
        let mut config = llama();
        config["sliding_window"] = json!(4);
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        let input = |name: &str, elem_type: p::tensor_proto::DataType| p::ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(p::TypeProto {
                value: Some(p::type_proto::Value::TensorType(p::type_proto::Tensor {
                    elem_type: Some(elem_type as i32),
                    shape: None,
                })),
                ..Default::default()
            }),
            ..Default::default()
        };
        let window = "input.cache.layers.0._sliding_window_tensor";
        let model = p::ModelProto {
            graph: Some(p::GraphProto {
                input: vec![
                    input("input_ids", p::tensor_proto::DataType::Int64),
                    input(window, p::tensor_proto::DataType::Int64),
                ],
                output: vec![input("logits", p::tensor_proto::DataType::Float)],
                ..Default::default()
            }),
            ..Default::default()
        };
        let path = dir.path().join("decode.onnx");
        std::fs::write(&path, model.encode_to_vec()).unwrap();
        let (inputs, outputs) = fit_decoder(&path, dir.path()).unwrap();
        assert_eq!((inputs, outputs), (names(&["input_ids"]), names(&["logits"])));
        let written = p::ModelProto::decode(std::fs::read(&path).unwrap().as_slice()).unwrap();
        let constant = &written.graph.unwrap().initializer[0];
        assert_eq!(constant.name.as_deref(), Some(window));
        assert_eq!(constant.int64_data, [4]);
    }
}
