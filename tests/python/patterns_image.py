"""Image-op patterns for `hfx run --model-fn python:patterns_image:NAME`:
padding, pooling, resizing, grid sampling and col2im, each function a module
running several argument variants of its ops (the cases torch's OpInfo
samples exercise) and its sample inputs."""

import torch

F = torch.nn.functional


class Calls(torch.nn.Module):
    """Runs each call on the inputs it names; the outputs, in order."""

    def __init__(self, calls):
        super().__init__()
        self.calls = calls

    def forward(self, **inputs):
        return tuple(call(inputs) for call in self.calls)


def calls(*calls, **inputs):
    torch.manual_seed(0)
    return Calls(list(calls)), {name: make() for name, make in inputs.items()}


def ints(*shape, dtype=torch.int64, low=-9, high=10):
    return lambda: torch.randint(low, high, shape, dtype=dtype)


def floats(*shape):
    """float32: hfx casts floating inputs to `--dtype`, so other float dtypes are cast in the module."""
    return lambda: torch.randn(*shape)


H, BF, D = torch.float16, torch.bfloat16, torch.float64


# ── Padding ──


def constant_pad():
    """`constant_pad_nd`: 1 to 3 padded axes, negative pads (crops), values, dtypes."""
    return calls(
        # first the ones the self-test captures: crops, a value, an int tensor
        lambda i: F.pad(i["x"], (-1, 2, 1, -1)),
        lambda i: F.pad(i["x"], (2, -3), value=float("-inf")),
        lambda i: F.pad(i["n"], (1, 2, 0, 1), value=7),
        lambda i: F.pad(i["x"], (1, 2)),
        lambda i: F.pad(i["x"], (0, 2, 0, 1), value=1.5),
        lambda i: F.pad(i["x"], (1, 1, 1, 1, 1, 1), value=-2.0),
        lambda i: F.pad(i["b"], (1, 1), value=True),
        lambda i: F.pad(i["h"].to(H), (2, 1, 1, 0), value=0.25),
        lambda i: F.pad(i["s"], (1, 2), value=3),
        lambda i: F.pad(i["x"], (0, 0)),
        lambda i: F.pad(i["x"].to(BF), (1, 2, 2, 1), value=0.5).float(),
        lambda i: F.pad(i["x"].to(D), (1, 0, 0, 3), value=-1.0),
        x=floats(2, 3, 4, 5),
        n=ints(2, 3, 4),
        b=lambda: torch.rand(2, 3) > 0.5,
        h=floats(2, 3, 4),
        s=ints(2, 4, dtype=torch.int16),
    )


class PadToMultiple(torch.nn.Module):
    """Pads the last axis to a multiple of 4: the amount is symbolic under --dynamic."""

    def forward(self, x):
        return F.pad(x, (0, (4 - x.shape[-1] % 4) % 4), value=-1.0)


def pad_to_multiple():
    torch.manual_seed(0)
    return PadToMultiple(), {"x": torch.randn(2, 3, 7)}


def pad_between_transposes():
    """A pad between two transposes (ConvBERT's span convolution unfolds a
    transposed value): ONNX Runtime's transpose optimizer moves the
    transposes through a `Pad` but permutes its `pads` as if they covered
    every axis, so plugins/onnx/translate-padding writes them for every axis
    (no `axes` input). Constant and symbolic (under --dynamic) amounts."""
    return calls(
        lambda i: F.pad(i["x"].transpose(1, 2), (1, 1)).transpose(1, 2),
        lambda i: F.pad(i["x"].transpose(1, 2).unsqueeze(-1), (0, 0, 1, 1)).permute(2, 3, 0, 1),
        lambda i: F.pad(i["x"].transpose(1, 2), (2, -1), value=0.5).transpose(1, 2),
        lambda i: F.pad(i["x"].transpose(1, 2), (1, 2), mode="reflect").transpose(1, 2),
        lambda i: F.pad(i["x"].transpose(1, 2), (0, (4 - i["x"].shape[1] % 4) % 4)).transpose(1, 2),
        x=floats(2, 7, 6),
    )


