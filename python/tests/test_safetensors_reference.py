"""safetensors' own PyTorch tests (python/tests/safetensors_reference/, unchanged) run against
hoist.safetensors through patch(). The ones that need a GPU, MPS or an NPU skip on a CPU-only
torch; every other one must pass."""
import importlib.util
import io
import os
import tempfile
import unittest

import hoist.safetensors

HERE = os.path.dirname(os.path.abspath(__file__))


class SafetensorsOwnTests(unittest.TestCase):
    def test_safetensors_pt_comparison_passes_against_hoist(self):
        source = os.path.join(HERE, "safetensors_reference", "test_pt_comparison.py")
        old = os.getcwd()
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "tests", "data"))  # where the tests write their files
            os.chdir(tmp)
            hoist.safetensors.patch()
            try:
                spec = importlib.util.spec_from_file_location("safetensors_pt_comparison", source)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                suite = unittest.defaultTestLoader.loadTestsFromModule(module)
                log = io.StringIO()
                result = unittest.TextTestRunner(stream=log, verbosity=2).run(suite)
            finally:
                hoist.safetensors.unpatch()
                os.chdir(old)
        self.assertEqual(result.failures + result.errors, [], log.getvalue())
        ran = result.testsRun - len(result.skipped)
        self.assertGreaterEqual(ran, 20, log.getvalue())


if __name__ == "__main__":
    unittest.main()
