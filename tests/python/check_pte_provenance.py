"""A portable `.pte` hfx wrote carries its provenance as named data, which
ExecuTorch's own deserializer reads back: `check_pte_provenance.py PTE PLUGIN`
exits 0 when the `hfx.provenance` entry is JSON naming hfx's version and
PLUGIN with a component hash."""

import json
import sys

from executorch.exir._serialize._program import deserialize_pte_binary

pte, plugin = sys.argv[1], sys.argv[2]
with open(pte, "rb") as f:
    named = deserialize_pte_binary(f.read()).named_data
assert named is not None, "no named data"
entry = named.pte_data["hfx.provenance"]
provenance = json.loads(bytes(named.buffers[entry.buffer_index]))
assert provenance["version"], provenance
found = [p for p in provenance["plugins"] if p["name"] == plugin]
assert found and len(found[0]["sha256"]) == 64, provenance
