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
        n = _one_row_per_id(con, table.column_names)
        if n:
            notes.append(f"{n} row id{'s' if n > 1 else ''} published with different "
                         "contents: every version kept, none trusted over another")
    return con.table("d").to_arrow_table(), notes


def _same_row(a: dict, b: dict) -> bool:
    """Two rows of one id that agree wherever both have a value (an older schema's row has
    nulls where a newer one records more; floats to 1e-3, what two cpuspec versions' t
    quantiles may differ by)."""
    for c, x in a.items():
        y = b.get(c)
        if x is None or y is None or x == y:
            continue
        if isinstance(x, float) and isinstance(y, float) and \
                abs(x - y) <= 1e-3 * max(abs(x), abs(y)):
            continue
        return False
    return True


def _one_row_per_id(con, names: list[str]) -> int:
    """Rows of one id that agree (_same_row) are one row, the one with the most values kept;
    ids whose rows disagree keep them all: their count is returned."""
    con.execute("CREATE OR REPLACE TABLE d AS SELECT *, row_number() OVER () AS cpuspec_i "
                "FROM d")
    dup = con.execute("SELECT * FROM d WHERE row_id IN (SELECT row_id FROM d WHERE row_id IS "
                      "NOT NULL GROUP BY row_id HAVING count(*) > 1) ORDER BY row_id, "
                      "cpuspec_i").fetchall()
    groups: dict[str, list[dict]] = {}
    for r in dup:
        row = dict(zip([*names, "cpuspec_i"], r))
        groups.setdefault(row["row_id"], []).append(row)
    drop, conflicts = [], 0
    for rows in groups.values():
        body = [{c: v for c, v in r.items() if c != "cpuspec_i"} for r in rows]
        if all(_same_row(a, b) for i, a in enumerate(body) for b in body[i + 1:]):
            best = max(rows, key=lambda r: sum(v is not None for v in r.values()))
            drop += [r["cpuspec_i"] for r in rows if r is not best]
        else:
            conflicts += 1
    if drop:
        con.execute(f"DELETE FROM d WHERE cpuspec_i IN ({', '.join(map(str, drop))})")
    con.execute("ALTER TABLE d DROP COLUMN cpuspec_i")
    return conflicts


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
    for setting in (f"memory_limit = '{QUERY_MEMORY}'", "temp_directory = ''",
                    "enable_external_access = false", "autoinstall_known_extensions = false",
                    "autoload_known_extensions = false", "lock_configuration = true"):
        con.execute(f"SET {setting}")
    return con


# A query is the user's: it may ask for 10^14 rows. At most this many are read back, DuckDB
# holds at most QUERY_MEMORY, and Ctrl-C interrupts it (it runs off the main thread).
MAX_QUERY_ROWS = 100_000
QUERY_MEMORY = "1GB"


class QueryTooLarge(ValueError):
    """A query's result passed MAX_QUERY_ROWS rows."""


def query(table, sql: str, max_rows: int = MAX_QUERY_ROWS) -> tuple[list[str], list[tuple]]:
    """Any SQL over the rows (named `rows`), on a locked database: column names and rows (at
    most max_rows: QueryTooLarge past that). Ctrl-C interrupts DuckDB and raises
    KeyboardInterrupt; DuckDB's own errors (out of memory included) are raised as they are."""
    import threading
    con = locked(table)
    out: dict = {}

    def work() -> None:
        try:
            res = con.execute(sql)
            out["cols"] = [d[0] for d in res.description] if res.description else []
            out["rows"] = res.fetchmany(max_rows + 1) if res.description else []
        except Exception as exc:   # handed to the caller's thread
            out["error"] = exc
    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        con.interrupt()
        worker.join(5)
        raise
    if "error" in out:
        raise out["error"]
    if len(out["rows"]) > max_rows:
        raise QueryTooLarge(f"the query returns more than {max_rows:,} rows: add a LIMIT, or "
                            "aggregate (count, avg, GROUP BY)")
    return out["cols"], out["rows"]


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
