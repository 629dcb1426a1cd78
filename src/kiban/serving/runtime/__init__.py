"""The model server: loads a transformers model from local files and serves it over HTTP.

Speaks the OpenAI API (chat, completions, embeddings) and the Open Inference
Protocol v2; run it as ``python -m kiban.serving.runtime``.
"""

from kiban.serving.runtime.options import ServerOptions, Task, parse_options

__all__ = ["ServerOptions", "Task", "parse_options"]
