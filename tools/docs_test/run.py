#!/usr/bin/env python3
"""Runs every shell block of README.md and docs/*.md exactly as written, and checks the figures
the documents quote against what those blocks print.

A reader copies a document's blocks into one terminal, in order; this does the same. All blocks of
one document run in one bash process (so a variable a block sets holds for the later blocks), with
`set -e -o pipefail` so that the first failing command fails the document. Every document runs in
one temporary directory that looks like the repository root: its top-level entries are symlinks
into the repository (build/ into the build directory under test), except out/, which starts empty.
README.md runs first, so the quick start's out/quickstart/ is there for the user guide.

Blocks fenced as ```sh or ```bash run; other fences are text. HTML comments right before a block,
invisible on the rendered page, change that:

  <!-- docs-test: skip REASON -->     not run here (a multi-node launch, a benchmark); REASON is shown
  <!-- docs-test: env NAME=VALUE -->  run with these variables set (a script that reads them to run
                                      shorter here; the block's text is never edited)
  <!-- docs-test: name NAME -->       name the block for a later `output of NAME`
  <!-- docs-test: output [of NAME] [rtol=X] -->
                                      the next (plain) block quotes the output of block NAME (default:
                                      the last block run): each of its lines must appear in that
                                      output, in order, with every figure within rtol (default 1e-3)
                                      of the quoted one; `...` stands for any text, and timings
                                      (elapsed time, throughput, tokens per second, dates) are not
                                      compared

Usage: run.py [--build DIR] [--docs FILE ...] [--keep] | run.py --self-test
Exit status 0 when every runnable block succeeded and every quoted output matched.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The order a reader follows (the quick start first: the user guide uses its checkpoint), then every
# other document, so a new one is tested without being listed here.
FIRST_DOCS = ["README.md", "docs/user-guide.md", "docs/parallelism.md"]
RUNNABLE = {"sh", "bash"}
MARK = "@@docs-test-block"
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
TIMESTAMP = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\]"
# Figures after these words (in the same `|`-separated field) are timings: never compared.
VOLATILE = ("elapsed", "time", "throughput", "tokens per second", "tokens/s", "mb/s", "ms)")


class Block:
    def __init__(self, doc, line, lang, text, directives):
        self.doc, self.line, self.lang, self.text = doc, line, lang, text
        self.directives = directives  # {kind: argument}

    def where(self):
        return f"{self.doc}:{self.line}"


def parse_blocks(path, name):
    """Fenced blocks of a markdown file with the docs-test directives right before each."""
    blocks, directives, fence = [], {}, None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if fence is None:
            m = re.match(r"\s*<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->\s*$", line)
            if m:
                if m.group(1) not in ("skip", "env", "name", "output"):
                    raise SystemExit(f"{name}:{i + 1}: unknown docs-test directive '{m.group(1)}'")
                directives[m.group(1)] = m.group(2)
                continue
            m = re.match(r"\s*```(\w*)\s*$", line)
            if m:
                fence = (i, m.group(1), [])
            elif line.strip():
                directives = {}
            continue
        if re.match(r"\s*```\s*$", line):
            start, lang, body = fence
            blocks.append(Block(name, start + 1, lang, "\n".join(body), directives))
            directives, fence = {}, None
        else:
            fence[2].append(line)
    if fence is not None:
        raise SystemExit(f"{name}:{fence[0] + 1}: unclosed code fence")
    return blocks


def line_pattern(doc_line):
    """A regex for one quoted output line, and each quoted figure with whether it is a timing."""
    text = re.sub(TIMESTAMP, "\x00", doc_line.strip())
    parts, figures, field = [], [], ""
    for token in re.findall(rf"\x00|\.\.\.|{NUMBER}|\s+|.", text):
        if token == "\x00":
            parts.append(TIMESTAMP)
        elif token == "...":
            parts.append(".*?")
        elif re.fullmatch(NUMBER, token):
            parts.append(f"({NUMBER})")
            figures.append((token, any(v in field.lower() for v in VOLATILE)))
        elif token.isspace():
            parts.append(r"\s+")
        else:
            parts.append(re.escape(token))
        field = "" if token == "|" else field + token
    return re.compile("".join(parts)), figures


def close(quoted, printed, rtol):
    a, b = float(quoted), float(printed)
    return a == b or abs(a - b) <= rtol * max(abs(a), abs(b))


def check_output(block, output, rtol):
    """Errors for the quoted lines of `block` that `output` lacks (in order, figures within rtol)."""
    errors, out_lines, at = [], output.split("\n"), 0
    for doc_line in block.text.split("\n"):
        if not doc_line.strip():
            continue
        pattern, figures = line_pattern(doc_line)
        near, near_score = None, -1  # the printed line of the same shape with the most figures alike
        for j in range(at, len(out_lines)):
            m = pattern.search(out_lines[j])
            if not m:
                continue
            alike = [volatile or close(quoted, printed, rtol)
                     for (quoted, volatile), printed in zip(figures, m.groups())]
            if all(alike):
                at = j + 1
                break
            if sum(alike) > near_score:
                near, near_score = out_lines[j].strip(), sum(alike)
        else:
            if near:
                errors.append(f"{block.where()}: the document quotes\n    {doc_line.strip()}\n"
                              f"  but the run printed\n    {near}\n  (a figure differs by more than rtol {rtol:g})")
            else:
                errors.append(f"{block.where()}: no line of the run's output matches\n    {doc_line.strip()}")
    return errors


def make_root(build):
    """A temporary directory that looks like the repository root, with an empty out/."""
    root = tempfile.mkdtemp(prefix="mt-docs-")
    for entry in os.listdir(REPO):
        if entry not in (".git", "build", "out"):
            os.symlink(os.path.join(REPO, entry), os.path.join(root, entry))
    os.symlink(os.path.abspath(build), os.path.join(root, "build"))
    return root


def script_for(blocks):
    """One bash script running the blocks in order, each announced by a marker line."""
    lines = ["set -e -o pipefail"]
    for i, b in enumerate(blocks):
        lines.append(f"echo '{MARK} {i}'")
        names = []
        for assignment in b.directives.get("env", "").split():
            lines.append(f"export {assignment}")
            names.append(assignment.split("=", 1)[0])
        lines.append(b.text)
        if names:
            lines.append("unset " + " ".join(names))
    lines.append(f"echo '{MARK} end'")
    return "\n".join(lines) + "\n"


def run_doc(path, name, root, env):
    """Runs one document's blocks; returns the list of errors."""
    blocks = parse_blocks(path, name)
    runnable = [b for b in blocks if b.lang in RUNNABLE and "skip" not in b.directives]
    for b in blocks:
        if b.lang in RUNNABLE and b not in runnable:
            print(f"[docs-test] {b.where()}: not run here: {b.directives['skip']}", flush=True)
    if not runnable:
        return []
    outputs, current, started = {}, None, time.time()
    proc = subprocess.Popen(["bash", "-c", script_for(runnable)], cwd=root, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    for line in proc.stdout:
        if line.startswith(MARK):
            tag = line.split()[1]
            current = None if tag == "end" else runnable[int(tag)]
            if current:
                outputs[current] = []
                print(f"[docs-test] {current.where()}: running ({time.time() - started:.0f} s into {name})",
                      flush=True)
            continue
        print("    " + line, end="", flush=True)
        if current:
            outputs[current].append(line)
    status = proc.wait()
    try:  # a block may leave a server running in the background
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
    errors = []
    if status != 0 or current is not None:
        where = current.where() if current else name
        errors.append(f"{where}: the block failed (exit status {status}); its output is above")
        return errors
    last, named = None, {}
    for b in blocks:
        if b in outputs:
            last = b
            if "name" in b.directives:
                named[b.directives["name"]] = b
        elif "output" in b.directives:
            spec = b.directives["output"]
            of = re.search(r"\bof\s+(\S+)", spec)
            rtol = re.search(r"\brtol=(\S+)", spec)
            source = named.get(of.group(1)) if of else last
            if source is None:
                errors.append(f"{b.where()}: quoted output of {of.group(1) if of else 'the last block'}, "
                              "which did not run before it")
            else:
                errors += check_output(b, "".join(outputs[source]), float(rtol.group(1)) if rtol else 1e-3)
    return errors


def cached_setting(build, name):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def default_docs():
    others = sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md"))
    return FIRST_DOCS + [d for d in others if d not in FIRST_DOCS]


def run_docs(docs, build, keep):
    env = dict(os.environ)
    # The quick start's build.sh reconfigures build/: keep the configuration under test.
    cuda = cached_setting(build, "MT_CUDA")
    if cuda:
        env["MT_CUDA"] = cuda
    root = make_root(build)
    errors = []
    try:
        for name in docs:
            path = name if os.path.isabs(name) else os.path.join(REPO, name)
            shown = os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else os.path.basename(path)
            errors += run_doc(path, shown, root, env)
    finally:
        if keep:
            print(f"[docs-test] kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    for e in errors:
        print("[docs-test] error: " + e, file=sys.stderr)
    print(f"[docs-test] {'FAILED' if errors else 'passed'}: {len(docs)} documents, {len(errors)} errors", flush=True)
    return 1 if errors else 0


SELF_TEST_DOCS = {
    "good.md": """Text.

<!-- docs-test: name log -->
```sh
echo ' iteration       10/     150 | elapsed time per iteration (ms): 12.5 | lm loss: 4.761218E+00 |'
GREETING=hello
```

```sh
echo another block
```

<!-- docs-test: output of log -->
```
 iteration       10/     150 | elapsed time per iteration (ms): 99.0 | lm loss: 4.7612E+00 |
```

<!-- docs-test: skip needs a cluster -->
```sh
exit 3
```

```bash
test "$GREETING" = hello   # a later block sees the earlier one's variables
```
""",
    "wrong_flag.md": """```sh
build/megatron train --no-such-flag 1 --mock-data --vocab-size 64 --micro-batch-size 1 --lr 1e-3 --train-iters 1
```
""",
    "wrong_figure.md": """```sh
echo 'lm loss: 4.761218E+00'
```

<!-- docs-test: output -->
```
lm loss: 4.9E+00
```
""",
    "missing_line.md": """```sh
echo 'validation loss at iteration 50'
```

<!-- docs-test: output -->
```
validation loss at iteration 100
```
""",
}


def self_test(build):
    """The harness fails a wrong flag, a wrong figure and a missing line, and passes a good doc."""
    tmp = tempfile.mkdtemp(prefix="mt-docs-self-")
    failures = []
    try:
        for name, text in SELF_TEST_DOCS.items():
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(text)
            print(f"[docs-test] self-test {name}", flush=True)
            status = run_docs([path], build, keep=False)
            if (status == 0) != (name == "good.md"):
                failures.append(f"{name}: exit status {status}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("[docs-test] self-test wrong: " + f, file=sys.stderr)
    print(f"[docs-test] self-test {'FAILED' if failures else 'passed'}")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"), help="the build directory under test")
    parser.add_argument("--docs", nargs="+", help="markdown files, in order (default: README.md and docs/*.md)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--self-test", action="store_true", help="check that the harness catches broken blocks")
    args = parser.parse_args()
    if args.self_test:
        return self_test(args.build)
    return run_docs(args.docs or default_docs(), args.build, args.keep)


if __name__ == "__main__":
    sys.exit(main())
