"""``rlrun export <run dir or checkpoint> [--format pt2|onnx] [--out FILE]``: a self-contained policy file.

The exported program maps a batch of observations (``[batch, *observation_shape]``,
the env's observation dtype) to the deterministic actions in the env's own action
space, with the observation normaliser and the action rescaling inside: it needs
torch only (``pt2``: ``torch.export.load(f).module()(obs)``) or an ONNX runtime
(``onnx``, where the ``onnx`` and ``onnxscript`` packages are installed).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from rlrun.core.checkpoint import atomic_write
from rlrun.core.errors import ConfigError, RlrunError
from rlrun.core.runfiles import check_file
from rlrun.lifecycle.load import LoadedPolicy, find_checkpoint, load

FORMATS = {"pt2": ".pt2", "onnx": ".onnx"}


def example_batch(pi: LoadedPolicy, n: int = 2) -> torch.Tensor:
    """A batch of zero observations of the policy's shape and dtype."""
    return torch.from_numpy(np.zeros((n, *pi.spec.observation_shape), pi.spec.observation_dtype))


def export(path: str | Path, fmt: str = "pt2", out: str | Path | None = None,
           trust_code: bool = False) -> Path:
    """Writes the policy of ``path`` as a ``torch.export`` program or an ONNX model; returns the file."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}", key="--format", fix=f"use one of {', '.join(FORMATS)}")
    src = find_checkpoint(path)
    out = Path(out) if out else src.parent / f"policy{FORMATS[fmt]}"
    if not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
        raise ConfigError(f"cannot write {out}: {out.parent} is not a writable directory", key="--out",
                          fix="give a file path in an existing, writable directory")
    check_file(out, key="--out")  # ONNX: torch's exporter opens the path itself (a link is followed)
    pi = load(src, device="cpu", trust_code=trust_code)
    batch = torch.export.Dim("batch")
    if fmt == "pt2":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            program = torch.export.export(pi, (example_batch(pi),), dynamic_shapes=({0: batch},))
        return atomic_write(out, lambda f: torch.export.save(program, f), key="--out")  # full disk: one line
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401  (torch's ONNX exporter needs it)
    except ImportError as err:
        raise ConfigError(f"ONNX export needs a package that is not installed ({err})", key="--format",
                          fix="python -m pip install onnx onnxscript (or use --format pt2)") from None
    # the exporter logs every torchvision op it skips and warns of its own deprecations: not the user's
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        # the weights inside the model (external_data=False): torch's default put them in a
        # policy.onnx.data beside it that no message named, and the model alone did not open
        torch.onnx.export(pi, (example_batch(pi),), str(out), dynamo=True, input_names=["observation"],
                          output_names=["action"], dynamic_shapes=({0: batch},), verbose=False,
                          external_data=False)
    return out


def main(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlrun export", description=__doc__.split("\n\n")[1])
    parser.add_argument("path", help="a run directory, or a checkpoint.pt / policy.pt in one")
    parser.add_argument("--format", default="pt2", choices=sorted(FORMATS))
    parser.add_argument("--out", default=None, help="the file to write (default: policy.<format> "
                        "in the run directory)")
    parser.add_argument("--trust-code", action="store_true", help="accept a saved config that imports "
                        "or calls code (_target_, env.imports, module:id); only for files you trust")
    opts = parser.parse_args(args)
    try:
        out = export(opts.path, opts.format, opts.out, opts.trust_code)
    except RlrunError as err:
        print(f"rlrun: error: {err.render()}", file=sys.stderr)
        return err.exit_code
    print(out)
    return 0
