"""`python -m hoist ARGS` (and the `hoist` console script): the hoist command-line tool that
pip installs inside the package (hoist/_bin), with ARGS as given."""
import os
import subprocess
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    tool = os.path.join(here, "_bin", "hoist.exe" if os.name == "nt" else "hoist")
    if not os.path.isfile(tool):
        sys.stderr.write("hoist: this copy of the package has no command-line tool (it is built "
                         "by pip install; from a CMake build, run build/hoist)\n")
        return 1
    if os.name == "posix":
        # Python ignores SIGPIPE, and an ignored signal stays ignored across exec: restored, so
        # that `hoist inspect M | head -1` ends quietly as the tool does on its own.
        import signal
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.execv(tool, [tool] + sys.argv[1:])  # signals and exit codes stay the tool's own
    return subprocess.call([tool] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
