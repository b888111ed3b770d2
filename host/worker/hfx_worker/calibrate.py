"""The `calibrate` request of `--quantize int8-static`: each component's
float model (the host wrote it with the activations to calibrate among its
outputs) runs in ONNX Runtime on the calibration inputs, and each
activation's smallest and largest value over every sample goes back to the
host, which sets the scales (ONNX Runtime's MinMax calibration).

The inputs: `samples` variations of the eager reference's inputs (its
integer inputs drawn again within their range, its float inputs around
their mean and spread; the first sample is the reference's own), or the
arrays of a `.npz` file, one per input with a leading sample axis. With
`--generation`, `generate` runs with the components in place of the
model, each prompt for `steps` new tokens, so the decode component is
calibrated on caches its prefill wrote."""

import copy
import os
import zipfile

from .messages import ActivationRange, Calibrate, CalibratedComponent, CalibrateReply
from .protocol import Unsupported
from .pytree import load_reference, named_leaves
from .verify import onnx_feed

# A calibration file's arrays together: beyond this it is refused before it is read.
MAX_FILE_BYTES = 4 << 30


class Ranges:
    """Each activation's running min and max."""

    def __init__(self, names):
        self.names = list(names)
        self.low = dict.fromkeys(self.names, float("inf"))
        self.high = dict.fromkeys(self.names, float("-inf"))

    def add(self, name, value):
        import numpy as np

        if value.size:
            self.low[name] = min(self.low[name], float(np.min(value)))
            self.high[name] = max(self.high[name], float(np.max(value)))

    def measured(self):
        # An activation no sample reached (a branch never taken) keeps the
        # range of 0 alone: scale 1, zero point 0.
        return [
            ActivationRange(
                name=n,
                min=self.low[n] if self.low[n] <= self.high[n] else 0.0,
                max=self.high[n] if self.low[n] <= self.high[n] else 0.0,
            )
            for n in self.names
        ]


def recording_runner(path, activations):
    """(run(inputs) -> the model's own outputs, ranges): the calibration model
    in ONNX Runtime, each run's activations (its last outputs) recorded."""
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    own = len(outputs) - len(activations)
    ranges = Ranges(activations)

    def run(inputs):
        values = session.run(None, onnx_feed(names, inputs))
        for name, value in zip(activations, values[own:]):
            ranges.add(name, value)
        return values[:own]

    run.input_names = names
    return run, ranges


def varied(inputs, count):
    """`count` samples like `inputs` (tensors by name): the first is
    `inputs`, each other one drawn with its own seed: token ids again within
    their range, float inputs around their mean and spread; other integer
    inputs (masks, positions) kept."""
    import torch

    samples = [inputs]
    for seed in range(1, count):
        generator = torch.Generator().manual_seed(seed)
        sample = {}
        for name, value in inputs.items():
            if not torch.is_tensor(value) or value.numel() == 0 or value.dtype == torch.bool:
                sample[name] = value
            elif value.is_floating_point():
                noise = torch.randn(value.shape, generator=generator, dtype=torch.float32)
                spread = value.float().std() if value.numel() > 1 else torch.tensor(1.0)
                sample[name] = (value.float().mean() + noise * spread).to(value.dtype)
            elif name.endswith("input_ids"):
                # Token ids drawn again in their range; masks and positions kept.
                low, high = int(value.min()), int(value.max())
                sample[name] = torch.randint(
                    low, high + 1, value.shape, generator=generator, dtype=value.dtype
                )
            else:
                sample[name] = value
        samples.append(sample)
    return samples


