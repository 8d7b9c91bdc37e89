#!/usr/bin/python3
"""PyTorch float64 reference for megatron.cpp's GPT model (golden test fixtures).

Builds a tiny GPT with Megatron-Core semantics (local-spec parameter names,
[s, b, h] activations, fused GQA linear_qkv layout, pre-norm layers), draws its
weights from a fixed seed, and records into one safetensors file:

  tokens, labels (I32 [b, s]), every parameter (initial weights),
  logits [s, b, V], loss [1], grad.<param> (gradient of the mean loss),
  traj.loss [10], traj.grad_norm [10] (10 AdamW steps on the same batch),
  and the model / optimizer config as string __metadata__.

All maths runs in float64 so the fixture is the precise truth; tensors are
stored as float32 (inputs as int32).  Output is byte-for-byte deterministic.

Run (needs Debian's python3-torch; the pyenv python has no torch):
  /usr/bin/python3 tools/ref/gpt_ref.py --config gpt2 --out tests/golden/ref_gpt2.safetensors
  /usr/bin/python3 tools/ref/gpt_ref.py --all tests/golden   # every config
"""
import argparse, json, math, os, struct

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
F64 = torch.float64

BASE = dict(num_layers=2, hidden_size=32, num_attention_heads=4, kv_channels=8,
            seq_length=16, micro_batch_size=2, vocab_size=100, padded_vocab_size=128,
            max_position_embeddings=32, rotary_base=10000.0, lr=1e-2, adam_beta1=0.9,
            adam_beta2=0.95, adam_eps=1e-8, weight_decay=0.1, clip_grad=1.0)
CONFIGS = {
    "gpt2": dict(BASE, seed=1234, num_query_groups=4, ffn_hidden_size=128,
                 normalization="LayerNorm", norm_epsilon=1e-5, activation="gelu_tanh",
                 add_bias_linear=True, position_embedding_type="learned_absolute",
                 untie_embeddings_and_output_weights=False),
    "llama": dict(BASE, seed=5678, num_query_groups=2, ffn_hidden_size=48,
                  normalization="RMSNorm", norm_epsilon=1e-6, activation="swiglu",
                  add_bias_linear=False, position_embedding_type="rope",
                  untie_embeddings_and_output_weights=True),
    # Qwen3's attention: RMSNorm on every query and key head before RoPE (--qk-layernorm), with a
    # head dim that is not hidden / heads.
    "qwen3": dict(BASE, seed=9012, num_query_groups=2, kv_channels=12, ffn_hidden_size=48,
                  normalization="RMSNorm", norm_epsilon=1e-6, activation="swiglu",
                  add_bias_linear=False, position_embedding_type="rope",
                  untie_embeddings_and_output_weights=True, qk_layernorm=True),
}
STEPS = 10