def reflection_pad():
    """`reflection_pad{1,2,3}d`, batched and unbatched, float and int."""
    return calls(
        lambda i: F.pad(i["x1"], (2, 3), mode="reflect"),
        lambda i: F.pad(i["x1"][0], (1, 0), mode="reflect"),
        lambda i: F.pad(i["x2"], (1, 2, 3, 0), mode="reflect"),
        lambda i: F.pad(i["x2"][0], (2, 2, 1, 1), mode="reflect"),
        lambda i: F.pad(i["x3"], (1, 2, 0, 1, 2, 1), mode="reflect"),
        lambda i: F.pad(i["n2"], (1, 2, 3, 2), mode="reflect"),
        lambda i: F.pad(i["x2"].to(H), (1, 1, 1, 1), mode="reflect"),
        lambda i: F.pad(i["x2"].to(BF), (1, 1, 1, 1), mode="reflect").float(),
        lambda i: F.pad(i["x2"].to(D), (2, 0, 0, 1), mode="reflect"),
        x1=floats(2, 3, 6),
        x2=floats(2, 3, 5, 6),
        x3=floats(1, 2, 3, 4, 5),
        n2=ints(2, 3, 4, 5),
    )


def replication_pad():
    """`replication_pad{1,2,3}d`, batched and unbatched, float and int."""
    return calls(
        lambda i: F.pad(i["x1"], (2, 3), mode="replicate"),
        lambda i: F.pad(i["x1"][0], (0, 4), mode="replicate"),
        lambda i: F.pad(i["x2"], (1, 2, 3, 0), mode="replicate"),
        lambda i: F.pad(i["x2"][0], (5, 5, 1, 1), mode="replicate"),
        lambda i: F.pad(i["x3"], (1, 2, 0, 1, 2, 1), mode="replicate"),
        lambda i: F.pad(i["x3"], (-1, 2, 1, -1, 0, 1), mode="replicate"),
        lambda i: F.pad(i["n2"], (1, 2, 3, 2), mode="replicate"),
        lambda i: F.pad(i["x2"].to(BF), (1, 1, 0, 2), mode="replicate").float(),
        lambda i: F.pad(i["x2"].to(H), (0, 1, 2, 2), mode="replicate"),
        lambda i: F.pad(i["x2"].to(D), (3, 1, 0, 2), mode="replicate"),
        lambda i: F.pad(i["u1"], (2, 1), mode="replicate"),
        x1=floats(2, 3, 6),
        x2=floats(2, 3, 5, 6),
        x3=floats(1, 2, 3, 4, 5),
        n2=ints(2, 3, 4, 5, dtype=torch.int32),
        u1=ints(2, 3, 4, dtype=torch.uint8, low=0, high=255),
    )


# ── Pooling ──


