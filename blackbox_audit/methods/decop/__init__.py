"""DE-COP in one package: ``method`` (``Decop``, ``DecopConfig``), ``quiz`` (the multiple-choice quiz
and its maths), ``paraphrases`` (where the quiz's paraphrases come from)."""

from .method import Decop, DecopConfig

__all__ = ["Decop", "DecopConfig"]
