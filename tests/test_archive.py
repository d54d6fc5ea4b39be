"""The searches of a results folder packed in one file (model.archive, `gemvtune costmodel pack`): byte for byte,
the training set unchanged, a damaged archive one line (and skipped by the dataset, never half-read)."""

from __future__ import annotations

import gzip
import json
import lzma

import pytest
from conftest import ROOT, run_cli

from gemvtune.errors import UsageError
from gemvtune.model import archive, dataset

H200 = ROOT / "results" / "nvidia-h200"
CSV = ("trial,p_block,p_vec,p_acc,p_tpr,p_unroll,p_split_k,p_hint,p_x_load,status,us_median,pct_ceiling\n"
       "0,256,half2,fp32,256,1,1,default,ldg,ok,11.1856,64.6247\n")   # llama.cpp's point, as a search writes it


def _folder(tmp_path):
    side = json.dumps({"device": {"sm_count": 132, "name": "NVIDIA H200"}, "ceiling": {"read_gbps": 4500.0}})
    meas = tmp_path / "r" / "measurements"
    meas.mkdir(parents=True)
    (meas / "search-4096x4096x1-20260101-000000.csv.gz").write_bytes(gzip.compress(CSV.encode()))
    (meas / "search-4096x4096x1-20260101-000000.json").write_text(side)
    return meas


def test_pack_moves_files_byte_for_byte_and_the_dataset_reads_the_same(tmp_path):
    meas = _folder(tmp_path)
    before = dataset.load(meas.parent)
    assert len(before.frame) == 1
    r = run_cli("costmodel", "pack", str(meas))
    assert r.returncode == 0, r.stderr
    assert "packed 2 search files" in r.stdout
    assert sorted(p.name for p in meas.iterdir()) == [archive.ARCHIVE]
    got = archive.read_archive(meas / archive.ARCHIVE)
    assert got["search-4096x4096x1-20260101-000000.csv"] == CSV.encode()
    after = dataset.load(meas.parent)
    assert after.frame[["us", "rel", "source"]].equals(before.frame[["us", "rel", "source"]])
    assert (after.sm_count, after.read_gbps) == (before.sm_count, before.read_gbps)
    assert run_cli("costmodel", "pack", str(meas)).stdout.startswith("no search files")


def test_pack_refuses_a_name_held_with_other_bytes_and_changes_nothing(tmp_path):
    meas = _folder(tmp_path)
    archive.pack(meas)
    (meas / "search-4096x4096x1-20260101-000000.csv").write_text(CSV.replace("11.1856,64", "12.0,64"))
    blob = (meas / archive.ARCHIVE).read_bytes()
    with pytest.raises(UsageError, match="other content"):
        archive.pack(meas)
    assert (meas / archive.ARCHIVE).read_bytes() == blob
    assert (meas / "search-4096x4096x1-20260101-000000.csv").exists()


@pytest.mark.parametrize("damage, match", [
    (lambda b: b"not xz at all", "not an xz file"),
    (lambda b: b[: len(b) // 2], "truncated xz|not an xz"),
    (lambda b: lzma.compress(b"[1, 2]"), "not a gemvtune-searches archive"),
    (lambda b: lzma.compress(json.dumps({"format": "gemvtune-searches", "version": 1,
                                         "files": {"../../evil.csv": "x"}}).encode()), "not a search file"),
])
def test_a_damaged_archive_is_one_line_and_skipped_by_the_dataset(tmp_path, damage, match):
    meas = _folder(tmp_path)
    archive.pack(meas)
    path = meas / archive.ARCHIVE
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(UsageError, match=match):
        archive.read_archive(path)
    (meas / "sweep-64x64x1.json").write_text(json.dumps({"device": {"sm_count": 1}, "ceiling": {"read_gbps": 1.0}}))
    ds = dataset.load(meas.parent)
    assert ds.frame.empty and any(s.startswith(archive.ARCHIVE) for s in ds.skipped)


def test_a_decompression_bomb_stops_at_the_cap(tmp_path, monkeypatch):
    path = tmp_path / archive.ARCHIVE
    path.write_bytes(lzma.compress(b" " * (1 << 20)))
    monkeypatch.setattr(archive, "ARCHIVE_BYTES", 1 << 16)
    with pytest.raises(UsageError, match="more than"):
        archive.read_archive(path)


def test_the_committed_searches_are_one_archive_of_every_search():
    members = archive.read_archive(H200 / "measurements" / archive.ARCHIVE)
    csvs = [n for n in members if n.endswith(".csv")]
    assert len(csvs) == 250 and len(members) == 500   # (the last ten: Llama-3-70B TP 8, 2026-12-05 15:34)
    # the FP8 searches of 2026-12-05 among them (the FP8 cost model's own data), named with their weight format
    assert sorted(n.split("-20261205")[0] for n in csvs if "e4m3" in n) == [
        "search-1024x4096x8-e4m3-row", "search-14336x4096x1-e4m3-row", "search-4096x14336x8-e4m3-row",
        "search-4096x4096x8-e4m3-row"]
    assert {n.removesuffix(".csv") for n in csvs} == {n.removesuffix(".json") for n in members if n.endswith(".json")}
    assert not list((H200 / "measurements").glob("search-*"))
