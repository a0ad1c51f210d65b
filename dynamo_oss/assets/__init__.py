"""Offline assets for serving gpt-oss on Dynamo: model folders and the o200k ranks.

model_folder(GPT_OSS_120B)      -> DIR for `dynamo.frontend` / `dynamo.mocker --model-path DIR`
tiktoken_encodings_dir()        -> DIR for the env var TIKTOKEN_ENCODINGS_BASE
"""

from dynamo_oss.assets.encodings import ENCODINGS_ENV, tiktoken_encodings_dir
from dynamo_oss.assets.folder import model_folder
from dynamo_oss.assets.template import chat_template

__all__ = ["ENCODINGS_ENV", "chat_template", "model_folder", "tiktoken_encodings_dir"]
