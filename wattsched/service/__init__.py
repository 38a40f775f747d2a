"""The daemons' plumbing: serving HTTP (uvicorn, the API's limits and authentication, Prometheus
exposition, slurmrestd's proxy), the local socket that hands out tokens, files opened without
following links, and how a daemon starts in the background. No policy lives here."""
