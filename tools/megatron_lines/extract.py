#!/usr/bin/env python3
"""Extract Megatron-LM's own training command lines into one JSON file per line.

usage: extract.py MEGATRON_CHECKOUT OUT_DIR [--commit SHA]

Two sources, both read from a Megatron-LM checkout (nothing is fetched):

- examples/: the GPT, Llama, Mixtral, Mamba/hybrid, gpt-oss, Megatron-FSDP (Llama 3, DeepSeek-V3)
  and SC21 GPT training scripts (table EXAMPLES below). Each runs under bash in an empty scratch
  directory with stubs first on PATH for torchrun, python, srun, sbatch, uv, ... that record their
  arguments instead of launching anything, so bash itself evaluates the scripts' variables and
  arrays. The arguments after the entry script (pretrain_gpt.py, pretrain_hybrid.py, ...) are kept;
  the scratch directory in them is written as /workspace.
- tests/functional_tests/test_cases/{gpt,moe,hybrid,mixtral}/*/model_config.yaml: MODEL_ARGS turned
  into argv the way Megatron's launcher does it (tests/functional_tests/shell_test_utils/
  run_ci_test.sh and _run_training.sh, with the variables of the recipe under tests/test_utils/
  recipes/ that runs the case); see functional_test_lines(). Only training cases (MODE pretraining,
  entry pretrain_*.py) are written; the others are listed in OUT_DIR/README.md.

Each OUT_DIR/<kind>/<name>.json holds: name, kind, source, entry (the script Megatron runs), family
(gpt or hybrid), world_size (ranks of the original launch, or null), notes, argv.
Standard library only (works with /usr/bin/python3).
"""

import argparse
import glob
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mini_yaml  # noqa: E402

WORKSPACE = "/workspace"  # how the scratch directory of a script run is written in the argv
ENTRY_RE = re.compile(r"(?:^|/)(pretrain_\w+\.py|train_rl\.py|finetune\w*\.py)$")
TRAINING_ENTRIES = ("pretrain_gpt.py", "pretrain_hybrid.py", "pretrain_mamba.py")

# ---------------------------------------------------------------------------------------------
# examples/: (name, script, positional arguments, environment, notes). "{W}" is the scratch
# directory (written /workspace afterwards). Environment variables not named here are unset.
# ---------------------------------------------------------------------------------------------
SC21_NOTE = ("2021 SC21 paper script: uses --DDP-impl and --activations-checkpoint-method, which "
             "Megatron-LM at this commit no longer defines either")
