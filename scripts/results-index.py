#!/usr/bin/env python3
"""Writes lab/results/INDEX.md: one row per recorded run (a folder or a file of lab/results)
with its machine, commit, command and a one-line summary, read from the run's own files.

Where each field comes from, first found wins:
  - a folder's meta.json ({"machine", "commit", "command", "summary"}) or RUN.md / README.md
    ("Machine:", "Commit:", "Command:" lines; the first heading is the summary);
  - the JSON files the benchmarks write (their "machine", "commit" and "command" keys);
  - for the machine, a gpus.txt / gpu.txt (nvidia-smi -L) in the folder;
  - for a file of lab/results itself (a plot, a table, a log), what files.json says of it
    where the file does not say it itself.
A field found nowhere is written as "?" and named by --check.

A run is what git tracks under lab/results (`git add` a new one first).

  python3 scripts/results-index.py           # writes lab/results/INDEX.md
  python3 scripts/results-index.py --check   # exit 1 if INDEX.md is not what this writes,
                                             # or a run says no machine, commit or command
Standard library only.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lab", "results")
SKIP = {"README.md", "INDEX.md", "files.json"}
FILES_JSON = os.path.join(ROOT, "files.json")
FILES = json.load(open(FILES_JSON, encoding="utf-8")) if os.path.isfile(FILES_JSON) else {}
HEX = re.compile(r"\b[0-9a-f]{7,40}(?:-dirty)?\b")


def machine_of(m):
    """One line for a benchmark JSON's "machine" object."""
    if isinstance(m, str):
        return m
    if not isinstance(m, dict):
        return None
    gpus = m.get("gpus") or []
    names = {}
    for g in gpus:
        name = g if isinstance(g, str) else (g.get("name") if isinstance(g, dict) else None)
        if name:
            names[name] = names.get(name, 0) + 1
    parts = [f"{n}x {k}" if n > 1 else k for k, n in names.items()]
    if m.get("cpus"):
        parts.append(f"{m['cpus']} cpus")
    return ", ".join(parts) or m.get("hostname")


def short_commit(c):
    if not isinstance(c, str) or not c:
        return None
    dirty = c.endswith("-dirty")
    c = c[: -len("-dirty")] if dirty else c
    return c[:7] + ("-dirty" if dirty else "")


def join_unique(values, most=3):
    out = []
    for v in values:
        if v and v not in out:
            out.append(v)
    if not out:
        return None
    more = len(out) - most
    return "; ".join(out[:most]) + (f" (+{more} more)" if more > 0 else "")


def json_files(path):
    if os.path.isfile(path):
        return [path] if path.endswith(".json") else []
    found = []
    for d, dirs, files in os.walk(path):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".json") and f != "meta.json":
                found.append(os.path.join(d, f))
    return found


def from_jsons(path):
    machines, commits, commands = [], [], []
    for f in json_files(path):
        try:
            with open(f, encoding="utf-8") as fh:
                d = json.load(fh)
        except (ValueError, UnicodeDecodeError, OSError):
            continue
        if not isinstance(d, dict):
            continue
        machines.append(machine_of(d.get("machine")))
        commits.append(short_commit(d.get("commit")))
        if isinstance(d.get("command"), str):
            commands.append(d["command"])
    return machines, commits, commands


def from_text(path):
    """Machine, commit, command and summary stated by a folder's meta.json, RUN.md or README.md."""
    got = {}
    meta = os.path.join(path, "meta.json")
    if os.path.isfile(meta):
        with open(meta, encoding="utf-8") as fh:
            d = json.load(fh)
        for k in ("machine", "commit", "command", "summary"):
            if d.get(k):
                got[k] = d[k] if isinstance(d[k], str) else json.dumps(d[k])
    for name in ("RUN.md", "README.md"):
        f = os.path.join(path, name)
        if not os.path.isfile(f):
            continue
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        lines = text.splitlines()
        for line in lines:
            if line.strip():
                got.setdefault("summary", line.lstrip("# ").strip())
                break
        for key in ("machine", "commit", "command"):
            m = re.search(rf"^\**{key}s?\**\s*[:.]\**\s*(.+)$", text, re.I | re.M)
            if m:
                got.setdefault(key, m.group(1).strip())
        # A README without those lines still names them in its prose: the index points there
        # where the JSON files do not say them either.
        got.setdefault("fallback", f"(see {name})")
    return {k: v for k, v in got.items() if v}


