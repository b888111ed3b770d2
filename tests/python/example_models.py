"""Models for the example plugins of docs/plugins.md (`examples/plugins/`),
for `hfx run --model-fn python:example_models:NAME`."""

import torch


class Hypot(torch.nn.Module):
    """A distance of two coordinates (as a polar transform computes one):
    `torch.hypot` has no ONNX operator and no decomposition in torch."""

    def forward(self, x, y):
        return torch.hypot(x * 0.5, y) + x


def hypot(length=8):
    return Hypot().eval(), {"x": torch.randn(2, length), "y": torch.randn(2, length)}