EXAMPLES = [
    ("gpt3_175b", "examples/gpt3/train_gpt3_175b_distributed.sh",
     ["{W}/checkpoints", "{W}/tensorboard", "{W}/gpt2-vocab.json", "{W}/gpt2-merges.txt",
      "{W}/data/my-gpt3_text_document"], {}, []),
    ("llama3_8b_h100_fp8_mock", "examples/llama/train_llama3_8b_h100_fp8.sh",
     ["{W}/checkpoints/llama3_8b_fp8", "{W}/tensorboard_logs/llama3_8b_fp8"], {},
     ["default MOCK tokenizer and data"]),
    ("llama3_8b_h100_fp8_data", "examples/llama/train_llama3_8b_h100_fp8.sh",
     ["{W}/checkpoints/llama3_8b_fp8", "{W}/tensorboard_logs/llama3_8b_fp8", "{W}/tokenizers/llama3",
      "{W}/data/llama3_text_document"], {}, ["real-data branch (tokenizer and data prefix given)"]),
    ("mixtral_8x7b", "examples/mixtral/train_mixtral_8x7b_distributed.sh",
     ["{W}/checkpoints", "{W}/tokenizers/mixtral/tokenizer.model", "{W}/data/mixtral_text_document"],
     {}, []),
    ("mamba_hybrid_800m", "examples/mamba/train.sh",
     ["{W}/data/mamba_text_document", "{W}/tokenizers/mamba/tokenizer.model"], {},
     ["MODEL_SCALE=800M as the script sets it"]),
    ("gptoss_20b_mock", "examples/gptoss/02_train.sh",
     ["--checkpoint-path", "{W}/checkpoints", "--tensorboard-logs-path", "{W}/tensorboard_logs"], {},
     ["default MOCK tokenizer and data"]),
    ("gptoss_20b_data", "examples/gptoss/02_train.sh",
     ["--checkpoint-path", "{W}/checkpoints", "--tensorboard-logs-path", "{W}/tensorboard_logs",
      "--tokenizer", "{W}/tokenizers/gpt-oss", "--data", "{W}/data/gptoss_text_document"], {},
     ["real-data branch (--tokenizer and --data given)"]),
    ("megatron_fsdp_llama3_8b_fp8_mock", "examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh",
     ["{W}/checkpoints/llama3_8b_fsdp_fp8"], {}, ["default: USE_MEGATRON_FSDP=1, MOCK data"]),
    ("megatron_fsdp_llama3_8b_fp8_data", "examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh",
     ["{W}/checkpoints/llama3_8b_fsdp_fp8", "{W}/data/llama3_text_document", "{W}/tokenizers/llama3"],
     {}, ["USE_MEGATRON_FSDP=1, real-data branch"]),
    ("megatron_fsdp_llama3_8b_fp8_no_fsdp", "examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh",
     ["{W}/checkpoints/llama3_8b_fsdp_fp8"], {"USE_MEGATRON_FSDP": "0"},
     ["USE_MEGATRON_FSDP=0 (plain DDP branch), MOCK data"]),
    ("megatron_fsdp_deepseek_v3", "examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh", [],
     {"MEGATRON_PATH": "{W}/megatron-lm", "OUTPUT_PATH": "{W}/output",
      "DATA_PATH": "{W}/data/deepseek_text_document"},
     ["defaults: USE_MEGATRON_FSDP=1, WANDB=1, TP=1, EP=8, MBS=4, GBS=2048"]),
    ("megatron_fsdp_deepseek_v3_no_fsdp", "examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh", [],
     {"MEGATRON_PATH": "{W}/megatron-lm", "OUTPUT_PATH": "{W}/output",
      "DATA_PATH": "{W}/data/deepseek_text_document", "USE_MEGATRON_FSDP": "0"},
     ["USE_MEGATRON_FSDP=0 (plain DDP branch), WANDB=1"]),
] + [
    (f"sc21_{os.path.splitext(os.path.basename(s))[0]}", s, [], {}, [SC21_NOTE, "the script's default case"])
    for s in ["examples/academic_paper_scripts/sc21/run_figure_11.sh",
              "examples/academic_paper_scripts/sc21/run_figure_12.sh",
              "examples/academic_paper_scripts/sc21/run_figure_13.sh",
              "examples/academic_paper_scripts/sc21/run_figure_14.sh",
              "examples/academic_paper_scripts/sc21/run_figure_15.sh",
              "examples/academic_paper_scripts/sc21/run_figure_16.sh",
              "examples/academic_paper_scripts/sc21/run_figure_17.sh",
              "examples/academic_paper_scripts/sc21/run_figure_18.sh",
              "examples/academic_paper_scripts/sc21/run_table_1.sh"]
]

# SC21's CONFIG.sh holds '<describe the value>' templates (a bash syntax error as it stands): each
# becomes this value before the scripts run, the one edit made to any script.
SC21_TEMPLATE_VALUES = {
    "SLURM_PARTITION": "placeholder_partition", "SLURM_ACCOUNT": "placeholder_account",
    "MEGATRON_CODE_DIR": "{W}/megatron-lm", "DOCKER_MOUNT_DIR": "{W}",
    "MEGATRON_DATA": "{W}/data/my-gpt3_text_document", "BPE_VOCAB_FILE": "{W}/gpt2-vocab.json",
    "BPE_MERGE_FILE": "{W}/gpt2-merges.txt",
}

# Example scripts deliberately left out, with the reason (listed in README.md).
EXAMPLES_SKIPPED = {
    "examples/academic_paper_scripts/detxoify_lm/finetune_gpt_distributed-1.3b.sh":
        "runs examples/detxoify_lm/finetune_gpt.py (a fine-tuning script) with 2021 flags",
    "examples/post_training/modelopt/*.sh": "ModelOpt quantization/distillation/export, not pre-training",
    "examples/rl/*": "reinforcement learning (train_rl.py)",
    "examples/bert, examples/t5, examples/multimodal, examples/mimo": "not GPT/hybrid language models",
    "examples/inference/*, examples/mamba/run_text_gen_server_*.sh": "inference",
}

