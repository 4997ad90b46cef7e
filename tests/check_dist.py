"""``python -m tests.check_dist DIR`` (make dist): the wheel in DIR holds every compiled module of setup.py's
HOT_PATH (and its .py beside it), the sdist their sources, setup.py and the build backend, and no built extension.
Prints what it found; exits 1 with one line per problem."""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path

from tests.unit.test_compiled import hot_path


def problems(out: Path) -> list[str]:
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"expected one wheel and one sdist in {out}, found {[p.name for p in wheels + sdists]}"]
    found: list[str] = []
    with zipfile.ZipFile(wheels[0]) as whl:
        names = whl.namelist()
    for module in hot_path():
        stem = module.replace(".", "/")
        if not any(n.startswith(stem + ".cpython-") and n.endswith(".so") for n in names):
            found.append(f"{wheels[0].name}: no compiled {module}")
        if stem + ".py" not in names:
            found.append(f"{wheels[0].name}: no {stem}.py")
    if not any(n.startswith("kmq/_hot_path__mypyc.") for n in names):
        found.append(f"{wheels[0].name}: no kmq/_hot_path__mypyc (mypyc's shared library)")
    with tarfile.open(sdists[0]) as sdist:
        members = [m.split("/", 1)[1] for m in sdist.getnames() if "/" in m]
    sources = [m.replace(".", "/") + ".py" for m in hot_path()]
    for needed in ["setup.py", "pyproject.toml", "build_backend/kmq_build.py", *sources]:
        if needed not in members:
            found.append(f"{sdists[0].name}: no {needed}")
    found += [f"{sdists[0].name}: a built extension {m}" for m in members if m.endswith(".so")]
    compiled = sorted(n for n in names if n.endswith(".so"))
    print(f"{wheels[0].name}: {len(compiled)} compiled modules ({', '.join(compiled)})")
    print(f"{sdists[0].name}: {len(members)} files, setup.py and the hot path's sources, no extension")
    return found


if __name__ == "__main__":
    errors = problems(Path(sys.argv[1]))
    for line in errors:
        print(f"make dist: {line}", file=sys.stderr)
    sys.exit(1 if errors else 0)
