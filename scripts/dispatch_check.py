"""Dispatch overhead of table.gemv against a bare launch on a few shapes (python scripts/dispatch_check.py, GPU)."""
from gemvtune.clients.percall import dispatch_overhead
from gemvtune.kernels.shapes import Shape
from gemvtune.runtime.table import load_table

t = load_table("results/nvidia-h200/table.json")
for s in (Shape(4096, 4096), Shape(14336, 4096), Shape(1024, 16384), Shape(14336, 4096, 8)):
    r = dispatch_overhead(t, s)
    print(s, {k: round(v, 3) for k, v in r.items()}, flush=True)
