"""The metrics of an ncu --csv log, one line per kernel (the first 12 characters of its name).

    python3 scripts/ncu_summary.py ncu.csv
"""

import csv
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if rows:
    h = rows[0]
    k, m, v = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
    seen: dict[str, dict[str, str]] = {}
    for r in rows[1:]:
        seen.setdefault(r[k][:12], {})[r[m]] = r[v]
    for name, ms in seen.items():
        print(name, " ".join(f"{a.split('__')[-1][:28]}={b}" for a, b in ms.items()))
