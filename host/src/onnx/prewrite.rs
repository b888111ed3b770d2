//! An ONNX model's external data written while the worker traces
//! ([`crate::prewrite`]).
//!
//! The data file holds the initializers of [`EXTERNAL_THRESHOLD`] bytes or
//! more, in the model's order, each at an offset aligned to
//! [`EXTERNAL_ALIGNMENT`] ([`super::emit::write`]). Lowering gives the
//! initializers in the order of the program's signature: its parameters,
//! then its buffers, which is the order the worker's plan lists them in.
//! Each is written as the emit step would write it: as stored, converted to
//! the traced dtype, and transposed where it is a `torch.nn.Linear`'s weight
//! and the optimizer stores those transposed. The emit step keeps the file
//! up to the first initializer that is not what was written, and writes on
//! from there ([`PrewrittenData::kept`]).

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::emit::{write_weight, WeightFiles, EXTERNAL_ALIGNMENT, EXTERNAL_THRESHOLD};
use super::weights::{Bytes, Initializer};
use crate::atomic::{DirectWriter, Staged};
use crate::prewrite::{Checkpoints, Opened, Place};
use crate::trace::protocol::PlannedWeight;

/// What the thread wrote: the data file's first initializers, in its temp file.
pub struct PrewrittenData {
    staged: Staged,
    out: DirectWriter<File>,
    entries: Vec<DataEntry>,
}

/// One initializer's bytes in the data file: what they were written from,
/// and where they start and end.
#[derive(Debug)]
struct DataEntry {
    place: Place,
    start: u64,
    end: u64,
}

/// The data file as far as the model's initializers match it: its temp
/// file, the writer positioned after the last kept initializer, and where
/// each kept one starts.
pub struct Kept {
    pub staged: Staged,
    pub out: DirectWriter<File>,
    pub starts: Vec<u64>,
}

/// The initializers of `plan` written in order into a temp file beside the
/// data file `data`, up to the first whose bytes `checkpoints` does not give
/// or until `stop`; None if none was or a write failed.
pub fn write(
    data: &Path,
    plan: Vec<PlannedWeight>,
    mut checkpoints: Checkpoints,
    transposed_linear: bool,
    stop: &AtomicBool,
) -> Option<PrewrittenData> {
    let failed = |e: std::io::Error| {
        tracing::info!("weights are written at the emit step: {}: {e}", data.display())
    };
    let mut staged = Staged::create(data).map_err(failed).ok()?;
    let mut out = DirectWriter::new(staged.file().try_clone().map_err(failed).ok()?);
    let mut entries = Vec::new();
    for planned in plan {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let Some(got) = checkpoints.get(&planned) else { break };
        // Transposed as the optimizer transposes a weight ([`super::fold`]):
        // a 2-D Linear weight of whole elements of a size it moves.
        let transposed = match planned.shape[..] {
            [rows, cols] if transposed_linear && planned.linear_weight => usize::try_from(rows)
                .ok()
                .zip(usize::try_from(cols).ok())
                .filter(|&(rows, cols)| {
                    let count = rows.checked_mul(cols).filter(|&n| n > 0);
                    count.is_some_and(|n| {
                        [1, 2, 4, 8]
                            .iter()
                            .any(|&element| n.checked_mul(element) == Some(got.bytes.len()))
                    })
                }),
            _ => None,
        };
        let bytes = match (transposed, got.cast) {
            (Some((rows, cols)), cast) => Bytes::Transposed {
                source: got.bytes,
                rows,
                cols,
                element: got.bytes.len() / (rows * cols),
                cast,
            },
            (None, Some(cast)) => Bytes::Converted { source: got.bytes, cast },
            (None, None) => Bytes::Mapped(got.bytes),
        };
        if (bytes.len() as u64) < EXTERNAL_THRESHOLD {
            continue; // stored in the model, not in the data file
        }
        let start = out.position().next_multiple_of(EXTERNAL_ALIGNMENT);
        let padding = vec![0u8; (start - out.position()) as usize];
        let written = std::io::Write::write_all(&mut out, &padding)
            .and_then(|()| write_weight(&mut out, &bytes, got.from));
        if let Err(e) = written {
            failed(e);
            return None;
        }
        let place = Place {
            file: got.from.path.clone(),
            offset: got.offset,
            length: planned.length,
            cast: got.cast,
            transposed,
        };
        entries.push(DataEntry { place, start, end: start + bytes.len() as u64 });
    }
    // Idle until the emit step: its buffers are not held meanwhile.
    out.park().map_err(failed).ok()?;
    (!entries.is_empty()).then_some(PrewrittenData { staged, out, entries })
}

