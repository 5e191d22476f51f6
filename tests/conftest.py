import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tiny_gguf import make_weights, make_wide_weights, perturb, write_model  # noqa: E402

# The real-model tests keep the fetched Qwen GGUFs in the user's cpuspec cache (or
# CPUSPEC_HOME as set before the tests), so a second run does not download 1.6 GB again; every
# file is checked against its sha256 pin before use, so reuse is safe.
REAL_MODELS_HOME = os.environ.get("CPUSPEC_HOME") or str(Path.home() / ".cache" / "cpuspec")
TARGET_SEED = 1
DRAFT_NOISE = 0.1  # the draft agrees often, not always: zero, partial and full rounds all occur


RECORDED_SYSTEM_INFO = Path(__file__).parent / "recorded" / "system_info"


def pytest_addoption(parser):
    parser.addoption(
        "--system-info", choices=sorted(p.stem for p in RECORDED_SYSTEM_INFO.glob("*.txt")),
        help="run the suite as if this machine's llama.cpp build printed a recorded system "
             "info (avx2: an AVX2-only CPU, amx: a build with AMX_INT8): a test that reads "
             "this machine's build must hold on every CPU")


@pytest.fixture(autouse=True, scope="session")
def recorded_system_info(request):
    name = request.config.getoption("--system-info")
    if not name:
        yield None
        return
    info = (RECORDED_SYSTEM_INFO / f"{name}.txt").read_text().strip()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("cpuspec.llama.engine.system_info", lambda: info)
        yield info


def pytest_configure(config):
    """On a CPU with AMX, before any test loads llama.cpp: the installed build must survive a
    batched decode, as `cpuspec bench` makes sure (a child-process probe; where it dies, one
    rebuild with cpuspec's patch). Elsewhere this reads /proc/cpuinfo and returns."""
    from cpuspec.llama import build, native
    try:
        state = build.check_build(lambda m: print(m, file=sys.stderr), native.sdist_dir)
    except (build.BuildCrash, build.BuildError, native.NativeError) as exc:
        pytest.exit(str(exc).splitlines()[0], returncode=2)
    if state == "rebuilt" and "llama_cpp" in sys.modules:   # the old library is loaded here
        os.execv(sys.executable, [sys.executable, "-m", "pytest",
                                  *config.invocation_params.args])


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Paths of tiny GGUF models: target, a noisy draft, an exact copy, another family."""
    d = tmp_path_factory.mktemp("tiny")
    w = make_weights(TARGET_SEED)
    return {"target": write_model(d / "target.gguf", w, "tiny-target"),
            "draft": write_model(d / "draft.gguf", perturb(w, 2, DRAFT_NOISE), "tiny-draft"),
            "same": write_model(d / "same.gguf", w, "tiny-same")}


@pytest.fixture(scope="session")
def heavy_draft(tmp_path_factory):
    """A draft of the tiny target's vocabulary that costs several target decodes (8 layers
    with a feed-forward 16× as wide against the target's 2): its cost probe shows that no k
    can pay, whatever the machine's noise."""
    return write_model(tmp_path_factory.mktemp("heavy") / "heavy.gguf",
                       make_wide_weights(2, 2048, 8), "tiny-heavy-draft")


@pytest.fixture(autouse=True, scope="session")
def session_home(tmp_path_factory):
    """Before any test (and the module fixtures that run models before a test's own home is
    set): a cpuspec home of the session's, so nothing a fixture does (a file's hash
    remembered) reaches ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CPUSPEC_HOME", str(tmp_path_factory.mktemp("session-home")))
        yield


@pytest.fixture(autouse=True)
def cpuspec_home(tmp_path, monkeypatch):
    """Every test gets its own cpuspec cache, so nothing leaks between tests or into ~/.cache."""
    monkeypatch.setenv("CPUSPEC_HOME", str(tmp_path / "cpuspec-home"))
    return tmp_path / "cpuspec-home"