def avg_pool():
    """`avg_pool{1,2,3}d`: kernels, strides, padding, ceil_mode (a last window
    starting in the padding is dropped), count_include_pad, divisor_override, dtypes."""
    return calls(
        lambda i: F.avg_pool2d(i["x"], 3),
        lambda i: F.avg_pool2d(i["x"], (3, 2), (2, 1), (1, 0)),
        lambda i: F.avg_pool2d(i["x"], 2, 3, 1, ceil_mode=True),
        lambda i: F.avg_pool2d(i["x"], 3, 2, 1, ceil_mode=True, count_include_pad=False),
        lambda i: F.avg_pool2d(i["x"], (2, 3), (3, 2), (1, 1), ceil_mode=True, divisor_override=2),
        lambda i: F.avg_pool2d(i["x"], 2, 1, 1, divisor_override=-3),
        lambda i: F.avg_pool2d(i["x"][0], 3, 2, 1, ceil_mode=True),
        lambda i: F.avg_pool2d(i["x"], (2, 1), (2, 2), ceil_mode=True),
        lambda i: F.avg_pool2d(i["n"], 2, 2, 1, ceil_mode=True),
        lambda i: F.avg_pool2d(i["n"], 3, 1, 1, divisor_override=2),
        lambda i: F.avg_pool2d(i["n"], (2, 3), 2, 1, ceil_mode=True, divisor_override=-4),
        lambda i: F.avg_pool2d(i["x"].to(H), 3, 2, 1),
        lambda i: F.avg_pool2d(i["x"].to(BF), 2).float(),
        lambda i: F.avg_pool2d(i["x"].to(D), 3, 2, 1, count_include_pad=False),
        lambda i: F.avg_pool3d(
            i["v"], (2, 3, 4), (1, 2, 2), (0, 1, 2), ceil_mode=True, divisor_override=2
        ),
        lambda i: F.avg_pool3d(i["v"], (2, 3, 4), (1, 2, 2), (0, 1, 2)),
        lambda i: F.avg_pool3d(i["v"], 2, 1, 1, ceil_mode=True, count_include_pad=False),
        lambda i: F.avg_pool3d(i["v"][0], (4, 5, 5), (2, 3, 2), 2, ceil_mode=True),
        lambda i: F.avg_pool1d(i["x"][0], 3, 1, 1, ceil_mode=True, count_include_pad=False),
        lambda i: F.avg_pool1d(i["x"][0], 6, 3, 2, ceil_mode=True),
        lambda i: F.avg_pool1d(i["x"][0, 0], 4, 3, 2, ceil_mode=True),
        x=floats(2, 3, 9, 8),
        n=ints(2, 3, 7, 6),
        v=floats(1, 2, 5, 6, 7),
    )


def max_pool():
    """`max_pool{2,3}d_with_indices`: kernels, strides, -inf padding,
    dilation, ceil_mode, indices per (n, c) plane, float and int dtypes."""
    return calls(
        lambda i: F.max_pool2d(i["x"], 3, return_indices=True),
        lambda i: F.max_pool2d(i["x"], (3, 2), (2, 1), (1, 0), return_indices=True),
        lambda i: F.max_pool2d(i["x"], 3, 2, 1, dilation=2, ceil_mode=True, return_indices=True),
        lambda i: F.max_pool2d(i["x"], 2, 3, 1, ceil_mode=True, return_indices=True),
        lambda i: F.max_pool2d(i["x"], 2, 2, 1, dilation=3, ceil_mode=True, return_indices=True),
        lambda i: F.max_pool2d(i["x"][0], 3, 2, 1, return_indices=True),
        # ceil_mode keeping a window on one axis and dropping one on the other
        lambda i: F.max_pool2d(i["x"], (2, 1), (2, 2), ceil_mode=True, return_indices=True),
        lambda i: F.max_pool2d(i["x"], (1, 3), (3, 2), ceil_mode=True, return_indices=True),
        lambda i: F.max_pool2d(-i["x"].abs(), 3, 2, 1),
        lambda i: F.max_pool2d(i["n"], 2, return_indices=True),
        lambda i: F.max_pool2d(
            i["n"].to(torch.int32), 3, 2, 1, ceil_mode=True, return_indices=True
        ),
        lambda i: F.max_pool2d(i["n"].to(torch.int16), 2, 1, return_indices=True),
        lambda i: F.max_pool2d(i["n"].to(torch.int8), (2, 3), return_indices=True),
        lambda i: F.max_pool2d((i["n"] + 9).to(torch.uint8), 3, 1, 1, return_indices=True),
        lambda i: F.max_pool2d(i["x"].to(H), 3, 2, 1, return_indices=True),
        lambda i: F.max_pool2d(i["x"].to(BF), 2).float(),
        lambda i: F.max_pool2d(i["x"].to(D), 3, 2, 1, return_indices=True),
        lambda i: F.max_pool3d(i["v"], (2, 3, 4), (1, 2, 2), (0, 1, 2), return_indices=True),
        lambda i: F.max_pool3d(
            i["v"], 3, 2, 1, dilation=(1, 2, 1), ceil_mode=True, return_indices=True
        ),
        lambda i: F.max_pool3d(i["v"][0], 2, return_indices=True),
        lambda i: F.max_pool3d(i["v"], (2, 2, 1), (2, 2, 4), ceil_mode=True, return_indices=True),
        lambda i: F.max_pool1d(i["x"][0], 3, 2, 1, ceil_mode=True, return_indices=True),
        x=floats(2, 3, 9, 8),
        n=ints(2, 3, 7, 6),
        v=floats(1, 2, 5, 6, 7),
    )


