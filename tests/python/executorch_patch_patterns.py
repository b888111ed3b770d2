"""Modules holding the patterns the ExecuTorch patch plugins rewrite
(`plugins/executorch/patch-*`), for `hfx run --model-fn
python:executorch_patch_patterns:NAME`. Each function returns `(module, inputs)`.

Run as a script, it checks what `--verify` cannot: `bernoulli-draws PTE`
runs the bernoulli pattern's `.pte` on probabilities of 0.5 in the ExecuTorch
runtime and checks that its draws are 0s and 1s, and both.
"""

import sys

import torch
import torch.nn.functional as F


def _pair(module, **inputs):
    return module.eval(), inputs


class AdaptivePools(torch.nn.Module):
    """Pooled to sizes that do not divide the input's (windows that overlap),
    that divide it (a plain average pool), and with `None` (the input's size)."""

    def __init__(self):
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool2d((3, 4))

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (4, 3)), self.pool(x), F.adaptive_avg_pool2d(x, (None, 2))


def adaptive_pools():
    return _pair(AdaptivePools(), x=torch.randn(2, 3, 6, 8))


class CumulativeExtremum(torch.nn.Module):
    def forward(self, x):
        high = torch.cummax(x, dim=1)
        low = x.cummin(0)
        return high.values, high.indices, low.values, low.indices


def cumulative_extremum():
    return _pair(CumulativeExtremum(), x=torch.randn(3, 6))


class Bernoulli(torch.nn.Module):
    """Every form of `bernoulli`. The sample's probabilities are 0 and 1, so the
    draws are certain and the `.pte` can be compared with eager; the same
    program on probabilities of 0.5 draws at random (`bernoulli-draws`)."""

    def forward(self, probabilities, x):
        return (
            torch.bernoulli(probabilities),
            x.bernoulli(1.0),
            torch.bernoulli(x, p=0.0),
            probabilities * 2,
        )


def bernoulli():
    certain = (torch.arange(64) % 3 == 0).to(torch.float32).reshape(4, 16)
    return _pair(Bernoulli(), probabilities=certain, x=torch.randn(4, 16))


class Expands(torch.nn.Module):
    """Two expands that broadcast (a dim of 1, a new leading dim) and one that
    does not (`-1` keeps the input's size)."""

    def forward(self, column, table):
        wide = column.expand(3, 4)
        stacked = column[None].expand((2, 3, 4))
        same = table.expand(-1, 4)
        return wide + same, stacked * 2


def expands():
    return _pair(Expands(), column=torch.randn(3, 1), table=torch.randn(3, 4))


class Detaches(torch.nn.Module):
    """Detaches between layers XNNPACK runs, as a model's (no-op) detach sits."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.second = torch.nn.Linear(8, 4)

    def forward(self, x):
        hidden = torch.relu(self.first(x))
        return self.second(torch.detach(hidden)) + self.second(hidden.detach())


def detaches():
    torch.manual_seed(0)
    return _pair(Detaches(), x=torch.randn(2, 8))


class DataDependentAttention(torch.nn.Module):
    """Attention over the images a mask keeps (the VLM vision-tower pattern):
    query, key, value and the attention mask have a data-dependent batch.
    A boolean mask with a row masked at every key, and causal grouped-query
    attention with no mask."""

    def forward(self, x, mask, keep):
        images = x[keep]
        masked = F.scaled_dot_product_attention(images, images, images, attn_mask=mask[keep])
        grouped = F.scaled_dot_product_attention(
            images, images[:, :1], images[:, :1], is_causal=True, enable_gqa=True
        )
        return masked, grouped


def data_dependent_attention():
    torch.manual_seed(0)
    mask = torch.ones(4, 1, 8, 8, dtype=torch.bool).tril()
    mask[2, :, 3] = False
    return _pair(
        DataDependentAttention(),
        x=torch.randn(4, 2, 8, 16),
        mask=mask,
        keep=torch.tensor([True, False, True, True]),
    )


class SortedSearch(torch.nn.Module):
    """`searchsorted` on both sides, to int64 and int32, and `bucketize`."""

    def forward(self, boundaries, x):
        left = torch.searchsorted(boundaries, x)
        right = torch.searchsorted(boundaries, x, right=True, out_int32=True)
        buckets = torch.bucketize(x, boundaries, right=True)
        return left, right, buckets


def sorted_search():
    # Integer-valued floats: ties exercise `right`.
    generator = torch.Generator().manual_seed(2)
    return _pair(
        SortedSearch(),
        boundaries=torch.arange(-3.0, 4.0),
        x=torch.randint(-5, 6, (2, 8), generator=generator).float(),
    )


def bernoulli_draws(pte):
    """The bernoulli pattern's `.pte` on probabilities of 0.5: random 0s and 1s."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    _, inputs = bernoulli()
    halves = torch.full_like(inputs["probabilities"], 0.5)
    draws, ones, zeros, _ = method.execute([halves, inputs["x"]])
    values = set(draws.unique().tolist())
    if values != {0.0, 1.0}:
        raise SystemExit(
            f"bernoulli(probabilities) at p=0.5 drew {sorted(values)}, not both 0 and 1"
        )
    if not (torch.all(ones == 1) and torch.all(zeros == 0)):
        raise SystemExit("bernoulli with p=1 / p=0 drew other values")
    print(f"ok: {int(draws.sum())} ones of {draws.numel()} draws at p=0.5")


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    {"bernoulli-draws": bernoulli_draws}[command](*arguments)
