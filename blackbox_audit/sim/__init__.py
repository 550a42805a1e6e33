"""Simulation that commands ship: the provider emulator (``emulate``), canary builders (``canary
build``, ``demo``) and the corpora they cut.

Known-truth targets are how this product shows that an audit works: a canary model trained on an
exactly known random half of a corpus, served white-box or behind an emulated provider API with
one provider's endpoint semantics. Test-only material stays in the repository's ``fixtures/``.
"""
