"""``ptc-retry eval``: a keyless A/B evaluation of what replay saves, on real kernels.

A corpus of failed agent programs and of calls cut off mid-stream (:mod:`.scenarios`) is
played in two arms (:mod:`.runner`, with the scripted model of each in :mod:`.arms`) and
measured (:mod:`.outcomes`); :mod:`.figures`, :mod:`.report` (with the sections of
:mod:`.tables` and :mod:`.discussion`) and :mod:`.chart` turn the measurements into
``report.md``, ``report.json`` and ``savings.png``. docs/eval.md is the manual.
"""

from __future__ import annotations
