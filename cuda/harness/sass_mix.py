"""The instruction mix of each kernel's innermost loop that holds tensor-core instructions (HMMA),
read from a `cuobjdump -sass` dump: a static count, no GPU needed (docs/kernels/cuda-invariant-qmm.md,
session 23). Per kernel, one JSON line: its name (demangled when c++filt is on PATH), the loop's
instruction count, its HMMA count and its opcodes (the mnemonic before the first dot) by count,
and the sizes of every loop that holds an HMMA, smallest first ("hmma_loops": an unrolled inner
loop runs several times per pass of the one around it; the count per pass is the reader's).

    python3 sass_mix.py DUMP [NAME_REGEX]

The loop is the smallest range [target, branch] of a backward BRA that holds an HMMA. A kernel
with no such loop prints "loop": null. No dump, an unreadable one or a bad NAME_REGEX: a message on
stderr, exit 2.
"""
import collections
import json
import re
import shutil
import subprocess
import sys

INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)")


def demangle(names):
    if not names or not shutil.which("c++filt"):
        return names
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    lines = out.stdout.splitlines()
    return lines if len(lines) == len(names) else names


def functions(text):
    """(mangled name, [(address, instruction)]) per function of the dump."""
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name, _, body = part.partition("\n")
        ins = []
        for line in body.split("\n"):
            m = INSTR.match(line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2)))
        yield name.strip(), ins


def opcode(instr):
    words = [w for w in instr.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else ""


def hmma_loops(ins):
    """The bodies of the backward branches' ranges that hold an HMMA, smallest first."""
    at = {a: i for i, (a, _) in enumerate(ins)}
    loops = []
    for i, (a, op) in enumerate(ins):
        m = BRANCH.search(op)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= a or target not in at:
            continue
        body = ins[at[target]: i + 1]
        if any(opcode(o) == "HMMA" for _, o in body):
            loops.append(body)
    return sorted(loops, key=len)


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        text = open(argv[1]).read()
        pattern = re.compile(argv[2]) if len(argv) > 2 else None
    except OSError as e:
        print(f"sass_mix: cannot read the dump {argv[1]}: {e.strerror}", file=sys.stderr)
        return 2
    except re.error as e:
        print(f"sass_mix: {argv[2]!r} is not a regular expression: {e}", file=sys.stderr)
        return 2
    funcs = list(functions(text))
    names = demangle([n for n, _ in funcs])
    for (mangled, ins), name in zip(funcs, names):
        if pattern and not (pattern.search(name) or pattern.search(mangled)):
            continue
        loops = hmma_loops(ins)
        loop = loops[0] if loops else None
        row = {"kind": "sass_loop", "kernel": name, "instructions": len(ins), "loop": None,
               "hmma_loops": [len(b) for b in loops]}
        if loop:
            mix = collections.Counter(opcode(o) for _, o in loop)
            row["loop"] = {
                "instructions": len(loop),
                "hmma": mix["HMMA"],
                "mix": dict(mix.most_common()),
            }
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
