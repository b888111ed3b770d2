"""Shape, indexing, scatter and symbolic-size patterns for the ONNX
translations (translate-shape, translate-scatter, translate-symbolic): each
function returns `(module, inputs)` for `hfx run --model-fn`."""

import torch

aten = torch.ops.aten


class Fn(torch.nn.Module):
    """A module whose forward is `fn`; its outputs are every variant at once."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, **inputs):
        return self.fn(**inputs)


def _module(fn, **inputs):
    return Fn(fn), inputs


# ── translate-shape: new ops ──


def as_strided():
    torch.manual_seed(0)

    def fn(x, v):
        return (
            aten.as_strided(x, (2, 2), (1, 2)),
            aten.as_strided(x, (2, 2), (1, 2), 1),
            aten.as_strided(x, (3,), (4,)),
            aten.as_strided(v, (2, 2, 2, 2), (1, 1, 1, 1)),
            aten.as_strided(v, (2, 1, 1, 2), (1, 7, 7, 1)),
            aten.as_strided(v, (), (), 5),
            aten.as_strided(v, (0, 3), (1, 1)),
        )

    return _module(fn, x=torch.randn(3, 3), v=torch.randn(16))


def as_strided_transposed():
    """`as_strided` of a transposed value: its storage is the base's order."""
    torch.manual_seed(0)

    def fn(x):
        return aten.as_strided(x.t(), (2, 3), (1, 2), 1) * 2

    return _module(fn, x=torch.randn(3, 4))


def as_strided_int():
    torch.manual_seed(0)

    def fn(x, b):
        return aten.as_strided(x, (2, 2), (1, 2), 1), aten.as_strided(b, (3,), (2,))

    return _module(fn, x=torch.randint(-50, 50, (3, 3)), b=torch.rand(8) > 0.5)


def diagonal():
    torch.manual_seed(0)

    def fn(sq, wide, tall, cube):
        out = []
        for t in (sq, wide, tall):
            out += [
                torch.diagonal(t),
                torch.diagonal(t, 1),
                torch.diagonal(t, 2),
                torch.diagonal(t, -1),
                torch.diagonal(t, -4),
                torch.diagonal(t, 7),
            ]
        out += [
            torch.diagonal(cube, 1, 1, 2),
            torch.diagonal(cube, 2, 0, 1),
            torch.diagonal(cube, -2, 0, 1),
            torch.diagonal(cube, 0, -1, 0),
            torch.diagonal(cube, -1, 2, -2),
        ]
        return tuple(out)

    wide = torch.randn(3, 5)
    wide[0, 4] = float("inf")  # off the diagonal: must not leak NaN into it
    return _module(
        fn, sq=torch.randn(5, 5), wide=wide, tall=torch.randn(5, 3), cube=torch.randn(4, 5, 6)
    )


def diagonal_int():
    torch.manual_seed(0)

    def fn(x, b, h):
        return torch.diagonal(x, 1), torch.diagonal(b, -1), torch.diagonal(h.half(), 0, -2, -1)

    return _module(
        fn, x=torch.randint(-9, 9, (4, 5)), b=torch.rand(4, 4) > 0.5, h=torch.randn(2, 3, 3)
    )


def flip():
    torch.manual_seed(0)

    def fn(x, e, s):
        return (
            torch.flip(x, (0, 1, 2)),
            torch.flip(x, (0,)),
            torch.flip(x, (0, 2)),
            torch.flip(x, (-1,)),
            aten.flip(x, []) + 1,
            torch.flip(e, (0, 1, 2)),
            torch.flip(e, (-1,)),
            torch.flip(s, (0,)) + 1,
        )

    return _module(fn, x=torch.randn(5, 10, 5), e=torch.randn(5, 0, 10), s=torch.tensor(3.0))


def flip_int():
    torch.manual_seed(0)

    def fn(x, b):
        return torch.flip(x, (1,)), torch.flip(b, (0, 1))

    return _module(fn, x=torch.randint(0, 9, (3, 4)), b=torch.rand(3, 4) > 0.5)


def repeat():
    torch.manual_seed(0)

    def fn(s, v, m, e):
        return (
            s.repeat(()) + 1,
            s.repeat(0),
            s.repeat(2, 3),
            v.repeat(1),
            v.repeat(0, 2),
            v.repeat(2, 3, 2),
            m.repeat(2, 1, 1, 1),
            m.repeat(1, 1),
            e.repeat(2, 3),
        )

    return _module(
        fn, s=torch.tensor(1.5), v=torch.randn(2), m=torch.randn(3, 2), e=torch.randn(3, 0)
    )


