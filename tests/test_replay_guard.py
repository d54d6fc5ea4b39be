"""Issue 17, item 2: replayed studies and tables are kept apart from measured ones. A replayed search's
studies carry the ``-replay`` suffix, its default folder is ``results/<gpu>/replay/``, and it refuses to
write into a table or storage holding measured (GPU) entries or studies unless told to
(``--allow-replay-into-measured``), before it writes anything."""

import itertools
import json
import shutil

import pytest
from conftest import ROOT, run_cli

from gemvtune import UsageError
from gemvtune.runners.replay import (
    ALLOW_FLAG,
    STUDY_SUFFIX,
    ReplayRunner,
    is_replay_study,
    measured_outputs,
    refuse_measured_study_names,
    refuse_replay_into_measured,
    storage_studies,
)

GPU = ROOT / "results" / "nvidia-h200"
SWEEPS = GPU / "measurements"
MEASURED_STUDY = "gemvtune-nvidia-h200-14336x4096x1"


def _measured_folder(tmp_path):
    """A real-looking GPU results folder: the committed table and the start of the committed journal."""
    out = tmp_path / "gpu"
    out.mkdir()
    shutil.copy(GPU / "table.json", out / "table.json")
    with open(ROOT / "tests" / "data" / "h200-journal-head.log", encoding="utf-8") as f:
        (out / "optuna-journal.log").write_text("".join(itertools.islice(f, 400)))
    assert MEASURED_STUDY in storage_studies(f"journal:{out / 'optuna-journal.log'}")
    return out


