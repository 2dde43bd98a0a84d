"""One long input through captionbert (--long-tokens, 8,192 by default; fp32): the forward's peak extra memory (peak
RSS minus the RSS after the model is built) and its time, SDPA vs eager attention, each in a fresh subprocess that
builds its own model. Target: SDPA <= 0.25x eager memory.
"""

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

from tools import runs
from tools.bench.common import SHAPES, build_captionbert, row, timed


def memory_mib(field):
    """VmRSS (resident now) or VmHWM (peak resident) of this process, in MiB. Not ru_maxrss: on Linux that starts
    from the RSS of the parent at fork, so a subprocess of a big parent would report the parent's size."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024  # the kernel writes kB


def child(attn_implementation, tokens, tiny, seed):
    """Runs alone in a fresh interpreter: one forward of a `tokens`-long input; prints its time and extra peak RSS.
    The forward is the first, so both implementations also carry the same one-time setup (~17 MiB, a few ms)."""
    torch.set_num_threads(os.cpu_count())
    model = build_captionbert(SHAPES[tiny], seed, attn_implementation)
    input_ids = torch.randint(1000, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(seed))
    gc.collect()
    baseline = memory_mib("VmRSS")
    with torch.inference_mode():
        seconds = timed(lambda: model(input_ids))
    print(json.dumps({"seconds": seconds, "peak_extra_mib": memory_mib("VmHWM") - baseline}))


def in_subprocess(config, attn_implementation):
    """{"seconds", "peak_extra_mib"} of child run in a fresh subprocess."""
    code = (f"from tools.bench.long_input import child; "
            f"child({attn_implementation!r}, {config.long_tokens}, {config.tiny}, {config.seed})")
    result = subprocess.run([sys.executable, "-c", code], cwd=runs.ROOT, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"long-input subprocess ({attn_implementation}) failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def measure(config, setup):
    """(rows, report part); setup is not used: each subprocess builds its own model. The rows: one long input's peak
    extra RSS and forward time, SDPA vs eager; the part: both results under long_input."""
    long = {name: in_subprocess(config, name) for name in tqdm(("sdpa", "eager"), desc=f"{config.long_tokens} tokens")}
    sdpa, eager = long["sdpa"], long["eager"]
    rows = [row(f"{config.long_tokens} tokens fp32 peak extra RSS: sdpa vs eager", "MiB", sdpa["peak_extra_mib"],
                eager["peak_extra_mib"], sdpa["peak_extra_mib"] / eager["peak_extra_mib"], ("<=", 0.25)),
            row(f"{config.long_tokens} tokens fp32 forward: sdpa vs eager (speed-up)", "s", sdpa["seconds"],
                eager["seconds"], eager["seconds"] / sdpa["seconds"])]
    return rows, {"long_input": long}
