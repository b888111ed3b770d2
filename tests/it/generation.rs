//! Export for generation (`--generation`): the worker captures `prefill` and
//! `decode` from one `generate` call, each goes through the backend's whole
//! pipeline, and `--verify` generates 8 greedy tokens through the exported
//! components (ONNX Runtime, `torch.export.load`) that must equal eager
//! `generate`'s. `check_generation_folder.py` then holds the folder against
//! the reference: its own `decompose_for_generation` capture (components,
//! kwargs, ONNX input and output names) and `ExportedModel.from_pretrained`
//! running each component; `generation_loops.py` runs the README's loops
//! (a growing and a static cache) on a left-padded batch, in every runtime.

use std::path::{Path, PathBuf};

use crate::common::hfx_with_python as hfx;
use crate::common::tiny::*;
use crate::common::*;

/// Whisper and T5 generate from a start token the config names.
const WHISPER_GENERATES: &str = "vocab_size=128,d_model=32,encoder_layers=2,decoder_layers=2,encoder_attention_heads=4,decoder_attention_heads=4,encoder_ffn_dim=64,decoder_ffn_dim=64,num_mel_bins=16,max_source_positions=16,max_target_positions=32,pad_token_id=1,bos_token_id=1,eos_token_id=2,decoder_start_token_id=1";
const T5_GENERATES: &str = "vocab_size=128,d_model=32,d_kv=8,d_ff=64,num_layers=2,num_decoder_layers=2,num_heads=4,decoder_start_token_id=0";
/// The encoder-decoders of these tests: an encoder component before prefill.
const ENCODER_DECODERS: &[&str] = &["whisper", "t5", "bart"];
/// A state-space model: its cache is convolution and recurrent state, not keys and values.
const MAMBA: &str =
    "vocab_size=128,hidden_size=32,num_hidden_layers=2,state_size=8,expand=2,conv_kernel=4";
/// A Gemma 2 whose sliding window (4) the prompt (8) and the 8 new tokens pass.
const GEMMA2: &str = "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,head_dim=8,max_position_embeddings=64,sliding_window=4";

/// `hfx run --backend BACKEND --model ARCH --set SET --generation --verify -o DIR/ EXTRA`; its stdout.
fn generate(backend: &str, arch: &str, set: &str, dir: &Path, extra: &[&str]) -> String {
    generate_model(backend, &["--model", arch, "--set", set], dir, extra)
}

/// `hfx run --backend BACKEND MODEL... --generation --verify -o DIR/ EXTRA`; its stdout.
fn generate_model(backend: &str, model: &[&str], dir: &Path, extra: &[&str]) -> String {
    let plugins = root().join("plugins");
    let out = format!("{}/", dir.display());
    let mut args = vec!["run", "--backend", backend];
    args.extend(model);
    args.extend(["--generation", "--verify", "-o", &out]);
    args.extend(["--plugins", plugins.to_str().unwrap()]);
    args.extend(extra);
    let result = hfx(dir.parent().unwrap(), &args);
    let stdout = String::from_utf8_lossy(&result.stdout).to_string();
    assert!(
        result.status.success(),
        "{backend} {model:?} {extra:?}: {}\n{stdout}",
        String::from_utf8_lossy(&result.stderr)
    );
    stdout
}

/// Exports `arch` for generation, checks the summary and the folder; the
/// folder's temporary parent, and the folder.
fn exports(backend: &str, arch: &str, set: &str, extra: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let root_dir = tempfile::tempdir().unwrap();
    let dir = root_dir.path().join("exported");
    let stdout = generate(backend, arch, set, &dir, extra);
    // An encoder-decoder's encoder runs once too.
    let calls = if ENCODER_DECODERS.contains(&arch) { "encoder 1, prefill 1" } else { "prefill 1" };
    let line = format!("generate 8 greedy token(s) x 2 row(s): identical to eager `generate` (component calls: {calls}, decode 7;");
    assert!(stdout.contains(&line), "{stdout}");
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
    assert!(
        stdout.contains("component prefill") && stdout.contains("component decode"),
        "{stdout}"
    );
    let extension = if backend == "onnx" { "onnx" } else { "pt2" };
    for file in ["config.json", "generation_config.json", "export.json"]
        .map(String::from)
        .into_iter()
        .chain(["prefill", "decode"].map(|c| format!("{c}.{extension}")))
    {
        assert!(dir.join(&file).is_file(), "{file} missing from the folder");
    }
    assert!(!dir.join(format!("model.{extension}")).exists());
    if backend == "onnx" {
        weights_on_disk_once(&dir);
    }
    let mut args = vec![dir.to_str().unwrap(), if backend == "onnx" { "1e-3" } else { "1e-4" }];
    if extra.contains(&"--multi-token-decode") {
        args.push("--multi-token-decode");
    }
    run_python("check_generation_folder.py", &args);
    assert_no_scratch_left(root_dir.path());
    (root_dir, dir)
}

