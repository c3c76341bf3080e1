"""Chi-square quantiles for MTBF confidence intervals, without scipy.

The MTBF interval of a time-terminated observation (T hours, r failures) uses chi-square
quantiles with even degrees of freedom only (2r and 2r + 2), and for an even number of degrees of
freedom 2k the chi-square CDF has a closed form (a Poisson tail):

    P(X <= x) = 1 - sum_{i<k} exp(-x/2) (x/2)^i / i!

so the quantile is found by bisection on that exact CDF (to 1e-10 relative), no approximation.
"""

from __future__ import annotations

import math


def chi2_cdf_even(x: float, df: int) -> float:
    if df <= 0 or df % 2:
        raise ValueError("df must be a positive even number")
    if x <= 0:
        return 0.0
    half = x / 2.0
    term = math.exp(-half)
    total = term
    for i in range(1, df // 2):
        term *= half / i
        total += term
    return max(0.0, min(1.0, 1.0 - total))


def chi2_quantile_even(p: float, df: int) -> float:
    """x with P(X <= x) = p for a chi-square variable of even df."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must lie in (0, 1)")
    low, high = 0.0, max(1.0, float(df))
    while chi2_cdf_even(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if chi2_cdf_even(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low <= 1e-10 * max(1.0, high):
            break
    return (low + high) / 2.0


def mtbf_interval(service_hours: float, failures: int, confidence: float = 0.90) -> tuple[float | None, float | None]:
    """Two-sided confidence interval of the MTBF (hours) for a time-terminated observation:
    lower = 2T / chi2(1 - a/2; 2r + 2), upper = 2T / chi2(a/2; 2r) (unbounded, None, when r = 0).
    (None, None) without service hours."""
    if service_hours <= 0:
        return None, None
    alpha = 1.0 - confidence
    lower = 2.0 * service_hours / chi2_quantile_even(1.0 - alpha / 2.0, 2 * failures + 2)
    upper = 2.0 * service_hours / chi2_quantile_even(alpha / 2.0, 2 * failures) if failures > 0 else None
    return lower, upper
