"""Experiment: does compiling d into the kernel explain why gemvtune's llama.cpp point runs faster
than MEASURING.md's seed-kernel references on large shapes? Times the llama.cpp config as rendered
(d a compile-time constant) against the same source with d read at run time (as llama.cpp's
`ncols2` argument is), interleaved A B A B, on the same runner and buffers.
    usage: python3 scripts/exp_runtime_d.py OUT.csv
"""

import sys

from gemvtune import LLAMA_CPP, Shape
from gemvtune.kernels.render import render
from gemvtune.reports.report import provenance, write_csv
from gemvtune.runners.cuda import CudaRunner


def runtime_d_source(shape: Shape) -> str:
    src = render(LLAMA_CPP, shape)
    subs = {
        f"constexpr int D = {shape.d};": f"__constant__ int D_RT = {shape.d};\n#define D D_RT",
        "constexpr int NVEC = D / VEC;": "#define NVEC (D / VEC)",
        "constexpr int VPS = (NVEC + SPLIT_K - 1) / SPLIT_K;": "#define VPS ((NVEC + SPLIT_K - 1) / SPLIT_K)",
        'static_assert(D % VEC == 0, "d must be a multiple of the vector width");': "",
    }
    for a, b in subs.items():
        assert a in src, a
        src = src.replace(a, b)
    return src


def main(out: str) -> None:
    r = CudaRunner()
    ceil = r.ceiling()
    rows = []
    for M, d in [(4096, 4096), (14336, 4096), (28672, 4096), (128256, 4096)]:
        s = Shape(M, d)
        for rep in range(3):
            a = r.measure(LLAMA_CPP, s, kind="llama.cpp d-constexpr")
            b = r.measure(LLAMA_CPP, s, kind="llama.cpp d-runtime", source=runtime_d_source(s),
                          name=LLAMA_CPP.label + "+runtime-d")
            rows += [a, b]
            print(f"{s!s:>12s} rep {rep}: d compiled in {a.us_median:8.2f} µs ({a.status})  "
                  f"d at run time {b.us_median:8.2f} µs ({b.status})  ratio {b.us_median / a.us_median:.3f}")
        r.release()
    write_csv(rows, out, provenance(r.device_info(), ceiling=ceil, experiment="runtime-d"))


if __name__ == "__main__":
    main(sys.argv[1])
