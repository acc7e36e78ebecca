"""Kubernetes resource quantities (``resource.Quantity``): ``"100m"``, ``"16Gi"``, ``"4"``, ``"1e3"``.

Source: the serialization format of k8s.io/apimachinery/pkg/api/resource (``<signedNumber><suffix>``
with binary suffixes Ki..Ei, decimal suffixes n, u, m, "", k, M, G, T, P, E, or an exponent
``e<n>``/``E<n>``).
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from forensics.errors import ParseError

__all__ = ["parse_quantity", "quantity_bytes", "quantity_count", "quantity_millicores"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}
_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))((?:[KMGTPE]i)|[numkMGTPE]?|[eE][+-]?[0-9]{1,3})$")


def parse_quantity(value: object) -> Decimal:
    """The exact value of a quantity string (or an int, as JSON sometimes carries)."""
    if isinstance(value, bool):
        raise ParseError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if not isinstance(value, str):
        raise ParseError(f"not a quantity: {value!r}")
    m = _RE.match(value.strip())
    if not m:
        raise ParseError(f"not a quantity: {value!r}")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        raise ParseError(f"not a quantity: {value!r}") from None
    suffix = m.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number.scaleb(int(suffix[1:]))


def quantity_bytes(value: object) -> int:
    """Memory in bytes, rounded up like the API server does for fractional bytes."""
    return int(parse_quantity(value).to_integral_value(rounding=ROUND_CEILING))


def quantity_millicores(value: object) -> int:
    """CPU in millicores (``"1.5"`` -> 1500, ``"250m"`` -> 250, ``"1n"`` -> 1)."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding=ROUND_CEILING))


def quantity_count(value: object) -> int:
    """An extended-resource count (``nvidia.com/gpu``): must be a whole number."""
    q = parse_quantity(value)
    if q != q.to_integral_value():
        raise ParseError(f"extended resource quantity must be whole: {value!r}")
    return int(q)