def gpus_txt(path):
    for name in ("gpus.txt", "gpu.txt"):
        f = os.path.join(path, name)
        if os.path.isfile(f):
            with open(f, encoding="utf-8", errors="replace") as fh:
                names = re.findall(r"GPU \d+: ([^(]+?) \(", fh.read())
            if names:
                counts = {}
                for n in names:
                    counts[n] = counts.get(n, 0) + 1
                return ", ".join(f"{c}x {n}" if c > 1 else n for n, c in counts.items())
    return None


def cell(s, most=90):
    s = " ".join(str(s).split()).replace("|", "\\|")
    return s if len(s) <= most else s[: most - 3] + "..."


def describe(entry):
    path = os.path.join(ROOT, entry)
    machines, commits, commands = from_jsons(path)
    text = from_text(path) if os.path.isdir(path) else {}
    fallback = text.get("fallback")
    named = HEX.search(entry.split(".")[0]) if os.path.isdir(path) else None
    machine = (
        text.get("machine")
        or join_unique(machines, 2)
        or (gpus_txt(path) if os.path.isdir(path) else None)
        or fallback
    )
    commit = (
        text.get("commit")
        or join_unique(commits)
        or (named.group(0) + " (folder name)" if named else None)
        or fallback
    )
    command = text.get("command") or (commands[0] if commands else None) or fallback
    summary = text.get("summary") or command
    if not os.path.isdir(path):
        extra = FILES.get(entry, {})
        machine = machine or extra.get("machine")
        commit = commit or extra.get("commit")
        command = command or extra.get("command")
        summary = extra.get("summary") or summary or command
    return {
        "run": entry + ("/" if os.path.isdir(path) else ""),
        "machine": machine,
        "commit": commit,
        "command": command,
        "summary": summary,
    }


def render(rows):
    out = [
        "# Index of the recorded runs",
        "",
        "Written by `python3 scripts/results-index.py` from each run's own files (its",
        "README.md, RUN.md or meta.json, else the machine, commit and command in its JSON);",
        "do not edit by hand. What this folder is and how to get an archived run back: README.md.",
        "",
        "| run | machine | commit | summary |",
        "| --- | --- | --- | --- |",
    ]
    for r in rows:
        out.append(
            "| [`{run}`]({run}) | {m} | {c} | {s} |".format(
                run=r["run"],
                m=cell(r["machine"] or "?", 50),
                c=cell(r["commit"] or "?", 40),
                s=cell(r["summary"] or "?"),
            )
        )
    return "\n".join(out) + "\n"


def entries():
    """The runs: the entries of lab/results git tracks (a run written there and not yet added
    is not one), or, outside a git checkout, every entry there."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", "."],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout.decode()
        names = {f.split("/", 1)[0] for f in out.split("\0") if f}
    except (OSError, subprocess.CalledProcessError):
        names = set(os.listdir(ROOT))
    return sorted(e for e in names if e not in SKIP and not e.startswith("."))


def main():
    entries_ = entries()
    rows = [describe(e) for e in entries_]
    text = render(rows)
    index = os.path.join(ROOT, "INDEX.md")
    if "--check" in sys.argv[1:]:
        bad = 0
        for r in rows:
            missing = [k for k in ("machine", "commit", "command") if not r[k]]
            if missing:
                print(f"{r['run']}: says no {', '.join(missing)}")
                bad = 1
        current = open(index, encoding="utf-8").read() if os.path.isfile(index) else ""
        if current != text:
            print("lab/results/INDEX.md is not current: python3 scripts/results-index.py")
            bad = 1
        sys.exit(bad)
    with open(index, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"{index}: {len(rows)} runs")


if __name__ == "__main__":
    main()
