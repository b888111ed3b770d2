"""Model functions for `hfx run --model-fn python:hfx_test_models:NAME` in the tests."""

import sys
import time

import torch


class Doubler(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


def doubler():
    return Doubler(), {"x": torch.randn(3, 4)}


def raises():
    raise ValueError("this model cannot be built (on purpose)")


def hangs():
    print("about to hang", file=sys.stderr, flush=True)
    time.sleep(3600)


def crashes():
    print("about to crash", file=sys.stderr, flush=True)
    import os
    os._exit(3)
