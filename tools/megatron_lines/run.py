#!/usr/bin/env python3
"""Run Megatron-LM's training command lines through megatron.cpp and tabulate what happens.

usage: run.py [--lines DIR] [--megatron BIN] [--subset NAMES] [--limit N] [--markdown FILE]
              [--json FILE] [--timeout S] [--no-train] [--no-peel] [--show NAME] [--keep]

Each stored line (tests/golden/megatron_lines/*/*.json, written by extract.py) is changed in two
ways only, by the fixed tables below (PATH_RULES, Scaled._size_rules; README.md states them as
tables); no other flag is dropped, added or changed:
- paths: data prefixes become a small dataset written on the fly, tokenizer files small ones, and
  save/load/TensorBoard/cache directories a temporary directory;
- sizes: layers, widths, heads, sequence length, vocabulary, experts, batch sizes, run length
  (3 iterations), evaluation, and the parallel sizes (each at most 2, the world at most 8 ranks,
  4 where the layout allows).
Then `megatron plan LINE --world-size N` and a 3-iteration `megatron train LINE` (under
`mpirun -np N --oversubscribe --allow-run-as-root` with OMP_NUM_THREADS=1 when N > 1) run, and a
table gives per line: ranks, plan ok?, train ok?, the first error. Unless --no-peel, the flags the
line has that megatron.cpp refuses are all listed by re-running plan without each refused flag in
turn (a diagnosis only: the plan and train verdicts are for the line as it stands).
Standard library only.
"""

import argparse
import collections
import fnmatch
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_assets  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN_ITERS = 3

# ------------------------------------------------------------------------------------------------
# The replacement tables
# ------------------------------------------------------------------------------------------------

# flag -> what its value becomes. 'data' is the small dataset's prefix; 'tmp:NAME' a path in the
# line's temporary directory ('tmpdir:' also creates it, 'tmpfile:' creates it empty).
PATH_RULES = {
    "--data-path": "data", "--train-data-path": "data", "--valid-data-path": "data",
    "--test-data-path": "data",
    "--data-args-path": "data-args-file", "--per-split-data-args-path": "per-split-data-args-file",
    "--data-cache-path": "tmp:data-cache",
    "--vocab-file": "gpt2-vocab", "--merge-file": "gpt2-merges",
    "--tokenizer-model": "tokenizer-model",
    "--save": "tmp:checkpoints",
    "--load": "load",  # tmp:checkpoints when it was the same as --save, else an empty tmpdir:load
    "--pretrained-checkpoint": "tmpdir:pretrained",
    "--tensorboard-dir": "tmp:tensorboard", "--wandb-save-dir": "tmp:wandb",
    "--export-kd-teacher-load": "tmpdir:kd-teacher", "--export-kd-cfg": "tmpfile:kd-config.yaml",
    "--tp-comm-overlap-cfg": "tmpfile:tp-comm-overlap.yaml",
    "--memory-snapshot-path": "tmp:memory-snapshot.pickle",
    "--flight-recorder-dump-path": "tmp:flight-recorder",
    "--non-persistent-global-ckpt-dir": "tmp:non-persistent-global",
    "--non-persistent-local-ckpt-dir": "tmp:non-persistent-local",
    "--ckpt-convert-save": "tmp:converted", "--config-logger-dir": "tmp:config-logger",
    "--result-rejected-tracker-filename": "tmp:rejected.txt",
}
# Tokenizer types whose --tokenizer-model is a Hugging Face directory; the others get the small
# SentencePiece model.
HF_TOKENIZERS = ("HuggingFaceTokenizer", "SFTTokenizer", "MultimodalTokenizer")

# Flags that fix the layer structure per layer: with one of them --num-layers keeps its value.
LAYER_STRUCTURE_FLAGS = ("--pipeline-model-parallel-layout", "--hybrid-layer-pattern",
                         "--hybrid-override-pattern")

def parse_groups(argv):
    """[flag, [values]] in order; '--flag=value' is split. A leading value gets flag None."""
    groups = []
    for tok in argv:
        if tok.startswith("--") and len(tok) > 2:
            flag, eq, value = tok.partition("=")
            groups.append([flag, [value] if eq else []])
        elif groups:
            groups[-1][1].append(tok)
        else:
            groups.append([None, [tok]])
    return groups


def _int(values, default):
    try:
        return int(values[0])
    except (TypeError, ValueError, IndexError):
        return default


