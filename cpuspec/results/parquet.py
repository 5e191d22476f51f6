"""The dataset on disk and remote: Parquet files written with pyarrow (one file per submission,
named by its content, so the same runs twice are one file and nobody's rows are rewritten),
read back from a folder or any fsspec URL (memory://, hf://datasets/OWNER/NAME through
huggingface-hub, s3:// where s3fs is installed). Reading keeps every good file and says what it
passed over: a foreign Parquet file, a newer schema, a damaged file. pyarrow and DuckDB are the
optional extra `cpuspec[dataset]`."""
from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field

SCHEMA_KEY = b"cpuspec.dataset_schema"
EXTRA_HINT = "the dataset commands need pyarrow and duckdb: pip install 'cpuspec[dataset]'"
ARROW = {"int": "int64", "float": "float64", "str": "string"}


class DatasetError(RuntimeError):
    """A destination or source that cannot be used, or the extra is missing."""


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError(EXTRA_HINT) from None
    return pa, pq


def arrow_schema(columns: list[tuple[str, str]], version: int):
    pa, _ = _pa()
    return pa.schema([(n, getattr(pa, ARROW[t])()) for n, t in columns],
                     metadata={SCHEMA_KEY: str(version).encode()})


def to_parquet_bytes(rows: list[dict], columns: list[tuple[str, str]], version: int) -> bytes:
    pa, pq = _pa()
    table = pa.Table.from_pylist(rows, schema=arrow_schema(columns, version))
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def submission_name(data: bytes) -> str:
    """A content address of the file's bytes: the same rows written the same way are one
    name; a corrected re-export (other bytes) is a new file beside the old, never a silent
    replacement, and a damaged upload can be published again under its true name."""
    return f"cpuspec-{hashlib.sha256(data).hexdigest()[:24]}.parquet"


def unique_rows(rows: list[dict]) -> list[dict]:
    """Each row_id once, first kept (`export A A`, or a run given twice, is one set of rows)."""
    seen: set = set()
    out = []
    for r in rows:
        if r["row_id"] not in seen:
            seen.add(r["row_id"])
            out.append(r)
    return out


def _fs(dest: str):
    try:
        import fsspec
    except ImportError:
        raise DatasetError("fsspec is needed for URLs: pip install fsspec") from None
    if dest.startswith("hf://"):
        _hf_parts(dest)                        # hf://datasets//x: one line, not a traceback
    try:
        fs, path = fsspec.core.url_to_fs(dest)
    except ImportError as exc:
        raise DatasetError(f"cannot open {dest}: {exc} (its filesystem is not installed)") \
            from None
    except Exception as exc:   # a bad URL, a refused connection (ftp://host:1), no such host
        raise DatasetError(f"cannot open {dest}: {_first_line(exc)}") from None
    return fs, path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def existing_name(rows: list[dict], columns: list[tuple[str, str]], version: int,
                  dest: str) -> str | None:
    """The address under `dest` that already holds exactly these rows' file, or None (also
    where `dest` cannot be looked at without sending anything, such as hf://)."""
    if dest.startswith("hf://"):
        return None
    fs, root = _fs(dest)
    target = f"{root.rstrip('/')}/{submission_name(to_parquet_bytes(rows, columns, version))}"
    try:
        return target if fs.exists(target) else None
    except Exception:
        return None


def publish(rows: list[dict], columns: list[tuple[str, str]], version: int, dest: str) -> tuple[str, bool]:
    """Write `rows` as one file under `dest` (folder or URL); (its address, whether it was new).
    The file is written whole or not at all: to a temporary name, then moved."""
    if not rows:
        raise DatasetError("no rows to publish (bench and what-if runs give rows)")
    data = to_parquet_bytes(rows, columns, version)
    name = submission_name(data)
    if dest.startswith("hf://"):
        return _publish_hf(dest, name, data)
    fs, root = _fs(dest)
    target = f"{root.rstrip('/')}/{name}"
    try:
        if fs.exists(target):
            with fs.open(target, "rb") as f:
                if f.read() == data:         # the same rows, whole: nothing to do
                    return target, False
            # a file under this name whose bytes are not its name's (a broken upload): the
            # true bytes replace it, through the temporary name below
        fs.makedirs(root, exist_ok=True)
        tmp = f"{target}.partial"
        with fs.open(tmp, "wb") as f:
            f.write(data)
        fs.mv(tmp, target)
    except DatasetError:
        raise
    except OSError as exc:
        raise DatasetError(f"cannot write to {dest}: {_os_reason(exc)}") from None
    except Exception as exc:   # fsspec backends raise their own errors: say where, not how
        raise DatasetError(f"cannot write to {dest}: {_first_line(exc)}") from None
    return target, True


HF_PREFIX = "hf://datasets/"


def _os_reason(exc: OSError) -> str:
    import errno
    import os
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    return os.strerror(exc.errno) if exc.errno else _first_line(exc)


