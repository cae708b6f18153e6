"""No code runs from a checkpoint or a config: safe torch.load, no foreign `_target_`."""

from __future__ import annotations

import re
from pathlib import Path

import fedmoo

PKG = Path(fedmoo.__file__).parent


def test_every_torch_load_is_weights_only():
    calls = []
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        for m in re.finditer(r"torch\.load\(", text):
            depth, i = 1, m.end()
            while depth:  # the whole call, up to its closing parenthesis
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            calls.append((path.name, text[m.start():i]))
    assert calls, "fedmoo loads its checkpoints with torch.load"
    for name, call in calls:
        assert "weights_only=True" in call, (name, call)


def test_only_fedmoo_classes_are_instantiated_from_configs():
    targets = []
    for path in (PKG / "conf").rglob("*.yaml"):
        targets += re.findall(r"_target_:\s*(\S+)", path.read_text())
    for path in PKG.rglob("*.py"):
        assert "hydra.utils.instantiate" not in path.read_text(), path
    assert "fedmoo.run.callbacks.SweepReport" in targets
    for t in targets:  # fedmoo's own classes, or the standard Hydra launcher plugins
        assert t.startswith(("fedmoo.", "hydra_plugins.")), t
