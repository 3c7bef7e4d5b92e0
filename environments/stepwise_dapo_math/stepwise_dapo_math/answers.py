"""DAPO answer extraction, normalization and exact integer matching.

DAPO (Yu et al., 2025, arXiv 2503.14476) asks the model to end with a line ``Answer: <answer>``
and scores a response by comparing the extracted answer with the integer ground truth:

    r(y, a) = +1  if normalize(extract(y)) == normalize(a)
              −1  otherwise (wrong, missing or unparseable answer)

``extract(y)``: the text after the **last** ``Answer:`` (case-insensitive, ASCII or full-width
colon) that has something after it; whitespace after the colon may span lines (``Answer:\\n42``),
and the answer runs to the end of that line. Without any such line, the content of the last
``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces) is used when ``boxed_fallback`` is on.

``normalize`` (an integer or nothing) removes, in order: markdown emphasis and code marks,
dollar signs at either end (math delimiters or currency), trailing sentence punctuation,
math delimiters ``\\(\\)`` and ``\\[\\]``, wrappers spanning the whole answer (``\\boxed``,
``\\fbox``, ``\\text``, ``\\mathrm``, ``\\mathbf``), a left-hand side without digits up to the
last ``=`` (``n = 12``; ``x = 3 or x = 4`` states two answers), a trailing unit (a
``\\text{unit}`` without digits (``42 \\text{ or } \\text{43}`` states two answers), or up to
three of the unit words DAPO's reference normalization deletes, :data:`UNIT_WORDS`: ``42
dollars``, ``42 square feet``; either with a power 2 or 3, ``42 \\text{ cm}^2``), degree marks,
LaTeX spacing (``\\,`` ``\\!`` ``\\ `` ``~``) and ``{,}``; then thousands separators when the
grouping is valid (``1,000,000`` or ``1 000 000``, never ``1,00``), a trailing ``.0...``, and
unicode minus/plus signs. What is left must be ``[+-]?<decimal digits>`` (any script's decimal
digits, e.g. full-width ``４２``); the canonical form is the sign (none for zero) and the digits
without leading zeros. Anything else (``4 or 5``, ``10²``, ``1/2``) is not an integer answer.

Pure Python on strings: no verifiers import, linear time in the length of the response.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "UNIT_WORDS",
    "AnswerCheck",
    "check_answer",
    "extract_answer",
    "last_boxed",
    "normalize_integer",
    "peel_answer",
]

Source = Literal["answer_line", "boxed"]

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_WRAPPERS = re.compile(r"^\\(?:boxed|fbox|text|textbf|mathrm|mathbf|mbox)\s*\{(.*)\}$", re.DOTALL)
# DAPO's reference normalization (verl ``math_dapo.normalize_final_answer``) deletes these words
# wherever they stand, so ``4 square 2`` reads 42 there; here a run of them is a unit only at the end.
UNIT_WORDS = (
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "sue", "points",
    "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges",
    "students", "childrentickets", "multiples",
)  # fmt: skip
_POWER = r"(?:\s*\^\s*(?:[23]|\{\s*[23]\s*\}))?"  # cm^2, \text{ m}^{3}: the unit's power, not a value
_TRAILING_TEXT = re.compile(rf"\\(?:text|mbox|mathrm)\s*\{{[^{{}}\d]*\}}{_POWER}$")  # a unit has no digits
_WORD = "(?:" + "|".join(UNIT_WORDS) + ")"
_TRAILING_WORDS = re.compile(rf"(?<![^\W\d_])(?<!\\){_WORD}(?:\s+{_WORD}){{0,2}}{_POWER}$", re.IGNORECASE)
_SPACE_BEFORE_UNIT = re.compile(r"(?:\\[,!;: ]|~|\s)+$")
_UNIT_SPAN = 64  # the tail a unit phrase with its power (or the spacing before it) fits in
_DEGREES = re.compile(r"(?:\^\s*\{?\\circ\}?|\\circ|\u00b0|\\degree)$")
_DEGREE_ENDINGS = ("circ", "circ}", "\u00b0", "degree")
_LATEX_SPACES = re.compile(r"\\[,!;: ]|~|\{,\}")
_GROUPED = re.compile(r"^[+-]?\d{1,3}(?:([, \u00a0\u2009\u202f'])\d{3})(?:\1\d{3})*$")
_PLAIN = re.compile(r"\s*([+-]?)([0-9]+)\s*\Z")
_INTEGER = re.compile(r"^([+-]?)(\d+)(?:\.0*)?$")
_SIGNS = str.maketrans(
    {
        "\u2212": "-",  # minus sign
        "\u2012": "-",  # figure dash
        "\u2013": "-",  # en dash
        "\ufe63": "-",  # small hyphen-minus
        "\uff0d": "-",  # full-width hyphen-minus
        "\uff0b": "+",  # full-width plus
    }
)
_EDGE_MARKS = "*`_$ \t\r\n"
_MAX_ROUNDS = 8
_BLANK = re.compile(r"\s*")
_END_PUNCTUATION = ".;!?,:\u3002\uff0e\uff0c"


@dataclass(frozen=True)
class AnswerCheck:
    """The outcome of checking one response against one ground truth."""

    extracted: str | None
    """The raw answer text taken from the response (None: nothing found)."""
    source: Source | None
    """Where it came from: the last ``Answer:`` line or the ``\\boxed{}`` fallback."""
    normalized: str | None
    """Canonical integer of ``extracted`` (None: not an integer)."""
    correct: bool


def extract_answer(text: str, *, boxed_fallback: bool = True) -> tuple[str, Source] | None:
    """The answer text of a response and where it was found, or None."""
    for colon in _answer_colons(text):
        # DAPO's `Answer\s*:\s*([^\n]+)`: the blank after the colon may span lines.
        start = _BLANK.match(text, colon + 1).end()  # type: ignore[union-attr]
        end = text.find("\n", start)
        candidate = text[start : len(text) if end < 0 else end].strip()
        if candidate:
            return candidate, "answer_line"
    if boxed_fallback:
        boxed = last_boxed(text)
        if boxed is not None:
            return boxed, "boxed"
    return None


def _answer_colons(text: str) -> Iterator[int]:
    """Positions of the colons that end an ``answer`` label (``answer`` in any case, then
    blanks, then ``:`` or ``：``), last first. One backward pass: each ``rfind`` resumes where
    the previous one stopped, and each blank is looked at once."""
    ascii_colon, wide_colon = text.rfind(":"), text.rfind("\uff1a")
    while ascii_colon >= 0 or wide_colon >= 0:
        if ascii_colon > wide_colon:
            colon, ascii_colon = ascii_colon, text.rfind(":", 0, ascii_colon)
        else:
            colon, wide_colon = wide_colon, text.rfind("\uff1a", 0, wide_colon)
        label_end = colon
        while label_end > 0 and text[label_end - 1].isspace():
            label_end -= 1
        if text[max(0, label_end - 6) : label_end].lower() == "answer":
            yield colon


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` or ``\\fbox{...}`` with balanced braces (also the
    brace-less ``\\boxed 42`` form); None when there is none or its braces never close."""
    start = max(text.rfind(command) for command in _BOX_COMMANDS)
    if start < 0:
        return None
    i = start + len("\\boxed" if text.startswith("\\boxed", start) else "\\fbox")
    if i < len(text) and text[i] == " ":
        end = i + 1
        while end < len(text) and not text[end].isspace() and text[end] != "$":
            end += 1
        return text[i + 1 : end] or None
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        char = text[j]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def normalize_integer(answer: str) -> str | None:
    """Canonical decimal form of an integer answer (see the module docstring), else None."""
    text = peel_answer(answer)
    plain = _PLAIN.match(text)
    if plain is not None:
        return _canonical(*plain.groups())
    if "\\" in text or "~" in text or "{,}" in text:
        text = _LATEX_SPACES.sub(" ", text).strip()
    if _GROUPED.match(text):
        text = re.sub(r"[, \u00a0\u2009\u202f']", "", text)
    match = _INTEGER.match(text)
    if match is None:
        return None
    sign, digits = match.groups()
    if not digits.isascii():
        digits = "".join(str(unicodedata.decimal(char)) for char in digits)
    return _canonical(sign, digits)


