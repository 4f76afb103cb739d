"""tensordict's import-time torch.compiler calls are deferred: no torch._dynamo at start-up; compile works."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHECK = textwrap.dedent('''
    import sys
    import rlrun.cli.main, rlrun.lifecycle.run, rlrun.loggers.tracking  # core modules
    import rlrun.collectors.sync, rlrun.report.runs
    import tensordict
    assert "tensordict" in sys.modules
    assert "torch._dynamo" not in sys.modules, "torch._dynamo imported at start-up"

    import torch
    from tensordict import TensorDict
    from tensordict.base import _foreach_copy_compiled
    from tensordict.utils import _lock_warn

    linear = torch.nn.Linear(3, 2)
    compiled = torch.compile(linear, backend="eager")
    x = torch.ones(4, 3)
    assert torch.equal(compiled(x), linear(x))
    from torch._dynamo import trace_rules
    # What tensordict asked for at import was applied once Dynamo arrived.
    assert id(_foreach_copy_compiled) in trace_rules._allowed_callable_ids
    assert _lock_warn._dynamo_marked_constant is True
    assert torch.compiler.allow_in_graph.__module__ == "torch.compiler"  # originals restored
    td = TensorDict(a=torch.ones(2, 3), batch_size=[2])
    out = torch.compile(lambda t: (t + 1)["a"].sum(), backend="eager")(td)
    assert out.item() == 12.0
    print("ok")
''')


def test_no_dynamo_at_import_and_compile_still_works():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
