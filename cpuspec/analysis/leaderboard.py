"""The leaderboard: DuckDB queries over the dataset's rows (an Arrow table, analysis/dataset.py's
columns), one row per machine fingerprint: the CPU, the default pair's raw speed, the best SD
configuration measured faster there (an interval above 1), the least acceptance at which SD
pays for a 7B target where a what-if was run, and the bandwidth. `--where` filters the rows
before they are grouped; `--sql` runs any query over them (the table is named `rows`)."""
from __future__ import annotations

# the columns the leaderboard reads (a source is read for these alone)
NEEDED = ["kind", "machine_fingerprint", "cpu_name", "cpu_family", "cpu_model", "isa",
          "threads", "bandwidth_gbps", "target_sha256", "target_quant", "draft_quant", "task",
          "k", "drafter", "raw_tok_s", "sd_speedup", "sd_ci_low", "sd_ci_high", "verdict",
          "target_label", "month", *[f"break_even_p_k{k}" for k in range(1, 9)]]
# the default pair's target (models.toml: qwen2.5-coder-1.5b-q4km): its raw t/s is the yardstick
DEFAULT_TARGET_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
WHATIF_TASK = "what-if qwen2.5-7b"

BOARD_SQL = f"""
WITH r AS (SELECT * FROM rows {{where}}),
m AS (
  SELECT machine_fingerprint AS fp, any_value(cpu_name) AS cpu,
         any_value(cpu_family) AS family, any_value(cpu_model) AS model,
         any_value(isa) AS isa, max(threads) AS threads, max(bandwidth_gbps) AS bw,
         count(DISTINCT month) AS months
  FROM r GROUP BY 1),
raw AS (
  SELECT machine_fingerprint AS fp, median(raw_tok_s) AS raw
  FROM r WHERE kind = 'bench' AND task = 'overall' AND target_sha256 = '{DEFAULT_TARGET_SHA256}'
  GROUP BY 1),
best AS (
  SELECT machine_fingerprint AS fp,
         arg_max(task || ': ' || coalesce(target_quant, '?') || ' + ' ||
                 coalesce(draft_quant, drafter, '?') || ', k ' || k, sd_speedup) AS config,
         max(sd_speedup) AS sd, arg_max(sd_ci_low, sd_speedup) AS lo,
         arg_max(sd_ci_high, sd_speedup) AS hi
  FROM r WHERE kind = 'bench' AND task <> 'overall' AND verdict = 'faster' GROUP BY 1),
w AS (
  SELECT machine_fingerprint AS fp,
         min(least({', '.join(f'coalesce(break_even_p_k{k}, 2)' for k in range(1, 9))})) AS p7
  FROM r WHERE kind = 'whatif' AND task = '{WHATIF_TASK}' AND target_quant = 'Q4_K_M'
  GROUP BY 1)
SELECT m.*, raw.raw, best.config, best.sd, best.lo, best.hi,
       CASE WHEN w.p7 > 1 THEN NULL ELSE w.p7 END AS p7
FROM m LEFT JOIN raw USING (fp) LEFT JOIN best USING (fp) LEFT JOIN w USING (fp)
ORDER BY best.sd DESC NULLS LAST, raw.raw DESC NULLS LAST
"""


def _duck():
    try:
        import duckdb
    except ImportError:
        from cpuspec.results.parquet import EXTRA_HINT, DatasetError
        raise DatasetError(EXTRA_HINT) from None
    return duckdb


def query(table, sql: str) -> tuple[list[str], list[tuple]]:
    """Any SQL over the rows (named `rows`): column names and result rows."""
    con = _duck().connect()
    con.register("rows", table)
    res = con.execute(sql)
    return [d[0] for d in res.description], res.fetchall()


def board(table, where: str | None = None) -> list[dict]:
    """One dict per machine fingerprint (BOARD_SQL), best SD first."""
    cols, rows = query(table, BOARD_SQL.format(where=f"WHERE {where}" if where else ""))
    return [dict(zip(cols, r)) for r in rows]
