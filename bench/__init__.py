"""Benchmark scripts, run from the repository root (``python bench/X.py`` or ``python -m bench.X``).

What they share is in ``bench.common``.
"""
