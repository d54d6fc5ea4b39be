"""GPU (marked gpu): a 2-layer Llama-3-8B-width transformers model, static-cache generate (which
compiles the forward with Inductor CUDA graphs) after swap_linears: the tuned kernels run, and each
step's logits match stock within FP16 tolerance (compared up to the first differing token)."""

import json

import pytest
from conftest import ROOT

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install 'gemvtune[hf]')")


def _model(layers=2):
    cfg = json.loads((ROOT / "gemvtune" / "kernels" / "hf_configs" / "llama-3-8b.json").read_text())
    cfg["num_hidden_layers"] = layers
    conf = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    torch.manual_seed(0)
    with torch.device("cuda"):
        return transformers.AutoModelForCausalLM.from_config(conf, torch_dtype=torch.float16).eval()


@pytest.mark.slow   # the GPU suite's second tier: -m "gpu and slow" (docs/testing.md)
def test_static_cache_generate_matches_stock_and_runs_tuned_kernels(monkeypatch):
    import gemvtune
    from gemvtune.runtime.table import load_table

    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    table = load_table(ROOT / "results" / "nvidia-h200" / "table.json")
    if torch.cuda.get_device_name() != table.gpu.get("name"):
        pytest.skip("the committed table is for another GPU")
    model = _model()
    ids = torch.randint(0, 128256, (1, 8), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    kw = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, cache_implementation="static",
              output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        stock = model.generate(ids, **kw)
        from gemvtune.device.plan import LaunchPlan

        calls = []
        real = LaunchPlan.launch
        monkeypatch.setattr(LaunchPlan, "launch", lambda self, *a: calls.append(
            (self.spec.shape.M, self.spec.shape.d, self.spec.shape.n)) or real(self, *a))
        names = gemvtune.swap_linears(model, table)
        assert len(names) == 2 * 7 + 1
        ours = model.generate(ids, **kw)
        gemvtune.restore_linears(model)
    assert {(4096, 4096, 1), (1024, 4096, 1), (14336, 4096, 1)} <= set(calls), calls
    a, b = stock.sequences[0, ids.shape[1]:], ours.sequences[0, ids.shape[1]:]
    same = int((a != b).nonzero()[0, 0]) if (a != b).any() else len(a)
    for step in range(min(same + 1, len(stock.logits))):
        ls, lo = stock.logits[step].float(), ours.logits[step].float()
        rel = ((ls - lo).abs().max() / ls.abs().max()).item()
        assert rel < 2e-2, (step, rel)
