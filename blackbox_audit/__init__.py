"""blackbox-audit: audit language models for training-data use, white-box or through APIs.

The Python API (``blackbox_audit.api``, docs/python.md) is reached from here without importing it
up front (the CLI's ``--help`` stays fast): ``Session``, ``target``, ``run``, ``plan``, ``save``.
"""

from typing import Any

__version__ = "0.1.0"

_API = ("Session", "Audit", "target", "run", "plan", "save", "read_data")


def __getattr__(name: str) -> Any:
    if name in _API:
        from blackbox_audit import api

        return getattr(api, name)
    raise AttributeError(f"module 'blackbox_audit' has no attribute {name!r}")


__all__ = ["__version__", *_API]