def repeat_int():
    torch.manual_seed(0)

    def fn(x, b, h):
        return x.repeat(2, 2), b.repeat(3, 1), h.half().repeat(1, 2)

    return _module(fn, x=torch.randint(0, 9, (3, 4)), b=torch.rand(2, 4) > 0.5, h=torch.randn(2, 3))


def index_select():
    torch.manual_seed(0)

    def fn(s, v, m, i1, i5, ie):
        return (
            torch.index_select(s, 0, i1) + 1,
            torch.index_select(v, 0, i1),
            torch.index_select(m, -1, i5),
            torch.index_select(m, 0, i5),
            torch.index_select(m, 1, ie),
            torch.index_select(m, 1, i1[0]),
        )

    return _module(
        fn,
        s=torch.tensor(2.5),
        v=torch.randn(1),
        m=torch.randn(5, 5),
        i1=torch.tensor([0]),
        i5=torch.tensor([4, 0, 2, 2, 1]),
        ie=torch.zeros(0, dtype=torch.int64),
    )


def index_select_int():
    torch.manual_seed(0)

    def fn(x, b, i):
        return torch.index_select(x, 1, i), torch.index_select(b, 0, i.int())

    return _module(
        fn, x=torch.randint(0, 9, (3, 4)), b=torch.rand(4, 2) > 0.5, i=torch.tensor([3, 1, 1])
    )


def empty_strided():
    def fn(x):
        out = torch.empty_strided((5, 5), (1, 5), dtype=torch.float32).zero_()
        ints = torch.empty_strided((2, 3), (3, 1), dtype=torch.int64).fill_(4)
        return x + out, ints * 2

    return _module(fn, x=torch.randn(5, 5))


def empty_strided_raw():
    """`empty_strided` whose content reaches the output only through its shape."""

    def fn(x):
        e = aten.empty_strided.default([x.shape[0], 3], [3, 1], dtype=torch.float32)
        return x.sum() + e.shape[0] * e.shape[1] + e.new_zeros(()).sum()

    return _module(fn, x=torch.randn(4))


def unfold():
    """`Tensor.unfold` windows: overlapping (PatchTST's patches, BLT's byte
    groups), apart, a last element no window reaches, along the first, a
    middle and the last axis, of ints, and of a 0-d tensor."""
    torch.manual_seed(0)

    def fn(x, ids):
        return (
            aten.unfold.default(x, -1, 4, 2),
            aten.unfold.default(x, 1, 2, 2),
            aten.unfold.default(x, 2, 3, 4),
            aten.unfold.default(x, 0, 1, 1),
            aten.unfold.default(x, 2, 10, 1),
            aten.unfold.default(ids, 1, 3, 1),
            aten.unfold.default(x[0, 0, 0], 0, 1, 1),
        )

    return _module(fn, x=torch.randn(2, 4, 10), ids=torch.randint(0, 256, (2, 7)))


def unfold_symbolic():
    """`Tensor.unfold` along a dynamic axis: the window count is read at run time."""

    def fn(x):
        return aten.unfold.default(x, 1, 3, 2), aten.unfold.default(x, -1, 2, 1)

    return _module(fn, x=torch.randn(2, 9, 5))


def empty_permuted():
    """`empty_permuted` (what MoE expert paths allocate) filled before it is
    read: its shape and dtype show, its values do not."""

    def fn(x):
        floats = aten.empty_permuted.default([x.shape[0], 3], [1, 0]).fill_(2.0)
        ints = aten.empty_permuted.default([2, 3, 4], [2, 0, 1], dtype=torch.int32).fill_(7)
        return x.unsqueeze(1) * floats, ints

    return _module(fn, x=torch.randn(4))


def scalar_tensor():
    def fn(x):
        return (
            x + aten.scalar_tensor(-5.0),
            x * aten.scalar_tensor(3, dtype=torch.int64),
            aten.scalar_tensor(2.5, dtype=torch.float64),
            aten.scalar_tensor(1, dtype=torch.bool),
            aten.scalar_tensor(7, dtype=torch.int32),
            aten.scalar_tensor(0.5, dtype=torch.float16),
        )

    return _module(fn, x=torch.randn(3))


