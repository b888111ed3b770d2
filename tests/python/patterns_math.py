"""Elementwise math and trigonometry patterns for the ONNX translations
(`hfx run --model-fn python:patterns_math:NAME`): each returns a module and
its inputs, and exercises one family's argument variants and dtypes."""

import torch

F = torch.nn.functional
aten = torch.ops.aten


class Rounding(torch.nn.Module):
    """ceil/floor/round/trunc/sign, `round(decimals=)` both ways."""

    def forward(self, x):
        return (
            torch.ceil(x),
            torch.floor(x),
            torch.round(x),
            torch.trunc(x),
            torch.sign(x),
            torch.round(x, decimals=2),
            torch.round(x, decimals=-1),
        )


def rounding():
    torch.manual_seed(0)
    x = torch.randn(4, 6) * 40
    x[0] = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5])  # ties round to even
    return Rounding(), {"x": x}


class RoundingInt(torch.nn.Module):
    """On integers ceil/floor/round/trunc are identities; sign of ints and bools."""

    def forward(self, n, mask):
        return (
            torch.ceil(n),
            torch.floor(n),
            torch.round(n),
            torch.trunc(n),
            torch.sign(n),
            torch.sign(mask),
        )


def rounding_int():
    torch.manual_seed(0)
    n = torch.randint(-9, 9, (3, 5))
    return RoundingInt(), {"n": n, "mask": n > 0}


class ExpLog(torch.nn.Module):
    """expm1, log2, log10 (of an integer tensor too, which promotes to float)."""

    def forward(self, x, n):
        return (
            torch.expm1(x),
            torch.log2(x.abs() + 0.1),
            torch.log10(x.abs() + 0.1),
            torch.log2(n),
            torch.expm1(n),
        )


def exp_log():
    torch.manual_seed(0)
    return ExpLog(), {"x": torch.randn(3, 5) * 3, "n": torch.randint(1, 100, (3, 5))}


class InverseErf(torch.nn.Module):
    """erfinv over (-1, 1), near both ends, at ±1 (±inf), and of integers
    (0 and ±1); Gemma 3n's normal quantile of its sparsity target."""

    def forward(self, x, n):
        quantile = torch.distributions.normal.Normal(0, 1).icdf(torch.tensor(0.95))
        return torch.erfinv(x), torch.erfinv(n), x * quantile


def inverse_erf():
    torch.manual_seed(0)
    x = torch.rand(4, 50) * 2 - 1
    x[0, :8] = torch.tensor([-1.0, 1.0, 0.0, 0.999999, -0.999999, 0.9999, 1e-7, -0.5])
    return InverseErf(), {"x": x, "n": torch.tensor([[-1, 0, 1]])}


class Classify(torch.nn.Module):
    """isinf/isnan of floats with infinities and NaNs, and of integers."""

    def forward(self, x, n):
        return torch.isinf(x), torch.isnan(x), torch.isinf(n), torch.isnan(n)


def classify():
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    x[0, 0], x[1, 1], x[2, 2] = float("inf"), float("-inf"), float("nan")
    return Classify(), {"x": x, "n": torch.randint(-5, 5, (3, 4))}


class Activations(torch.nn.Module):
    """elu (plain, alpha, scale/input_scale as selu's), hardtanh (relu6, custom
    bounds, an integer tensor whose bounds truncate), leaky_relu."""

    def forward(self, x, n):
        return (
            F.elu(x),
            F.elu(x, alpha=0.5),
            aten.elu(x, 1.6732632423543772, 1.0507009873554805, 2.0),
            F.hardtanh(x),
            F.hardtanh(x, -0.5, 2.0),
            F.relu6(x),
            aten.hardtanh(n, -1.5, 2.7),
            F.leaky_relu(x),
            F.leaky_relu(x, 0.2),
        )


def activations():
    torch.manual_seed(0)
    return Activations(), {"x": torch.randn(4, 6) * 3, "n": torch.randint(-4, 4, (4, 6))}


class Bitwise(torch.nn.Module):
    """bitwise and/or/xor/not of integers (Tensor and Scalar) and of bools, logical_xor."""

    def forward(self, a, b, x):
        p, q = a > 0, b > 0
        return (
            a & b,
            a | b,
            a ^ b,
            ~a,
            a & 6,
            a | 0x0F0F,
            torch.bitwise_xor(a, -3),
            p & q,
            p | q,
            p ^ q,
            ~p,
            torch.bitwise_xor(p, True),
            torch.bitwise_and(p, False),
            torch.logical_xor(x, b),
            torch.logical_xor(p, q),
            a.to(torch.uint8) ^ b.to(torch.uint8),
        )


def bitwise():
    torch.manual_seed(0)
    a = torch.randint(-100, 100, (3, 5), dtype=torch.int32)
    b = torch.randint(-100, 100, (3, 5), dtype=torch.int32)
    x = torch.randn(3, 5)
    x[0, 0] = 0.0
    return Bitwise(), {"a": a, "b": b, "x": x}


