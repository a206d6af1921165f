"""Byte sizes as written in recipes ("1GiB", "512 MiB", "2GB") and as deskside prints them.

Binary units (KiB, MiB, GiB, TiB, PiB; the trailing "B" is optional: "Gi") are powers of
1024; decimal units (K, M, G, T, P, optionally followed by "B") are powers of 1000. Units are
case-insensitive. A bare number, or a number followed by "B", is a count of bytes.
"""

from __future__ import annotations

import re
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

_PREFIX_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}

# number, optional spaces, optional unit: [kmgtp] then optional "i", then optional "b";
# or a lone "b".
_SIZE_RE = re.compile(
    r"""^\s*
    (?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)
    \s*
    (?P<unit>(?P<prefix>[kmgtp])(?P<binary>i)?b?|b)?
    \s*$""",
    re.IGNORECASE | re.VERBOSE,
)

# Longer strings are not sizes; refusing them early keeps error messages short.
_MAX_TEXT = 64

_EXAMPLES = "e.g. 4096, '512 MiB', '1.5GiB' or '2GB'"


def parse_bytes(value: int | str) -> int:
    """A byte count from an int or a string such as "1GiB", "512 MiB", "1.5GiB", "2GB", "4096".

    Fractional sizes with a unit are rounded down to a whole byte ("0.3GiB" is 322122547);
    a fractional plain byte count ("1.5", "1.5B") is refused. Negative sizes, booleans,
    floats and anything else raise ValueError with a message saying what was expected.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(
            f"expected a byte size ({_EXAMPLES}), got {type(value).__name__} {value!r}"
        )
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a byte size cannot be negative, got {value}")
        return value
    text = value
    if len(text) > _MAX_TEXT:
        raise ValueError(f"expected a byte size ({_EXAMPLES}), got a {len(text)}-character string")
    match = _SIZE_RE.match(text)
    if match is None:
        stripped = text.strip()
        if stripped.startswith("-"):
            raise ValueError(f"a byte size cannot be negative, got {text!r}")
        raise ValueError(
            f"{text!r} is not a byte size ({_EXAMPLES}; binary units KiB/MiB/GiB/TiB are "
            "powers of 1024, decimal units KB/MB/GB/TB powers of 1000)"
        )
    prefix = (match.group("prefix") or "").lower()
    base = 1024 if match.group("binary") else 1000
    multiplier = base ** _PREFIX_POWER[prefix]
    try:
        number = Decimal(match.group("number"))
    except InvalidOperation:  # pragma: no cover - the pattern only admits decimal numerals
        raise ValueError(f"{text!r} is not a byte size ({_EXAMPLES})") from None
    total = number * multiplier
    if multiplier == 1 and total != total.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(total.to_integral_value(rounding=ROUND_FLOOR))


def format_gib(n: int) -> str:
    """Bytes as GiB with two decimals: format_gib(11_714_691_891) == "10.91 GiB"."""
    return f"{n / GIB:.2f} GiB"


def format_bytes(n: int) -> str:
    """Bytes in the largest binary unit that keeps the number at least 1: "512 B", "1.50 GiB"."""
    sign = "-" if n < 0 else ""
    size = abs(n)
    if size < KIB:
        return f"{sign}{size} B"
    for unit, factor in (("PiB", 1024**5), ("TiB", TIB), ("GiB", GIB), ("MiB", MIB)):
        if size >= factor:
            return f"{sign}{size / factor:.2f} {unit}"
    return f"{sign}{size / KIB:.2f} KiB"