impl PrewrittenData {
    /// The file as far as it is the data file of `initializers` at `data`
    /// (their bytes' places given by `files`), the rest cut off; None if
    /// no initializer matches (the temp file is then removed).
    pub fn kept(
        self,
        data: &Path,
        initializers: &[Initializer],
        files: &dyn WeightFiles,
    ) -> Option<Kept> {
        let PrewrittenData { staged, mut out, entries } = self;
        if staged.target() != data {
            return None;
        }
        let external = initializers.iter().filter(|i| i.bytes.len() as u64 >= EXTERNAL_THRESHOLD);
        let matched = entries
            .iter()
            .zip(external)
            .take_while(|(entry, init)| place_of(&init.bytes, files).as_ref() == Some(&entry.place))
            .count();
        let last = entries.get(matched.checked_sub(1)?)?;
        let reader = File::open(staged.temp_path()).ok()?;
        out.rewind(last.end, &reader).ok()?;
        Some(Kept { staged, out, starts: entries[..matched].iter().map(|e| e.start).collect() })
    }
}

/// What an initializer's bytes are written from; None for bytes of no file
/// (folded values).
fn place_of(bytes: &Bytes, files: &dyn WeightFiles) -> Option<Place> {
    match *bytes {
        Bytes::Mapped(source) => files.place(source, None, None),
        Bytes::Converted { source, cast } => files.place(source, Some(cast), None),
        Bytes::Transposed { source, rows, cols, cast, .. } => {
            files.place(source, cast, Some((rows, cols)))
        }
        Bytes::Owned(_) => None,
    }
}

/// A checkpoint file the thread reads: its weights are copied from the file
/// and their pages released once written, as the emit step does.
impl WeightFiles for Opened {
    fn origin(&self, bytes: &[u8]) -> Option<(&File, u64)> {
        crate::graph::pt2::offset_in(&self.map, bytes).map(|offset| (&self.file, offset as u64))
    }

    fn release(&self, bytes: &[u8]) {
        crate::graph::pt2::release_from(&self.map, bytes);
    }

    fn place(
        &self,
        _: &[u8],
        _: Option<crate::graph::pt2::cast::Cast>,
        _: Option<(usize, usize)>,
    ) -> Option<Place> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::pt2::testing::{archive, open, Stored};
    use crate::graph::{Dim, TensorMeta};
    use crate::onnx::emit::{write as write_model, Planned, WeightStorage};
    use crate::onnx::weights::initializer;
    use crate::prewrite::Prewriting;

    /// A checkpoint's tensors: (fqn, rows, columns, stored dtype); the
    /// program's are float32, and `*_proj` ones are `Linear` weights.
    const TENSORS: [(&str, u64, u64, &str); 5] = [
        ("embed", 767, 512, "float32"), // not a whole number of 4 KiB blocks
        ("q_proj", 512, 768, "float32"),
        ("norm", 1, 4, "float32"),
        ("wide", 2048, 1024, "bfloat16"),
        ("o_proj", 1024, 1024, "float32"),
    ];