# A stub stands in for a launcher. 'record' appends its argv (NUL-separated) to $STUB_LOG_DIR;
# 'uv' runs 'uv run [opts] CMD...' as CMD...; 'srun' runs the command after its options;
# 'sbatch' records its argv, then runs its script argument or, without one, the script on stdin.
_STUB_RECORD = r'''#!/bin/bash
f=$(mktemp "$STUB_LOG_DIR/call.XXXXXXXX")
printf '%s\0' "$(basename "$0")" "$@" > "$f"
'''
_STUB_UV = r'''#!/bin/bash
[ "$1" = run ] && shift
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
exec "$@"
'''
_STUB_SRUN = r'''#!/bin/bash
while [ $# -gt 0 ]; do
  case "$1" in bash|sh|python|python3|torchrun) exec "$@";; esac
  shift
done
'''
_STUB_SBATCH = r'''#!/bin/bash
f=$(mktemp "$STUB_LOG_DIR/call.XXXXXXXX")
printf '%s\0' sbatch "$@" > "$f"
last="${!#}"
if [ $# -gt 0 ] && [ -f "$last" ]; then exec bash "$last"; else exec bash -s; fi
'''
STUBS = {"torchrun": _STUB_RECORD, "python": _STUB_RECORD, "python3": _STUB_RECORD,
         "ft_launcher": _STUB_RECORD, "nsys": _STUB_RECORD, "mpirun": _STUB_RECORD,
         "uv": _STUB_UV, "srun": _STUB_SRUN, "sbatch": _STUB_SBATCH,
         "git": "#!/bin/bash\nexit 0\n"}


def _write_stubs(bindir):
    os.makedirs(bindir, exist_ok=True)
    for name, body in STUBS.items():
        path = os.path.join(bindir, name)
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _read_calls(logdir):
    calls = []
    for path in sorted(glob.glob(os.path.join(logdir, "call.*")), key=os.path.getmtime):
        with open(path, "rb") as f:
            data = f.read().decode()
        calls.append(data.split("\0")[:-1])
    return calls


def _launcher_world_size(launcher_args, sbatch_args):
    """Ranks of the original launch: torchrun's nproc_per_node x nnodes, or SC21's sbatch --nodes x 8."""
    def opt(args, names):
        for k, a in enumerate(args):
            for n in names:
                if a == n and k + 1 < len(args):
                    return args[k + 1]
                if a.startswith(n + "="):
                    return a[len(n) + 1:]
        return None
    nproc = opt(launcher_args, ["--nproc_per_node", "--nproc-per-node"])
    nnodes = opt(launcher_args, ["--nnodes"])
    if nproc is not None:
        try:
            return int(nproc) * int(nnodes or 1)
        except ValueError:
            return None
    nodes = opt(sbatch_args, ["--nodes", "-N"])
    if nodes and nodes.isdigit():
        return int(nodes) * 8  # SRUN.sh: #SBATCH --ntasks-per-node=8
    return None


