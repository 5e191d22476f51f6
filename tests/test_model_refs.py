"""Issue 70: a model by the name its owner already uses. A local HTTP server poses as the
Hugging Face hub (HF_ENDPOINT; tests/fake_hub.py serves its API for repos of tiny real GGUFs), a
fake Ollama store holds manifests and blobs written from a real tiny GGUF, and an LM Studio
folder holds one; `cpuspec bench --target OWNER/REPO:QUANT --draft OWNER/REPO2:QUANT` runs end
to end against them in a child process (huggingface-hub reads HF_ENDPOINT when imported)."""
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cpuspec.inputs.refs import Ref, RefError, parse_ref, pick_file, quant_of

from fake_hub import FakeHub

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def hub(tiny_models):
    h = FakeHub()
    t, d = tiny_models["target"].read_bytes(), tiny_models["draft"].read_bytes()
    h.add_repo("acme/tiny-GGUF", {"tiny-Q8_0.gguf": t, "tiny-Q4_K_M.gguf": t,
                                  "README.md": b"# tiny\n"})
    h.add_repo("acme/tiny-draft-GGUF", {"tiny-draft-Q8_0.gguf": d,
                                        "tiny-draft-Q4_0.gguf": d})
    h.add_repo("acme/split-GGUF", {"big-Q4_K_M-00001-of-00002.gguf": t[:4096],
                                   "big-Q4_K_M-00002-of-00002.gguf": t[4096:]})
    h.add_repo("acme/gated-GGUF", {"g-Q4_K_M.gguf": t})
    h.add_repo("acme/evil-GGUF", {"../evil-Q4_K_M.gguf": t, "e\x1b]52;c;SGk=\x07-Q4_K_M.gguf": t,
                                  "good-Q8_0.gguf": t})
    h.gated.add("acme/gated-GGUF")
    h.start()
    yield h
    h.stop()


def cpuspec(tmp_path: Path, *args: str, endpoint: str = "http://127.0.0.1:9",
            extra: dict | None = None, timeout: int = 300):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "LLAMA_CACHE")}
    env.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf"),
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                "OLLAMA_MODELS": str(tmp_path / "ollama"), "LMSTUDIO_HOME": str(tmp_path / "lms"),
                "XDG_CACHE_HOME": str(tmp_path / "xdg"), **(extra or {})})
    return subprocess.run([sys.executable, "-m", "cpuspec", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=tmp_path)


BENCH = ["bench", "--tasks", "json", "--prompts-per-task", "1", "-n", "8", "--warmup", "0",
         "--threads", "1", "-k", "2", "--fixed", "--policy", "static"]


def test_bench_by_hub_references_end_to_end(hub, tiny_models, tmp_path):
    out = tmp_path / "run.json"
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF:Q4_K_M", "--draft",
                  "acme/tiny-draft-GGUF:q8_0", "--json", str(out), "--no-save",
                  endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-3000:]
    models = json.loads(out.read_text())["models"]
    want = {"target": ("acme/tiny-GGUF", "tiny-Q4_K_M.gguf", tiny_models["target"]),
            "draft": ("acme/tiny-draft-GGUF", "tiny-draft-Q8_0.gguf", tiny_models["draft"])}
    for role, (repo, file, src) in want.items():
        m = models[role]
        assert (m["repo"], m["file"]) == (repo, file)
        assert m["revision"] == hub.repos[repo]["sha"] and m["verified"] is True
        assert m["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
        assert m["store"] == "huggingface-hub cache"
    # the names llama.cpp's -hf/-hfd take, as they were typed
    assert (models["target"]["hf_ref"], models["draft"]["hf_ref"]) == \
        ("acme/tiny-GGUF:Q4_K_M", "acme/tiny-draft-GGUF:q8_0")
    # the files are where huggingface-hub (and llama.cpp's -hf) keep them: used again in place,
    # offline, without a request
    n = len(hub.log)
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF:Q4_K_M", "--draft",
                  "acme/tiny-draft-GGUF:Q8_0", "--json", str(tmp_path / "again.json"),
                  "--no-save", endpoint=hub.endpoint, extra={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(hub.log) == n, [x[:2] for x in hub.log[n:]]
    again = json.loads((tmp_path / "again.json").read_text())["models"]["target"]
    assert again["repo"] == "acme/tiny-GGUF" and again["sha256"] == models["target"]["sha256"]
    assert again["revision"] == hub.repos["acme/tiny-GGUF"]["sha"]   # the snapshot's commit


def test_export_carries_the_repo_and_no_local_path(hub, tmp_path):
    """The public repo's name leaves the machine; a private repo's does not (its name may be
    its owner's), nor any path."""
    hub.private.add("acme/tiny-draft-GGUF")
    out = tmp_path / "run.json"
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF", "--draft",
                  "acme/tiny-draft-GGUF:Q4_0", "--json", str(out), "--no-save",
                  endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-3000:]
    res = cpuspec(tmp_path, "export", str(out), "--out", str(tmp_path / "pub"))
    assert res.returncode == 0, res.stderr
    import pyarrow.parquet as pq
    table = pq.read_table(next((tmp_path / "pub").rglob("*.parquet")))
    text = json.dumps(table.to_pylist(), default=str)
    rows = table.to_pylist()
    assert {r["target_repo"] for r in rows} == {"acme/tiny-GGUF"}
    assert {r["draft_repo"] for r in rows} == {None} and "acme/tiny-draft-GGUF" not in text
    assert str(tmp_path) not in text and os.environ.get("USER", "root") + "/" not in text


@pytest.mark.parametrize("ref, message", [
    ("acme/nosuch-GGUF:Q4_K_M", "no repo acme/nosuch-GGUF"),
    ("acme/tiny-GGUF:Q2_K", "has no Q2_K GGUF; it has: Q4_K_M, Q8_0"),
    ("acme/gated-GGUF", "is gated"),
    # names in a listing that climb out of the repo or carry escapes are never picked
    ("acme/evil-GGUF:Q4_K_M", "has no Q4_K_M GGUF; it has: Q8_0"),
])
def test_bad_hub_references_get_one_line_and_exit_2(hub, tmp_path, ref, message):
    res = cpuspec(tmp_path, *BENCH, "--target", ref, "--no-save", endpoint=hub.endpoint)
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_a_split_model_is_fetched_whole_and_a_dropped_download_is_never_used(hub, tmp_path):
    env_script = (
        "import sys, json\n"
        "from cpuspec.inputs.refs import parse_ref, resolve_ref\n"
        "r = resolve_ref(parse_ref(sys.argv[1]))\n"
        "print(json.dumps({'path': str(r.path), 'origin': r.origin}))\n")
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "CPUSPEC_HOME": str(tmp_path / "home")}
    res = subprocess.run([sys.executable, "-c", env_script, "acme/split-GGUF"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["origin"]["file"] == "big-Q4_K_M-00001-of-00002.gguf"
    first = Path(got["path"])
    assert (first.parent / "big-Q4_K_M-00002-of-00002.gguf").is_file()   # both parts
    # a connection dropped every time: an error, no file left to be used
    hub.drop_after[("acme/tiny-draft-GGUF", "tiny-draft-Q4_0.gguf")] = (100, 99)
    res = subprocess.run([sys.executable, "-c", env_script, "acme/tiny-draft-GGUF:Q4_0"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode != 0 and "download failed" in res.stderr, res.stderr[-2000:]
    repo = tmp_path / "hf" / "hub" / "models--acme--tiny-draft-GGUF"
    assert not [p for p in repo.rglob("*") if p.is_file() and p.parent.name == "blobs"], \
        "a partial or whole blob of the dropped download is left"
    assert not list(repo.rglob("*.gguf"))


def ollama_store(root: Path, gguf: Path, name: str = "tiny", tag: str = "latest",
                 media: str = "application/vnd.ollama.image.model") -> Path:
    data = gguf.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    blob = root / "blobs" / f"sha256-{digest}"
    blob.write_bytes(data)
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)}]}))
    return blob


