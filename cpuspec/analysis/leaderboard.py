"""The leaderboard: DuckDB queries over the dataset's rows (an Arrow table, analysis/dataset.py's
columns), each row counted once (by row_id), one board row per (machine fingerprint, threads):
the CPU, the default pair's raw speed at depth 0, the best SD configuration measured faster
there (an interval above 1) and how many were, the least acceptance at which SD pays for a 7B
target where a what-if was run, and the bandwidth. `--where` filters the rows before they are
grouped; `--sql` runs any query over them (the table is named `rows`).

The user's text never reaches the machine: the rows are loaded into an in-memory database
first, then external access (files, URLs, extensions) is switched off and the configuration
locked, and only then does a query run; `--where` is parsed as one expression (a relation's
filter), never pasted into SQL."""
from __future__ import annotations

# the columns the leaderboard reads (a source is read for these alone)
NEEDED = ["row_id", "depth", "kind", "machine_fingerprint", "cpu_name", "cpu_family", "cpu_model", "isa",
          "threads", "bandwidth_gbps", "target_sha256", "target_quant", "draft_quant", "task",
          "k", "drafter", "raw_tok_s", "sd_speedup", "sd_ci_low", "sd_ci_high", "verdict",
          "target_label", "month", "ci_level",
          *[f"break_even_p_k{k}" for k in range(1, 9)]]


def default_target_sha256() -> str:
    """The default pair's target (models.toml's default pair): its raw t/s is the yardstick."""
    from cpuspec.inputs.registry import load_registry
    reg = load_registry()
    return reg.models[reg.pairs[reg.default_pair].target].sha256


WHATIF_TASK = "what-if qwen2.5-7b"

BOARD_SQL = """
WITH m AS (
  SELECT machine_fingerprint AS fp, threads, any_value(cpu_name) AS cpu,
         any_value(cpu_family) AS family, any_value(cpu_model) AS model,
         any_value(isa) AS isa, max(bandwidth_gbps) AS bw, count(DISTINCT month) AS months
  FROM r GROUP BY 1, 2),
raw AS (
  SELECT machine_fingerprint AS fp, threads, median(raw_tok_s) AS raw
  FROM r WHERE kind = 'bench' AND task = 'overall' AND target_sha256 = $default_target
       AND coalesce(depth, 0) = 0
  GROUP BY 1, 2),
best AS (
  SELECT machine_fingerprint AS fp, threads,
         arg_max(task || ': ' || coalesce(target_quant, '?') || '+' ||
                 coalesce(draft_quant, drafter, '?') || ' k' || k, sd_speedup) AS config,
         max(sd_speedup) AS sd, arg_max(sd_ci_low, sd_speedup) AS lo,
         arg_max(sd_ci_high, sd_speedup) AS hi, arg_max_null(ci_level, sd_speedup) AS level,
         count(*) AS n_faster
  FROM r WHERE kind = 'bench' AND task <> 'overall' AND verdict = 'faster' GROUP BY 1, 2),
w AS (
  SELECT machine_fingerprint AS fp, threads,
         min(least(COALESCES)) AS p7
  FROM r WHERE kind = 'whatif' AND task = $whatif_task AND target_quant = 'Q4_K_M'
  GROUP BY 1, 2)
SELECT m.*, raw.raw, best.config, best.sd, best.lo, best.hi, best.level, best.n_faster,
       CASE WHEN w.p7 > 1 THEN NULL ELSE w.p7 END AS p7
FROM m LEFT JOIN raw USING (fp, threads) LEFT JOIN best USING (fp, threads)
     LEFT JOIN w USING (fp, threads)
ORDER BY best.sd DESC NULLS LAST, raw.raw DESC NULLS LAST
""".replace("COALESCES", ", ".join(f"coalesce(break_even_p_k{k}, 2)" for k in range(1, 9)))


def _duck():
    try:
        import duckdb
    except ImportError:
        from cpuspec.results.parquet import EXTRA_HINT, DatasetError
        raise DatasetError(EXTRA_HINT) from None
    return duckdb