def run_example(checkout, name, script, args, env_extra, notes):
    scratch = tempfile.mkdtemp(prefix="mlm_example_")
    try:
        bindir = os.path.join(scratch, ".stubs")
        logdir = os.path.join(scratch, ".calls")
        os.makedirs(logdir)
        _write_stubs(bindir)
        work = os.path.join(scratch, "w")
        os.makedirs(work)
        w = lambda s: s.replace("{W}", work)  # noqa: E731
        for d in ("checkpoints", "megatron-lm"):
            os.makedirs(os.path.join(work, d), exist_ok=True)
        # The scripts check that the entry script exists in the directory they run from.
        for entry in TRAINING_ENTRIES:
            open(os.path.join(work, entry), "w").close()
            open(os.path.join(work, "megatron-lm", entry), "w").close()
        script_path = os.path.join(checkout, script)
        cwd = work
        if "/sc21/" in script:
            sc21 = os.path.join(work, "sc21")
            shutil.copytree(os.path.dirname(script_path), sc21)
            config = os.path.join(sc21, "CONFIG.sh")
            with open(config) as f:
                text = f.read()

            def fill(m):
                value = SC21_TEMPLATE_VALUES.get(m.group(2), "placeholder")
                return m.group(1) + m.group(2) + "=" + w(value)
            text = re.sub(r"^(\s*(?:export\s+)?)(\w+)=<[^>\n]*>", fill, text, flags=re.M)
            with open(config, "w") as f:
                f.write(text)
            script_path = os.path.join(sc21, os.path.basename(script))
            cwd = sc21
        env = {"PATH": bindir + ":/usr/bin:/bin", "HOME": work, "STUB_LOG_DIR": logdir, "LANG": "C.UTF-8"}
        env.update({k: w(v) for k, v in env_extra.items()})
        proc = subprocess.run(["bash", script_path] + [w(a) for a in args], cwd=cwd, env=env,
                              stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
        calls = _read_calls(logdir)
        sbatch_args = next((c[1:] for c in calls if c and c[0] == "sbatch"), [])
        for call in calls:
            for k, a in enumerate(call):
                m = ENTRY_RE.search(a)
                if m:
                    argv = [a2.replace(work, WORKSPACE) for a2 in call[k + 1:]]
                    world = _launcher_world_size(call[1:k], sbatch_args)
                    entry = m.group(1)
                    return {
                        "name": name, "kind": "example", "source": script, "entry": entry,
                        "family": "hybrid" if entry in ("pretrain_hybrid.py", "pretrain_mamba.py") else "gpt",
                        "world_size": world, "notes": notes, "argv": argv,
                    }
        raise RuntimeError(f"{script}: no training command recorded (exit {proc.returncode}); "
                           f"stderr: {proc.stderr.strip()[-800:]}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Functional tests
# ---------------------------------------------------------------------------------------------
TEST_MODELS = ("gpt", "moe", "hybrid", "mixtral")
CI_ASSETS = "/workspace/assets"        # the recipes' {assets_dir}
CI_ARTIFACTS = "/workspace/artifacts"  # the recipes' {artifacts_dir}
# Variables the release pipeline provides outside this repository (placeholders).
EXTERNAL_VARS = {
    "DATA_BLEND": "/mnt/artifacts/DATA_BLEND_text_document",
    "WANDB_EXPERIMENT": "placeholder_wandb_experiment",
    "WANDB_SAVE_PATH": CI_ASSETS + "/wandb",
    "TOKENIZER": "/mnt/artifacts/tokenizer",
    "RUN_ID": "placeholder_run_id",
}


def _parse_recipes(checkout):
    """{test_case: recipe info} from tests/test_utils/recipes/*/*.yaml (h100 before gb200)."""
    cases = {}
    paths = sorted(glob.glob(os.path.join(checkout, "tests/test_utils/recipes/*/*.yaml")),
                   key=lambda p: (0 if "/h100/" in p else 1, p))
    for path in paths:
        text = open(path).read()
        spec = {}
        for key in ("model", "nodes", "gpus", "platforms", "name", "n_repeat"):
            m = re.search(r"^  %s:\s*['\"]?([^'\"\n]+?)['\"]?\s*$" % key, text, re.M)
            if m:
                spec[key] = m.group(1)
        arguments = dict(re.findall(r'^\s+"([A-Z_]+)=([^"]*)"\s*$', text, re.M))
        for group in re.findall(r"test_case:\s*\[([^\]]*)\]", text):
            for case in (c.strip() for c in group.split(",")):
                if case and case not in cases:
                    cases[case] = {"recipe": os.path.relpath(path, checkout), "spec": spec,
                                   "arguments": arguments}
    return cases


_DEFAULT_RECIPE = {"gpt": "h100/gpt.yaml", "moe": "h100/moe.yaml", "mixtral": "h100/moe.yaml",
                   "hybrid": "h100/mamba.yaml"}


def _xargs_words(value):
    """`echo "$value" | xargs`: split at blanks, quotes group and are removed, backslash escapes;
    the words come back joined by single spaces. None when xargs would fail (unmatched quote)."""
    words, cur, have, i = [], [], False, 0
    while i < len(value):
        ch = value[i]
        if ch in " \t\n":
            if have:
                words.append("".join(cur))
                cur, have = [], False
        elif ch in "'\"":
            j = value.find(ch, i + 1)
            if j < 0:
                return None
            cur.append(value[i + 1:j])
            have = True
            i = j
        elif ch == "\\" and i + 1 < len(value):
            cur.append(value[i + 1])
            have = True
            i += 1
        else:
            cur.append(ch)
            have = True
        i += 1
    if have:
        words.append("".join(cur))
    return " ".join(words)


def _envsubst(text, env):
    """envsubst with every set variable listed: $NAME and ${NAME} of set variables are replaced."""
    def sub(m):
        name = m.group(1) or m.group(2)
        return env[name] if name in env else m.group(0)
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", sub, text)


def _shell_words(text, env, warnings):
    """The words of `eval "ARR=(text)"`: quotes, backslashes and $VAR/${VAR} expansion (unquoted
    expansions split at blanks; unset variables expand to nothing). Globs stay literal (they match
    no file in the launch directory); command substitution is not supported (a warning)."""
    if "$(" in text or "`" in text:
        warnings.append("command substitution left unexpanded")
    words, cur, have = [], [], False
    i, n = 0, len(text)

    def expand(i):
        if text[i + 1] == "{":
            j = text.index("}", i)
            name = text[i + 2:j]
            end = j + 1
        else:
            m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[i + 1:])
            if not m:
                return "$", i + 1
            name = m.group(0)
            end = i + 1 + len(name)
        if name not in env:
            warnings.append(f"${name} is not set: expands to nothing")
        return env.get(name, ""), end

    while i < n:
        ch = text[i]
        if ch in " \t\n":
            if have:
                words.append("".join(cur))
                cur, have = [], False
            i += 1
        elif ch == "'":
            j = text.index("'", i + 1)
            cur.append(text[i + 1:j])
            have = True
            i = j + 1
        elif ch == '"':
            i += 1
            have = True
            while text[i] != '"':
                if text[i] == "\\" and text[i + 1] in '$`"\\\n':
                    cur.append(text[i + 1])
                    i += 2
                elif text[i] == "$" and i + 1 < n and (text[i + 1] == "{" or text[i + 1].isalpha() or text[i + 1] == "_"):
                    value, i = expand(i)
                    cur.append(value)
                else:
                    cur.append(text[i])
                    i += 1
            i += 1
        elif ch == "\\" and i + 1 < n:
            cur.append(text[i + 1])
            have = True
            i += 2
        elif ch == "$" and i + 1 < n and (text[i + 1] == "{" or text[i + 1].isalpha() or text[i + 1] == "_"):
            value, i = expand(i)
            parts = value.split()
            if parts:
                if value[:1].isspace() and have:
                    words.append("".join(cur))
                    cur = []
                cur.append(parts[0])
                for p in parts[1:]:
                    words.append("".join(cur))
                    cur = [p]
                have = True
                if value[-1:].isspace():
                    words.append("".join(cur))
                    cur, have = [], False
        else:
            cur.append(ch)
            have = True
            i += 1
    if have:
        words.append("".join(cur))
    return words


def model_args_to_argv(mapping, env, warnings):
    """MODEL_ARGS (flag -> value) into argv, as _run_training.sh does it: yq prints 'key: value'
    (true as 'true', values that are "" dropped, null as 'null'); the value is trimmed by xargs;
    'true' gives the bare flag; a value in ( ) is double-quoted; a value in [ ] loses the brackets
    and is split into words; a value with a space, | or parenthesis is double-quoted; then the whole
    string goes through `eval "ARR=(...)"`."""
    pieces = []
    for key, value in mapping.items():
        if value == "":
            continue
        if value is None:
            value = "null"
        if not isinstance(value, str):
            raise ValueError(f"{key}: value is not a scalar")
        trimmed = _xargs_words(value)
        if trimmed is None:
            warnings.append(f"{key}: xargs fails on the value (unmatched quote): it becomes empty")
            trimmed = ""
        if trimmed == "true":
            pieces.append(key)
        elif re.fullmatch(r"\([^)]+\)", trimmed):
            pieces.append(f'{key} "{trimmed}"')
        elif re.fullmatch(r"\[[^]]+\]", trimmed):
            pieces.append(f"{key} {trimmed[1:-1]}")
        elif any(c in trimmed for c in " |()"):
            pieces.append(f'{key} "{trimmed}"')
        else:
            pieces.append(f"{key} {trimmed}")
    return _shell_words(" ".join(pieces), env, warnings)


def functional_test_lines(checkout):
    recipes = _parse_recipes(checkout)
    lines, skipped = [], []
    for model in TEST_MODELS:
        for cfg in sorted(glob.glob(os.path.join(checkout, "tests/functional_tests/test_cases", model, "*",
                                                 "model_config.yaml"))):
            case = os.path.basename(os.path.dirname(cfg))
            rel = os.path.relpath(cfg, checkout)
            notes = []
            recipe = recipes.get(case)
            if recipe is None:
                default = _DEFAULT_RECIPE[model]
                for info in recipes.values():
                    if info["recipe"].endswith(default) and "TRAINING_SCRIPT_PATH" in info["arguments"]:
                        recipe = dict(info, recipe=info["recipe"] + " (no recipe lists this case; its defaults)")
                        break
            spec, arguments = recipe["spec"], dict(recipe["arguments"])
            if "TRAINING_SCRIPT_PATH" not in arguments:
                skipped.append((rel, f"run by {recipe['recipe']} through its own script"))
                continue
            environment, platforms = "dev", spec.get("platforms", "dgx_h100")
            fmt = {"test_case": case, "model": model, "environment": environment, "platforms": platforms,
                   "assets_dir": CI_ASSETS, "artifacts_dir": CI_ARTIFACTS, "n_repeat": spec.get("n_repeat", "1")}
            fmt["name"] = spec.get("name", "{test_case}").format(**fmt)
            # run_ci_test.sh exports each KEY=VALUE as "$(eval echo $VALUE)": CI variables expand.
            ci = {k: _envsubst(re.sub(r"\{(\w+)\}", lambda m: fmt.get(m.group(1), m.group(0)), v), EXTERNAL_VARS)
                  for k, v in arguments.items() if not v.startswith("${{")}
            entry = os.path.basename(ci["TRAINING_SCRIPT_PATH"].strip('"'))
            text = open(cfg).read()
            try:
                config_raw = mini_yaml.load(text)
            except mini_yaml.YamlError as e:
                skipped.append((rel, f"YAML not understood: {e}"))
                continue
            mode = (config_raw.get("MODE") or "pretraining").strip()
            test_type = (config_raw.get("TEST_TYPE") or "").strip()
            if "nemo" in ci["TRAINING_SCRIPT_PATH"].lower():
                skipped.append((rel, "NeMo test"))
                continue
            if mode != "pretraining" or entry not in TRAINING_ENTRIES:
                skipped.append((rel, f"MODE {mode}, entry {ci['TRAINING_SCRIPT_PATH']}"))
                continue
            # run_ci_test.sh: the environment _run_training.sh sees for the first run of repeat 1.
            env = dict(ci)
            env.update(EXTERNAL_VARS)
            env.update({"REPEAT": "1", "RUN_NUMBER": "1", "RECORD_CHECKPOINTS": "false",
                        "ENABLE_LIGHTWEIGHT_MODE": "false", "IS_NEMO_TEST": "false"})
            tb = ci["TENSORBOARD_PATH"]
            env["TENSORBOARD_PATH"] = f"{os.path.dirname(tb)}/1/{os.path.basename(tb)}"
            if test_type in ("ckpt-resume", "frozen-resume"):
                env["TENSORBOARD_PATH"] += "/run_1"
            if test_type not in ("frozen-start", "checkpoint-consistency", "release"):
                env["CHECKPOINT_LOAD_PATH"] = "/tmp/checkpoints/"
            env["LOG_DIR"] = env["OUTPUT_PATH"] + "/logs/1"
            config = mini_yaml.load(_envsubst(text, env))
            lightweight = ((config.get("ENV_VARS") or {}).get("ENABLE_LIGHTWEIGHT_MODE") or "false") == "true"
            if lightweight:
                notes.append("ENABLE_LIGHTWEIGHT_MODE: --exit-interval 4 as run_ci_test.sh sets it")
            keys = ["MODEL_ARGS"]
            if test_type == "checkpoint-consistency":
                keys = [k for k in config if re.fullmatch(r"MODEL_ARGS(_\d+)?", k)]
            elif any(re.fullmatch(r"MODEL_ARGS_\d+", k) for k in config):
                notes.append("MODEL_ARGS_N of later runs not extracted (first run only)")
            for key in keys:
                mapping = dict(config[key])
                if test_type != "release" and key == "MODEL_ARGS":
                    # run_ci_test.sh edits MODEL_ARGS with yq -i before the run (an existing key keeps
                    # its place, a new one goes last).
                    if lightweight:
                        mapping["--exit-interval"] = "4"
                        if test_type in ("ckpt-resume", "frozen-resume"):
                            mapping["--save-interval"] = "2"
                    else:
                        mapping["--exit-interval"] = mapping.get("--train-iters")
                run_env = dict(env, KEY=key, RUN_NUMBER=key.rpartition("_")[2] if key != "MODEL_ARGS" else "1")
                for k, v in (config.get("ENV_VARS") or {}).items():
                    run_env[k] = "" if v is None else v
                warnings = []
                argv = model_args_to_argv(mapping, run_env, warnings)
                world = int(spec.get("nodes", "1")) * int(spec.get("gpus", "8"))
                per_key = (config.get("MODEL_ENV_VARS") or {}).get(key) or {}
                if "GPUS_PER_NODE" in per_key:
                    world = int(per_key["GPUS_PER_NODE"]) * int(spec.get("nodes", "1"))
                name = case if key == "MODEL_ARGS" else f"{case}@{key}"
                lines.append({
                    "name": name, "kind": "functional_test", "source": rel, "recipe": recipe["recipe"],
                    "test_type": test_type, "entry": entry,
                    "family": "hybrid" if entry in ("pretrain_hybrid.py", "pretrain_mamba.py") else "gpt",
                    "world_size": world, "notes": notes + sorted(set(warnings)), "argv": argv,
                })
    return lines, skipped


def _commit(checkout, given):
    if given:
        return given
    try:
        return subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (pass --commit)"


def _write_json(path, record):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("{\n")
        items = list(record.items())
        for k, (key, value) in enumerate(items):
            if key == "argv":
                body = ",\n".join("    " + json.dumps(a) for a in value)
                f.write(f'  "argv": [\n{body}\n  ]')
            else:
                f.write(f"  {json.dumps(key)}: {json.dumps(value)}")
            f.write(",\n" if k + 1 < len(items) else "\n")
        f.write("}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help="Megatron-LM checkout (a source tree; nothing is fetched)")
    ap.add_argument("out_dir", help="where the JSON files and README.md go (replaced)")
    ap.add_argument("--commit", help="the checkout's commit, when it is not a git work tree")
    args = ap.parse_args()
    checkout = os.path.abspath(args.checkout)
    if not os.path.isfile(os.path.join(checkout, "pretrain_gpt.py")):
        sys.exit(f"extract.py: {checkout} does not look like a Megatron-LM checkout (no pretrain_gpt.py)")
    examples = [run_example(checkout, *e) for e in EXAMPLES]
    tests, skipped = functional_test_lines(checkout)
    for sub in ("examples", "functional_tests"):
        shutil.rmtree(os.path.join(args.out_dir, sub), ignore_errors=True)
    for rec in examples:
        _write_json(os.path.join(args.out_dir, "examples", rec["name"] + ".json"), rec)
    for rec in tests:
        _write_json(os.path.join(args.out_dir, "functional_tests", rec["name"] + ".json"), rec)
    commit = _commit(checkout, args.commit)
    with open(os.path.join(args.out_dir, "README.md"), "w") as f:
        f.write("# Megatron-LM training command lines\n\n")
        f.write(f"Extracted from Megatron-LM commit `{commit}` by `tools/megatron_lines/extract.py` "
                "(regenerate: `tools/megatron_lines/extract.py MEGATRON_CHECKOUT tests/golden/megatron_lines "
                "--commit SHA`); run them with `tools/megatron_lines/run.py`.\n\n")
        f.write(f"- `examples/`: {len(examples)} lines from the training scripts under `examples/`\n")
        f.write(f"- `functional_tests/`: {len(tests)} lines from "
                f"`tests/functional_tests/test_cases/{{{','.join(TEST_MODELS)}}}/*/model_config.yaml`\n\n")
        f.write("Each file: `name`, `kind`, `source`, `entry` (the script Megatron runs), `family`, "
                "`world_size` (ranks of the original launch), `notes`, `argv` (the arguments after the "
                "entry script, as Megatron receives them). Paths are Megatron CI's "
                f"(`/mnt/artifacts`, `{CI_ASSETS}`, ...) or the scripts' placeholders under `{WORKSPACE}`.\n\n")
        f.write("## Not extracted\n\n")
        for what, why in EXAMPLES_SKIPPED.items():
            f.write(f"- `{what}`: {why}\n")
        reasons = {}
        for rel, why in skipped:
            reasons.setdefault(why, []).append(os.path.basename(os.path.dirname(rel)))
        for why, cases in sorted(reasons.items()):
            f.write(f"- {len(cases)} functional test case(s), {why}: {', '.join(sorted(cases))}\n")
    print(f"extract.py: {len(examples)} example lines, {len(tests)} functional-test lines "
          f"({len(skipped)} test cases skipped) -> {args.out_dir}")


if __name__ == "__main__":
    main()
