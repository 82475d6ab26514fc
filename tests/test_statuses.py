"""The status enumerations: the plain strings on the wire and on disk, one list each, and the
CLI help and the docs saying exactly that list."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ptc_retry.backend import RunResult
from ptc_retry.cli import main
from ptc_retry.core.layout import parse_record
from ptc_retry.core.status import FAILED, HistoryStatus, ResultStatus, history_status
from ptc_retry.core.store import CheckpointStore

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("status", [*HistoryStatus, *ResultStatus], ids=str)
def test_a_status_is_its_value_wherever_it_is_written(status: Any) -> None:
    value = status.value
    assert status == value and hash(status) == hash(value)
    assert str(status) == f"{status}" == value
    assert f"{status:>12}" == f"{value:>12}"
    assert json.dumps({"status": status}) == json.dumps({"status": value})
    assert value in {status} and type(status).of(value) is status


def test_an_unknown_status_is_refused_naming_every_status(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "root", "s")
    try:
        call = store.begin(json.dumps({"code": "x = 1"}))
        with pytest.raises(ValueError) as error:
            store.finish(call, "failed")
        for status in HistoryStatus:
            assert status.value in str(error.value)
        line = store.finish(call, HistoryStatus.PARTIAL)
        written = (store.session_dir / "history.jsonl").read_bytes().splitlines()[-1]
    finally:
        store.close()
    # On disk, and as returned, a status is the plain string.
    assert type(line["status"]) is str
    record = parse_record(written)
    assert record is not None and record["status"] == "partial" == HistoryStatus.PARTIAL


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({}, HistoryStatus.OK),
        ({"failed": True}, HistoryStatus.ERROR),
        ({"interrupted": True}, HistoryStatus.INTERRUPTED),
        ({"interrupted": True, "failed": True}, HistoryStatus.INTERRUPTED),
        # It caught the limit's interrupt, then failed: the limit stopped it.
        ({"failed": True, "stopped_by_limit": True}, HistoryStatus.INTERRUPTED),
        # It caught the limit's interrupt and ended well.
        ({"stopped_by_limit": True}, HistoryStatus.OK),
        ({"refused": True, "failed": True}, HistoryStatus.REFUSED),
        ({"cut_off": True, "failed": True}, HistoryStatus.PARTIAL),
    ],
    ids=str,
)
def test_the_history_status_of_how_a_program_ended(flags: dict[str, bool], expected: Any) -> None:
    assert history_status(**flags) is expected


def test_failed_is_error_and_interrupted_and_says_no_to_any_value() -> None:
    assert set(FAILED) == {"error", "interrupted"}
    assert [] not in FAILED and None not in FAILED


def test_a_result_status_is_ok_exactly_when_it_is_ok() -> None:
    assert [RunResult(status=s, text="").ok for s in ResultStatus] == [
        s is ResultStatus.OK for s in ResultStatus
    ]


def test_the_history_help_lists_every_status_with_its_meaning(capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["history", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exit_.value.code == 0
    for status in HistoryStatus:
        assert f"{status.value} {status.meaning}" in out


_LIST = re.compile(r"`((?:[a-z]+ \| )+[a-z]+)`")
#: Three or more statuses, each in a code span of its own: `ok`, `error`, `timeout`...
_SPANS = re.compile(r"`[a-z]+`(?:, (?:or |and )?`[a-z]+`){2,}")


def _lists(text: str) -> list[list[str]]:
    """The lists of words ``text`` writes as ``a | b | c`` or as `a`, `b`, `c`."""
    lists = [match.group(1).split(" | ") for match in _LIST.finditer(text)]
    lists += [re.findall(r"`([a-z]+)`", match.group()) for match in _SPANS.finditer(text)]
    return lists


def test_the_docs_list_each_kind_of_status_exactly_as_its_enumeration() -> None:
    kinds = {kind.__name__: [s.value for s in kind] for kind in (HistoryStatus, ResultStatus)}
    statuses = set().union(*kinds.values())
    listed_kinds = set()
    for path in DOCS:
        text = " ".join(path.read_text("utf-8").split())
        for listed in _lists(text):
            if not statuses.issuperset(listed):
                continue  # a list of something else
            names = [name for name, values in kinds.items() if values == listed]
            assert names, f"{path.name} lists {listed}: not the statuses of one kind, in order"
            listed_kinds.update(names)
    assert listed_kinds == set(kinds)
