"""onnxruntime beside `gpukit bench-embed` on the CPU: all-MiniLM-L6-v2 as the ONNX graph of
minilm_onnx.py (same weights), fused by onnxruntime's BERT optimizer (its fastest CPU form;
`--plain` keeps the unfused graph), with `tokenizers` from the same tokenizer.json, mean
pooling over real tokens and L2 normalisation in numpy. The same workloads, each timed from
text to host vectors: E1 batch 1 (median of 30 after 3 warm-ups), E3 32 sentences of 14 tokens
(median of 10 after 2), E2 128 x 128 tokens (median of 5 after 1). With --check, the lowest
cosine of its embeddings of tests/data/embedding_texts.json to the f64 reference
(examples/bert_reference.rs output). Prints JSON.

Usage: ort_minilm.py MODEL_DIR MODEL.onnx [--threads N] [--plain] [--check REFERENCE.json]"""
import argparse
import json
import os
import statistics
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

ap = argparse.ArgumentParser()
ap.add_argument("model_dir")
ap.add_argument("onnx")
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--plain", action="store_true")
ap.add_argument("--check")
args = ap.parse_args()

path = args.onnx
if not args.plain:
    from onnxruntime.transformers import optimizer

    config = json.load(open(f"{args.model_dir}/config.json"))
    fused = optimizer.optimize_model(
        args.onnx, model_type="bert", opt_level=0, num_heads=config["num_attention_heads"], hidden_size=config["hidden_size"]
    )
    path = args.onnx.replace(".onnx", ".fused.onnx")
    fused.save_model_to_file(path)
options = ort.SessionOptions()
options.intra_op_num_threads = args.threads
options.inter_op_num_threads = 1
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
tok = Tokenizer.from_file(f"{args.model_dir}/tokenizer.json")
tok.no_padding()
tok.enable_truncation(512)
SENTENCE = "The quick brown fox jumps over the lazy dog near the river."


def embed(texts):
    enc = tok.encode_batch(texts)
    n = max(len(e.ids) for e in enc)
    ids = np.array([e.ids + [0] * (n - len(e.ids)) for e in enc], np.int64)
    mask = np.array([[1] * len(e.ids) + [0] * (n - len(e.ids)) for e in enc], np.int64)
    (h,) = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    m = mask[:, :, None].astype(np.float32)
    pooled = (h * m).sum(1) / m.sum(1)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def timed(texts, warm, runs):
    t = []
    for i in range(warm + runs):
        t0 = time.perf_counter()
        embed(texts)
        if i >= warm:
            t.append(time.perf_counter() - t0)
    return statistics.median(t)


out = {"peer": f"onnxruntime {ort.__version__} ({'plain' if args.plain else 'BERT-fused'} graph)", "threads": args.threads}
if args.check:
    texts = json.load(open(os.path.join(os.path.dirname(__file__), "../../tests/data/embedding_texts.json")))
    reference = np.array(json.load(open(args.check)))
    got = np.concatenate([embed([t]) for t in texts])
    out["lowest_cosine"] = float((got * reference).sum(1).min())
one = timed([SENTENCE], 3, 30)
b32 = timed([SENTENCE] * 32, 2, 10)
many = timed(["word " * 126] * 128, 1, 5)
out["rows"] = [
    {"id": "E1", "value": one * 1e3, "unit": "ms"},
    {"id": "E3", "value": 32 / b32, "unit": "sentences/s"},
    {"id": "E2", "value": 128 / many, "unit": "sentences/s"},
]
print(json.dumps(out))