def test_ollama_and_lm_studio_models_are_used_in_place(tiny_models, tmp_path):
    blob = ollama_store(tmp_path / "ollama", tiny_models["target"], "tiny", "q8")
    lms = tmp_path / "lms" / "models" / "acme" / "tiny-draft-GGUF"
    lms.mkdir(parents=True)
    (lms / "tiny-draft-Q4_0.gguf").write_bytes(tiny_models["draft"].read_bytes())
    out = tmp_path / "run.json"
    res = cpuspec(tmp_path, *BENCH, "--target", "ollama:tiny:q8", "--draft",
                  "acme/tiny-draft-GGUF:Q4_0", "--json", str(out), "--no-save",
                  extra={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    m = json.loads(out.read_text())["models"]
    assert m["target"]["path"] == str(blob) and m["target"]["repo"] == "ollama:tiny:q8"
    assert m["target"]["verified"] is True
    assert m["draft"]["path"] == str(lms / "tiny-draft-Q4_0.gguf")
    assert m["draft"]["store"] == "LM Studio" and m["draft"]["repo"] == "acme/tiny-draft-GGUF"
    # the screen names the Ollama model, not its blob
    assert "ollama:tiny:q8 + tiny-draft-Q4_0.gguf" in res.stdout and "sha256-" not in res.stdout
    # listed by store
    res = cpuspec(tmp_path, "models", "list", "--local", extra={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr
    assert "ollama:tiny:q8" in res.stdout and "LM Studio" in res.stdout


def test_bad_ollama_references(tiny_models, tmp_path):
    ollama_store(tmp_path / "ollama", tiny_models["target"], "weird", "latest",
                 "application/vnd.ollama.image.tensor")
    huge = tmp_path / "ollama" / "manifests" / "registry.ollama.ai" / "library" / "huge" / "latest"
    huge.parent.mkdir(parents=True)
    with open(huge, "wb") as f:   # 8 GiB, sparse: read whole, it would not fit in memory
        f.write(b'{"layers": [')
        f.truncate(8 << 30)
    for ref, message in (("ollama:nosuch", "not installed in Ollama"),
                         ("ollama:weird", "names no model layer"),
                         ("ollama:huge", "names no model layer")):
        res = cpuspec(tmp_path, *BENCH, "--target", ref, "--no-save")
        assert res.returncode == 2 and message in res.stderr, res.stderr


def test_models_drafts_lists_what_shares_the_targets_tokenizer(tiny_models, tmp_path):
    from tiny_gguf import make_weights, write_model
    lms = tmp_path / "lms" / "models" / "acme" / "drafts-GGUF"
    lms.mkdir(parents=True)
    (lms / "a-Q4_0.gguf").write_bytes(tiny_models["draft"].read_bytes())
    (lms / "b-Q8_0.gguf").write_bytes(tiny_models["same"].read_bytes())
    write_model(lms / "c-Q4_0.gguf", make_weights(7), "tiny-other", swap_tokens=100)
    res = cpuspec(tmp_path, "models", "drafts", str(tiny_models["target"]),
                  extra={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    fits = [x for x in lines if "a-Q4_0.gguf" in x or "b-Q8_0.gguf" in x]
    assert len(fits) == 2 and all("fits" in x for x in fits), res.stdout
    left = [x for x in lines if "c-Q4_0.gguf" in x]
    assert left and "tokenizer" in left[0], res.stdout


def test_models_drafts_reads_a_hub_targets_header_without_downloading_it(hub, tiny_models,
                                                                          tmp_path):
    """A hub target not on this machine: its tokenizer is read from the hub's copy by range
    (its header only); nothing lands in huggingface-hub's cache."""
    from tiny_gguf import make_weights, write_model
    lms = tmp_path / "lms" / "models" / "acme" / "drafts-GGUF"
    lms.mkdir(parents=True)
    (lms / "a-Q4_0.gguf").write_bytes(tiny_models["draft"].read_bytes())
    write_model(lms / "c-Q4_0.gguf", make_weights(7), "tiny-other", swap_tokens=100)
    res = cpuspec(tmp_path, "models", "drafts", "acme/tiny-GGUF:Q4_K_M", endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr
    assert "acme/tiny-GGUF/tiny-Q4_K_M.gguf" in res.stdout and "read from the hub" in res.stdout
    lines = res.stdout.splitlines()
    assert any("a-Q4_0.gguf" in x and "fits" in x for x in lines), res.stdout
    assert any("c-Q4_0.gguf" in x and "left out" in x and "tokenizer" in x for x in lines)
    repo = tmp_path / "hf" / "hub" / "models--acme--tiny-GGUF"
    assert not [f for f in repo.rglob("*") if f.is_file() and "blobs" in f.parts], \
        "the target was downloaded"


def test_a_header_past_the_first_read_is_fetched_by_range_from_where_it_stopped(hub,
                                                                                 tmp_path):
    """A hub target whose header runs past the first 16 MB (a 17 MB metadata string): the
    second read asks the hub for the bytes from 16 MiB on only, and the tokenizer read from
    the two fits a draft on disk that shares it."""
    import gguf
    import numpy as np

    def write(path, padding):
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_tokenizer_model("gpt2")
        w.add_token_list([f"t{i}" for i in range(300)])
        if padding:
            w.add_string("cpuspec.test.padding", "x" * (17 << 20))
        w.add_tensor("t.weight", np.zeros(64, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path
    big = write(tmp_path / "big.gguf", True)
    hub.add_repo("acme/big-GGUF", {"big-Q8_0.gguf": big.read_bytes()})
    lms = tmp_path / "lms" / "models" / "acme" / "small-GGUF"
    lms.mkdir(parents=True)
    write(lms / "small-Q4_0.gguf", False)
    res = cpuspec(tmp_path, "models", "drafts", "acme/big-GGUF:Q8_0", endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr
    assert any("small-Q4_0.gguf" in x and "fits" in x for x in res.stdout.splitlines()), \
        res.stdout
    ranges = [h.get("Range") or h.get("range") for m, u, h in hub.log
              if m == "GET" and u.endswith("/big-Q8_0.gguf")]
    assert ranges[:2] == [f"bytes=0-{(16 << 20) - 1}",
                          f"bytes={16 << 20}-{big.stat().st_size - 1}"], ranges


def test_a_header_is_read_in_growing_pieces_and_only_as_far_as_it_goes(tiny_models,
                                                                       monkeypatch):
    from cpuspec.llama import gguf_meta
    from cpuspec.llama.gguf_meta import GGUFMetaError, tokenizer_of, tokenizer_of_head
    data = tiny_models["target"].read_bytes()
    asked = []

    def read(n):
        asked.append(n)
        return data[:n]
    monkeypatch.setattr(gguf_meta, "HEAD_FIRST", 64)
    got = tokenizer_of_head(read, len(data), "tiny")
    assert got == tokenizer_of(tiny_models["target"]) and got[1]
    # read four times further each time, and no further than the first read that holds the
    # whole header (its data offset)
    from gguf import GGUFReader
    header = GGUFReader(tiny_models["target"]).data_offset
    assert asked[0] == 64 and all(b == 4 * a for a, b in zip(asked, asked[1:]))
    assert asked[-2] < header <= asked[-1] < len(data), (asked, header)
    junk = bytes(range(256)) * 64
    with pytest.raises(GGUFMetaError, match="not a readable GGUF"):
        tokenizer_of_head(lambda n: junk[:n], len(junk), "junk")


def test_a_repo_that_moves_between_listing_and_download_is_said_so(hub, tiny_models,
                                                                    tmp_path):
    """A push between cpuspec's listing and huggingface-hub's download (which follows the
    branch): the new file is not the listed one; it is removed and the message says why."""
    t, d = tiny_models["target"].read_bytes(), tiny_models["draft"].read_bytes()
    hub.add_repo("acme/mover-GGUF", {"m-Q8_0.gguf": t}, sha="a" * 40)
    hub.move_on_list["acme/mover-GGUF"] = ("b" * 40, {"m-Q8_0.gguf": d})
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/mover-GGUF:Q8_0", "--draft",
                  "acme/tiny-draft-GGUF:Q8_0", "--no-save", endpoint=hub.endpoint)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "acme/mover-GGUF changed on the hub while cpuspec fetched it (listed at aaaaaaaaaaaa, " \
        "downloaded at bbbbbbbbbbbb" in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    blobs = tmp_path / "hf" / "hub" / "models--acme--mover-GGUF" / "blobs"
    assert not [f for f in blobs.rglob("*") if f.is_file()] if blobs.exists() else True
    # listed again, the new commit is what is fetched
    out = tmp_path / "run.json"
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/mover-GGUF:Q8_0", "--draft",
                  "acme/tiny-draft-GGUF:Q8_0", "--no-save", "--json", str(out),
                  endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(out.read_text())["models"]["target"]["revision"] == "b" * 40


def test_the_serving_commands_name_hub_models_as_llama_cpp_takes_them(tmp_path):
    """A run whose models came from the hub by OWNER/REPO:QUANT (a real recorded run where SD
    pays, its models' hf_ref set as such a run records them): the llama-server and llama-cli
    lines fetch the same files with -hf and -hfd; a run by path keeps -m and -md."""
    import gzip
    from click.testing import CliRunner
    from cpuspec.cli.main import main
    src = ROOT / "tests" / "recorded" / "epyc-family25-model17" / "bench_q8_0_k7.json.gz"
    doc = json.loads(gzip.open(src).read())
    for role, repo, tag in (("target", "acme/coder-1.5b-GGUF", "Q8_0"),
                            ("draft", "acme/coder-0.5b-GGUF", "Q4_0")):
        doc["models"][role].update(repo=repo, hf_ref=f"{repo}:{tag}")
    hub_run = tmp_path / "hub.json"
    hub_run.write_text(json.dumps(doc))
    for cmd in (["report", str(hub_run)], ["advise", str(hub_run), "--details"]):
        res = CliRunner().invoke(main, cmd)
        assert res.exit_code == 0, res.output
        flat = " ".join(res.output.replace("\\\n", " ").split())   # commands wrap with \
        assert "-hf acme/coder-1.5b-GGUF:Q8_0 --no-mmproj" in flat and \
            "-hfd acme/coder-0.5b-GGUF:Q4_0" in flat, res.output
        assert " -md " not in flat and "llama-server -m " not in flat
        if cmd[0] == "advise":   # llama-cpp-python, from the same files
            assert f"Llama.from_pretrained('acme/coder-1.5b-GGUF', " \
                f"'{doc['models']['target']['file']}'" in flat, res.output
            assert f"DraftModel(hf_hub_download('acme/coder-0.5b-GGUF', " \
                f"'{doc['models']['draft']['file']}')" in flat, res.output
            assert "cpuspec paths --target acme/coder-1.5b-GGUF:Q8_0 --draft " \
                "acme/coder-0.5b-GGUF:Q4_0" in flat, res.output
    res = CliRunner().invoke(main, ["report", str(src)])
    assert "llama-server -m " in " ".join(res.output.split()) and "-hf " not in res.output
    # a name that is not OWNER/REPO[:QUANT] as the hub spells them is not printed as one; a
    # long one is never broken inside (the pasted command would split it)
    long = "acme/" + "L" * 90 + ":Q8_0"
    for value, shown in (("acme/x:Q8_0\ntouch /tmp/pwned", False), ("a b; $(id)", False),
                         ("\x1b]52;c;SGk=\x07/x", False), (long, True)):
        doc["models"]["target"]["hf_ref"] = value
        hub_run.write_text(json.dumps(doc))
        res = CliRunner().invoke(main, ["report", str(hub_run)])
        assert res.exit_code == 0, res.output
        lines = res.output.splitlines()
        if shown:
            assert any(line.strip().startswith(long) or f" {long} " in line
                       for line in lines), res.output
        else:
            assert "-hf " not in res.output and "llama-server -m " in \
                " ".join(res.output.replace("\\\n", " ").split()), res.output


def test_models_drafts_on_files_that_are_not_what_they_claim(hub, tiny_models, tmp_path):
    """The red team's cases: a GGUF with a key twice (gguf-py raises KeyError), as the target
    and in a store; a FIFO in a store (it would block a reader); a hub file of 0 bytes and
    one whose listed size no file can have. One line, exit 2, nothing downloaded; a bad file
    in a store is a row left out, never a traceback or a hang."""
    dup = tmp_path / "dup-Q8_0.gguf"
    data = tiny_models["draft"].read_bytes()
    dup.write_bytes(data.replace(b"tokenizer.ggml.bos_token_id",
                                 b"tokenizer.ggml.eos_token_id", 1))
    res = cpuspec(tmp_path, "models", "drafts", str(dup), extra={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 2 and "not a readable GGUF" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "Usage:" not in res.stderr
    lms = tmp_path / "lms" / "models" / "acme" / "odd-GGUF"
    lms.mkdir(parents=True)
    (lms / "dup-Q8_0.gguf").write_bytes(dup.read_bytes())
    os.mkfifo(lms / "fifo-Q8_0.gguf")
    (lms / "a-Q4_0.gguf").write_bytes(data)
    res = cpuspec(tmp_path, "models", "drafts", str(tiny_models["target"]),
                  extra={"HF_HUB_OFFLINE": "1"}, timeout=60)
    assert res.returncode == 0, res.stderr
    assert any("dup-Q8_0.gguf" in x and "unreadable" in x for x in res.stdout.splitlines())
    assert "fifo" not in res.stdout and "a-Q4_0.gguf" in res.stdout
    res = cpuspec(tmp_path, "models", "list", "--local", extra={"HF_HUB_OFFLINE": "1"},
                  timeout=60)
    assert res.returncode == 0 and "fifo" not in res.stdout, res.stdout
    hub.add_repo("acme/empty-GGUF", {"e-Q8_0.gguf": b""})
    hub.add_repo("acme/vast-GGUF", {"v-Q8_0.gguf": data})
    entry = hub.repos["acme/vast-GGUF"]["files"]["v-Q8_0.gguf"]
    entry["size"] = entry["lfs"]["size"] = 1 << 62
    for ref, said in (("acme/empty-GGUF:Q8_0", "not a GGUF file (0 bytes)"),
                      ("acme/vast-GGUF:Q8_0", "is not one a file here can have")):
        res = cpuspec(tmp_path, "models", "drafts", ref, endpoint=hub.endpoint, timeout=60)
        assert res.returncode == 2 and said in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    blobs = [f for f in (tmp_path / "hf").rglob("*") if f.is_file() and "blobs" in f.parts]
    assert not blobs, blobs


def test_references_parse_as_llama_cpp_names_them(tmp_path, monkeypatch):
    assert parse_ref("unsloth/Qwen3-8B-GGUF:Q4_K_M") == Ref(
        "hf", "unsloth/Qwen3-8B-GGUF:Q4_K_M", repo="unsloth/Qwen3-8B-GGUF", quant="Q4_K_M")
    assert parse_ref("unsloth/Qwen3-8B-GGUF/sub/x.gguf").file == "sub/x.gguf"
    r = parse_ref("hf://unsloth/Qwen3-8B-GGUF@abc123/x.gguf")
    assert (r.repo, r.revision, r.file) == ("unsloth/Qwen3-8B-GGUF", "abc123", "x.gguf")
    assert parse_ref("ollama:qwen2.5-coder:1.5b") == Ref(
        "ollama", "ollama:qwen2.5-coder:1.5b", repo="qwen2.5-coder", tag="1.5b")
    assert parse_ref("ollama:hf.co/bartowski/X:Q4_K_M").repo == "hf.co/bartowski/X"
    assert parse_ref("ollama:llama3.2").tag == "latest"
    assert parse_ref("qwen2.5-coder-0.5b", {"qwen2.5-coder-0.5b"}).kind == "name"
    f = tmp_path / "owner" / "repo"
    f.mkdir(parents=True)
    (f / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    assert parse_ref("owner/repo/m.gguf").kind == "path"      # a file here wins
    with pytest.raises(RefError):
        parse_ref("ollama:../../etc")
    # the red team's: a pull request's revision as HfFileSystem reads it, whole or %2F-written;
    # a revision that climbs, or an empty Ollama tag, is refused
    for text in ("hf://a/b@refs/pr/1/sub/x.gguf", "hf://a/b@refs%2Fpr%2F1/sub/x.gguf"):
        r = parse_ref(text)
        assert (r.repo, r.revision, r.file) == ("a/b", "refs/pr/1", "sub/x.gguf"), r
    for text in ("hf://a/b@a%2F..%2F..%2Fx/f.gguf", "hf://a/b@x%2F/f.gguf", "ollama:qwen:",
                 "hf://a/b@refs%5Ca%5C..%5Cx/f.gguf", "hf://a/b@main%0A/f.gguf"):
        with pytest.raises(RefError):
            parse_ref(text)


def test_the_name_llama_cpp_picks_a_file_by_is_checked_against_the_listing():
    from cpuspec.inputs.refs import llama_cpp_name
    files = ["m-Q4_K_M.gguf", "m-Q8_0.gguf", "m-Q8_0-imat.gguf", "README.md"]
    ref = parse_ref("acme/m-GGUF")
    assert llama_cpp_name(ref, "m-Q4_K_M.gguf", files) == "acme/m-GGUF:Q4_K_M"
    assert llama_cpp_name(parse_ref("acme/m-GGUF:q8_0"), "m-Q8_0.gguf", files) == \
        "acme/m-GGUF:q8_0"
    # a file no name picks (llama.cpp takes the first Q8_0 match), a revision, a preset
    assert llama_cpp_name(parse_ref("acme/m-GGUF/m-Q8_0-imat.gguf"), "m-Q8_0-imat.gguf",
                          files) is None
    assert llama_cpp_name(parse_ref("hf://acme/m-GGUF@v1/m-Q8_0.gguf"), "m-Q8_0.gguf",
                          files) is None
    assert llama_cpp_name(ref, "m-Q4_K_M.gguf", files + ["preset.ini"]) is None


def test_the_quant_is_picked_by_llama_cpps_rule():
    files = ["README.md", "m-Q4_K_S.gguf", "m-Q4_K_M.gguf", "mmproj-m-Q4_K_M.gguf",
             "m-Q8_0.gguf", "big/m-Q6_K-00002-of-00002.gguf", "big/m-Q6_K-00001-of-00002.gguf"]
    assert pick_file(files, None, "r") == "m-Q4_K_M.gguf"           # the default
    assert pick_file(files, "q8_0", "r") == "m-Q8_0.gguf"           # any case
    assert pick_file(files, "Q6_K", "r") == "big/m-Q6_K-00001-of-00002.gguf"
    with pytest.raises(RefError, match="it has: Q4_K_M, Q4_K_S, Q6_K, Q8_0"):
        pick_file(files, "Q4_K", "r")                               # not Q4_K_M's prefix
    assert quant_of("Qwen3-8B-UD-IQ4_XS.gguf") == "IQ4_XS"


def test_a_target_alone_whose_default_draft_does_not_fit_is_told_which_do(tiny_models,
                                                                          tmp_path,
                                                                          monkeypatch,
                                                                          cpuspec_home):
    """bench with only --target: the pair's draft (here a file of another tokenizer, cached)
    cannot draft for it; bench names the drafts on this machine that can, exit 2."""
    from click.testing import CliRunner

    from cpuspec.cli.main import main
    from cpuspec.inputs.models import _write_stamp
    from tiny_gguf import make_weights, write_model
    other = write_model(tmp_path / "other.gguf", make_weights(3), "other", swap_tokens=100)
    data = other.read_bytes()
    reg = tmp_path / "models.toml"
    reg.write_text(f'[models.d]\nrepo = "X/D"\nfile = "d.gguf"\nsha256 = '
                   f'"{hashlib.sha256(data).hexdigest()}"\n[pairs.p]\ntarget = "d"\n'
                   'draft = "d"\n')
    monkeypatch.setenv("CPUSPEC_MODELS", str(reg))
    (cpuspec_home / "models").mkdir(parents=True)
    cached = cpuspec_home / "models" / "d.gguf"
    cached.write_bytes(data)
    _write_stamp(cached, hashlib.sha256(data).hexdigest(), "test")
    lms = tmp_path / "lms" / "models" / "acme" / "fit-GGUF"
    lms.mkdir(parents=True)
    (lms / "fit-Q8_0.gguf").write_bytes(tiny_models["draft"].read_bytes())
    monkeypatch.setenv("LMSTUDIO_HOME", str(tmp_path / "lms"))
    res = CliRunner().invoke(main, [*BENCH, "--target", str(tiny_models["target"]),
                                    "--pair", "p", "--no-save"])
    assert res.exit_code == 2, res.output
    assert "cannot draft for target.gguf" in res.output and "fit-Q8_0.gguf" in res.output


def test_a_file_of_a_repo_by_path_and_by_hf_url_end_to_end(hub, tmp_path):
    out = tmp_path / "run.json"
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF/tiny-Q8_0.gguf", "--draft",
                  "hf://acme/tiny-draft-GGUF/tiny-draft-Q4_0.gguf", "--json", str(out),
                  "--no-save", endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-3000:]
    m = json.loads(out.read_text())["models"]
    assert (m["target"]["repo"], m["target"]["file"]) == ("acme/tiny-GGUF", "tiny-Q8_0.gguf")
    assert (m["draft"]["repo"], m["draft"]["file"]) == ("acme/tiny-draft-GGUF",
                                                        "tiny-draft-Q4_0.gguf")
    # a file named in the repo: recorded by the name llama.cpp's -hf picks it by
    assert (m["target"]["hf_ref"], m["draft"]["hf_ref"]) == ("acme/tiny-GGUF:Q8_0",
                                                            "acme/tiny-draft-GGUF:Q4_0")


def test_a_bad_draft_fails_before_the_target_is_downloaded(hub, tmp_path):
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF:Q4_K_M", "--draft",
                  "acme/tiny-draft-GGUF:Q9_9", "--no-save", endpoint=hub.endpoint)
    assert res.returncode == 2 and "has no Q9_9 GGUF" in res.stderr, res.stderr
    assert not list((tmp_path / "hf").rglob("*.gguf"))


@pytest.mark.parametrize("ref", ["acme/foo--bar", "hf://../..", "hf://acme/x/../../y.gguf",
                                 "acme/x/../y.gguf"])
def test_refs_the_hub_would_refuse_or_that_climb_out_are_refused(tmp_path, ref):
    res = cpuspec(tmp_path, *BENCH, "--target", ref, "--no-save")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr


def test_a_hub_that_hangs_up_is_one_line(tmp_path):
    """An endpoint that accepts and closes (a proxy, a captive portal): one line, exit 2."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.close()
    threading.Thread(target=serve, daemon=True).start()
    try:
        res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF", "--no-save",
                      endpoint=f"http://127.0.0.1:{srv.getsockname()[1]}", timeout=120)
    finally:
        srv.close()
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    # one line either way: the reachability check's own request, or the listing after it
    assert "did not answer" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_a_snapshot_link_whose_blob_is_gone_is_no_copy(tiny_models, tmp_path):
    snap = tmp_path / "hf" / "hub" / "models--acme--t" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("a" * 40)
    (snap / "t-Q4_K_M.gguf").symlink_to(tmp_path / "gone")
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/t", "--no-save",
                  extra={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 2 and "no copy of it on this machine" in res.stderr, res.stderr


def test_a_file_changed_since_it_was_hashed_loses_its_origin(tiny_models, tmp_path,
                                                             cpuspec_home):
    from cpuspec.inputs.models import local_model
    from cpuspec.inputs.refs import remember, sha256_file
    f = tmp_path / "m.gguf"
    f.write_bytes(tiny_models["target"].read_bytes())
    remember(f, sha256_file(f), {"repo": "acme/x", "file": "m.gguf", "store": "LM Studio",
                                 "verified": True, "public": True, "revision": "c" * 40})
    assert local_model(f).spec.repo == "acme/x"
    f.write_bytes(tiny_models["draft"].read_bytes())   # other contents, same path
    got = local_model(f)
    assert got.spec.repo == "(local file)" and not got.verified and got.revision is None


def test_ctrl_c_during_a_download_leaves_nothing_to_be_used(hub, tmp_path):
    """SIGINT while a file downloads: exit 130, no blob (partial or whole) left, no run saved."""
    import signal
    import time
    hub.slow[("acme/tiny-GGUF", "tiny-Q4_K_M.gguf")] = 0.2
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update({"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"),
                "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    proc = subprocess.Popen([sys.executable, "-m", "cpuspec", *BENCH, "--target",
                             "acme/tiny-GGUF:Q4_K_M", "--json", str(tmp_path / "r.json")],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not any(
            m == "GET" and "resolve" in u for m, u, _ in hub.log):
        time.sleep(0.1)
    time.sleep(1.0)                       # some chunks in, most to come
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    repo = tmp_path / "hf" / "hub" / "models--acme--tiny-GGUF"
    assert not [p for p in repo.rglob("*") if p.is_file() and p.parent.name == "blobs"]
    assert not (tmp_path / "r.json").exists()


def test_a_write_that_fails_mid_download_is_one_line_and_the_file_is_never_used(hub,
                                                                                tmp_path):
    """The disk fills while a file downloads (here: a file-size limit of 200 KB on the child,
    so the 434 KB model's writes fail part-way with EFBIG, as they would with ENOSPC): one
    line, exit 2, no blob to be used; the same command afterwards fetches it whole."""
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200 << 10, 200 << 10))
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "LLAMA_CACHE")}
    env.update({"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"),
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    res = subprocess.run([sys.executable, "-m", "cpuspec", *BENCH, "--target",
                          "acme/tiny-GGUF:Q4_K_M", "--draft", "acme/tiny-draft-GGUF:Q8_0",
                          "--no-save"], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, preexec_fn=small_files)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr, res.stderr
    assert "the download could not be written (File too large): make room in" in res.stderr
    repo = tmp_path / "hf" / "hub" / "models--acme--tiny-GGUF"
    whole = [p for p in repo.rglob("*") if p.is_file() and p.parent.name == "blobs"
             and not p.name.endswith(".incomplete")]
    assert not whole and not list((repo / "snapshots").rglob("*.gguf")) \
        if repo.exists() else True
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF:Q4_K_M", "--draft",
                  "acme/tiny-draft-GGUF:Q8_0", "--no-save", endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-2000:]


def test_room_for_every_download_is_checked_before_the_first(monkeypatch, tmp_path):
    from collections import namedtuple

    from cpuspec.inputs import refs
    from cpuspec.inputs.refs import resolve
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(resolve.shutil, "disk_usage", lambda p: usage(10 << 30, 0, 1 << 30))
    plans = [refs.Plan(Ref("hf", "a/b"), "b.gguf", ["b.gguf"], "c" * 40,
                       {"b.gguf": {"size": 700 << 20, "sha256": None}}) for _ in range(2)]
    refs.check_room(plans[:1])            # 0.7 GB of 1 GB free: fits
    with pytest.raises(RefError, match="needs 1.5 GB"):
        refs.check_room(plans)             # both together do not


def test_llama_caches_folder_is_used_in_place(tiny_models, tmp_path):
    """LLAMA_CACHE: llama.cpp's -hf keeps the hub's layout there; its copy is used offline."""
    sha = "b" * 40
    snap = tmp_path / "llama" / "models--acme--t" / "snapshots" / sha
    snap.mkdir(parents=True)
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text(sha)
    (snap / "t-Q8_0.gguf").write_bytes(tiny_models["target"].read_bytes())
    out = tmp_path / "run.json"
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/t:Q8_0", "--drafter", "lookup",
                  "--json", str(out), "--no-save", extra={"HF_HUB_OFFLINE": "1",
                                      "LLAMA_CACHE": str(tmp_path / "llama")})
    assert res.returncode == 0, res.stderr[-2000:]
    m = json.loads(out.read_text())["models"]["target"]
    assert m["path"] == str(snap / "t-Q8_0.gguf") and m["revision"] == sha


def test_a_cached_blob_changed_since_is_caught_and_fetched_again(hub, tiny_models, tmp_path):
    """A byte of the hub cache's blob flipped (same size): the next run hashes it, finds it is
    not the hub's, downloads it again and records the true sha256 (a blob's name is no proof)."""
    args = [*BENCH, "--target", "acme/tiny-GGUF:Q8_0", "--drafter", "lookup", "--no-save"]
    assert cpuspec(tmp_path, *args, "--json", str(tmp_path / "a.json"),
                   endpoint=hub.endpoint).returncode == 0
    blob = next((tmp_path / "hf" / "hub" / "models--acme--tiny-GGUF" / "blobs").iterdir())
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    res = cpuspec(tmp_path, *args, "--json", str(tmp_path / "b.json"), endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "is not the hub's" in res.stderr
    m = json.loads((tmp_path / "b.json").read_text())["models"]["target"]
    want = hashlib.sha256(tiny_models["target"].read_bytes()).hexdigest()
    assert m["sha256"] == want == hashlib.sha256(Path(m["path"]).read_bytes()).hexdigest()


def test_each_role_keeps_the_name_that_named_it(tiny_models, tmp_path):
    """Two Ollama names of one blob as target and draft, with cpuspec's memory of files
    unwritable: each role is recorded under its own name."""
    ollama_store(tmp_path / "ollama", tiny_models["target"], "one", "latest")
    ollama_store(tmp_path / "ollama", tiny_models["target"], "two", "latest")
    home = tmp_path / "home"
    (home / "known_files.json").mkdir(parents=True)        # cannot be written
    out = tmp_path / "run.json"
    res = cpuspec(tmp_path, *BENCH, "--target", "ollama:one", "--draft", "ollama:two",
                  "--json", str(out), "--no-save",
                  extra={"HF_HUB_OFFLINE": "1", "CPUSPEC_HOME": str(home)})
    assert res.returncode == 0, res.stderr[-2000:]
    m = json.loads(out.read_text())["models"]
    assert (m["target"]["repo"], m["draft"]["repo"]) == ("ollama:one:latest", "ollama:two:latest")
    assert m["target"]["verified"] and m["draft"]["verified"]


@pytest.mark.parametrize("ref, extra", [
    ("a" * 300, {}),                                        # longer than a file name may be
    ("hf://acme/tiny-GGUF@../x/t.gguf", {}),                # a revision that climbs out
    ("acme/tiny-GGUF:Q4_K_M", {"HF_ENDPOINT": "http://127.0.0.1:99999"}),   # no URL
    ("acme/tiny-GGUF:Q4_K_M", {"HF_ENDPOINT": "http://[::1"}),
])
def test_odd_references_and_endpoints_are_one_line(tmp_path, ref, extra):
    res = cpuspec(tmp_path, *BENCH, "--target", ref, "--no-save", extra=extra)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]


def test_an_endpoint_that_is_no_url_is_one_line_in_the_listings(tiny_models, tmp_path):
    """The red team's: huggingface-hub refuses an HF_ENDPOINT that is no URL when imported;
    the listings, which only read its cache's folder, said so in a traceback."""
    for args in (["models", "list", "--local"],
                 ["models", "drafts", str(tiny_models["target"])]):
        res = cpuspec(tmp_path, *args, extra={"HF_ENDPOINT": "http://[::1"})
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
        assert "HF_ENDPOINT" in res.stderr.strip().splitlines()[-1]


def test_a_refs_file_that_holds_no_commit_is_no_copy(tiny_models, tmp_path):
    """refs/main naming another repo's snapshot folder: not followed."""
    other = tmp_path / "hf" / "hub" / "models--acme--real" / "snapshots" / ("c" * 40)
    other.mkdir(parents=True)
    (other / "t-Q4_K_M.gguf").write_bytes(tiny_models["target"].read_bytes())
    trav = tmp_path / "hf" / "hub" / "models--acme--trav"
    (trav / "refs").mkdir(parents=True)
    (trav / "snapshots").mkdir()
    (trav / "refs" / "main").write_text("../../models--acme--real/snapshots/" + "c" * 40)
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/trav:Q4_K_M", "--no-save",
                  extra={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 2 and "no copy of it" in res.stderr, res.stderr[-2000:]


def test_tune_measures_a_target_named_twice_once(hub, tiny_models, tmp_path):
    """tune --targets REPO:Q8_0,REPO/FILE: one file by two names, measured once."""
    out = tmp_path / "tune.json"
    res = cpuspec(tmp_path, "tune", "--targets",
                  "acme/tiny-GGUF:Q8_0,acme/tiny-GGUF/tiny-Q8_0.gguf", "--drafts", "lookup",
                  "--tasks", "json", "--prompts-per-task", "2",
                  "--max-tokens", "16", "--k-max", "2", "--threads", "1", "--json", str(out),
                  "--no-save", "--no-confirm", endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "is a file named already; measured once" in res.stderr
    assert len(json.loads(out.read_text())["candidates"]) == 1


def test_the_same_file_as_target_and_draft_is_said(hub, tmp_path):
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF:Q8_0", "--draft",
                  "acme/tiny-GGUF/tiny-Q8_0.gguf", "--no-save", endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "the draft is the target" in res.stderr


def test_models_drafts_offers_registered_drafts_that_are_not_on_this_machine(tiny_models,
                                                                             tmp_path):
    """Issue 79 item 14: on a machine holding none of them, the registered models whose
    recorded tokenizer (printed by `models fingerprint` from their files) the target shares,
    and that are smaller than it, are listed as "not on this machine"; a derived one by its
    parent's record, and only where the most it can weigh (its parent's size × the bits per
    weight of Q8_0 over Q4_0's: 8.5 / 4.5) is below the target's. Another tokenizer (one
    token swapped), a model as large as the target, and one whose file is on this machine
    in another store (LM Studio) are not. A tokenizer record that is not one, or one that
    hashes too few tokens, is one line, a non-zero exit or no offer."""
    from tiny_gguf import make_weights, write_model
    other = write_model(tmp_path / "other.gguf", make_weights(7), "tiny-other", swap_tokens=100)
    pins = {}
    for name, path in (("draft", tiny_models["draft"]), ("other", other)):
        res = cpuspec(tmp_path, "models", "fingerprint", str(path))
        assert res.returncode == 0 and res.stdout.startswith("tokenizer = {"), res.stderr
        pins[name] = res.stdout.strip()
    assert pins["draft"] != pins["other"]
    size = tiny_models["target"].stat().st_size
    entry = '[models.{0}]\nrepo = "acme/d-GGUF"\nfile = "{0}-Q4_0.gguf"\nsize_bytes = {1}\n{2}\n'
    derived = '[models.{0}-q8]\nrepo = "acme/d-GGUF"\nfile = "{0}-q8.gguf"\n' \
              'derive_from = "{0}"\nquant = "Q8_0"\n'
    registry = tmp_path / "models.toml"
    registry.write_text(
        entry.format("small", size // 2, pins["draft"]) + derived.format("small")
        + entry.format("half", size * 6 // 10, pins["draft"]) + derived.format("half")
        + entry.format("large", size, pins["draft"])
        + entry.format("foreign", size // 2, pins["other"])
        + entry.format("here", size // 2, pins["draft"])
        + '[pairs.p]\ntarget = "large"\ndraft = "small"\n')
    lms = tmp_path / "lms" / "models" / "acme" / "d-GGUF"
    lms.mkdir(parents=True)
    (lms / "here-Q4_0.gguf").write_bytes(tiny_models["draft"].read_bytes())
    env = {"HF_HUB_OFFLINE": "1", "CPUSPEC_MODELS": str(registry)}
    res = cpuspec(tmp_path, "models", "drafts", str(tiny_models["target"]), "--json",
                  extra=env)
    assert res.returncode == 0, res.stderr
    away = {r["name"]: r for r in json.loads(res.stdout) if not r["on_machine"]}
    # half-q8 may weigh up to 0.6 × 8.5 / 4.5 of the target: not offered; small-q8 (0.94×) is
    assert set(away) == {"small", "small-q8", "half"} and all(
        r["fits"] for r in away.values()), away
    assert away["small-q8"]["at_most"] == round(size // 2 * 8.5 / 4.5)
    res = cpuspec(tmp_path, "models", "drafts", str(tiny_models["target"]), extra=env)
    assert res.returncode == 0, res.stderr
    rows = [x for x in res.stdout.splitlines()[1:] if "  not on this machine" in x]
    assert [x.split()[0] for x in rows] == ["small", "half", "small-q8"], res.stdout
    assert "PyPI" not in rows[0] and "derived from small" in rows[2] and "≤" in rows[2]
    assert "3 more registered with cpuspec" in res.stdout.splitlines()[0], res.stdout
    good = registry.read_text()
    registry.write_text(good.replace("hashed = ", "hashes = ", 1))
    res = cpuspec(tmp_path, "models", "drafts", str(tiny_models["target"]), extra=env)
    assert res.returncode != 0 and "models.'small'.tokenizer" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr
    registry.write_text(re.sub(r"hashed = \d+", "hashed = 1", good, count=1))   # small's
    res = cpuspec(tmp_path, "models", "drafts", str(tiny_models["target"]), "--json",
                  extra=env)
    assert res.returncode == 0, res.stderr
    assert "small" not in {r["name"] for r in json.loads(res.stdout)}, res.stdout


def test_tunes_serve_lines_name_hub_models_as_llama_cpp_takes_them(hub, tmp_path):
    """Issue 79 item 15: tune records each measured candidate's models as bench does (the
    name llama.cpp's -hf takes, hf_ref), and its serve lines use it: `-hf`/`-hfd` and
    from_pretrained, not the files' paths. A tiny tune and bench on the local hub give the
    records; a recorded tune whose answer was measured faster gives the serve line, with the
    models of its measured answer as those records have them."""
    from cpuspec.report.tune import render_tune, render_tune_screen
    from cpuspec.results.schema import read_json
    out = tmp_path / "tune.json"
    res = cpuspec(tmp_path, "tune", "--targets", "acme/tiny-GGUF:Q8_0", "--drafts", "lookup",
                  "--tasks", "json", "--prompts-per-task", "2", "--max-tokens", "16",
                  "--k-max", "2", "--threads", "1", "--json", str(out), "--no-save",
                  "--no-confirm", endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(out.read_text())
    # every run tune made records it: the reference raw run always, a candidate's where tune
    # measured it (a lookup candidate predicted not to pay on a busy machine is skipped)
    runs = [m["results"] for m in doc["measured"]] + [r["results"] for r in doc["raw_runs"]]
    assert runs and all(r["models"]["target"]["hf_ref"] == "acme/tiny-GGUF:Q8_0"
                        for r in runs), runs
    # the same harness with a draft model (the tiny draft costs too much for tune to measure)
    bench = tmp_path / "bench.json"
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF:Q8_0", "--draft",
                  "acme/tiny-draft-GGUF:Q8_0", "--no-save", "--json", str(bench),
                  endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-2000:]
    models = json.loads(bench.read_text())["models"]
    assert models["draft"]["hf_ref"] == "acme/tiny-draft-GGUF:Q8_0"
    doc = read_json(ROOT / "bench/results/epyc-family25-model17/"
                    "tune_json_code_budget12.json.gz")
    served = doc["recommendations"]["json"]["best_sd"]["candidate"]
    for m in doc["measured"]:
        if m["candidate"] == served:
            m["results"]["models"] = models
    screen = render_tune_screen(doc).replace(" \\\n  ", " ")   # a command's wrapped lines
    assert "-hf acme/tiny-GGUF:Q8_0" in screen and "-hfd acme/tiny-draft-GGUF:Q8_0" in screen
    assert "from-cc324af070c2" not in screen.split("Next: serve it")[1], screen
    details = render_tune(doc)
    assert "-hf acme/tiny-GGUF:Q8_0" in details, details
    assert "hf_hub_download" in details or "from_pretrained" in details


def test_lm_studio_models_are_listed_by_the_name_that_takes_them(hub, tiny_models, tmp_path):
    """Issue 79 item 15: an LM Studio model is listed as PUBLISHER/REPO/FILE, the name that
    --draft takes it by (from LM Studio's folder, offline, and online where the hub has no
    such repo), not by its path; one in a folder whose names no hub repo could have keeps
    its path."""
    lms = tmp_path / "lms" / "models"
    (lms / "acme" / "tiny-draft-GGUF").mkdir(parents=True)
    (lms / "acme" / "tiny-draft-GGUF" / "tiny-draft-Q4_0.gguf").write_bytes(
        tiny_models["draft"].read_bytes())
    (lms / "My Models" / "odd one").mkdir(parents=True)
    (lms / "My Models" / "odd one" / "odd-Q4_0.gguf").write_bytes(
        tiny_models["draft"].read_bytes())
    res = cpuspec(tmp_path, "models", "list", "--local", "--json",
                  extra={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr
    names = {r["name"] for r in json.loads(res.stdout) if r["store"] == "LM Studio"}
    assert names == {"acme/tiny-draft-GGUF/tiny-draft-Q4_0.gguf",
                     str(lms / "My Models" / "odd one" / "odd-Q4_0.gguf")}, names
    res = cpuspec(tmp_path, "models", "drafts", str(tiny_models["target"]),
                  extra={"HF_HUB_OFFLINE": "1"})
    assert "acme/tiny-draft-GGUF/tiny-draft-Q4_0.gguf" in res.stdout, res.stdout
    out = tmp_path / "run.json"
    res = cpuspec(tmp_path, *BENCH, "--target", str(tiny_models["target"]), "--draft",
                  "acme/tiny-draft-GGUF/tiny-draft-Q4_0.gguf", "--json", str(out), "--no-save",
                  extra={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    draft = json.loads(out.read_text())["models"]["draft"]
    assert draft["store"] == "LM Studio" and draft["path"] == str(
        lms / "acme" / "tiny-draft-GGUF" / "tiny-draft-Q4_0.gguf")
    own = lms / "me" / "my-draft-GGUF"   # a folder of one's own: no such repo on the hub
    own.mkdir(parents=True)
    (own / "mine-Q4_0.gguf").write_bytes(tiny_models["draft"].read_bytes())
    res = cpuspec(tmp_path, *BENCH, "--target", str(tiny_models["target"]), "--draft",
                  "me/my-draft-GGUF/mine-Q4_0.gguf", "--json", str(out), "--no-save",
                  endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-3000:]
    draft = json.loads(out.read_text())["models"]["draft"]
    assert draft["store"] == "LM Studio" and draft["path"] == str(own / "mine-Q4_0.gguf")
    assert draft["verified"] is False


def test_a_xet_backed_file_is_fetched_through_hf_xet_and_a_dead_cas_is_one_line(
        hub, tmp_path):
    """Issue 79 item 15: the Hub serves most GGUFs from Xet storage. The local hub serves a
    repo as a Xet-backed one (X-Xet-Hash, a read token naming its CAS), its bytes in a CAS
    that hf_xet itself wrote (local://): bench fetches the file through hf_xet (no GET of its
    bytes from the hub) and verifies it. Where the CAS is dead: one line, exit 2, no file
    kept (hf_xet's retries cut to one by its own setting)."""
    pytest.importorskip("hf_xet")   # huggingface-hub installs it where it has a wheel
    hub.add_xet("acme/tiny-draft-GGUF", tmp_path / "cas")
    out = tmp_path / "run.json"
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF:Q8_0", "--draft",
                  "acme/tiny-draft-GGUF:Q8_0", "--json", str(out), "--no-save",
                  endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-3000:]
    draft = json.loads(out.read_text())["models"]["draft"]
    assert draft["verified"] and draft["hf_ref"] == "acme/tiny-draft-GGUF:Q8_0", draft
    assert any("xet-read-token" in path for _, path, _ in hub.log)
    assert not [p for c, p, _ in hub.log if c == "GET" and "/acme/tiny-draft-GGUF/resolve/" in p]
    hub.xet_cas = "http://127.0.0.1:9"
    hub.add_xet("acme/split-GGUF")
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/split-GGUF:Q4_K_M", "--no-save",
                  endpoint=hub.endpoint, extra={"HF_XET_CLIENT_RETRY_MAX_ATTEMPTS": "1"},
                  timeout=120)
    assert res.returncode == 2, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert "Traceback" not in res.stderr and "acme/split-GGUF" in last, res.stderr
    kept = [f for f in (tmp_path / "hf" / "hub" / "models--acme--split-GGUF").rglob("*")
            if f.is_file() and "blobs" in f.parts]
    assert not kept, kept


def test_a_file_that_is_not_the_hubs_is_removed_only_inside_the_cache(hub, tiny_models,
                                                                       tmp_path):
    """The red team's: hub.download removes a file whose sha256 is not the listing's, its
    snapshot link and the blob it points at. A link planted in the cache that points outside
    it (here at a file of the user's) loses the link only; the file it pointed at stays."""
    args = [*BENCH, "--target", "acme/tiny-GGUF:Q8_0", "--drafter", "lookup", "--no-save"]
    assert cpuspec(tmp_path, *args, endpoint=hub.endpoint).returncode == 0
    link = next((tmp_path / "hf" / "hub" / "models--acme--tiny-GGUF" / "snapshots")
                .glob("*/tiny-Q8_0.gguf"))
    mine = tmp_path / "mine.gguf"
    mine.write_bytes(tiny_models["draft"].read_bytes())
    link.unlink()
    link.symlink_to(mine)
    code = ("import sys; from cpuspec.inputs.refs.hub import download\n"
            "try:\n    download('acme/tiny-GGUF', None, 'tiny-Q8_0.gguf', "
            "{'sha256': '0' * 64}, print)\nexcept Exception as e:\n    print(e)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env={
                             **os.environ, "HF_ENDPOINT": hub.endpoint,
                             "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"})
    assert "is not the hub's" in res.stdout, res.stdout + res.stderr
    assert not link.is_symlink() and mine.is_file()


def test_the_memory_of_hashed_files_keeps_only_files_that_are_there(tiny_models, tmp_path,
                                                                    cpuspec_home):
    """The red team's: known_files.json grew by every file ever hashed, and one nested past
    Python's depth was a RecursionError. A gone file's entry is dropped at the next
    remember; a file that cannot be read as JSON is an empty memory (hashed again)."""
    from cpuspec.inputs.refs.hashes import file_sha256, recall
    gone, kept = tmp_path / "gone.gguf", tmp_path / "kept.gguf"
    for f in (gone, kept):
        f.write_bytes(tiny_models["draft"].read_bytes())
        file_sha256(f)
    gone.unlink()
    other = tmp_path / "other.gguf"
    other.write_bytes(tiny_models["target"].read_bytes())
    file_sha256(other)
    known = json.loads((cpuspec_home / "known_files.json").read_text())
    assert set(known) == {str(kept.resolve()), str(other.resolve())}, known
    (cpuspec_home / "known_files.json").write_text("[" * 100_000)
    assert recall(kept) is None
    assert file_sha256(kept) == hashlib.sha256(kept.read_bytes()).hexdigest()


def test_a_hub_target_not_on_this_machine_is_offered_registered_drafts(hub, tiny_models,
                                                                       tmp_path):
    """A target read from the hub (its header only, no file here) is offered the registered
    drafts that share its recorded tokenizer, as a file target is (a target with no path once
    made every unpinned registered model look present)."""
    res = cpuspec(tmp_path, "models", "fingerprint", str(tiny_models["draft"]))
    assert res.returncode == 0, res.stderr
    size = tiny_models["target"].stat().st_size
    registry = tmp_path / "models.toml"
    registry.write_text(f'[models.small]\nrepo = "acme/d-GGUF"\nfile = "small-Q4_0.gguf"\n'
                        f'size_bytes = {size // 2}\n{res.stdout.strip()}\n'
                        '[pairs.p]\ntarget = "small"\ndraft = "small"\n')
    res = cpuspec(tmp_path, "models", "drafts", "acme/tiny-GGUF:Q4_K_M", "--json",
                  endpoint=hub.endpoint, extra={"CPUSPEC_MODELS": str(registry)})
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["name"] for r in rows if not r["on_machine"]] == ["small"], rows
