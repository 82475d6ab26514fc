"""Retake the screenshots of docs/notebook.md ("What a person sees"): JupyterLab and
Notebook 7 at 700 px and 1280 px, taken by the browser test as it runs.

    pip install -e '.[test,browser]' && apt-get install chromium
    python docs/screenshots/retake.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

if __name__ == "__main__":
    env = {**os.environ, "PTC_RETRY_SCREENSHOTS": str(HERE)}
    test = [sys.executable, "-m", "pytest", "tests/test_browser.py", "-q", "-n", "0"]
    sys.exit(subprocess.run([*test, "-p", "no:cacheprovider"], cwd=ROOT, env=env).returncode)
