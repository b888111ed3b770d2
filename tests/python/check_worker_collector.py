"""The worker's cyclic collector (`server.GC_THRESHOLDS`): off while a
request runs, collecting after its reply is written; what the warm-up after
`hello` imported is frozen.

    python check_worker_collector.py

Runs `server.main()` on a request stream: `hello`, then two probe requests.
The first probe leaves a reference cycle behind; the second finds that cycle
collected (between the two requests) and the collector off (inside it).
Exits non-zero with one line per failure.
"""

import dataclasses
import gc
import io
import json
import os
import sys
import weakref
from typing import ClassVar

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker import protocol, server  # noqa: E402


@dataclasses.dataclass
class ProbeParams:
    NAME: ClassVar[str] = "`probe` request"
    leave_cycle: bool


class Cycle:
    def __init__(self):
        self.me = self


failures = []
left = []  # weak references to the cycles probes left behind
seen = []  # what each probe saw: (collector on?, cycles still alive)


def probe(_session, params: ProbeParams):
    seen.append((gc.isenabled(), sum(ref() is not None for ref in left)))
    if params.leave_cycle:
        cycle = Cycle()
        left.append(weakref.ref(cycle))
        del cycle
        if left[-1]() is None:
            failures.append("a cycle was freed inside the request that made it")
    return {}


server.METHODS["probe"] = (ProbeParams, probe)
requests = [
    {
        "id": 1,
        "method": "hello",
        "params": {"protocol": protocol.PROTOCOL, "memo_dir": None, "warm_up": True},
    },
    {"id": 2, "method": "probe", "params": {"leave_cycle": True}},
    {"id": 3, "method": "probe", "params": {"leave_cycle": False}},
]
replies = io.StringIO()
stdin, stdout = sys.stdin, sys.stdout
sys.stdin, sys.stdout = io.StringIO("".join(json.dumps(r) + "\n" for r in requests)), replies
try:
    server.main()
finally:
    sys.stdin, sys.stdout = stdin, stdout

answers = [json.loads(line) for line in replies.getvalue().splitlines()]
errors = [a["error"]["message"] for a in answers if "error" in a]
if errors or len(answers) != 3:
    failures.append(f"expected 3 replies without error, got {len(answers)}: {errors}")
if seen != [(False, 0), (False, 0)]:
    failures.append(
        f"each probe should see the collector off and no cycle left by an earlier request, saw {seen}"
    )
if "torch" not in sys.modules:
    failures.append("the warm-up after `hello` did not import torch")
elif gc.get_freeze_count() < 10_000:
    failures.append(
        f"the warm-up froze {gc.get_freeze_count()} objects: torch's should be among them"
    )

for failure in failures:
    print(failure, file=sys.stderr)
sys.exit(1 if failures else 0)
