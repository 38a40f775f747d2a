"""MkDocs' hook for this site (mkdocs.yml ``hooks:``): the generated pages come from
wattsched.cli.reference. A file of its own, because MkDocs puts a hook's folder first on sys.path
and wattsched/cli/ holds a wattsched.py that would shadow the package."""

from wattsched.cli.reference import on_files

__all__ = ["on_files"]
