"""--mail-type's events, read and shown as Slurm's parse_mail_type and print_mail_type do them.

Names are taken in any case and separated by commas; ALL is INVALID_DEPEND, BEGIN, END, FAIL,
REQUEUE and STAGE_OUT; NONE clears the rest. A list of which no name is known is an error, as in
Slurm ("Invalid --mail-type specification"); unknown names beside known ones are dropped, as there.
"""

from __future__ import annotations

# in print_mail_type's order
TYPES = ("ARRAY_TASKS", "INVALID_DEPEND", "BEGIN", "END", "FAIL", "REQUEUE", "STAGE_OUT", "TIME_LIMIT_50",
         "TIME_LIMIT_80", "TIME_LIMIT_90", "TIME_LIMIT")
ALL = ("INVALID_DEPEND", "BEGIN", "END", "FAIL", "REQUEUE", "STAGE_OUT")
INVALID = "Invalid --mail-type specification"
# the share of a job's time limit each TIME_LIMIT_* event is sent at
TIME_SHARES = {"TIME_LIMIT_50": 0.5, "TIME_LIMIT_80": 0.8, "TIME_LIMIT_90": 0.9, "TIME_LIMIT": 1.0}


def parse(text: str) -> tuple[str, ...]:
    """The events of a --mail-type list, in print order; () for NONE. ValueError for no known name."""
    chosen: set[str] = set()
    for token in (t.strip().upper() for t in text.split(",")):
        if token == "NONE":
            return ()
        if token == "ALL":
            chosen.update(ALL)
        elif token in TYPES:
            chosen.add(token)
    if not chosen:
        raise ValueError(INVALID)
    return tuple(t for t in TYPES if t in chosen)


def recipient(user: str, domain: str) -> str:
    """Who is mailed, as Slurm stores it with the job: --mail-user (else the job's user), with
    MailDomain added to a name that has no domain."""
    return f"{user}@{domain}" if domain and "@" not in user else user


def show(types: tuple[str, ...]) -> str:
    """print_mail_type: the events by name, or NONE."""
    return ",".join(types) or "NONE"
