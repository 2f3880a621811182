"""Formats money amounts for the shop's pages."""

from decimal import Decimal


def format_money(amount: Decimal, currency: str = "EUR") -> str:
    """`Decimal("1234.5")` -> `"1,234.50 EUR"`."""
    return f"{amount:,.2f} {currency}"
