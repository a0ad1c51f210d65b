"""How fast a graph would run: hardware, roofline step costs, calibration, mocker profiles,
replay sweeps and the layout search. See benchmarks/isl32k for the study built on it."""
