#!/usr/bin/python3
"""PyTorch float64 reference loader for Hugging Face GPT-2, Llama, Mixtral and Qwen3 checkpoints.

Written from the published `transformers` model definitions (GPT2LMHeadModel,
LlamaForCausalLM, MixtralForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM);
`transformers` itself is not needed.  A Hugging Face model directory (config.json + model.safetensors, or a sharded
model.safetensors.index.json; tensors F32 / BF16 / F16 / F64) is read through
its config.json fields, converted to float64, and run forward in eval mode
(no dropout, no KV cache, positions 0..s-1).  What it does not implement
(rope_scaling, other activations, inverse-layer-idx attention scaling, other
model types) is refused with a clear error.

Three jobs:

  --make-fixtures DIR   draw tiny models from fixed seeds and write
                          DIR/hf_<model>/{config.json,model.safetensors}
                        for model gpt2, llama, mixtral, qwen3 and qwen3_moe, and
                          DIR/hf_<model>_reference.safetensors
                        the reference holding tokens (I32 [b, s]) and logits
                        (F32 [b, s, V], computed in float64 from the F32 weights
                        as written, i.e. loaded back from the directory).
                        Output is byte-for-byte deterministic.
  --check HF_DIR --reference FILE
                        run FILE's tokens through HF_DIR, print the max abs
                        difference from FILE's logits; exit 1 if it exceeds 1e-5
                        (or on a bad file), 2 if the checkpoint is unsupported.
  --logits HF_DIR --tokens FILE --out OUT
                        write OUT with FILE's tokens and the float64 logits
                        (stored F32 [b, s, V]).

Run (needs Debian's python3-torch; the pyenv python has no torch):
  /usr/bin/python3 tools/ref/hf_ref.py --make-fixtures tests/golden
  /usr/bin/python3 tools/ref/hf_ref.py --check tests/golden/hf_gpt2 \\
      --reference tests/golden/hf_gpt2_reference.safetensors
  /usr/bin/python3 tools/ref/hf_ref.py --check tests/golden/hf_llama \\
      --reference tests/golden/hf_llama_reference.safetensors
  (and likewise hf_qwen3, hf_qwen3_moe)
"""
import argparse, json, math, os, struct, sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import write_safetensors  # noqa: E402  (F32/I32 writer, sorted names, space-padded header)

torch.set_num_threads(1)  # one summation order, so the float32-rounded outputs never vary
F64 = torch.float64
TOLERANCE = 1e-5


class Unsupported(Exception):
    """A checkpoint feature this reference does not implement."""


# ---------------------------------------------------------------- safetensors reader
ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4"}


def read_safetensors(path):
    """Return ({name: numpy array}, metadata).  BF16 is widened to float32 exactly."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None) or {}
    base, out = 8 + n, {}
    for name, info in header.items():
        if info["dtype"] not in ST_DTYPES:
            raise Unsupported(f"{path}: tensor {name}: dtype {info['dtype']} not supported")
        dt = np.dtype(ST_DTYPES[info["dtype"]])
        begin, end = info["data_offsets"]
        count = int(np.prod(info["shape"], dtype=np.int64))
        if end - begin != count * dt.itemsize or base + end > len(data):
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {info['data_offsets']}")
        arr = np.frombuffer(data, dtype=dt, count=count, offset=base + begin)
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.reshape(info["shape"])
    return out, meta


def read_hf_tensors(d):
    """All tensors of an HF directory, single file or sharded, as float64 torch tensors."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        arrays = {}
        for shard in sorted(set(weight_map.values())):
            arrays.update(read_safetensors(os.path.join(d, shard))[0])
        missing = sorted(set(weight_map) - set(arrays))
        if missing:
            raise ValueError(f"{index}: tensors missing from their shards: {missing[:5]}")
    elif os.path.exists(os.path.join(d, "model.safetensors")):
        arrays = read_safetensors(os.path.join(d, "model.safetensors"))[0]
    else:
        raise FileNotFoundError(f"{d}: no model.safetensors or model.safetensors.index.json")
    return {k: torch.from_numpy(a.astype(np.float64)) for k, a in arrays.items()}


# ---------------------------------------------------------------- config -> model
def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


