"""Model functions for `hfx run --model-fn python:hfx_test_models:NAME` in the tests."""

import os
import sys

import torch


class Doubler(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


def doubler():
    return Doubler(), {"x": torch.randn(3, 4)}


def raises():
    raise ValueError("this model cannot be built (on purpose)")


def crashes():
    print("about to crash", file=sys.stderr, flush=True)
    import os

    os._exit(3)


class UsesWhere(torch.nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, -x) * 2


def uses_where():
    return UsesWhere(), {"x": torch.randn(3, 4)}


class WhereThenFails(torch.nn.Module):
    """Runs eagerly; fails under torch.export, after the patched call."""

    def forward(self, x):
        y = torch.where(x > 0, x, -x)
        if torch.compiler.is_exporting():
            raise RuntimeError("fails after the patched call (on purpose)")
        return y


def where_then_fails():
    return WhereThenFails(), {"x": torch.randn(3, 4)}


def where_six_rows():
    """`torch.where` on 6 rows: the hostile patch's attempt to call a tensor's bound method."""
    return UsesWhere(), {"x": torch.randn(6, 4)}


# `torch.where` on 1, 2 or 3 rows: the hostile-reach plugin's attempts to reach
# a shell or a file writer through paths that pass the host's string check.
def where_rows_1():
    return UsesWhere(), {"x": torch.randn(1, 4)}


def where_rows_2():
    return UsesWhere(), {"x": torch.randn(2, 4)}


def where_rows_3():
    return UsesWhere(), {"x": torch.randn(3, 4)}


class ReluSilu(torch.nn.Module):
    """`relu` and `silu`: what the test plugins' self-test cases are cut from."""

    def forward(self, x):
        return torch.nn.functional.relu(x) + torch.nn.functional.silu(x)


def relu_silu():
    torch.manual_seed(0)
    return ReluSilu(), {"x": torch.randn(3, 5)}


class LogAddExp(torch.nn.Module):
    """`logaddexp`: no shipped translation declares it; torch's default table decomposes it."""

    def forward(self, x, y):
        return torch.logaddexp(x, y) * 2


def logaddexp():
    torch.manual_seed(0)
    return LogAddExp(), {"x": torch.randn(2, 8), "y": torch.randn(2, 8)}


class Histogram(torch.nn.Module):
    """`histc`: neither a shipped translation nor torch's default table has it."""

    def forward(self, x):
        return torch.histc(x, bins=4, min=-1.0, max=1.0)


def histogram():
    torch.manual_seed(0)
    return Histogram(), {"x": torch.randn(2, 8)}


class ChunkedScan(torch.nn.Module):
    """Pads the sequence to a multiple of 4 and cuts the padding off after, as
    chunked state-space scans do: at a traced length that is a multiple of 4
    the cut is not traced, and torch.export's guard on `length % 4` is all
    that says so (no range constraint, nothing in the artifact)."""

    def forward(self, x):
        pad = (4 - x.shape[1] % 4) % 4
        padded = torch.nn.functional.pad(x, (0, pad))
        chunks = padded.reshape(x.shape[0], -1, 4).cumsum(-1).reshape(x.shape[0], -1)
        if pad > 0:
            chunks = chunks[:, : x.shape[1]]
        return chunks


def chunked_scan():
    torch.manual_seed(0)
    return ChunkedScan(), {"x": torch.randn(2, 8)}


class Sorts(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=-1).values * 2


def sorts():
    """An op ExecuTorch's portable runtime has no kernel for (`aten.sort`)."""
    return Sorts(), {"x": torch.randn(3, 4)}


class AddsItsLength(torch.nn.Module):
    def forward(self, x):
        # With a dynamic sequence, `x.shape[1]` is a size (a SymInt) where
        # `add.Tensor` takes a tensor, and `/` one where `div.Tensor` does.
        positions = torch.arange(x.shape[1], dtype=torch.float32)
        return x + x.shape[1] + positions / x.shape[1]


def adds_its_length():
    """Sizes used as tensors: ExecuTorch writes each into a 0-dim tensor (`scalar_tensor`)."""
    return AddsItsLength(), {"x": torch.randn(2, 5)}


def raises_on_an_undecodable_path():
    # A file name that is not UTF-8, as Python gives it (`surrogateescape`).
    path = os.fsdecode(b"/models/caf\xe9/config.json")
    raise FileNotFoundError("no such file: " + path)
