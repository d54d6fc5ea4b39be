"""Files already written read as before: the committed H200 table, and the cost model's training set and its
features (``model.dataset`` and ``model.features`` on ``results/nvidia-h200``), load to the content recorded when
each parameter's persisted name was fixed (the digests below were taken on the code before the family modules
took their own registry entries; one config field name on disk differs per family: ``split_k`` for gemv and
cublaslt, ``split`` for the tensor-core families, while code reads ``config.split`` everywhere)."""

import hashlib
import json
from pathlib import Path

import pytest

from gemvtune.kernels.families import config_to_dict, record_config

RESULTS = Path(__file__).resolve().parents[1] / "results" / "nvidia-h200"
# (taken on the table's content of 2026-12-05, after its PDL winners were re-searched; the code reading it is unchanged,
# except that Table.lookup passes over a PDL winner of an isolated search: route.tuned_config)
TABLE_RECORDS, TABLE_DIGEST = 834, "3ed63a7a5f8089dd6e9c1c455e60660b20f1541713308db70a5007184cf4e63b"
# its 16-bit entries alone
SIXTEEN_RECORDS, SIXTEEN_DIGEST = 754, "af664546dcba23b003a4f2962d90e15b1f7422414a894a4fbe86f675c713e658"
# entries added since (they come on top of the digested ones): Llama-3-70B's TP-8 shards at n = 1 and 8, from
# `gemvtune tune --model llama-3-70b --tp 8 --batch 1,8 --budget 150` on the H200, 2026-12-05 15:34
ADDED_ENTRIES = {f"{s}x{n}" for s in ("128x8192", "1024x8192", "3584x8192", "8192x1024") for n in (1, 8)} \
    | {"8192x3584x1", "16032x8192x1"}
ADDED_RECORDS = 88
DATASET_ROWS = 37221
# the searches packed on 2026-12-05 (two FP16 ones of 1024x4096 at n = 1: their rows come on top of the digested ones;
# a BF16 and four FP8 searches, which the FP16 set leaves out)
# and the ten searches of `gemvtune tune --model llama-3-70b --tp 8 --batch 1,8 --budget 150` (2026-12-05 15:34, H200)
ADDED_SOURCES = ("search-1024x4096x1-20261205-045626.csv", "search-1024x4096x1-20261205-053011.csv",
                 "search-1024x8192x1-20261205-153521.csv",
                 "search-1024x8192x8-20261205-153537.csv",
                 "search-128x8192x1-20261205-153446.csv",
                 "search-128x8192x8-20261205-153503.csv",
                 "search-16032x8192x1-20261205-153558.csv",
                 "search-3584x8192x1-20261205-153508.csv",
                 "search-3584x8192x8-20261205-153516.csv",
                 "search-8192x1024x1-20261205-153542.csv",
                 "search-8192x1024x8-20261205-153548.csv",
                 "search-8192x3584x1-20261205-153554.csv",
                 )
ADDED_ROWS = 256 + 135
# (taken with each row's source named as the file it came from; since the searches were packed into
# measurements/searches.json.xz a source is the file's name without .gz: with ".gz" added back, the rows give the
# digest e75ce87f8b9c7e4e67233f4389c45ec79d94202b4b7e2ae21b699b753a28f71a of the unpacked files, checked at packing)
DATASET_DIGEST = "d77b058f414a4c2bc6faf98f63494e3df540cfaaa863c94fcd1f804ef5056994"
FEATURES_DIGEST = "ab50852ebad6be825515d22cc6fb6a68b03e48c5e062f2b591e96e7fdb590f7a"


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _records(raw: dict, path: Path) -> list:
    from gemvtune.runtime.table import load_table

    recs = []
    for key, e in sorted(raw["entries"].items()):
        recs.append((key, "winner", config_to_dict(record_config(e["winner"]))))
        recs += [(key, f"cand{i}", config_to_dict(record_config(c))) for i, c in enumerate(e.get("candidates", []))]
        recs += [(key, f"best.{f}", config_to_dict(record_config(b))) for f, b in sorted(e.get("family_best", {}).items())]
    t = load_table(path)
    for s in t.shapes:
        c, why = t.lookup(s)
        recs.append((str(s), "lookup", c.label, config_to_dict(c), why))
    return recs


def test_committed_table_reads_the_same_configs(tmp_path):
    path = RESULTS / "table.json"
    raw = json.loads(path.read_text())
    assert ADDED_ENTRIES <= set(raw["entries"])
    assert len(_records(raw, path)) == TABLE_RECORDS + ADDED_RECORDS
    raw = {**raw, "entries": {k: e for k, e in raw["entries"].items() if k not in ADDED_ENTRIES}}
    (tmp_path / "before.json").write_text(json.dumps(raw))
    recs = _records(raw, tmp_path / "before.json")
    assert (len(recs), _digest(recs)) == (TABLE_RECORDS, TABLE_DIGEST)
    sixteen = {**raw, "entries": {k: e for k, e in raw["entries"].items() if not e.get("weights")}}
    (tmp_path / "t.json").write_text(json.dumps(sixteen))
    recs = _records(sixteen, tmp_path / "t.json")
    assert (len(recs), _digest(recs)) == (SIXTEEN_RECORDS, SIXTEEN_DIGEST)


@pytest.fixture(scope="module")
def training_set():
    pytest.importorskip("pandas")
    from gemvtune.model import dataset

    return dataset.load(RESULTS)


def test_training_set_reads_the_same_rows(training_set):
    ds = training_set
    rows = [(config_to_dict(r.config), r.config.label, str(r.shape), r.family, repr(r.us), repr(r.rel), r.source, r.kind)
            for r in ds.frame.itertuples()]
    assert (ds.sm_count, ds.gpu, ds.skipped) == (132, "NVIDIA H200", [])
    old = [r for r in rows if r[6] not in ADDED_SOURCES]
    assert (len(old), _digest(old)) == (DATASET_ROWS, DATASET_DIGEST)
    assert len(rows) - len(old) == ADDED_ROWS and {r[6] for r in rows} >= set(ADDED_SOURCES)


def test_training_set_features_and_the_committed_model_columns(training_set):
    import gzip

    from gemvtune.model import features

    model = json.loads(gzip.decompress((RESULTS / "costmodel.json.gz").read_bytes()))
    assert model["columns"] == features.columns()   # the shipped model's trees read these columns, in this order
    ds = training_set
    old = ds.frame[~ds.frame["source"].isin(ADDED_SOURCES)]
    fr = features.frame(zip(old["config"], old["shape"]), ds.sm_count)
    assert hashlib.sha256(fr.to_numpy().tobytes()).hexdigest() == FEATURES_DIGEST
