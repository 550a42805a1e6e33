"""blackbox-audit: audit language models for training-data use, white-box or through APIs."""

__version__ = "0.1.0"
