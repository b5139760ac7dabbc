# Money on the wire: the spec's double beside Leash's exact decimal string (shackle.proto "Money").
# It converts and cross-checks; it does no arithmetic (the daemon's budget does).
from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Optional, Union

from .errors import WireError

#: A number, an exact decimal string ("0.002") or a decimal.Decimal.
Money = Union[int, float, str, Decimal]

_DECIMAL = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$")
MAX_DECIMAL_LENGTH = 40


def is_money_decimal(text: object) -> bool:
    return isinstance(text, str) and len(text) <= MAX_DECIMAL_LENGTH and _DECIMAL.match(text) is not None


def _plain(d: Decimal) -> str:
    """A finite Decimal without exponent and without trailing fractional zeros."""
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _double_to_decimal(x: float) -> str:
    """The shortest round-tripping decimal of a finite double, no exponent (JavaScript's String(x))."""
    if x == 0:
        return "0"
    out = _plain(Decimal(repr(x)))
    if len(out) > MAX_DECIMAL_LENGTH:
        raise WireError("invalid_decimal", f"{x!r} needs more than {MAX_DECIMAL_LENGTH} characters as a decimal")
    return out


def money_to_wire(amount: Money) -> tuple[float, str]:
    """(nearest double, exact decimal) of an amount. A float is taken as its shortest decimal
    (0.1 -> "0.1"); a string must follow shackle.proto's grammar. Raises WireError invalid_decimal."""
    if isinstance(amount, bool):
        raise WireError("invalid_decimal", f"amount {amount!r} is not a number")
    if isinstance(amount, float):
        if not math.isfinite(amount):
            raise WireError("invalid_decimal", f"amount {amount!r} is not finite")
        decimal = _double_to_decimal(amount)
    elif isinstance(amount, int):
        decimal = str(amount)
    elif isinstance(amount, Decimal):
        if not amount.is_finite():
            raise WireError("invalid_decimal", f"amount {amount} is not finite")
        decimal = _plain(amount)
    elif isinstance(amount, str):
        decimal = amount
    else:
        raise WireError("invalid_decimal", f"amount of type {type(amount).__name__} is not money")
    if not is_money_decimal(decimal):
        raise WireError("invalid_decimal", f'"{str(amount)[:50]}" is not a decimal')
    return float(decimal), decimal


def money_from_wire(double: float, decimal: str, field: str) -> Optional[str]:
    """The amount a (double, decimal) pair carries as exact decimal text, or None when neither is
    sent. The decimal wins; a non-zero double must be its nearest binary64, else money_mismatch."""
    if decimal != "":
        if not is_money_decimal(decimal):
            raise WireError("invalid_decimal", f'{field}_decimal "{decimal[:50]}" is not a decimal')
        if double != 0 and float(decimal) != double:
            raise WireError("money_mismatch", f'{field} is {double!r} but {field}_decimal is "{decimal}"')
        return decimal
    if not math.isfinite(double):
        raise WireError("invalid_decimal", f"{field} is {double!r}")
    return None if double == 0 else _double_to_decimal(double)
