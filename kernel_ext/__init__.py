"""The ``ptc-retry`` Jupyter kernel: ipykernel with the ptc_retry extension always on.

Every execute_reply carries ``metadata["ptc_retry"]``: ``call_id``,
``checkpoint``, ``ordinal``, ``status``, ``notice`` and ``guard``. Launch it with
``python -m kernel_ext -f CONNECTION_FILE``, or install its kernelspec with
``ptc-retry install-kernel``.
"""

from __future__ import annotations

KERNEL_NAME = "ptc-retry"
DISPLAY_NAME = "Python 3 (ptc-retry)"

__all__ = ["DISPLAY_NAME", "KERNEL_NAME"]
