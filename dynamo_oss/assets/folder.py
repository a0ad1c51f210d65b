"""The model folder Dynamo's frontend and mocker load for a gpt-oss model, with no download.

`python -m dynamo.frontend` reads the tokenizer, chat template and stop tokens from it,
and `python -m dynamo.mocker --model-path DIR` the shapes; no weights are needed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from dynamo_oss.assets.cache import build_once, content_version, resolve_cache_root
from dynamo_oss.assets.config import generation_config, model_config
from dynamo_oss.assets.template import TEMPLATE_FILE, chat_template
from dynamo_oss.assets.tokenizer import TOKENIZER_FILE, tokenizer_config, tokenizer_file
from dynamo_oss.catalog.models import ModelShape


def model_folder(shape: ModelShape, cache_root: Path | None = None) -> Path:
    """The folder to pass as a model path for `shape`, built once per content version.

    Its name carries the model, a digest of its shape and `content_version()`, so a
    changed shape, template or generator gets a new folder and never a stale one.
    """
    version = content_version(shape.model_dump_json())
    target = resolve_cache_root(cache_root) / "models" / f"{shape.name}-{version}"
    return build_once(target, lambda folder: _write_model_folder(folder, shape, cache_root))


def _write_model_folder(folder: Path, shape: ModelShape, cache_root: Path | None) -> None:
    template = chat_template()
    shutil.copyfile(tokenizer_file(shape.vocab_size, cache_root), folder / TOKENIZER_FILE)
    # The template goes both in its own file and in tokenizer_config.json: loaders
    # differ in which they read, and both hold the same text.
    (folder / TEMPLATE_FILE).write_text(template, encoding="utf-8")
    _write_json(folder / "tokenizer_config.json", tokenizer_config(shape.max_context, shape.vocab_size, template))
    _write_json(folder / "config.json", model_config(shape))
    _write_json(folder / "generation_config.json", generation_config())


def _write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
