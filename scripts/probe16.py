"""Issue 16 probe on the H200: per-call CPU cost of the launch paths a PyTorch layer can take
(F.linear, a torch custom op, cuda-bindings cuLaunchKernel, ctypes), and transformers' compile config."""
import ctypes
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def per_call(f, calls=300, reps=7):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(calls): f()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)

print("python", sys.version.split()[0], "torch", torch.__version__)
import cuda.bindings
import cuda.bindings.driver as drv

print("cuda.bindings", cuda.bindings.__version__)
try:
    import cuda.core; print("cuda.core", cuda.core.__version__)
except Exception as e: print("cuda.core", e)
import transformers; print("transformers", transformers.__version__)
from transformers.generation.configuration_utils import CompileConfig

print("CompileConfig()", CompileConfig().to_dict() if hasattr(CompileConfig(), "to_dict") else vars(CompileConfig()))

dev = torch.device("cuda")
W = torch.randn(4096, 4096, device=dev, dtype=torch.float16); x = torch.randn(1, 4096, device=dev, dtype=torch.float16)
print(f"F.linear n=1 4096x4096: {per_call(lambda: F.linear(x, W)):.2f} us/call")
lin = torch.nn.Linear(4096, 4096, bias=False, device=dev, dtype=torch.float16)
with torch.no_grad():
    print(f"nn.Linear module call: {per_call(lambda: lin(x)):.2f} us/call")
print(f"torch.empty: {per_call(lambda: torch.empty((1, 4096), dtype=torch.float16, device=dev)):.2f}")
print(f"current_stream().cuda_stream: {per_call(lambda: torch.cuda.current_stream().cuda_stream):.2f}")
print(f"_cuda_getCurrentRawStream: {per_call(lambda: torch._C._cuda_getCurrentRawStream(0)):.2f}")
print(f"x.data_ptr(): {per_call(lambda: x.data_ptr()):.2f}")
print(f"is_compiling: {per_call(lambda: torch.compiler.is_compiling()):.2f}")

@torch.library.custom_op("probe::noop", mutates_args=())
def noop(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, t: int) -> torch.Tensor:
    return torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
@noop.register_fake
def _(x, w, b, t):
    return x.new_empty((x.shape[0], w.shape[0]))
with torch.no_grad():
    print(f"custom_op call (empty body): {per_call(lambda: torch.ops.probe.noop(x, W, None, 0)):.2f} us/call")

# a real kernel through cuda-bindings and ctypes
from gemvtune.kernels.compile import compile_source

src = r'''#include <cuda_fp16.h>
extern "C" __global__ void k(const half* W, const half* x, float* y, const half* b, float* ws, unsigned* c, int M) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < M) y[i] = __half2float(x[i % 4096]); }'''
comp = compile_source(src, "probe", "sm_90", "k")
torch.cuda.init(); torch.zeros(1, device=dev)
err, = drv.cuInit(0)
data = open(comp.cubin_path, "rb").read()
err, mod = drv.cuModuleLoadData(data); print("cuModuleLoadData", err)
err, fn = drv.cuModuleGetFunction(mod, b"k"); print("cuModuleGetFunction", err)
y = torch.empty(4096, device=dev, dtype=torch.float32)
vals = (ctypes.c_void_p * 6)(W.data_ptr(), x.data_ptr(), y.data_ptr(), 0, 0, 0)
M = ctypes.c_int(4096)
params = (ctypes.c_void_p * 7)(*[ctypes.addressof(vals) + 8 * i for i in range(6)], ctypes.addressof(M))
addr = ctypes.addressof(params)
s = torch._C._cuda_getCurrentRawStream(0)
def launch_cb():
    return drv.cuLaunchKernel(fn, 16, 1, 1, 256, 1, 1, 0, s, addr, 0)
print("launch rc", launch_cb())
torch.cuda.synchronize(); print("y ok", bool(torch.allclose(y, x[0].float())))
print(f"cuLaunchKernel (cuda-bindings, params address): {per_call(launch_cb):.2f} us/call")
def launch_cb_stream():
    vals[2] = y.data_ptr()
    return drv.cuLaunchKernel(fn, 16, 1, 1, 256, 1, 1, 0, torch._C._cuda_getCurrentRawStream(0), addr, 0)
print(f"  + ptr update + raw stream: {per_call(launch_cb_stream):.2f} us/call")
hfn = int(fn)
libcuda = ctypes.CDLL("libcuda.so.1"); lk = libcuda.cuLaunchKernel
lk.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 6 + [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
print(f"cuLaunchKernel (ctypes): {per_call(lambda: lk(hfn, 16, 1, 1, 256, 1, 1, 0, s, addr, None)):.2f} us/call")
def full_direct():
    out = torch.empty((1, 4096), dtype=torch.float32, device=dev)
    vals[0] = W.data_ptr(); vals[1] = x.data_ptr(); vals[2] = out.data_ptr()
    drv.cuLaunchKernel(fn, 16, 1, 1, 256, 1, 1, 0, torch._C._cuda_getCurrentRawStream(0), addr, 0)
    return out
print(f"empty+3 ptrs+stream+launch (cuda-bindings): {per_call(full_direct):.2f} us/call")
