"""How installed wheels load their libraries: packages, install layouts, lazy loads, probes, observations, preloads, doctor, layout_test's runner."""
