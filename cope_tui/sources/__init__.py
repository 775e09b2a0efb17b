"""Model sources that need third-party readers: GGUF files (the `gguf` package) and the
Hugging Face Hub (`huggingface_hub`). Imported lazily by cope_tui.service.request, so the plain
catalog and config.json paths never load them; no textual, no torch here.

- gguf_header: the GGUF header and tensor table, from a local file or a byte prefix.
- gguf_model: a ModelSpec with exact byte sizes from a (split) GGUF file.
- hub_model: `org/name` repo ids: config.json through the Hub cache, or a remote GGUF's
  header through HTTP range requests.
- resolve: what `--model` names, tried in order.
"""
