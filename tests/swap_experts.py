#!/usr/bin/env python3
"""A copy of a DS4 GGUF with two routed experts of one layer swapped: the
shape of a routing bug (the router picks expert A, the engine computes B),
for the proofs that ds4ref-conform fails a backend running a wrong model
(docs/CONFORM.md §7).

    tests/swap_experts.py GGUF_INFO_PROGRAM IN OUT LAYER A B

Every stacked expert tensor of the layer (ffn_gate_exps, ffn_up_exps,
ffn_down_exps) has its experts' slices exchanged; the router and everything
else are left as they are.  Offsets and sizes come from `ds4ref-gguf info`'s
tensor table (the file offset and bytes of each tensor); expert e's slice is
the e-th of the tensor's last dimension, contiguous in the file."""
import os
import re
import shutil
import subprocess
import sys


def expert_tensors(info, layer):
    """(name, offset, bytes, n_expert) of the layer's stacked expert tensors."""
    pat = re.compile(r"^\s*(blk\.%d\.ffn_(?:gate|up|down)_exps\.weight)\s+\S+\s+"
                     r"\[([0-9, ]+)\]\s+(\d+)\s+(\d+)\s*$" % layer)
    found = []
    for line in info.splitlines():
        m = pat.match(line)
        if m:
            dims = [int(d) for d in m.group(2).split(",")]
            found.append((m.group(1), int(m.group(3)), int(m.group(4)), dims[-1]))
    return found


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    prog, src, dst = sys.argv[1:4]
    layer, a, b = (int(v) for v in sys.argv[4:7])
    info = subprocess.run([prog, "info", src], check=True, capture_output=True,
                          text=True).stdout
    tensors = expert_tensors(info, layer)
    if len(tensors) != 3:
        sys.exit("%s: layer %d has %d stacked expert tensors, not 3" % (src, layer, len(tensors)))
    for name, off, size, n_expert in tensors:
        if not (0 <= a < n_expert and 0 <= b < n_expert and a != b):
            sys.exit("%s: experts %d and %d: the layer has %d" % (name, a, b, n_expert))
        if size % n_expert:
            sys.exit("%s: %d bytes are not %d experts' slices" % (name, size, n_expert))
    # Written beside, then renamed: a failure leaves no half-swapped model.
    tmp = dst + ".tmp"
    shutil.copyfile(src, tmp)
    with open(tmp, "r+b") as f:
        for name, off, size, n_expert in tensors:
            per = size // n_expert
            f.seek(off + a * per)
            ea = f.read(per)
            f.seek(off + b * per)
            eb = f.read(per)
            if ea == eb:
                sys.exit("%s: experts %d and %d are the same bytes" % (name, a, b))
            f.seek(off + a * per)
            f.write(eb)
            f.seek(off + b * per)
            f.write(ea)
    os.replace(tmp, dst)


if __name__ == "__main__":
    main()
