"""Issue 52: the leaderboard over 100 000 rows, timed (a benchmark, not a test). The rows are
the shipped dataset's, repeated with 500 machine fingerprints and written as 20 Parquet files;
the leaderboard then reads only the columns it needs and groups them with DuckDB. Prints the
time of the read and of the query, best of 3.
Usage: python bench/leaderboard_scale.py [ROWS]"""
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cpuspec.analysis.dataset import COLUMNS, DATASET_SCHEMA
from cpuspec.analysis.leaderboard import NEEDED, board
from cpuspec.cli.dataset import shipped_source
from cpuspec.results.parquet import arrow_schema, read_source


def main(n_rows: int = 100_000) -> None:
    base = read_source(shipped_source(), COLUMNS, DATASET_SCHEMA).table
    reps = n_rows // base.num_rows + 1
    with tempfile.TemporaryDirectory() as tmp:
        parts, made = [], 0
        for i in range(reps):
            fp = pa.array([f"machine-{i % 500:03d}"] * base.num_rows)
            parts.append(base.set_column(base.schema.get_field_index("machine_fingerprint"),
                                         "machine_fingerprint", fp))
            made += base.num_rows
        table = pa.concat_tables(parts).slice(0, n_rows)
        table = table.replace_schema_metadata(arrow_schema(COLUMNS, DATASET_SCHEMA).metadata)
        for j in range(20):
            pq.write_table(table.slice(j * n_rows // 20, n_rows // 20),
                           f"{tmp}/part-{j:02d}.parquet")
        best_read = best_query = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            loaded = read_source(tmp, COLUMNS, DATASET_SCHEMA, wanted=NEEDED)
            t1 = time.perf_counter()
            machines = board(loaded.table)
            t2 = time.perf_counter()
            best_read, best_query = min(best_read, t1 - t0), min(best_query, t2 - t1)
        print(f"{loaded.table.num_rows} rows in 20 files, {len(NEEDED)} of {len(COLUMNS)} "
              f"columns read: read {best_read:.2f} s, query {best_query:.2f} s, "
              f"{len(machines)} machines (best of 3)")
        assert pc.sum(pc.is_valid(loaded.table.column("machine_fingerprint"))).as_py() > 0


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
