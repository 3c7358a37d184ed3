"""Where a model's configuration comes from: a preset, a local file, a checkpoint
directory, a Hugging Face Hub id or a GGUF file (:mod:`.resolve` picks one)."""
