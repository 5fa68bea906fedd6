"""The dependency rule between the packages (docs/architecture.md), checked on the imports (ast) of every module.

- everything is imported under one root: ``spanseek.core``, never a bare ``core`` (nor indexer/trainer/service);
- ``core`` imports none of indexer / trainer / service / spanseek (only third-party libraries);
- ``service`` never imports ``trainer``;
- no package imports ``service`` (``spanseek/cli.py`` loads it by name at run time, which is allowed).

    .venv/bin/python -m pytest -q tests/test_dependencies.py
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "indexer", "trainer", "service", "spanseek")
SUBPACKAGES = {"core", "indexer", "trainer", "service"}
FORBIDDEN = {
    "core": {"indexer", "trainer", "service", "spanseek"},
    "indexer": {"service"},
    "trainer": {"service"},
    "service": {"trainer"},
    "spanseek": {"service"},
}


def package_of(module: str) -> str:
    """The project package a dotted module name belongs to: ``spanseek.core.search`` -> ``core``, ``spanseek.cli``
    -> ``spanseek``; a bare ``core.search`` -> ``bare core`` (always forbidden); a third-party name -> its root."""
    parts = module.split(".")
    if parts[0] == "spanseek":
        return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else "spanseek"
    return f"bare {parts[0]}" if parts[0] in SUBPACKAGES else parts[0]


def imported_packages(path: Path, package: str) -> dict[str, int]:
    """Packages of everything ``path`` imports (at any depth in the file) -> first line number."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import stays in its package
                found.setdefault(package, node.lineno)
                continue
            names = [node.module or ""]
        else:
            continue
        for name in names:
            found.setdefault(package_of(name), node.lineno)
    return found


def modules() -> list[tuple[str, Path]]:
    return [(pkg, p) for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def test_every_package_has_modules():
    assert {pkg for pkg, _ in modules()} == set(PACKAGES)


@pytest.mark.parametrize(("package", "path"), modules(), ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else x)
def test_dependency_rule(package, path):
    bad = {name: line for name, line in imported_packages(path, package).items()
           if name in FORBIDDEN[package] or name.startswith("bare ")}
    assert not bad, f"{path.relative_to(ROOT)} imports {', '.join(f'{n} (line {ln})' for n, ln in bad.items())}"


def test_the_checker_sees_nested_and_relative_imports(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import os.path\nfrom . import x\ndef f():\n    from spanseek.trainer.train import train_phrase\n")
    assert imported_packages(src, "service") == {"os": 1, "service": 2, "trainer": 4}


def test_cli_names_a_missing_dependency_instead_of_crashing(monkeypatch, capsys):
    """A host without the service stack (a training box) still runs `spanseek train`; `spanseek serve` names the
    extra to install."""
    import importlib

    import spanseek.cli as cli

    real = importlib.import_module

    def without_pydantic(name, *args):
        if name == "spanseek.service.cli":
            raise ModuleNotFoundError("No module named 'pydantic'", name="pydantic")
        return real(name, *args)

    monkeypatch.setattr(cli.importlib, "import_module", without_pydantic)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "serve        (unavailable: pip install 'spanseek[serve]')" in capsys.readouterr().out
    assert cli.main(["serve", "--index", "somewhere", "--port", "1"]) == 2
    assert capsys.readouterr().err == ("spanseek serve: error: spanseek serve needs the 'serve' extra (module "
                                       "'pydantic' is not installed): pip install 'spanseek[serve]'\n")
    with pytest.raises(SystemExit) as e:  # the other packages' commands are still there
        cli.main(["train", "phrase", "--help"])
    assert e.value.code == 0
