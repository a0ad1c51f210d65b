"""What every GPU benchmark here shares: timing, the device header, correctness checks, the results writer.

Why one place: each benchmark once carried its own copy of these, and the copies drifted (one
header named the driver, another did not; one CSV serialised dicts, another could not).
"""
