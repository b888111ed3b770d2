"""The portable kernel calls of a `.pte`'s `forward` that write a tensor of
a given size: `check_pte_kernels.py PTE NUMEL CALLS` exits 0 when the calls
whose output (an out-variant's last argument) holds NUMEL elements are CALLS
(`{"op": count}` as JSON), as ExecuTorch's serialized program records them."""

import collections
import json
import sys

from executorch.exir._serialize._program import deserialize_pte_binary

pte, numel, expected = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
with open(pte, "rb") as f:
    program = deserialize_pte_binary(f.read()).program
plan = next(p for p in program.execution_plan if p.name == "forward")
calls = collections.Counter()
for chain in plan.chains:
    for instruction in chain.instructions:
        args = instruction.instr_args
        if not hasattr(args, "op_index"):
            continue
        out = plan.values[args.args[-1]].val
        sizes = getattr(out, "sizes", None)
        if sizes is None:
            continue
        count = 1
        for size in sizes:
            count *= size
        if count == numel:
            calls[plan.operators[args.op_index].name] += 1
assert dict(calls) == expected, f"kernel calls writing {numel} elements: {dict(calls)}"