def _snapshot(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _replayed_table(path, keys=("14336x4096x1",)):
    data = json.loads((GPU / "table.json").read_text())
    data["entries"] = {k: data["entries"][k] for k in keys}
    for e in data["entries"].values():
        e["search"]["replayed"] = True
    path.write_text(json.dumps(data))


def test_study_names():
    assert ReplayRunner(SWEEPS).study_suffix == STUDY_SUFFIX == "-replay"
    assert is_replay_study(MEASURED_STUDY + "-replay") and is_replay_study(MEASURED_STUDY + "-replay-splitk")
    assert not is_replay_study(MEASURED_STUDY) and not is_replay_study(MEASURED_STUDY + "-splitk")
    assert not is_replay_study("gemvtune-replay-gpu-64x64x1")   # a GPU named "replay" is still a GPU
    assert not is_replay_study("gemvtune-gpu-replay-64x64x1")


def test_refused_into_a_measured_folder_and_nothing_changes(tmp_path):
    out = _measured_folder(tmp_path)
    before = _snapshot(tmp_path)
    with pytest.raises(UsageError) as e:
        refuse_replay_into_measured(out / "table.json", f"journal:{out / 'optuna-journal.log'}")
    msg = str(e.value)
    held = len(json.loads((out / "table.json").read_text())["entries"])
    assert "\n" not in msg and ALLOW_FLAG in msg and f"{held} measured entries" in msg and "measured stud" in msg, msg
    assert _snapshot(tmp_path) == before                       # byte for byte, and no lock file either


@pytest.mark.parametrize("which", ["table", "journal"])
def test_either_measured_output_is_enough_to_refuse(tmp_path, which):
    out = _measured_folder(tmp_path)
    table = out / "table.json" if which == "table" else tmp_path / "none.json"
    storage = f"journal:{out / 'optuna-journal.log'}" if which == "journal" else f"journal:{tmp_path / 'none.log'}"
    with pytest.raises(UsageError, match="does not write into measured results"):
        refuse_replay_into_measured(table, storage)
    refuse_replay_into_measured(table, storage, allow=True)   # the explicit choice


def test_a_replay_folder_is_fine(tmp_path):
    _replayed_table(tmp_path / "table.json")
    (tmp_path / "j.log").write_text(json.dumps({"op_code": 0, "worker_id": "w", "study_name": MEASURED_STUDY + "-replay",
                                                "directions": [1]}) + "\n" + '{"op_code": 4, "wor')   # torn tail
    assert measured_outputs(tmp_path / "table.json", f"journal:{tmp_path / 'j.log'}") == []
    refuse_replay_into_measured(tmp_path / "table.json", f"journal:{tmp_path / 'j.log'}")
    refuse_replay_into_measured(tmp_path / "new.json", f"journal:{tmp_path / 'new.log'}")   # nothing there yet


def test_an_entry_without_a_replay_mark_counts_as_measured(tmp_path):
    _replayed_table(tmp_path / "t.json", keys=("14336x4096x1", "4096x4096x1"))
    data = json.loads((tmp_path / "t.json").read_text())
    del data["entries"]["4096x4096x1"]["search"]
    (tmp_path / "t.json").write_text(json.dumps(data))
    assert measured_outputs(tmp_path / "t.json", None) == [f"table {tmp_path / 't.json'} holds 1 measured entry "
                                                          "(e.g. 4096x4096x1)"]


def test_sqlite_storage_is_read_without_writing(tmp_path):
    import optuna

    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    optuna.create_study(study_name=MEASURED_STUDY, storage=url)
    optuna.create_study(study_name=MEASURED_STUDY + "-replay", storage=url)
    before = _snapshot(tmp_path)
    assert sorted(storage_studies(url)) == [MEASURED_STUDY, MEASURED_STUDY + "-replay"]
    with pytest.raises(UsageError, match="1 measured study"):
        refuse_replay_into_measured(tmp_path / "none.json", url)
    assert _snapshot(tmp_path) == before
    assert storage_studies("postgresql://nobody@127.0.0.1:1/none") == []    # not inspected: kept apart by name


def test_a_replay_worker_does_not_join_a_measured_study():
    with pytest.raises(UsageError, match="not a replayed search's"):
        refuse_measured_study_names([MEASURED_STUDY + "-replay", MEASURED_STUDY])
    refuse_measured_study_names([MEASURED_STUDY + "-replay", MEASURED_STUDY + "-replay-splitk"])
    refuse_measured_study_names([MEASURED_STUDY], allow=True)


# ---- the search command: needs search_run.run_searches and cli_search's search/worker to call the above

def test_replay_search_into_a_measured_folder_is_refused(tmp_path):
    out = _measured_folder(tmp_path)
    before = _snapshot(tmp_path)
    r = run_cli("search", "--shape", "14336x4096", "--replay", str(SWEEPS), "--results", str(out), "--trials", "5")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and ALLOW_FLAG in lines[0], (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    after = _snapshot(tmp_path)
    assert {p: b for p, b in after.items() if p in before} == before          # byte for byte
    assert not [p for p in after if p not in before and p.suffix in (".json", ".csv", ".log")]


def test_replay_search_with_the_flag_marks_what_it_wrote(tmp_path):
    out = _measured_folder(tmp_path)
    r = run_cli("search", "--shape", "14336x4096", "--replay", str(SWEEPS), "--results", str(out), "--trials", "5",
                ALLOW_FLAG)
    assert r.returncode == 0, r.stderr
    e = json.loads((out / "table.json").read_text())["entries"]["14336x4096x1"]
    assert e["search"]["replayed"] is True and e["search"]["study"] == MEASURED_STUDY + STUDY_SUFFIX
    names = storage_studies(f"journal:{out / 'optuna-journal.log'}")
    assert MEASURED_STUDY + STUDY_SUFFIX in names and names.count(MEASURED_STUDY) == 1   # the GPU study untouched


def test_replay_search_uses_its_own_study_names(tmp_path):
    r = run_cli("search", "--shape", "14336x4096", "--replay", str(SWEEPS), "--results", str(tmp_path), "--trials", "5")
    assert r.returncode == 0, r.stderr
    names = storage_studies(f"journal:{tmp_path / 'optuna-journal.log'}")
    assert names and all(is_replay_study(n) for n in names), names
