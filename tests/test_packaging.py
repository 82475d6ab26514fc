"""What the wheel is built from: every package found, the version in one place, one Python range.

The wheel itself is built, checked and installed by .ci/run (.ci/wheel_contents.py,
.ci/installed_kernel.py); these tests catch the same mistakes in seconds.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest brings tomli where tomllib is missing
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ptc_retry", "kernel_ext")


def pyproject() -> Any:
    return tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))


def test_every_directory_of_modules_is_a_package_the_build_finds() -> None:
    # setuptools' package discovery skips a directory without __init__.py, and so
    # would the wheel.
    directories = {path.parent for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    assert {d for d in directories if "__pycache__" not in d.parts} == {
        d for d in directories if (d / "__init__.py").is_file()
    }
    assert pyproject()["tool"]["setuptools"]["packages"]["find"]["include"] == [
        f"{package}*" for package in PACKAGES
    ]


def test_the_version_is_written_once() -> None:
    assert pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "ptc_retry.core.version.__version__"
    }
    assigned = [
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if re.search(r"^__version__\s*=", path.read_text("utf-8"), re.MULTILINE)
    ]
    assert assigned == ["ptc_retry/core/version.py"]


def test_the_package_is_typed() -> None:
    assert (ROOT / "ptc_retry" / "py.typed").is_file()
    assert "py.typed" in pyproject()["tool"]["setuptools"]["package-data"]["ptc_retry"]


def test_the_supported_pythons_agree_with_what_ci_runs() -> None:
    project = pyproject()
    floor = project["project"]["requires-python"].removeprefix(">=")
    assert project["tool"]["mypy"]["python_version"] == floor
    versions = [
        c.rpartition(" :: ")[2]
        for c in project["project"]["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert versions[0] == floor
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    # The venvs ptc-retry is installed in (the Enterprise Gateway's runs only the gateway):
    # those make_venv makes with uv, and those the README's and the wheel's commands make.
    made = (
        r"(?:make_venv |PYENV_VERSION=)(3\.\d+)\.\d+ (?:python3 -m venv )?"
        r"(?=\S*venv)(?!\.venv-enterprise)"
    )
    tested = re.findall(made, ci)
    assert tested and {floor, versions[-1]} == set(tested)
