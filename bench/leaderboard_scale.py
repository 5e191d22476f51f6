"""Issue 52 / 57 item 5: the leaderboard over 100 000 distinct rows, timed (a benchmark, not a
test). The rows are drawn around the shipped dataset's: each copy gets its own row and run ids,
one of 500 machine fingerprints with its own CPU name, and its speeds scaled by a random factor
(so the columns hold distinct values, as real submissions would, and compress as such). They
are written as 20 zstd files through `publish`'s own writer, then `cpuspec leaderboard DIR` runs
as a user runs it: a new process, the CLI path, the page cache dropped first where this user may
(root on Linux), best of 3 and the first (cold) run both printed.
Usage: python bench/leaderboard_scale.py [ROWS]"""
import hashlib
import os
import random
import subprocess
import sys
import tempfile
import time

from cpuspec.analysis.dataset import COLUMNS, DATASET_SCHEMA
from cpuspec.cli.dataset import shipped_source
from cpuspec.results.parquet import publish, read_source

SPEEDS = ("raw_tok_s", "sd_tok_s", "sd_speedup", "sd_ci_low", "sd_ci_high", "decode_tok_s")


def rows_like_the_shipped(n_rows: int) -> list[dict]:
    base = read_source(shipped_source(), COLUMNS, DATASET_SCHEMA).table.to_pylist()
    rng = random.Random(0)
    out = []
    for i in range(n_rows):
        r = dict(base[i % len(base)])
        copy = i // len(base)
        m = copy % 500
        r["row_id"] = hashlib.sha256(f"row-{i}".encode()).hexdigest()[:20]
        r["run_id"] = hashlib.sha256(f"run-{copy}-{r['run_id']}".encode()).hexdigest()[:20]
        r["machine_fingerprint"] = hashlib.sha256(f"m{m}".encode()).hexdigest()[:16]
        r["cpu_name"] = f"{r['cpu_name']} #{m}"
        scale = rng.uniform(0.5, 2.0)
        for k in SPEEDS:
            if r.get(k) is not None:
                r[k] *= scale if k.endswith("tok_s") else rng.uniform(0.95, 1.05)
        out.append(r)
    return out


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def main(n_rows: int = 100_000) -> None:
    rows = rows_like_the_shipped(n_rows)
    with tempfile.TemporaryDirectory() as tmp:
        for j in range(20):
            publish(rows[j * n_rows // 20:(j + 1) * n_rows // 20], COLUMNS, DATASET_SCHEMA, tmp)
        size = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp))
        env = {**os.environ, "CPUSPEC_HOME": os.path.join(tmp, "home")}   # no saved run added
        times, cold = [], None
        for i in range(3):
            dropped = drop_caches() if i == 0 else False
            t0 = time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "cpuspec", "leaderboard", tmp],
                                 capture_output=True, text=True, env=env)
            times.append(time.perf_counter() - t0)
            if res.returncode != 0:
                raise SystemExit(res.stdout + res.stderr)
            if i == 0:
                cold = dropped
        print(f"{n_rows} distinct rows in 20 zstd files ({size / 1e6:.1f} MB); `cpuspec "
              f"leaderboard DIR`, a new process each: first run {times[0]:.2f} s "
              f"({'page cache dropped' if cold else 'page cache not dropped'}), best of 3 "
              f"{min(times):.2f} s; its first line: {res.stdout.splitlines()[0][:60]}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
