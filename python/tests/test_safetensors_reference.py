"""safetensors' own Python tests (python/tests/safetensors_reference/, unchanged) run against
hoist.safetensors through patch(). The ones that need a GPU, MPS or an NPU skip on a CPU-only
torch; every other one must pass."""
import importlib.util
import io
import os
import tempfile
import unittest

import hoist.safetensors

HERE = os.path.dirname(os.path.abspath(__file__))


def run_reference(file_name):
    """Runs safetensors' own test file against hoist.safetensors through patch(), in a
    temporary directory; returns (result, log)."""
    source = os.path.join(HERE, "safetensors_reference", file_name)
    old = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "tests", "data"))  # where the tests write their files
        os.chdir(tmp)
        hoist.safetensors.patch()
        try:
            spec = importlib.util.spec_from_file_location(
                "safetensors_" + file_name[:-3], source)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            suite = unittest.defaultTestLoader.loadTestsFromModule(module)
            log = io.StringIO()
            result = unittest.TextTestRunner(stream=log, verbosity=2).run(suite)
        finally:
            hoist.safetensors.unpatch()
            os.chdir(old)
    return result, log.getvalue()


class SafetensorsOwnTests(unittest.TestCase):
    def test_safetensors_pt_comparison_passes_against_hoist(self):
        result, log = run_reference("test_pt_comparison.py")
        self.assertEqual(result.failures + result.errors, [], log)
        self.assertGreaterEqual(result.testsRun - len(result.skipped), 20, log)

    def test_safetensors_simple_passes_against_hoist(self):
        # serialize/TensorSpec, safetensors.numpy, slices' errors, a closed file, a missing one
        result, log = run_reference("test_simple.py")
        self.assertEqual(result.failures + result.errors, [], log)
        self.assertEqual(result.skipped, [], log)
        self.assertGreaterEqual(result.testsRun, 17, log)


if __name__ == "__main__":
    unittest.main()