class Scaled:
    """A line with the tables applied: argv, ranks, and notes on what could not be kept."""

    def __init__(self, record, assets, tmp):
        self.notes = []
        groups = parse_groups(record["argv"])
        last = {}
        for flag, values in groups:
            last[flag] = values  # argparse: the last occurrence wins
        self.last = last
        self.assets, self.tmp = assets, tmp
        self._layout(record.get("world_size"))
        rules = self._size_rules()
        out = []
        for flag, values in groups:
            if flag in PATH_RULES:
                values = self._path(flag, values)
            elif flag in rules:
                values = rules[flag](values)
            if flag is not None:
                out.append(flag)
            out.extend(values)
        self.argv = out
        leftovers = [v for v in out if re.match(r"^/(mnt|workspace|lustre|tmp/checkpoints)\b", v)]
        if leftovers:
            self.notes.append("paths left as they were: " + ", ".join(sorted(set(leftovers))))

    # -- parallel layout ------------------------------------------------------------------------
    def _layout(self, world):
        g = lambda f, d: _int(self.last.get(f), d)  # noqa: E731
        tp, pp, cp = g("--tensor-model-parallel-size", 1), g("--pipeline-model-parallel-size", 1), \
            g("--context-parallel-size", 1)
        ep, etp = g("--expert-model-parallel-size", 1), g("--expert-tensor-parallel-size", None)
        model = max(1, tp * pp * cp)
        if world:
            dp = world // model if world >= model and world % model == 0 else 1
        else:
            dp = 2  # launch size unknown: assume some data parallelism
        self.tp, self.pp, self.cp, self.ep = min(tp, 2), min(pp, 2), min(cp, 2), min(ep, 2)
        self.etp = min(etp, 2) if etp is not None else self.tp
        if "--use-tp-pp-dp-mapping" in self.last and self.pp > 1:
            # Megatron: with pp before dp the expert layers share the dense layers' dp, so etp x ep must
            # stay tp x cp (the line's own sizes satisfy it; capping each at 2 may not).
            if etp is not None and etp * ep == tp * cp and (self.tp * self.cp) % self.ep == 0:
                self.etp = self.tp * self.cp // self.ep
            while self.etp * self.ep > self.tp * self.cp and self.etp > 1:
                self.etp //= 2
            while self.etp * self.ep > self.tp * self.cp and self.ep > 1:
                self.ep //= 2
        ok = lambda d: (self.tp * self.cp * d) % (self.etp * self.ep) == 0  # noqa: E731
        size = lambda d: self.tp * self.pp * self.cp * d  # noqa: E731
        candidates = list(dict.fromkeys([min(dp, 2), 1, 2]))
        chosen = next((d for d in candidates if ok(d) and size(d) <= 4), None)
        if chosen is None:
            chosen = next((d for d in candidates if ok(d) and size(d) <= 8), None)
        if chosen is None:
            self.notes.append(f"expert layout ep {self.ep} x etp {self.etp} does not fit: ep 1")
            self.ep, chosen = 1, min(dp, 2)
        self.dp = chosen
        self.world = size(chosen)
        self.mbs = 1
        self.gbs = self.mbs * self.dp * max(2, self.pp)
        self._batch_schedule()

    def _batch_schedule(self):
        """A --step-batch-size-schedule keeps up to 3 of its steps, each lasting one iteration:
        step i reads (i + 1) global batches, from the tokens the earlier steps read (sequence
        length 64). --global-batch-size becomes the final batch (the only value megatron.cpp
        accepts beside a schedule) and --train-samples what the 3 iterations read."""
        old = self.last.get("--step-batch-size-schedule")
        self.batches = [self.gbs]
        self.schedule = None
        if old:
            steps = max(1, min(3, len(" ".join(old).replace(",", " ").split())))
            self.batches = [(i + 1) * self.gbs for i in range(steps)]
            self.schedule = " ".join(f"{64 * sum(self.batches[:i])}:{b}" for i, b in enumerate(self.batches))
        self.final_gbs = self.batches[-1]
        per_iteration = (self.batches + [self.final_gbs] * TRAIN_ITERS)[:TRAIN_ITERS]
        self.train_samples = sum(per_iteration)

    def _layers(self):
        last = self.last
        if any(f in last for f in LAYER_STRUCTURE_FLAGS):
            return None
        freq = last.get("--moe-layer-freq")
        if freq and _int(freq, None) is None:
            return None
        orig_layers = _int(last.get("--num-layers"), None)
        orig_pp = _int(last.get("--pipeline-model-parallel-size"), 1)
        v = 1
        if "--num-layers-per-virtual-pipeline-stage" in last:
            per = _int(last["--num-layers-per-virtual-pipeline-stage"], 1)
            v = max(1, min(4, (orig_layers or 2 * orig_pp * per) // max(1, orig_pp * per)))
        if "--num-virtual-stages-per-pipeline-rank" in last:
            v = max(1, _int(last["--num-virtual-stages-per-pipeline-rank"], 1))
        first = "--decoder-first-pipeline-num-layers" in last
        lastl = "--decoder-last-pipeline-num-layers" in last
        if first or lastl:
            return int(first) + int(lastl) + max(self.pp - int(first) - int(lastl), 0) * v
        extra = int("--account-for-embedding-in-pipeline-split" in last) + \
            int("--account-for-loss-in-pipeline-split" in last)
        layers = 2
        while (layers + extra) % (self.pp * v):
            layers += 1
        return layers

    def _size_rules(self):
        const = lambda *v: (lambda old: [str(x) for x in v])  # noqa: E731
        cap = lambda c: (lambda old: [str(min(_int(old, c), c))] if old else old)  # noqa: E731
        layers = self._layers()
        heads = _int(self.last.get("--num-attention-heads"), None)

        def query_groups(old):
            g = _int(old, 2)
            return ["4" if heads is not None and g >= heads else "1" if g == 1 else "2"]

        def window(old):
            parts = old[0].split(",") if old else []
            return [",".join(str(min(int(p), 32)) if p.strip().lstrip("-").isdigit() and int(p) > 0 else p
                             for p in parts)] + old[1:]

        def optimizer_instances(old):
            # Megatron: the instances divide the data-parallel size and the expert-data-parallel size.
            n = _int(old, 1)
            world = self.tp * self.pp * self.cp * self.dp
            expert_dp = world // (self.etp * self.ep * self.pp)
            return [str(n if self.dp % n == 0 and expert_dp % n == 0 else 1)]

        def hierarchical_cp(old):
            return [str(self.cp)] + ["1"] * (len(old) - 1) if old else old

        keep = lambda old: old  # noqa: E731
        rules = {
            "--tensor-model-parallel-size": const(self.tp), "--pipeline-model-parallel-size": const(self.pp),
            "--context-parallel-size": const(self.cp), "--expert-model-parallel-size": const(self.ep),
            "--expert-tensor-parallel-size": const(self.etp),
            "--num-distributed-optimizer-instances": optimizer_instances,
            "--hierarchical-context-parallel-sizes": hierarchical_cp,
            "--num-layers": const(layers) if layers is not None else keep,
            "--encoder-num-layers": const(layers) if layers is not None else keep,
            "--decoder-num-layers": const(layers) if layers is not None else keep,
            "--num-layers-per-virtual-pipeline-stage": const(1) if layers is not None else keep,
            "--decoder-first-pipeline-num-layers": const(1) if layers is not None else keep,
            "--decoder-last-pipeline-num-layers": const(1) if layers is not None else keep,
            "--hidden-size": const(64), "--ffn-hidden-size": const(128), "--num-attention-heads": const(4),
            "--num-query-groups": query_groups, "--kv-channels": const(16),
            "--seq-length": const(64), "--encoder-seq-length": const(64), "--decoder-seq-length": const(64),
            "--max-position-embeddings": const(64), "--window-size": window,
            "--vocab-size": const(512), "--make-vocab-size-divisible-by": cap(64),
            "--num-experts": const(4), "--moe-ffn-hidden-size": const(64),
            "--moe-shared-expert-intermediate-size": const(64),
            "--moe-router-topk": cap(2), "--moe-router-num-groups": cap(2), "--moe-router-group-topk": const(1),
            "--mtp-num-layers": cap(1),
            "--q-lora-rank": const(32), "--kv-lora-rank": const(16), "--qk-head-dim": const(16),
            "--qk-pos-emb-head-dim": const(8), "--v-head-dim": const(16),
            "--mamba-state-dim": const(16), "--mamba-head-dim": const(16), "--mamba-num-heads": const(8),
            "--mamba-num-groups": cap(2),
            "--micro-batch-size": const(self.mbs), "--global-batch-size": const(self.final_gbs),
            "--eval-global-batch-size": const(self.gbs),
            "--rampup-batch-size": const(self.mbs * self.dp, self.mbs * self.dp, TRAIN_ITERS * self.gbs),
            "--step-batch-size-schedule": const(self.schedule),
            "--train-iters": const(TRAIN_ITERS), "--exit-interval": const(TRAIN_ITERS),
            "--train-samples": const(self.train_samples),
            "--lr-decay-iters": const(TRAIN_ITERS), "--lr-decay-samples": const(TRAIN_ITERS * self.gbs),
            "--lr-warmup-iters": cap(1), "--lr-warmup-samples": cap(self.gbs),
            "--lr-wsd-decay-iters": const(1), "--lr-wsd-decay-samples": const(self.gbs),
            "--eval-iters": cap(1), "--eval-interval": const(2), "--save-interval": const(2),
            "--non-persistent-save-interval": const(2), "--log-interval": const(1),
            "--recompute-num-layers": cap(1),
            "--microbatch-group-size-per-virtual-pipeline-stage":
                lambda old: [str(max(self.pp, min(_int(old, self.pp), self.gbs // (self.mbs * self.dp))))],
        }
        return rules

    # -- paths --------------------------------------------------------------------------------------
    def _tmp(self, name, kind=""):
        path = os.path.join(self.tmp, name)
        if kind == "dir":
            os.makedirs(path, exist_ok=True)
        elif kind == "file":
            open(path, "a").close()
        return path

    def _path(self, flag, values):
        rule, a = PATH_RULES[flag], self.assets
        if rule == "data":
            return [a["data_prefix"]]
        if rule == "data-args-file":
            path = self._tmp("data-args.txt")
            with open(path, "w") as f:
                f.write(a["data_prefix"] + "\n")
            return [path]
        if rule == "per-split-data-args-file":
            path = self._tmp("per-split-data-args.json")
            with open(path, "w") as f:
                json.dump({s: [a["data_prefix"]] for s in ("train", "valid", "test")}, f)
            return [path]
        if rule == "gpt2-vocab":
            return [a["vocab_file"]]
        if rule == "gpt2-merges":
            return [a["merge_file"]]
        if rule == "tokenizer-model":
            kind = (self.last.get("--tokenizer-type") or [""])[0]
            return [a["hf_dir"] if kind in HF_TOKENIZERS else a["sentencepiece"]]
        if rule == "load":
            if self.last.get("--load") == self.last.get("--save"):
                return [self._tmp("checkpoints")]
            return [self._tmp("load", "dir")]
        kind, _, name = rule.partition(":")
        return [self._tmp(name, {"tmp": "", "tmpdir": "dir", "tmpfile": "file"}[kind])]


# ------------------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------------------

def wait_for(binary, seconds=300, settle=10):
    """The binary may be being rebuilt: wait until it exists, is executable and has not changed
    for `settle` seconds. Returns its modification time."""
    deadline = time.time() + seconds
    while True:
        try:
            mtime = os.stat(binary).st_mtime
            if os.access(binary, os.X_OK) and time.time() - mtime >= settle:
                return mtime
        except OSError:
            pass
        if time.time() > deadline:
            sys.exit(f"run.py: {binary} is missing or keeps changing")
        time.sleep(2)


def run_cmd(cmd, timeout, env=None, cwd=None):
    """(returncode or 'timeout', stdout + stderr text). The command runs in its own process group,
    which is killed on timeout."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", env=env, cwd=cwd, start_new_session=True)
    except OSError as e:
        return "exec", str(e)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return "timeout", out


ERROR_RE = re.compile(r"\berror:\s*(.*)")
FILE_LINE_RE = re.compile(r"\s*\[[\w./-]+:\d+\]\s*$")


def first_error(rc, output, timeout):
    if rc == "timeout":
        return f"timeout after {timeout} s"
    if rc == "exec":
        return f"cannot run: {output}"
    for line in output.splitlines():
        m = ERROR_RE.search(line)
        if m:
            return FILE_LINE_RE.sub("", m.group(1)).strip()
    if rc != 0:
        lines = [l.strip() for l in output.splitlines() if l.strip() and not set(l.strip()) <= set("-")]
        return f"exit {rc}: " + (lines[-1] if lines else "no output")
    return ""


REFUSAL_RES = (
    (re.compile(r"(--[A-Za-z0-9][\w.-]*)((?: [^\s-][^\s]*)?) is not implemented in megatron\.cpp"), "not implemented"),
    (re.compile(r"unknown option (--[\w.-]+)()"), "unknown option"),
)


def refusal(message):
    """(flag, value or '', kind) when the error refuses a flag (or one of its values), else None."""
    for regex, kind in REFUSAL_RES:
        m = regex.search(message)
        if m:
            return m.group(1), m.group(2).strip(), kind
    return None


def refused_flag(message):
    r = refusal(message)
    return r[0] if r else None


def error_key(message):
    """What the summary counts: the refused flag (with the refused value, if it is a value), else
    the message with its numbers blanked."""
    r = refusal(message)
    if r:
        flag, value, kind = r
        return f"{flag}{' ' + value if value else ''} ({kind})"
    return re.sub(r"\b\d+\b", "N", message)[:200]


def plan_cmd(binary, argv, world):
    return [binary, "plan"] + argv + ["--world-size", str(world)]


def train_cmd(binary, argv, world):
    if world == 1:
        return [binary, "train"] + argv
    return ["mpirun", "-np", str(world), "--oversubscribe", "--allow-run-as-root", "-x", "OMP_NUM_THREADS=1",
            binary, "train"] + argv


def peel(binary, argv, world, timeout, limit=60):
    """Every flag of argv that plan refuses: drop the refused flag (with its values) and plan again.
    Returns (the refused flags, their refusals, what plan says once none is refused: '' when it passes)."""
    refused, reasons, groups = [], [], parse_groups(argv)
    for _ in range(limit):
        flat = [t for flag, values in groups for t in ([flag] if flag else []) + values]
        rc, out = run_cmd(plan_cmd(binary, flat, world), timeout)
        error = first_error(rc, out, timeout)
        flag = refused_flag(error)
        if not flag or flag in refused:
            return refused, reasons, error
        refused.append(flag)
        reasons.append(error)
        groups = [g for g in groups if g[0] != flag]
        if flag in LAYER_STRUCTURE_FLAGS:
            groups = even_layers(groups)
    return refused, reasons, "(stopped peeling)"


def even_layers(groups):
    """Without its per-layer structure flag a line's --num-layers (kept as the flag had it) may not
    split evenly over the pipeline: give the first stage the remainder, for the diagnosis."""
    pp = next((_int(values, 1) for flag, values in groups if flag == "--pipeline-model-parallel-size"), 1)
    layers = next((_int(values, None) for flag, values in groups if flag == "--num-layers"), None)
    if pp <= 1 or not layers or layers % pp == 0 or layers < pp:
        return groups
    return groups + [("--decoder-first-pipeline-num-layers", [str(layers - (pp - 1) * (layers // pp))])]


def waits_for_planned(result):
    """A failing line whose every refusal names a planned feature (a feature of an open issue: the
    message says "(planned)") and that plans once the refused flags are left out: what the
    issue's "Done when" excuses."""
    reasons = result.get("refusals") or []
    return (not (result["plan_ok"] and result["train_ok"]) and bool(reasons)
            and all("(planned)" in r for r in reasons) and result.get("after_refused") == "")


def run_line(args, rec, line, tmp, plan_timeout):
    rc, out = run_cmd(plan_cmd(args.megatron, line.argv, line.world), plan_timeout, cwd=tmp)
    plan_err = first_error(rc, out, plan_timeout)
    result = {"name": rec["name"], "path": rec["path"], "kind": rec["kind"], "entry": rec["entry"],
              "ranks": line.world, "plan_ok": rc == 0 and not plan_err, "plan_error": plan_err,
              "train_ok": None, "train_error": "", "notes": line.notes, "argv": line.argv}
    if not args.no_train:
        env = dict(os.environ)
        if line.world > 1:
            env["OMP_NUM_THREADS"] = "1"
        rc, out = run_cmd(train_cmd(args.megatron, line.argv, line.world), args.timeout, env=env, cwd=tmp)
        train_err = first_error(rc, out, args.timeout)
        result["train_ok"] = rc == 0 and not train_err
        result["train_error"] = train_err
    if not args.no_peel and refused_flag(plan_err or result["train_error"]):
        result["refused_flags"], result["refusals"], result["after_refused"] = peel(
            args.megatron, line.argv, line.world, plan_timeout)
    return result


def load_lines(directory):
    records = []
    for path in sorted(glob.glob(os.path.join(directory, "examples", "*.json"))) + \
            sorted(glob.glob(os.path.join(directory, "functional_tests", "*.json"))):
        with open(path) as f:
            record = json.load(f)
        record["path"] = f"{os.path.basename(os.path.dirname(path))}/{record['name']}"
        records.append(record)
    return records


def select(records, subset, limit):
    if subset:
        patterns = [p.strip() for p in subset.split(",") if p.strip()]
        records = [r for r in records
                   if any(fnmatch.fnmatchcase(r["name"], p) or fnmatch.fnmatchcase(r["path"], p)
                          for p in patterns)]
    return records[:limit] if limit else records


def md_escape(text):
    return text.replace("|", "\\|").replace("\n", " ")


def shown_path(path):
    """A path as the docs show it: relative to the repository when inside it (no machine paths in docs)."""
    rel = os.path.relpath(path, REPO)
    return path if rel.startswith("..") else rel


def write_markdown(path, results, args):
    ex = [r for r in results if r["kind"] == "example"]
    ft = [r for r in results if r["kind"] == "functional_test"]
    count = lambda rs, key: sum(1 for r in rs if r[key] is True)  # noqa: E731
    first = collections.Counter(error_key(r["train_error"] or r["plan_error"]) for r in results
                                if r["train_error"] or r["plan_error"])
    peeled = collections.Counter(f for r in results for f in r.get("refused_flags") or [])
    after = collections.Counter(error_key(r["after_refused"]) if r["after_refused"] else "plan ok"
                                for r in results if "after_refused" in r)
    waiting = lambda rs: sum(1 for r in rs if r.get("waits_for_planned"))  # noqa: E731
    with open(path, "w") as f:
        f.write("# Megatron-LM command lines through megatron.cpp\n\n")
        f.write(f"`tools/megatron_lines/run.py` over {len(results)} lines ({len(ex)} from examples/, "
                f"{len(ft)} from the functional tests); binary `{shown_path(args.megatron)}` as modified at "
                f"{', '.join(sorted(set(r['binary_mtime'] for r in results)))}.\n\n")
        f.write("| source | lines | plan ok | train ok | wait only for planned features | train ok among the rest |\n"
                "|---|---|---|---|---|---|\n")
        for label, rs in (("examples", ex), ("functional tests", ft), ("all", results)):
            rest = len(rs) - waiting(rs)
            share = f"{100.0 * count(rs, 'train_ok') / rest:.0f}%" if rest else "—"
            f.write(f"| {label} | {len(rs)} | {count(rs, 'plan_ok')} | {count(rs, 'train_ok')} | {waiting(rs)} | "
                    f"{share} |\n")
        f.write("\nA line *waits only for planned features* when every flag it is refused names a feature of an "
                "open issue (the refusal says \"(planned)\") and plan passes without them.\n")
        f.write("\n## First errors (train's, or plan's when train ran clean or did not run)\n\n"
                "| lines | first error |\n|---|---|\n")
        for key, n in first.most_common():
            f.write(f"| {n} | {md_escape(key)} |\n")
        if peeled:
            f.write("\n## Every refused flag (plan re-run without each refused flag in turn)\n\n"
                    "| lines | flag |\n|---|---|\n")
            for flag, n in peeled.most_common():
                f.write(f"| {n} | `{flag}` |\n")
            f.write("\n## Plan once the refused flags are left out (diagnosis)\n\n| lines | result |\n|---|---|\n")
            for key, n in after.most_common():
                f.write(f"| {n} | {md_escape(key)} |\n")
        f.write("\n## Lines\n\n| line | ranks | plan | train | first error | refused flags | plan without them |\n"
                "|---|---|---|---|---|---|---|\n")
        for r in results:
            verdict = lambda ok: "ok" if ok else ("—" if ok is None else "FAIL")  # noqa: E731
            err = r["train_error"] or r["plan_error"]
            refused = ", ".join(f"`{x}`" for x in (r.get("refused_flags") or []))
            without = ("ok" if not r["after_refused"] else md_escape(r["after_refused"])) if "after_refused" in r else ""
            f.write(f"| {r['path']} | {r['ranks']} | {verdict(r['plan_ok'])} | "
                    f"{verdict(r['train_ok'])} | {md_escape(err)} | {refused} | {without} |\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", default=os.path.join(REPO, "tests", "golden", "megatron_lines"),
                    help="directory written by extract.py (default: tests/golden/megatron_lines)")
    ap.add_argument("--megatron", default=os.path.join(REPO, "build", "megatron"), help="the binary")
    ap.add_argument("--subset", help="comma-separated line names or globs, of the name or of DIR/name (examples/*, functional_tests/moe_*)")
    ap.add_argument("--limit", type=int, help="at most this many lines")
    ap.add_argument("--markdown", help="write the table as Markdown to this file")
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument("--timeout", type=int, default=180, help="seconds per train run (plan: a third)")
    ap.add_argument("--no-train", action="store_true", help="plan only")
    ap.add_argument("--no-peel", action="store_true", help="do not list every refused flag")
    ap.add_argument("--show", metavar="NAME", help="print NAME's scaled argv and commands, run nothing")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--expect-pass", action="store_true",
                        help="exit 1 unless every selected line passes plan and train (the CTest subset)")
    args = ap.parse_args()
    args.megatron = os.path.abspath(args.megatron)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("run.py: terminated"))  # so the cleanup runs

    if not args.show and not os.path.isfile(args.megatron):
        sys.exit(f"run.py: {args.megatron} not found: build it (scripts/build.sh) or pass --megatron")
    records = select(load_lines(args.lines), args.show or args.subset, args.limit)
    if not records:
        sys.exit(f"run.py: no lines selected under {args.lines}")
    base = tempfile.mkdtemp(prefix="megatron_lines_")
    try:
        assets = tiny_assets.write_all(os.path.join(base, "assets"))
        if args.show:
            for rec in records:
                line = Scaled(rec, assets, os.path.join(base, "lines", rec["name"]))
                print(f"# {rec['kind']}/{rec['name']}: {rec['world_size']} ranks -> {line.world}")
                for note in line.notes:
                    print(f"# note: {note}")
                print(shlex.join(plan_cmd(args.megatron, line.argv, line.world)))
                print(shlex.join(train_cmd(args.megatron, line.argv, line.world)))
            return
        results = []
        plan_timeout = max(10, args.timeout // 3)
        for k, rec in enumerate(records):
            tmp = os.path.join(base, "lines", re.sub(r"[^\w.@-]", "_", rec["name"]))
            for _attempt in range(3):  # again, from a clean directory, when the binary was rebuilt meanwhile
                shutil.rmtree(tmp, ignore_errors=True)
                os.makedirs(tmp)
                line = Scaled(rec, assets, tmp)
                mtime = wait_for(args.megatron)
                result = run_line(args, rec, line, tmp, plan_timeout)
                result["binary_mtime"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime))
                if os.path.exists(args.megatron) and os.stat(args.megatron).st_mtime == mtime:
                    break
            result["waits_for_planned"] = waits_for_planned(result)
            results.append(result)
            shutil.rmtree(tmp, ignore_errors=True)
            status = lambda ok: "ok" if ok else ("-" if ok is None else "FAIL")  # noqa: E731
            print(f"[{k + 1}/{len(records)}] {rec['name']}: ranks {line.world}, plan {status(result['plan_ok'])}, "
                  f"train {status(result['train_ok'])}"
                  + (f": {result['train_error'] or result['plan_error']}"
                     if (result['train_error'] or result['plan_error']) else ""),
                  flush=True)
        ok_plan = sum(1 for r in results if r["plan_ok"])
        ok_train = sum(1 for r in results if r["train_ok"])
        print(f"\n{len(results)} lines: plan ok {ok_plan}, train ok {ok_train}, waiting only for planned features "
              f"{sum(1 for r in results if r['waits_for_planned'])}")
        first = collections.Counter(error_key(r["train_error"] or r["plan_error"]) for r in results
                                    if r["train_error"] or r["plan_error"])
        for key, n in first.most_common(30):
            print(f"{n:5d}  {key}")
        if args.markdown:
            write_markdown(args.markdown, results, args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        failed = [r["name"] for r in results if not (r["plan_ok"] and r["train_ok"])]
        if args.expect_pass and failed:
            sys.exit("run.py: expected to pass, failed: " + ", ".join(failed))
    finally:
        if args.keep:
            print(f"run.py: kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