def file_samples(path, like):
    """The samples of the `.npz` at `path`: one dict per sample, an array per
    name of `like` (name → example tensor: its rank, and whether it holds
    integers or floats). A file that is not such a `.npz` is refused in one
    line naming it and the fix."""
    import numpy as np
    import torch

    fix = (
        "give a .npz (numpy.savez) with one array per input, named "
        f"{', '.join(sorted(like))}, each with a leading sample axis"
    )
    try:
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (OSError, zipfile.BadZipFile) as error:
        raise Unsupported(f"--calibration {path}: not a readable .npz ({error}): {fix}") from None
    if max(size, unpacked) > MAX_FILE_BYTES:
        raise Unsupported(
            f"--calibration {path}: {unpacked} bytes of arrays, more than the "
            f"{MAX_FILE_BYTES >> 30} GiB calibration reads: give fewer samples"
        )
    try:
        with np.load(path, allow_pickle=False) as arrays:
            loaded = {name: arrays[name] for name in arrays.files}
    except Exception as error:  # numpy's format errors share no base class
        raise Unsupported(f"--calibration {path}: not a readable .npz ({error}): {fix}") from None
    missing = sorted(set(like) - set(loaded))
    unknown = sorted(set(loaded) - set(like))
    if missing or unknown:
        said = "; ".join(
            part
            for part in (
                f"no array for {', '.join(missing)}" if missing else "",
                f"no input named {', '.join(unknown)}" if unknown else "",
            )
            if part
        )
        raise Unsupported(f"--calibration {path}: {said}: {fix}")
    counts = set()
    for name, array in loaded.items():
        example = like[name]
        kind = "floating" if example.is_floating_point() else "integer"
        fits = np.issubdtype(array.dtype, np.floating if kind == "floating" else np.integer)
        if array.ndim != example.dim() + 1 or not fits:
            raise Unsupported(
                f"--calibration {path}: array `{name}` is {array.dtype} of shape "
                f"{list(array.shape)}; the model takes {kind} of rank {example.dim()}, so "
                f"the file's must be rank {example.dim() + 1} (a leading sample axis): {fix}"
            )
        counts.add(array.shape[0])
    if len(counts) != 1 or 0 in counts:
        raise Unsupported(
            f"--calibration {path}: the arrays hold {sorted(counts)} samples: give each "
            "array the same, nonzero number of samples along its first axis"
        )
    return [
        {
            name: torch.from_numpy(np.ascontiguousarray(a[i])).to(like[name].dtype)
            for name, a in loaded.items()
        }
        for i in range(counts.pop())
    ]


def calibrate(session, params: Calibrate) -> CalibrateReply:
    import torch

    runners = {
        name: recording_runner(str(model.path), model.activations)
        for name, model in params.components.items()
    }
    if params.generation:
        samples = calibrate_generation(session, params, runners)
    else:
        if params.reference is None:
            raise Unsupported(
                "--quantize int8-static: the trace wrote no eager reference whose inputs "
                "calibration varies: give --calibration FILE"
            )
        reference = load_reference(params.reference)["inputs"]
        like = dict(named_leaves(reference))
        if params.inputs is not None:
            inputs = file_samples(str(params.inputs), like)
        else:
            inputs = varied(like, params.samples)
        ((run, _),) = runners.values()
        with torch.no_grad():
            for sample in inputs:
                try:
                    run(sample)
                except Exception as error:  # onnxruntime's errors share no base class
                    if params.inputs is None:
                        raise
                    raise Unsupported(
                        f"--calibration {params.inputs}: ONNX Runtime refuses a sample "
                        f"({str(error).strip().splitlines()[0]}): give arrays of the sizes the "
                        "model takes"
                    ) from None
        samples = len(inputs)
    return CalibrateReply(
        components=[
            CalibratedComponent(name=name, ranges=ranges.measured())
            for name, (_, ranges) in runners.items()
        ],
        samples=samples,
    )


def calibrate_generation(session, params, runners):
    """Generates from each calibration prompt with the calibration models in
    place of the components; the number of prompts."""
    import torch

    from .generation import Components, generation_config, left_padded
    from .verify import component_runner

    generation = session.generation
    if generation is None:
        raise ValueError("calibrate: no components were captured in this worker")
    model, prompt = generation.model, generation.prompt
    if params.inputs is not None:
        like = {k: v for k, v in prompt.items() if torch.is_tensor(v)}
        # A mask of ones is left-padded as the captured prompt was: `generate`
        # drops such a mask, and the components take one.
        prompts = [
            left_padded(model, {**prompt, **sample})
            if bool((sample.get("attention_mask", torch.zeros(1)) == 1).all())
            else {**prompt, **sample}
            for sample in file_samples(str(params.inputs), like)
        ]
    else:
        tensors = {k: v for k, v in prompt.items() if torch.is_tensor(v)}
        prompts = [prompt] + [
            left_padded(model, {**prompt, **sample})
            for sample in varied(tensors, params.samples)[1:]
        ]
    component_runners = {}
    for name, (run, _) in runners.items():
        traced = generation.traced.get(name)
        if traced is None:
            raise ValueError(f"calibrate: component `{name}` was not traced in this worker")
        component_runners[name], _ = component_runner(None, traced, run=run)
    # A component without MatMuls to calibrate still runs, as exported.
    missing = [name for name in generation.components if name not in component_runners]
    if missing:
        raise ValueError(f"calibrate: no calibration model for {', '.join(missing)}")
    config = generation_config(model, max(params.steps, 1), generation.max_cache_len)
    for sample in prompts:
        # One `generate` per Components: its first forward call is the prefill.
        components = Components(model, component_runners, generation.modules)
        with torch.no_grad(), components.in_place():
            model.generate(**copy.deepcopy(sample), generation_config=config)
    return len(prompts)
