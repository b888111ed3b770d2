"""Model functions for the numeric translations (normalization, reductions,
random ops, distances): `hfx run --model-fn python:patterns_numeric:NAME`.

Each pattern calls the core ATen overload it checks (directly, where a Python
call would reach it only through a decomposition), with the argument variants
torch's OpInfo samples use. Random ops are checked by `random_*` patterns whose
outputs are deterministic functions of the random values (shapes, bounds,
permutation sums), so `--verify` can compare them with eager.
"""

import torch

aten = torch.ops.aten


class Lambda(torch.nn.Module):
    def __init__(self, fn, **buffers):
        super().__init__()
        self.fn = fn
        for name, value in buffers.items():
            self.register_buffer(name, value)

    def forward(self, **inputs):
        return self.fn(self, **inputs)


def _pattern(fn, buffers=None, **inputs):
    return Lambda(fn, **(buffers or {})), inputs


# ── Reductions ──


def prod_int():
    torch.manual_seed(0)
    return _pattern(
        lambda m, x, i: (
            aten.prod.default(x),
            aten.prod.dim_int(x, -1),
            aten.prod.dim_int(x, 0, True),
            aten.prod.default(i),
            aten.prod.dim_int(i, 1, dtype=torch.float32),
            aten.prod.dim_int(i.to(torch.int16), 1),
            aten.prod.dim_int(i > 1, 1, True),
            aten.prod.default(x, dtype=torch.float64),
            aten.prod.dim_int(x[0, 0], 0),
        ),
        x=torch.rand(3, 4) + 0.5,
        i=torch.randint(-3, 4, (3, 4)),
    )


def prod_half():
    torch.manual_seed(0)
    # Floating inputs arrive in the model's dtype (float32): half is made inside.
    return _pattern(
        lambda m, x: (aten.prod.dim_int(x.half(), 1), aten.prod.default(x[:, :3].half())),
        x=torch.rand(2, 5) + 0.5,
    )


def var_dims():
    torch.manual_seed(0)
    return _pattern(
        lambda m, x: (
            aten.var.dim(x, [1]),
            aten.var.dim(x, [0, -1], False, True),
            aten.var.dim(x, None),
            aten.var.correction(x),
            aten.var.correction(x, [-2], correction=0, keepdim=True),
            aten.var.correction(x, [0, 2], correction=2.5),
            aten.var.correction(x, [], correction=1),
            aten.var.correction(x[0, 0, 0]),
            aten.var.correction(x[:, :1], [1]),
        ),
        x=torch.randn(3, 4, 5),
    )


def var_half():
    torch.manual_seed(0)
    return _pattern(
        lambda m, x: (aten.var.correction(x.half(), [1]), aten.var.dim(x.half(), None, False)),
        x=torch.randn(3, 6),
    )


def max_min_dim():
    torch.manual_seed(0)
    # Ties: small integers repeat, and torch returns the first index.
    return _pattern(
        lambda m, x, i: (
            *aten.max.dim(x, 1),
            *aten.min.dim(x, -1, True),
            *aten.max.dim(i, 0),
            *aten.min.dim(i, 1),
            *aten.max.dim(i.to(torch.int16), 1),
            *aten.min.dim(i > 0, 0),
            *aten.max.dim(i.to(torch.uint8), -1, True),
            *aten.max.dim(x.to(torch.float64), 2),
            *aten.max.dim(x[0, 0, 0], 0),
            *aten.min.dim(x[0, 0, 0], -1, True),
        ),
        x=torch.randn(3, 4, 5),
        i=torch.randint(0, 3, (4, 6)),
    )


def max_min_nan():
    """A NaN in a slice is its max and min, at the first NaN's index (as torch)."""
    x = torch.tensor(
        [
            [2.0, float("nan"), -1.0, float("nan")],
            [float("nan"), 5.0, 0.0, 1.0],
            [1.0, 3.0, 3.0, -2.0],
        ]
    )
    return _pattern(
        lambda m, x: (
            *aten.max.dim(x, 1),
            *aten.min.dim(x, -1, True),
            *aten.max.dim(x, 0),
            *aten.min.dim(x.half(), 0),
        ),
        x=x,
    )


