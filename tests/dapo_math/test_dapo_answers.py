"""DAPO answer extraction and exact integer matching (stepwise_dapo_math.answers)."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from stepwise_dapo_math.answers import (
    check_answer,
    extract_answer,
    last_boxed,
    normalize_integer,
)

integers = st.integers(min_value=-(10**30), max_value=10**30)
# Text with any unicode, including "Answer:"-like fragments and TeX.
FRAGMENTS = ["Answer:", "answer：", "\\boxed{", "}", "$", "\n", "ANSWER", "=", "**", "−", "４"]
noise = st.lists(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20) | st.sampled_from(FRAGMENTS),
    max_size=30,
).map("".join)
CANONICAL = re.compile(r"^(?:0|-?[1-9]\d*)$")


def decorated(n: int, style: int) -> str:
    """Ways models write the integer n on an answer line."""
    s = str(n)
    grouped = f"{n:,}"
    return [
        s,
        f"${s}$",
        f"$$ {s} $$",
        f"\\boxed{{{s}}}",
        f"$\\boxed{{{s}}}$.",
        f"**{s}**",
        f"\\({s}\\)",
        f"x = {s}",
        f"{grouped}",
        f"{s}.",
        f"{s}.00",
        f"\\text{{{s}}}",
        f"{s} \\text{{ apples}}",
        f"{s}^\\circ",
        s.replace("-", "\u2212"),
        s.translate(str.maketrans("0123456789-", "０１２３４５６７８９－")),
    ][style]


@given(noise, integers)
def test_the_last_answer_line_is_read_after_any_text(prefix, n):
    assert check_answer(f"{prefix}\nAnswer: {n}", str(n)).correct


@given(st.lists(integers, min_size=2, max_size=6), noise)
def test_of_several_answer_lines_the_last_counts(values, filler):
    text = "\n".join(f"{filler.replace(chr(10), ' ')}\nAnswer: {v}" for v in values)
    found = extract_answer(text)
    assert found is not None and found == (str(values[-1]), "answer_line")
    assert check_answer(text, str(values[-1])).correct
    if values[-1] != values[0]:
        assert not check_answer(text, str(values[0])).correct


@given(integers, st.integers(min_value=0, max_value=15))
def test_decorations_do_not_change_the_integer(n, style):
    assert normalize_integer(decorated(n, style)) == str(n)
    assert check_answer(f"Work...\nAnswer: {decorated(n, style)}", str(n)).correct


@given(integers, integers)
def test_a_different_integer_is_wrong(n, m):
    assume(n != m)
    check = check_answer(f"Answer: {n}", str(m))
    assert not check.correct and check.normalized == str(n)


@given(noise)
@example("Answer: " + "$" * 5000)
@example("Answer:" * 2000)
@example("\\boxed{" * 3000)
def test_any_text_is_handled_and_normal_forms_are_canonical(text):
    found = extract_answer(text)
    if found is not None:
        normalized = normalize_integer(found[0])
        assert normalized is None or CANONICAL.match(normalized)
    assert check_answer(text, "7").correct in (True, False)


@given(integers, noise.filter(lambda s: "answer" not in s.lower() and "box" not in s))
def test_boxed_is_the_fallback_without_an_answer_line(n, text):
    response = f"{text} so the result is $\\boxed{{{n}}}$"
    assert check_answer(response, str(n)).correct
    assert check_answer(response, str(n)).extracted == str(n)
    assert not check_answer(response, str(n), boxed_fallback=False).correct


def test_an_answer_line_wins_over_a_later_box():
    assert check_answer("Answer: 3\nalso \\boxed{4}", "3").correct


def test_whitespace_after_the_colon_may_span_lines_like_dapo():
    assert extract_answer("Answer:\n\n  42\nmore") == ("42", "answer_line")
    # an empty last answer line falls back to the one before it
    assert extract_answer("Answer: 5\nAnswer:   \n") == ("5", "answer_line")


@pytest.mark.parametrize(
    "answer",
    ["4 or 5", "10²", "1/2", "1,00", "12.5", "x", "", "--3", "3-", "1e3", "0x10", "١٢ and 3"],
)
def test_non_integers_are_not_answers(answer):
    assert normalize_integer(answer) is None


@pytest.mark.parametrize(
    ("answer", "canonical"),
    [("007", "7"), ("-0", "0"), ("+5", "5"), ("1 000 000", "1000000"), ("١٢", "12")],
)
def test_canonical_forms(answer, canonical):
    assert normalize_integer(answer) == canonical


def test_nested_boxes_keep_their_inner_braces():
    assert last_boxed("x \\boxed{\\frac{1}{2}} y") == "\\frac{1}{2}"
    assert last_boxed("\\boxed 42 is it") == "42"
    assert last_boxed("\\boxed{unclosed") is None


def test_huge_inputs_are_read_in_one_pass():
    junk = ("lorem ipsum answer dolor \\boxed{ " * 200_000)[:5_000_000]
    assert check_answer(junk + "\nAnswer: 12345678901234567890", "12345678901234567890").correct
    # wrappers are peeled in a bounded number of linear rounds: a few nest, 100k do not
    assert check_answer("Answer: " + "\\boxed{" * 3 + "1" + "}" * 3, "1").correct
    assert not check_answer("Answer: " + "\\boxed{" * 100_000 + "1" + "}" * 100_000, "1").correct
    digits = "9" * 100_000  # longer than int() converts by default
    assert check_answer(f"Answer: {digits}", digits).correct


def test_a_ground_truth_that_is_not_an_integer_is_a_data_error():
    with pytest.raises(ValueError, match="not an integer"):
        check_answer("Answer: 1", "\\frac{1}{2}")
