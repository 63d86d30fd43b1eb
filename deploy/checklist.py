"""The verdicts of the deployment checks (deploy/check.py, bench/fleet/fleet.py): each check
prints `ok` or `FAIL` with its name and detail; `report` counts them."""

results = []


def check(name, ok, detail=""):
    """Records and prints one verdict."""
    results.append(bool(ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + str(detail) if detail else ''}", flush=True)


def report():
    """Prints `N passed, M failed`; the exit code (1 on any failure)."""
    passed, failed = results.count(True), results.count(False)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
