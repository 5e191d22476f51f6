"""The quality proxy on the tiny models: numbers that can fail, computed independently."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.llama.engine import Model, Session
from cpuspec.harness.quality import log_softmax_at, perplexity, top1_agreement


def test_log_softmax_by_hand():
    rows = np.array([[0.0, np.log(3.0)], [1.0, 1.0]])
    assert log_softmax_at(rows, [1, 0]) == pytest.approx([np.log(0.75), np.log(0.5)])


def test_perplexity_matches_one_token_decodes(tiny_models):
    """Chunked all-rows perplexity equals the one computed from one-token decodes."""
    with Model(tiny_models["target"]) as m, Session(m, 256, 1) as s:
        tokens = m.tokenize("the quick brown fox jumps over the lazy dog " * 4)
        ppl = perplexity(s, tokens, chunk=7)
        s.truncate(0)
        nll = []
        for i, t in enumerate(tokens[:-1]):
            s.decode([t], i, 1)
            nll.append(-log_softmax_at(s.logits(1), [tokens[i + 1]])[0])
        assert ppl == pytest.approx(float(np.exp(np.mean(nll))), rel=1e-3)


def test_agreement_is_one_with_itself_and_lower_for_another_model(tiny_models):
    from cpuspec.core.speculative import generate_raw
    with Model(tiny_models["target"]) as t, Session(t, 256, 1) as ts, \
            Model(tiny_models["draft"]) as d, Session(d, 256, 1) as ds:
        prompt = t.tokenize("hello world")
        out = generate_raw(ts, prompt, 40).tokens
        assert top1_agreement(ts, prompt, out) == 1.0
        other = top1_agreement(ds, prompt, out)
        assert 0.0 <= other < 1.0


def test_quality_command(tiny_models, tmp_path):
    out = tmp_path / "q.json"
    res = CliRunner().invoke(main, ["quality", str(tiny_models["target"]),
                                    str(tiny_models["draft"]), "--reference",
                                    str(tiny_models["target"]), "--threads", "1",
                                    "--max-tokens", "16", "--prompts-per-task", "1",
                                    "--json", str(out), "--no-save"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["kind"] == "quality"
    same, other = data["models"]
    assert same["top1_agreement_mean"] == 1.0 and other["top1_agreement_mean"] < 1.0
    assert same["perplexity"] > 1.0 and "top-1 agreement" in res.output
