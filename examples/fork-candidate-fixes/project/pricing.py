"""Order pricing for a small shop: line totals, discounts and tax."""

from decimal import ROUND_HALF_UP, Decimal


def line_total(unit_price: str, quantity: int) -> Decimal:
    """Price of one order line, in currency units."""
    if quantity < 0:
        raise ValueError("quantity must be >= 0")
    return Decimal(unit_price) * quantity


def apply_discount(amount: Decimal, percent: int) -> Decimal:
    """Amount after a percentage discount (0-100)."""
    if not 0 <= percent <= 100:
        raise ValueError("percent must be between 0 and 100")
    # Bug: the discount is added instead of subtracted.
    return amount + amount * Decimal(percent) / 100


def with_tax(amount: Decimal, rate_percent: str = "20") -> Decimal:
    """Amount including tax, rounded half-up to cents."""
    total = amount * (1 + Decimal(rate_percent) / 100)
    return total.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def order_total(lines: list[tuple[str, int]], discount_percent: int = 0) -> Decimal:
    """Total of an order: sum of lines, then the discount, then tax."""
    subtotal = sum((line_total(p, q) for p, q in lines), Decimal(0))
    return with_tax(apply_discount(subtotal, discount_percent))
