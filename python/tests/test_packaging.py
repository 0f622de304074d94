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


if __name__ == "__main__":
    unittest.main()
