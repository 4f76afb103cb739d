"""The generated reference of the documentation site: ``python -m rlrun.cli.reference [OUT_DIR]``.

Writes ``docs/reference/*.md`` from the same sources the checks and ``rlrun list`` use, so the
pages cannot drift from the code: every registered component's options (type, range and default
from its factory's signature, the line from its docstring's ``Args:``), every preset of the
shipped config tree with what it selects and sets, the top-level config sections (types from
``rlrun.core.config_schema``, defaults and comments from ``conf/config.yaml``), every metric name
rlrun logs and every exit code. ``tests/docs/test_reference.py`` fails when the committed pages
differ from a fresh generation.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from rlrun.cli.reference_tables import EXIT_CODES, KIND_TEXT, METRICS
from rlrun.core.registry import KINDS, SUPPLIED_FIX, Entry, Range, describe, entries
from rlrun.lifecycle.compose import CONF_DIR, _first_comment, _group_dirs, config_groups

DEFAULT_OUT = Path("docs")

# What rlrun passes to each kind's factories (rlrun/lifecycle/build.py, rlrun/lifecycle/run.py): objects and
# top-level values, not options a config sets. tests/docs/test_reference.py checks these against the calls.
SUPPLIED = {
    "env": set(), "model": {"spec"}, "loss": {"policy", "spec", "gamma"}, "optim": {"param_groups"},
    "exploration": {"actor", "spec", "num_envs"}, "buffer": {"data", "seed", "device", "run_dir"},
    "collector": {"env", "env_config", "policy", "data", "buffer", "total_frames", "seed", "device"},
    "hook": {"gamma", "loss", "policy"},
    "logger": {"run_dir", "run_name", "run_id", "tags", "resumed", "resume_step"},
}


def cell(text: Any) -> str:
    """``text`` for one Markdown table cell: RST ``code`` as Markdown, `|` and `<` escaped."""
    out = []
    for i, part in enumerate(re.split(r"``?([^`]+)``?", str(text))):
        if i % 2:  # a code span: its text stays literal; a pipe would still end the cell
            out.append(f"`{part.replace('|', '&#124;')}`" if "|" not in part else
                       f"<code>{_html(part).replace('|', '&#124;')}</code>")
        else:
            out.append(_html(part).replace("|", "\\|"))
    return " ".join("".join(out).split())


def _html(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def value(v: Any) -> str:
    """A default as written in a config: null, true, [64, 64], 0.0003."""
    if v is inspect.Parameter.empty or v is dataclasses.MISSING:
        return "required"
    text = yaml.safe_dump(v, default_flow_style=True, width=10**6).strip()
    return text.removesuffix("...").strip()


def type_and_range(hint: Any) -> tuple[str, str]:
    """A type annotation as (type, range or choices), in the words the one-line errors use."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [type_and_range(a) for a in args if a is not type(None)]
        kind = " or ".join(dict.fromkeys(t for t, _ in parts)) + (" or null" if type(None) in args else "")
        return kind, "; ".join(r for _, r in parts if r)
    if origin is Annotated:
        base, ranges = args[0], [m for m in args[1:] if isinstance(m, Range)]
        return type_and_range(base)[0], ranges[0].describe() if ranges else ""
    if origin is Literal:
        return "choice", ", ".join(value(a) for a in args)
    if hint is inspect.Parameter.empty:
        return "any", ""
    names = {int: "int", float: "float", bool: "bool", str: "str", dict: "mapping", list: "list",
             tuple: "list", typing.Any: "any"}
    if hint in names:
        return names[hint], ""
    if origin in (list, tuple) or origin is typing.Sequence:
        return "list", ""
    if origin is dict:
        return "mapping", ""
    return describe(hint), ""


def arg_docs(obj: Any) -> dict[str, str]:
    """``name -> description`` from a Google-style ``Args:`` (or ``Attributes:``) docstring section."""
    doc = inspect.getdoc(obj) or ""
    out: dict[str, str] = {}
    current, indent = None, None
    in_args = False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Attributes:", "Options:"):
            in_args, current, indent = True, None, None
            continue
        if not in_args:
            continue
        if not stripped:
            current = None
            continue
        lead = len(line) - len(line.lstrip())
        m = re.match(r"(\*{0,2}\w+)(?: \([^)]*\))?: (.*)", stripped)
        if m and (indent is None or lead <= indent):
            indent, current = lead, m.group(1).lstrip("*")
            out[current] = m.group(2)
        elif current is not None and indent is not None and lead > indent:
            out[current] += " " + stripped
        elif lead == 0:
            in_args = False
    return out


