"""The import path the notebooks show for :mod:`ptc_retry.core.notice`; the same module."""

import sys

from .core import notice

sys.modules[__name__] = notice