GPT2_ACTS = {"gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh, "gelu": gelu_erf}


def gpt2_config(cfg):
    """GPT2Config fields (defaults as in transformers) -> the reference's own names."""
    h, n = cfg["n_embd"], cfg["n_head"]
    act = cfg.get("activation_function", "gelu_new")
    if act not in GPT2_ACTS:
        raise Unsupported(f"gpt2 activation_function {act!r} (have {sorted(GPT2_ACTS)})")
    if cfg.get("scale_attn_by_inverse_layer_idx", False):
        raise Unsupported("gpt2 scale_attn_by_inverse_layer_idx = true")
    # reorder_and_upcast_attn only changes float16/bfloat16 rounding, not the maths: accepted.
    if h % n:
        raise ValueError(f"n_embd {h} not divisible by n_head {n}")
    return dict(arch="gpt2", vocab=cfg["vocab_size"], hidden=h, layers=cfg["n_layer"], heads=n,
                kv_heads=n, head_dim=h // n, ffn=cfg.get("n_inner") or 4 * h,
                max_pos=cfg["n_positions"], eps=cfg.get("layer_norm_epsilon", 1e-5), act=act,
                attn_scale=1.0 / math.sqrt(h // n) if cfg.get("scale_attn_weights", True) else 1.0,
                tied=cfg.get("tie_word_embeddings", True), prefix="transformer.")


def llama_config(cfg):
    """LlamaConfig fields (defaults as in transformers) -> the reference's own names."""
    h, n = cfg["hidden_size"], cfg["num_attention_heads"]
    g = cfg.get("num_key_value_heads") or n
    d = cfg.get("head_dim") or h // n
    if cfg.get("hidden_act", "silu") != "silu":
        raise Unsupported(f"llama hidden_act {cfg['hidden_act']!r} (only silu)")
    theta = cfg.get("rope_theta", 10000.0)
    if cfg.get("rope_scaling") is not None:
        raise Unsupported(f"llama rope_scaling {cfg['rope_scaling']!r} (only null)")
    rp = cfg.get("rope_parameters")  # newer transformers: {"rope_type": ..., "rope_theta": ...}
    if rp is not None:
        if rp.get("rope_type", "default") != "default":
            raise Unsupported(f"llama rope_parameters {rp!r} (only rope_type default)")
        theta = rp.get("rope_theta", theta)
    if cfg.get("partial_rotary_factor", 1.0) != 1.0:
        raise Unsupported("llama partial_rotary_factor != 1")
    if n % g or d % 2:
        raise ValueError(f"num_attention_heads {n} / num_key_value_heads {g} / head_dim {d}")
    # pretraining_tp > 1 only slices the same matmuls in transformers: the maths is unchanged.
    return dict(arch="llama", vocab=cfg["vocab_size"], hidden=h, layers=cfg["num_hidden_layers"],
                heads=n, kv_heads=g, head_dim=d, ffn=cfg["intermediate_size"],
                max_pos=cfg.get("max_position_embeddings"), eps=cfg.get("rms_norm_eps", 1e-6),
                rope_theta=float(theta), attn_bias=cfg.get("attention_bias", False),
                mlp_bias=cfg.get("mlp_bias", False), attn_scale=1.0 / math.sqrt(d),
                tied=cfg.get("tie_word_embeddings", False), prefix="model.", qk_norm=False, experts=0)


# A sparse block's router and each expert's gate, up and down projections, by architecture.
SPARSE_NAMES = {"mixtral": ("block_sparse_moe.", ("w1", "w3", "w2")),
                "qwen3_moe": ("mlp.", ("gate_proj", "up_proj", "down_proj"))}


def mixtral_config(cfg):
    """MixtralConfig: Llama's fields with every MLP a sparse block of intermediate_size experts,
    the chosen k renormalised."""
    if cfg.get("sliding_window") is not None:
        raise Unsupported(f"mixtral sliding_window {cfg['sliding_window']!r} (only null)")
    c = llama_config(cfg)
    c.update(arch="mixtral", experts=cfg["num_local_experts"], topk=cfg.get("num_experts_per_tok", 2),
             moe_ffn=cfg["intermediate_size"], norm_topk=True)
    return c


def qwen3_config(cfg):
    """Qwen3Config / Qwen3MoeConfig: Llama's fields, RMSNorm q_norm and k_norm on every head before
    RoPE, no MLP bias; the MoE form's sparse block in every layer."""
    if cfg.get("use_sliding_window", False):
        raise Unsupported("qwen3 use_sliding_window = true")
    c = llama_config(dict(cfg, mlp_bias=False))
    c.update(arch=cfg["model_type"], qk_norm=True)
    if cfg["model_type"] == "qwen3_moe":
        if cfg.get("decoder_sparse_step", 1) != 1 or cfg.get("mlp_only_layers"):
            raise Unsupported("qwen3_moe with dense layers (decoder_sparse_step, mlp_only_layers)")
        c.update(experts=cfg["num_experts"], topk=cfg["num_experts_per_tok"],
                 moe_ffn=cfg["moe_intermediate_size"], norm_topk=cfg.get("norm_topk_prob", False))
    return c


CONFIGS = {"gpt2": gpt2_config, "llama": llama_config, "mixtral": mixtral_config, "qwen3": qwen3_config,
           "qwen3_moe": qwen3_config}


def param_shapes(c):
    """(HF name, shape, kind) of every parameter, in HF state_dict order (also the draw order)."""
    V, h, f, L = c["vocab"], c["hidden"], c["ffn"], c["layers"]
    n, g, d = c["heads"], c["kv_heads"], c["head_dim"]
    out = []
    if c["arch"] == "gpt2":
        out += [("transformer.wte.weight", (V, h), "mat"), ("transformer.wpe.weight", (c["max_pos"], h), "mat")]
        for i in range(L):
            p = f"transformer.h.{i}."
            for ln in ("ln_1", "ln_2"):  # Conv1D weights are [in, out]
                lin = [("attn.c_attn", h, 3 * h), ("attn.c_proj", h, h)] if ln == "ln_1" else \
                      [("mlp.c_fc", h, f), ("mlp.c_proj", f, h)]
                out += [(p + ln + ".weight", (h,), "norm_w"), (p + ln + ".bias", (h,), "norm_b")]
                for name, i_, o_ in lin:
                    out += [(p + name + ".weight", (i_, o_), "mat"), (p + name + ".bias", (o_,), "bias")]
        out += [("transformer.ln_f.weight", (h,), "norm_w"), ("transformer.ln_f.bias", (h,), "norm_b")]
    else:
        out.append(("model.embed_tokens.weight", (V, h), "mat"))
        for i in range(L):
            p = f"model.layers.{i}."
            out.append((p + "input_layernorm.weight", (h,), "norm_w"))
            for name, o_, i_ in (("q_proj", n * d, h), ("k_proj", g * d, h), ("v_proj", g * d, h),
                                 ("o_proj", h, n * d)):  # nn.Linear weights are [out, in]
                out.append((p + "self_attn." + name + ".weight", (o_, i_), "mat"))
                if c["attn_bias"]:
                    out.append((p + "self_attn." + name + ".bias", (o_,), "bias"))
            if c["qk_norm"]:
                out += [(p + "self_attn.q_norm.weight", (d,), "norm_w"), (p + "self_attn.k_norm.weight", (d,), "norm_w")]
            out.append((p + "post_attention_layernorm.weight", (h,), "norm_w"))
            sparse, (gate, up, down) = SPARSE_NAMES.get(c["arch"], ("mlp.", ("gate_proj", "up_proj", "down_proj")))
            experts = [f"{sparse}experts.{e}." for e in range(c["experts"])]
            if experts:  # the router, then each expert's MLP
                out.append((p + sparse + "gate.weight", (c["experts"], h), "mat"))
            w = c["moe_ffn"] if experts else f
            for mlp in experts or ["mlp."]:
                for name, o_, i_ in ((gate, w, h), (up, w, h), (down, h, w)):
                    out.append((p + mlp + name + ".weight", (o_, i_), "mat"))
                    if c["mlp_bias"]:
                        out.append((p + mlp + name + ".bias", (o_,), "bias"))
        out.append(("model.norm.weight", (h,), "norm_w"))
    if not c["tied"]:
        out.append(("lm_head.weight", (V, h), "mat"))
    return out


# Non-parameter buffers that older checkpoints carry; transformers ignores them too.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")


def load_hf(d):
    """Read an HF directory into (config dict, {HF name: float64 tensor}), checking every tensor."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    mt = cfg.get("model_type")
    if mt not in CONFIGS:
        raise Unsupported(f"{d}: model_type {mt!r} (only {', '.join(CONFIGS)})")
    c = CONFIGS[mt](cfg)
    raw = read_hf_tensors(d)
    # Base-model checkpoints (e.g. openai-community/gpt2) omit the "transformer." / "model." prefix.
    T = {(k if k.startswith((c["prefix"], "lm_head.")) else c["prefix"] + k): v for k, v in raw.items()}
    P = {}
    for name, shape, _ in param_shapes(c):
        if name not in T:
            raise ValueError(f"{d}: tensor {name} missing")
        if tuple(T[name].shape) != shape:
            raise ValueError(f"{d}: tensor {name} has shape {list(T[name].shape)}, config says {list(shape)}")
        P[name] = T[name]
    extra = [k for k in T if k not in P and not k.endswith(IGNORED_SUFFIXES)
             and not (c["tied"] and k == "lm_head.weight")]  # a tied copy: transformers overwrites it
    if extra:
        raise Unsupported(f"{d}: unexpected tensors {sorted(extra)[:5]}")
    return c, P


# ---------------------------------------------------------------- forward
def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance, as nn.LayerNorm
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def linear(P, name, x):
    """nn.Linear: weight [out, in], y = x W^T + b."""
    y = x @ P[name + ".weight"].T
    return y + P[name + ".bias"] if name + ".bias" in P else y


def conv1d(P, name, x):
    """transformers' Conv1D: weight [in, out], y = x W + b."""
    return x @ P[name + ".weight"] + P[name + ".bias"]


def causal_attention(q, k, v, scale):
    """q, k, v [b, heads, s, d] -> [b, s, heads*d]."""
    b, n, s, d = q.shape
    scores = (q @ k.transpose(-1, -2)) * scale
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    return (probs @ v).transpose(1, 2).reshape(b, s, n * d)


def rope_cos_sin(c, s):
    """LlamaRotaryEmbedding (rope_type default): [s, d] cos and sin, halves duplicated."""
    d = c["head_dim"]
    inv_freq = 1.0 / c["rope_theta"] ** (torch.arange(0, d, 2, dtype=F64) / d)
    freqs = torch.arange(s, dtype=F64)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def gpt2_forward(c, P, tokens):
    b, s = tokens.shape
    h, n, d, eps = c["hidden"], c["heads"], c["head_dim"], c["eps"]
    act = GPT2_ACTS[c["act"]]
    x = P["transformer.wte.weight"][tokens] + P["transformer.wpe.weight"][:s]
    split = lambda t: t.reshape(b, s, n, d).transpose(1, 2)  # noqa: E731  heads contiguous
    for i in range(c["layers"]):
        p = f"transformer.h.{i}."
        a = layer_norm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        q, k, v = conv1d(P, p + "attn.c_attn", a).split(h, dim=-1)  # columns [q | k | v]
        x = x + conv1d(P, p + "attn.c_proj", causal_attention(split(q), split(k), split(v), c["attn_scale"]))
        a = layer_norm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        x = x + conv1d(P, p + "mlp.c_proj", act(conv1d(P, p + "mlp.c_fc", a)))
    x = layer_norm(x, P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps)
    return x @ P["transformer.wte.weight" if c["tied"] else "lm_head.weight"].T


def swiglu_mlp(P, prefix, a, names=("gate_proj", "up_proj", "down_proj")):
    gate_name, up_name, down_name = names
    gate = linear(P, prefix + gate_name, a)
    return linear(P, prefix + down_name, gate * torch.sigmoid(gate) * linear(P, prefix + up_name, a))


def sparse_moe_block(c, P, p, a):
    """MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock: softmax over every expert, the top k kept
    (renormalised: Mixtral, Qwen3 with norm_topk_prob), each token the weighted sum of its k
    experts' SwiGLU MLPs."""
    sparse, names = SPARSE_NAMES[c["arch"]]
    probs = torch.softmax(linear(P, p + sparse + "gate", a), dim=-1)     # [b, s, E]
    weights, chosen = torch.topk(probs, c["topk"], dim=-1)
    if c["norm_topk"]:
        weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(a)
    for e in range(c["experts"]):
        w = (weights * (chosen == e)).sum(-1, keepdim=True)               # 0 where e is not chosen
        out = out + w * swiglu_mlp(P, p + f"{sparse}experts.{e}.", a, names)
    return out


def llama_forward(c, P, tokens):
    b, s = tokens.shape
    n, g, d, eps = c["heads"], c["kv_heads"], c["head_dim"], c["eps"]
    cos, sin = rope_cos_sin(c, s)
    x = P["model.embed_tokens.weight"][tokens]
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        a = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q, k, v = (linear(P, p + "self_attn." + nm, a).reshape(b, s, heads, d)
                   for nm, heads in (("q_proj", n), ("k_proj", g), ("v_proj", g)))
        if c["qk_norm"]:  # Qwen3: each head's d values, before RoPE
            q, k = rms_norm(q, P[p + "self_attn.q_norm.weight"], eps), rms_norm(k, P[p + "self_attn.k_norm.weight"], eps)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        # repeat_kv: key/value head j serves query heads j*(n/g) .. j*(n/g) + n/g - 1
        k, v = k.repeat_interleave(n // g, dim=1), v.repeat_interleave(n // g, dim=1)
        x = x + linear(P, p + "self_attn.o_proj", causal_attention(q, k, v, c["attn_scale"]))
        a = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        x = x + (sparse_moe_block(c, P, p, a) if c["experts"] else swiglu_mlp(P, p + "mlp.", a))
    x = rms_norm(x, P["model.norm.weight"], eps)
    return x @ P["model.embed_tokens.weight" if c["tied"] else "lm_head.weight"].T


def forward(c, P, tokens):
    """tokens [b, s] (int) -> float64 logits [b, s, V]."""
    tokens = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
    if tokens.min() < 0 or tokens.max() >= c["vocab"]:
        raise ValueError(f"token ids outside [0, {c['vocab']})")
    if c["max_pos"] is not None and tokens.shape[1] > c["max_pos"]:
        raise ValueError(f"sequence length {tokens.shape[1]} > max positions {c['max_pos']}")
    with torch.no_grad():
        return (gpt2_forward if c["arch"] == "gpt2" else llama_forward)(c, P, tokens)


# ---------------------------------------------------------------- fixtures
FIXTURES = {
    "hf_gpt2": dict(seed=20240601, config={
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": 100, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 32, "n_ctx": 32,
        "n_inner": 64, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1, "initializer_range": 0.02,
        "bos_token_id": 99, "eos_token_id": 99, "use_cache": True, "torch_dtype": "float32"}),
    "hf_llama": dict(seed=20240602, config={
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 100, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "max_position_embeddings": 32, "rms_norm_eps": 1e-6, "rope_theta": 50000.0,
        "rope_scaling": None, "hidden_act": "silu", "attention_bias": False,
        "attention_dropout": 0.0, "mlp_bias": False, "tie_word_embeddings": False,
        "pretraining_tp": 1, "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2,
        "use_cache": True, "torch_dtype": "float32"}),
    # head_dim 12 with hidden 32 and 4 heads, tied embeddings (as the small Qwen3 models).
    "hf_qwen3": dict(seed=20240603, config={
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": 100, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
        "max_position_embeddings": 32, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "rope_scaling": None, "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
        "tie_word_embeddings": True, "initializer_range": 0.02, "bos_token_id": 98, "eos_token_id": 99,
        "use_cache": True, "torch_dtype": "float32"}),
    "hf_mixtral": dict(seed=20240605, config={
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "vocab_size": 100, "hidden_size": 32, "intermediate_size": 24, "num_local_experts": 4,
        "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02, "output_router_logits": False,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
        "hidden_act": "silu", "attention_dropout": 0.0, "sliding_window": None,
        "tie_word_embeddings": False, "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2,
        "use_cache": True, "torch_dtype": "float32"}),
    "hf_qwen3_moe": dict(seed=20240604, config={
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": 100, "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 24,
        "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "router_aux_loss_coef": 0.001, "output_router_logits": False,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "max_position_embeddings": 32, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "rope_scaling": None, "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
        "tie_word_embeddings": False, "initializer_range": 0.02, "bos_token_id": 98, "eos_token_id": 99,
        "use_cache": True, "torch_dtype": "float32"}),
}
BATCH, SEQ = 2, 16
DRAW = {"mat": lambda r: 0.1 * r, "bias": lambda r: 0.1 * r,
        "norm_w": lambda r: 1.0 + 0.1 * r, "norm_b": lambda r: 0.1 * r}


def make_fixture(name, outdir):
    spec = FIXTURES[name]
    cfg = spec["config"]
    c = CONFIGS[cfg["model_type"]](cfg)
    gen = torch.Generator().manual_seed(spec["seed"])
    tokens = torch.randint(0, c["vocab"], (BATCH, SEQ), generator=gen)
    params = {nm: DRAW[kind](torch.randn(shape, generator=gen, dtype=F64)).numpy().astype(np.float32)
              for nm, shape, kind in param_shapes(c)}
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:  # as transformers' save_pretrained writes it
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    write_safetensors(os.path.join(d, "model.safetensors"), params, {"format": "pt"})
    c2, P = load_hf(d)  # the logits come from the directory as written (float32 weights)
    logits = forward(c2, P, tokens)
    ref = os.path.join(outdir, name + "_reference.safetensors")
    write_safetensors(ref, {"tokens": tokens.numpy().astype(np.int32),
                            "logits": logits.numpy().astype(np.float32)},
                      {"format": "pt", "generator": "tools/ref/hf_ref.py", "model": name})
    print(f"[{name}] {d}/ ({os.path.getsize(os.path.join(d, 'model.safetensors'))} bytes), {ref}: "
          f"logits {list(logits.shape)}, max |logit| {logits.abs().max().item():.4f}, "
          f"std {logits.std().item():.4f}")


# ---------------------------------------------------------------- main
def read_tokens(path):
    T, _ = read_safetensors(path)
    if "tokens" not in T:
        raise ValueError(f"{path}: no 'tokens' tensor")
    return T, T["tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make-fixtures", metavar="DIR", help="write DIR/hf_<model>/ and references")
    ap.add_argument("--check", metavar="HF_DIR", help="compare HF_DIR's logits with --reference")
    ap.add_argument("--reference", metavar="FILE", help="safetensors with tokens and logits")
    ap.add_argument("--logits", metavar="HF_DIR", help="write logits of HF_DIR on --tokens to --out")
    ap.add_argument("--tokens", metavar="FILE", help="safetensors with tokens (I32/I64 [b, s])")
    ap.add_argument("--out", metavar="OUT")
    a = ap.parse_args()
    try:
        if a.make_fixtures:
            for name in FIXTURES:
                make_fixture(name, a.make_fixtures)
        elif a.check and a.reference:
            T, tokens = read_tokens(a.reference)
            logits = forward(*load_hf(a.check), tokens)
            want = torch.from_numpy(T["logits"].astype(np.float64))
            if tuple(want.shape) != tuple(logits.shape):
                print(f"FAIL: logits shape {list(logits.shape)}, reference {list(want.shape)}")
                return 1
            err = (logits - want).abs().max().item()
            ok = err <= TOLERANCE
            print(f"{a.check}: max |logits - reference| = {err:.3e} "
                  f"(max |logit| {want.abs().max().item():.4f}, tolerance {TOLERANCE:g}) "
                  f"{'OK' if ok else 'FAIL'}")
            return 0 if ok else 1
        elif a.logits and a.tokens and a.out:
            _, tokens = read_tokens(a.tokens)
            logits = forward(*load_hf(a.logits), tokens)
            write_safetensors(a.out, {"tokens": np.asarray(tokens, np.int32),
                                      "logits": logits.numpy().astype(np.float32)},
                              {"format": "pt", "generator": "tools/ref/hf_ref.py"})
            print(f"wrote {a.out}: logits {list(logits.shape)}")
        else:
            ap.error("give --make-fixtures DIR, --check HF_DIR --reference FILE, "
                     "or --logits HF_DIR --tokens FILE --out OUT")
    except Unsupported as e:
        print(f"unsupported checkpoint: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        print(f"error: missing field or tensor {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