Option = tuple[str, str, str, str, str]  # name, type, range, default, description


def factory_options(factory: Any, kind: str) -> tuple[list[Option], list[str], list[str]]:
    """A factory's config options ``(name, type, range, default, description)``, the top-level keys
    it takes (gamma, seed, ...), and the objects rlrun passes in (policy, spec, ...)."""
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception:  # the same fallback as the registry's checks: no types then
        hints = {}
    docs = {**arg_docs(factory), **(arg_docs(factory.__init__) if inspect.isclass(factory) else {})}
    options, top, supplied = [], [], []
    for name, p in inspect.signature(factory).parameters.items():
        if name == "self" or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        if name == "registered_as":  # the node's own name: rlrun's bookkeeping, not an option
            continue
        if name in SUPPLIED_FIX:
            top.append(name)
            continue
        if name in SUPPLIED[kind]:
            supplied.append(name)
            continue
        hint = hints.get(name, p.annotation)
        words, bounds = type_and_range(hint)
        simple = words.split(" or ")[0] in ("int", "float", "bool", "str", "mapping", "list", "choice", "any")
        if p.default is p.empty and not simple:
            supplied.append(name)
            continue
        options.append((name, words, bounds, value(p.default), docs.get(name, "")))
    return options, top, supplied


def preset_comments(kind: str, name: str) -> dict[str, str]:
    """``option -> comment`` from the inline comments of the presets of ``kind`` that build ``name``
    (``conf/optim/adam.yaml``'s ``lr_schedule: constant   # constant | linear ...``): the description
    of an option whose factory's docstring has none."""
    folder = CONF_DIR / kind
    out: dict[str, str] = {}
    paths = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    own = [q for q in paths if q.stem == name]
    for path in own or paths:  # another preset's comment may describe its own use (minibatch's capacity)
        comments = _config_comments(path)
        if comments.get("name", ("",))[0] == name:
            for key, (_, comment) in comments.items():
                if comment and "." not in key and key != "name":
                    out.setdefault(key, comment)
    return out


def component_page(kind: str, rows: list[Entry]) -> str:
    where, what = KIND_TEXT[kind]
    pick = where.replace("<name>", "NAME")
    lines = [f"# {kind} components", "", f"{what} Config node: `{where}`; pick one with "
             f"`{pick}.name=...` or a preset (see [presets](../presets/index.md)).",
             "", "Generated by `python -m rlrun.cli.reference` from the registry "
             "(`rlrun list " + kind + "`); do not edit.", ""]
    for e in rows:
        options, top, supplied = factory_options(e.factory, kind)
        fallback = preset_comments(kind, e.name)
        options = [(n, t, r, d, doc or fallback.get(n, "")) for n, t, r, d, doc in options]
        module = getattr(e.factory, "__module__", "")
        lines += [f"## {e.name}", "", cell(e.summary) or "(no docstring)", "",
                  f"`{kind}/{e.name}`, defined in `{module}`."]
        if top:
            lines.append(f" Takes the top-level {', '.join(f'`{t}`' for t in top)}.")
        if supplied:
            lines.append(f" rlrun passes in: {', '.join(f'`{s}`' for s in supplied)}.")
        lines.append("")
        if options:
            lines += ["| Option | Type | Range | Default | Description |", "|---|---|---|---|---|"]
            lines += [f"| `{n}` | {cell(t)} | {cell(r)} | `{cell(d)}` | {cell(doc)} |"
                      for n, t, r, d, doc in options]
        else:
            lines.append("No options.")
        lines.append("")
    return "\n".join(lines)


