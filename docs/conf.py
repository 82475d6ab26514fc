"""Sphinx configuration of the ptc-retry documentation site.

Sphinx with MyST, as nbclient, ipykernel and jupyter_client build theirs: the pages stay
Markdown that reads on its own (GitHub shows it as it is), and the API reference comes from
the docstrings through autodoc. Built strict by ``.ci/run``:

    sphinx-build -W --keep-going -b html docs docs/_build/html

so a broken link, a missing page or a docstring autodoc cannot read fails the build.
"""

from __future__ import annotations

from ptc_retry import __version__

project = "ptc-retry"
copyright = "the ptc-retry authors, BSD-3-Clause"
release = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]

# Links such as [Storage](storage.md#tool-calls) name a heading by its GitHub-style slug.
myst_heading_anchors = 4

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}

html_theme = "furo"
html_title = f"ptc-retry {release}"
