"""One loader, one interface, for every model the study looks at.

``load_model(name)`` returns a :class:`LoadedModel` ``(model, tokenizer, info)``:

- ``model``: the causal LM wrapped by ``nnsight.TransformersModel`` (trace it, read ``.output``);
- ``tokenizer``: its Hugging Face tokenizer;
- ``info``: a :class:`ModelInfo` with what later code relies on: number of layers, the layer
  modules, the final norm, the tied embedding matrix, the input-embedding scale, any final-logit
  soft-cap, and whether sequences start with BOS.

Names it understands (``known_models()`` lists them):

- embedded GGUF models shipped inside PyPI packages: ``smollm2-135m``, ``gemma3-270m``. They are
  dequantized to fp32 once and cached as safetensors under ``data/cache/models``;
- tiny random-initialised models built in-process (``tiny-llama``, ``tiny-gpt2``, ``tiny-gemma3``),
  for the tests and the ``smoke`` profile;
- a path to a single ``.gguf`` file (what a llama.cpp user has on disk): dequantized to fp32 by
  transformers' GGUF support, as for the embedded models, and cached as safetensors under
  ``data/cache/models/gguf-<sha256 of the file>`` (:func:`prepare_gguf`);
- a local directory, a Hugging Face hub id with an owner (``google/gemma-2-2b``), a bare GPT-2 id
  (``gpt2``, ``distilgpt2``, ...) or ``hub:<id>`` for any other bare id. With the network these
  download through ``from_pretrained``; offline they load from the local Hugging Face cache.

The study needs tied input/output embeddings (the logit lens decodes through the same matrix that
embeds the input); a model without them is refused with :class:`UntiedEmbeddingsError` unless the
caller chooses the matrix the lens decodes through (``decoder=``, :data:`DECODERS`): ``"output"``
reads every layer through the model's own output head (``logits_L`` are then the model's logits),
``"input"`` through the input embedding matrix (so "decodes the input token" keeps its meaning at
``h_0``, and ``logits_L`` are not the model's). ``ModelInfo.decoder`` and ``ModelInfo.tied`` record
the choice and the check; for a tied model both choices are the one matrix (``decoder="tied"``).

What a model must offer the lens, the edits and the harness is written down once, in
:class:`StudyModel` / :class:`StudyModule` (and the :class:`ModelInfo` fields), and checked by
:func:`check_interface`: a new architecture (the study's own GPT, ``residshift.core.models.gpt``) is
ready for every notebook when ``check_interface(load_model(...))`` passes.
"""
# One module per job, every name re-exported here (``models.load_model`` and the rest read as before):
# interface (ModelInfo, the protocol, errors), describe (ties, describe_model, fingerprint), embedded
# (GGUF preparation), tiny (in-process test models), loading (load_model).
from .interface import (  # noqa: F401
    ArchitectureError, DECODERS, LoadedModel, MissingPackageError, ModelError, ModelInfo,
    ModelNotAvailableError, StudyModel, StudyModule, UnknownModelError, UntiedEmbeddingsError,
    _ARCH_PATHS, _find_paths, check_interface, resolve)
from .describe import (  # noqa: F401
    _embed_scale, _tokenizer_adds_bos, check_tied, decoder_matrix, describe_model, embedding_gap,
    model_fingerprint, same_storage, tie_write_probe, wrap)
from .embedded import (  # noqa: F401
    EMBEDDED, EmbeddedModel, QWEN_PARTS, _assemble_gemma, _assemble_parts, _atomic_save_pretrained,
    _dequantize_gguf, _gguf_supported, _in_package, _locate_in_wheel, _missing_distributions, _prepared,
    default_embedded, embedded_cache_path, file_sha256, gguf_architecture, gguf_cache_path,
    install_on_demand, prepare_embedded, prepare_gguf, preparing)
from .tiny import (  # noqa: F401
    TINY, _tiny_config, build_tiny, byte_tokenizer)
from .loading import (  # noqa: F401
    BARE_HUB_IDS, PAPER_MODELS, _from_pretrained, _load_remote, _unknown, known_models,
    load_model, load_models, register_study_models)
