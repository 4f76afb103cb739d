"""rlrun.core.private.torch: tensordict's import-time torch.compiler calls are deferred (no torch._dynamo at
start-up; compile works), and each private name has a public path rlrun takes when it moved."""

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


# ---------------------------------------------------------------- the guards: a name that moved

def _fresh_notes(monkeypatch):
    from rlrun.core.private import torch as private

    monkeypatch.setattr(private, "_SAID", set())
    return private


def test_an_optimiser_step_takes_torchs_own_path_when_its_hook_lists_moved(monkeypatch, capsys):
    """Where the lists moved, rlrun's step is not allowed: ``needs_own_step`` sends every step through
    torch's own ``opt.step()`` (the public path; the whole-process test below trains on it)."""
    import types

    import torch

    from rlrun.trainer.optim import needs_own_step

    private = _fresh_notes(monkeypatch)
    opt = torch.optim.Adam(torch.nn.Linear(4, 3).parameters(), lr=0.1)
    assert private.own_step_allowed(opt) and not needs_own_step(opt)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(private, "_optimizer_module", lambda: types.SimpleNamespace())  # the lists moved
    assert needs_own_step(opt) and needs_own_step(opt)
    err = capsys.readouterr().err
    assert err.count("rlrun: note: torch") == 1 and "torch's own Optimizer.step" in err, err


def test_inductors_flags_are_kept_when_the_builder_function_moved(monkeypatch, capsys):
    from torch._inductor import cpp_builder

    private = _fresh_notes(monkeypatch)
    monkeypatch.delattr(cpp_builder, "_get_optimization_cflags")
    assert private.let_gcc_vectorise_loops() is False and private.let_gcc_vectorise_loops() is False
    err = capsys.readouterr().err
    assert err.count("rlrun: note: torch") == 1 and "gcc flags are kept" in err, err


def test_the_optimiser_cache_is_left_alone_when_torch_compile_moved(monkeypatch, capsys):
    import torch

    private = _fresh_notes(monkeypatch)
    monkeypatch.setitem(sys.modules, "torch._compile", None)  # import torch._compile now fails
    assert private._disable_dynamo_target(torch.optim.Optimizer.zero_grad) is None
    assert capsys.readouterr().err.count("rlrun: note: torch") == 1


def test_tensordicts_import_runs_as_it_is_when_torch_compiler_moved(monkeypatch, capsys):
    import torch.compiler

    private = _fresh_notes(monkeypatch)
    monkeypatch.delattr(torch.compiler, "allow_in_graph")
    assert private._defer() is None
    private._restore(None)
    assert capsys.readouterr().err.count("rlrun: note: torch") == 1


def test_a_run_on_the_public_paths_trains_and_says_so_once(tmp_path):
    """Every torch mechanism turned to its public path at once: the run trains, one line each."""
    script = ("import sys, types, rlrun.core.private.torch as t; "
              "t._optimizer_module = lambda: types.SimpleNamespace(); t._OPTIMIZER_METHODS = (); "
              "from rlrun.cli.main import main; sys.exit(main())")
    done = subprocess.run([sys.executable, "-c", script, "total_frames=1024", "progress=false", "logger=csv",
                           "hydra.run.dir=run"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("rlrun: note: torch") == 1 and "[rlrun] finished: 1024 frames" in done.stderr