def max_min_half():
    torch.manual_seed(0)
    return _pattern(
        lambda m, x: (*aten.max.dim(x.half(), 1), *aten.min.dim(x.half(), 0, True)),
        x=torch.randn(3, 4),
    )


def max_min_all():
    """The extreme of every element (LongRoPE's `torch.max(position_ids)`), NaN
    when any element is NaN, of each dtype family."""
    torch.manual_seed(0)
    return _pattern(
        lambda m, x, i: (
            aten.max.default(x),
            aten.min.default(x),
            aten.max.default(i),
            aten.min.default(i.to(torch.int16)),
            aten.max.default(i > 1),
            aten.min.default(i.to(torch.uint8)),
            aten.max.default(x.half()),
            aten.min.default(x.to(torch.float64)),
            aten.max.default(torch.where(x > 1, float("nan"), x)),
            aten.min.default(x[0, 0]),
        ),
        x=torch.randn(3, 4),
        i=torch.randint(0, 5, (2, 6)),
    )


def embedding_bag_modes():
    torch.manual_seed(0)
    weight = torch.randn(10, 3)

    def fn(m, indices, offsets, ends):
        outs = []
        for mode in (0, 1, 2):
            outs += list(aten._embedding_bag.default(m.weight, indices, offsets, False, mode))
            outs += list(
                aten._embedding_bag.default(m.weight, indices, ends, False, mode, False, None, True)
            )
            outs += list(
                aten._embedding_bag.default(
                    m.weight, indices, offsets, False, mode, False, None, False, 2
                )
            )
            outs += list(
                aten._embedding_bag.default(
                    m.weight, indices, ends, False, mode, False, None, True, 4
                )
            )
        return tuple(outs)

    # An empty bag (offsets 2, 2), repeated rows, a bag of padding only (4, 4);
    # with include_last_offset the offsets end with the number of indices.
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 4, 4])
    return _pattern(
        fn,
        {"weight": weight},
        indices=indices,
        offsets=torch.tensor([0, 2, 2, 8]),
        ends=torch.tensor([0, 2, 2, 8, 10]),
    )


def embedding_bag_weighted():
    torch.manual_seed(0)

    def fn(m, indices, offsets, scale):
        a = aten._embedding_bag.default(m.weight, indices, offsets, False, 0, False, scale)
        b = aten._embedding_bag.default(
            m.weight, indices, offsets, False, 0, False, scale, False, 2
        )
        c = aten._embedding_bag.default(m.weight.double(), indices.int(), offsets, False, 2)
        d = aten._embedding_bag.default(m.weight.half(), indices, offsets, False, 1)
        return (*a, *b, *c, *d)

    return _pattern(
        fn,
        {"weight": torch.randn(7, 4)},
        indices=torch.tensor([0, 6, 2, 2, 5, 1]),
        offsets=torch.tensor([0, 1, 4]),
        scale=torch.rand(6),
    )


def embedding_bag_weighted_last():
    """include_last_offset with per-sample weights (offsets end at the number of indices)."""
    torch.manual_seed(0)

    def fn(m, indices, offsets, scale):
        return aten._embedding_bag.default(
            m.weight.double(), indices, offsets.int(), False, 0, False, scale.double(), True
        )

    return _pattern(
        fn,
        {"weight": torch.randn(7, 4)},
        indices=torch.tensor([0, 6, 2, 2, 5, 1]),
        offsets=torch.tensor([0, 1, 4, 6]),
        scale=torch.rand(6),
    )


def embedding_bag_module():
    """`nn.EmbeddingBag` (max, with a padding index), as models reach `_embedding_bag`."""
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(12, 5, mode="max", padding_idx=0)
    return bag, {"input": torch.tensor([[1, 0, 3], [0, 0, 0], [7, 8, 7]])}


# ── Normalization ──


