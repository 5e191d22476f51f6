"""The one place that times model work, and watches the machine while it does.

Every timing states where it was taken: how many tokens went in, how many logit rows came out,
at which KV position, and how often it was repeated. bench's cost probe, `contention` and
`bench/research/native_peer.py` all time decodes through these functions, so "a decode", "a verify" and
β mean the same thing everywhere. Each function takes a clock, so a test can script it.

Definitions used throughout:
  V(n)   one target decode of n tokens with all n logit rows (a verify of n − 1 drafts), at the
         position a generation starts from (right after the prompt); V(1) = T, a plain decode.
  d      one draft decode of 1 token at that position.
  β(k)   V(k + 1) ÷ V(1) − 1.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

from cpuspec.machine import osapi
from cpuspec.results.records import (MIN_JUDGED_WINDOW_S, NoiseSample, CostProbe,  # noqa: F401
                      noise_reasons)

Clock = Callable[[], float]

# Timed repetitions of each cost-probe decode (median taken).
PROBE_REPS = 5
# Tokens in the probe of the draft's catch-up batch (the adaptive policy's probe cost).
CATCHUP_PROBE_TOKENS = 32
# The bench's probe times V(n) up to here (or k + 1 if larger), whatever k it runs: advise then
# sees the curve's cheap points beyond the k measured (on x86 Q4_0/Q8_0, n = 8, 12, 16).
CURVE_N = 16


def filler_tokens(prompt: Sequence[int], n: int) -> list[int]:
    """n real tokens to decode in a probe (the prompt's own, repeated): their values do not
    change a decode's cost, only the batch size and the position do."""
    prompt = list(prompt) or [0]
    return (prompt * (n // len(prompt) + 1))[:n]


def time_eval(decoder, tokens: Sequence[int], pos: int, n_out: int,
              clock: Clock = time.perf_counter) -> float:
    """Seconds for one eval of `tokens` at `pos` with `n_out` logit rows (argmax included)."""
    t0 = clock()
    decoder.eval(tokens, pos, n_out)
    return clock() - t0


def time_decodes(decoder, tokens: Sequence[int], pos: int, reps: int,
                 n_out: int | None = None, clock: Clock = time.perf_counter) -> list[float]:
    """`reps` timed evals of `tokens` at `pos` (all rows unless n_out), each rolled back to pos,
    so every repetition sees the same KV length."""
    decoder.truncate(pos)  # whatever was decoded past pos before is not part of this probe
    samples = []
    for _ in range(reps):
        samples.append(time_eval(decoder, tokens, pos, n_out or len(tokens), clock))
        decoder.truncate(pos)
    return samples


def time_prefill(decoder, prompt: Sequence[int], clock: Clock = time.perf_counter) -> float:
    """Seconds for a prompt prefill from an empty KV (one logit row, as a generation does);
    the prompt stays in the KV afterwards."""
    decoder.truncate(0)
    return time_eval(decoder, prompt, 0, 1, clock)


def probe_costs(target, draft, prompt: Sequence[int], k_max: int, reps: int = PROBE_REPS,
                clock: Clock = time.perf_counter) -> dict:
    """The costs the cost model needs, measured apart from any generation: the target's and the
    draft's prefill of `prompt`, V(n) for n = 1..k_max+1 and d at the position after the prompt,
    and the draft's per-token cost of a catch-up batch. Medians of `reps` repetitions."""
    pos = len(prompt)
    prefill = {"target": time_prefill(target, prompt, clock),
               "draft": time_prefill(draft, prompt, clock)}
    batch = filler_tokens(prompt, k_max + 1)
    catchup = filler_tokens(prompt, CATCHUP_PROBE_TOKENS)
    verify = {n: time_decodes(target, batch[:n], pos, reps, clock=clock)
              for n in range(1, k_max + 2)}
    draft_samples = time_decodes(draft, batch[:1], pos, reps, clock=clock)
    catchup_samples = [s / len(catchup)
                       for s in time_decodes(draft, catchup, pos, reps, n_out=1, clock=clock)]
    return CostProbe.from_samples(verify, draft_samples, catchup_samples, prefill["target"],
                                  prefill["draft"], len(prompt), pos, reps).to_dict()


def time_decode_tok_s(session, n_tokens: int, pos: int = 1, clock: Clock = time.perf_counter
                 ) -> float:
    """Plain one-token decodes from position `pos` on (llama-bench's tg test uses a near-empty
    context: pos = 1 after one token)."""
    session.truncate(0)
    session.eval(filler_tokens([0], pos), 0, 1)
    t0 = clock()
    for i in range(n_tokens):
        session.eval([100 + i % 50], pos + i, 1)
    return n_tokens / (clock() - t0)


def verify_tok_s(session, n_batch: int, reps: int, pos: int = 1,
                 clock: Clock = time.perf_counter) -> float:
    """n_batch-token decodes with all rows, as a verify does, at `pos`; tokens per second of
    the median repetition."""
    session.truncate(0)
    session.eval(filler_tokens([0], pos), 0, 1)
    samples = time_decodes(session, list(range(100, 100 + n_batch)), pos, reps, clock=clock)
    return n_batch / statistics.median(samples)


# --- noise: what else ran while we measured --------------------------------------------------

def _busy_and_steal() -> tuple[float, float]:
    import psutil
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    total = sum(getattr(t, f) for f in t._fields if f not in ("guest", "guest_nice"))
    return total - idle, getattr(t, "steal", 0.0)


def _psi_cpu_some_us() -> float | None:
    """Linux's pressure-stall 'some' total (µs); None on an OS without PSI (machine/osapi)."""
    return osapi.current().cpu_pressure_us()


class NoiseProbe:
    """`with NoiseProbe() as n: work()` then n.sample: system-wide CPU time not used by this
    process during the work (psutil) and the CPU pressure-stall time (Linux PSI)."""

    def __init__(self, clock: Clock = time.perf_counter):
        self.clock = clock
        self.sample: NoiseSample | None = None

    def __enter__(self) -> "NoiseProbe":
        import psutil
        self._proc = psutil.Process()
        c = self._proc.cpu_times()
        self._own0 = c.user + c.system
        self._busy0, self._steal0 = _busy_and_steal()
        self._psi0 = _psi_cpu_some_us()
        self._t0 = self.clock()
        return self

    def __exit__(self, *exc) -> None:
        wall = self.clock() - self._t0
        psi1 = _psi_cpu_some_us()
        c = self._proc.cpu_times()
        own = c.user + c.system - self._own0
        busy, steal = _busy_and_steal()
        load = osapi.current().load_average()
        pressure = None
        if self._psi0 is not None and psi1 is not None and wall > 0:
            pressure = min((psi1 - self._psi0) / 1e6 / wall, 1.0)
        self.sample = NoiseSample(wall, own, max(busy - self._busy0 - own, 0.0),
                                  steal - self._steal0, load, pressure)
