"""The same configs in FP16 and BF16, interleaved in one process (issue 21): per (M, d, n), the FP16 and BF16 table
entries' winners and fastest candidates, each measured in both dtypes (a config with an FP16 accumulator runs in
BF16 as its FP32-accumulator twin), and cuBLAS through torch F.linear in each dtype, for --rounds rounds, each
verified in the first. Separates what BF16 costs a config from what the two searches picked and from cuBLAS's own
FP16/BF16 difference. CSV of every measurement and a markdown summary in --out.

    python3 scripts/dtype_probe.py --table results/nvidia-h200/table.json --shape 4096x4096 --batch 1,8 --out DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gemvtune.kernels.shapes import Shape, parse_shape  # noqa: E402
from gemvtune.reports.dtypeprobe import probe_configs, probe_markdown  # noqa: E402
from gemvtune.reports.report import provenance, write_csv  # noqa: E402
from gemvtune.runners.cuda import CudaRunner  # noqa: E402
from gemvtune.runtime.table import load_table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--shape", action="append", required=True)
    ap.add_argument("--batch", default="1")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--k", type=int, default=3, help="fastest candidates of each entry besides its winner")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    table = load_table(a.table)
    shapes = [Shape(s.M, s.d, int(n)) for s in map(parse_shape, a.shape) for n in a.batch.split(",")]
    r = CudaRunner()
    dev, ceil = r.device_info(), r.ceiling()
    print(f"{dev['name']} driver {dev.get('driver')}: read ceiling {ceil['read_gbps']:.0f} GB/s", flush=True)
    rows, parts = [], []
    for s in shapes:
        fp, bf = Shape(s.M, s.d, s.n, "fp16"), Shape(s.M, s.d, s.n, "bf16")
        pairs = probe_configs([table.entry(fp), table.entry(bf)], s, a.k)
        times: dict[tuple[str, str], list[float]] = {}
        for i in range(a.rounds):
            for c16, cbf in pairs:
                for c, sh in ((c16, fp), (cbf, bf)):
                    m = r.measure(c, sh, kind="probe", verify=(i == 0))
                    rows.append(m)
                    if m.ok:
                        times.setdefault((c.label, sh.dtype), []).append(m.us_median)
                    elif i == 0:
                        print(f"  {sh} {c.label}: {m.status} {m.error[:120]}", flush=True)
            for sh in (fp, bf):
                m = r.measure_torch_linear(sh)
                if m is not None:
                    rows.append(m)
                    if m.ok:
                        times.setdefault(("cuBLAS (torch F.linear)", sh.dtype), []).append(m.us_median)
        r.release()
        labels = [(c16.label, cbf.label) for c16, cbf in pairs] + [("cuBLAS (torch F.linear)",) * 2]
        parts.append(probe_markdown(s, labels, times, ceil["read_gbps"]))
        print(parts[-1] + "\n", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = "python3 " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:])
    write_csv(rows, out / "dtype-probe.csv", provenance(dev, ceiling=ceil, table=a.table, rounds=a.rounds, command=cmd))
    md = (f"# The same configs in FP16 and BF16 — {dev['name']}, driver {dev.get('driver')}\n\n"
          f"`{cmd}`\n\nRead ceiling {ceil['read_gbps']:.0f} GB/s (same run); medians of {a.rounds} interleaved "
          "rounds (FP16 and BF16 of each config back to back).\n\n" + "\n\n".join(parts) + "\n")
    (out / "dtype-probe.md").write_text(md)


if __name__ == "__main__":
    main()