def peel_answer(answer: str) -> str:
    """The answer without what :func:`normalize_integer` removes around a value (markdown,
    dollars, end punctuation, delimiters, whole wrappers, ``n =``, a trailing unit, degree
    marks), unicode minus and plus signs made ASCII. What is removed holds no digit but a unit's
    power 2 or 3, so it cannot hold a second value."""
    text = answer if answer.isascii() else answer.translate(_SIGNS)
    # Bounded rounds: each is linear, and real answers nest a few wrappers at most.
    for _ in range(_MAX_ROUNDS):
        if _PLAIN.match(text) is not None:  # ``42`` or ``-7``: nothing left to peel
            return text
        previous = text
        text = text.removeprefix("\\$").strip(_EDGE_MARKS)
        text = _strip_delimiters(text.rstrip(_END_PUNCTUATION))
        if text.startswith("\\"):
            wrapped = _WRAPPERS.match(text)
            if wrapped is not None:
                text = wrapped.group(1)
        if "=" in text:
            lhs, rhs = text.rsplit("=", 1)
            if not any(char.isdigit() for char in lhs):  # ``x = 4``; ``x = 3 or x = 4`` holds two values
                text = rhs
        if text[-1:].isalpha() or text.endswith(("}", "2", "3")):
            text = _strip_unit(text)
        if text.endswith(_DEGREE_ENDINGS):
            text = _DEGREES.sub("", text).rstrip()
        if text == previous:
            break
    return text