def adaptive_avg_pool():
    """Adaptive average pooling: windows that tile the input, that do not
    (torch's floor/ceil bounds), to 1, `None` (the input's size), unbatched."""
    return calls(
        lambda i: F.adaptive_avg_pool2d(i["x"], (5, 7)),
        lambda i: F.adaptive_avg_pool2d(i["x"][0], (5, 7)),
        lambda i: F.adaptive_avg_pool2d(i["x"], (None, 4)),
        lambda i: F.adaptive_avg_pool2d(i["x"], (4, None)),
        lambda i: F.adaptive_avg_pool2d(i["x"], 1),
        lambda i: F.adaptive_avg_pool2d(i["x"], (4, 3)),
        lambda i: F.adaptive_avg_pool2d(i["x"], (2, 10)),
        lambda i: F.adaptive_avg_pool2d(i["x"].to(D), (3, 4)),
        lambda i: F.adaptive_avg_pool2d(i["x"].to(H), (3, 4)),
        lambda i: F.adaptive_avg_pool2d(i["x"].to(BF), 2).float(),
        lambda i: F.adaptive_avg_pool3d(i["v"], (5, 7, None)),
        lambda i: F.adaptive_avg_pool3d(i["v"][0], (None, 3, 2)),
        lambda i: F.adaptive_avg_pool3d(i["v"], 1),
        lambda i: F.adaptive_avg_pool3d(i["v"], (2, 3, 3)),
        lambda i: F.adaptive_avg_pool1d(i["x"][0], 5),
        lambda i: F.adaptive_avg_pool1d(i["x"][0], 1),
        x=floats(2, 3, 8, 6),
        v=floats(2, 3, 8, 6, 9),
    )


# ── Resizing, grid sampling, col2im ──


def upsample_nearest():
    """`upsample_nearest{1,2,3}d`: output sizes and scale factors (up and
    down, not integers), torch's floor of `dst * in / out`, dtypes."""
    return calls(
        lambda i: F.interpolate(i["x"], scale_factor=2),
        lambda i: F.interpolate(i["x"], size=(7, 13)),
        lambda i: F.interpolate(i["x"], size=(3, 4)),
        lambda i: F.interpolate(i["x"], scale_factor=(1.7, 0.6)),
        lambda i: F.interpolate(i["x"].to(H), scale_factor=(2, 3)),
        lambda i: F.interpolate(i["x"].to(D), size=(9, 5)),
        lambda i: F.interpolate(i["x"].to(BF), scale_factor=1.5).float(),
        lambda i: F.interpolate(i["u"], size=(7, 9)),
        lambda i: torch.nn.Upsample(scale_factor=3)(i["x"]),
        lambda i: F.interpolate(i["x"][:, :, 0], scale_factor=2.3),
        lambda i: F.interpolate(i["x"][:, :, 0], size=11),
        lambda i: F.interpolate(i["v"], scale_factor=(2, 1.5, 0.5)),
        lambda i: F.interpolate(i["v"], size=(3, 9, 7)),
        x=floats(2, 3, 5, 6),
        v=floats(1, 2, 3, 4, 5),
        u=ints(2, 3, 5, 6, dtype=torch.uint8, low=0, high=255),
    )


def upsample_recomputed():
    """Scale factors turned into sizes (`recompute_scale_factor`); under
    --dynamic that is `torch.sym_float` arithmetic, which no plugin translates yet."""
    return calls(
        lambda i: F.interpolate(i["x"], scale_factor=2.5, recompute_scale_factor=True),
        lambda i: F.interpolate(
            i["x"], scale_factor=(1.3, 0.7), mode="bilinear", recompute_scale_factor=True
        ),
        x=floats(2, 3, 5, 6),
    )


