"""Each machine's transition table drawn from its rules (django-fsm ``@transition`` methods) with Graphviz.

Nothing here is hand-written per machine: states come from the state field's choices, edges from the
rules, dashed edges are repairs (``custom={"repair": True}``), double circles are terminal states and
each non-terminal state is labelled with its wait policy.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

from django.utils.html import escape

from workflow.machine import StateMachine, machine_for


def _quote(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _human(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def dot_source(model: type[StateMachine], highlight: str | None = None) -> str:
    lines = [
        f"digraph {_quote(model.aggregate_label())} {{",
        '  rankdir=LR; bgcolor="transparent"; pad=0.2; nodesep=0.35; ranksep=0.5;',
        '  node [fontname="Helvetica", fontsize=11, shape=box, style="rounded,filled", fillcolor="#f4f6f8", '
        'color="#8a96a3"];',
        '  edge [fontname="Helvetica", fontsize=9, color="#5f6b77", fontcolor="#36414c"];',
    ]
    for state in model.all_states():
        attrs = {"id": f"state_{state}"}
        policy = model.WAIT_POLICIES.get(state)
        label = state
        if state in model.TERMINAL_STATES:
            attrs["peripheries"] = "2"
        elif policy is not None:
            if policy.timer_event:
                wait = (
                    f"{_human(policy.after_seconds)} → {policy.timer_event}"
                    if policy.after_seconds is not None
                    else f"at {policy.deadline_field} → {policy.timer_event}"
                )
            else:
                wait = f"escalate after {_human(policy.escalate_after_seconds)}"
            label = f"{state}\\n({policy.owner}; {wait})"
        if state == "manual_review":
            attrs["fillcolor"] = "#fdecea"
        if state == highlight:
            attrs.update(fillcolor="#ffd54f", color="#b26a00", penwidth="2.5")
        attr_text = ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items())
        label_text = '"' + label.replace('"', '\\"') + '"'
        lines.append(f"  {_quote(state)} [label={label_text}, {attr_text}];")
    for rule in model.rules():
        repair = bool(rule.custom.get("repair"))
        for target in model.possible_targets(rule):
            sources = model.all_states() if rule.source in ("*", "+") else [rule.source]
            for source in sources:
                style = ', style="dashed", color="#c0392b", fontcolor="#c0392b"' if repair else ""
                name = f"{rule.name} (repair)" if repair else rule.name
                lines.append(f"  {_quote(source)} -> {_quote(target)} [label={_quote(name)}{style}];")
    lines.append("}")
    return "\n".join(lines)


@functools.lru_cache(maxsize=256)
def _render(source: str) -> str:
    dot = shutil.which("dot")
    if dot is None:
        return f"<pre class='dot-missing'>Graphviz `dot` is not installed; the source:\n{escape(source)}</pre>"
    svg = subprocess.run([dot, "-Tsvg"], input=source.encode(), capture_output=True, check=True, timeout=20).stdout
    text = svg.decode()
    # Inline in the page: drop the XML prolog and doctype, keep the <svg> element.
    return text[text.index("<svg") :]


def svg(label_or_model: str | type[StateMachine], highlight: str | None = None) -> str:
    model = machine_for(label_or_model) if isinstance(label_or_model, str) else label_or_model
    out = _render(dot_source(model, highlight))
    # Graphviz sizes in pt; as px the labels stay readable and a wide machine scrolls sideways.
    out = re.sub(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', r'<svg width="\1px" height="\2px"', out, count=1)
    return out.replace("<svg ", '<svg class="diagram" ', 1)
