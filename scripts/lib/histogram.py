"""Quantiles of a Prometheus histogram read from a /metrics page (text format): the upper
bound of the bucket a quantile falls in (never below the truth), and the estimate
Prometheus' histogram_quantile() makes (linear within that bucket: what a dashboard shows).
"""
import re


def buckets(page, name, labels):
    """(upper bound, cumulative count) of each bucket of `name` whose labels include
    `labels` (one `key="value"`), by bound."""
    return sorted(
        (float("inf") if le == "+Inf" else float(le), float(m.group(2)))
        for m in re.finditer(rf"^{name}_bucket\{{([^}}]*)\}} (\S+)$", page, flags=re.M)
        if labels in m.group(1).split(",")
        for le in re.findall(r'le="([^"]+)"', m.group(1)))


def upper_bound(page, name, labels, q):
    """The upper bound of the bucket the q-quantile falls in; NaN with no observation."""
    counts = buckets(page, name, labels)
    if not counts or counts[-1][1] == 0:
        return float("nan")
    target = q * counts[-1][1]
    return next(le for le, count in counts if count >= target)


def interpolated(page, name, labels, q):
    """The q-quantile as histogram_quantile() estimates it: linear between the bounds of
    its bucket, the lower bound of the first bucket 0, and the highest finite bound when it
    falls in +Inf; NaN with no observation."""
    counts = buckets(page, name, labels)
    if not counts or counts[-1][1] == 0:
        return float("nan")
    target = q * counts[-1][1]
    lower, below = 0.0, 0.0
    for le, count in counts:
        if count >= target:
            if le == float("inf") or count == below:
                return lower
            return lower + (le - lower) * (target - below) / (count - below)
        lower, below = le, count
    return lower