def upsample_linear():
    """`upsample_{linear1d,bilinear2d,trilinear3d,bicubic2d}`: sizes and
    scale factors, align_corners, one-pixel outputs, dtypes."""
    return calls(
        lambda i: F.interpolate(i["x"], scale_factor=2, mode="bilinear"),
        lambda i: F.interpolate(i["x"], scale_factor=2, mode="bilinear", align_corners=True),
        lambda i: F.interpolate(i["x"], size=(7, 13), mode="bilinear"),
        lambda i: F.interpolate(i["x"], size=(1, 3), mode="bilinear"),
        lambda i: F.interpolate(i["x"], size=(1, 3), mode="bilinear", align_corners=True),
        lambda i: F.interpolate(i["x"], scale_factor=(1.7, 0.6), mode="bilinear"),
        lambda i: F.interpolate(
            i["x"], scale_factor=(1.7, 0.6), mode="bilinear", align_corners=True
        ),
        lambda i: F.interpolate(i["x"].to(H), size=(9, 4), mode="bilinear"),
        lambda i: F.interpolate(i["x"].to(D), scale_factor=1.5, mode="bilinear"),
        lambda i: F.interpolate(i["x"].to(BF), size=(8, 8), mode="bilinear").float(),
        lambda i: F.interpolate(i["x"], scale_factor=2, mode="bicubic"),
        lambda i: F.interpolate(i["x"], size=(7, 13), mode="bicubic", align_corners=True),
        lambda i: F.interpolate(i["x"], scale_factor=(1.7, 0.6), mode="bicubic"),
        lambda i: F.interpolate(i["x"], size=(3, 2), mode="bicubic"),
        lambda i: F.interpolate(i["x"].to(H), size=(9, 4), mode="bicubic"),
        lambda i: F.interpolate(i["x"][:, :, 0], scale_factor=2.3, mode="linear"),
        lambda i: F.interpolate(i["x"][:, :, 0], size=11, mode="linear", align_corners=True),
        lambda i: F.interpolate(i["v"], scale_factor=(2, 1.5, 0.5), mode="trilinear"),
        lambda i: F.interpolate(i["v"], size=(3, 9, 7), mode="trilinear", align_corners=True),
        x=floats(2, 3, 5, 6),
        v=floats(1, 2, 3, 4, 5),
    )


def upsample_default():
    """The non-`.vec` overloads, given an output size."""
    aten = torch.ops.aten
    return calls(
        lambda i: aten.upsample_nearest2d.default(i["x"], [7, 13]),
        lambda i: aten.upsample_nearest3d.default(i["v"], [6, 6, 7]),
        lambda i: aten.upsample_bilinear2d.default(i["x"], [8, 3], True),
        lambda i: aten.upsample_trilinear3d.default(i["v"], [6, 6, 7], False),
        lambda i: aten.upsample_bicubic2d.default(i["x"], [9, 11], True),
        x=floats(2, 3, 5, 6),
        v=floats(1, 2, 3, 4, 5),
    )


def upsample_default_scaled():
    """The non-`.vec` overloads, given an output size and the scales torch maps
    coordinates with (static only: a fixed size with a scale on a symbolic
    input size is refused)."""
    aten = torch.ops.aten
    return calls(
        lambda i: aten.upsample_nearest2d.default(i["x"], [10, 9], 2.0, 1.5),
        lambda i: aten.upsample_nearest1d.default(i["x"][:, :, 0], [11], 1.9),
        lambda i: aten.upsample_bilinear2d.default(i["x"], [8, 3], False, 1.7, 0.6),
        lambda i: aten.upsample_linear1d.default(i["x"][:, :, 0], [13], False, 2.3),
        lambda i: aten.upsample_bicubic2d.default(i["x"], [8, 3], False, 1.7, 0.6),
        x=floats(2, 3, 5, 6),
    )