def batch_norm_eval():
    """`BatchNorm` in eval mode → `_native_batch_norm_legit_no_training` (its CPU statistics are empty)."""
    torch.manual_seed(0)
    stats = {
        "mean": torch.randn(3),
        "var": torch.rand(3) + 0.5,
        "w": torch.randn(3),
        "b": torch.randn(3),
    }

    def fn(m, x, y):
        a = aten._native_batch_norm_legit_no_training.default(x, m.w, m.b, m.mean, m.var, 0.1, 1e-5)
        b = aten._native_batch_norm_legit_no_training.default(
            y, None, None, m.mean, m.var, 0.1, 1e-3
        )
        c = aten._native_batch_norm_legit.default(
            x, m.w, None, m.mean.clone(), m.var.clone(), False, 0.1, 1e-5
        )
        return (*a, *b, *c)

    return _pattern(fn, stats, x=torch.randn(2, 3, 4, 5), y=torch.randn(4, 3))


def batch_norm_train():
    """Batch statistics: `_native_batch_norm_legit` in training (with running stats) and `.no_stats`."""
    torch.manual_seed(0)
    stats = {
        "mean": torch.randn(3),
        "var": torch.rand(3) + 0.5,
        "w": torch.randn(3),
        "b": torch.randn(3),
    }

    def fn(m, x, y):
        a = aten._native_batch_norm_legit.default(
            x, m.w, m.b, m.mean.clone(), m.var.clone(), True, 0.1, 1e-5
        )
        b = aten._native_batch_norm_legit.no_stats(x, None, m.b, True, 0.1, 1e-5)
        c = aten._native_batch_norm_legit.no_stats(y, m.w, None, True, 0.1, 1e-2)
        return (*a, *b, *c)

    return _pattern(fn, stats, x=torch.randn(2, 3, 4), y=torch.randn(5, 3, 2, 2, 2))


def batch_norm_half():
    torch.manual_seed(0)
    stats = {
        "mean": torch.randn(3),
        "var": torch.rand(3) + 0.5,
        "w": torch.randn(3),
        "b": torch.randn(3),
    }

    def fn(m, x):
        x = x.half()
        a = aten._native_batch_norm_legit_no_training.default(
            x, m.w.half(), m.b.half(), m.mean.half(), m.var.half(), 0.1, 1e-5
        )
        b = aten._native_batch_norm_legit.no_stats(x, m.w.half(), None, True, 0.1, 1e-5)
        # Mixed: half input, float32 parameters (torch's CPU kernel takes those).
        c = aten._native_batch_norm_legit_no_training.default(x, m.w, m.b, m.mean, m.var, 0.1, 1e-5)
        return (a[0], *b, c[0])

    return _pattern(fn, stats, x=torch.randn(2, 3, 4))


def batch_norm_module():
    """`nn.BatchNorm2d` as models use it (eval: the running statistics)."""
    torch.manual_seed(0)
    norm = torch.nn.BatchNorm2d(4)
    norm.running_mean.copy_(torch.randn(4))
    norm.running_var.copy_(torch.rand(4) + 0.5)
    return norm.eval(), {"input": torch.randn(2, 4, 3, 3)}


def batch_norm_functional():
    """Training with running statistics, as torch.export records it: the updated statistics too."""
    torch.manual_seed(0)
    stats = {
        "mean": torch.randn(3),
        "var": torch.rand(3) + 0.5,
        "w": torch.randn(3),
        "b": torch.randn(3),
    }

    def fn(m, x):
        a = aten._native_batch_norm_legit_functional.default(
            x, m.w, m.b, m.mean, m.var, True, 0.1, 1e-5
        )
        b = aten._native_batch_norm_legit_functional.default(
            x, None, None, m.mean, m.var, False, 0.3, 1e-5
        )
        c = torch.nn.functional.batch_norm(
            x, m.mean.clone(), m.var.clone(), m.w, m.b, training=True, momentum=0.2
        )
        return (*a, *b, c)

    return _pattern(fn, stats, x=torch.randn(4, 3, 5))