class Modulo(torch.nn.Module):
    """fmod (sign of the dividend) and remainder (sign of the divisor), Tensor and Scalar, float and int."""

    def forward(self, x, y, a, b):
        return (
            torch.fmod(x, y),
            torch.remainder(x, y),
            torch.fmod(x, -1.5),
            torch.remainder(x, -1.5),
            torch.fmod(a, b),
            torch.remainder(a, b),
            torch.fmod(a, 3),
            torch.remainder(a, -3),
            torch.remainder(a, 2.5),
        )


def modulo():
    torch.manual_seed(0)
    b = torch.randint(1, 7, (4, 5)) * (torch.randint(0, 2, (4, 5)) * 2 - 1)
    return Modulo(), {
        "x": torch.randn(4, 5) * 10,
        "y": torch.randn(4, 5) * 3,
        "a": torch.randint(-20, 20, (4, 5)),
        "b": b,
    }


class ClampTensor(torch.nn.Module):
    """clamp with tensor bounds (both, one, broadcast, min above max) and an integer tensor."""

    def forward(self, x, low, high, n):
        return (
            torch.clamp(x, low, high),
            torch.clamp(x, min=low),
            torch.clamp(x, max=high),
            torch.clamp(x, high, low),
            torch.clamp(n, low.to(torch.int64), high.to(torch.int64)),
            torch.clamp(x, low[0], high[:, :1]),
        )


def clamp_tensor():
    torch.manual_seed(0)
    low = torch.randn(4, 5) - 1
    return ClampTensor(), {
        "x": torch.randn(4, 5) * 3,
        "low": low,
        "high": low + 2,
        "n": torch.randint(-5, 5, (4, 5)),
    }


class Division(torch.nn.Module):
    """div with rounding_mode None/"trunc"/"floor" (Tensor and Scalar), float and int
    (true division of ints is float), floor_divide."""

    def forward(self, x, y, a, b):
        return (
            torch.div(x, y),
            torch.div(x, y, rounding_mode="trunc"),
            torch.div(x, y, rounding_mode="floor"),
            torch.div(x, 0.1, rounding_mode="floor"),
            torch.div(x, -0.3, rounding_mode="trunc"),
            torch.div(a, b),
            torch.div(a, b, rounding_mode="trunc"),
            torch.div(a, b, rounding_mode="floor"),
            torch.div(a, -4, rounding_mode="floor"),
            torch.div(a, 4, rounding_mode="trunc"),
            a / 4,
            torch.floor_divide(x, y),
            torch.floor_divide(a, b),
        )


def division():
    torch.manual_seed(0)
    x = torch.randn(4, 64) * 30
    x[0, :4] = torch.tensor([1.0, -1.0, 0.3, 7.0])
    y = torch.randn(4, 64) * 2
    y[0, :4] = torch.tensor([0.1, 0.1, 0.1, 0.0])  # 1 // 0.1 is 9, x // 0 is ±inf
    b = torch.randint(1, 7, (4, 64)) * (torch.randint(0, 2, (4, 64)) * 2 - 1)
    return Division(), {"x": x, "y": y, "a": torch.randint(-50, 50, (4, 64)), "b": b}


class PowScalar(torch.nn.Module):
    """pow with a Python number as base (`aten.pow.Scalar`), float and int exponents;
    an integer base of zero to a negative power is 0, as in torch."""

    def forward(self, x, n):
        return 2.0**x, torch.pow(2.5, x), torch.pow(3, n), 2 ** n.abs(), torch.pow(n, n - 3)


def pow_scalar():
    torch.manual_seed(0)
    return PowScalar(), {"x": torch.randn(3, 4), "n": torch.randint(-3, 6, (3, 4))}


class Trigonometry(torch.nn.Module):
    """tan, the inverse functions on their domains, the hyperbolic ones, atan2
    (quadrants, zeros of either sign), and an integer input (promoted to float)."""

    def forward(self, x, y, unit, n):
        return (
            torch.tan(x),
            torch.acos(unit),
            torch.asin(unit),
            torch.atan(x * 5),
            torch.cosh(x),
            torch.sinh(x),
            torch.acosh(x.abs() + 1),
            torch.asinh(x * 5),
            torch.atanh(unit),
            torch.atan2(x, y),
            torch.atan2(n, n.flip(0)),
            torch.sin(n),
            torch.tan(n),
        )


def trigonometry():
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    y = torch.randn(4, 6)
    x[0, :4] = torch.tensor([0.0, 0.0, -0.0, -0.0])
    y[0, :4] = torch.tensor([1.0, -1.0, -1.0, 0.0])
    unit = torch.rand(4, 6) * 1.98 - 0.99
    return Trigonometry(), {"x": x, "y": y, "unit": unit, "n": torch.randint(-3, 4, (4, 6))}
