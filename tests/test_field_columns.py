"""How the list's value columns write a number the field index holds as a double."""

from __future__ import annotations

import pytest

from studio.render.field_columns import value_cell


@pytest.mark.parametrize(
    ("number", "text"),
    [(3.0, "3"), (1.5, "1.5"), (-0.0, "-0.0"), (0.0, "0"), (2.0**53, "9007199254740992.0"),
     (1e308, "1e+308"), (float("inf"), "inf")],
)
def test_a_number_reads_as_the_integer_it_equals_unless_that_would_change_it(
    number: float, text: str
) -> None:
    assert value_cell(("number", number)).text == text
