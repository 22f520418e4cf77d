"""Writes all-MiniLM-L6-v2 as an ONNX graph built here from the model's own safetensors
weights (numpy and the `onnx` package; no PyTorch), for the peers of `gpukit bench-embed`:
onnxruntime on the CPU (scripts/peers/ort_minilm.py) and transformers.js in Chromium. Inputs
input_ids, attention_mask and token_type_ids ([batch, seq], int64); output last_hidden_state
([batch, seq, hidden]), as Hugging Face's exports name them.

Usage: minilm_onnx.py MODEL_DIR OUT.onnx"""
import json
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

model_dir, out = sys.argv[1], sys.argv[2]
config = json.load(open(f"{model_dir}/config.json"))
H, HEADS = config["hidden_size"], config["num_attention_heads"]
DH, EPS = H // HEADS, config.get("layer_norm_eps", 1e-12)

# safetensors: an 8-byte header length, a JSON header, then the raw tensors.
raw = open(f"{model_dir}/model.safetensors", "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8 : 8 + n])
DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None}
weights = {}
for name, info in header.items():
    if name == "__metadata__" or info["dtype"] not in ("F32", "F16"):
        continue
    a, b = info["data_offsets"]
    data = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=DTYPES[info["dtype"]])
    weights[name.removeprefix("bert.")] = data.reshape(info["shape"]).astype(np.float32)

nodes, inits = [], []
counter = [0]


def init(name, array):
    inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
    return name


def node(op, inputs, **attrs):
    counter[0] += 1
    name = f"{op}_{counter[0]}"
    nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
    return name


def linear(x, prefix):
    w = init(f"{prefix}.wT", weights[f"{prefix}.weight"].T)
    return node("Add", [node("MatMul", [x, w]), init(f"{prefix}.b", weights[f"{prefix}.bias"])])


def layer_norm(x, prefix):
    g = init(f"{prefix}.g", weights[f"{prefix}.weight"])
    b = init(f"{prefix}.beta", weights[f"{prefix}.bias"])
    return node("LayerNormalization", [x, g, b], axis=-1, epsilon=EPS)


# Embeddings: words + positions 0..seq + token types, then a layer norm.
word = init("word", weights["embeddings.word_embeddings.weight"])
pos = init("pos", weights["embeddings.position_embeddings.weight"])
typ = init("type", weights["embeddings.token_type_embeddings.weight"])
seq = node("Shape", ["input_ids"], start=1, end=2)
zero = init("zero", np.array([0], np.int64))
x = node("Add", [node("Gather", [word, "input_ids"]), node("Slice", [pos, zero, seq, zero])])
x = node("Add", [x, node("Gather", [typ, "token_type_ids"])])
x = layer_norm(x, "embeddings.LayerNorm")
# Padding: -inf-like bias on the keys past each sentence's length, [batch, 1, 1, seq].
mask = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
mask = node("Mul", [node("Sub", [init("f1", np.array(1, np.float32)), mask]), init("neg", np.array(-1e9, np.float32))])
mask = node("Unsqueeze", [mask, init("axes12", np.array([1, 2], np.int64))])
heads_shape = init("heads_shape", np.array([0, 0, HEADS, DH], np.int64))
hidden_shape = init("hidden_shape", np.array([0, 0, H], np.int64))
scale = init("scale", np.array(1 / np.sqrt(DH), np.float32))
for i in range(config["num_hidden_layers"]):
    p = f"encoder.layer.{i}"

    def split(t, perm):
        return node("Transpose", [node("Reshape", [t, heads_shape])], perm=perm)

    q = split(linear(x, f"{p}.attention.self.query"), [0, 2, 1, 3])
    k = split(linear(x, f"{p}.attention.self.key"), [0, 2, 3, 1])
    v = split(linear(x, f"{p}.attention.self.value"), [0, 2, 1, 3])
    scores = node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), mask])
    ctx = node("MatMul", [node("Softmax", [scores], axis=-1), v])
    ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), hidden_shape])
    a = layer_norm(node("Add", [linear(ctx, f"{p}.attention.output.dense"), x]), f"{p}.attention.output.LayerNorm")
    f = linear(a, f"{p}.intermediate.dense")
    # GELU with erf, as BERT's: 0.5 x (1 + erf(x / sqrt 2)).
    erf = node("Erf", [node("Mul", [f, init(f"{p}.isqrt2", np.array(1 / np.sqrt(2), np.float32))])])
    f = node("Mul", [node("Mul", [f, node("Add", [erf, "f1"])]), init(f"{p}.half", np.array(0.5, np.float32))])
    x = layer_norm(node("Add", [linear(f, f"{p}.output.dense"), a]), f"{p}.output.LayerNorm")
nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))

ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in ("input_ids", "attention_mask", "token_type_ids")]
outs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", H])]
graph = helper.make_graph(nodes, "all-minilm-l6-v2", ints, outs, inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="gpukit")
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, out)
print(f"minilm_onnx: {out} ({len(nodes)} nodes)")
