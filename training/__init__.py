"""The router model: token packing, the encoder classifier, its training recipe (see docs/router.md).

    switchcraft train --config configs/train.yaml
    from training import load_router, pack_request
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_router", "load_train_config", "pack_request", "run_training"]

_WHERE = {
    "load_router": "training.router",
    "pack_request": "training.packing",
    "load_train_config": "training.config",
    "run_training": "training.recipe",
}


def __getattr__(name: str) -> Any:
    # Lazy: `import training.config` must not pull in torch and transformers.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'training' has no attribute {name!r}")