def scalar_tensor_symbolic():
    """`scalar_tensor` of a size: the sym-int becomes a 0-d tensor."""

    def fn(x):
        return x * aten.scalar_tensor(x.shape[0])

    return _module(fn, x=torch.randn(6))


def nonzero():
    torch.manual_seed(0)

    def fn(s, z, v, m, c, one, empty):
        return (
            torch.nonzero(s),
            torch.nonzero(z),
            torch.nonzero(v),
            torch.nonzero(m),
            torch.nonzero(c),
            torch.nonzero(one),
            torch.nonzero(empty),
        )

    m = torch.randn(5, 5)
    m[m < 0] = 0
    v = torch.tensor([0.0, 1.0, 0.0, -2.0, 3.0])
    return _module(
        fn,
        s=torch.tensor(3.0),
        z=torch.tensor(0.0),
        v=v,
        m=m,
        c=(torch.randn(3, 4, 5) > 0.3).float(),
        one=torch.randn(5, 1, 5).relu(),
        empty=torch.randn(5, 0, 5),
    )


def nonzero_dtypes():
    torch.manual_seed(0)

    def fn(d, i8, b, h, i):
        return (
            torch.nonzero(d.double()),
            torch.nonzero(i8),
            torch.nonzero(b),
            torch.nonzero(h.half()),
            torch.nonzero(i),
        )

    return _module(
        fn,
        d=torch.randn(4, 3).relu(),
        i8=torch.randint(-1, 2, (3, 4), dtype=torch.int8),
        b=torch.rand(2, 3, 2) > 0.5,
        h=torch.randn(6).relu(),
        i=torch.randint(-1, 2, (7,)),
    )


def nonzero_use():
    """`nonzero` feeding arithmetic, its row count data-dependent."""
    torch.manual_seed(0)

    def fn(x):
        rows = torch.nonzero(x > 0)
        return rows.sum(0) * rows.shape[0], rows.float().mean(0)

    return _module(fn, x=torch.randn(4, 6))


# ── translate-scatter ──


def _scatter_reduce_all(x, dim, index, src):
    out = []
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            out.append(torch.scatter_reduce(x, dim, index, src, reduce, include_self=include_self))
    return out


def scatter_reduce():
    """Every reduction, with and without `self`, on dims 0, 1 and -1; an index
    narrower than `self` and a `src` larger than the index."""
    torch.manual_seed(0)

    def fn(x, i55, s55, i102, s102, big):
        out = []
        out += _scatter_reduce_all(x, 0, i55, s55)
        out += _scatter_reduce_all(x, 1, i55, s55)
        out += _scatter_reduce_all(x, -1, i102, s102)
        out += _scatter_reduce_all(x, 0, i102, big)
        return tuple(out)

    return _module(
        fn,
        x=torch.randn(10, 5),
        i55=torch.randint(0, 5, (5, 5)),
        s55=torch.randn(5, 5),
        i102=torch.randint(0, 5, (10, 2)),
        s102=torch.randn(10, 2),
        big=torch.randn(12, 4),
    )


def scatter_reduce_scalar():
    def fn(x, i, s):
        return tuple(_scatter_reduce_all(x, 0, i, s))

    return _module(fn, x=torch.tensor(1.5), i=torch.tensor(0), s=torch.tensor(-2.0))


def scatter_reduce_int():
    torch.manual_seed(0)

    def fn(x, i, s, b, bs):
        out = _scatter_reduce_all(x, 1, i, s)
        for reduce in ("sum", "prod", "amax", "amin"):
            for include_self in (True, False):
                out.append(torch.scatter_reduce(b, 1, i, bs, reduce, include_self=include_self))
        return tuple(out)

    return _module(
        fn,
        x=torch.randint(-20, 20, (4, 6)),
        i=torch.randint(0, 6, (4, 5)),
        s=torch.randint(-20, 20, (4, 5)),
        b=torch.rand(4, 6) > 0.5,
        bs=torch.rand(4, 5) > 0.5,
    )


def scatter_reduce_half():
    torch.manual_seed(0)

    def fn(x, i, s):
        return tuple(r.float() for r in _scatter_reduce_all(x.half(), 0, i, s.half()))

    return _module(fn, x=torch.randn(6, 3), i=torch.randint(0, 6, (4, 3)), s=torch.randn(4, 3))


