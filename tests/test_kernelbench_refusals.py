"""Models of Level 3's kinds at the harness's edge: a row names what stops the route (a module
without a template, a tensor attribute that is not a buffer, an op torch cannot run on
shape-only tensors) and is `unsupported`, never `error`; a constructor that reads tensor values
still builds for the published sizes."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from argus.kernelbench.harness import modelled  # noqa: E402

HEADER = """
import torch
import torch.nn as nn

batch_size = 4
features = 32

def get_inputs():
    return [torch.rand(batch_size, features)]

def get_init_inputs():
    return [features]
"""

MODELS = {
    # a constructor reading a value (`.item()` cannot run on the meta device)
    "1_ValueInInit": """
class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = float(torch.full((1,), 0.5).item())
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.linear(x)) * self.scale
""",
    "2_Recurrent": """
class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.rnn = nn.GRU(features, features, batch_first=True)

    def forward(self, x):
        return self.rnn(x.unsqueeze(1))[0]
""",
    "3_PlainTensorAttribute": """
class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.hidden = torch.randn(batch_size, features)

    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        return x + self.hidden
""",
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_model_beyond_the_route_is_unsupported_with_its_reason(tmp_path, name):
    path = tmp_path / "level3" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(HEADER + MODELS[name])
    row = modelled(path, "level3")
    if name == "1_ValueInInit":
        assert row.status == "unknown" and row.modelled_us > 0, row.reason
        return
    assert row.status == "unsupported", (row.status, row.reason)
    assert {"2_Recurrent": "nn.GRU", "3_PlainTensorAttribute": "hidden"}[name] in row.reason
