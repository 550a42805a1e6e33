"""One logging setup for a run: ours at WARNING (DEBUG under ``-v``), the libraries' quiet.

transformers, torch and peft speak to developers (``FutureWarning: is_gradient_checkpointing is
deprecated``, ``loss_type=None ... unrecognized``); printed between a run's progress lines they read
as something wrong with the user's run. So their loggers stay at ERROR and their Python warnings are
ignored, unless ``-v`` asks for everything: then each is shown once, through logging like every
other line (``logging.captureWarnings``). The CLI's ``main`` calls ``setup_logging`` once, before any
of those libraries is imported.
"""

from __future__ import annotations

import logging
import os
import warnings

#: libraries whose logs and warnings are for their developers, not for our users
LIBRARIES = ("transformers", "torch", "peft", "accelerate", "huggingface_hub", "tokenizers", "safetensors")
FORMAT = "%(levelname)s %(name)s: %(message)s"
#: transformers configures its logger from this variable when it is first imported
_HF_VERBOSITY = "TRANSFORMERS_VERBOSITY"
_set_by_us: str | None = None


class _NotPrintedTwice(logging.Filter):
    """transformers prints its records through its own handler and, where ``CI`` is set, also lets them
    propagate to ours: the root handler leaves them to transformers, so each is shown once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith("transformers")


def setup_logging(verbose: bool = False) -> None:
    """Configure logging for a run (module doc); ``verbose`` is the CLI's ``-v``."""
    global _set_by_us
    root = logging.getLogger()
    if not root.handlers:  # as basicConfig: a handler already there (a host program's, pytest's) is left alone
        logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format=FORMAT)
        for handler in root.handlers:  # the one basicConfig just made
            handler.addFilter(_NotPrintedTwice())
    logging.captureWarnings(True)  # warnings.warn -> the "py.warnings" logger, formatted like the rest
    level = logging.WARNING if verbose else logging.ERROR
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(level)  # already imported (a Python caller): set now
        warnings.filterwarnings("default" if verbose else "ignore", module=rf"{name}(\.|$)")
    if os.environ.get(_HF_VERBOSITY) in (None, _set_by_us):  # a user's own choice stands
        _set_by_us = os.environ[_HF_VERBOSITY] = "warning" if verbose else "error"