def select_scatter():
    torch.manual_seed(0)

    def fn(x, src, v, s):
        return (
            torch.select_scatter(x, src, 1, 2),
            torch.select_scatter(x, src, -1, 2),
            torch.select_scatter(x, src, -1, -1),
            torch.select_scatter(x, src, 1, -1),
            torch.select_scatter(v, s, 0, 2),
        )

    return _module(
        fn, x=torch.randn(5, 5, 5), src=torch.randn(5, 5), v=torch.randn(5), s=torch.tensor(9.0)
    )


def select_scatter_dtypes():
    torch.manual_seed(0)

    def fn(x, src, b, bsrc, h):
        return (
            torch.select_scatter(x, src, 0, 1),
            torch.select_scatter(b, bsrc, 1, -2),
            torch.select_scatter(h.half(), h[0].half() * 2, 0, 2),
            torch.select_scatter(x.float(), src[:3].float(), 1, 0),
        )

    return _module(
        fn,
        x=torch.randint(0, 9, (3, 4)),
        src=torch.randint(0, 9, (4,)),
        b=torch.rand(3, 4) > 0.5,
        bsrc=torch.rand(3) > 0.5,
        h=torch.randn(4, 3),
    )


def select_scatter_symbolic():
    """`select_scatter` at a symbolic index (the last row)."""
    torch.manual_seed(0)

    def fn(x, src):
        return torch.select_scatter(x, src, 0, x.shape[0] - 1)

    return _module(fn, x=torch.randn(4, 3), src=torch.randn(3))


def slice_scatter():
    torch.manual_seed(0)

    def fn(x, a, b, c, d, e, f, g):
        return (
            torch.slice_scatter(x, a, 0, 0, 20, 1),
            torch.slice_scatter(x, b, 0, 10, 20, 1),
            torch.slice_scatter(x, c, 0, 10, 20, 2),
            torch.slice_scatter(x, d, 1, 10, 20, 1),
            torch.slice_scatter(x, e, 2, 10, 20, 2),
            torch.slice_scatter(x, f, 1),
            torch.slice_scatter(x, c, 0, -10, None, 2),
            torch.slice_scatter(x, b, 0, None, -10),
            torch.slice_scatter(x, g, -1, 3, 100, 5),
            torch.slice_scatter(x, x[:, :0], 1, 5, 5),
        )

    return _module(
        fn,
        x=torch.randn(20, 20, 20),
        a=torch.randn(20, 20, 20),
        b=torch.randn(10, 20, 20),
        c=torch.randn(5, 20, 20),
        d=torch.randn(20, 10, 20),
        e=torch.randn(20, 20, 5),
        f=torch.randn(20, 20, 20),
        g=torch.randn(20, 20, 4),
    )


def slice_scatter_dtypes():
    torch.manual_seed(0)

    def fn(x, s, b, bs, h):
        return (
            torch.slice_scatter(x, s, 1, 1, 3),
            torch.slice_scatter(b, bs, 0, 1, None, 2),
            torch.slice_scatter(h.half(), h[:, 1:2].half() * 3, 1, 0, 1),
        )

    return _module(
        fn,
        x=torch.randint(0, 9, (3, 4)),
        s=torch.randint(0, 9, (3, 2)),
        b=torch.rand(5, 2) > 0.5,
        bs=torch.rand(2, 2) > 0.5,
        h=torch.randn(2, 3),
    )


def slice_scatter_symbolic():
    """`slice_scatter` whose bounds are sizes: `x[n//2:] = src` under --dynamic."""
    torch.manual_seed(0)

    def fn(x, src):
        half = x.shape[0] // 2
        return torch.slice_scatter(x, src[: x.shape[0] - half], 0, half, x.shape[0])

    return _module(fn, x=torch.randn(6, 3), src=torch.randn(6, 3))


def masked_scatter():
    torch.manual_seed(0)

    def fn(x, m2, m1, m0, v, src):
        return (
            torch.masked_scatter(x, m2, src),
            torch.masked_scatter(x, m1, src),
            torch.masked_scatter(x, m0, src),
            torch.masked_scatter(v, m2, src),
            torch.masked_scatter(x, m2 & False, src[:0]),
        )

    return _module(
        fn,
        x=torch.randn(5, 5),
        m2=torch.rand(5, 5) > 0.5,
        m1=torch.rand(5) > 0.5,
        m0=torch.tensor(True),
        v=torch.randn(5),
        src=torch.randn(5, 5),
    )


