"""An import-linter contract type that names what a package MAY import (import-linter ships only
forbidden lists): ``make lint`` holds every domain to the standard library, itself and the libs it lists,
so a new dependency of a domain is a decision written into pyproject.toml, not an accident."""

from __future__ import annotations

import sys

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


class AllowlistContract(Contract):
    type_name = "allowlist"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_modules = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        allowed = [module.name for module in self.allowed_modules]  # type: ignore[attr-defined]
        refused = []
        for source in self.source_modules:  # type: ignore[attr-defined]
            for importer in sorted({source.name, *graph.find_descendants(source.name)}):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if (
                        imported.split(".")[0] in sys.stdlib_module_names
                        or _within(imported, source.name)
                        or any(_within(imported, name) for name in allowed)
                    ):
                        continue
                    lines = [
                        d["line_number"]
                        for d in graph.get_import_details(importer=importer, imported=imported)
                    ]
                    refused.append((importer, imported, lines))
        return ContractCheck(kept=not refused, metadata={"refused": refused})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, lines in check.metadata["refused"]:
            output.print_error(
                f"{importer} -> {imported} (l.{', '.join(map(str, lines))}): not on the allow-list"
            )
            output.new_line()
