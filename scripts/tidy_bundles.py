#!/usr/bin/env python3
"""Turns the unity sources CMake generated in a build folder (CMAKE_UNITY_BUILD=ON) into bundles
clang-tidy analyses as it does each of their files: every file's text is copied in (not
#included, which would make it a header, whose functions the static analyzer skips) after a
marker line naming it. clang-tidy names a bundle's line in its diagnostics; `--explain` turns
those back into the file and line they came from.

A bundle is parsed once for the files in it: clang-tidy 14 runs its matchers over every
system header of a translation unit (CLI11, nlohmann/json, the standard library), which cost
four fifths of the time when each file of src/ was its own unit. The files bundled are the ones
the unity build compiles together, so they are known to share one unit.

Usage: tidy_bundles.py BUILD_DIR            (prints the bundles written, one per line)
       tidy_bundles.py --explain < TIDY_LOG   (the log with each bundle:line as file:line)
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^#include "(/[^"]+)"\s*$')
MARKER = "// tidy bundle: "
LOCATION = re.compile(r"(\S+/Unity/unity_\d+_cxx\.cxx):(\d+):")


def bundle(unity: pathlib.Path) -> bool:
    """Rewrites one unity source in place; False when it is no unity source of files."""
    parts = []
    for line in unity.read_text(encoding="utf-8").splitlines():
        found = INCLUDE.match(line)
        if found is None:
            continue
        source = pathlib.Path(found.group(1))
        text = source.read_text(encoding="utf-8")
        parts.append(f"{MARKER}{source}\n{text}{'' if text.endswith(chr(10)) else chr(10)}")
    if not parts:
        return False
    unity.write_text("".join(parts), encoding="utf-8")
    return True


def starts(bundle_path: str):
    """[(first line in the bundle, source file)] of one bundle."""
    found = []
    with open(bundle_path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.startswith(MARKER):
                found.append((number + 1, line[len(MARKER):].rstrip("\n")))
    return found


def explain(log) -> None:
    cache = {}

    def where(match):
        path, line = match.group(1), int(match.group(2))
        if path not in cache:
            cache[path] = starts(path)
        for first, source in reversed(cache[path]):
            if line >= first:
                return f"{source}:{line - first + 1}:"
        return match.group(0)

    for line in log:
        sys.stdout.write(LOCATION.sub(where, line))


def main() -> int:
    if sys.argv[1:] == ["--explain"]:
        explain(sys.stdin)
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    written = [u for u in sorted(pathlib.Path(sys.argv[1]).rglob("Unity/unity_*.cxx")) if bundle(u)]
    if not written:
        print(f"{sys.argv[1]}: no unity sources (configure it with CMAKE_UNITY_BUILD=ON)",
              file=sys.stderr)
        return 1
    for u in written:
        print(u)
    return 0


if __name__ == "__main__":
    sys.exit(main())