def masked_scatter_dtypes():
    torch.manual_seed(0)

    def fn(x, m, s, b, bs, h):
        return (
            torch.masked_scatter(x, m, s),
            torch.masked_scatter(b, m, bs),
            torch.masked_scatter(h.half(), m, h.half() * 2),
        )

    return _module(
        fn,
        x=torch.randint(0, 9, (3, 4)),
        m=torch.rand(3, 4) > 0.5,
        s=torch.randint(0, 9, (12,)),
        b=torch.rand(3, 4) > 0.5,
        bs=torch.rand(3, 4) > 0.5,
        h=torch.randn(3, 4),
    )


# ── translate-symbolic ──


def local_scalar_dense():
    """`.item()` of an int tensor used as a size and as a value."""
    torch.manual_seed(0)

    def fn(x, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= x.shape[0])
        return x[:k] * 2, x * k

    return _module(fn, x=torch.randn(6), n=torch.tensor(3))


def local_scalar_dense_float():
    """`.item()` of a float tensor: a sym-float, which `Emit::operand` cannot read yet."""

    def fn(x, f):
        return x * f.item()

    return _module(fn, x=torch.randn(6), f=torch.tensor([1.5]))


def local_scalar_dense_bool():
    """`.item()` of a bool tensor (a sym-bool)."""

    def fn(x, n):
        return aten._local_scalar_dense(n.sum() > 0) + x

    return _module(fn, x=torch.randn(3), n=torch.tensor([2]))


def local_scalar_dense_direct():
    """`aten._local_scalar_dense` of a 1-element tensor as a factory's size."""

    def fn(x, n):
        k = aten._local_scalar_dense(n)
        torch._check(k >= 1)
        torch._check(k <= 4)
        return torch.ones(k, 2) * x.sum()

    return _module(fn, x=torch.randn(3), n=torch.tensor([2]))


def sym_numel():
    torch.manual_seed(0)

    def fn(x, e):
        return x.sum() / aten.sym_numel(x), x * aten.sym_numel(e) + aten.sym_numel(x[0, 0])

    return _module(fn, x=torch.randn(4, 3), e=torch.randn(2, 0))


# ── translate-shape: the ops it had, on OpInfo-style inputs ──


def transpose_permute():
    torch.manual_seed(0)

    def fn(s, v, x, y):
        return (
            aten.transpose(s, 0, -1) + 1,
            aten.transpose(v, 0, 0) + 1,
            x.transpose(-1, -2),
            x.transpose(1, -2),
            y.transpose(2, 0),
            aten.permute(s, []) + 1,
            x.permute(0, -2, -1, 1)[..., 0].permute(2, 0, 1),
        )

    return _module(
        fn, s=torch.tensor(2.0), v=torch.randn(3), x=torch.randn(1, 2, 3, 4), y=torch.randn(5, 5, 5)
    )


def cat():
    torch.manual_seed(0)

    def fn(a, b, c, e, i, z):
        return (
            torch.cat([a, b], -1),
            torch.cat([c, b], 0),
            torch.cat([e, b], 1),
            torch.cat([e, e], 0) + 1,
            torch.cat([a, i], 1),
            torch.cat([z, b], 0),
            torch.cat([a], 1) + 1,
        )

    return _module(
        fn,
        a=torch.randn(5, 5),
        b=torch.randn(5, 5),
        c=torch.randn(10, 5),
        e=torch.randn(0),
        i=torch.randint(0, 9, (5, 3)),
        z=torch.randn(0, 5),
    )


def gather():
    torch.manual_seed(0)

    def fn(x, i55, i102, s, i0, i1, v, iempty):
        return (
            torch.gather(x, 0, i55),
            torch.gather(x, 0, i55.int()),
            torch.gather(x, 1, i102),
            torch.gather(x, -1, i102),
            torch.gather(s, 0, i0) + 1,
            torch.gather(s, 0, i1),
            torch.gather(v, 0, iempty) + 1,
        )

    return _module(
        fn,
        x=torch.randn(10, 5),
        i55=torch.randint(0, 5, (5, 5)),
        i102=torch.randint(0, 5, (10, 2)),
        s=torch.tensor(1.5),
        i0=torch.tensor(0),
        i1=torch.tensor([0]),
        v=torch.randn(5),
        iempty=torch.zeros(0, dtype=torch.int64),
    )


