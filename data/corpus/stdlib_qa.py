"""A question-answering set that every machine has offline, in SQuAD v1.1's format, from the
installed Python's own documentation.

Each paragraph lists some documented functions of one module with the first sentence of their
docstrings ("dumps: Serialize obj to a JSON formatted str."); each question restates one of those
sentences ("Which function of json does this: serialize obj to a JSON formatted str?") and its
answer is the function's name, located by character offset in the paragraph. A reader must match
the question's wording against the paragraph and read off the name before it: real text, a real
span-extraction task, small enough to fine-tune on a CPU. Paragraphs go to the training or the
dev file by a hash of their text, so no dev paragraph is seen in training. The quickstart fine-tunes
on it (prepare_data.py --action download --dataset python_qa).
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import sysconfig

from common.files import write_json

# A docstring's first sentence that reads as a description: 4 to 30 words of prose.
_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(\s|$)", re.S)
_WORD = re.compile(r"[A-Za-z]")
FUNCTIONS_PER_PARAGRAPH = 5
DEV_PERCENT = 10


def _summary(docstring: str) -> str | None:
    text = " ".join(docstring.strip().split())
    match = _FIRST_SENTENCE.match(text)
    if not match:
        return None
    sentence = match.group(1)
    words = sentence.split()
    if not 4 <= len(words) <= 30 or not _WORD.search(sentence[:1]) or any(c in sentence for c in "`>|{}"):
        return None
    return sentence


def documented_functions(path: str, module: str) -> dict[str, list[tuple[str, str]]]:
    """{owner: [(name, first docstring sentence)]} for the public module-level functions of one
    file (owner: the module) and the public methods of its public classes (owner: module.Class)."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return {}
    owners: dict[str, list[tuple[str, str]]] = {}

    def collect(owner, body):
        found = owners.setdefault(owner, [])
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                summary = _summary(ast.get_docstring(node) or "")
                names = {n for n, _ in found}
                if summary and node.name not in names and summary not in {s for _, s in found}:
                    found.append((node.name, summary))

    collect(module, tree.body)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            collect(f"{module}.{node.name}", node.body)
    return {owner: found for owner, found in owners.items() if found}


def _module_name(path: str, root: str) -> str:
    name = os.path.relpath(path, root)[: -len(".py")].replace(os.sep, ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _is_dev(context: str) -> bool:
    return int(hashlib.sha256(context.encode()).hexdigest(), 16) % 100 < DEV_PERCENT


def _paragraph(module: str, entries) -> dict:
    kind = "class" if module.rsplit(".", 1)[-1][:1].isupper() else "module"
    context = f"The {kind} {module} offers these functions."
    starts = []
    for name, summary in entries:
        context += " "
        starts.append(len(context))
        context += f"{name}: {summary}"
    qas = []
    for (name, summary), start in zip(entries, starts):
        restated = summary[0].lower() + summary[1:-1]
        qas.append(
            {
                "id": hashlib.sha256(f"{module}.{name}".encode()).hexdigest()[:24],
                "question": f"Which function of {module} does this: {restated}?",
                "answers": [{"text": name, "answer_start": start}],
            }
        )
    return {"context": context, "qas": qas}


def build_qa_set(output_dir: str, max_questions: int = 3000, root: str | None = None) -> dict:
    """Writes train.json and dev.json (SQuAD v1.1) into output_dir; returns counts and paths.
    At most `max_questions` questions in all, modules in sorted order, so the set is the same for
    the same installed Python."""
    root = root or sysconfig.get_paths()["stdlib"]
    sets = {"train": [], "dev": []}
    total = 0
    for directory, folders, files in os.walk(root):
        folders[:] = sorted(
            f for f in folders if not f.startswith(("test", "idlelib", "site-packages", "__"))
        )
        for file_name in sorted(files):
            if not file_name.endswith(".py") or total >= max_questions:
                continue
            path = os.path.join(directory, file_name)
            for owner, functions in documented_functions(path, _module_name(path, root)).items():
                functions = functions[: max_questions - total]
                for i in range(0, len(functions), FUNCTIONS_PER_PARAGRAPH):
                    paragraph = _paragraph(owner, functions[i : i + FUNCTIONS_PER_PARAGRAPH])
                    sets["dev" if _is_dev(paragraph["context"]) else "train"].append(
                        {"title": owner, "paragraphs": [paragraph]}
                    )
                total += len(functions)
    if not sets["train"] or not sets["dev"]:
        from common.errors import UserError

        raise UserError(f"Too few documented functions under {root} to build a question-answering set.")
    os.makedirs(output_dir, exist_ok=True)
    stats = {}
    for split, articles in sets.items():
        path = os.path.join(output_dir, f"{split}.json")
        write_json(path, {"version": "1.1", "data": articles}, indent=None)
        stats[f"{split}_questions"] = sum(len(p["qas"]) for a in articles for p in a["paragraphs"])
        stats[f"{split}_file"] = path
    return stats
