"""The ``ptc-retry`` Jupyter kernel: ipykernel with the ptc_retry extension always on.

Every execute_reply carries ``metadata["ptc_retry"]``: ``call_id``,
``checkpoint``, ``ordinal``, ``status``, ``notice`` and ``guard``. Launch it with
``python -m kernel_ext -f CONNECTION_FILE``, or install its kernelspec with
``ptc-retry install-kernel``.
"""

from __future__ import annotations

from ptc_retry.kernelspec import DISPLAY_NAME, KERNEL_NAME

__all__ = ["DISPLAY_NAME", "KERNEL_NAME"]
