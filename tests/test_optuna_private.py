"""Every private Optuna name the package uses lives in one module, gemvtune.tuning.coordination.optuna_adapter
(tested across the pinned Optuna range: tests/test_optuna_adapter.py). Anywhere else in gemvtune/, each of these
is a failure, lazy code included:

- a dotted name through optuna with a private part (``optuna.storages._heartbeat``, ``optuna.study._optimize`` in
  a string too, e.g. a logger's name), or an import of one (``from optuna.storages._cached_storage import ...``);
- an attribute, or a getattr/setattr/hasattr string, named like a private attribute or method of Optuna's classes
  and objects (``study._storage``, ``trial._trial_id``, ``backend._file_path``, ``lock._lock_file``), found on the
  installed Optuna;
- in a class built on an Optuna class (or on one of the adapter's), ``self._x`` or ``def _x`` where ``_x`` is
  Optuna's (overriding ``JournalStorage._write_log``, reading ``JournalFileBackend._lock``)."""

from __future__ import annotations

import ast
import re
import tempfile
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.storages import journal as optuna_journal

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "gemvtune"
ADAPTER = PKG / "tuning" / "coordination" / "optuna_adapter.py"
_DOTTED = re.compile(r"\boptuna(?:\.\w+)*\._\w*")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def optuna_private_names() -> frozenset[str]:
    """The private attribute and method names of Optuna's public classes and of live objects of them."""
    classes: list[type] = [
        optuna.Study, optuna.Trial, optuna.trial.FrozenTrial, optuna.trial.FixedTrial,
        optuna.storages.BaseStorage, optuna.storages.InMemoryStorage, optuna.storages.JournalStorage,
        optuna.storages.RDBStorage, optuna_journal.BaseJournalBackend, optuna_journal.JournalFileBackend,
        optuna_journal.JournalFileOpenLock, optuna_journal.JournalFileSymlinkLock,
        optuna.samplers.BaseSampler, optuna.samplers.TPESampler, optuna.samplers.RandomSampler,
        optuna.samplers.BruteForceSampler, optuna.samplers.GridSampler, optuna.pruners.BasePruner,
    ]
    names = {n for c in classes for k in c.__mro__ if k.__module__.startswith("optuna") for n in vars(k) if _private(n)}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)   # (create_study's INFO lines), for this call only
    try:
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")   # (BruteForceSampler is flagged experimental)
            path = str(Path(tmp) / "journal.log")
            backend = optuna_journal.JournalFileBackend(path)
            storage = optuna.storages.JournalStorage(backend)
            study = optuna.create_study(storage=storage)
            trial = study.ask()
            study.tell(trial, 1.0)
            mem = optuna.create_study(storage=optuna.storages.InMemoryStorage(),
                                      sampler=optuna.samplers.BruteForceSampler(seed=0))
            objs = [backend, storage, study, trial, study.trials[0], mem, mem.sampler,
                    optuna.samplers.TPESampler(seed=0), optuna_journal.JournalFileOpenLock(path),
                    optuna.storages.InMemoryStorage()]
            names |= {n for o in objs for n in vars(o) if _private(n)}
    finally:
        optuna.logging.set_verbosity(verbosity)
    return frozenset(names)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def private_uses(source: str, private: frozenset[str], where: str = "<source>") -> list[str]:
    """Each private Optuna use in ``source`` (see the module doc), as ``where:line: what``."""
    tree = ast.parse(source)
    from_optuna: set[str] = set()   # local names bound to optuna or to something of it (or of the adapter)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            from_optuna |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "optuna"}
        elif isinstance(node, ast.ImportFrom) and ((node.module or "").split(".")[0] == "optuna"
                                                    or (node.module or "").endswith("optuna_adapter")):
            from_optuna |= {a.asname or a.name for a in node.names}
    out: list[str] = []

    def hit(node: ast.AST, what: str) -> None:
        out.append(f"{where}:{getattr(node, 'lineno', '?')}: {what}")

    def optuna_based(cls: ast.ClassDef, bases_seen: set[str]) -> bool:
        for b in cls.bases:
            name = _dotted(b) or ""
            if name.split(".")[0] in from_optuna or name in bases_seen:
                return True
        return False

    optuna_classes: set[str] = set()
    for node in ast.walk(tree):   # (a class built on one built on Optuna's, in the same module, counts too)
        if isinstance(node, ast.ClassDef) and optuna_based(node, optuna_classes):
            optuna_classes.add(node.name)
    inside: dict[int, bool] = {}
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            for sub in ast.walk(cls):
                inside[id(sub)] = inside.get(id(sub), False) or cls.name in optuna_classes

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
            mod = node.module or ""
            if any(_private(p) for p in mod.split(".")) or any(_private(a.name) for a in node.names):
                hit(node, f"from {mod} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "optuna" and any(_private(p) for p in a.name.split(".")):
                    hit(node, f"import {a.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            name = _dotted(node)
            receiver = name.split(".")[0] if name else ""
            if receiver in from_optuna:
                hit(node, name or node.attr)
            elif node.attr in private and (receiver not in ("self", "cls") or inside.get(id(node))):
                hit(node, f"{name or '...'} (Optuna's {node.attr})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.search(node.value):
            hit(node, f"{node.value!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1:
            arg = node.args[1]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value in private:
                hit(node, f"{node.func.id}(..., {arg.value!r}) (Optuna's {arg.value})")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in private and inside.get(id(node)):
            hit(node, f"def {node.name} (overrides Optuna's)")
    return out


@pytest.fixture(scope="module")
def private() -> frozenset[str]:
    return optuna_private_names()


def test_no_private_optuna_name_outside_the_adapter(private):
    found = []
    for p in sorted(PKG.rglob("*.py")):
        if p != ADAPTER:
            found += private_uses(p.read_text(encoding="utf-8"), private, str(p.relative_to(ROOT)))
    assert not found, "private Optuna names outside optuna_adapter:\n" + "\n".join(found)


def test_the_grep_finds_the_adapters_hooks(private):
    """The adapter is where they are: the same scan finds each hook there (so the scan above can see them)."""
    text = "\n".join(private_uses(ADAPTER.read_text(encoding="utf-8"), private))
    for what in ("study._storage", "trial._trial_id", "_write_log", "_populate_tree", "optuna.study._optimize",
                 "optuna.storages.journal._storage"):
        assert what in text, (what, text)


@pytest.mark.parametrize("snippet", [
    "import optuna\ndef f(study):\n    return study._storage\n",
    "def f(trial):\n    return trial._trial_id\n",
    "from optuna.storages._cached_storage import _CachedStorage\n",
    "import optuna.storages._heartbeat\n",
    "import optuna\nx = optuna.storages._CachedStorage\n",
    "import logging\nlog = logging.getLogger('optuna.study._optimize')\n",
    "def f(b):\n    return getattr(b, '_file_path')\n",
    "import optuna\nclass S(optuna.storages.JournalStorage):\n    def _write_log(self, op, extra):\n        pass\n",
    "from optuna.storages.journal import JournalFileBackend\nclass B(JournalFileBackend):\n"
    "    def path(self):\n        return self._file_path\n",
    "from .optuna_adapter import RecordHookJournalStorage\nclass S(RecordHookJournalStorage):\n"
    "    def f(self):\n        return self._backend\n",
])
def test_the_grep_catches_each_kind_of_private_use(private, snippet):
    assert private_uses(snippet, private), snippet


def test_the_grep_leaves_gemvtunes_own_private_names_alone(private):
    snippet = ("import threading\nclass C:\n    def __init__(self):\n        self._lock = threading.Lock()\n"
               "    def _backend(self):\n        return self._lock\n")
    assert not private_uses(snippet, private)
