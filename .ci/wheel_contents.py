"""Check a built wheel against the source tree it was built from.

    python .ci/wheel_contents.py dist/ptc_retry-X-py3-none-any.whl .

Every module of ``ptc_retry`` and ``kernel_ext`` in the source tree must be in the
wheel (a subpackage the build left out would pass the editable-install tests and
fail every user), with ``py.typed``, the license file and the metadata a user's
installer and type checker read. Exits non-zero, naming what is missing.
"""

from __future__ import annotations

import sys
import zipfile
from email.parser import HeaderParser
from pathlib import Path

PACKAGES = ("ptc_retry", "kernel_ext")
EXPECTED_METADATA = {
    "License-Expression": "BSD-3-Clause",
    "Requires-Python": ">=3.10",
}


def source_files(source: Path) -> set[str]:
    """The modules and typing marker the wheel must carry, as paths inside it."""
    found = {"ptc_retry/py.typed"}
    for package in PACKAGES:
        for path in (source / package).rglob("*.py"):
            if "__pycache__" not in path.parts:
                found.add(path.relative_to(source).as_posix())
    return found


def problems(wheel: Path, source: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (dist_info,) = {name.split("/")[0] for name in names if ".dist-info/" in name}
        metadata = HeaderParser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
    found = [f"missing from the wheel: {name}" for name in sorted(source_files(source) - names)]
    if f"{dist_info}/licenses/LICENSE" not in names:
        found.append(f"missing from the wheel: {dist_info}/licenses/LICENSE")
    for field, expected in EXPECTED_METADATA.items():
        if metadata.get(field) != expected:
            found.append(f"METADATA {field}: {metadata.get(field)!r}, expected {expected!r}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    wheel, source = Path(argv[0]), Path(argv[1])
    found = problems(wheel, source)
    for problem in found:
        print(problem, file=sys.stderr)
    if not found:
        print(f"{wheel.name}: every module of {', '.join(PACKAGES)}, py.typed, LICENSE")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
