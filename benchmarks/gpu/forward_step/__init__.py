"""A whole gpt-oss-120b forward step on one GPU, random weights at the real shapes, MXFP4 experts."""
