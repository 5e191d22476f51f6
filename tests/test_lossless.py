"""Lossless, proven (issue 78): the exact audit replays SD's own verifies; a divergence from
plain decoding is classified from the target's own logits. A loop broken on purpose is caught
by the replay itself, not only by a divergence count."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.core import speculative
from cpuspec.core.audit import classify_divergence, replay_exact
from cpuspec.core.speculative import generate_raw, generate_speculative
from cpuspec.results.schema import read_json

from fakes import FakeClock, flaky_draft_rule, target_rule


class KV:
    """A scripted model whose KV is written at the positions it is given (as a real cache is),
    with no check of the loop's bookkeeping: a loop defect shows in its tokens, as it would
    on a real model, instead of stopping the run. logits(n): one-hot rows of its choices."""

    def __init__(self, rule, eog: int = -1):
        self.rule, self.eog, self.kv, self.last = rule, eog, [], []

    def eval(self, tokens, pos, n_out):
        self.kv = self.kv[:pos] + list(tokens)
        n = len(self.kv)
        self.last = [self.rule(self.kv[:n - j]) for j in range(n_out - 1, -1, -1)]
        return list(self.last)

    def truncate(self, pos):
        del self.kv[pos:]

    def is_eog(self, token):
        return token == self.eog

    def logits(self, n_out):
        import numpy as np
        rows = np.zeros((n_out, 64))
        for i, t in enumerate(self.last[-n_out:]):
            rows[i, t] = 1.0
        return rows


PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


@pytest.fixture(autouse=True)
def where_we_started():
    """A pinned bench moves this whole process (llama.cpp's threads are ours): back after."""
    from cpuspec.machine.hardware import CorePinner, current_affinity
    before = current_affinity()
    yield
    CorePinner().pin(before)


def sd_run(k=3, **kw):
    return generate_speculative(KV(target_rule), KV(flaky_draft_rule), PROMPT, 40, k,
                                clock=FakeClock(), **kw)


def test_a_sound_loop_replays_exactly_and_equals_raw():
    g = sd_run()
    assert g.tokens == generate_raw(KV(target_rule), PROMPT, 40, clock=FakeClock()).tokens
    assert len(g.batches) == len(g.rounds) and any(len(b) == 3 for b in g.batches)
    audit = replay_exact(KV(target_rule), PROMPT, g.tokens, g.batches)
    assert audit.ok and audit.rounds == len(g.rounds)


def test_a_rollback_one_position_short_is_caught_by_the_replay(monkeypatch):
    """The target's KV rolled back one position too far after a rejection: the loop reads a
    context missing a token from then on."""
    class Short(KV):
        def truncate(self, pos):
            super().truncate(pos - 1 if pos > len(PROMPT) + 1 else pos)
    g = generate_speculative(Short(target_rule), KV(flaky_draft_rule), PROMPT, 40, 3,
                             clock=FakeClock())
    audit = replay_exact(KV(target_rule), PROMPT, g.tokens, g.batches)
    assert not audit.ok and audit.round is not None and audit.round >= 0
    assert audit.expected == g.tokens[audit.position] != audit.replayed
    raw = generate_raw(KV(target_rule), PROMPT, 40, clock=FakeClock()).tokens
    j = next(i for i, (a, b) in enumerate(zip(raw, g.tokens)) if a != b)
    d = classify_divergence(KV(target_rule), PROMPT, raw, g.tokens, g.batches,
                            [r.n_emitted for r in g.rounds], j)
    assert d["kind"] == "defect"


def test_a_dropped_bonus_token_is_caught_by_the_replay(monkeypatch):
    monkeypatch.setattr(speculative, "cut_at_eog",
                        lambda d, emitted: emitted[:-1] if len(emitted) > 1 else emitted)
    g = sd_run()
    monkeypatch.undo()
    # the next round's first draft is the dropped token again (the draft agrees with the
    # target): the text equals plain decoding's, a divergence count sees nothing ...
    raw = generate_raw(KV(target_rule), PROMPT, 40, clock=FakeClock()).tokens
    assert g.tokens == raw[:len(g.tokens)]
    # ... and the replay of SD's own rounds does: they emit fewer tokens than the target's
    audit = replay_exact(KV(target_rule), PROMPT, g.tokens, g.batches)
    assert not audit.ok


def test_the_parallel_schedule_and_a_reused_context_replay_exactly():
    from concurrent.futures import Future

    def submit(fn, *args):
        f = Future()
        f.set_result(fn(*args))
        return f
    t, d = KV(target_rule), KV(flaky_draft_rule)
    t.eval(PROMPT[:5], 0, 1)
    d.eval(PROMPT[:5], 0, 1)
    g = speculative.generate_speculative_parallel(t, d, PROMPT, 30, 3, submit,
                                                  clock=FakeClock(), reuse=5)
    assert g.reused == 5 and t.kv[:5] == PROMPT[:5]
    assert replay_exact(KV(target_rule), PROMPT, g.tokens, g.batches).ok


def test_a_numeric_divergence_is_told_from_a_defect():
    """A target whose batched rows flip a near-tie: row 2 of a 4-token batch picks the
    runner-up. SD's output differs from raw there; both paths reproduce their own run's
    token, the flip is the row's own: numeric, and the exact replay holds."""
    class Flippy(KV):
        def eval(self, tokens, pos, n_out):
            out = super().eval(tokens, pos, n_out)
            if len(tokens) == 4:
                out[2] = self.last[2] = (out[2] + 1) % 50
            return out
    g = generate_speculative(Flippy(target_rule), KV(target_rule), PROMPT, 30, 3,
                             clock=FakeClock())
    raw = generate_raw(Flippy(target_rule), PROMPT, 30, clock=FakeClock()).tokens
    assert g.tokens != raw
    assert replay_exact(Flippy(target_rule), PROMPT, g.tokens, g.batches).ok
    j = next(i for i, (a, b) in enumerate(zip(raw, g.tokens)) if a != b)
    d = classify_divergence(Flippy(target_rule), PROMPT, raw, g.tokens, g.batches,
                            [r.n_emitted for r in g.rounds], j)
    assert (d["kind"], d["drift"], d["row"]) == ("numeric", "batch row", 2)
    assert d["one_token"]["raw"] == 1.0 and d["batched"]["sd"] == 1.0


# --- on the tiny models: every drafter and schedule, the exact audit on -----------------------

def bench(tiny_models, tmp_path, *extra, draft=True):
    out = tmp_path / "run.json"
    args = ["bench", "--target", str(tiny_models["target"]), "--threads", "1",
            "--max-tokens", "24", "--prompts-per-task", "2", "--warmup", "0", "--no-save",
            "--exact-audit", "--json", str(out), *extra]
    if draft:
        args[3:3] = ["--draft", str(tiny_models["draft"])]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text()), res.output