def _strip_unit(text: str) -> str:
    """``text`` without its trailing unit: a digit-free ``\\text{...}`` or a run of up to three
    :data:`UNIT_WORDS`, either with a power 2 or 3. The words are looked for in the tail only,
    so the search stays linear however long the answer is."""
    unit = _TRAILING_TEXT.search(text) or _TRAILING_WORDS.search(text, max(0, len(text) - _UNIT_SPAN))
    if unit is None:
        return text
    head = text[: unit.start()]
    space = _SPACE_BEFORE_UNIT.search(head, max(0, len(head) - _UNIT_SPAN))  # ``42\,\text{cm}``
    return head[: space.start()] if space is not None else head


def _canonical(sign: str, digits: str) -> str:
    digits = digits.lstrip("0") or "0"
    return ("-" if sign == "-" and digits != "0" else "") + digits


def check_answer(response: str, ground_truth: str, *, boxed_fallback: bool = True) -> AnswerCheck:
    """Extract, normalize and compare one response with an integer ground truth.

    ``ground_truth`` may be given in any form :func:`normalize_integer` accepts; one that is not
    an integer raises ``ValueError`` (a data error, not a wrong answer).
    """
    gold = normalize_integer(ground_truth)
    if gold is None:
        raise ValueError(f"ground truth {ground_truth!r} is not an integer")
    return check_against(response, gold, boxed_fallback=boxed_fallback)


def check_against(response: str, gold: str, *, boxed_fallback: bool = True) -> AnswerCheck:
    """:func:`check_answer` with an already canonical ground truth (the hot path)."""
    found = extract_answer(response, boxed_fallback=boxed_fallback)
    if found is None:
        return AnswerCheck(None, None, None, False)
    extracted, source = found
    normalized = normalize_integer(extracted)
    return AnswerCheck(extracted, source, normalized, normalized == gold)


def _strip_delimiters(text: str) -> str:
    for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : len(text) - len(right)].strip()
    return text