/// The ONNX components' weights are in one shared file; each component's own
/// data file is there (the reference's loader fetches it) and empty.
fn weights_on_disk_once(dir: &Path) {
    let shared = std::fs::metadata(dir.join("weights.onnx.data")).unwrap().len();
    let models = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect::<Vec<_>>();
    assert!(models.len() > 1 && shared > 0, "{models:?}: {shared} bytes shared");
    for model in models {
        let own = std::fs::metadata(model.with_extension("onnx.data")).unwrap().len();
        assert_eq!(own, 0, "{}: its weights are in weights.onnx.data", model.display());
    }
}

macro_rules! generation {
    ($(#[$attr:meta])* $test:ident, $backend:literal, $arch:literal, $set:expr $(, $extra:literal)*) => {
        $(#[$attr])*
        #[test]
        fn $test() {
            // No shape flag: a generation export is dynamic by default.
            exports($backend, $arch, $set, &[$($extra),*]);
        }
    };
}

// The fast tier exports one architecture per family through the backend that
// shows it best; every other architecture and backend is the full tier's.
/// A decoder's ONNX components; the README's loop (a growing cache) generates
/// eager's tokens with them for a left-padded batch.
#[test]
#[ignore = "full tier: a model built from --set (a_llama_folder_exports_a_package_onnx_runtime_genai_generates_with exports a Llama folder's ONNX components and runs the README's loop)"]
fn llama_generates_through_onnx_components() {
    let (_root, dir) = exports("onnx", "llama", LLAMA, &["--dynamic"]);
    run_python("generation_loops.py", &[dir.to_str().unwrap()]);
}
generation!(
    #[ignore = "full tier: another decoder (a_llama_folder_exports_a_package_onnx_runtime_genai_generates_with)"]
    qwen3_generates_through_onnx_components,
    "onnx",
    "qwen3",
    QWEN3
);
generation!(
    #[ignore = "full tier: another decoder (the a_static_cache_with_dynamic_shapes_generates_* tests)"]
    qwen3_generates_through_pt2_components,
    "dynamo",
    "qwen3",
    QWEN3
);
generation!(
    #[ignore = "full tier: a sliding window past the prompt (patches::sliding_window_cache_layers_trace_as_full_layers checks the cache patch)"]
    gemma2_sliding_window_generates_through_onnx_components,
    "onnx",
    "gemma2",
    GEMMA2
);
generation!(
    #[ignore = "full tier: a sliding window past the prompt (patches::sliding_window_cache_layers_trace_as_full_layers checks the cache patch)"]
    gemma2_sliding_window_generates_through_pt2_components,
    "dynamo",
    "gemma2",
    GEMMA2
);
generation!(
    #[ignore = "full tier: --multi-token-decode (a_llama_folder_exports_a_package_onnx_runtime_genai_generates_with generates through ONNX components with a one-token decode)"]
    a_multi_token_decode_generates_through_onnx_components,
    "onnx",
    "llama",
    LLAMA,
    "--multi-token-decode"
);
// Encoder-decoders: `encoder` runs the encoder, `prefill` the first decoder step on its outputs, `decode` takes them and the cache.
generation!(
    #[ignore = "full tier: another encoder-decoder's ONNX components (a_whisper_folder_generates_through_onnx_components exports an encoder-decoder's encoder, prefill and decode and checks the folder against the reference)"]
    t5_generates_through_onnx_components,
    "onnx",
    "t5",
    T5_GENERATES
);
generation!(
    #[ignore = "full tier: an encoder-decoder's .pt2 components (a_whisper_folder_generates_through_onnx_components exports an encoder-decoder's components; the a_static_cache_with_dynamic_shapes_generates_* tests generate through .pt2 components)"]
    t5_generates_through_pt2_components,
    "dynamo",
    "t5",
    T5_GENERATES
);
generation!(
    #[ignore = "full tier: another encoder-decoder (a_whisper_folder_generates_through_onnx_components)"]
    whisper_generates_through_onnx_components,
    "onnx",
    "whisper",
    WHISPER_GENERATES
);
generation!(
    #[ignore = "full tier: another encoder-decoder (a_whisper_folder_generates_through_onnx_components)"]
    whisper_generates_through_pt2_components,
    "dynamo",
    "whisper",
    WHISPER_GENERATES
);
generation!(
    #[ignore = "full tier: a state-space model's cache through .pt2 components (the a_static_cache_with_dynamic_shapes_generates_* tests generate through .pt2 components)"]
    mamba_generates_through_pt2_components,
    "dynamo",
    "mamba",
    MAMBA
);
generation!(
    #[ignore = "full tier: a state-space model's ONNX components (mamba_generates_through_pt2_components)"]
    mamba_generates_through_onnx_components,
    "onnx",
    "mamba",
    MAMBA
);

/// A multimodal model (`tests/python/generation_models.py`): its encoder,
/// projector (`parts`, the prefill's parts before the language model, as the
/// summary counts their calls), language model and head are components of the
/// prefill, and generating replaces each with its exported component.
fn multimodal(backend: &str, function: &str, parts: &str) {
    let root_dir = tempfile::tempdir().unwrap();
    let dir = root_dir.path().join("exported");
    let spec = format!("python:generation_models:{function}");
    let stdout = generate_model(backend, &["--model-fn", &spec], &dir, &["--dynamic"]);
    let calls = format!("(component calls: {parts}, language_model 1, lm_head 1, decode 7;");
    assert!(
        stdout.contains("identical to eager `generate`") && stdout.contains(&calls),
        "{stdout}"
    );
    let tolerance = if backend == "onnx" { "1e-3" } else { "1e-4" };
    run_python(
        "check_generation_folder.py",
        &[dir.to_str().unwrap(), tolerance, "--model-fn", &format!("generation_models:{function}")],
    );
    assert_no_scratch_left(root_dir.path());
}

/// An image encoder and its projector, as most vision-language models split.
const IMAGE_PARTS: &str = "image_encoder 1, multi_modal_projector 1";

#[test]
#[ignore = "full tier: a multimodal model's parts as components (a_whisper_folder_generates_through_onnx_components generates through a model whose part, its encoder, is a component)"]
fn llava_generates_through_onnx_components() {
    multimodal("onnx", "llava", IMAGE_PARTS);
}

#[test]
#[ignore = "full tier: a multimodal model's .pt2 components (a_whisper_folder_generates_through_onnx_components generates through a part as a component)"]
fn llava_generates_through_pt2_components() {
    multimodal("dynamo", "llava", IMAGE_PARTS);
}

#[test]
#[ignore = "full tier: an audio encoder as a prefill component (a_whisper_folder_generates_through_onnx_components generates through an audio encoder as a component)"]
fn qwen2_audio_generates_through_onnx_and_pt2_components() {
    multimodal("onnx", "qwen2_audio", "audio_encoder 1, multi_modal_projector 1");
    multimodal("dynamo", "qwen2_audio", "audio_encoder 1, multi_modal_projector 1");
}

/// Qwen2-VL's vision encoder packs its images' patches in one sequence and
/// derives its attention segments and rotary positions from each image's
/// patch grid (`image_grid_thw`) with loops over the grid's values: the
/// worker precomputes them (`precompute.py`) as the encoder's inputs, at
/// capture and for each call generation makes; generation numbers the
/// prompt's positions by image rows and columns (multimodal rotary).
#[test]
fn qwen2_vl_generates_from_an_image_through_onnx_components() {
    multimodal("onnx", "qwen2_vl", "image_encoder 1");
}

/// Every precomputation of the worker (`precompute.py`) on a tiny encoder
/// that needs it (Qwen2-VL's and Qwen2.5-VL's packed grids, Pixtral's image
/// sizes, MiniCPM-V 4.6's NaViT sizes, Qwen2.5-Omni's and Qwen3-ASR's audio
/// windows): the encoder's output with them is its output without, and
/// Pixtral exports with its sizes precomputed, not without
/// (`tests/python/check_precompute.py`).
#[test]
#[ignore = "full tier: each precomputation's values on its encoder (qwen2_vl_generates_from_an_image_through_onnx_components generates through precomputed encoder inputs)"]
fn precomputed_encoder_inputs_are_what_each_encoder_computes() {
    run_python("check_precompute.py", &[]);
}

#[test]
#[ignore = "full tier: Qwen2-VL's .pt2 components (qwen2_vl_generates_from_an_image_through_onnx_components precomputes the packed encoder's inputs)"]
fn qwen2_vl_generates_from_an_image_through_pt2_components() {
    multimodal("dynamo", "qwen2_vl", "image_encoder 1");
}

#[test]
#[ignore = "full tier: Gemma 3's vision tower and pooling projector, its sliding-window language model (qwen2_vl_generates_from_an_image_through_onnx_components generates through a vision encoder; gemma2's tests cover the window)"]
fn gemma3_generates_from_an_image_through_onnx_and_pt2_components() {
    multimodal("onnx", "gemma3", IMAGE_PARTS);
    multimodal("dynamo", "gemma3", IMAGE_PARTS);
}

#[test]
#[ignore = "full tier: Idefics 3's and SmolVLM's pixel-shuffle connector (qwen2_vl_generates_from_an_image_through_onnx_components generates through a vision encoder)"]
fn idefics3_and_smolvlm_generate_from_an_image_through_onnx_and_pt2_components() {
    for function in ["idefics3", "smolvlm"] {
        multimodal("onnx", function, "image_encoder 1, connector 1");
        multimodal("dynamo", function, "image_encoder 1, connector 1");
    }
}

/// Pixtral's encoder crops each image to its size (`image_sizes`): the
/// worker gives the sizes as ints (`precompute.py`), which the trace fixes.
#[test]
#[ignore = "full tier: Mistral 3's Pixtral encoder over image sizes (qwen2_vl_generates_from_an_image_through_onnx_components covers precomputed encoder inputs)"]
fn mistral3_generates_from_an_image_through_onnx_and_pt2_components() {
    multimodal("onnx", "mistral3", IMAGE_PARTS);
    multimodal("dynamo", "mistral3", IMAGE_PARTS);
}

#[test]
#[ignore = "full tier: LLaVA-NeXT's tiled image (qwen2_vl_generates_from_an_image_through_onnx_components generates through a vision encoder; llava_generates_through_onnx_components through LLaVA's)"]
fn llava_next_generates_from_a_tiled_image_through_onnx_and_pt2_components() {
    multimodal("onnx", "llava_next", IMAGE_PARTS);
    multimodal("dynamo", "llava_next", IMAGE_PARTS);
}

/// ExecuTorch: a multimodal model's parts as programs, with a static cache
/// (ExecuTorch plans buffers at their largest size), generating in the
/// ExecuTorch runtime: LLaVA, and LLaVA-NeXT's tiled image.
#[test]
#[ignore = "full tier: multimodal models' ExecuTorch components (llava_generates_through_onnx_components generates through their parts; the a_static_cache_with_dynamic_shapes_generates_* tests in the ExecuTorch runtime)"]
fn llava_and_llava_next_generate_in_the_executorch_runtime() {
    let root_dir = tempfile::tempdir().unwrap();
    let static_cache = ["--cache", "static", "--max-cache-len", "32", "--dynamic"];
    for function in ["llava", "llava_next"] {
        let dir = root_dir.path().join(function);
        let spec = format!("python:generation_models:{function}");
        let stdout = generate_model("executorch", &["--model-fn", &spec], &dir, &static_cache);
        let calls =
            format!("(component calls: {IMAGE_PARTS}, language_model 1, lm_head 1, decode 7;");
        assert!(
            stdout.contains("identical to eager `generate`")
                && stdout.contains(&calls)
                && stdout.contains("ExecuTorch"),
            "{function}: {stdout}"
        );
    }
    assert_no_scratch_left(root_dir.path());
}

/// A `StaticCache` (`--cache static --max-cache-len N`): the cache is a
/// fixed-size input updated in place (the `.pt2` module writes it back; the
/// ONNX model returns the updated cache), static shapes suffice.
#[test]
#[ignore = "full tier: a static cache with static shapes (the a_static_cache_with_dynamic_shapes_generates_* tests)"]
fn a_static_cache_generates_through_onnx_and_pt2_components() {
    for backend in ["onnx", "dynamo"] {
        let root_dir = tempfile::tempdir().unwrap();
        let dir = root_dir.path().join("exported");
        let stdout = generate(
            backend,
            "llama",
            LLAMA,
            &dir,
            &["--cache", "static", "--max-cache-len", "24", "--static"],
        );
        assert!(stdout.contains("identical to eager `generate`"), "{stdout}");
        let config = std::fs::read_to_string(dir.join("generation_config.json")).unwrap();
        assert!(
            config.contains("\"cache_implementation\": \"static\"")
                && config.contains("\"max_cache_len\": 24"),
            "{config}"
        );
        run_python(
            "check_generation_folder.py",
            &[dir.to_str().unwrap(), if backend == "onnx" { "1e-3" } else { "1e-4" }],
        );
    }
}

/// A static cache with `--dynamic`: the cache allocates itself at prefill
/// for the traced batch, so the program keeps that batch size symbolic and
/// returns it (`cache.layers.0.batch_size`), a leaf eager's output has not.
/// The components follow the program's own output spec, and a size comes
/// back as a number: greedy tokens identical in `backend`'s runtime, and the
/// README's static-cache loop over the folder. One test per runtime, so the
/// test threads share them out.
fn static_cache_with_dynamic_shapes_generates(root_dir: &Path, backend: &str) -> PathBuf {
    let dir = root_dir.join(backend);
    let stdout = generate(
        backend,
        "llama",
        LLAMA,
        &dir,
        &["--cache", "static", "--max-cache-len", "24", "--dynamic"],
    );
    assert!(
        stdout.contains("identical to eager `generate` (component calls: prefill 1, decode 7;"),
        "{backend}: {stdout}"
    );
    run_python("generation_loops.py", &[dir.to_str().unwrap()]);
    dir
}

#[test]
fn a_static_cache_with_dynamic_shapes_generates_in_onnx_runtime() {
    let root_dir = tempfile::tempdir().unwrap();
    let dir = static_cache_with_dynamic_shapes_generates(root_dir.path(), "onnx");
    // The ONNX output is named for the leaf it is.
    let model = std::fs::read(dir.join("prefill.onnx")).unwrap();
    assert!(
        model.windows(25).any(|w| w == b"cache.layers.0.batch_size"),
        "the size output is named for its leaf"
    );
}

#[test]
fn a_static_cache_with_dynamic_shapes_generates_through_pt2_components() {
    let root_dir = tempfile::tempdir().unwrap();
    static_cache_with_dynamic_shapes_generates(root_dir.path(), "dynamo");
}

#[test]
fn a_static_cache_with_dynamic_shapes_generates_in_the_executorch_runtime() {
    let root_dir = tempfile::tempdir().unwrap();
    static_cache_with_dynamic_shapes_generates(root_dir.path(), "executorch");
}

/// ExecuTorch, as its own LLM export does it: a static cache (state the
/// program updates in place), every component verified by generating in the
/// ExecuTorch runtime, for both programs: hfx's native portable emitter (the
/// updated cache returned as `updated.*` outputs) and XNNPACK.
#[test]
#[ignore = "full tier: five architectures in both ExecuTorch programs (the a_static_cache_with_dynamic_shapes_generates_* tests generate in the ExecuTorch runtime)"]
fn executorch_generates_with_a_static_cache_portable_and_xnnpack() {
    let root_dir = tempfile::tempdir().unwrap();
    // Llama, Qwen3 (a mask per layer type, `None` at prefill), Gemma 2 (its
    // sliding window passed), Phi-3 and Mamba (its fixed-size state updated in
    // place; the cache length is not used).
    for (program, delegate) in [("portable", &[][..]), ("xnnpack", &["--delegate", "xnnpack"][..])]
    {
        for (arch, set) in [
            ("llama", LLAMA),
            ("qwen3", QWEN3),
            ("gemma2", GEMMA2),
            ("phi3", PHI3),
            ("mamba", MAMBA),
        ] {
            let dir = root_dir.path().join(format!("{arch}-{program}"));
            let extra: Vec<&str> = delegate
                .iter()
                .copied()
                .chain(["--cache", "static", "--max-cache-len", "24", "--static"])
                .collect();
            let stdout = generate("executorch", arch, set, &dir, &extra);
            assert!(
                stdout.contains(
                    "identical to eager `generate` (component calls: prefill 1, decode 7;"
                ) && stdout.contains("ExecuTorch"),
                "{arch} {program}: {stdout}"
            );
            for file in ["prefill.pte", "decode.pte", "export.json", "generation_config.json"] {
                assert!(dir.join(file).is_file(), "{arch} {program}: {file} missing");
            }
        }
    }
    assert_no_scratch_left(root_dir.path());
}

/// An XNNPACK decode program updates its static cache in place: of the
/// kernel calls the portable runtime makes a step, only the updates
/// (`index_put_`, one per layer's keys and values) write a cache-sized
/// tensor. The functionalized program copies each cache four times a step
/// (an out-of-place `index_put`, two `copy`s, the write-back `copy_`),
/// expands the keys and values to their own shape and scales the whole of
/// the keys: hfx_worker/edge_rewrites.py. Heads are not grouped here (a
/// grouped cache is expanded to the query heads, a real copy).
#[test]
fn an_xnnpack_decode_program_updates_its_cache_in_place() {
    let root_dir = tempfile::tempdir().unwrap();
    let dir = root_dir.path().join("llama");
    let set = "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,\
               num_attention_heads=4,num_key_value_heads=4,max_position_embeddings=64";
    let extra = ["--delegate", "xnnpack", "--cache", "static", "--max-cache-len", "24", "--static"];
    let stdout = generate("executorch", "llama", set, &dir, &extra);
    assert!(stdout.contains("identical to eager `generate`"), "{stdout}");
    // batch 2 x 4 heads x 24 positions x head size 8
    let decode = dir.join("decode.pte");
    run_python(
        "check_pte_kernels.py",
        &[decode.to_str().unwrap(), "1536", r#"{"aten::index_put_": 4}"#],
    );
}

/// An ExecuTorch generation export with a growing cache is refused in one
/// line (ExecuTorch plans buffers at their largest size).
#[test]
fn executorch_refuses_a_growing_cache_in_one_line() {
    let root_dir = tempfile::tempdir().unwrap();
    let out = hfx(
        root_dir.path(),
        &[
            "run",
            "--backend",
            "executorch",
            "--delegate",
            "xnnpack",
            "--model",
            "llama",
            "--set",
            LLAMA,
            "--generation",
            "--dynamic",
            "-o",
            "growing/",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("add --cache static --max-cache-len N"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert_no_scratch_left(root_dir.path());
}

/// A decoder's `.pt2` components; the README's loop with a growing cache in torch.
#[test]
#[ignore = "full tier: a decoder's .pt2 components and the growing-cache loop in torch (the a_static_cache_with_dynamic_shapes_generates_* tests generate through .pt2 components; a_llama_folder_exports_a_package_onnx_runtime_genai_generates_with runs the loop)"]
fn llama_generates_through_pt2_components() {
    let (_root, dir) = exports("dynamo", "llama", LLAMA, &["--dynamic"]);
    run_python("generation_loops.py", &[dir.to_str().unwrap()]);
}

/// What a generation export cannot be is refused in one line before any work.
#[test]
fn what_a_generation_export_cannot_be_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let base = ["run", "--backend", "onnx", "--model", "llama", "--set", LLAMA];
    let cases: &[(&[&str], &str)] = &[
        (
            &["--generation", "--dynamic", "-o", "model.onnx"],
            "--generation writes an export folder",
        ),
        (&["--generation", "--static", "-o", "out/"], "cannot be --static"),
        (&["--generation", "--max-cache-len", "16", "-o", "out/"], "add --cache static"),
        (&["--generation", "--cache", "static", "-o", "out/"], "add --max-cache-len N"),
        (&["--multi-token-decode", "--dynamic", "-o", "out/"], "add --generation"),
        (
            &["--generation", "--dynamic", "--dynamic-shapes", "input_ids:1=2..16", "-o", "out/"],
            "drop --dynamic-shapes",
        ),
        (&["--genai", "--dynamic", "-o", "out/"], "add --generation"),
        (
            &[
                "--generation",
                "--genai",
                "--cache",
                "static",
                "--max-cache-len",
                "16",
                "-o",
                "out/",
            ],
            "drop --cache static",
        ),
    ];
    let dynamo = ["run", "--backend", "dynamo", "--model", "llama", "--set", LLAMA];
    let genai_to_dynamo: &[&str] = &["--generation", "--genai", "-o", "out/"];
    for (base, (extra, expected)) in std::iter::repeat(&base)
        .zip(cases)
        .chain([(&dynamo, &(genai_to_dynamo, "use --backend onnx"))])
    {
        let args: Vec<&str> = base.iter().chain(extra.iter()).copied().collect();
        let out = hfx(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} succeeded");
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{extra:?}: one line: {stderr}");
    }
    // A model that does not generate: the worker says so in one line, nothing is written.
    let out = hfx(
        dir.path(),
        &[
            "run",
            "--backend",
            "onnx",
            "--model",
            "bert",
            "--set",
            BERT,
            "--task",
            "BertModel",
            "--generation",
            "--dynamic",
            "-o",
            "bert/",
            "--plugins",
            root().join("plugins").to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("does not generate"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(!dir.path().join("bert").exists());
    assert_no_scratch_left(dir.path());
}

/// A Whisper folder generates: its class is the one `architectures` names
/// (the whole encoder-decoder), its encoder a component (the folder runs
/// from audio features), its decoder traced on a prompt of its own
/// (from the start token alone, decode's cache length would specialize to 1),
/// its new tokens counted from the decoder's sequences (it has no `input_ids`).
#[test]
fn a_whisper_folder_generates_through_onnx_components() {
    let root_dir = tempfile::tempdir().unwrap();
    let model = model_folder("whisper", root_dir.path());
    let dir = root_dir.path().join("exported");
    let stdout =
        generate_model("onnx", &["--model-dir", model.to_str().unwrap()], &dir, &["--dynamic"]);
    assert!(
        stdout.contains(
            "identical to eager `generate` (component calls: encoder 1, prefill 1, decode 7;"
        ),
        "{stdout}"
    );
    assert!(dir.join("encoder.onnx").is_file());
    weights_on_disk_once(&dir);
    // Ready to deploy: the model folder's tokenizer and feature extractor beside the components.
    for file in ["tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"] {
        assert_eq!(
            std::fs::read(dir.join(file)).unwrap(),
            std::fs::read(model.join(file)).unwrap(),
            "{file}"
        );
    }
    run_python(
        "check_generation_folder.py",
        &[dir.to_str().unwrap(), "1e-3", "--model-dir", model.to_str().unwrap(), "--processor"],
    );
    assert_no_scratch_left(root_dir.path());
}

/// Every encoder-decoder of the tests from its folder: a plain export
/// verified, and a static cache generating eager's tokens.
#[test]
#[ignore = "full tier: plain and static-cache exports of three encoder-decoder folders (a_whisper_folder_generates_through_onnx_components)"]
fn encoder_decoder_folders_export_plain_and_with_a_static_cache() {
    let root_dir = tempfile::tempdir().unwrap();
    for kind in ["whisper", "t5", "bart"] {
        let model = model_folder(kind, root_dir.path());
        let model = model.to_str().unwrap();
        let out = hfx(
            root_dir.path(),
            &[
                "run",
                "--backend",
                "onnx",
                "--model-dir",
                model,
                "--verify",
                "-o",
                &format!("{kind}.onnx"),
                "--plugins",
                root().join("plugins").to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{kind} plain: {}", String::from_utf8_lossy(&out.stderr));
        for backend in ["onnx", "dynamo"] {
            let dir = root_dir.path().join(format!("{kind}-{backend}"));
            let stdout = generate_model(
                backend,
                &["--model-dir", model],
                &dir,
                // Static shapes: a dynamic static cache adds its batch size as
                // an output (the a_static_cache_with_dynamic_shapes_generates_* tests),
                // which the reference's names, checked below, do not have.
                &["--cache", "static", "--max-cache-len", "24", "--static"],
            );
            assert!(stdout.contains("identical to eager `generate`"), "{kind} {backend}: {stdout}");
            let tolerance = if backend == "onnx" { "1e-3" } else { "1e-4" };
            run_python(
                "check_generation_folder.py",
                &[dir.to_str().unwrap(), tolerance, "--model-dir", model],
            );
        }
    }
    assert_no_scratch_left(root_dir.path());
}

/// `--genai`: a Llama model folder's export folder is also an ONNX Runtime
/// GenAI package (`genai_config.json` naming the `decode` component, the
/// tokenizer beside it); `--verify` generates with GenAI's own `Generator`,
/// and `check_genai_folder.py` generates from the folder as a user does. The
/// folder's components still generate eager's tokens through the README's
/// loop (a growing cache, a left-padded batch).
#[test]
fn a_llama_folder_exports_a_package_onnx_runtime_genai_generates_with() {
    let root_dir = tempfile::tempdir().unwrap();
    let model = model_folder("llama-tokenizer", root_dir.path());
    let dir = root_dir.path().join("exported");
    let stdout =
        generate_model("onnx", &["--model-dir", model.to_str().unwrap()], &dir, &["--genai"]);
    let line = "genai 8 greedy token(s) x 2 row(s) from ONNX Runtime GenAI's `Generator`: identical to eager `generate`";
    assert!(stdout.contains(line), "{stdout}");
    for file in ["genai_config.json", "decode.onnx", "tokenizer.json", "tokenizer_config.json"] {
        assert!(dir.join(file).is_file(), "{file} missing from the folder");
    }
    run_python("check_genai_folder.py", &[dir.to_str().unwrap(), model.to_str().unwrap()]);
    run_python("generation_loops.py", &[dir.to_str().unwrap()]);
    assert_no_scratch_left(root_dir.path());
}

/// `hfx run --backend onnx --model ARCH --set SET --generation --genai --verify -o DIR/ EXTRA`:
/// GenAI's `Generator` generates eager's tokens.
fn genai_generates(arch: &str, set: &str, extra: &[&str]) {
    let root_dir = tempfile::tempdir().unwrap();
    let dir = root_dir.path().join("exported");
    let extra: Vec<&str> = ["--genai"].iter().chain(extra).copied().collect();
    let stdout = generate("onnx", arch, set, &dir, &extra);
    assert!(
        stdout.contains("from ONNX Runtime GenAI's `Generator`: identical to eager `generate`"),
        "{stdout}"
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("genai_config.json")).unwrap()).unwrap();
    assert_eq!(config["model"]["type"], arch);
}

/// Phi-3's tiny config names the token ids of the real model's vocabulary: these are in the tiny one's.
const PHI3_GENERATES: &str = "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,max_position_embeddings=64,pad_token_id=0,bos_token_id=1,eos_token_id=2";

#[test]
#[ignore = "full tier: Qwen3 (q/k norms) as a GenAI package (a_llama_folder_exports_a_package_onnx_runtime_genai_generates_with)"]
fn qwen3_generates_with_onnx_runtime_genai() {
    genai_generates("qwen3", QWEN3, &[]);
}

#[test]
#[ignore = "full tier: Phi-3 (fused qkv) as a GenAI package (a_llama_folder_exports_a_package_onnx_runtime_genai_generates_with)"]
fn phi3_generates_with_onnx_runtime_genai() {
    genai_generates("phi3", PHI3_GENERATES, &[]);
}

/// Gemma 2's sliding window (4, which the prompt passes): the cache's window
/// tensor is a constant of the GenAI decoder; in float32 and float16.
#[test]
#[ignore = "full tier: Gemma 2's sliding window as a GenAI package, fp32 and fp16 (a_llama_folder_exports_a_package_onnx_runtime_genai_generates_with)"]
fn gemma2_generates_with_onnx_runtime_genai_in_float32_and_float16() {
    genai_generates("gemma2", GEMMA2, &[]);
    genai_generates("gemma2", GEMMA2, &["--dtype", "float16"]);
}

/// Mistral, Gemma, Gemma 3 (its sliding window of 4, which the prompt and the
/// generated tokens pass) and OLMo (its end-of-sequence token in the tiny
/// vocabulary), each as GenAI's own model type.
#[test]
#[ignore = "full tier: more GenAI model types (a_llama_folder_exports_a_package_onnx_runtime_genai_generates_with)"]
fn mistral_gemma_gemma3_and_olmo_generate_with_onnx_runtime_genai() {
    let windowed = format!("{QWEN3},sliding_window=4");
    let olmo = format!("{LLAMA},eos_token_id=2");
    for (arch, set) in [
        ("mistral", LLAMA),
        ("gemma", GEMMA),
        ("gemma3_text", windowed.as_str()),
        ("olmo", olmo.as_str()),
    ] {
        genai_generates(arch, set, &[]);
    }
}

/// What GenAI cannot run as one decoder, or whose model type hfx does not
/// map, is refused in one line once `generate` is captured; nothing is written.
#[test]
#[ignore = "full tier: refusals after the capture (what_a_generation_export_cannot_be_is_refused_in_one_line refuses before it)"]
fn a_model_onnx_runtime_genai_cannot_run_is_refused_in_one_line() {
    let root_dir = tempfile::tempdir().unwrap();
    let plugins = root().join("plugins");
    for (arch, set, expected) in [
        ("t5", T5_GENERATES, "runs this model as encoder + prefill + decode"),
        ("gpt2", GPT2, "no ONNX Runtime GenAI model type for model_type `gpt2`"),
    ] {
        let out = hfx(
            root_dir.path(),
            &[
                "run",
                "--backend",
                "onnx",
                "--model",
                arch,
                "--set",
                set,
                "--generation",
                "--genai",
                "-o",
                "out/",
                "--plugins",
                plugins.to_str().unwrap(),
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{arch}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{arch}: one line: {stderr}");
        assert!(!root_dir.path().join("out").exists(), "{arch}");
    }
    assert_no_scratch_left(root_dir.path());
}

/// The check of quantized components is teacher forced inside
/// transformers' `generate` (`check_teacher_forced.py`): the sequence is the
/// forced tokens, each step's logits those of that context, and the
/// components' choice read from them.
#[test]
fn teacher_forcing_gives_each_step_the_forced_context() {
    run_python("check_teacher_forced.py", &[]);
}

/// `--generation --quantize int4 --genai --verify` from a model folder: each
/// component is quantized, and the check reports the greedy-token agreement
/// with eager `generate` of the model with the same int4 weights, against
/// the threshold int4 is held to, for the components and for ONNX Runtime
/// GenAI's `Generator` over the int4 package, and the float model's beside.
#[test]
#[ignore = "full tier: --quantize composed with --generation and --genai (onnx::an_int4_export_is_verified_against_its_own_weights_in_eager covers the quantizer and its verification)"]
fn an_int4_generation_export_reports_its_greedy_token_agreement() {
    let root_dir = tempfile::tempdir().unwrap();
    let model = model_folder("llama", root_dir.path());
    let dir = root_dir.path().join("exported");
    let stdout = generate_model(
        "onnx",
        &["--model-dir", model.to_str().unwrap()],
        &dir,
        &["--quantize", "int4", "--genai"],
    );
    assert_eq!(stdout.matches("MatMul(s) -> MatMulNBits").count(), 2, "{stdout}");
    assert!(stdout.contains("from ONNX Runtime GenAI's `Generator`"), "{stdout}");
    // Against the model with the components' int4 weights round-tripped; the float model's agreement beside.
    assert!(
        stdout.contains("(eager int4: the model with the components' int4 weights, dequantized)"),
        "{stdout}"
    );
    assert!(stdout.contains("against the float model: greedy-token agreement"), "{stdout}");
    assert!(
        stdout.contains("identical to eager `generate`")
            || stdout.contains("greedy-token agreement"),
        "{stdout}"
    );
}

/// `--generation --dynamic --quantize int8-static --verify` from a model
/// folder: both components are quantized and calibrated together, through
/// `generate` (the decode component on caches its prefill wrote): every
/// activation's scale is set (none left at 1, the lm_head's too, whose
/// input a no-op Slice's removal renamed), the calibration models are gone,
/// and the check reports the greedy-token agreement int8-static is held to.
#[test]
#[ignore = "full tier: int8-static composed with --generation (onnx::an_int8_static_export_calibrated_on_a_file_runs_within_its_stated_tolerance covers the quantizer, the calibration and its tolerance)"]
fn an_int8_static_generation_export_is_calibrated_through_generate() {
    use hfx::onnx::proto::ModelProto;
    use prost::Message;
    let root_dir = tempfile::tempdir().unwrap();
    let model = model_folder("llama", root_dir.path());
    let dir = root_dir.path().join("exported");
    let stdout = generate_model(
        "onnx",
        &["--model-dir", model.to_str().unwrap()],
        &dir,
        &["--quantize", "int8-static", "--dynamic"],
    );
    let line = "int8 QDQ (uint8 activations), calibrated: MinMax over 8 generated sample(s)";
    assert_eq!(stdout.matches(line).count(), 2, "{stdout}");
    // Teacher forced: every step's logits within the tolerance, no step left out.
    assert!(
        stdout.contains(
            "generate 8 greedy token(s) x 2 row(s), each step given eager's tokens before it: "
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
    assert!(
        stdout.contains("identical to eager `generate`")
            || stdout.contains("of 16, each step given eager's tokens before it)"),
        "{stdout}"
    );
    for component in ["prefill", "decode"] {
        let path = dir.join(format!("{component}.onnx"));
        let graph =
            ModelProto::decode(std::fs::read(&path).unwrap().as_slice()).unwrap().graph.unwrap();
        let scales: Vec<f32> = graph
            .initializer
            .iter()
            .filter(|i| i.name.as_deref().is_some_and(|n| n.ends_with("_activation_scale")))
            .map(|i| f32::from_le_bytes(i.raw_data.as_deref().unwrap().try_into().unwrap()))
            .collect();
        assert!(scales.len() >= 5, "{component}: {scales:?}");
        assert!(scales.iter().all(|&s| s != 1.0 && s > 0.0), "{component}: {scales:?}");
        assert!(!dir.join(format!("{component}.calibration.onnx")).exists());
    }
    assert_no_scratch_left(root_dir.path());
}

/// A mixture-of-experts decoder outside the sweep (DeepSeek-V3: its
/// attention writes key states in place into slices of a new tensor, its
/// router writes a group mask) exports to ONNX plain and for generation,
/// each verified against eager: the worker functionalizes the writes.
#[test]
#[ignore = "full tier: a held-out MoE decoder's writes in place, plain and for generation (fx_fixes::every_in_place_write_is_functionalized_and_matches_eager)"]
fn a_deepseek_v3_folder_writing_in_place_exports_plain_and_for_generation() {
    let root_dir = tempfile::tempdir().unwrap();
    let model = model_folder("deepseek_v3", root_dir.path());
    let model = model.to_str().unwrap();
    let plugins = root().join("plugins");
    let out = hfx(
        root_dir.path(),
        &[
            "run",
            "--backend",
            "onnx",
            "--model-dir",
            model,
            "--verify",
            "-o",
            "deepseek.onnx",
            "--plugins",
            plugins.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "plain: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("decomposed aten.copy_.default"), "{stdout}");
    let dir = root_dir.path().join("exported");
    let stdout = generate_model("onnx", &["--model-dir", model], &dir, &[]);
    assert!(stdout.contains("identical to eager `generate`"), "{stdout}");
    assert_no_scratch_left(root_dir.path());
}