def flatten(node: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Dotted keys of a nested mapping (lists and empty mappings stay values)."""
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, node


def preset_rows(group: str, path: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """What a preset file selects (its defaults list) and sets (every other key, dotted)."""
    data = yaml.safe_load(path.read_text()) or {}
    selects = []
    for item in data.pop("defaults", None) or []:
        if isinstance(item, dict):
            selects += [f"{k}: {value(v)}" for k, v in item.items()]
        elif item != "_self_":
            selects.append(str(item))
    return selects, [(k, value(v)) for k, v in flatten(data)]


def _link_default(item: str) -> str:
    """A defaults-list entry, linked to the page that documents what it names."""
    text = f"`{cell(item)}`"
    m = re.fullmatch(r"/signature/(\w+)/(\w+)@_here_", item)
    if m and m.group(1) in KINDS:
        return f"[{text}](../components/{m.group(1)}.md#{_anchor(m.group(2))})"
    m = re.fullmatch(r"/?([\w/]+): (\w+)", item)
    if m and m.group(1) in config_groups() and m.group(2) in config_groups()[m.group(1)]:
        return f"[{text}]({m.group(1).replace('/', '-')}.md#{_anchor(m.group(2))})"
    return text


def preset_page(group: str, options: list[str], folder: Path) -> str:
    title = {"tuned": "tuned (per algo and env, picked up automatically)",
             "paper": "paper (`+paper=...`: one cell of a paper's table)"}.get(group, group)
    select = "+" if group in ("paper", "sweep", "hpo") else ""
    lines = [f"# {title}", "", f"Presets of `{group}`, selected with `{select}{group}=NAME`. "
             "Generated by `python -m rlrun.cli.reference` from the config tree; do not edit. "
             "`rlrun --cfg job " f"{select}{group}=NAME` prints the whole composed config.", ""]
    for opt in options:
        path = folder / f"{opt}.yaml"
        selects, sets = preset_rows(group, path)
        lines += [f"## {opt}", "", cell(_first_comment(path)) or "(no description)", ""]
        if selects:
            lines += ["Starts from: " + ", ".join(_link_default(s) for s in selects), ""]
        if sets:
            lines += ["| Key | Value |", "|---|---|"]
            lines += [f"| `{cell(k)}` | `{cell(v)}` |" for k, v in sets]
        lines.append("")
    return "\n".join(lines)


SECTION_KINDS = ("model", "loss", "buffer", "optim", "collector", "exploration")


def algo_page(algo: str) -> str:
    """One algorithm preset whole: what it selects and sets, then every option of the components it
    selects (model, loss, buffer, optimiser, collector, exploration, hooks) with the value this preset
    gives it beside the factory's default."""
    from rlrun.core.registry import lookup

    dirs = _group_dirs()
    path = dirs["algo"] / f"{algo}.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    picks = {}
    for item in data.pop("defaults", None) or []:
        if isinstance(item, dict):
            for k, v in item.items():
                picks[k.removeprefix("override ").lstrip("/")] = str(v)
    sets = dict(flatten(data))
    tuned = [t for t in config_groups().get("tuned", []) if t.startswith(f"{algo}_")]
    lines = [f"# algo={algo}", "", cell(_first_comment(path)), "",
             f"Generated by `python -m rlrun.cli.reference` from `conf/algo/{algo}.yaml`, the presets it "
             "selects and their factories; do not edit. "
             f"`rlrun --cfg job algo={algo}` prints the composed config.", ""]
    if tuned:
        lines += ["Per-env settings, picked up automatically with the env: " + ", ".join(
            f"[`{t}`](../presets/tuned.md#{_anchor(t)})" for t in tuned) + ".", ""]
    run = [(k, v) for k, v in sets.items() if k.split(".")[0] not in (*SECTION_KINDS, "hooks")]
    if run:
        lines += ["## Run settings", "", "| Key | Value |", "|---|---|"]
        lines += [f"| [`{cell(k)}`](../config.md) | `{cell(value(v))}` |" for k, v in run]
        lines.append("")
    sections = [(g, picks[g]) for g in SECTION_KINDS if g in picks]
    sections += [(f"hooks.{h}", str(node["name"])) for h, node in (data.get("hooks") or {}).items()
                 if isinstance(node, dict) and "name" in node]
    for section, preset in sections:
        hook = section.startswith("hooks.")
        text = "" if hook else (dirs[section] / f"{preset}.yaml").read_text()
        node = {k: v for k, v in (yaml.safe_load(text) or {}).items() if k != "defaults"}
        kind = "hook" if hook else section
        name = preset if hook else str(node.get("name", preset))
        entry = lookup(kind, name)
        anchor = f"../components/{kind}.md#{_anchor(name)}"
        via = "" if hook else f" (preset [`{section}={preset}`](../presets/{section}.md#{_anchor(preset)}))"
        lines += [f"## {section}: {name}", "", f"[`{kind}/{name}`]({anchor}){via}: {cell(entry.summary)}", ""]
        options, _, _ = factory_options(entry.factory, kind)
        fallback = preset_comments(kind, name)
        options = [(n, t, r, d, doc or fallback.get(n, "")) for n, t, r, d, doc in options]
        if not options:
            lines += ["No options.", ""]
            continue
        lines += [f"| Option | Type | Range | algo={algo} | Default | Description |",
                  "|---|---|---|---|---|---|"]
        for n, t, r, d, doc in options:
            here = sets.get(f"{section}.{n}", node.get(n, None))
            shown = value(here) if f"{section}.{n}" in sets or n in node else d
            mark = f"**`{cell(shown)}`**" if shown != d else f"`{cell(shown)}`"
            lines.append(f"| `{n}` | {cell(t)} | {cell(r)} | {mark} | `{cell(d)}` | {cell(doc)} |")
        extra = [(k, v) for k, v in sets.items() if k.startswith(section + ".")
                 and k[len(section) + 1:].split(".")[0] not in {o[0] for o in options} | {"name"}]
        lines.append("")
        if extra:
            lines += ["Also set: " + ", ".join(f"`{cell(k)}={cell(value(v))}`" for k, v in extra), ""]
    lines += ["Values in **bold** differ from the factory's default.", ""]
    return "\n".join(lines)


def _config_comments(path: Path = CONF_DIR / "config.yaml") -> dict[str, tuple[str, str]]:
    """``dotted key -> (value, comment)`` from a YAML file's own lines (conf/config.yaml's comments
    document it; a preset's comments document the options it writes out)."""
    out: dict[str, tuple[str, str]] = {}
    stack: list[tuple[int, str]] = []
    last = None
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        lead = len(line) - len(line.lstrip())
        if line.lstrip().startswith("#"):
            if last is not None and lead > 0 and lead >= last[1] - 2:  # a comment continued on its own line
                key, _ = last
                default, comment = out[key]
                out[key] = (default, f"{comment} {line.strip().lstrip('#').strip()}")
            continue
        m = re.match(r"\s*([\w]+):\s*([^#]*?)\s*(?:#\s*(.*))?$", line)
        if not m or line.lstrip().startswith("-"):
            last = None
            continue
        while stack and stack[-1][0] >= lead:
            stack.pop()
        key = ".".join([s for _, s in stack] + [m.group(1)])
        stack.append((lead, m.group(1)))
        out[key] = (m.group(2), m.group(3) or "")
        last = (key, line.index("#") if "#" in line else 10**6)
    return out


def config_page() -> str:
    from rlrun.core import config_schema as schema

    comments = _config_comments()
    sections = [("", schema.RunConfig, "The top level"), ("trainer", schema.TrainerSection, "trainer"),
                ("eval", schema.EvalSection, "eval"), ("checkpoint", schema.CheckpointSection, "checkpoint"),
                ("paper", schema.PaperSection, "paper (written by `+paper=...` presets)"),
                ("online", schema.OnlineSection, "online (online DT's schedule, `algo=odt`)")]
    lines = ["# Run config", "", "The sections of a run's config that are not components: their types "
             "and ranges from `rlrun/core/config_schema.py`, their defaults and comments from "
             "`conf/config.yaml`. Generated by `python -m rlrun.cli.reference`; do not edit. "
             "Component sections (`env`, `model`, ...) are in [Components](components/index.md).", ""]
    for prefix, cls, title in sections:
        hints = typing.get_type_hints(cls, include_extras=True)
        lines += [f"## {title}", ""]
        if prefix in ("paper", "online"):
            lines += [cell(inspect.getdoc(cls) or ""), ""]
        lines += ["| Key | Type | Range | Default | Description |", "|---|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            if typing.get_origin(hints[f.name]) is None and dataclasses.is_dataclass(hints[f.name]):
                continue
            if prefix == "" and f.name in ("trainer", "eval", "checkpoint", "paper", "online"):
                continue
            key = f"{prefix}.{f.name}" if prefix else f.name
            kind, bounds = type_and_range(hints[f.name])
            default, comment = comments.get(key, ("", ""))
            if not default and f.default is not dataclasses.MISSING:
                default = value(f.default)
            lines.append(f"| `{key}` | {cell(kind)} | {cell(bounds)} | `{cell(default or 'required')}` "
                         f"| {cell(comment)} |")
        lines.append("")
    return "\n".join(lines)


def loss_outputs() -> dict[str, list[str]]:
    """``loss name -> loss/* terms`` its forward returns: the ``loss_*`` keys in the source of its
    class, its rlrun base classes and the rlrun classes it names (DT's inner loss, QMIX's TD loss)."""
    out = {}
    for e in entries("loss"):
        classes = [c for c in inspect.getmro(e.factory) if c.__module__.startswith("rlrun.")] \
            if inspect.isclass(e.factory) else [e.factory]
        module = vars(inspect.getmodule(e.factory))
        named = {m for c in classes for m in re.findall(r"\b([A-Z]\w+)\(", inspect.getsource(c))}
        classes += [module[n] for n in sorted(named) if inspect.isclass(module.get(n))
                    and module[n].__module__.startswith("rlrun.") and module[n] not in classes]
        keys = [k for c in classes for k in re.findall(r"[\"'](loss_\w+)[\"']\s*[:\]]", inspect.getsource(c))]
        out[e.name] = sorted(dict.fromkeys(k.replace("loss_", "loss/", 1) for k in keys))
    return out


def metrics_page() -> str:
    lines = ["# Metrics", "", "Every metric rlrun logs, the same names for every algorithm and every "
             "logger (MLflow, CSV, TensorBoard, W&B). The step of each is the budget's clock: frames "
             "online, optimiser steps offline; `frames` and `updates` are logged beside them. "
             "Generated by `python -m rlrun.cli.reference`; do not edit.", "",
             "| Metric | Meaning |", "|---|---|"]
    lines += [f"| `{cell(n)}` | {cell(m)} |" for n, m in METRICS]
    lines += ["", "## Loss terms per loss", "", "The `loss/*` names each registered loss logs "
              "(its `loss_*` outputs).", "", "| Loss | Terms |", "|---|---|"]
    lines += [f"| [`{name}`](components/loss.md#{_anchor(name)}) | "
              f"{', '.join(f'`{k}`' for k in keys) or '—'} |" for name, keys in loss_outputs().items()]
    return "\n".join(lines) + "\n"


def exit_codes_page() -> str:
    lines = ["# Exit codes", "", "What the `rlrun` command's exit status means. Generated by "
             "`python -m rlrun.cli.reference`; do not edit.", "", "| Code | Meaning |", "|---|---|"]
    lines += [f"| {c} | {cell(m)} |" for c, m in EXIT_CODES]
    return "\n".join(lines) + "\n"


def paper_cells() -> dict[str, str]:
    """``table -> Markdown`` of the ``+paper=...`` presets' cells as the paper lays them out: one row
    per algorithm, one column per env, each the paper's value linked to its config (the presets'
    ``paper:`` node), then the budgets."""
    dirs = _group_dirs()
    cells: dict[str, dict[tuple[str, str], tuple[str, str, int]]] = {}
    for opt in config_groups().get("paper", []):
        node = (yaml.safe_load((dirs["paper"] / f"{opt}.yaml").read_text()) or {}).get("paper") or {}
        mean, std = node.get("reference_mean"), node.get("reference_std")
        budget = int(node.get("budget_frames") or node.get("budget_updates") or 0)
        cells.setdefault(str(node.get("table", opt.split("/")[0])), {})[
            (str(node.get("algo", "")), str(node.get("env", "")))] = (
            "config (curves only)" if mean is None else f"{value(mean)} ± {value(std)}", opt, budget)
    out = {}
    for table, grid in cells.items():
        unit = "updates" if table == "table2" else "frames"
        algos = sorted({a for a, _ in grid})
        smallest = {e: min(b for (_, e2), (_, _, b) in grid.items() if e2 == e) for _, e in grid}
        envs = sorted(smallest, key=lambda e: (smallest[e], e))
        lines = ["| Algorithm | " + " | ".join(cell(e) for e in envs) + " |", "|---" * (len(envs) + 1) + "|"]
        for a in algos:
            row = [f"[{v}](../reference/presets/paper.md#{_anchor(opt)})" if (a, e) in grid else "—"
                   for e in envs for v, opt, _ in [grid.get((a, e), ("", "", 0))]]
            lines.append(f"| **{cell(a)}** | " + " | ".join(row) + " |")
        lines += ["", "The paper's mean ± std over seeds; each value links to the config that reproduces "
                  "the cell (`rlrun +paper=<config>`). Budgets per run:", ""]
        for budget in sorted({b for _, _, b in grid.values()}):
            keys = [k for k, (_, _, b) in grid.items() if b == budget]
            lines.append(f"- {budget:,} {unit}: {', '.join(sorted({a for a, _ in keys}))} on "
                         f"{', '.join(e for e in envs if any(e == e2 for _, e2 in keys))}")
        out[table] = "\n".join(lines) + "\n"
    return out


def pages() -> dict[str, str]:
    """``path under docs/ -> Markdown`` of every generated page and fragment."""
    out: dict[str, str] = {}
    comp_index = ["# Components", "", "Every registered component, by kind. Generated by "
                  "`python -m rlrun.cli.reference` from the registry; do not edit.", "",
                  "| Kind | Components |", "|---|---|"]
    for kind in KINDS:
        rows = entries(kind)
        out[f"components/{kind}.md"] = component_page(kind, rows)
        comp_index.append(f"| [{kind}]({kind}.md) | " + ", ".join(
            f"[`{e.name}`]({kind}.md#{_anchor(e.name)})" for e in rows) + " |")
    out["components/index.md"] = "\n".join(comp_index) + "\n"
    dirs = _group_dirs()
    preset_index = ["# Presets", "", "Every preset of the shipped config tree (`conf/`, and `sweeps/` "
                    "for `sweep` and `hpo`), by group. Generated by `python -m rlrun.cli.reference`; "
                    "do not edit.", "", "| Group | Presets |", "|---|---|"]
    for group, options in config_groups().items():
        slug = group.replace("/", "-")
        out[f"presets/{slug}.md"] = preset_page(group, options, dirs[group])
        preset_index.append(f"| [{group}]({slug}.md) | " + ", ".join(
            f"[`{o}`]({slug}.md#{_anchor(o)})" for o in options) + " |")
    out["presets/index.md"] = "\n".join(preset_index) + "\n"
    algos = config_groups()["algo"]
    for algo in algos:
        out[f"algo/{algo}.md"] = algo_page(algo)
    out["algo/index.md"] = "\n".join([
        "# Algorithms", "", "One page per algorithm preset (`algo=NAME`): what it selects and sets, and "
        "every option of its components with the value it gives. Generated by "
        "`python -m rlrun.cli.reference`; do not edit.", "", "| algo | What it is |", "|---|---|"] + [
        f"| [`{a}`]({a}.md) | {cell(_first_comment(_group_dirs()['algo'] / f'{a}.yaml').split('. ')[0])} |"
        for a in algos]) + "\n"
    out["config.md"] = config_page()
    out["metrics.md"] = metrics_page()
    out["exit-codes.md"] = exit_codes_page()
    n_components = sum(len(entries(k)) for k in KINDS)
    n_presets = sum(len(v) for v in config_groups().values())
    out["index.md"] = "\n".join([
        "# Reference", "", "Generated from the code by `python -m rlrun.cli.reference` (a test fails "
        "when these pages differ from a fresh generation): the same registry, signatures and config "
        "tree that `rlrun list` shows and the one-line errors check against.", "",
        "- [Algorithms](algo/index.md): each `algo=NAME` preset whole, its components' options with "
        "the values it gives them.",
        "- [Run config](config.md): the sections that are not components (top level, `trainer`, "
        "`eval`, `checkpoint`, `paper`, `online`).",
        f"- [Components](components/index.md): {n_components} registered components in {len(KINDS)} "
        "kinds, each option with its type, range, default and description.",
        f"- [Presets](presets/index.md): {n_presets} presets in {len(config_groups())} groups, with what "
        "each selects and sets.",
        "- [Metrics](metrics.md): every metric name rlrun logs.",
        "- [Exit codes](exit-codes.md): what the command's exit status means."])
    out = {f"reference/{k}": v for k, v in out.items()}
    out.update({f"_snippets/paper-{t}.md": v for t, v in paper_cells().items()})
    return {k: v.rstrip("\n") + "\n" for k, v in out.items()}


def _anchor(title: str) -> str:
    """The id MkDocs' toc gives a heading (its default slugify)."""
    import unicodedata

    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def write(out: Path = DEFAULT_OUT) -> list[Path]:
    """Writes every reference page under ``out`` (stale pages removed); returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    fresh = pages()
    for old in [*(out / "reference").rglob("*.md"), *(out / "_snippets").glob("paper-*.md")]:
        if str(old.relative_to(out)) not in fresh:
            old.unlink()
    paths = []
    for rel, text in fresh.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    paths = write(Path(args[0]) if args else DEFAULT_OUT)
    print(f"wrote {len(paths)} generated pages under {Path(args[0]) if args else DEFAULT_OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