    /// The data file written while tracing is kept up to the first
    /// initializer that is not what was written (other bytes, another
    /// order, not transposed as the optimizer stored it), rewound there
    /// (within the block being filled, and into blocks written already);
    /// the model and its data file are the same bytes either way, and no
    /// temp file is left (a plan dropped unfinished included).
    #[test]
    fn external_data_written_while_tracing_is_kept_as_far_as_the_model_starts_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let side = dir.path().join("p.pt2.weights");
        std::fs::write(&side, b"").unwrap();
        let checkpoint = dir.path().join("model.safetensors");
        let (mut bytes, mut index, mut plan) = (vec![0u8; 16], serde_json::Map::new(), Vec::new());
        for (i, &(fqn, rows, cols, stored)) in TENSORS.iter().enumerate() {
            let element = if stored == "float32" { 4 } else { 2 };
            let length = rows * cols * element;
            index.insert(fqn.into(), serde_json::json!([1, bytes.len(), length, stored]));
            plan.push(PlannedWeight {
                name: fqn.into(),
                file: checkpoint.clone(),
                offset: bytes.len() as u64,
                length,
                stored: stored.into(),
                dtype: "float32".into(),
                shape: if rows == 1 { vec![cols] } else { vec![rows, cols] },
                linear_weight: fqn.ends_with("_proj"),
            });
            bytes.extend((0..length).map(|b| (b * 7 + b / 4093 + i as u64) as u8 & 0x3f));
        }
        std::fs::write(&checkpoint, &bytes).unwrap();
        let index = serde_json::json!({"files": ["p.pt2.weights", checkpoint], "weights": index, "constants": {}});
        std::fs::write(dir.path().join("p.pt2.weights.json"), index.to_string()).unwrap();
        let stored = |&(fqn, rows, cols, _): &(&'static str, u64, u64, &str)| Stored {
            fqn,
            sizes: vec![rows as i64, cols as i64],
            strides: vec![cols as i64, 1],
            offset: 0,
            bytes: Some(vec![]),
        };
        let mut pt2 = open(archive(&TENSORS.iter().map(stored).collect::<Vec<_>>()));
        pt2.attach_side_weights(&side, std::slice::from_ref(&checkpoint)).unwrap();
        // The optimized model's initializers: the `Linear` weights stored transposed.
        let planned = || {
            let initializers = TENSORS
                .iter()
                .map(|&(fqn, rows, cols, _)| {
                    let meta = TensorMeta::new(
                        "float32",
                        vec![Dim::Fixed(rows as i64), Dim::Fixed(cols as i64)],
                    );
                    let mut init = initializer(&pt2, fqn, false, &meta).unwrap();
                    if fqn.ends_with("_proj") {
                        let Bytes::Mapped(source) = init.bytes else {
                            panic!("{fqn} is stored as float32")
                        };
                        init.bytes = Bytes::Transposed {
                            source,
                            rows: rows as usize,
                            cols: cols as usize,
                            element: 4,
                            cast: None,
                        };
                        init.header.dims = vec![cols as i64, rows as i64];
                    }
                    init
                })
                .collect();
            Planned { model: Default::default(), graph: Default::default(), initializers }
        };
        let model = dir.path().join("out/model.onnx");
        let data = super::super::emit::data_file(&model);
        let written = |prewritten: Option<PrewrittenData>| {
            let kept = write_model(
                &model,
                planned(),
                WeightStorage::External { prewritten: prewritten.map(Box::new) },
                &pt2,
            )
            .unwrap();
            (kept, std::fs::read(&model).unwrap(), std::fs::read(&data).unwrap())
        };
        let (_, plain_model, plain_data) = written(None);
        let prewritten = |to: &Path, plan: &[PlannedWeight], sources: &Path| {
            let (to, plan, checkpoints) =
                (to.to_path_buf(), plan.to_vec(), Checkpoints::new(&[sources.to_path_buf()]));
            Prewriting::start(move |stop| write(&to, plan, checkpoints, true, stop))
        };
        let not_linear = |fqn: &str| {
            let mut plan = plan.clone();
            plan.iter_mut().filter(|p| p.name == fqn).for_each(|p| p.linear_weight = false);
            plan
        };
        let reordered = [plan[1].clone(), plan[0].clone()];
        // Sizes no weight has (the plan is a worker line): not transposed, no overflow.
        let mut absurd = plan.clone();
        absurd[1].shape = vec![u64::MAX, 2];
        let cases: [(&[PlannedWeight], usize); 6] = [
            (&plan, 4), // `norm` is stored in the model
            (&plan[..2], 2),
            (&not_linear("o_proj"), 3), // rewound in the block being filled
            (&not_linear("q_proj"), 1), // rewound into a block written already
            (&absurd, 1),
            (&reordered, 0),
        ];
        for (plan, kept) in cases {
            let names: Vec<&str> = plan.iter().map(|p| p.name.as_str()).collect();
            let (got, model_bytes, data_bytes) =
                written(prewritten(&data, plan, &checkpoint).finish());
            assert_eq!(got, kept, "{names:?}");
            assert!(
                model_bytes == plain_model && data_bytes == plain_data,
                "{names:?}: other bytes"
            );
            // Written for another data file: not kept.
            let (got, _, data_bytes) = written(
                prewritten(&dir.path().join("elsewhere.onnx.data"), plan, &checkpoint).finish(),
            );
            assert_eq!(got, 0);
            assert!(data_bytes == plain_data);
            // A plan naming a file that is not one of the checkpoint's: nothing is read.
            assert!(prewritten(&data, plan, &side).finish().is_none(), "{names:?}");
        }
        drop(prewritten(&dir.path().join("out/failed.onnx.data"), &plan, &checkpoint));
        let mut left: Vec<_> = std::fs::read_dir(dir.path().join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["model.onnx", "model.onnx.data"], "temp files left");
    }
}