def group_norm():
    torch.manual_seed(0)
    params = {"w": torch.randn(6), "b": torch.randn(6)}

    def fn(m, x, y, z):
        a = aten.native_group_norm.default(
            x, m.w, m.b, x.shape[0], 6, x.shape[2] * x.shape[3], 3, 1e-5
        )
        b = aten.native_group_norm.default(y, None, None, y.shape[0], 6, 1, 2, 1e-5)
        c = aten.native_group_norm.default(z, m.w, None, z.shape[0], 6, z.shape[2], 6, 1e-3)
        d = aten.native_group_norm.default(
            x, None, m.b, x.shape[0], 6, x.shape[2] * x.shape[3], 1, 1e-5
        )
        return (*a, *b, *c, *d)

    return _pattern(
        fn, params, x=torch.randn(2, 6, 3, 4), y=torch.randn(3, 6), z=torch.randn(2, 6, 5)
    )


def group_norm_module():
    """`nn.GroupNorm` as models use it."""
    torch.manual_seed(0)
    norm = torch.nn.GroupNorm(2, 4)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(4))
        norm.bias.copy_(torch.randn(4))
    return norm.eval(), {"input": torch.randn(2, 4, 3, 3)}


def group_norm_half():
    torch.manual_seed(0)
    return _pattern(
        lambda m, x: aten.native_group_norm.default(
            x.half(), None, None, x.shape[0], 4, x.shape[2], 2, 1e-5
        ),
        x=torch.randn(2, 4, 8),
    )


def layer_norm():
    torch.manual_seed(0)
    params = {"w": torch.randn(4, 5), "b": torch.randn(4, 5), "v": torch.randn(5)}

    def fn(m, x):
        a = aten.native_layer_norm.default(x, [4, 5], m.w, m.b, 1e-5)
        b = aten.native_layer_norm.default(x, [5], m.v, None, 1e-3)
        c = aten.native_layer_norm.default(x, [3, 4, 5], None, None, 1e-5)
        d = aten.native_layer_norm.default(x.double(), [5], None, m.v.double(), 1e-5)
        e = aten.layer_norm.default(x, [5], None, m.v)
        return (*a, *b, *c, *d, e)

    return _pattern(fn, params, x=torch.randn(2, 3, 4, 5))


def layer_norm_half():
    torch.manual_seed(0)
    return _pattern(
        lambda m, x: aten.native_layer_norm.default(x.half(), [8], None, None, 1e-5),
        x=torch.randn(3, 8),
    )


# ── Distances ──


def cdist():
    torch.manual_seed(0)

    def fn(m, a, b, c, d):
        outs = []
        for p in (0.0, 1.0, 2.0, 3.0, 0.5, float("inf")):
            outs.append(aten._cdist_forward.default(a, b, p, None))
            outs.append(aten._cdist_forward.default(c, d, p, 2))
        # Euclidean through the matrix product: asked for, or more than 25 rows.
        outs.append(aten._cdist_forward.default(a, b, 2.0, 1))
        outs.append(aten._cdist_forward.default(a, a, 2.0, 2))
        return tuple(outs)

    # Batch axes broadcast ([2, 1] against [3]); integer-valued c, d make p = 0 count ties.
    return _pattern(
        fn,
        a=torch.randn(2, 1, 4, 3),
        b=torch.randn(3, 5, 3),
        c=torch.randint(0, 3, (30, 2)).float(),
        d=torch.randint(0, 3, (6, 2)).float(),
    )


def cdist_double():
    torch.manual_seed(0)
    return _pattern(
        lambda m, a, b: (
            aten._cdist_forward.default(a, b, 2.0, None),
            aten._cdist_forward.default(a, b, 1.5, None),
        ),
        a=torch.randn(3, 4, dtype=torch.float64),
        b=torch.randn(5, 4, dtype=torch.float64),
    )