@pytest.mark.parametrize("extra, draft", [
    (["--tasks", "json,code"], True),                         # static and adaptive
    (["--tasks", "grounded", "--drafter", "lookup"], False),
    (["--tasks", "grounded", "--drafter", "hybrid"], True),
    (["--tasks", "json", "--p-min", "0.5", "--policy", "static"], True),
    (["--tasks", "json", "--schedule", "parallel", "--policy", "static", "--p-cores", "1",
      "--draft-cores", "1"], True),
    (["--tasks", "json", "--depth", "64", "--policy", "static"], True),
])
def test_every_drafter_and_schedule_passes_the_exact_audit(tiny_models, tmp_path, extra,
                                                           draft):
    data, out = bench(tiny_models, tmp_path, *extra, draft=draft)
    audits = data["audit"]
    assert audits and all(a["exact"]["ok"] for a in audits), audits
    assert all(a["identical"] for a in audits)   # F32 tiny models: lossless exactly
    sd_runs = [r for r in data["runs"] if r["mode"] != "raw"]
    assert all(len(r["drafts"]) == len(r["rounds"]) for r in sd_runs)


def test_follow_up_turns_pass_the_exact_audit(tiny_models, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"task": "chat", "prompt": "Name three colours.",
                             "followup": "And three more?"}) + "\n")
    data, _ = bench(tiny_models, tmp_path, "--prompts", str(f), "--policy", "static")
    assert data["audit"] and all(a["exact"]["ok"] for a in data["audit"])


def test_the_drift_reads_every_batch_on_a_kv_written_one_token_at_a_time():
    """harness/drift.py: a chunk's rows are its own kernels' drift only if nothing before
    it in the cache was written by an earlier batch (the review caught the forward order)."""
    import numpy as np

    from cpuspec.harness.drift import drift_of_text

    class Recorder:
        def __init__(self):
            self.kv, self.seen = [], []

        def eval(self, tokens, pos, n_out):
            batched = len(tokens) > 1 and pos > 0
            self.seen.append([b for _, b in self.kv[:pos]].count(True) if batched else 0)
            self.kv = self.kv[:pos] + [(t, batched) for t in tokens]
            self.n = n_out
            return [0] * n_out

        def truncate(self, pos):
            del self.kv[pos:]

        def logits(self, n_out):
            return np.zeros((n_out, 8))
    r = Recorder()
    rows = drift_of_text(r, [1, 2, 3], list(range(20)), 4, 1.0)
    assert len(rows) == 19 and max(r.seen) == 0


def test_a_backend_turned_off_is_not_demanded_of_the_wheel(monkeypatch):
    from cpuspec.llama import build
    monkeypatch.setattr(build, "installed_backends", lambda: {"cuda", "blas"})
    args, want = build.rebuild_cmake_args({"CMAKE_ARGS": "-DGGML_CUDA=OFF "
                                                         "-DGGML_BLAS_VENDOR=OpenBLAS"})
    assert want == {"blas"} and "-DGGML_BLAS=on" in args and "-DGGML_CUDA=on" not in args


LOSSLESS_RUNS = Path(__file__).resolve().parent.parent / "bench" / "results" / \
    "epyc-family25-model17" / "lossless"


def test_the_default_pairs_first_screen_classifies_every_divergence():
    """bench/lossless.sh's default run (Q4_K_M pair, --exact-audit, machine B‴): the `same`
    column reads identical + numeric, the legend says what ≈ means and that every SD output's
    own verifies replayed; report --details gives both paths' logits per divergence."""
    run = LOSSLESS_RUNS / "default_q4km.json.gz"
    out = CliRunner().invoke(main, ["report", str(run)]).output
    overall = next(ln for ln in out.splitlines() if ln.startswith("overall"))
    doc = read_json(run)
    assert all(a["exact"]["ok"] for a in doc["audit"])          # static and adaptive
    assert all(a["divergence"]["kind"] == "numeric" for a in doc["audit"]
               if not a["identical"])
    static = [a for a in doc["audit"] if a["mode"] == "static"]     # the table's column
    diverged = [a for a in static if not a["identical"]]
    assert diverged and overall.rstrip().endswith(
        f"{len(static) - len(diverged)}/{len(static)} +{len(diverged)}≈"), overall
    assert "outputs reproduced" in out and "DEFECT" not in out
    details = CliRunner().invoke(main, ["report", str(run), "--details"]).output
    assert details.count(": numeric (") == sum(1 for a in doc["audit"] if not a["identical"])
    assert "Logit drift, this target on this build" in details
