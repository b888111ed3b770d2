//! The layout of an ONNX model's external data file, which the emit step
//! writes ([`super::emit::write`]) and the thread writing weights while the
//! worker traces starts ([`super::prewrite`]); and the one file the models
//! of an export folder share their weights in ([`share_weights`]).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use prost::Message;
use sha2::{Digest, Sha256};

use super::proto as p;

/// Initializers smaller than this stay in the `.onnx` with external data, as
/// onnx's `convert_model_to_external_data` keeps them (its `size_threshold`).
pub const THRESHOLD: u64 = 1024;
/// Offsets in the external data file are aligned for memory mapping.
pub const ALIGNMENT: u64 = 64;
/// The file the models of one export folder keep their weights in, each weight once.
pub const SHARED_DATA: &str = "weights.onnx.data";

/// `model.onnx` → `model.onnx.data`, the external data file beside it.
pub fn data_file(model: &std::path::Path) -> std::path::PathBuf {
    model.with_file_name(format!(
        "{}.data",
        model.file_name().and_then(|n| n.to_str()).unwrap_or("model.onnx")
    ))
}

#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: not an ONNX model ({source})")]
    Decode { path: String, source: prost::DecodeError },
    #[error("{path}: initializer `{name}`: {reason}")]
    Layout { path: String, name: String, reason: String },
}

/// What [`share_weights`] did.
#[derive(Debug, PartialEq, Eq)]
pub struct Shared {
    /// Bytes of the shared file.
    pub bytes: u64,
    /// Bytes no longer on disk: weights the models held each in their own file.
    pub saved: u64,
}

