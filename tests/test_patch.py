"""The native-mode patch engine: path grammar, the three kinds of entry, and their errors."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from ptc_retry.core.errors import PatchError, PtcRetryError
from ptc_retry.core.patch import apply_patch, validate_patch
from ptc_retry.core.patch_path import PathSegment, format_path, parse_path

ARGS: dict[str, Any] = {
    "code": "x = 1\nprint(x)\n",
    "config": {"mode": "fast", "retries": 3, "a.b": "dotted"},
    "items": [{"name": "n0"}, {"name": "n1"}, {"name": "n2"}],
    "grid": [[1, 2], [3, 4]],
    "flag": True,
    "nothing": None,
}


def patched(patch: list[Any], arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    return apply_patch(copy.deepcopy(ARGS if arguments is None else arguments), patch)


@contextlib.contextmanager
def raises_patch_error(*fragments: str) -> Iterator[pytest.ExceptionInfo[PatchError]]:
    """Expect a PatchError whose message holds every fragment."""
    with pytest.raises(PatchError) as info:
        yield info
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message


# -- parse_path: the grammar --------------------------------------------------------

VALID_PATHS = [
    ("code", ("code",)),
    ("config.mode", ("config", "mode")),
    (".config.mode", ("config", "mode")),
    ("items[0].name", ("items", 0, "name")),
    ("a[0][1]", ("a", 0, 1)),
    ("a[10]", ("a", 10)),
    ('["a.b"]', ("a.b",)),
    ('config["a.b"]', ("config", "a.b")),
    ('x["[0]"].y', ("x", "[0]", "y")),
    ('x[""]', ("x", "")),
    ('x["q\\"uote"]', ("x", 'q"uote')),
    ('x["\\u00e9"]', ("x", "é")),
    ("x.0", ("x", "0")),
    ("with space.and-dash", ("with space", "and-dash")),
    ("é.🙂", ("é", "🙂")),
    ('say"hi"', ('say"hi"',)),
]


@pytest.mark.parametrize(("path", "segments"), VALID_PATHS, ids=[p for p, _ in VALID_PATHS])
def test_parse_path_accepts_the_grammar(path: str, segments: tuple[PathSegment, ...]) -> None:
    assert parse_path(path) == segments


INVALID_PATHS = [
    ("", ["the path is empty"]),
    ("..", ["position 1", "empty key"]),
    ("a.", ["position 2", "ends with '.'"]),
    ("a..b", ["position 2", "empty key"]),
    ("a[", ["position 1", "never closed"]),
    ("a[0", ["position 1", "never closed"]),
    ("a[x]", ["position 2", "[x] is not an index"]),
    ("a]b", ["position 1", "unmatched ']'"]),
    ("[0]", ["position 0", "starts with a top-level key, not an index"]),
    (".[0]", ["position 1", "'.' must be followed by a key"]),
    ("a[-1]", ["position 2", "negative index [-1]"]),
    ("a[]", ["position 2", "empty brackets"]),
    ("a.[0]", ["position 2", "'.' must be followed by a key", "a[0]"]),
    ("a[0]b", ["position 4", "expected '.', '[' or the end"]),
    ("a['k']", ["position 2", "double quotes"]),
    ('a["k', ["position 2", "bad quoted key"]),
    ('a["k"', ["position 5", "expected ']' after the quoted key"]),
    ('a["k"x]', ["position 5", "expected ']' after the quoted key"]),
    ("a[ 0 ]", ["position 2", "is not an index"]),
    ("a[٣]", ["position 2", "is not an index"]),
]


@pytest.mark.parametrize(("path", "fragments"), INVALID_PATHS, ids=[p for p, _ in INVALID_PATHS])
def test_parse_path_rejects_invalid_paths_saying_where_and_the_valid_form(
    path: str, fragments: list[str]
) -> None:
    with raises_patch_error(*fragments, "valid paths look like"):
        parse_path(path)


def test_parse_path_rejects_a_non_string() -> None:
    with raises_patch_error("must be a string", "got a number"):
        parse_path(3)  # type: ignore[arg-type]


def test_patch_error_is_a_ptc_retry_error() -> None:
    assert issubclass(PatchError, PtcRetryError)


FORMATTED = [
    (("code",), "code"),
    (("items", 0, "name"), "items[0].name"),
    (("a.b", "c"), '["a.b"].c'),
    (("x", ""), 'x[""]'),
    (("x", "has space"), 'x["has space"]'),
    (("x", "line\nbreak"), 'x["line\\nbreak"]'),
    (("é", "🙂"), "é.🙂"),
]


@pytest.mark.parametrize(("segments", "text"), FORMATTED, ids=[t for _, t in FORMATTED])
def test_format_path_writes_the_canonical_form(
    segments: tuple[PathSegment, ...], text: str
) -> None:
    assert format_path(segments) == text


# -- {path, value} --------------------------------------------------------------------

VALUE_CASES = [
    ("top_level", [{"path": "code", "value": "print(2)"}], ("code",), "print(2)"),
    ("nested", [{"path": "config.mode", "value": "slow"}], ("config", "mode"), "slow"),
    ("leading_dot", [{"path": ".config.mode", "value": "slow"}], ("config", "mode"), "slow"),
    ("array_index", [{"path": "items[1].name", "value": "x"}], ("items", 1, "name"), "x"),
    ("whole_array_item", [{"path": "items[2]", "value": 7}], ("items", 2), 7),
    ("nested_indexes", [{"path": "grid[1][0]", "value": 30}], ("grid", 1, 0), 30),
    ("quoted_key", [{"path": 'config["a.b"]', "value": "q"}], ("config", "a.b"), "q"),
    ("new_key", [{"path": "config.timeout", "value": 5}], ("config", "timeout"), 5),
    ("new_top_level_key", [{"path": "extra", "value": [1]}], ("extra",), [1]),
    ("to_null", [{"path": "flag", "value": None}], ("flag",), None),
    ("from_null", [{"path": "nothing", "value": {"k": 1}}], ("nothing",), {"k": 1}),
    ("wrong_type_fixed", [{"path": "config.retries", "value": "3"}], ("config", "retries"), "3"),
    ("non_bmp_value", [{"path": "code", "value": "print('🙂𝄞')"}], ("code",), "print('🙂𝄞')"),
]


def value_at(obj: Any, segments: tuple[PathSegment, ...]) -> Any:
    for segment in segments:
        obj = obj[segment]
    return obj


@pytest.mark.parametrize(
    ("patch", "where", "expected"),
    [case[1:] for case in VALUE_CASES],
    ids=[case[0] for case in VALUE_CASES],
)
def test_value_entry_replaces_or_creates_the_value_at_its_path(
    patch: list[Any], where: tuple[PathSegment, ...], expected: Any
) -> None:
    assert value_at(patched(patch), where) == expected


def test_value_entry_changes_nothing_else() -> None:
    result = patched([{"path": "items[1].name", "value": "x"}])
    expected = copy.deepcopy(ARGS)
    expected["items"][1]["name"] = "x"
    assert result == expected


def test_result_does_not_share_the_patch_value() -> None:
    value = {"deep": [1]}
    result = patched([{"path": "extra", "value": value}])
    result["extra"]["deep"].append(2)
    assert value == {"deep": [1]}


# -- {path, old_string, new_string} ---------------------------------------------------

TEXT_CASES = [
    ("once", "x = 1\nprint(x)", {"old_string": "x = 1", "new_string": "x = 2"}, "x = 2\nprint(x)"),
    (
        "multiline_old_string",
        "a\nb\nc",
        {"old_string": "a\nb", "new_string": "A\nB"},
        "A\nB\nc",
    ),
    ("delete_text", "keep drop keep2", {"old_string": " drop", "new_string": ""}, "keep keep2"),
    (
        "replace_all",
        "x + x + x",
        {"old_string": "x", "new_string": "y", "replace_all": True},
        "y + y + y",
    ),
    (
        "replace_all_single_match",
        "x + 1",
        {"old_string": "x", "new_string": "y", "replace_all": True},
        "y + 1",
    ),
    (
        "replace_all_false",
        "a b",
        {"old_string": "a", "new_string": "c", "replace_all": False},
        "c b",
    ),
    ("unicode", "naïve café", {"old_string": "café", "new_string": "thé"}, "naïve thé"),
    ("non_bmp", "say 🙂 or 𝄞", {"old_string": "🙂", "new_string": "😀"}, "say 😀 or 𝄞"),
    ("quotes_are_literal", 'f("a")', {"old_string": '"a"', "new_string": '"b"'}, 'f("b")'),
    ("backslash_literal", "r'\\d+'", {"old_string": "\\d+", "new_string": "\\w+"}, "r'\\w+'"),
]


@pytest.mark.parametrize(
    ("text", "edit", "expected"),
    [case[1:] for case in TEXT_CASES],
    ids=[case[0] for case in TEXT_CASES],
)
def test_text_entry_replaces_literal_text_inside_the_string(
    text: str, edit: dict[str, Any], expected: str
) -> None:
    result = apply_patch({"code": text}, [{"path": "code", **edit}])
    assert result == {"code": expected}


def test_text_entry_reaches_nested_strings() -> None:
    result = patched([{"path": "items[2].name", "old_string": "n2", "new_string": "two"}])
    assert result["items"][2]["name"] == "two"


def test_text_entry_matches_the_decoded_string_not_its_json_escapes() -> None:
    arguments = json.loads('{"code": "print(\\"hi\\")\\nprint(2)"}')
    patch = [{"path": "code", "old_string": 'print("hi")\nprint', "new_string": "print"}]
    assert apply_patch(arguments, patch) == {"code": "print(2)"}


def test_text_entry_edits_inside_a_stringified_json_field() -> None:
    # The field holds JSON whose own string holds an escaped newline; the model
    # writes the text as it reads in that inner value, with a real newline.
    arguments = json.loads('{"body": "{\\"a\\": \\"x\\\\ny\\"}"}')
    assert arguments["body"] == '{"a": "x\\ny"}'
    result = apply_patch(arguments, [{"path": "body", "old_string": "x\ny", "new_string": 'x\n"z'}])
    assert result["body"] == '{"a": "x\\n\\"z"}'
    assert json.loads(result["body"]) == {"a": 'x\n"z'}


def test_text_entry_in_stringified_json_prefers_the_literal_text() -> None:
    arguments = {"body": '{"a": "x", "b": "y"}'}
    patch = [{"path": "body", "old_string": '"b": "y"', "new_string": '"b": "z"'}]
    assert apply_patch(arguments, patch) == {"body": '{"a": "x", "b": "z"}'}


def test_text_entry_in_ascii_escaped_json_matches_non_ascii_text() -> None:
    arguments = {"body": json.dumps({"greeting": "café 🙂"})}
    patch = [{"path": "body", "old_string": "café 🙂", "new_string": "thé 😀"}]
    result = apply_patch(arguments, patch)
    assert json.loads(result["body"]) == {"greeting": "thé 😀"}


# -- {path}: delete -------------------------------------------------------------------

DELETE_CASES = [
    ("top_level_key", "code", lambda a: a.pop("code")),
    ("nested_key", "config.mode", lambda a: a["config"].pop("mode")),
    ("quoted_key", 'config["a.b"]', lambda a: a["config"].pop("a.b")),
    ("array_item_shifts_later_items", "items[0]", lambda a: a["items"].pop(0)),
    ("last_array_item", "items[2]", lambda a: a["items"].pop(2)),
    ("nested_array_item", "grid[0][1]", lambda a: a["grid"][0].pop(1)),
    ("null_value", "nothing", lambda a: a.pop("nothing")),
]


@pytest.mark.parametrize(
    ("path", "expect"), [case[1:] for case in DELETE_CASES], ids=[case[0] for case in DELETE_CASES]
)
def test_path_alone_deletes_the_field_or_array_item(path: str, expect: Any) -> None:
    expected = copy.deepcopy(ARGS)
    expect(expected)
    assert patched([{"path": path}]) == expected


# -- order, copies -----------------------------------------------------------------------


def test_entries_apply_in_order_each_to_the_previous_result() -> None:
    result = patched(
        [
            {"path": "items[0]"},
            {"path": "items[0].name", "value": "first"},
            {"path": "code", "old_string": "x = 1", "new_string": "x = 2"},
            {"path": "code", "old_string": "x = 2", "new_string": "x = 3"},
        ]
    )
    assert result["items"] == [{"name": "first"}, {"name": "n2"}]
    assert result["code"] == "x = 3\nprint(x)\n"


def test_entry_can_edit_a_value_an_earlier_entry_created() -> None:
    result = patched(
        [
            {"path": "new", "value": {"list": ["a b"]}},
            {"path": "new.list[0]", "old_string": "a", "new_string": "A"},
        ]
    )
    assert result["new"] == {"list": ["A b"]}


def test_apply_patch_returns_a_new_object_and_leaves_inputs_unchanged() -> None:
    arguments = copy.deepcopy(ARGS)
    patch = [
        {"path": "items[1].name", "value": "x"},
        {"path": "grid[0]"},
        {"path": "config.mode", "old_string": "fast", "new_string": "slow"},
    ]
    patch_before = copy.deepcopy(patch)
    result = apply_patch(arguments, patch)
    assert result is not arguments
    assert arguments == ARGS
    assert patch == patch_before


def test_failed_patch_leaves_the_input_unchanged() -> None:
    arguments = copy.deepcopy(ARGS)
    with pytest.raises(PatchError):
        apply_patch(arguments, [{"path": "items[0].name", "value": "x"}, {"path": "missing"}])
    assert arguments == ARGS


# -- errors while applying ---------------------------------------------------------------

APPLY_ERRORS = [
    (
        "missing_top_level_key",
        [{"path": "cod"}],
        ['patch[0] (path "cod") not found', 'the arguments object has no key "cod"', '"code"'],
    ),
    (
        "missing_nested_key_lists_keys_there",
        [{"path": "config.mdoe.x", "value": 1}],
        ['"config" has no key "mdoe"', '"a.b", "mode", "retries"', 'did you mean "mode"'],
    ),
    (
        "missing_key_to_delete",
        [{"path": "config.gone"}],
        ['"config" has no key "gone"'],
    ),
    (
        "missing_key_to_edit",
        [{"path": "config.gone", "old_string": "a", "new_string": "b"}],
        ['"config" has no key "gone"'],
    ),
    (
        "index_out_of_range",
        [{"path": "items[3].name", "value": 1}],
        ['"items" has 3 items', "[3] is out of range", "0 to 2"],
    ),
    (
        "missing_index_not_created",
        [{"path": "items[3]", "value": 1}],
        ['"items" has 3 items', "[3] is out of range"],
    ),
    (
        "index_into_empty_array",
        [{"path": "empty[0]"}],
        ['"empty" is an empty array'],
    ),
    (
        "key_into_array",
        [{"path": "items.name", "value": 1}],
        ['"items" is an array of 3 items', 'no key "name"', '"items[0]"'],
    ),
    (
        "index_into_object",
        [{"path": "config[0]", "value": 1}],
        ['"config" is an object, not an array', "no index [0]"],
    ),
    (
        "into_a_string",
        [{"path": "code.x", "value": 1}],
        ['"code" is a string', 'no key "x"', '"old_string"'],
    ),
    (
        "into_a_number",
        [{"path": "config.retries[0]", "value": 1}],
        ['"config.retries" is a number', "no index [0]"],
    ),
    (
        "into_null",
        [{"path": "nothing.x"}],
        ['"nothing" is null', 'no key "x"'],
    ),
    (
        "edit_of_a_non_string",
        [{"path": "config.retries", "old_string": "3", "new_string": "5"}],
        ["is a number, not a string", '{"path": "config.retries", "value": ...}'],
    ),
    (
        "edit_of_an_object",
        [{"path": "config", "old_string": "a", "new_string": "b"}],
        ["is an object, not a string", '"value"'],
    ),
    (
        "old_string_absent",
        [{"path": "code", "old_string": "y = 1", "new_string": "y = 2"}],
        ["occurs 0 times", "copy it exactly"],
    ),
    (
        "old_string_several",
        [{"path": "code", "old_string": "x", "new_string": "y"}],
        ["occurs 2 times", "add surrounding text", '"replace_all": true'],
    ),
    (
        "old_string_overlapping",
        [
            {"path": "items[0].name", "value": "aaa"},
            {"path": "items[0].name", "old_string": "aa", "new_string": "b"},
        ],
        ["patch[1]", "occurs 2 times"],
    ),
    (
        "replace_all_absent",
        [{"path": "code", "old_string": "zz", "new_string": "y", "replace_all": True}],
        ["occurs 0 times"],
    ),
    (
        "old_string_written_with_json_escapes",
        [{"path": "code", "old_string": "x = 1\\nprint", "new_string": "y"}],
        ["occurs 0 times", "JSON escapes", "write the characters themselves"],
    ),
    (
        "later_entry_names_its_number",
        [{"path": "items[0]"}, {"path": "items[2]"}],
        ['patch[1] (path "items[2]") not found', '"items" has 2 items'],
    ),
]


@pytest.mark.parametrize(
    ("patch", "fragments"),
    [case[1:] for case in APPLY_ERRORS],
    ids=[case[0] for case in APPLY_ERRORS],
)
def test_apply_patch_error_says_what_is_there_and_what_to_send(
    patch: list[Any], fragments: list[str]
) -> None:
    with raises_patch_error(*fragments):
        patched(patch, {**ARGS, "empty": []})


def test_stringified_json_error_mentions_the_escaped_form_too() -> None:
    with raises_patch_error("occurs 0 times", "nor in its JSON-escaped form"):
        apply_patch(
            {"body": '{"a": "x"}'}, [{"path": "body", "old_string": "q\n", "new_string": ""}]
        )


def test_missing_key_error_lists_at_most_twenty_keys() -> None:
    arguments = {"obj": {f"k{n:02d}": n for n in range(25)}}
    with raises_patch_error('"k00"', '"k19"', "and 5 more") as info:
        apply_patch(arguments, [{"path": "obj.zzz"}])
    assert '"k20"' not in str(info.value)


def test_index_into_object_points_to_a_numeric_key() -> None:
    with raises_patch_error('for its key "0" write "m.0"'):
        apply_patch({"m": {"0": "zero"}}, [{"path": "m[0]"}])


def test_apply_patch_rejects_arguments_that_are_not_an_object() -> None:
    with raises_patch_error("the saved arguments are an array, not a JSON object"):
        apply_patch([1], [{"path": "a"}])  # type: ignore[arg-type]


# -- validate_patch ----------------------------------------------------------------------

SHAPE_ERRORS = [
    ("empty", [], ["patch is empty: give at least one entry"]),
    ("not_a_list", 3, ["patch must be a list of entries", "got a number"]),
    ("a_bare_entry", {"path": "code"}, ["wrap the entry in a list"]),
    ("a_json_string", '[{"path": "code"}]', ["not a string; send the list itself"]),
    ("entry_not_an_object", ["code"], ["patch[0] must be an object", "got a string"]),
    ("no_path", [{"value": 1}], ['patch[0] has no "path"']),
    ("path_not_a_string", [{"path": ["a", 0]}], ["patch[0].path must be a string", "an array"]),
    ("invalid_path", [{"path": "a..b"}], ["patch[0]: invalid path", "position 2"]),
    (
        "unknown_keys_named",
        [{"path": "a", "old": "x", "new": "y"}],
        ['patch[0] has unknown keys "new", "old"', "{path, old_string, new_string}"],
    ),
    ("unknown_key_singular", [{"path": "a", "val": 1}], ['unknown key "val"']),
    ("value_and_old_string", [{"path": "a", "value": 1, "old_string": "x"}], ['mixes "value"']),
    ("old_without_new", [{"path": "a", "old_string": "x"}], ['no "new_string"', 'use ""']),
    ("new_without_old", [{"path": "a", "new_string": "x"}], ['no "old_string"']),
    ("empty_old_string", [{"path": "a", "old_string": "", "new_string": "x"}], ["is empty"]),
    (
        "old_string_not_a_string",
        [{"path": "a", "old_string": 3, "new_string": "x"}],
        ["patch[0].old_string must be a string, got a number"],
    ),
    (
        "new_string_not_a_string",
        [{"path": "a", "old_string": "x", "new_string": None}],
        ["patch[0].new_string must be a string, got null"],
    ),
    (
        "replace_all_not_a_boolean",
        [{"path": "a", "old_string": "x", "new_string": "y", "replace_all": "yes"}],
        ["replace_all must be true or false, got a string"],
    ),
    ("replace_all_alone", [{"path": "a", "replace_all": True}], ['"replace_all" only goes']),
    (
        "second_entry_named",
        [{"path": "a"}, {"path": "b", "value": 1, "new_string": ""}],
        ["patch[1] mixes"],
    ),
]


@pytest.mark.parametrize(
    ("patch", "fragments"),
    [case[1:] for case in SHAPE_ERRORS],
    ids=[case[0] for case in SHAPE_ERRORS],
)
def test_validate_patch_rejects_bad_shapes_naming_entry_and_field(
    patch: object, fragments: list[str]
) -> None:
    with raises_patch_error(*fragments):
        validate_patch(patch)


def test_apply_patch_checks_the_shape_first() -> None:
    with raises_patch_error("patch is empty"):
        apply_patch({"a": 1}, [])


def test_validate_patch_returns_the_entries() -> None:
    patch = [
        {"path": "a", "value": 1},
        {"path": "b"},
        {"path": "c", "old_string": "x", "new_string": "y", "replace_all": True},
    ]
    assert validate_patch(patch) == patch


# -- properties ----------------------------------------------------------------------------

keys = st.text(max_size=6) | st.sampled_from(["a", "a.b", "[0]", "", " ", '"', "é", "🙂", "0"])
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=16,
)
json_objects = st.dictionaries(keys, json_values, max_size=5)
segment_tuples = st.tuples(st.text()).flatmap(
    lambda first: st.lists(st.text() | st.integers(min_value=0), max_size=6).map(
        lambda rest: first + tuple(rest)
    )
)
path_texts = st.text(min_size=1) | st.text(alphabet='.[]"\\0123-a ', min_size=1, max_size=12)


def all_paths(obj: Any, prefix: tuple[PathSegment, ...] = ()) -> Iterator[tuple[PathSegment, ...]]:
    """Every path inside ``obj``, containers and leaves alike."""
    children = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for segment, child in children:
        path = (*prefix, segment)
        yield path
        yield from all_paths(child, path)


def leaves(obj: Any, prefix: tuple[PathSegment, ...] = ()) -> dict[tuple[PathSegment, ...], str]:
    """Every leaf path (scalars and empty containers) with its value as exact JSON text."""
    found: dict[tuple[PathSegment, ...], str] = {}
    if isinstance(obj, (dict, list)) and obj:
        children = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for segment, child in children:
            found.update(leaves(child, (*prefix, segment)))
    else:
        found[prefix] = json.dumps(obj)
    return found


def strings_in(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    children = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else []
    return [text for child in children for text in strings_in(child)]


@st.composite
def entries_for(draw: st.DrawFn, obj: dict[str, Any]) -> Any:
    """One patch entry for ``obj``: mostly well-formed and aimed at its real paths and text."""
    kind = draw(st.sampled_from(["value", "value", "text", "text", "delete", "junk"]))
    paths = list(all_paths(obj))
    if kind == "text":  # aim text edits at strings
        paths = [p for p in paths if isinstance(value_at(obj, p), str)] or paths
    use_known = paths and draw(st.integers(0, 3)) > 0
    path = format_path(draw(st.sampled_from(paths))) if use_known else draw(path_texts)
    if kind == "value":
        return {"path": path, "value": draw(json_values)}
    if kind == "text":
        texts = [t for t in strings_in(obj) if t]
        if texts and draw(st.booleans()):
            text = draw(st.sampled_from(texts))
            start = draw(st.integers(0, len(text) - 1))
            old = text[start : draw(st.integers(start + 1, len(text)))]
        else:
            old = draw(st.text(min_size=1, max_size=3))
        entry = {"path": path, "old_string": old, "new_string": draw(st.text(max_size=3))}
        if draw(st.booleans()):
            junk = draw(st.integers(0, 3)) == 0
            entry["replace_all"] = draw(json_scalars if junk else st.booleans())
        return entry
    if kind == "delete":
        return {"path": path}
    fields = ["path", "value", "old_string", "new_string", "replace_all", "other"]
    return draw(json_values | st.dictionaries(st.sampled_from(fields), json_values))


@given(st.text() | path_texts)
def test_parse_path_raises_only_patch_error(path: str) -> None:
    try:
        segments = parse_path(path)
    except PatchError:
        return
    assert segments and isinstance(segments[0], str)


@given(segment_tuples)
def test_format_path_round_trips_through_parse_path(segments: tuple[PathSegment, ...]) -> None:
    assert parse_path(format_path(segments)) == segments


@given(st.data(), json_objects)
def test_apply_patch_raises_only_patch_error(data: st.DataObject, obj: dict[str, Any]) -> None:
    junk = data.draw(st.integers(0, 4)) == 0
    patch = data.draw(json_values if junk else st.lists(entries_for(obj), max_size=3))
    try:
        apply_patch(obj, patch)
    except PatchError:
        event("PatchError")
    else:
        event("applied")


@given(st.data(), json_objects.filter(bool))
def test_value_entry_changes_only_what_its_path_names(
    data: st.DataObject, obj: dict[str, Any]
) -> None:
    target = data.draw(st.sampled_from(list(all_paths(obj))))
    value = data.draw(json_values)
    result = apply_patch(obj, [{"path": format_path(target), "value": value}])

    def outside(found: dict[tuple[PathSegment, ...], str]) -> dict[tuple[PathSegment, ...], str]:
        return {p: v for p, v in found.items() if p[: len(target)] != target}

    assert outside(leaves(result)) == outside(leaves(obj))
    assert value_at(result, target) == value


@given(st.data(), json_objects)
def test_apply_patch_never_mutates_its_inputs(data: st.DataObject, obj: dict[str, Any]) -> None:
    patch = data.draw(st.lists(entries_for(obj), min_size=1, max_size=4))
    obj_before, patch_before = json.dumps(obj), json.dumps(patch)
    try:
        apply_patch(obj, patch)
    except PatchError:
        pass
    assert json.dumps(obj) == obj_before
    assert json.dumps(patch) == patch_before
