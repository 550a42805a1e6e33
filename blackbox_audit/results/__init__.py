"""Results: the result model and every result file, written and read in one place.

Every command's output folder is written here and read back from here; nothing else in the
package opens a result file. The sub-modules, each with one job:

- ``model``: the data: ``MethodResult`` (what every method returns), its ``Verdict``, and
  ``ScoredSet`` (per-text scores read back, the input of methods that run on scores);
- ``writer``: ``write_result`` (a method's result -> ``scores.jsonl``, ``metrics.json``,
  ``verdict.json``, its extras, ``run.json``) and ``write_outputs`` (a command's own files
  and ``run.json``: ``logprobs``, ``ptdi-eval``, the top level of ``audit`` and ``demo``);
- ``reader``: ``read_result`` (a result folder back as a ``MethodResult``; reports and audit
  specs read only through it), ``result_folders``/``read_run`` (the step folders and the
  top-level ``run.json`` of an ``audit`` or ``demo`` folder) and ``read_scored``/
  ``require_label`` (one ``scores.jsonl`` given by the user, checked row by row);
- ``record``: ``run.json``'s record, ``RunRecorder`` (command, options, argv, wall time,
  target usage), with credentials redacted (``redact``, ``redact_argv``);
- ``provenance``: which code ran (``package_versions``, ``git_revision``);
- ``files``: atomic JSON/JSONL/text writers and ``check_out_dir`` (``--out`` proven
  writable before any work);
- ``printing``: what a person reads on the console (``print_result``, ``print_usage``, ``print_metrics``,
  ``print_score_summary``).

Metrics are computed elsewhere (``blackbox_audit.metrics``); this package records them. It
imports no method, adapter or CLI module: methods, commands and reports import it.
"""

from blackbox_audit.results.files import OUTPUT_NAMES, check_out_dir, write_json, write_jsonl, write_text
from blackbox_audit.results.model import MethodResult, ScoredSet, Verdict
from blackbox_audit.results.printing import (
    format_usage,
    metrics_rows,
    print_metrics,
    print_result,
    print_score_summary,
    print_usage,
)
from blackbox_audit.results.provenance import git_revision, package_versions
from blackbox_audit.results.reader import is_result, read_result, read_run, read_scored, require_label, result_folders
from blackbox_audit.results.record import RunRecorder, redact, redact_argv
from blackbox_audit.results.writer import STANDARD_FILES, write_outputs, write_result

__all__ = [
    "OUTPUT_NAMES",
    "STANDARD_FILES",
    "MethodResult",
    "RunRecorder",
    "ScoredSet",
    "Verdict",
    "check_out_dir",
    "git_revision",
    "is_result",
    "metrics_rows",
    "package_versions",
    "print_metrics",
    "print_result",
    "print_usage",
    "format_usage",
    "print_score_summary",
    "read_result",
    "read_run",
    "read_scored",
    "redact",
    "redact_argv",
    "require_label",
    "result_folders",
    "write_json",
    "write_jsonl",
    "write_outputs",
    "write_result",
    "write_text",
]
