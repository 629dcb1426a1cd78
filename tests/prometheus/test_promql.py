"""The PromQL rewriting the live test uses to evaluate alert expressions (no server needed)."""

from __future__ import annotations

import pytest

from kiban.devtools.prometheus import comparisons_as_bool, split_top_level_or


@pytest.mark.parametrize(
    ("expr", "rewritten"),
    [
        ("x > 0", "x > bool 0"),
        ("x>0", "x> bool 0"),
        ("x >= bool 3", "x >= bool 3"),  # already bool
        ("sum(a) < sum(b)", "sum(a) < bool sum(b)"),
        ("a == 1 or b != 2", "a == bool 1 or b != bool 2"),
        # Label matchers, strings and range selectors are not comparisons.
        ('x{a!="b", c=~"d>e"} <= 1', 'x{a!="b", c=~"d>e"} <= bool 1'),
        (
            'label_replace(x > 1, "n", "$1", "h", "(<.+)")',
            'label_replace(x > bool 1, "n", "$1", "h", "(<.+)")',
        ),
        ("rate(x[5m]) > 0", "rate(x[5m]) > bool 0"),
        ("absent(up)", "absent(up)"),
        ("a > on (q) group_left b", "a > bool on (q) group_left b"),
        ("a > boolean", "a > bool boolean"),  # a metric named boolean is not the modifier
    ],
)
def test_every_comparison_answers_zero_or_one_instead_of_filtering(
    expr: str, rewritten: str
) -> None:
    assert comparisons_as_bool(expr) == rewritten


@pytest.mark.parametrize(
    ("expr", "operands"),
    [
        ("a", ["a"]),
        ("a or b", ["a", "b"]),
        ("a\nor\nabsent(a)", ["a", "absent(a)"]),
        ("max by (n) (a or b) or c", ["max by (n) (a or b)", "c"]),
        ('x{k="or"} or origin or color', ['x{k="or"}', "origin", "color"]),
    ],
)
def test_only_the_top_level_or_splits(expr: str, operands: list[str]) -> None:
    assert split_top_level_or(expr) == operands
