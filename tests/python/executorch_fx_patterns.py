"""Small modules whose torch.export traces hold the patterns the ExecuTorch FX
fixes (`plugins/executorch/fix-*`) repair, for `hfx run --model-fn
python:executorch_fx_patterns:NAME`. Each is the construction the reference
(transformers 5.24, `exporter_executorch.py`) found in a real model, made
minimal: what the model does, not the model.

    python executorch_fx_patterns.py compare NAME FIXED.pt2   # a fixed program vs eager, atol/rtol 1e-4
    python executorch_fx_patterns.py placeholders PROGRAM.pt2 # every state placeholder has a tensor value
"""

import math
import sys

import torch


class AmaxNegativeDim(torch.nn.Module):
    """`amax` and `max` over `dim=-1` of a 4-D tensor, as attention's
    max-subtraction spells it: XNNPACK's max visitor takes dims 2 and 3 only,
    literally."""

    def forward(self, x):
        peak = x.amax(dim=-1, keepdim=True)
        values, _ = torch.max(x, dim=-1, keepdim=True)
        return (x - peak).exp() + values


def amax_negative_dim():
    return AmaxNegativeDim(), {"x": torch.randn(2, 3, 4, 5)}


class PythonSymOps(torch.nn.Module):
    """Python functions on a dynamic size (`--dynamic`): `torch.sym_max`,
    `torch.sym_min` (a size clamped, as padding and window code does) and
    `math.trunc` of a ratio. torch.export records them as Python calls; the
    edge verifier admits only ExecuTorch's own sym ops."""

    def forward(self, x):
        rows = x.shape[0]
        at_least_three = x.new_ones(torch.sym_max(rows, 3))
        at_most_five = x.new_ones(torch.sym_min(rows, 5))
        third = x[: math.trunc(rows / 3) + 1]
        return at_least_three.sum() + at_most_five.sum() + third.sum(dim=0)


def python_sym_ops():
    return PythonSymOps(), {"x": torch.randn(6, 4)}


class InterleavedRotation(torch.nn.Module):
    """Cohere's interleaved `rotate_half` on `[batch, heads, sequence,
    head_dim]`: `torch.stack([-odd, even], dim=-1).flatten(-2)`. The stack is
    an unsqueeze of each half, whose output has a dynamic batch and a dynamic
    sequence (`--dynamic`): more than XNNPACK's static reshape can size."""

    def forward(self, x):
        even, odd = x[..., ::2], x[..., 1::2]
        return x + torch.stack([-odd, even], dim=-1).flatten(-2)


def interleaved_rotation():
    return InterleavedRotation(), {"x": torch.randn(2, 4, 6, 8)}


class CloneOfTransposedBuffer(torch.nn.Module):
    """`clone()` of a buffer stored transposed (a cache laid out as `[1, 0, 2,
    3]`): preserve_format makes the copy's dim order `[1, 0, 2, 3]`, which
    ExecuTorch cannot name as a memory format."""

    def __init__(self):
        super().__init__()
        cache = torch.arange(3 * 2 * 4 * 5, dtype=torch.float32).reshape(3, 2, 4, 5) / 100
        self.register_buffer("cache", cache.transpose(0, 1))

    def forward(self, x):
        return self.cache.clone() + x


def clone_of_transposed_buffer():
    return CloneOfTransposedBuffer(), {"x": torch.randn(2, 3, 4, 5)}


class SizeSquared(torch.nn.Module):
    """`size ** 2` (seamless_m4t's relative positional bias): `operator.pow`
    on a SymInt, which ExecuTorch's emitter has no instruction for."""

    def forward(self, x):
        rows = x.shape[0]
        return x.new_ones(rows**2).cumsum(0).reshape(rows, rows) + x.sum(dim=1, keepdim=True)


def size_squared():
    return SizeSquared(), {"x": torch.randn(3, 4)}


class TailOfMaskedTokens(torch.nn.Module):
    """VideoMAE's decoder keeps the masked tokens at the end of the sequence,
    `hidden_states[:, -return_token_num:]`, where the count comes from a
    boolean mask: the slice starts at `-(u0 // batch)`, a data-dependent
    negative number ExecuTorch's re-trace cannot compare with 0."""

    def forward(self, x, mask):
        batch, _, channels = x.shape
        masked = x[mask].reshape(batch, -1, channels)
        full = torch.cat([x, masked * 2], dim=1)
        return full[:, -masked.shape[1] :] + 1


def tail_of_masked_tokens():
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[:, 1::3] = True
    return TailOfMaskedTokens(), {"x": torch.randn(2, 6, 4), "mask": mask}


class StateOfEveryKind(torch.nn.Module):
    """A parameter, a buffer, a non-persistent buffer, a lifted tensor
    constant and a `None` input: every kind of placeholder the reference's
    `_fix_missing_placeholder_vals` looks at. The `amax` over `dim=-1` makes
    the ExecuTorch amax fix change the program, so hfx writes it itself."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))
        self.register_buffer("shift", torch.full((4,), 0.25), persistent=False)
        self.table = torch.arange(4.0)  # a plain tensor attribute: lifted as a constant

    def forward(self, x, mask=None):
        y = (x @ self.weight) * self.scale + self.shift + self.table
        y = y - y.amax(dim=-1, keepdim=True)
        return y if mask is None else y * mask


def state_of_every_kind():
    return StateOfEveryKind(), {"x": torch.randn(2, 4), "mask": None}


def compare(name, fixed):
    """The program in `fixed` (a `.pt2`) against eager on the pattern's own inputs, atol/rtol 1e-4."""
    torch.manual_seed(0)
    module, inputs = globals()[name]()
    eager = module.eval()(**inputs)
    got = torch.export.load(fixed).module()(**inputs)
    if got.shape != eager.shape or not torch.allclose(got, eager, atol=1e-4, rtol=1e-4):
        raise SystemExit(
            f"{name}: {tuple(got.shape)} vs eager {tuple(eager.shape)}, max |diff| {(got - eager).abs().max().item()}"
        )
    print(f"{name}: matches eager")


def placeholders(program):
    """Every parameter, buffer and lifted-constant placeholder of `program` (a
    `.pt2`, as torch.export.load gives it to ExecuTorch) has a tensor as its
    value: what ExecuTorch's SpecPropPass builds each one's spec from."""
    ep = torch.export.load(program)
    signature = ep.graph_signature
    state = {
        **signature.inputs_to_parameters,
        **signature.inputs_to_buffers,
        **signature.inputs_to_lifted_tensor_constants,
    }
    seen = []
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.target in state:
            if not isinstance(node.meta.get("val"), torch.Tensor):
                raise SystemExit(
                    f"placeholder `{node.name}` ({state[node.target]}) has no tensor value: {node.meta.get('val')!r}"
                )
            seen.append(node.name)
    print(f"{len(seen)} state placeholder(s) with tensor values: {', '.join(seen)}")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"compare": compare, "placeholders": placeholders}[command](*args)