def param_shapes(c):
    """Parameter names/shapes in Megatron-Core order; this order is also the draw order."""
    h, n, g, d, f = (c["hidden_size"], c["num_attention_heads"], c["num_query_groups"],
                     c["kv_channels"], c["ffn_hidden_size"])
    V, bias, ln = c["padded_vocab_size"], c["add_bias_linear"], c["normalization"] == "LayerNorm"
    fc1_out = 2 * f if c["activation"] == "swiglu" else f
    out = [("embedding.word_embeddings.weight", (V, h), "mat")]
    if c["position_embedding_type"] == "learned_absolute":
        out.append(("embedding.position_embeddings.weight", (c["max_position_embeddings"], h), "mat"))

    def norm(name, width=h):
        out.append((name + ".weight", (width,), "norm_w"))
        if ln:
            out.append((name + ".bias", (width,), "norm_b"))

    def linear(name, o, i):
        out.append((name + ".weight", (o, i), "mat"))
        if bias:
            out.append((name + ".bias", (o,), "bias"))

    for i in range(c["num_layers"]):
        p = f"decoder.layers.{i}."
        norm(p + "input_layernorm")
        linear(p + "self_attention.linear_qkv", g * (n // g + 2) * d, h)
        if c.get("qk_layernorm"):
            norm(p + "self_attention.q_layernorm", d)
            norm(p + "self_attention.k_layernorm", d)
        linear(p + "self_attention.linear_proj", h, n * d)
        norm(p + "pre_mlp_layernorm")
        linear(p + "mlp.linear_fc1", fc1_out, h)
        linear(p + "mlp.linear_fc2", h, f)
    norm("decoder.final_layernorm")
    if c["untie_embeddings_and_output_weights"]:
        out.append(("output_layer.weight", (V, h), "mat"))
    return out


def draw_inputs(c):
    torch.manual_seed(c["seed"])
    shape = (c["micro_batch_size"], c["seq_length"])
    tokens = torch.randint(0, c["vocab_size"], shape)
    labels = torch.randint(0, c["vocab_size"], shape)
    params = {}
    for name, shp, kind in param_shapes(c):
        r = torch.randn(shp, dtype=F64)
        params[name] = {"mat": 0.05 * r, "bias": 0.02 * r,
                        "norm_w": 1.0 + 0.1 * r, "norm_b": 0.02 * r}[kind]
    return tokens, labels, params


# ---------------------------------------------------------------- model pieces
def norm(P, name, x, c):
    eps = c["norm_epsilon"]
    if c["normalization"] == "LayerNorm":
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance, as nn.LayerNorm
        return (x - mu) / torch.sqrt(var + eps) * P[name + ".weight"] + P[name + ".bias"]
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * P[name + ".weight"]


def linear(P, name, x):
    y = x @ P[name + ".weight"].T
    return y + P[name + ".bias"] if name + ".bias" in P else y


def rope_cos_sin(c, s):
    d = c["kv_channels"]
    inv_freq = c["rotary_base"] ** (-torch.arange(0, d, 2, dtype=F64) / d)
    ang = torch.arange(s, dtype=F64)[:, None] * inv_freq[None, :]       # [s, d/2]
    emb = torch.cat([ang, ang], -1)[:, None, None, :]                    # [s, 1, 1, d]
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def attention(P, prefix, x, c):
    """Core attention on normed input x [s, b, h]; returns context [s, b, n*d] (before linear_proj)."""
    s, b, _ = x.shape
    n, g, d = c["num_attention_heads"], c["num_query_groups"], c["kv_channels"]
    qkv = linear(P, prefix + "linear_qkv", x).reshape(s, b, g, n // g + 2, d)
    q = qkv[:, :, :, : n // g].reshape(s, b, n, d)   # head hq = group*(n/g) + j
    k, v = qkv[:, :, :, n // g], qkv[:, :, :, n // g + 1]  # [s, b, g, d]
    if c.get("qk_layernorm"):  # each head's d values, before RoPE
        q, k = norm(P, prefix + "q_layernorm", q, c), norm(P, prefix + "k_layernorm", k, c)
    if c["position_embedding_type"] == "rope":
        cos, sin = rope_cos_sin(c, s)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    k, v = k.repeat_interleave(n // g, dim=2), v.repeat_interleave(n // g, dim=2)
    q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, n, s, d]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    return (probs @ v).permute(2, 0, 1, 3).reshape(s, b, n * d)


def gelu_tanh(y):
    return 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y ** 3)))


def mlp(P, prefix, x, c):
    y = linear(P, prefix + "linear_fc1", x)
    if c["activation"] == "swiglu":
        gate, up = y.chunk(2, dim=-1)  # first ffn columns gate, last ffn up
        y = gate * torch.sigmoid(gate) * up
    else:
        y = gelu_tanh(y)
    return linear(P, prefix + "linear_fc2", y)


def embed(P, tokens, c):
    x = P["embedding.word_embeddings.weight"][tokens.T]  # [s, b, h]
    if "embedding.position_embeddings.weight" in P:
        x = x + P["embedding.position_embeddings.weight"][: tokens.shape[1], None, :]
    return x


def forward(P, tokens, labels, c):
    x = embed(P, tokens, c)
    for i in range(c["num_layers"]):
        p = f"decoder.layers.{i}."
        x = x + linear(P, p + "self_attention.linear_proj",
                       attention(P, p + "self_attention.", norm(P, p + "input_layernorm", x, c), c))
        x = x + mlp(P, p + "mlp.", norm(P, p + "pre_mlp_layernorm", x, c), c)
    x = norm(P, "decoder.final_layernorm", x, c)
    w_out = P["output_layer.weight" if c["untie_embeddings_and_output_weights"]
              else "embedding.word_embeddings.weight"]
    logits = x @ w_out.T                                                 # [s, b, V]
    # Cross entropy over all padded_vocab_size logits (Megatron does not mask padding).
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    nll = -logp.gather(-1, labels.T[..., None]).squeeze(-1)              # [s, b]
    return logits, nll.mean()


def loss_and_grads(P, tokens, labels, c):
    Pg = {k: v.detach().clone().requires_grad_(True) for k, v in P.items()}
    logits, loss = forward(Pg, tokens, labels, c)
    loss.backward()
    return logits.detach(), loss.detach(), {k: v.grad for k, v in Pg.items()}


# ---------------------------------------------------------------- optimizer
def trajectory(P, tokens, labels, c):
    """Hand-written Megatron-style step: global-norm clip, then AdamW (decay on ndim >= 2 only)."""
    P = {k: v.clone() for k, v in P.items()}
    m = {k: torch.zeros_like(v) for k, v in P.items()}
    vv = {k: torch.zeros_like(v) for k, v in P.items()}
    b1, b2, lr, eps, wd = c["adam_beta1"], c["adam_beta2"], c["lr"], c["adam_eps"], c["weight_decay"]
    losses, norms = [], []
    for t in range(1, STEPS + 1):
        _, loss, G = loss_and_grads(P, tokens, labels, c)
        gnorm = math.sqrt(sum(float((g * g).sum()) for g in G.values()))
        losses.append(float(loss)); norms.append(gnorm)
        coeff = c["clip_grad"] / (gnorm + 1e-6)
        if coeff < 1.0:  # Megatron applies the coefficient only when it shrinks grads
            G = {k: g * coeff for k, g in G.items()}
        for k in P:
            if P[k].ndim >= 2:
                P[k] = P[k] * (1.0 - lr * wd)
            m[k] = b1 * m[k] + (1 - b1) * G[k]
            vv[k] = b2 * vv[k] + (1 - b2) * G[k] ** 2
            m_hat, v_hat = m[k] / (1 - b1 ** t), vv[k] / (1 - b2 ** t)
            P[k] = P[k] - lr * m_hat / (v_hat.sqrt() + eps)
    return losses, norms, P


# ---------------------------------------------------------------- self-checks
def check(what, err, tol):
    print(f"  check {what:<42} err={err:.3e}")
    assert err < tol, f"self-check failed: {what}: {err} >= {tol}"


def self_checks(P, tokens, labels, c, grads, traj_losses, traj_P):
    n, g, d, s = c["num_attention_heads"], c["num_query_groups"], c["kv_channels"], c["seq_length"]
    with torch.no_grad():
        x0 = embed(P, tokens, c)
        # Building blocks against torch's own implementations.
        ln = norm(P, "decoder.layers.0.input_layernorm", x0, c)
        if c["normalization"] == "LayerNorm":
            ref = F.layer_norm(x0, (x0.shape[-1],), P["decoder.layers.0.input_layernorm.weight"],
                               P["decoder.layers.0.input_layernorm.bias"], c["norm_epsilon"])
            check("LayerNorm vs F.layer_norm", (ln - ref).abs().max().item(), 1e-12)
            y = torch.linspace(-6, 6, 101)
            check("gelu_tanh vs F.gelu(approximate=tanh)",
                  (gelu_tanh(y) - F.gelu(y, approximate="tanh")).abs().max().item(), 1e-12)
        # Attention: one head per batch row via explicit loops, reading q/k/v columns
        # straight out of linear_qkv by the documented fused-GQA index arithmetic.
        ctx = attention(P, "decoder.layers.0.self_attention.", ln, c)
        qkv = linear(P, "decoder.layers.0.self_attention.linear_qkv", ln)
        per_group = (n // g + 2) * d
        err = 0.0
        for bi, hq in ((0, n - 1), (1, 1)):
            grp, j = divmod(hq, n // g)
            q = qkv[:, bi, grp * per_group + j * d: grp * per_group + (j + 1) * d]
            k = qkv[:, bi, grp * per_group + (n // g) * d: grp * per_group + (n // g + 1) * d]
            v = qkv[:, bi, grp * per_group + (n // g + 1) * d: grp * per_group + per_group]
            if c.get("qk_layernorm"):  # RMSNorm written out: x / sqrt(mean(x^2) + eps) * w
                def rms(t, name):
                    w = P["decoder.layers.0.self_attention." + name + ".weight"]
                    return t / torch.sqrt((t * t).mean(-1, keepdim=True) + c["norm_epsilon"]) * w
                q, k = rms(q, "q_layernorm"), rms(k, "k_layernorm")
            if c["position_embedding_type"] == "rope":  # complex form: pair (i, i + d/2)
                def rot(t):
                    z = torch.complex(t[:, : d // 2], t[:, d // 2:])
                    th = torch.tensor([[p * c["rotary_base"] ** (-2 * i / d) for i in range(d // 2)]
                                       for p in range(s)])
                    z = z * torch.polar(torch.ones_like(th), th)
                    return torch.cat([z.real, z.imag], -1)
                q, k = rot(q), rot(k)
            for qi in range(s):
                sc = [float(q[qi] @ k[ki]) / math.sqrt(d) for ki in range(qi + 1)]
                mx = max(sc)
                e = [math.exp(x - mx) for x in sc]
                out = sum(e[ki] / sum(e) * v[ki] for ki in range(qi + 1))
                err = max(err, (out - ctx[qi, bi, hq * d:(hq + 1) * d]).abs().max().item())
        check("attention vs naive loop (2 heads)", err, 1e-12)
        logits, loss = forward(P, tokens, labels, c)
        ref = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.T.reshape(-1))
        check("loss vs F.cross_entropy", abs(loss.item() - ref.item()), 1e-12)
        # Central finite differences on the largest-gradient entry of several params.
        names = [nm for nm in P if "layers.1.self_attention.linear_qkv.weight" in nm
                 or "layers.0.mlp.linear_fc1.weight" in nm or "final_layernorm.weight" in nm
                 or "word_embeddings" in nm or "layers.0.input_layernorm.weight" in nm
                 or "layers.1.self_attention.k_layernorm.weight" in nm]
        if c["add_bias_linear"]:
            names.append("decoder.layers.1.mlp.linear_fc2.bias")
        h = 1e-5
        for nm in names:
            idx = int(grads[nm].abs().argmax())
            Q = dict(P); Q[nm] = P[nm].clone()
            Q[nm].view(-1)[idx] += h
            lp = forward(Q, tokens, labels, c)[1].item()
            Q[nm].view(-1)[idx] -= 2 * h
            lm = forward(Q, tokens, labels, c)[1].item()
            fd, an = (lp - lm) / (2 * h), grads[nm].view(-1)[idx].item()
            check(f"finite diff {nm.replace('decoder.layers.', 'L')}", abs(fd - an) / abs(an), 1e-6)
    # Hand-written optimizer vs torch.optim.AdamW + clip_grad_norm_.
    Pt = {k: v.clone().requires_grad_(True) for k, v in P.items()}
    opt = torch.optim.AdamW(
        [{"params": [p for p in Pt.values() if p.ndim >= 2], "weight_decay": c["weight_decay"]},
         {"params": [p for p in Pt.values() if p.ndim < 2], "weight_decay": 0.0}],
        lr=c["lr"], betas=(c["adam_beta1"], c["adam_beta2"]), eps=c["adam_eps"])
    tl = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = forward(Pt, tokens, labels, c)[1]
        loss.backward()
        tl.append(loss.item())
        torch.nn.utils.clip_grad_norm_(list(Pt.values()), c["clip_grad"])
        opt.step()
    check("trajectory loss vs torch.optim.AdamW", max(abs(a - b) for a, b in zip(tl, traj_losses)), 1e-12)
    check("final params vs torch.optim.AdamW",
          max((Pt[k].detach() - traj_P[k]).abs().max().item() for k in P), 1e-10)


# ---------------------------------------------------------------- safetensors
def write_safetensors(path, tensors, metadata):
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        arr = tensors[name]
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": {np.float32: "F32", np.int32: "I32"}[arr.dtype.type],
                        "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw); off += len(raw)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj))); f.write(hj)
        for raw in blobs:
            f.write(raw)


def generate(name, out):
    c = CONFIGS[name]
    print(f"[{name}] -> {out}")
    tokens, labels, P = draw_inputs(c)
    logits, loss, grads = loss_and_grads(P, tokens, labels, c)
    losses, norms, traj_P = trajectory(P, tokens, labels, c)
    self_checks(P, tokens, labels, c, grads, losses, traj_P)
    for t, (l, gn) in enumerate(zip(losses, norms)):
        print(f"  step {t}: loss {l:.6f}  grad_norm {gn:.6f}")
    assert losses[-1] < losses[0], "loss did not fall"
    f32 = lambda t: t.detach().numpy().astype(np.float32)
    T = {"tokens": tokens.numpy().astype(np.int32), "labels": labels.numpy().astype(np.int32),
         "logits": f32(logits), "loss": f32(loss.reshape(1)),
         "traj.loss": np.array(losses, np.float32), "traj.grad_norm": np.array(norms, np.float32)}
    for k in P:
        T[k], T["grad." + k] = f32(P[k]), f32(grads[k])
    meta = {k: (("true" if v else "false") if isinstance(v, bool) else str(v))
            for k, v in c.items()}
    meta["generator"] = "tools/ref/gpt_ref.py"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_safetensors(out, T, meta)
    print(f"  wrote {os.path.getsize(out)} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS))
    ap.add_argument("--out", help="output .safetensors path (with --config)")
    ap.add_argument("--all", metavar="OUTDIR", help="write OUTDIR/ref_<config>.safetensors for every config")
    a = ap.parse_args()
    if a.all:
        for name in CONFIGS:
            generate(name, os.path.join(a.all, f"ref_{name}.safetensors"))
    elif a.config and a.out:
        generate(a.config, a.out)
    else:
        ap.error("give --config and --out, or --all OUTDIR")


if __name__ == "__main__":
    main()