def pdist():
    torch.manual_seed(0)

    def fn(m, x):
        return tuple(
            aten._pdist_forward.default(x, p) for p in (0.0, 1.0, 2.0, 3.0, 0.5, float("inf"))
        )

    return _pattern(
        fn, x=torch.randint(0, 3, (5, 3)).float() + torch.randn(5, 3) * (torch.rand(5, 3) > 0.5)
    )


def pdist_module():
    """`F.pdist` as models call it."""
    torch.manual_seed(0)
    return _pattern(lambda m, x: torch.nn.functional.pdist(x), x=torch.randn(6, 4))


# ── Random ops: outputs are exact functions of the draws (bounds, shapes,
# sorted permutations, the dropout identity), so --verify can compare them ──


def random_checks():
    torch.manual_seed(0)

    def fn(m, x):
        n = x.shape[0]
        u = aten.rand.default([n, 64])
        z = aten.randn.default([4, 8], dtype=torch.float64)
        h = aten.rand.default([n, 3], dtype=torch.float16)
        perm = aten.randperm.default(n * 2)
        perm32 = aten.randperm.default(7, dtype=torch.int32)
        out, mask = aten.native_dropout.default(x, 0.25, True)
        same, all_kept = aten.native_dropout.default(x, 0.25, False)
        gone, none_kept = aten.native_dropout.default(x, 1.0, True)
        return (
            (u >= 0).all() & (u < 1).all(),
            torch.isfinite(z).all(),
            (h >= 0).all() & (h <= 1).all(),
            torch.sort(perm).values,
            torch.sort(perm32).values,
            torch.where(mask, x / 0.75, torch.zeros_like(x)) - out,
            same,
            all_kept,
            gone,
            none_kept,
        )

    return _pattern(fn, x=torch.randn(6, 5))


def random_like():
    """`rand_like`, `randn_like` and `randint` read so that the outputs do not
    depend on the draws (a self-test compares values): each draw times 0 (its
    shape and dtype), and whether every draw lies in its range."""
    torch.manual_seed(0)

    def fn(m, x):
        n = x.shape[0]
        u = aten.rand_like.default(x)
        z = aten.randn_like.default(x, dtype=torch.float16)
        r = aten.randint.low(-3, 5, [n, 64])
        r32 = aten.randint.low(10, 12, [4, 8], dtype=torch.int32)
        wide = aten.randint.default(2**40, [n, 16])
        return (
            u * 0,
            torch.logical_and(u >= 0, u < 1).all(),
            z * 0,
            torch.isfinite(z).all(),
            r * 0,
            torch.logical_and(r >= -3, r < 5).all(),
            r32 * 0,
            torch.logical_and(r32 >= 10, r32 < 12).all(),
            torch.logical_and(wide >= 0, wide < 2**40).all(),
        )

    return _pattern(fn, x=torch.randn(6, 5))


def random_draws():
    """The raw draws, for a statistics check of the exported model (not --verify: values differ from torch's)."""
    torch.manual_seed(0)

    def fn(m, x):
        n = x.shape[0]
        return (
            aten.rand.default([n, 100]),
            aten.randn.default([n, 100]),
            aten.randn.default([n, 100], dtype=torch.float16),
            aten.rand.default([n, 100], dtype=torch.bfloat16).float(),  # numpy has no bfloat16
            aten.randperm.default(n),
            *aten.native_dropout.default(x, 0.3, True),
            *aten.native_dropout.default(x.half(), 0.5, None),
            aten.rand_like.default(x),
            aten.randn_like.default(x),
            aten.randint.low(-3, 5, [n, 100]),
            aten.randint.default(2**40, [n, 100]),
        )

    return _pattern(fn, x=torch.ones(1000, 10))


def dropout_extremes():
    """Dropout whose draws cannot show: p = 1 drops all, p = 0 keeps all (a self-test's values are compared)."""
    torch.manual_seed(0)

    def fn(m, x):
        return (
            *aten.native_dropout.default(x, 1.0, True),
            *aten.native_dropout.default(x, 0.0, True),
        )

    return _pattern(fn, x=torch.randn(3, 4))