# Rows whose values cannot be (a damaged or hostile file): passed over on read, counted by
# reason. NULL is not a reason (a column that does not apply); each test names its columns.
IMPOSSIBLE = [
    (("sd_speedup",), "isnan(sd_speedup) OR isinf(sd_speedup) OR sd_speedup <= 0",
     "a speedup that is not a positive number"),
    (("raw_tok_s",), "isnan(raw_tok_s) OR isinf(raw_tok_s) OR raw_tok_s <= 0",
     "a raw speed that is not a positive number"),
    (("sd_ci_low", "sd_ci_high"), "isnan(sd_ci_low) OR isnan(sd_ci_high) OR sd_ci_low <= 0 "
     "OR sd_ci_low > sd_ci_high", "an interval whose ends are not in order"),
    (("sd_ci_low", "sd_ci_high", "sd_speedup"), "sd_speedup < sd_ci_low * 0.999 OR "
     "sd_speedup > sd_ci_high * 1.001", "a speedup outside its own interval"),
    (("verdict", "sd_ci_low", "sd_ci_high"), "(verdict = 'faster' AND NOT coalesce("
     "sd_ci_low > 1, false)) OR (verdict = 'slower' AND NOT coalesce(sd_ci_high < 1, false))",
     "a verdict its interval does not support"),
    (("threads",), "threads <= 0", "threads ≤ 0"),
    (("ci_level",), "isnan(ci_level) OR ci_level <= 0 OR ci_level >= 1",
     "an interval level outside (0, 1)"),
]


def screen_rows(table):
    """The rows as read, less exact duplicates (a run exported or published twice) and rows
    whose values cannot be (IMPOSSIBLE), with a line for each kind passed over; a row id that
    names rows of different contents is kept every time and said (anyone can publish a row
    under another's id: keeping the first would let them hide it)."""
    con = _duck().connect(":memory:")
    con.register("loaded_rows", table)
    con.execute("CREATE TABLE d AS SELECT DISTINCT * FROM loaded_rows")
    cols = set(table.column_names)
    tests = [(sql, why) for need, sql, why in IMPOSSIBLE if set(need) <= cols]
    notes = []
    if tests:
        flags = ", ".join(f"coalesce({sql}, false) AS bad{i}" for i, (sql, _) in
                          enumerate(tests))
        con.execute(f"CREATE TABLE f AS SELECT *, {flags} FROM d")
        counts = con.execute("SELECT " + ", ".join(f"count(*) FILTER (WHERE bad{i})" for i in
                                                   range(len(tests))) + " FROM f").fetchall()[0]
        keep = " AND ".join(f"NOT bad{i}" for i in range(len(tests)))
        names = ", ".join(f'"{c}"' for c in table.column_names)
        con.execute(f"CREATE OR REPLACE TABLE d AS SELECT {names} FROM f WHERE {keep}")
        notes += [f"{n} row{'s' if n > 1 else ''} with {why}" for n, (_, why) in
                  zip(counts, tests) if n]
    if "row_id" in cols:
        n = con.execute("SELECT count(*) FROM (SELECT row_id FROM d WHERE row_id IS NOT NULL "
                        "GROUP BY row_id HAVING count(*) > 1)").fetchall()[0][0]
        if n:
            notes.append(f"{n} row id{'s' if n > 1 else ''} published with different "
                         "contents: every version kept, none trusted over another")
    return con.table("d").to_arrow_table(), notes


def locked(table):
    """An in-memory DuckDB holding `table` as `rows`, each row_id once (a run published twice,
    exported twice or also the user's own latest run is one set of rows), with external
    access off and the configuration locked: no query run on it can read or write a file,
    reach a URL or load an extension."""
    con = _duck().connect(":memory:")
    con.register("loaded_rows", table)
    # a row read twice (the same file published and exported, or the user's own latest run
    # also in the source) is one row
    con.execute("CREATE TABLE rows AS SELECT DISTINCT * FROM loaded_rows")
    con.unregister("loaded_rows")
    for setting in ("temp_directory = ''", "enable_external_access = false", "autoinstall_known_extensions = false",
                    "autoload_known_extensions = false", "lock_configuration = true"):
        con.execute(f"SET {setting}")
    return con


def query(table, sql: str) -> tuple[list[str], list[tuple]]:
    """Any SQL over the rows (named `rows`), on a locked database: column names and rows."""
    res = locked(table).execute(sql)
    if res.description is None:
        return [], []
    return [d[0] for d in res.description], res.fetchall()


def board(table, where: str | None = None) -> list[dict]:
    """One dict per (machine fingerprint, threads) (BOARD_SQL), best SD first. `where` is one
    SQL expression, applied as a filter on the rows (parsed as an expression, not pasted)."""
    con = locked(table)
    rel = con.table("rows")
    (rel.filter(where) if where else rel).create_view("r")
    res = con.execute(BOARD_SQL, {"default_target": default_target_sha256(),
                                  "whatif_task": WHATIF_TASK})
    cols = [d[0] for d in res.description]
    return [dict(zip(cols, r)) for r in res.fetchall()]
