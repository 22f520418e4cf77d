"""PyTorch's matmul beside `gpukit bench` rows D2 (f32, TF32 off) and D2s (f16 tensors, f16 out):
square device-resident products of 1024 and 4096, `reps` products then one synchronize, the
median of five timed runs after one warm-up, as gpukit times them. Prints JSON rows with the
same ids. Run on the GPU machine, in the same call as `gpukit bench`."""
import json
import statistics
import time

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

rows = []
for size in [1024, 4096]:
    reps = 3 if size >= 4096 else 10
    for dtype, rid in [(torch.float32, "D2"), (torch.float16, "D2s")]:
        g = torch.Generator(device="cuda").manual_seed(10)
        x = torch.rand((size, size), device="cuda", dtype=dtype, generator=g) * 2 - 1
        y = torch.rand((size, size), device="cuda", dtype=dtype, generator=g) * 2 - 1
        times = []
        for i in range(6):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                z = torch.matmul(x, y)
            torch.cuda.synchronize()
            if i > 0:
                times.append(time.perf_counter() - t0)
        tflops = 2 * size**3 / (statistics.median(times) / reps) / 1e12
        rows.append({"id": rid, "size": size, "dtype": str(dtype), "tflops": tflops})
print(json.dumps({"peer": f"torch {torch.__version__}", "device": torch.cuda.get_device_name(), "rows": rows}))
