"""Models for the example plugins of docs/plugins.md (`examples/plugins/`),
for `hfx run --model-fn python:example_models:NAME`."""

import torch


class Expm1(torch.nn.Module):
    def forward(self, x):
        return torch.expm1(x * 0.5) + x


def expm1(length=8):
    return Expm1().eval(), {"x": torch.randn(2, length)}
