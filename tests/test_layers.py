"""docs/architecture.md's layer rule, enforced: a module imports its own layer or lower ones."""

from __future__ import annotations

import ast
from pathlib import Path

import vidloader

#: Top to bottom, as in docs/architecture.md ("base": errors, constants, _utils, synthetic media).
LAYERS = ["cli", "bench", "prepare", "pipeline", "analysis", "planning", "sampling", "images", "decoding", "processing", "index", "base"]
PACKAGE = Path(vidloader.__file__).parent


def _layer(module: str) -> str:
    """Layer of a dotted module name inside vidloader (``vidloader.x.y`` → ``x``)."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return top if top in LAYERS else "base"


def _imports(path: Path) -> list[str]:
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")
            base = base[: len(base) - node.level + 1]
            found.append(".".join(base + ([node.module] if node.module else [])))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vidloader"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("vidloader")]
    return found


def test_imports_only_go_down():
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == PACKAGE and path.name in ("__init__.py", "__main__.py"):
            continue  # the package root re-exports the public API; ``python -m`` runs the CLI
        here = _layer(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        for target in _imports(path):
            there = _layer(target)
            if LAYERS.index(there) < LAYERS.index(here):
                violations.append(f"{path.relative_to(PACKAGE)} ({here}) imports {target} ({there})")
    assert not violations, "upward imports:\n" + "\n".join(violations)


def test_import_vidloader_loads_no_gpu_library():
    import subprocess
    import sys

    code = ("import sys, vidloader; "
            "print(any(m in sys.modules for m in ('PyNvVideoCodec', 'decord', 'cv2', 'torchcodec', 'nvidia.nvimgcodec')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
