"""Imports the patched torch under Bazel (one site-packages directory per wheel) and computes with it."""

import importlib.metadata
import os
import sys
import unittest

import torch

EXPECT_SPLIT = "--expect-split" in sys.argv


class CalculatorTest(unittest.TestCase):
    def test_adds_tensors(self) -> None:
        total = torch.tensor([1.0, 2.0]) + torch.tensor([3.0, 4.0])
        self.assertEqual(total.tolist(), [4.0, 6.0])

    def test_runs_the_patched_torch(self) -> None:
        # torch.__version__ is baked into torch/version.py (2.1.0+cu121); the distribution carries ours.
        self.assertEqual(importlib.metadata.version("torch"), "2.1.0+stripe.5")
        self.assertNotIn("triton", " ".join(importlib.metadata.requires("torch") or []))

    def test_cuda_libraries_loaded(self) -> None:
        # The preload loaded the nvidia libraries, libnvJitLink first among those that need it.
        with open("/proc/self/maps", encoding="utf-8") as maps:
            mapped = maps.read()
        for soname in ("libnvJitLink.so.12", "libcusparse.so.12", "libcusolver.so.11"):
            self.assertTrue(soname in mapped, f"{soname} is not loaded")
        if EXPECT_SPLIT:
            # The sibling wheel's libraries are the ones loaded, from its own directory.
            import torch_cuda_libs

            libs_dir = os.path.join(os.path.dirname(torch_cuda_libs.__file__), "lib")
            moved = [name for name in os.listdir(libs_dir) if ".so" in name]
            self.assertTrue(moved, "torch-cuda-libs carries no library")
            torch_lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
            for name in moved:
                self.assertFalse(os.path.exists(os.path.join(torch_lib_dir, name)), name)
                loaded_from = os.path.realpath(os.path.join(libs_dir, name))  # runfiles are symlinks
                self.assertTrue(loaded_from in mapped, f"{loaded_from} is not loaded")

if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
