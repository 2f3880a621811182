import unittest
from decimal import Decimal

from pricing import apply_discount, line_total, order_total, with_tax


class PricingTest(unittest.TestCase):
    def test_line_total(self):
        self.assertEqual(line_total("2.50", 4), Decimal("10.00"))

    def test_negative_quantity_is_refused(self):
        with self.assertRaises(ValueError):
            line_total("1.00", -1)

    def test_discount(self):
        self.assertEqual(apply_discount(Decimal("100"), 15), Decimal("85"))

    def test_tax_rounding(self):
        self.assertEqual(with_tax(Decimal("0.125")), Decimal("0.15"))

    def test_order_total(self):
        self.assertEqual(order_total([("2.50", 4), ("5.00", 2)], discount_percent=10), Decimal("21.60"))


if __name__ == "__main__":
    unittest.main()
