"""select/linear: whole nodes only, as in Slurm's linear plugin; otherwise as cons_tres."""

from __future__ import annotations

from wattsched.plugins.select.cons_tres import ConsTresSelect


class LinearSelect(ConsTresSelect):
    """Every job gets whole, idle nodes."""

    whole_nodes = True