/// Moves the external weights of `models` (`.onnx` files of one folder, each
/// with its `<model>.onnx.data`) into [`SHARED_DATA`] beside them, each
/// distinct weight once (by its bytes): the components of one generation
/// export hold the same weights, which would otherwise be on disk once per
/// component. The first model's data file becomes the shared file (no weight
/// of it is copied); each other weight is appended unless its bytes are
/// there already; every model then points its initializers at the shared
/// file. Each model's own data file stays, empty: the reference's
/// `ExportedModel.from_pretrained` fetches `<file>.data` for every ONNX
/// component. A model without external data is left as it is.
pub fn share_weights(models: &[PathBuf]) -> Result<Shared, ShareError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| ShareError::Io { path: path.clone(), source }
    };
    let mut decoded = Vec::new();
    for path in models {
        let bytes = std::fs::read(path).map_err(io(path))?;
        let model = p::ModelProto::decode(bytes.as_slice())
            .map_err(|source| ShareError::Decode { path: path.display().to_string(), source })?;
        if data_file(path).is_file() {
            decoded.push((path.clone(), model));
        }
    }
    let Some((first, _)) = decoded.first() else {
        return Ok(Shared { bytes: 0, saved: 0 });
    };
    let dir = first.parent().unwrap_or(Path::new(".")).to_path_buf();
    let shared_path = dir.join(SHARED_DATA);
    std::fs::rename(data_file(first), &shared_path).map_err(io(&shared_path))?;
    // The first model's weights stay where they are, in the file it now shares.
    let mut shared =
        std::fs::OpenOptions::new().append(true).open(&shared_path).map_err(io(&shared_path))?;
    let mut end = shared.metadata().map_err(io(&shared_path))?.len();
    let mut offsets: HashMap<(u64, [u8; 32]), u64> = HashMap::new();
    let mut saved = 0;
    for (i, (path, model)) in decoded.iter_mut().enumerate() {
        let own = if i == 0 { shared_path.clone() } else { data_file(path) };
        let file = std::fs::File::open(&own).map_err(io(&own))?;
        // SAFETY: hfx's own scratch output, which nothing else writes; the
        // shared file is only appended to while mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io(&own))?;
        let layout = |name: &str, reason: String| ShareError::Layout {
            path: path.display().to_string(),
            name: name.to_string(),
            reason,
        };
        let initializers = model.graph.as_mut().map_or(&mut [][..], |g| &mut g.initializer[..]);
        for init in initializers {
            if init.data_location != Some(p::tensor_proto::DataLocation::External as i32) {
                continue;
            }
            let name = init.name.clone().unwrap_or_default();
            let field = |key: &str| {
                init.external_data
                    .iter()
                    .find(|e| e.key.as_deref() == Some(key))
                    .and_then(|e| e.value.clone())
            };
            let own_name = own_file_name(path);
            if field("location").as_deref() != Some(own_name.as_str()) {
                return Err(layout(&name, format!("its data is not in {own_name}")));
            }
            let number = |key: &str| -> Result<u64, ShareError> {
                field(key)
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| layout(&name, format!("no `{key}` in its external data")))
            };
            let (offset, length) = (number("offset")?, number("length")?);
            let past_the_end = || {
                layout(&name, format!("{length} bytes at {offset} past the end of its data file"))
            };
            let stop = offset.checked_add(length).ok_or_else(past_the_end)?;
            let bytes = usize::try_from(offset)
                .ok()
                .zip(usize::try_from(stop).ok())
                .and_then(|(start, stop)| map.get(start..stop))
                .ok_or_else(past_the_end)?;
            let key = (length, Sha256::digest(bytes).into());
            let at = if i == 0 {
                *offsets.entry(key).or_insert(offset)
            } else if let Some(&at) = offsets.get(&key) {
                saved += length;
                at
            } else {
                let padding = end.next_multiple_of(ALIGNMENT) - end;
                shared.write_all(&vec![0u8; padding as usize]).map_err(io(&shared_path))?;
                shared.write_all(bytes).map_err(io(&shared_path))?;
                let at = end + padding;
                end = at + length;
                offsets.insert(key, at);
                at
            };
            for entry in &mut init.external_data {
                match entry.key.as_deref() {
                    Some("location") => entry.value = Some(SHARED_DATA.into()),
                    Some("offset") => entry.value = Some(at.to_string()),
                    _ => {}
                }
            }
        }
    }
    shared.sync_all().map_err(io(&shared_path))?;
    // Each model now points only at the shared file; its own file empties.
    for (path, model) in &decoded {
        crate::atomic::write_bytes_atomically(path, &model.encode_to_vec()).map_err(io(path))?;
        let own = data_file(path);
        std::fs::File::create(&own).map_err(io(&own))?;
    }
    Ok(Shared { bytes: end, saved })
}

