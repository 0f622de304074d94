"""The build's own checks, as a user with another Python meets them."""
import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class SetupTest(unittest.TestCase):
    def test_a_python_without_the_build_packages_is_told_what_it_lacks_and_what_to_do(self):
        # -S: no site-packages, so no setuptools and no wheel, as a pyenv or conda python3
        # without them (whose build failed with "invalid command 'bdist_wheel'").
        run = subprocess.run([sys.executable, "-S", os.path.join(ROOT, "setup.py"), "bdist_wheel"],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
        self.assertEqual(run.returncode, 1, run.stderr)
        self.assertIn(f"hoist's build needs setuptools, wheel in the Python that runs it "
                      f"({sys.executable}), which cannot import them.", run.stderr)
        self.assertIn("pip install . without --no-build-isolation", run.stderr)
        self.assertIn("use /usr/bin/python3", run.stderr)


class ConsoleToolTest(unittest.TestCase):
    def test_the_installed_tool_ends_quietly_when_its_reader_goes(self):
        # `hoist inspect M | head -1` through the package's tool: Python's ignored SIGPIPE once
        # reached the tool through exec, and it said "cannot write to standard output" (exit 1).
        import hoist
        if not os.path.isfile(os.path.join(os.path.dirname(hoist.__file__), "_bin", "hoist")):
            self.skipTest("this copy of the package has no tool (pip install builds it)")
        corpus = os.environ.get("HOIST_CORPUS_DIR", os.path.join(ROOT, "tests", "corpus"))
        model = os.path.join(corpus, "gguf", "ggml-vocab-llama-spm.gguf")
        tool = subprocess.Popen([sys.executable, "-m", "hoist", "inspect", model, "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tool.stdout.read(100)  # of 650 KB: the tool is still writing
        tool.stdout.close()  # the reader goes, as head's does
        err = tool.stderr.read().decode()
        code = tool.wait(timeout=30)
        self.assertIn(code, (0, -13), err)  # quiet success, or SIGPIPE as cat ends
        self.assertEqual(err, "")


if __name__ == "__main__":
    unittest.main()
