"""The route's verdict on one table entry for one kind of caller: every measurement of the entry that the tuned
kernel must win, each weighed by the noise rule (``runtime.noise``: the relative win must exceed
``max(MARGIN, tuned spread + rival spread)``), and the text that says so (pure: no GPU).

- cuBLAS as the search's confirmation measured it (``route.contest``), always;
- cuBLAS as the re-confirmation measured it (``Entry.reconfirmed``: the same kernel and the caller's cuBLAS
  baseline re-measured interleaved in a fresh process, ``gemvtune check --reconfirm``), where the entry has one.
  Both measurements must show the win (the weaker decides): a re-confirmation in which the kernel lost, or failed
  to run, sends the call to cuBLAS, and the text gives both pairs of numbers. An entry without one keeps the
  search's rule alone, and the text of a tuned route says "not re-confirmed";
- for a caller under ``torch.compile`` (framework ``torch-compile``; ``baselines.COMPILER_FOR``), Inductor too:
  its ``inductor`` record of the search's baselines and of the re-confirmation's, each against the tuned time of
  the same measurement. Where Inductor is faster, or the tuned win over it is inside the noise, the call goes to
  ``F.linear``, which Inductor then compiles itself (route kind ``inductor``). An entry with no Inductor record
  keeps the eager rule, and the text says Inductor was not measured.

A re-confirmation applies to the kernel the route would run: where it measured other kernels (none of its records
has the route's config), or no cuBLAS baseline of the caller's chain, the entry counts as not re-confirmed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..baselines import COMPILER_FOR, cublas_of
from .entry import Entry, Measured, Reconfirmation
from .noise import Contest, spread
from .tableschema import printable


def _ok(rec: Any) -> bool:
    return rec is not None and rec.ok_us is not None


def kernel_record(again: Reconfirmation, config: Any) -> Measured | None:
    """The re-confirmation's record of ``config`` (a config object); None where it did not re-measure it."""
    for rec in again.kernels:
        try:
            if rec.config is not None and rec.config_object() == config:
                return rec
        except Exception:   # (a record this version cannot read is no record of it)
            continue
    return None


@dataclass(frozen=True)
class Verdict:
    """The contests behind one route. ``search``: tuned against cuBLAS in the search's confirmation; ``again``: the
    same in the re-confirmation (None: none applies, ``unconfirmed`` says why); ``failed``: the re-confirmation's
    kernel did not run correctly (its status and error); ``rivals``: (where, tuned against Inductor) for a compiled
    caller; ``compiled``: the caller is under torch.compile."""

    search: Contest
    again: Contest | None = None
    date: str = ""
    unconfirmed: str = ""
    failed: str = ""
    rivals: tuple[tuple[str, Contest], ...] = ()
    compiled: bool = False

    @property
    def config(self) -> Any:
        return self.search.config

    @property
    def beats_cublas(self) -> bool:
        """The tuned kernel beat cuBLAS beyond the noise in the search and, where there is one, in the
        re-confirmation (a kernel that failed there did not)."""
        return self.search.wins and not self.failed and (self.again is None or self.again.wins)

    @property
    def wins(self) -> bool:
        """The tuned kernel runs: it beat cuBLAS in every measurement and, for a compiled caller, Inductor too."""
        return self.beats_cublas and all(c.wins for _, c in self.rivals)

    @property
    def kind(self) -> str:
        """"tuned", "inductor" (a compiled caller's F.linear: the tuned kernel beat cuBLAS but not Inductor) or
        "cublas"."""
        return "tuned" if self.wins else "inductor" if self.beats_cublas else "cublas"

    @property
    def inductor_us(self) -> float | None:
        """Inductor's fastest recorded time (None: not measured, or not a compiled caller)."""
        return min((c.cublas_us for _, c in self.rivals if c.cublas_us is not None), default=None)

    def says(self, out: str = "fp32", runs: bool = True) -> str:
        """Every contest's numbers and how each was weighed; then (``runs``), where the tuned kernel does not run,
        what does."""
        s = self.search
        text = s.says(out)
        if s.tuned_us is None or not s.wins:
            return text + ("" if s.tuned_us is None or not runs else self.runs())
        when = f"re-confirmed in a fresh process on {self.date}"
        if self.failed:
            text += f"; {when}, the kernel failed ({self.failed})"
        elif self.again is not None:
            text += f"; {when}: {self.again.says(out)}"
        else:
            text += f"; not re-confirmed{self.unconfirmed}"
        if self.compiled and self.beats_cublas:
            if self.rivals:
                text += "; against Inductor: " + "; ".join(f"{where}: {c.says(out)}" for where, c in self.rivals)
            else:
                text += "; Inductor not measured (gemvtune check --reconfirm --inductor records it)"
        return text + ("" if self.wins or not runs else self.runs())

    def runs(self) -> str:
        """What runs where the tuned kernel does not."""
        if self.search.rival != "cuBLAS":   # (FP8 weights: their fallback)
            return f": {self.search.rival} runs" + (" (Inductor compiles it)" if self.compiled else "")
        return ": F.linear runs (Inductor compiles it)" if self.compiled else ": cuBLAS runs"


def _again(entry: Entry, framework: str, search: Contest) -> tuple[Contest | None, str, str, Measured | None]:
    """(the re-confirmation's contest, why none applies, why its kernel failed, its kernel record)."""
    rc = entry.reconfirmed
    if rc is None:
        return None, "", "", None
    rec = kernel_record(rc, search.config)
    if rec is None:
        return None, f" (the re-confirmation of {(rc.date or '')[:10]} measured other kernels)", "", None
    if rec.ok_us is None:
        why = f"{rec.status or 'no time'}" + (f": {printable(rec.error, 120)}" if rec.error else "")
        return None, "", why, rec
    base = cublas_of(rc.baselines, framework, ok=_ok)
    if base is None:
        return None, f" (the re-confirmation of {(rc.date or '')[:10]} measured no cuBLAS)", "", rec
    return Contest(rec.ok_us, base.ok_us, search.config, spread(rec), spread(base), search.rival), "", "", rec


def verdict(entry: Entry, framework: str, search: Contest) -> Verdict:
    """The verdict of ``entry`` for callers of ``framework`` on ``search`` (``route.contest``'s for the shape and
    output the call wants)."""
    again, unconfirmed, failed, rec = _again(entry, framework, search)
    date = ((entry.reconfirmed.date if entry.reconfirmed is not None else None) or "")[:10]
    compiler = COMPILER_FOR.get(framework)
    rivals: list[tuple[str, Contest]] = []
    if compiler is not None and search.tuned_us is not None:
        mine = entry.baselines.get(compiler)
        if mine is not None and mine.ok_us is not None:
            rivals.append(("the search", Contest(search.tuned_us, mine.ok_us, search.config, search.tuned_spread,
                                                 spread(mine), "Inductor")))
        theirs = entry.reconfirmed.baselines.get(compiler) if entry.reconfirmed is not None else None
        if theirs is not None and theirs.ok_us is not None and rec is not None and rec.ok_us is not None:
            rivals.append((f"the re-confirmation of {date}", Contest(rec.ok_us, theirs.ok_us, search.config,
                                                                    spread(rec), spread(theirs), "Inductor")))
    return Verdict(search, again, date, unconfirmed, failed, tuple(rivals), compiler is not None)
