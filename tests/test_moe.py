"""Issue 59, item 4: shape-true MoE targets (qwen3moe). The vendored loader takes them; their
router sends a batch's tokens apart ("spread", the verify's worst case) or together ("same
route", its best case); Qwen3-30B-A3B has its published shapes (docs/moe.md)."""
from dataclasses import replace

import numpy as np
import pytest

from cpuspec.inputs.shapes import SHAPES, Shape, quant_types, tensors

# Qwen3-30B-A3B's structure at a tiny width: 4 layers of 8 experts, 2 used per token
TINY_MOE = Shape("qwen3moe-tiny", "qwen3moe", 256, 4, 4, 2, 512, 512, head_dim=64,
                 experts=8, experts_used=2, expert_ff=256, router="spread")


def logits_of(path, tokens):
    from cpuspec.llama.engine import Model, Session
    with Model(path) as m, Session(m, 64, 1) as s:
        s.decode(tokens, 0, len(tokens))
        return np.array(s.logits(len(tokens)))


@pytest.fixture
def tiny_moes(tiny_models, monkeypatch):
    from cpuspec.llama.shape_true import write_shape_true
    out = {}
    for router in ("spread", "same", "random"):
        shape = replace(TINY_MOE, name=f"qwen3moe-tiny-{router}", router=router)
        monkeypatch.setitem(SHAPES, shape.name, shape)
        out[router] = write_shape_true(shape, "Q8_0", tiny_models["target"], 1 << 34)
    return out


def test_each_routing_loads_and_decodes_without_nan(tiny_moes):
    for router, path in tiny_moes.items():
        logits = logits_of(path, [5, 60, 120, 300, 444])
        assert np.isfinite(logits).all(), router


def test_spread_routing_keeps_tokens_apart_and_random_weights_do_not(tiny_moes):
    """Why the spread file exists: with random weights throughout, a batch's hidden states
    share one large component (the tokens' outputs nearly equal); with the output projections
    at zero each token keeps its own state."""
    def mean_corr(path):
        c = np.corrcoef(logits_of(path, [5, 60, 120, 300, 444]))
        return float(c[np.triu_indices(len(c), 1)].mean())
    assert mean_corr(tiny_moes["spread"]) < 0.3 and mean_corr(tiny_moes["random"]) > 0.8


def test_qwen3_30b_a3b_has_the_published_shapes():
    """Qwen/Qwen3-30B-A3B config.json: 48 layers, 128 experts of 768, 8 used, heads 32/4 of
    128; llama-quantize keeps the router F32 and gives ffn_down_exps Q6_K in use_more_bits'
    layers (the first 6 of 48, then every third: blk.8, not blk.7)."""
    shape = SHAPES["qwen3-30b-a3b"]
    t = dict(tensors(shape))
    assert t["blk.0.ffn_gate_exps.weight"] == (2048, 768, 128)
    assert t["blk.47.ffn_down_exps.weight"] == (768, 2048, 128)
    assert t["blk.0.attn_q.weight"] == (2048, 4096) and t["blk.0.ffn_gate_inp.weight"] == \
        (2048, 128)
    types = quant_types(shape, "Q4_K_M")
    assert types["blk.0.ffn_gate_inp.weight"] == "F32"
    assert [types[f"blk.{i}.ffn_down_exps.weight"] for i in (0, 7, 8)] == \
        ["Q6_K", "Q4_K", "Q6_K"]
    assert 3.0e9 < shape.active_params() < 3.6e9 and 29e9 < shape.params() < 32e9


# gpt-oss's structure at a tiny width: 4 layers of 8 experts, 2 used per token, biases and sinks
TINY_GPT_OSS = Shape("gpt-oss-tiny", "gpt-oss", 256, 4, 4, 2, 256, 512, head_dim=64,
                     experts=8, experts_used=2, expert_ff=256, router="spread", swa=16,
                     yarn=(32.0, 4096))


def test_gpt_oss_writes_mxfp4_experts_loads_and_keeps_tokens_apart(tiny_models, monkeypatch):
    """gpt-oss as llama-quantize's MXFP4_MOE writes it (experts MXFP4, the rest Q8_0, biases,
    sinks and the router F32): the vendored loader (src/models/openai-moe.cpp) takes it, it
    decodes without NaN, and the spread routing's zeroed MXFP4 experts keep tokens apart."""
    from cpuspec.llama.shape_true import write_shape_true
    types = quant_types(TINY_GPT_OSS, "MXFP4_MOE")
    assert types["blk.0.ffn_up_exps.weight"] == "MXFP4" and \
        types["blk.0.attn_q.weight"] == "Q8_0" and types["output.weight"] == "Q8_0"
    assert types["blk.3.ffn_down_exps.bias"] == "F32" and \
        types["blk.0.ffn_gate_inp.weight"] == "F32" and types["blk.1.attn_sinks.weight"] == "F32"
    monkeypatch.setitem(SHAPES, TINY_GPT_OSS.name, TINY_GPT_OSS)
    path = write_shape_true(TINY_GPT_OSS, "MXFP4_MOE", tiny_models["target"], 1 << 34)
    logits = logits_of(path, [5, 60, 120, 300, 444])
    assert np.isfinite(logits).all()
    c = np.corrcoef(logits)
    assert float(c[np.triu_indices(len(c), 1)].mean()) < 0.3


def test_gpt_oss_has_the_published_shapes_and_takes_only_its_quant():
    """openai/gpt-oss-20b config.json: 24 layers, 32 experts of 2880, 4 used, heads 64/8 of
    64, vocabulary 201088: 20.9 B weights, 3.6 B read per token (OpenAI's model card: 20.91 B
    and 3.61 B active); the 120B: 36 layers of 128 experts, 116.8 B and 5.17 B (card: 116.83 B
    and 5.13 B)."""
    from cpuspec.inputs.shapes import ShapeError
    s20, s120 = SHAPES["gpt-oss-20b"], SHAPES["gpt-oss-120b"]
    t = dict(tensors(s20))
    assert t["blk.23.ffn_down_exps.weight"] == (2880, 2880, 32)
    assert t["blk.0.attn_q.weight"] == (2880, 4096) and t["blk.0.attn_sinks.weight"] == (64,)
    assert round(s20.params() / 1e9, 2) == 20.91 and round(s20.active_params() / 1e9, 2) == 3.61
    assert round(s120.params() / 1e9, 2) == 116.83 and \
        abs(s120.active_params() / 5.13e9 - 1) < 0.01
    with pytest.raises(ShapeError, match="MXFP4_MOE"):
        quant_types(s20, "Q4_K_M")
    with pytest.raises(ShapeError, match="MXFP4_MOE"):
        quant_types(SHAPES["qwen3-8b"], "MXFP4_MOE")


def test_gpt_oss_with_the_pairs_qwen_draft_is_refused_with_the_way_that_works():
    """gpt-oss has no smaller sibling and shares no vocabulary: `costs --sizes gpt-oss-20b`
    (the default pair's Qwen2.5 draft) is refused before any file is written, naming the run
    that works (itself as the draft, for its verify curve)."""
    from click.testing import CliRunner
    from cpuspec.cli.main import main
    res = CliRunner().invoke(main, ["costs", "--sizes", "gpt-oss-20b"])
    assert res.exit_code == 2 and "--pairs gpt-oss-20b:gpt-oss-20b" in res.output
    assert "Traceback" not in res.output
