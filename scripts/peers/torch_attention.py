"""PyTorch's scaled_dot_product_attention beside `gpukit bench` rows A1 and A2: causal, batch
1, f32 (TF32 off), device-resident [1, heads, seq, dim] tensors, one call then a synchronize,
the median of five timed runs after one warm-up, as gpukit times them; then the same shapes in
f16 and bf16. Prints JSON rows. Run on the GPU machine, in the same call as
`gpukit bench`. Row A3 is decoding: one query row of 32 heads against 8 KV heads of 4096 x 128
(GQA through `enable_gqa`), four caches in turn, 100 calls per synchronize as gpukit times it.
Row A4 is a short prompt: SmolLM2-135M's 9 query heads on 3 KV heads x 512 x 64, causal, 100
calls in a chain (each output the next query, as layers wait for each other) per synchronize."""
import json
import statistics
import time

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

rows = []
for rid, heads, dim, seq in [("A1", 16, 64, 1024), ("A1", 16, 64, 2048), ("A1", 16, 64, 4096), ("A2", 32, 128, 2048)]:
    for dtype in [torch.float32, torch.float16, torch.bfloat16]:
        g = torch.Generator(device="cuda").manual_seed(12)
        q, k, v = (torch.rand((1, heads, seq, dim), device="cuda", dtype=dtype, generator=g) * 2 - 1 for _ in range(3))
        times = []
        for i in range(6):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.cuda.synchronize()
            if i > 0:
                times.append(time.perf_counter() - t0)
        rows.append(
            {
                "id": rid,
                "shape": f"{heads} heads x {seq} x {dim}",
                "dtype": str(dtype).removeprefix("torch."),
                "us": statistics.median(times) * 1e6,
            }
        )
# A3: decoding with grouped KV heads, four caches in turn so they are read from memory.
for dtype in [torch.float32, torch.float16]:
    g = torch.Generator(device="cuda").manual_seed(31)
    q = torch.rand((1, 32, 1, 128), device="cuda", dtype=dtype, generator=g) * 2 - 1
    caches = [
        tuple(torch.rand((1, 8, 4096, 128), device="cuda", dtype=dtype, generator=g) * 2 - 1 for _ in range(2))
        for _ in range(4)
    ]
    times = []
    for i in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for j in range(100):
            k, v = caches[j % 4]
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.cuda.synchronize()
        if i > 0:
            times.append((time.perf_counter() - t0) / 100)
    kv_bytes = 2 * 8 * 4096 * 128 * (4 if dtype == torch.float32 else 2)
    us = statistics.median(times) * 1e6
    rows.append(
        {
            "id": "A3",
            "shape": "1 x 32 heads against 8 x 4096 x 128",
            "dtype": str(dtype).removeprefix("torch."),
            "us": us,
            "gb_per_s": kv_bytes / (us * 1e-6) / 1e9,
        }
    )
# A4: SmolLM2-135M's prompt attention over 512 tokens, chained as a prompt's layers call it.
for dtype in [torch.float32, torch.float16]:
    g = torch.Generator(device="cuda").manual_seed(51)
    q = torch.rand((1, 9, 512, 64), device="cuda", dtype=dtype, generator=g) * 2 - 1
    k, v = (torch.rand((1, 3, 512, 64), device="cuda", dtype=dtype, generator=g) * 2 - 1 for _ in range(2))
    times = []
    for i in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x = q
        for j in range(100):
            x = F.scaled_dot_product_attention(x, k, v, is_causal=True, enable_gqa=True)
        torch.cuda.synchronize()
        if i > 0:
            times.append((time.perf_counter() - t0) / 100)
    rows.append(
        {
            "id": "A4",
            "shape": "9 heads on 3 x 512 x 64",
            "dtype": str(dtype).removeprefix("torch."),
            "us": statistics.median(times) * 1e6,
        }
    )
print(json.dumps({"peer": f"torch {torch.__version__}", "device": torch.cuda.get_device_name(), "rows": rows}))
