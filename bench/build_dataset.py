"""The dataset shipped inside the package (cpuspec/data/dataset/): every bench and what-if run
recorded under bench/results/ (NAME.json, or NAME.json.gz for the large ones; superseded runs
and the runs recorded beside a deliberate disturbance, in folders named `disturbed`, left out), exported with today's code as one Parquet file. tests/test_dataset.py checks that
the shipped rows equal a fresh export.
Usage: python bench/build_dataset.py"""
from pathlib import Path

from cpuspec.analysis.dataset import COLUMNS, DATASET_SCHEMA, dataset_rows
from cpuspec.results.parquet import publish
from cpuspec.results.schema import ResultsError, read_json
from cpuspec.results.store import results_files

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "cpuspec" / "data" / "dataset"


def recorded_rows() -> list[dict]:
    rows = []
    # in the order of the names without .gz: compressing a file leaves the rows as they were
    for path in results_files(ROOT / "bench" / "results", recursive=True):
        if {"superseded", "disturbed"} & set(path.parts):
            continue
        try:
            doc = read_json(path)     # fills in the kind of schema-1 bench files
        except ResultsError:
            continue
        if isinstance(doc, dict) and doc.get("kind") in ("bench", "whatif", "heads") and \
                doc.get("runs", doc.get("rows")):
            rows += dataset_rows(doc)
    return rows


def main() -> None:
    rows = recorded_rows()
    for old in OUT.glob("*.parquet"):
        old.unlink()
    where, _ = publish(rows, COLUMNS, DATASET_SCHEMA, str(OUT))
    print(f"{where}: {len(rows)} rows")


if __name__ == "__main__":
    main()