def upsample_antialias():
    """`_upsample_{bilinear,bicubic}2d_aa` (`antialias=True`): downscaling,
    upscaling, both at once, scale factors, align_corners, one-pixel outputs,
    float64 (torch has no float16 kernel), and DINOv2's position grid (37x37
    to 16x16)."""
    return calls(
        *[
            call
            for mode in ("bilinear", "bicubic")
            for call in (
                lambda i, m=mode: F.interpolate(i["x"], size=(4, 3), mode=m, antialias=True),
                lambda i, m=mode: F.interpolate(i["x"], size=(29, 40), mode=m, antialias=True),
                lambda i, m=mode: F.interpolate(i["x"], size=(5, 30), mode=m, antialias=True),
                lambda i, m=mode: F.interpolate(
                    i["x"], scale_factor=(0.45, 1.7), mode=m, antialias=True
                ),
                lambda i, m=mode: F.interpolate(
                    i["x"], size=(5, 6), mode=m, antialias=True, align_corners=True
                ),
                lambda i, m=mode: F.interpolate(
                    i["x"], size=(1, 1), mode=m, antialias=True, align_corners=True
                ),
                lambda i, m=mode: F.interpolate(i["x"], size=(1, 5), mode=m, antialias=True),
                lambda i, m=mode: F.interpolate(i["x"].to(D), size=(6, 25), mode=m, antialias=True),
                lambda i, m=mode: F.interpolate(i["p"], size=(16, 16), mode=m, antialias=True),
            )
        ],
        x=floats(2, 3, 13, 17),
        p=floats(1, 8, 37, 37),
    )


class UpsampleAntialiasToOther(torch.nn.Module):
    """Antialiased resampling to `y`'s spatial size: symbolic sizes under --dynamic."""

    def forward(self, x, y):
        return (
            F.interpolate(x, size=y.shape[-2:], mode="bilinear", antialias=True),
            F.interpolate(x, size=y.shape[-2:], mode="bicubic", antialias=True),
        )


def upsample_antialias_to_other():
    torch.manual_seed(0)
    return UpsampleAntialiasToOther(), {
        "x": torch.randn(2, 3, 13, 17),
        "y": torch.randn(2, 3, 5, 30),
    }


class UpsampleToOther(torch.nn.Module):
    """Resizes `x` to `y`'s spatial size: a symbolic output size under --dynamic."""

    def forward(self, x, y):
        return (
            F.interpolate(x, size=y.shape[-2:], mode="bilinear"),
            F.interpolate(x, size=y.shape[-2:]),
            F.interpolate(x, size=y.shape[-2:], mode="bicubic", align_corners=True),
        )


def upsample_to_other():
    torch.manual_seed(0)
    return UpsampleToOther(), {"x": torch.randn(2, 3, 5, 6), "y": torch.randn(2, 3, 9, 4)}


def grid_sample():
    """`grid_sampler_2d`: bilinear, nearest and bicubic, zeros/border/reflection
    padding, align_corners, a grid reaching outside the input, dtypes."""
    modes = [
        (m, p, a)
        for m in ("bilinear", "nearest", "bicubic")
        for p in ("zeros", "border", "reflection")
        for a in (False, True)
    ]
    return calls(
        *[
            lambda i, m=m, p=p, a=a: F.grid_sample(
                i["x"], i["g"], mode=m, padding_mode=p, align_corners=a
            )
            for m, p, a in modes
        ],
        # (not float16: torch's CPU kernel computes it in float16, ONNX Runtime in float32)
        lambda i: F.grid_sample(i["x"].to(D), i["g"].to(D), mode="bicubic", align_corners=True),
        x=floats(2, 3, 5, 6),
        g=lambda: torch.rand(2, 4, 7, 2) * 2.6 - 1.3,
    )


def col2im():
    """`col2im` (`F.fold`): kernels, dilation, padding, stride, unbatched."""
    return calls(
        lambda i: F.fold(i["c"], (4, 5), 2),
        lambda i: F.fold(i["c"][0], (4, 5), 2),
        lambda i: F.fold(i["d"], (6, 7), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
        lambda i: F.fold(i["d"].to(D), (6, 7), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
        c=floats(2, 12, 12),
        d=floats(2, 12, 20),
    )
