"""scripts/lib/histogram.py on a made-up /metrics page.

Run: python3 -m unittest discover -s scripts/tests
"""

import math
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import histogram  # noqa: E402

BOUNDS = ["0.1", "0.15", "0.2", "+Inf"]
# Cumulative counts per bucket, by phase.
COUNTS = {"total": [50, 90, 100, 100], "loading": [1, 1, 1, 3], "serving": [0, 0, 0, 0]}
PAGE = "# TYPE t_seconds histogram\n" + "".join(
    f't_seconds_bucket{{phase="{phase}",le="{le}"}} {count}\n'
    for phase, counts in COUNTS.items()
    for le, count in zip(BOUNDS, counts))


class Quantiles(unittest.TestCase):
    def test_the_upper_bound_is_the_bound_of_the_bucket_the_quantile_falls_in(self):
        self.assertEqual(histogram.upper_bound(PAGE, "t_seconds", 'phase="total"', 0.5), 0.1)
        self.assertEqual(histogram.upper_bound(PAGE, "t_seconds", 'phase="total"', 0.95), 0.2)

    def test_the_estimate_is_linear_within_the_bucket_as_prometheus_makes_it(self):
        self.assertAlmostEqual(histogram.interpolated(PAGE, "t_seconds", 'phase="total"', 0.25), 0.05)
        # 95th of 100: the 5th of the 10 observations between 0.15 and 0.2.
        self.assertAlmostEqual(histogram.interpolated(PAGE, "t_seconds", 'phase="total"', 0.95), 0.175)
        self.assertAlmostEqual(histogram.interpolated(PAGE, "t_seconds", 'phase="total"', 0.9), 0.15)

    def test_a_quantile_past_the_last_finite_bound_is_that_bound(self):
        self.assertEqual(histogram.interpolated(PAGE, "t_seconds", 'phase="loading"', 0.99), 0.2)
        self.assertEqual(histogram.upper_bound(PAGE, "t_seconds", 'phase="loading"', 0.99), float("inf"))

    def test_no_observation_is_no_figure(self):
        self.assertTrue(math.isnan(histogram.interpolated(PAGE, "t_seconds", 'phase="serving"', 0.5)))
        self.assertTrue(math.isnan(histogram.upper_bound(PAGE, "t_seconds", 'phase="nowhere"', 0.5)))


if __name__ == "__main__":
    unittest.main()
