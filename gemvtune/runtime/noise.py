"""The route's noise rule: a tuned kernel runs only where its win over the cuBLAS baseline exceeds the measured
noise of both. The relative win ``(cublas - tuned) / cublas`` must exceed ``max(MARGIN, tuned spread + cuBLAS
spread)``, each spread the record's relative spread of round medians over the confirmation's rounds
(``Measured.spread``, ``tuning.confirm``).

A win inside that noise is not a measured win: at 14336x4096 n = 16 (H200) the table recorded the tuned cuBLASLt
algorithm at 30.41 µs against cuBLAS's 30.98 (1.8% faster; spreads 7.2% and 3.0%), and an independent harness ran
it at 32.46 against 30.68 (5.8% slower). A record without a spread (tables before it was kept) counts its
``(us_max - us_min) / us`` where it holds both, else 0: ``MARGIN`` alone, the rule before this one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MARGIN = 0.01   # the least win a tuned kernel needs however quiet its rounds were (the timing spread is 1-3%)


def spread(rec: Any) -> float:
    """The relative noise of a measured record (``runtime.entry.Measured``; None: 0): its ``spread``, else
    ``(us_max - us_min) / us`` where it holds both, else 0."""
    if rec is None:
        return 0.0
    s = rec.spread
    if isinstance(s, (int, float)) and s == s and s >= 0:
        return float(s)
    lo, hi, us = rec.us_min, rec.us_max, rec.us
    if all(isinstance(v, (int, float)) for v in (lo, hi, us)) and us > 0 and hi >= lo:
        return (hi - lo) / us
    return 0.0


@dataclass(frozen=True)
class Contest:
    """The table's measurements behind one route: the tuned kernel's and cuBLAS's times (None: not measured),
    the tuned config, and each side's relative spread. ``rival`` names the other side where it is not cuBLAS
    (Inductor, for a caller under ``torch.compile``: ``runtime.verdict``); ``cublas_us`` is then its time."""

    tuned_us: float | None
    cublas_us: float | None
    config: Any = None
    tuned_spread: float = 0.0
    cublas_spread: float = 0.0
    rival: str = "cuBLAS"

    @property
    def spreads(self) -> float:
        return self.tuned_spread + self.cublas_spread

    @property
    def noise(self) -> float:
        """The relative win the tuned kernel needs: ``max(MARGIN, tuned spread + cuBLAS spread)``."""
        return max(MARGIN, self.spreads)

    @property
    def win(self) -> float | None:
        """The tuned kernel's relative win over cuBLAS (negative: slower); None where either is not measured."""
        if self.tuned_us is None or not self.cublas_us:
            return None
        return (self.cublas_us - self.tuned_us) / self.cublas_us

    @property
    def wins(self) -> bool:
        """The tuned kernel runs: measured, and cuBLAS not measured or beaten by more than ``noise``."""
        if self.tuned_us is None:
            return False
        w = self.win
        return w is None or w > self.noise

    def noise_text(self) -> str:
        s = f"spreads {self.tuned_spread:.1%} + {self.cublas_spread:.1%}"
        return f"the {MARGIN:.0%} margin ({s})" if self.spreads < MARGIN else f"the noise {self.noise:.1%} ({s})"

    def says(self, out: str = "fp32") -> str:
        """The two times, the win and the noise it was weighed against (the route adds ": cuBLAS runs" where
        the tuned kernel does not win)."""
        t, c, w, rival = self.tuned_us, self.cublas_us, self.win, self.rival
        if t is None:
            return f"{rival}: no measured kernel that gives an {out} output"
        if c is None or w is None:
            return f"tuned {t:.2f} µs beats {rival} (not measured)"
        if w <= 0:
            return f"{rival} {c:.2f} µs is faster than tuned {t:.2f} µs"
        return f"tuned {t:.2f} µs beats {rival} {c:.2f} µs by {w:.1%}, {'beyond' if self.wins else 'inside'} {self.noise_text()}"
