# The image that runs a graph's processes on GPU nodes:
# NVIDIA's Dynamo TensorRT-LLM runtime at the Dynamo version this project pins, with dynamo-oss
# installed from its lock file into the image's own Python, beside TensorRT-LLM.
# Build: docker build -t REGISTRY/dynamo-oss:TAG .   (it cannot be built on the CI machine: no registry)
ARG DYNAMO_VERSION=1.6.0
FROM nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:${DYNAMO_VERSION}

COPY --from=ghcr.io/astral-sh/uv:0.13.9 /uv /usr/local/bin/uv

WORKDIR /opt/dynamo-oss
COPY pyproject.toml uv.lock README.md ./
COPY dynamo_oss ./dynamo_oss
COPY graphs ./graphs

# The locked runtime dependencies, then the project itself. The image's torch and TensorRT-LLM stay:
# the lock leaves torch out (pyproject's override), and ai-dynamo is the version the image ships.
RUN uv export --locked --no-dev --no-default-groups --no-emit-project --no-hashes \
        --format requirements-txt --output-file /tmp/requirements.txt \
    && uv pip install --no-cache --python "$(command -v python3)" --requirement /tmp/requirements.txt \
    && uv pip install --no-cache --no-deps --python "$(command -v python3)" . \
    && rm /tmp/requirements.txt

ENTRYPOINT ["dynamo"]
CMD ["--help"]
