"""``spec.array`` and ``spec.dependsOn``: index ranges, the server's limit, condition words."""

from __future__ import annotations

import pytest

from kiban.domain.job_relations import (
    ARRAY_SIZE_CEILING,
    ArraySpec,
    DependencyCondition,
    array_index_id,
    is_index_of,
    parse_indices,
)


@pytest.mark.parametrize(
    ("text", "indices"),
    [
        ("0-4", [0, 1, 2, 3, 4]),
        ("7", [7]),
        ("1,3,5-7", [1, 3, 5, 6, 7]),
        ("0-20:5", [0, 5, 10, 15, 20]),
        ("3-5,4-6", [3, 4, 5, 6]),  # overlapping ranges: each index once
    ],
)
def test_index_ranges(text: str, indices: list[int]) -> None:
    assert parse_indices(text) == indices


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("5-1", "ends before it starts"),
        ("0-4:0", "step below 1"),
        ("a", "not an index range"),
        ("1,,2", "not an index range"),
        ("0-10000", "more than 10000 indices"),
    ],
)
def test_bad_index_ranges(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_indices(text)


def test_the_limit_counts_distinct_indices_and_is_the_callers() -> None:
    assert len(parse_indices("0-9999,0-9999")) == 10_000
    assert len(parse_indices("0-19999", limit=20_000)) == 20_000
    with pytest.raises(ValueError, match="more than 5"):
        parse_indices("0-5", limit=5)


def test_the_spec_checks_shape_not_the_servers_limit() -> None:
    """A server may allow more than the default: the spec refuses only beyond the ceiling."""
    assert ArraySpec(indices="0-19999").indices == "0-19999"
    with pytest.raises(ValueError, match=f"more than {ARRAY_SIZE_CEILING}"):
        ArraySpec(indices=f"0-{ARRAY_SIZE_CEILING}")


def test_index_ids() -> None:
    assert array_index_id("train-x7k2p9", 7) == "train-x7k2p9-7"
    assert is_index_of("train-x7k2p9-7", "train-x7k2p9")
    assert not is_index_of("train-x7k2p9-x", "train-x7k2p9")
    assert not is_index_of("train-x7k2p9", "train-x7k2p9")
    assert not is_index_of("train-x7k2p9-7", "train-x7k2p")


@pytest.mark.parametrize(
    ("word", "condition"),
    [
        ("ok", DependencyCondition.SUCCEEDED),
        ("NotOK", DependencyCondition.FAILED),
        ("any", DependencyCondition.FINISHED),
        ("succeeded", DependencyCondition.SUCCEEDED),
    ],
)
def test_condition_words(word: str, condition: DependencyCondition) -> None:
    assert DependencyCondition.from_word(word) is condition


def test_an_unknown_condition_word_is_refused() -> None:
    with pytest.raises(ValueError, match="not ok, notok or any"):
        DependencyCondition.from_word("sometimes")
