"""The field-filter language: parsing, errors with positions, printing, fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.index.query import (
    MAX_COMPARISONS,
    MAX_DEPTH,
    MAX_QUERY_LENGTH,
    QueryError,
    parse_path,
    parse_query,
)
from collector.index.query_ast import (
    ANY,
    KEYWORDS,
    LAST,
    And,
    Compare,
    CompareOp,
    Expr,
    Not,
    Or,
    Path,
    Presence,
    Scalar,
    Scope,
    format_query,
    pattern_path,
)


def _cmp(path: str, op: CompareOp, value: Scalar, scope: Scope = "final") -> Compare:
    return Compare(scope, Path(tuple(path.split("."))), op, value)


def _error(text: str) -> QueryError:
    with pytest.raises(QueryError) as caught:
        parse_query(text)
    return caught.value


# --- parsing ---------------------------------------------------------------


def test_parse_query_reads_the_issue_example() -> None:
    assert parse_query("refund.eligible = true and ever attempts >= 3") == And(
        (_cmp("refund.eligible", "=", True), _cmp("attempts", ">=", 3, scope="ever"))
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a = true", True),
        ("a = false", False),
        ("a = null", None),
        ("a = -1.5e2", -150.0),
        ("a = 0", 0),
        ('a = "tab\\tquote\\"\\u00e9"', 'tab\tquote"\u00e9'),
        ('a = ""', ""),
    ],
)
def test_parse_query_reads_json_literals(text: str, value: Scalar) -> None:
    expr = parse_query(text)
    assert isinstance(expr, Compare)
    assert expr.value == value
    assert type(expr.value) is type(value)


@pytest.mark.parametrize("op", ["=", "!=", "<", "<=", ">", ">=", "contains"])
def test_parse_query_reads_every_operator(op: CompareOp) -> None:
    assert parse_query(f"a {op} 1") == _cmp("a", op, 1)


def test_parse_query_reads_presence_without_value() -> None:
    assert parse_query("profile.address exists") == Presence(
        "final", Path(("profile", "address")), True
    )
    assert parse_query("ever x missing") == Presence("ever", Path(("x",)), False)


@pytest.mark.parametrize(
    ("text", "pointer"),
    [
        ("refund.eligible", "/refund/eligible"),
        ("/refund/eligible", "/refund/eligible"),
        ('metadata."extra/key~"', "/metadata/extra~1key~0"),
        ("/metadata/extra~1key~0", "/metadata/extra~1key~0"),
        ("items[0].sku", "/items/0/sku"),
        ("[2]", "/2"),
        ('"" . ""', "//"),
        ("a.and.final", "/a/and/final"),
        ('"final"', "/final"),
        ("user-id", "/user-id"),
        ("/", "/"),
    ],
)
def test_parse_query_turns_paths_into_pointers(text: str, pointer: str) -> None:
    expr = parse_query(f"{text} exists")
    assert isinstance(expr, Presence)
    assert expr.path.pointer == pointer


def test_parse_path_reads_a_lone_path() -> None:
    assert parse_path("items[2].final").pointer == "/items/2/final"
    assert parse_path("/a~1b").tokens == ("a/b",)
    with pytest.raises(QueryError):
        parse_path("a = 1")


def test_parse_query_binds_not_tighter_than_and_tighter_than_or() -> None:
    a, b, c = (_cmp(n, "=", 1) for n in "abc")
    assert parse_query("not a = 1 and b = 1 or c = 1") == Or((And((Not(a), b)), c))
    assert parse_query("a = 1 and (b = 1 or c = 1)") == And((a, Or((b, c))))


def test_parse_query_keeps_injection_text_as_a_plain_value() -> None:
    expr = parse_query('a = "x\'; drop table executions; --"')
    assert expr == _cmp("a", "=", "x'; drop table executions; --")


# --- errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("status = done", 9, '"done"'),
        ("status = 'done'", 9, "double quotes"),
        ("a = True", 4, "lowercase"),
        ("a == 1", 2, "'='"),
        ("a ! 1", 2, "not"),
        ("(a = 1", 0, "unclosed"),
        ("a = 1)", 5, "unbalanced"),
        ("a = 1 b = 2", 6, "'and' or 'or'"),
        ("", 0, "field path"),
        ("a <", 3, "JSON value"),
        ("a < true", 4, "numbers or strings"),
        ("a = 1e999", 4, "out of range"),
        ("/a~2 = 1", 2, "~0"),
        ("a. = 1", 3, "field name"),
        ("a[-2] = 1", 2, "only [-1]"),
        ("a[x] = 1", 2, "array index"),
        ("a.* = 1", 2, "[*]"),
        ('a = "open', 4, "unterminated"),
        ('a = "\\x"', 5, "escape"),
        ('a = "\\ud800"', 4, "surrogate"),
        ("a = \x00", 4, "control character"),
        ("and = 1", 0, "quote it"),
        ("final = 1", 0, "quote it"),
        ("a = 1 and", 9, "field path"),
        ("a exists 1", 9, "'and' or 'or'"),
        ("a b", 2, "operator"),
        ("a = 01", 4, "invalid number"),
        ("meta.extra/key~ = true", 5, '"extra/key~"'),
        ('a."b"/c = 1', 5, "whole path"),
        ("emails = []", 9, "array or object"),
        ("meta = {}", 7, "array or object"),
    ],
)
def test_parse_query_points_at_the_problem(text: str, position: int, fragment: str) -> None:
    error = _error(text)
    assert error.position == position
    assert fragment in error.message


def test_query_error_render_puts_caret_under_position() -> None:
    text = "refund.eligible = yes"
    assert _error(text).render(text) == (
        "refund.eligible = yes\n                  ^\nexpected a JSON value; write strings "
        'in double quotes: "yes"'
    )


def test_query_error_render_shows_only_the_offending_line() -> None:
    text = "a = 1 and\n\tb = nope"
    rendered = _error(text).render(text).splitlines()
    assert rendered[:2] == ["\tb = nope", "\t    ^"]


def test_parse_query_rejects_overlong_text() -> None:
    error = _error("a = 1 or " * (MAX_QUERY_LENGTH // 9) + "a = 1")
    assert error.position == MAX_QUERY_LENGTH
    assert "too long" in error.message


def test_parse_query_caps_nesting_depth() -> None:
    assert parse_query("(" * MAX_DEPTH + "a = 1" + ")" * MAX_DEPTH) == _cmp("a", "=", 1)
    assert "too deep" in _error("(" * (MAX_DEPTH + 1) + "a = 1" + ")" * (MAX_DEPTH + 1)).message
    assert "too deep" in _error("not " * 1000 + "a = 1").message


def test_parse_query_caps_comparison_count() -> None:
    parse_query(" or ".join(["a = 1"] * MAX_COMPARISONS))
    assert "too many" in _error(" or ".join(["a = 1"] * (MAX_COMPARISONS + 1))).message


# --- printing and property tests -------------------------------------------

_NAMES = st.one_of(
    st.sampled_from(["a", "refund", "eligible", "x_1", "user-id", *sorted(KEYWORDS)]),
    st.from_regex(r"[0-9]{1,3}", fullmatch=True),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), max_size=6),
    st.sampled_from(["*", "-1", "~*", "~-1"]),  # names spelled like wildcards are names
    st.sampled_from([ANY, LAST]),
)
_PATHS = st.builds(Path, st.lists(_NAMES, min_size=1, max_size=4).map(tuple))
_SCOPES = st.sampled_from(["final", "ever"])
_EQUALITY_VALUES: st.SearchStrategy[Scalar] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8"), max_size=8),
)
_COMPARISONS: st.SearchStrategy[Expr] = st.one_of(
    st.builds(Compare, _SCOPES, _PATHS, st.sampled_from(["=", "!=", "contains"]), _EQUALITY_VALUES),
    st.builds(
        Compare,
        _SCOPES,
        _PATHS,
        st.sampled_from(["<", "<=", ">", ">="]),
        st.one_of(
            st.integers(-1000, 1000),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(max_size=4),
        ),
    ),
    st.builds(Presence, _SCOPES, _PATHS, st.booleans()),
)
_EXPRESSIONS: st.SearchStrategy[Expr] = st.recursive(
    _COMPARISONS,
    lambda children: st.one_of(
        st.builds(Not, children),
        st.builds(And, st.lists(children, min_size=2, max_size=3).map(tuple)),
        st.builds(Or, st.lists(children, min_size=2, max_size=3).map(tuple)),
    ),
    max_leaves=8,
)


@given(_EXPRESSIONS)
@settings(max_examples=300)
def test_format_query_round_trips_through_parse(expr: Expr) -> None:
    assert parse_query(format_query(expr)) == expr


@given(_PATHS)
def test_a_paths_pointer_round_trips_through_its_parser(path: Path) -> None:
    assert pattern_path(path.pointer) == path


@pytest.mark.parametrize(
    ("text", "tokens", "printed"),
    [
        ('items[*].sku = "laser"', ("items", ANY, "sku"), 'items[*].sku = "laser"'),
        ('ever messages[-1].role = "tool"', ("messages", LAST, "role"),
         'ever messages[-1].role = "tool"'),
        ("a[*][*].b[-1] != 3", ("a", ANY, ANY, "b", LAST), "a[*][*].b[-1] != 3"),
        ("[*] exists", (ANY,), "[*] exists"),
        ("/items/~*/sku missing", ("items", ANY, "sku"), "items[*].sku missing"),
        ("/log/~-1 = 1", ("log", LAST), "log[-1] = 1"),
        # A member named like a wildcard is a member: quoted, or a pointer token.
        ('items."*" = 1', ("items", "*"), 'items."*" = 1'),
        ("/items/*/-1 = 1", ("items", "*", "-1"), 'items."*"."-1" = 1'),
        ('/k/~0-1 = 1', ("k", "~-1"), 'k."~-1" = 1'),
    ],
)
def test_wildcards_parse_and_print_back(
    text: str, tokens: tuple[object, ...], printed: str
) -> None:
    expr = parse_query(text)
    assert isinstance(expr, Compare | Presence)
    assert expr.path.tokens == tokens
    assert format_query(expr) == printed
    assert parse_query(printed) == expr


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("items[-2].sku = 1", 6, "did you mean [-1] or [*]?"),
        ("items[**] = 1", 7, "expected ']'"),
        ("items.*.sku = 1", 6, "written in brackets: [*]"),
        ("items[*.sku = 1", 7, "expected ']'"),
        ("/items/~*x = 1", 7, "'~*' is any element"),
        ("/items/~-2 = 1", 7, "'~-1' the last"),
    ],
)
def test_malformed_wildcards_point_at_the_problem(text: str, position: int, fragment: str) -> None:
    error = _error(text)
    assert error.position == position
    assert fragment in error.message


_GRAMMAR_PIECES = st.sampled_from(
    [
        "a",
        ".",
        "[",
        "]",
        "0",
        "(",
        ")",
        "=",
        "!=",
        "<",
        ">=",
        "and",
        "or",
        "not",
        "ever",
        "final",
        "exists",
        "missing",
        "contains",
        '"x"',
        '"',
        "\\",
        "/a~",
        "1e5",
        "-",
        "true",
        " ",
        "'",
        "~1",
        "\t",
        "\n",
    ]
)


@given(st.one_of(st.text(), st.lists(_GRAMMAR_PIECES, max_size=30).map("".join)))
@settings(max_examples=500)
def test_parse_query_raises_only_query_error_on_arbitrary_text(text: str) -> None:
    try:
        parse_query(text)
    except QueryError as error:
        assert 0 <= error.position <= len(text)
        assert error.render(text)