def scatter():
    torch.manual_seed(0)

    def fn(x, i55, s55, i102, big, s, i0, src0, h, hi, hs):
        return (
            torch.scatter(x, 0, i55, s55),
            torch.scatter(x, -1, i55, s55),
            torch.scatter(x, 0, i102, big),
            torch.scatter(x, 1, i102, 2.5),
            torch.scatter_add(x, 0, i55, s55),
            torch.scatter_add(x, 1, i102, big),
            torch.scatter(s, 0, i0, src0),
            torch.scatter(s, 0, i0, 2.5),
            torch.scatter_add(s, 0, i0, src0),
            torch.scatter_add(h.half(), 0, hi, hs.half()).float(),
            torch.scatter(x.int(), 0, i55, 7),
        )

    return _module(
        fn,
        x=torch.randn(10, 5),
        i55=torch.randint(0, 5, (5, 5)),
        s55=torch.randn(5, 5),
        i102=torch.randint(0, 5, (10, 2)),
        big=torch.randn(12, 6),
        s=torch.tensor(1.5),
        i0=torch.tensor(0),
        src0=torch.tensor(-2.0),
        h=torch.randn(4, 3),
        hi=torch.randint(0, 4, (5, 3)),
        hs=torch.randn(5, 3),
    )


def split():
    torch.manual_seed(0)

    def fn(x, e):
        return (
            *torch.split(x, 2),
            *torch.split(x, 5, 1),
            *torch.split(x, [1, 4, 0], -2),
            *torch.chunk(x, 2, -1),
            *torch.unbind(x, 1),
            *[t + 1 for t in torch.chunk(e, 2)],
            *[t + 1 for t in torch.split(e, 3)],
            *torch.unbind(torch.randn(5, 0, 5) + x[:, :0], 0),
        )

    return _module(fn, x=torch.randn(5, 5, 5), e=torch.randn(0))


def split_counted_sizes():
    """`split_with_sizes` by per-group counts read back with `tolist()`, as
    JetMoE's experts split their sorted tokens: sizes known only at run time
    (unbacked), the split axis symbolic under --dynamic."""
    torch.manual_seed(0)

    def fn(x, groups):
        counts = (groups.unsqueeze(1) == torch.arange(3)).long().sum(0).tolist()
        pieces = x[groups.argsort(stable=True)].split(counts, dim=0)
        return torch.cat([piece * (i + 1) for i, piece in enumerate(pieces)], dim=0)

    return _module(fn, x=torch.randn(7, 4), groups=torch.tensor([2, 0, 1, 2, 2, 0, 1]))


def arange():
    def fn(x):
        return (
            x + torch.arange(-1, 2, 2, dtype=torch.float32).sum(),
            torch.arange(2, -3, -1, dtype=torch.float32),
            torch.arange(1, 1, 1, dtype=torch.float32) + 1,
            torch.arange(0.0, -8.000001, -4.0),
            torch.arange(1.0, 5.000001, 2.0),
            torch.arange(-0.9, 2.1, 2.0),
            torch.arange(0.1, 1.1, 1.0),
            torch.arange(3.1),
            torch.arange(10000, dtype=torch.float32),
            torch.arange(-0.9, 2.1, 2.0, dtype=torch.int64),
            torch.arange(-3.7, 3, 1.5, dtype=torch.int64),
            torch.arange(False, True, True, dtype=torch.int64),
            torch.arange(5, dtype=torch.float16),
            torch.arange(1, 9, 3, dtype=torch.int8),
            torch.arange(1, 9, 3, dtype=torch.uint8),
            torch.arange(0.5, 2, 0.25, dtype=torch.float64),
        )

    return _module(fn, x=torch.randn(2))


def arange_symbolic():
    def fn(x):
        n = x.shape[0]
        return (
            x + torch.arange(n),
            torch.arange(1, n, 2, dtype=torch.float16).float(),
            torch.arange(0.5, n).sum() + x,
            torch.arange(n, dtype=torch.int8),
        )

    return _module(fn, x=torch.randn(7))