def _hf_parts(dest: str) -> tuple[str, list[str]]:
    """hf://datasets/OWNER/NAME[/FOLDER]: the repo id and the folder; anything else refused."""
    parts = dest[len(HF_PREFIX):].strip("/").split("/") if dest.startswith(HF_PREFIX) else []
    if len(parts) < 2 or not all(parts[:2]) or any(not p for p in parts):
        raise DatasetError(f"{dest}: a Hugging Face dataset is hf://datasets/OWNER/NAME")
    return f"{parts[0]}/{parts[1]}", parts[2:]


def _publish_hf(dest: str, name: str, data: bytes) -> tuple[str, bool]:
    """One file into a Hugging Face dataset repo (hf://datasets/OWNER/NAME[/FOLDER]) through
    huggingface-hub's API, with its token from the usual place; an existing file of the same
    name (the same rows) is left as it is."""
    repo_id, folder = _hf_parts(dest)
    from huggingface_hub import HfApi
    path = "/".join([*folder, name])
    api = HfApi()
    try:
        if api.file_exists(repo_id, path, repo_type="dataset"):
            return f"{HF_PREFIX}{repo_id}/{path}", False
        api.upload_file(path_or_fileobj=data, path_in_repo=path, repo_id=repo_id,
                        repo_type="dataset", commit_message=f"cpuspec: add {name}")
    except Exception as exc:   # no network, no token, no such repo: said, nothing half-sent
        raise DatasetError(f"cannot publish to {dest}: {str(exc).splitlines()[0][:200]}") \
            from None
    return f"{HF_PREFIX}{repo_id}/{path}", True


@dataclass
class Loaded:
    """What a read found: the good rows as one Arrow table, and a line per file passed over."""
    table: object
    files: int = 0
    skipped: list[str] = field(default_factory=list)


def read_source(source: str, columns: list[tuple[str, str]], version: int,
                migrations: dict | None = None, wanted: list[str] | None = None) -> Loaded:
    """Every cpuspec dataset file under `source`: only the columns `wanted` (all by default);
    an older schema through `migrations` (version → function on an Arrow table), a newer one,
    a foreign or a damaged file passed over with the reason."""
    pa, _ = _pa()
    fs, root = _fs(source)
    paths = _dataset_paths(fs, root, source)
    names = wanted or [n for n, _ in columns]
    schema = pa.schema([f for f in arrow_schema(columns, version) if f.name in names])
    tables, skipped = [], []
    for path in paths:
        name = path[len(root.rstrip("/")):].lstrip("/") or path   # said relative to SOURCE
        try:
            table, why = _read_file(fs, path, names, version, migrations or {})
            if table is None:
                skipped.append(f"{name}: {why}")
                continue
            # conformed here: a column that does not cast passes over this file alone
            tables.append(_conform(table.select([n for n in names
                                                 if n in table.column_names]), schema))
        except Exception as exc:   # a damaged file among good ones: say so, keep the rest
            skipped.append(f"{name}: unreadable ({_first_line(exc)[:120]})")
    if not tables:
        raise DatasetError(f"no cpuspec dataset file could be read from {source}: "
                           + "; ".join(skipped[:3]) + (f"; {len(skipped) - 3} more"
                                                       if len(skipped) > 3 else ""))
    return Loaded(pa.concat_tables(tables), len(paths), skipped)


def _dataset_paths(fs, root: str, source: str) -> list[str]:
    """The .parquet files a source names: every one under a folder, or the one file."""
    try:
        if fs.isdir(root):
            paths = sorted(p for p in fs.find(root) if p.endswith(".parquet"))
        elif fs.isfile(root):
            if not root.endswith(".parquet"):
                raise DatasetError(f"{source}: not a .parquet file (give a dataset folder, a "
                                   "URL or a .parquet file)")
            paths = [root]
        else:
            raise DatasetError(f"{source}: no such file or folder")
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"cannot read {source}: {_first_line(exc)}") from None
    if not paths:
        raise DatasetError(f"no .parquet files under {source}")
    return paths


def _read_file(fs, path: str, names: list[str], version: int, migrations: dict):
    """(table at this schema version, "") of one dataset file, or (None, why it is passed
    over): not cpuspec's, newer than this cpuspec, or older with no migration to here."""
    _, pq = _pa()
    with fs.open(path, "rb") as f:
        pf = pq.ParquetFile(f)
        meta = pf.schema_arrow.metadata or {}
        if SCHEMA_KEY not in meta:
            return None, "not a cpuspec dataset file"
        got = int(meta[SCHEMA_KEY])
        if got > version:
            return None, (f"dataset schema {got}, newer than this cpuspec reads ({version}): "
                          "upgrade cpuspec")
        missing = [v for v in range(got, version) if v not in migrations]
        if missing:
            return None, (f"dataset schema {got} has no migration to {version} (from "
                          f"{missing[0]})")
        # an older file is read whole: its migration may need columns since renamed
        table = pf.read(columns=[n for n in names if n in pf.schema_arrow.names]
                        if got == version else None)
    for v in range(got, version):
        table = migrations[v](table)
    return table, ""


def _conform(table, schema):
    """A table with every column of `schema` (missing ones null), in its order and types."""
    pa, _ = _pa()
    cols = [table.column(f.name).cast(f.type) if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)