/// `prefill.onnx` → `prefill.onnx.data`, as an initializer's `location` names it.
fn own_file_name(model: &Path) -> String {
    data_file(model).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model whose initializers (name, bytes) are external, in its own data file.
    fn model(path: &Path, weights: &[(&str, Vec<u8>)]) {
        let mut data = Vec::new();
        let mut initializer = Vec::new();
        for (name, bytes) in weights {
            data.resize((data.len() as u64).next_multiple_of(ALIGNMENT) as usize, 0);
            let entry = |k: &str, v: String| p::StringStringEntryProto {
                key: Some(k.into()),
                value: Some(v),
            };
            initializer.push(p::TensorProto {
                name: Some(name.to_string()),
                dims: vec![bytes.len() as i64],
                data_type: Some(p::tensor_proto::DataType::Uint8 as i32),
                data_location: Some(p::tensor_proto::DataLocation::External as i32),
                external_data: vec![
                    entry("location", own_file_name(path)),
                    entry("offset", data.len().to_string()),
                    entry("length", bytes.len().to_string()),
                ],
                ..Default::default()
            });
            data.extend_from_slice(bytes);
        }
        let proto = p::ModelProto {
            graph: Some(p::GraphProto { initializer, ..Default::default() }),
            ..Default::default()
        };
        std::fs::write(path, proto.encode_to_vec()).unwrap();
        std::fs::write(data_file(path), data).unwrap();
    }

    /// Each initializer's bytes, read where its model now says they are.
    fn weights(path: &Path) -> Vec<(String, String, Vec<u8>)> {
        let proto = p::ModelProto::decode(std::fs::read(path).unwrap().as_slice()).unwrap();
        proto
            .graph
            .unwrap()
            .initializer
            .iter()
            .map(|init| {
                let field = |k: &str| {
                    init.external_data
                        .iter()
                        .find(|e| e.key.as_deref() == Some(k))
                        .unwrap()
                        .value
                        .clone()
                        .unwrap()
                };
                let location = field("location");
                let data = std::fs::read(path.with_file_name(&location)).unwrap();
                let offset: usize = field("offset").parse().unwrap();
                let length: usize = field("length").parse().unwrap();
                assert_eq!(offset as u64 % ALIGNMENT, 0);
                (init.name.clone().unwrap(), location, data[offset..offset + length].to_vec())
            })
            .collect()
    }

    #[test]
    fn models_share_one_file_holding_each_distinct_weight_once() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) =
            (dir.path().join("a.onnx"), dir.path().join("b.onnx"), dir.path().join("c.onnx"));
        let w = |byte: u8, n: usize| vec![byte; n];
        model(&a, &[("x", w(1, 2000)), ("y", w(2, 3000))]);
        // `b` holds `y` under another name, and a weight of its own; `c` two weights `b` has.
        model(&b, &[("y2", w(2, 3000)), ("z", w(3, 1500))]);
        model(&c, &[("z", w(3, 1500)), ("x", w(1, 2000))]);
        let before: Vec<_> = [&a, &b, &c].iter().map(|m| weights(m)).collect();
        let shared = share_weights(&[a.clone(), b.clone(), c.clone()]).unwrap();
        for (m, before) in [&a, &b, &c].iter().zip(before) {
            let after = weights(m);
            assert_eq!(
                after.iter().map(|(n, _, bytes)| (n, bytes)).collect::<Vec<_>>(),
                before.iter().map(|(n, _, bytes)| (n, bytes)).collect::<Vec<_>>()
            );
            assert!(after.iter().all(|(_, location, _)| location == SHARED_DATA));
            assert_eq!(std::fs::metadata(data_file(m)).unwrap().len(), 0, "{}", m.display());
        }
        let file = std::fs::metadata(dir.path().join(SHARED_DATA)).unwrap().len();
        assert_eq!(file, shared.bytes);
        // The three distinct weights, aligned: 2000 (+48) + 3000 (+8) + 1500.
        assert_eq!(shared.bytes, 2048 + 3008 + 1500);
        assert_eq!(shared.saved, 3000 + 1500 + 2000);
    }

    /// An offset and length whose sum overflows is one error, not a panic.
    #[test]
    fn a_weight_past_the_end_of_its_data_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.onnx");
        model(&a, &[("x", vec![1; 2000])]);
        let mut proto = p::ModelProto::decode(std::fs::read(&a).unwrap().as_slice()).unwrap();
        let init = &mut proto.graph.as_mut().unwrap().initializer[0];
        for entry in &mut init.external_data {
            if entry.key.as_deref() != Some("location") {
                entry.value = Some(u64::MAX.to_string());
            }
        }
        std::fs::write(&a, proto.encode_to_vec()).unwrap();
        let error = share_weights(std::slice::from_ref(&a)).unwrap_err().to_string();
        assert!(error.contains("initializer `x`") && error.contains("past the end"), "{error}");
    }

    #[test]
    fn a_model_without_a_data_file_is_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.onnx");
        let proto = p::ModelProto { graph: Some(p::GraphProto::default()), ..Default::default() };
        std::fs::write(&a, proto.encode_to_vec()).unwrap();
        assert_eq!(share_weights(std::slice::from_ref(&a)).unwrap(), Shared { bytes: 0, saved: 0 });
        assert!(!dir.path().join(SHARED_DATA).exists());
        assert_eq!(std::fs::read(&a).unwrap(), proto.encode_to_vec());
    }
}
