"""PyTorch beside `gpukit bench-embed`: all-MiniLM-L6-v2 (transformers' BertModel with the same
weights, mean pooling over real tokens, L2 normalisation), the text tokenised with
`tokenizers` from the same tokenizer.json, at batch 1 (one sentence of 14 tokens; median of 30
after 3 warm-ups) and 128 sentences x 128 tokens (median of 5 after one), each run from text to
host vectors, in f32 and f16 on CUDA. Usage: torch_minilm.py MODEL_DIR. Prints JSON."""
import json
import statistics
import sys
import time

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import BertConfig, BertModel

model_dir = sys.argv[1]
config = BertConfig.from_json_file(f"{model_dir}/config.json")
state = {k.removeprefix("bert."): v.float() for k, v in load_file(f"{model_dir}/model.safetensors").items()}
tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
tok.no_padding()
tok.enable_truncation(512)
SENTENCE = "The quick brown fox jumps over the lazy dog near the river."
rows = []
for dtype in [torch.float32, torch.float16]:
    model = BertModel(config, add_pooling_layer=False)
    model.load_state_dict(state, strict=False)
    model = model.to("cuda", dtype).eval()

    def embed(texts):
        enc = tok.encode_batch(texts)
        n = max(len(e.ids) for e in enc)
        ids = torch.tensor([e.ids + [0] * (n - len(e.ids)) for e in enc], device="cuda")
        mask = torch.tensor([[1] * len(e.ids) + [0] * (n - len(e.ids)) for e in enc], device="cuda")
        with torch.no_grad():
            h = model(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1)
            out = torch.nn.functional.normalize(pooled.float(), dim=-1)
        return out.cpu()

    def timed(texts, warm, runs):
        t = []
        for i in range(warm + runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            embed(texts)
            if i >= warm:
                t.append(time.perf_counter() - t0)
        return statistics.median(t)

    name = "f32" if dtype == torch.float32 else "f16"
    one = timed([SENTENCE], 3, 30)
    many = timed(["word " * 126] * 128, 1, 5)
    rows.append({"id": "E1", "dtype": name, "value": one * 1e3, "unit": "ms"})
    rows.append({"id": "E2", "dtype": name, "value": 128 / many, "unit": "sentences/s"})
print(json.dumps({"peer": f"torch {torch.__version__}", "device": torch.cuda.get_device_name(), "rows": rows}))
