"""Accounting (slurmdbd's role): jobs, steps and node events in an SQL database via SQLAlchemy."""
