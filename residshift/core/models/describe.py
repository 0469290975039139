"""What a loaded model is: whether its embeddings are tied (and how far apart when not), the matrix the
lens reads, its :class:`ModelInfo` (:func:`describe_model`), a fingerprint of its weights, the nnsight wrap."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch
from torch import nn



from .interface import (DECODERS, LoadedModel, ModelError, ModelInfo, UntiedEmbeddingsError, _find_paths,
                        resolve)


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two weights are one tensor (same storage and shape), not merely equal values."""
    return a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape)


def tie_write_probe(model: nn.Module) -> float:
    """Max |E_in - E_out| after adding 1 to one entry of the input embedding (undone afterwards):
    0.0 only if the input embedding and the output head are one tensor, 1.0 for an equal copy."""
    w = model.get_input_embeddings().weight
    with torch.no_grad():
        old = w[0, 0].item()
        w[0, 0] += 1.0
        diff = (model.get_output_embeddings().weight[0, 0] - w[0, 0]).abs().item()
        w[0, 0] = old
    return diff


def check_tied(model: nn.Module, name: str = "model") -> torch.Tensor:
    """Return the tied embedding matrix, or raise if input and output embeddings differ."""
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    if inp is None or out is None:
        raise UntiedEmbeddingsError(f"{name} has no input or output embedding module.")
    if not same_storage(inp.weight, out.weight):
        raise UntiedEmbeddingsError(
            f"{name} does not tie its input and output embeddings. The study decodes hidden states "
            "through the matrix that embeds the input, so it needs tied embeddings: pick a tied "
            "model (GPT-2, Gemma, SmolLM2, ...), or choose the matrix the lens reads through: "
            "decoder='output' (the model's own head) or decoder='input' (the input embedding), "
            "`--decoder output|input` on the command line."
        )
    return inp.weight


def decoder_matrix(model: nn.Module, name: str = "model", decoder: str | None = None) -> tuple[torch.Tensor, str, bool]:
    """``(E, decoder, tied)``: the matrix the lens decodes through, the choice it records, and the tied check.

    ``decoder=None`` (or ``"tied"``) needs tied embeddings (:func:`check_tied`). ``"output"`` /
    ``"input"`` pick the output head's / the input embedding's weight; on a tied model they are one
    tensor and the choice is recorded as ``"tied"``. An output head with a bias is refused (the lens
    has no bias term)."""
    if decoder is not None and decoder not in DECODERS:
        raise ModelError(f"decoder must be one of {', '.join(DECODERS)} (or None), got {decoder!r}")
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    if decoder in (None, "tied") or (inp is not None and out is not None and same_storage(inp.weight, out.weight)):
        return check_tied(model, name), "tied", True
    if inp is None or out is None:
        raise UntiedEmbeddingsError(f"{name} has no input or output embedding module.")
    if decoder == "output" and getattr(out, "bias", None) is not None and bool(out.bias.detach().abs().max() > 0):
        raise ModelError(f"{name}'s output head has a bias, which the lens does not model: use decoder='input'")
    weight = out.weight if decoder == "output" else inp.weight
    if weight.shape[1] != inp.weight.shape[1]:
        raise ModelError(f"{name}'s output head {tuple(weight.shape)} does not read the residual width "
                         f"{inp.weight.shape[1]}")
    return weight, decoder, False


def _embed_scale(model: nn.Module, embed: nn.Module) -> float:
    scale = getattr(embed, "embed_scale", None)  # Gemma-3's scaled embedding module
    if scale is not None:
        return float(scale)
    model_type = getattr(model.config, "model_type", "")
    if model_type in {"gemma", "gemma2"}:  # these multiply by sqrt(d) inside the model's forward
        return math.sqrt(model.config.hidden_size)
    return 1.0


def _tokenizer_adds_bos(tokenizer) -> bool:
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    ids = tokenizer("a", add_special_tokens=True).input_ids
    return len(ids) > 0 and ids[0] == bos


def describe_model(
    model: nn.Module,
    tokenizer,
    *,
    name: str,
    source: str,
    prepend_bos: bool | None = None,
    layers_path: str | None = None,
    norm_path: str | None = None,
    embed_path: str | None = None,
    remote: bool = False,
    decoder: str | None = None,
) -> ModelInfo:
    """Build the :class:`ModelInfo` of a loaded torch model (checks that embeddings are tied, or
    uses the matrix ``decoder`` names: :func:`decoder_matrix`)."""
    embedding, decoder, tied = decoder_matrix(model, name, decoder)
    lp, np_, ep = _find_paths(model, layers_path, norm_path, embed_path)
    cfg = model.config
    layers = resolve(model, lp)
    if prepend_bos is None:
        prepend_bos = _tokenizer_adds_bos(tokenizer)
    return ModelInfo(
        name=name,
        family=getattr(cfg, "model_type", type(model).__name__),
        source=source,
        n_layers=len(layers),
        d_model=int(embedding.shape[1]),
        vocab_size=int(embedding.shape[0]),
        layers_path=lp,
        norm_path=np_,
        embed_path=ep,
        layers=layers,
        final_norm=resolve(model, np_),
        embedding=embedding,
        embed_scale=_embed_scale(model, resolve(model, ep)),
        logit_softcap=getattr(cfg, "final_logit_softcapping", None) or None,
        prepend_bos=bool(prepend_bos),
        bos_token_id=tokenizer.bos_token_id,
        remote=remote,
        decoder=decoder,
        tied=tied,
    )


def model_fingerprint(model) -> str:
    """A cheap hash of a model's weights (shapes and strided float64 sums of every parameter),
    so a retrained model in the same folder never reuses stale cached results."""
    module = getattr(model, "_module", model)
    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in module.named_parameters():
            flat = p.detach().reshape(-1)
            h.update(f"{name}{tuple(p.shape)}{float(flat[::97].double().sum()):.10e}".encode())
    return h.hexdigest()[:16]


def wrap(model: nn.Module, tokenizer, info: ModelInfo) -> LoadedModel:
    """Freeze ``model`` and wrap it for nnsight."""
    import nnsight  # lazy: nnsight + transformers ~0.6 s; most importers load no model

    model.eval()
    model.requires_grad_(False)
    return LoadedModel(nnsight.TransformersModel(model, tokenizer=tokenizer), tokenizer, info)


def embedding_gap(model: nn.Module) -> dict[str, Any]:
    """How far a model's output head is from its input embedding: ``{"tied": True}`` when they are one
    tensor; otherwise the largest |difference|, the relative Frobenius distance ||E_out - E_in|| / ||E_in||
    and the mean cosine between matching rows (a GGUF file of a tied model that stores both matrices,
    quantized separately, differs by its quantization noise only). Shapes that differ are recorded as such."""
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    if inp is None or out is None:
        return {"tied": False, "comparable": False, "why": "no input or output embedding module"}
    a, b = inp.weight.detach(), out.weight.detach()
    if same_storage(a, b):
        return {"tied": True}
    if a.shape != b.shape:
        return {"tied": False, "comparable": False, "why": f"shapes {tuple(a.shape)} and {tuple(b.shape)}"}
    a64, b64 = a.double(), b.double()
    return {"tied": False, "comparable": True,
            "max_abs_diff": float((b64 - a64).abs().max()),
            "rel_frobenius": float((b64 - a64).norm() / a64.norm()),
            "mean_row_cosine": float(nn.functional.cosine_similarity(a64, b64, dim=1).mean())}
