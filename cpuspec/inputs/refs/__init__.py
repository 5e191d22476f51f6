"""A model by the name its owner already uses: a path, a Hugging Face reference as llama.cpp's
`-hf` takes it (`OWNER/REPO[:QUANT]`, `OWNER/REPO/FILE.gguf`, `hf://OWNER/REPO[@REV]/FILE`), or an
installed Ollama model (`ollama:NAME[:TAG]`); registered names (models.toml) are the registry's.

One module per job: names.py (the grammar of a reference, and llama.cpp's file rule),
hashes.py (each file's sha256, computed once and remembered), stores.py (the copies already
on this machine: huggingface-hub's cache, LM Studio, llama.cpp's cache, Ollama, cpuspec's own),
hub.py (the hub through huggingface-hub only: reachability, listing, download, a header by
range) and resolve.py (a reference planned, its room checked, carried out). A file already on
this machine is used where it is, never copied; a hub file is checked against the hub's size and
sha256, and a download cut short is never used."""
from cpuspec.inputs.refs.hashes import (HASH_CHUNK_BYTES, ORIGIN_KEYS, file_sha256, recall,
                                        remember, sha256_file)
from cpuspec.inputs.refs.hub import hub_reachable, hub_unreachable, remote_head
from cpuspec.inputs.refs.names import (DEFAULT_QUANTS, HF_PREFIX, NOT_A_MODEL, OLLAMA_PREFIX,
                                       Ref, RefError, is_model_file, llama_cpp_name,
                                       parse_ref, pick_file, quant_of, split_parts)
from cpuspec.inputs.refs.resolve import (Plan, Resolved, check_room, fetch_plan, plan_ref,
                                         resolve_ref)
from cpuspec.inputs.refs.stores import (LocalGGUF, hf_cache_dirs, llamacpp_flat_cache,
                                        lmstudio_models, local_ggufs, ollama_roots,
                                        size_on_disk)

__all__ = ["DEFAULT_QUANTS", "HASH_CHUNK_BYTES", "HF_PREFIX", "LocalGGUF", "NOT_A_MODEL",
           "OLLAMA_PREFIX", "ORIGIN_KEYS", "Plan", "Ref", "RefError", "Resolved", "check_room",
           "fetch_plan", "file_sha256", "hf_cache_dirs", "hub_reachable", "hub_unreachable",
           "is_model_file", "llama_cpp_name", "llamacpp_flat_cache", "lmstudio_models",
           "local_ggufs", "ollama_roots", "parse_ref", "pick_file", "plan_ref", "quant_of",
           "recall", "remember", "remote_head", "resolve_ref", "sha256_file", "size_on_disk",
           "split_parts"]
