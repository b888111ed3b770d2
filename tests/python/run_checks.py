"""Runs several check scripts of this folder in one interpreter.

    python run_checks.py SCRIPT ARG... [-- SCRIPT ARG...]...

Each SCRIPT (`check_folder.py`, `check_pte_provenance.py`, ...) runs as its
own `__main__` with its ARGs as `sys.argv`, as if started alone; torch,
transformers and the runtimes are imported once for all of them. Every check
runs; the exit status is 1 when any failed, each failure named on stderr.
"""

import os
import runpy
import sys
import traceback


def checks(argv):
    """`[(script, args), ...]` from the command line's `--`-separated groups."""
    groups, current = [], []
    for arg in argv:
        if arg == "--":
            groups.append(current)
            current = []
        else:
            current.append(arg)
    groups.append(current)
    return [(group[0], group[1:]) for group in groups if group]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    failed = []
    for script, args in checks(sys.argv[1:]):
        sys.argv = [script, *args]
        try:
            runpy.run_path(os.path.join(here, script), run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                failed.append(f"{script} {' '.join(args)}: {e.code}")
        except Exception:
            failed.append(f"{script} {' '.join(args)}:\n{traceback.format_exc()}")
    for failure in failed:
        print(failure, file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
