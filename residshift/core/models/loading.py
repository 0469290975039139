"""The one entry point: :func:`load_model` by name (embedded, tiny, ``.gguf`` file, folder, hub id)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch

from ..cache import MANIFEST, DamagedFileError, check_folder


from .interface import (LoadedModel, ModelError, ModelNotAvailableError, UnknownModelError)
from .describe import (describe_model, wrap)
from .embedded import (EMBEDDED, prepare_embedded, prepare_gguf)
from .tiny import (TINY, build_tiny)


# --------------------------------------------------------------------------------------------
# The one entry point
# --------------------------------------------------------------------------------------------

BARE_HUB_IDS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "distilgpt2")

PAPER_MODELS = {
    "google/gemma-2-2b": "the paper's model (26 layers; switch reported near layer 17) [reference]",
}


def known_models() -> dict[str, str]:
    """Names ``load_model`` accepts, with a line each."""
    out = {name: spec.description for name, spec in EMBEDDED.items()}
    out.update(TINY)
    out.update({hid: "Hugging Face hub (needs the network or the local HF cache)" for hid in BARE_HUB_IDS})
    out.update(PAPER_MODELS)
    out["<owner>/<name> | hub:<id> | <folder>"] = "any causal LM on the hub or on disk (untied: decoder=)"
    out["<path>.gguf"] = "a GGUF file on disk (llama.cpp): dequantized, cached by its sha256"
    return out


def _unknown(name: str) -> UnknownModelError:
    listing = "\n".join(f"  {k:<34} {v}" for k, v in known_models().items())
    return UnknownModelError(
        f"unknown model name {name!r}. Known names:\n{listing}\n"
        "A folder must exist and hold config.json; a hub id needs an owner (owner/name) or the "
        "prefix 'hub:'."
    )


def _from_pretrained(ref: str, dtype: torch.dtype, offline_hint: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers ~1 s; most importers load no model

    try:
        tokenizer = AutoTokenizer.from_pretrained(ref)
        model = AutoModelForCausalLM.from_pretrained(ref, dtype=dtype)
    except OSError as err:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        how = (
            "The hub is offline here (HF_HUB_OFFLINE=1) and the files are not in the local "
            "Hugging Face cache"
            if offline
            else "The files could not be read or downloaded"
        )
        raise ModelNotAvailableError(
            f"cannot load {ref!r}: {how}. {offline_hint}\nUnderlying error: {err}"
        ) from err
    return model, tokenizer


PICKLED_WEIGHTS = "pytorch_model*.bin"  # what transformers unpickles (one file or shards) without safetensors


def check_weight_files(folder: Path) -> None:
    """Refuse, in one line naming the file and the fix (:class:`ModelError`), a model folder whose
    weights are a pickle (``pytorch_model.bin`` and no ``.safetensors``: reading a pickle can run
    code) or holding a ``.safetensors`` file that cannot be read (truncated, garbled)."""
    from safetensors import safe_open  # lazy: like transformers, only where a model is loaded

    tensors = sorted(folder.glob("*.safetensors"))
    if not tensors:
        pickled = sorted(folder.glob(PICKLED_WEIGHTS))
        if pickled:
            raise ModelError(f"{pickled[0]} is a pickled model file, which residshift does not load (a pickle "
                             "can run code): convert it to safetensors where you trust its source (load it with "
                             "transformers and save_pretrained), or use a folder with model.safetensors")
    for path in tensors:
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except Exception as err:  # SafetensorError (truncated, garbled header), OSError
            why = (str(err).splitlines() or [type(err).__name__])[0]
            raise ModelError(f"{path} cannot be read ({why}): it is truncated or damaged; copy or download "
                             "the model again") from None


def register_study_models() -> None:
    """Register the study's own model type (``residshift-gpt``, :mod:`.gpt`) with the transformers Auto
    classes (idempotent: importing the module registers it). Imported here, not at the top, because
    the model class imports transformers' modelling code (~1 s) and most importers load no model."""
    from . import gpt  # noqa: F401


