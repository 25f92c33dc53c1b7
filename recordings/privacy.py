"""Phone numbers shown in logs and listings, with the subscriber part hidden."""

from __future__ import annotations

__all__ = ["mask_number"]

# ITU-T E.164 country codes by length: 1 and 7 take one digit, these take two, the
# rest three. Enough to keep a country code whole without a numbering-plan database.
_ONE_DIGIT = frozenset({"1", "7"})
_TWO_DIGIT = frozenset(
    "20 27 30 31 32 33 34 36 39 40 41 43 44 45 46 47 48 49 51 52 53 54 55 56 57 58 "
    "60 61 62 63 64 65 66 81 82 84 86 90 91 92 93 94 95 98".split()
)
_KEPT_AT_END = 4
# Fewer hidden digits than this and the number is as good as shown: hide it all.
_MIN_HIDDEN = 4


def mask_number(number: str) -> str:
    """'+15551234567' -> '+1***4567': the country code and the last four digits only.

    The area code stays hidden (with the last four it narrows a caller down to a few
    people), and the stars do not say how many digits they hide.

    Anything that is not an E.164 number long enough to keep some digits hidden
    (a short code, 'anonymous', a SIP or client address) becomes '***'.
    """
    digits = number[1:]
    if not number.startswith("+") or not digits.isdigit() or not digits.isascii():
        return "***"
    if digits[:1] in _ONE_DIGIT:
        code = 1
    elif digits[:2] in _TWO_DIGIT:
        code = 2
    else:
        code = 3
    if len(digits) < code + _MIN_HIDDEN + _KEPT_AT_END:
        return "***"
    return f"+{digits[:code]}***{digits[-_KEPT_AT_END:]}"