def full():
    def fn(x):
        n = x.shape[0]
        return (
            torch.full((10,), -8.478373527526855),
            torch.full((5, 5), 6),
            torch.full((2, 3), 0.5, dtype=torch.bool),
            torch.full((2,), True),
            torch.full((2, 2), 7, dtype=torch.int8),
            torch.full((3,), n) + x[:3],
            torch.full_like(x, 2.5),
            torch.full_like(x, 0.5, dtype=torch.bool),
            torch.full_like(x, -3, dtype=torch.int64),
            x.new_full((2, 3), 3.6),
            x.new_full((0, 3), 1.0) + 1,
            x.new_zeros((2, n)),
            x.new_ones(()),
            torch.zeros((5, 5)),
            torch.ones(10, dtype=torch.float64),
            torch.empty(3, 2).fill_(4.0),
            torch.empty_like(x).zero_(),
            torch.zeros_like(x, dtype=torch.bool),
        )

    return _module(fn, x=torch.randn(6))


def fill_copy():
    torch.manual_seed(0)

    def fn(x, i, b):
        return (
            aten.fill.Scalar(x, 0.5),
            aten.fill.Scalar(i, 2.7),
            aten.fill.Scalar(b, 0.5),
            aten.copy(x, i),
            aten.copy(i, x),
            aten.copy(x, x[0]),
            aten.fill.Tensor(x, x[0, 0]) if hasattr(aten.fill, "Tensor") else x,
        )

    return _module(fn, x=torch.randn(3, 4), i=torch.randint(0, 9, (3, 4)), b=torch.rand(3, 4) > 0.5)


def index_tensor():
    torch.manual_seed(0)

    def fn(x, i, k, j, m, m2, n):
        return (
            x[i],
            x[:, k],
            x[..., j],
            x[i, k],
            x[:, k, j],
            x[i, :, j],
            x[-1, k],
            x[m],
            x[:, m2],
            x[n],
            x[i.unsqueeze(1), k],
            aten.index.Tensor(x, [None, None, j]),
            x[m, k[:3]],
        )

    return _module(
        fn,
        x=torch.randn(4, 5, 6),
        i=torch.tensor([0, 3, -1, 2]),
        k=torch.tensor([4, 0, 1, -2]),
        j=torch.tensor([5, 0, 1, -2]),
        m=torch.tensor([True, False, True, True]),
        m2=torch.rand(5, 6) > 0.5,
        n=torch.rand(4, 5, 6) > 0.5,
    )


def index_tensor_dtypes():
    torch.manual_seed(0)

    def fn(x, b, i, m):
        return x[i], b[i, i], x[m], b[:, i.int()], x.half()[m].float()

    return _module(
        fn,
        x=torch.randint(0, 9, (4, 4)),
        b=torch.rand(4, 4) > 0.5,
        i=torch.tensor([1, 3, 1]),
        m=torch.tensor([True, False, False, True]),
    )


def _put(x, indices, values, accumulate=False):
    return aten.index_put(x, indices, values, accumulate)


def index_put():
    torch.manual_seed(0)

    def fn(x, i1, v15, i2, v25, m, v5, y, i, k, j, v4, vs, m2):
        return (
            _put(x, [i1], v15),
            _put(x, [m], v5),
            _put(x, [i2], v25, True),
            _put(x, [m], v5, True),
            _put(x, [m], vs),
            _put(y, [i, k], v4),
            _put(y, [i, None, j], vs, True),
            _put(y, [None, k, j], v4),
            _put(y, [m2], vs),
            _put(y, [m2], torch.ones(6) * 3, True),
            _put(y, [i, k, j], v4[:, 0]),
        )

    return _module(
        fn,
        x=torch.randn(5, 5),
        i1=torch.tensor([3]),
        v15=torch.randn(1, 5),
        i2=torch.tensor([4, -5]),
        v25=torch.randn(2, 5),
        m=torch.tensor([True, False, True, True, False]),
        v5=torch.randn(5),
        y=torch.randn(4, 5, 6),
        i=torch.tensor([0, 3, -1, 2]),
        k=torch.tensor([4, 0, 1, -2]),
        j=torch.tensor([5, 0, 1, -2]),
        v4=torch.randn(4, 1),
        vs=torch.tensor(9.0),
        m2=torch.rand(4, 5) > 0.5,
    )


def index_put_last_dim():
    """`x[:, idx] = v` with a negative index, then `x` read again: what the FX
    fix fix-index-put-last-dim rewrites (run without it to check the
    translation; with it, it ignores the negative index)."""
    torch.manual_seed(0)

    def fn(x, i2, v25, vs):
        return _put(x, [None, i2], vs), _put(x, [None, i2], v25.t(), True)

    return _module(
        fn,
        x=torch.randn(5, 5),
        i2=torch.tensor([4, -5]),
        v25=torch.randn(2, 5),
        vs=torch.tensor(9.0),
    )


