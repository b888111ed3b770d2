"""Which of a `.pte`'s inputs and outputs its arena holds, as the ExecuTorch
runtime reads them: `check_pte_memory.py PTE INPUTS OUTPUTS` exits 0 when
every tensor input is memory-planned exactly if INPUTS is `planned` (else
`caller`), and every tensor output exactly if OUTPUTS is."""

import sys

from executorch.runtime import Runtime

pte, inputs, outputs = sys.argv[1], sys.argv[2] == "planned", sys.argv[3] == "planned"
meta = Runtime.get().load_program(pte).load_method("forward").metadata


def planned(tensor_meta, count):
    found = []
    for i in range(count):
        try:
            found.append(tensor_meta(i).is_memory_planned())
        except (RuntimeError, ValueError):  # not a tensor
            pass
    assert found, "no tensor"
    return found


got_inputs = planned(meta.input_tensor_meta, meta.num_inputs())
got_outputs = planned(meta.output_tensor_meta, meta.num_outputs())
assert all(p == inputs for p in got_inputs), f"inputs planned: {got_inputs}"
assert all(p == outputs for p in got_outputs), f"outputs planned: {got_outputs}"
