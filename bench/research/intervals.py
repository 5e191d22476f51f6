"""The research scripts' interval cell (moved out of cpuspec.analysis.stats, which no part of
cpuspec used): a mean of per-unit ratios with its 95 % t-interval, or its range below
MIN_CI_UNITS units."""
import statistics

from cpuspec.analysis.stats import MIN_CI_UNITS, t_interval


def mean_interval(xs: list[float], digits: int = 3) -> str:
    m = statistics.fmean(xs)
    if len(xs) < MIN_CI_UNITS:
        return f"{m:.{digits}f} (range {min(xs):.{digits}f}-{max(xs):.{digits}f})"
    _, lo, hi = t_interval(xs)
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
