"""The reliability matrix's kinds of failure and its summary line, counted from the test reports (in the process
that prints the run's summary: pytest's own, or pytest-xdist's controller)."""
from __future__ import annotations

GUARDS = {"traceback": "tracebacks", "wrong": "silent wrong results", "injection": "injections",
          "allowlist": "allowlist escapes", "loss": "losses",
          "misleading": "misleading messages"}


class Matrix:
    def __init__(self) -> None:
        self.outcomes: dict[str, tuple[str, str]] = {}  # nodeid -> (guard kind, "passed" | "failed" | "skipped")

    def add(self, report) -> None:
        kind = dict(report.user_properties).get("guards")
        if kind is None:
            return
        if report.failed:
            self.outcomes[report.nodeid] = (kind, "failed")
        elif report.skipped:
            self.outcomes.setdefault(report.nodeid, (kind, "skipped"))
        elif report.when == "call":
            self.outcomes.setdefault(report.nodeid, (kind, "passed"))

    def line(self) -> str | None:
        if not self.outcomes:
            return None
        ran = [o for o in self.outcomes.values() if o[1] != "skipped"]
        failed = {kind: sum(1 for k, o in ran if k == kind and o == "failed") for kind in GUARDS}
        skipped = len(self.outcomes) - len(ran)
        return (f"cases run {len(ran)}" + (f" (skipped {skipped})" if skipped else "") + ", "
                + ", ".join(f"{GUARDS[k]} {failed[k]}" for k in GUARDS))
