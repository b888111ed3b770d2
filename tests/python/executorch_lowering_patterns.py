"""Modules holding the patterns the reference's patches of ExecuTorch's own
lowering are for (transformers 5.24, `exporter_executorch.py`, stage 3), for
`hfx run --backend executorch --delegate xnnpack --model-fn
python:executorch_lowering_patterns:NAME`. hfx answers them in the worker's
lowering (`host/worker/hfx_worker/lower.py`) or needs no answer; each
function returns `(module, inputs)`.

Run as a script, `unanswered NAME [--dynamic] EXPECTED` is the negative
control of an answer in the worker: it lowers the pattern with ExecuTorch's
own `to_edge_transform_and_lower` and XNNPACK partitioner, as the reference
does but without its patches and without hfx's lowering, and fails unless
that lowering fails with an error holding `EXPECTED`.
"""

import sys

import torch
import torch.nn.functional as F


def _pair(module, **inputs):
    return module.eval(), inputs


class ReturnedWithItsCopy(torch.nn.Module):
    """A value returned with its copy (Clvp's mel-attention residual,
    PerceptionLM's eval-mode dropout of a returned hidden state): both cross
    the XNNPACK partition's boundary."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x)
        return y, y.clone()


def returned_with_its_copy():
    return _pair(ReturnedWithItsCopy(), x=torch.randn(2, 4, 8))


class PreluOfEveryRank(torch.nn.Module):
    """PReLU on a transformer's 3-D activations (DAB-DETR) and on a
    convolution's 4-D output."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.act = torch.nn.PReLU()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.channel_act = torch.nn.PReLU(4)

    def forward(self, x, image):
        return self.act(self.linear(x)), self.channel_act(self.conv(image))


def prelu_of_every_rank():
    return _pair(PreluOfEveryRank(), x=torch.randn(2, 4, 8), image=torch.randn(1, 3, 6, 6))


class PaddedWithNegativeInfinity(torch.nn.Module):
    """Scores padded with `-inf` before a softmax (MiniMax-M3's indexer block
    padding): the pad's value is a constant of the XNNPACK graph."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        scores = F.pad(self.linear(x), (0, 3), value=float("-inf"))
        return torch.softmax(scores, dim=-1)


def padded_with_negative_infinity():
    return _pair(PaddedWithNegativeInfinity(), x=torch.randn(2, 4, 8))


class DataDependentLength(torch.nn.Module):
    """A slice to a length read from a tensor (Splinter's question tokens):
    the result's strides hold the data-dependent length (`8*u0`, `8`, `1`),
    and torch.export checks the length with runtime asserts."""

    def forward(self, x, n):
        length = n.item()
        torch._check(length >= 1)
        torch._check(length <= x.shape[1])
        return x[:, :length] * 2


def data_dependent_length():
    return _pair(DataDependentLength(), x=torch.randn(2, 6, 8), n=torch.tensor(3))


class SymFunctions(torch.nn.Module):
    """`torch.sym_ite`, `torch.sym_not`, `torch.sym_int` and `torch.sym_float`
    on dynamic sizes, which torch.export records as the Python functions."""

    def forward(self, x, y):
        a, b = x.shape[1], y.shape[1]
        larger = torch.sym_ite(a > b, a, b)
        half = torch.sym_int(torch.sym_float(a) / 2)
        differ = torch.sym_not(a == b)
        return x[:, :half] * larger, torch.full((2, 1), differ)


def sym_functions():
    return _pair(SymFunctions(), x=torch.randn(2, 6), y=torch.randn(2, 3))


class CatOfSelections(torch.nn.Module):
    """A concatenation of data-dependent selections, any of which may be
    empty (MoE experts' tokens): each input's size is `8*u`."""

    def forward(self, x, keep):
        return torch.cat([x[keep], x[~keep], x[:1]], dim=0) * 2


def cat_of_selections():
    keep = torch.tensor([True, False, True, True, False])
    return _pair(CatOfSelections(), x=torch.randn(5, 8), keep=keep)


class PositionsOnTheInputGrid(torch.nn.Module):
    """A position embedding reshaped to the image's patch grid, read from the
    input (Pvt, DepthPro, VitDet): a view with dynamic sizes of a static
    parameter."""

    def __init__(self):
        super().__init__()
        self.positions = torch.nn.Parameter(torch.randn(1, 16, 8))
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, patches):
        height, width = patches.shape[1], patches.shape[2]
        grid = self.positions.reshape(1, height, width, -1)
        return self.linear(patches + grid)


def positions_on_the_input_grid():
    return _pair(PositionsOnTheInputGrid(), patches=torch.randn(1, 4, 4, 8))


class ComplexRotation(torch.nn.Module):
    """A rotary embedding computed on complex values (DeepSeek-V2, Llama 4):
    pairs of features as complex numbers, rotated by `polar` frequencies."""

    def forward(self, x):
        angles = torch.arange(16.0).reshape(4, 4) * 0.1
        frequencies = torch.polar(torch.ones(4, 4), angles)
        pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * frequencies.unsqueeze(0)).flatten(-2)


def complex_rotation():
    return _pair(ComplexRotation(), x=torch.randn(2, 4, 8))


def unanswered(name, dynamic, expected):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    module, inputs = globals()[name]()
    shapes = None
    if dynamic:
        auto = torch.export.Dim.AUTO
        shapes = {k: {i: auto for i in range(v.dim())} for k, v in inputs.items()}
    program = torch.export.export(module, (), inputs, dynamic_shapes=shapes)
    try:
        to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
    except Exception as e:  # noqa: BLE001 - any failure is reported, the expected one passes
        message = f"{type(e).__name__}: {e}"
        if expected not in message:
            sys.exit(f"{name}: ExecuTorch's lowering fails, but not with `{expected}`: {message}")
        print(f"{name}: ExecuTorch's own lowering fails: {message.splitlines()[0][:200]}")
        return
    sys.exit(f"{name}: ExecuTorch's own lowering succeeds, so hfx's answer proves nothing")


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "unanswered":
        sys.exit("usage: executorch_lowering_patterns.py unanswered NAME [--dynamic] EXPECTED")
    args = sys.argv[2:]
    unanswered(args[0], "--dynamic" in args, args[-1])
