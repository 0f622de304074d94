"""The type stubs (python/hoist/*.pyi) name only what the modules have: every function, class
and constant a stub declares exists at runtime, with the same parameters for functions. (The
python stage also type-checks python/tests/typing_usage.py against them with mypy --strict.)"""
import ast
import importlib
import inspect
import os
import unittest

import hoist

PACKAGE = os.path.dirname(hoist.__file__)
STUB_ONLY = {"PathLike", "Device", "Progress", "Tensor"}  # type aliases of the stubs


class StubsTest(unittest.TestCase):
    def test_every_stubbed_name_exists_with_its_parameters(self):
        stubs = [os.path.join(d, f) for d, _, fs in os.walk(PACKAGE) for f in fs
                 if f.endswith(".pyi")]
        self.assertGreaterEqual(len(stubs), 8)
        self.assertTrue(os.path.exists(os.path.join(PACKAGE, "py.typed")))
        checked = 0
        for stub in stubs:
            relative = os.path.relpath(stub, os.path.dirname(PACKAGE))[:-4].replace(os.sep, ".")
            module = importlib.import_module(relative.removesuffix(".__init__"))
            with open(stub) as f:
                tree = ast.parse(f.read())
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    name = node.name
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    name = node.target.id
                elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                    name = node.targets[0].id
                else:
                    continue
                if name in STUB_ONLY:
                    continue
                self.assertTrue(hasattr(module, name), f"{stub}: {name} is not in {relative}")
                checked += 1
                if isinstance(node, ast.FunctionDef):
                    want = [a.arg for a in node.args.args + node.args.kwonlyargs]
                    got = [p for p in inspect.signature(getattr(module, name)).parameters
                           if inspect.signature(getattr(module, name)).parameters[p].kind
                           not in (inspect.Parameter.VAR_KEYWORD,
                                   inspect.Parameter.VAR_POSITIONAL)]
                    self.assertEqual(want, got, f"{stub}: {name}'s parameters")
        self.assertGreater(checked, 60)


if __name__ == "__main__":
    unittest.main()