def load_model(
    name: str,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
    prepend_bos: bool | None = None,
    layers_path: str | None = None,
    norm_path: str | None = None,
    embed_path: str | None = None,
    remote: bool = False,
    decoder: str | None = None,
) -> LoadedModel:
    """Load ``name`` and return ``(nnsight model, tokenizer, ModelInfo)``.

    ``decoder``: the matrix the lens reads through (:data:`DECODERS`); None needs a tied model.

    ``prepend_bos`` defaults to what the model's own tokenizer does (Gemma adds ``<bos>``, SmolLM2
    and GPT-2 do not). ``seed`` only matters for the tiny random models. ``remote=True`` builds the
    model on the meta device and marks it for NDIF execution (``trace(..., remote=True)``); it
    needs the network and an NDIF key, and is not available offline.
    """
    from transformers.utils import logging as hf_logging  # lazy: transformers ~1 s; most importers load no model

    hf_logging.disable_progress_bar()  # "Loading weights" bars frozen at 0% in saved notebooks
    if not isinstance(name, str) or not name:
        raise _unknown(repr(name))
    paths = dict(layers_path=layers_path, norm_path=norm_path, embed_path=embed_path)
    if remote:
        return _load_remote(name, prepend_bos=prepend_bos, decoder=decoder, **paths)
    if name in EMBEDDED:
        folder = prepare_embedded(name)
        model, tokenizer = _from_pretrained(str(folder), dtype, "Delete the folder and retry.")
        source = f"gguf:{EMBEDDED[name].gguf_file}"
        decoder = decoder or EMBEDDED[name].decoder
    elif name.lower().endswith(".gguf"):
        folder = prepare_gguf(name)
        model, tokenizer = _from_pretrained(str(folder), dtype, "Delete the folder and retry.")
        source = f"gguf:{Path(name).name}"
    elif name in TINY:
        model, tokenizer = build_tiny(name, seed=seed)
        model = model.to(dtype)
        source = "tiny"
    elif Path(name).expanduser().is_dir():
        folder = Path(name).expanduser()
        if not (folder / "config.json").is_file():
            raise ModelNotAvailableError(
                f"{folder} has no config.json; point load_model at a folder written by "
                "save_pretrained (config.json, model.safetensors, tokenizer files)."
            )
        if (folder / MANIFEST).is_file():  # written by residshift (a trained GPT): its files are checked
            try:
                check_folder(folder, adopt=False)
            except DamagedFileError as err:
                raise ModelError(f"{folder} is damaged: {err}; train or save the model again") from None
        check_weight_files(folder)
        register_study_models()

        model, tokenizer = _from_pretrained(str(folder), dtype, "Check the folder's files.")
        source = f"local:{folder}"
    elif "/" in name or name in BARE_HUB_IDS or name.startswith("hub:"):
        ref = name.removeprefix("hub:")
        hint = (
            f"Run once with the network (unset HF_HUB_OFFLINE) or `hf download {ref}`; "
            "gated models (Gemma) also need `hf auth login`."
        )
        model, tokenizer = _from_pretrained(ref, dtype, hint)
        source = f"hub:{ref}"
    else:
        raise _unknown(name)
    model = model.to(device)
    info = describe_model(model, tokenizer, name=name, source=source, prepend_bos=prepend_bos,
                          decoder=decoder, **paths)
    return wrap(model, tokenizer, info)


def load_models(names: Sequence[str], *, device: str = "cpu") -> dict[str, LoadedModel]:
    """``{name: LoadedModel}`` for several models (a profile's ``models``), on ``device``."""
    return {name: load_model(name, device=device) for name in names}


def _load_remote(name: str, *, prepend_bos=None, decoder=None, **paths) -> LoadedModel:
    """The model's config and tokenizer from the hub, its weights left on NDIF: nnsight builds the
    module on the meta device (nothing is downloaded but the config and the tokenizer), and every
    trace with ``remote=True`` runs on NDIF."""
    import nnsight  # lazy: nnsight + transformers ~0.6 s; most importers load no model

    from transformers import AutoTokenizer

    ref = name.removeprefix("hub:")
    try:  # the tokenizer passed in: nnsight 0.8.1's meta pipeline does not find it by itself
        lm = nnsight.TransformersModel(ref, task="text-generation", tokenizer=AutoTokenizer.from_pretrained(ref))
    except OSError as err:
        raise ModelNotAvailableError(
            f"remote=True needs the model's config and tokenizer from the hub: {err}"
        ) from err
    info = describe_model(lm._module, lm.tokenizer, name=name, source=f"ndif:{ref}",
                          prepend_bos=prepend_bos, remote=True, decoder=decoder, **paths)
    return LoadedModel(lm, lm.tokenizer, info)