def index_put_dtypes():
    torch.manual_seed(0)

    def fn(x, b, h, i, m):
        return (
            _put(x, [i], torch.tensor(7)),
            _put(x, [i], x[:2] * 3, True),
            _put(b, [m], torch.tensor(True)),
            _put(b, [i], b[:2] & False),
            _put(h.half(), [i], h[:2].half(), True).float(),
            _put(h.half(), [m], torch.tensor(2.0).half()).float(),
        )

    return _module(
        fn,
        x=torch.randint(0, 9, (4, 3)),
        b=torch.rand(4, 3) > 0.5,
        h=torch.randn(4, 3),
        i=torch.tensor([1, 3]),
        m=torch.tensor([True, False, False, True]),
    )


def views():
    """view/reshape/expand/squeeze/unsqueeze/flatten/select/slice on 0-d,
    size-1 and empty tensors, negative dims and indices."""
    torch.manual_seed(0)

    def fn(s, x, y, e, one):
        return (
            x.view(-1),
            x.reshape(5, -1, 5),
            s.reshape(1, 1) + 1,
            e.reshape(0, 5, 2) + 1,
            one.expand(5, 5, 5),
            y.expand(-1, 5, -1),
            y.expand(2, -1, 5, -1),
            s.expand(1, 3, 2),
            aten.expand(s, []) + 1,
            one.squeeze(),
            one.squeeze(0),
            y.squeeze(-2),
            y.squeeze(0) + 1,
            aten.squeeze.dims(y, [1, 2]),
            s.squeeze(0) + 1,
            x.unsqueeze(-1),
            x.unsqueeze(-4),
            s.unsqueeze(-1),
            s.unsqueeze(0),
            x.flatten(),
            x.flatten(1, -1),
            s.flatten() + 1,
            x.select(-1, -1),
            x.select(1, 2),
            x[1:-1:2, ::3, -2:],
            x[:, 7:],
            x[-100:100],
            aten.slice.Tensor(x, 1, None, None, 2),
            aten.slice.Tensor(x, -1, -3, -1),
            e[2:],
        )

    return _module(
        fn,
        s=torch.tensor(3.0),
        x=torch.randn(5, 5, 5),
        y=torch.randn(5, 1, 5),
        e=torch.randn(0, 10),
        one=torch.randn(1, 1, 1),
    )


def views_symbolic():
    """The same ops where sizes and indices are symbolic."""
    torch.manual_seed(0)

    def fn(x, y):
        n = x.shape[0]
        return (
            x.view(n, -1),
            x.reshape(-1, x.shape[2]),
            y.expand(n, y.shape[1], x.shape[2]) + 1,
            x.select(0, n - 1),
            x[1 : n - 1],
            x[:, -(n // 2) :],
            x.new_zeros(n, 2),
            x.flatten(1),
            torch.ops.aten.sym_size.int(x, -1) * x,
        )

    return _module(fn, x=torch.randn(4, 3, 5), y=torch.randn(1, 3, 1))


def repeat_interleave_embedding():
    torch.manual_seed(0)

    def fn(s, x, w, i, i2):
        return (
            s.repeat_interleave(2),
            x.repeat_interleave(2),
            x.repeat_interleave(2, 1),
            x.repeat_interleave(3, -1),
            torch.nn.functional.embedding(i, w),
            torch.nn.functional.embedding(i2, w, padding_idx=0),
        )

    return _module(
        fn,
        s=torch.tensor(1.5),
        x=torch.randn(2, 3, 4),
        w=torch.randn(10, 3),
        i=torch.tensor([[1, 2], [9, 0]]),
        i2=torch.tensor([0, 5]),
    )


def matrix_transposes():
    """`x.T`, `x.mT`, `x.mH`, `x.adjoint()`: kept whole by torch.export (Falcon's `weight.T`)."""
    torch.manual_seed(0)

    def fn(x, v):
        return x.T + 0, x.mT * 2, x.mH - 1, x.adjoint() + x.mT, v.T + 0

    return _module(fn, x=torch.randn(2, 3, 4), v=torch.randn(5))
