"""docs/ARCHITECTURE.md's "Where a new piece goes" names the files a new piece touches: every
path it names must exist in the tree, so the guide cannot drift from the layout."""
import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ArchitectureDocTest(unittest.TestCase):
    def test_every_path_where_a_new_piece_goes_exists(self):
        with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
            text = f.read()
        section = text.split("## Where a new piece goes", 1)[1].split("\n## ", 1)[0]
        paths = re.findall(r"`((?:src|include|python|tests|fuzz)/[^`<>]+?)`", section)
        self.assertGreater(len(paths), 10, "the section names the files a new piece touches")
        missing = [p for p in paths if not os.path.exists(os.path.join(ROOT, p))]
        self.assertEqual(missing, [])
        # The place each extension point names is where the code is.
        with open(os.path.join(ROOT, "src", "device", "device_registry.cpp")) as f:
            self.assertIn("BuiltInBackends()", f.read())
        with open(os.path.join(ROOT, "src", "api", "request.cpp")) as f:
            source = f.read()
        self.assertIn("Status CheckRequest(", source)
        self.assertIn("Result<ModelPlan> Place(", source)


if __name__ == "__main__":
    unittest.main()
