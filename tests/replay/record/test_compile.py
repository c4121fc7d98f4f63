"""torch.compile in a recording: Inductor and Triton compile the script's kernels for real on the
stand-ins (Triton installed beside the --torch wheel, its launcher linked against the stand-in
driver), and the allocations are the GPU's: the committed compiled MLP reserves and allocates
what an H200 did (tests/data/record/truths-h200-2026-11-29/mlp_compile.json: a cold compile
cache, whose first call times candidates and flushes the L2 with a buffer of the H200's L2
size). The one timed choice that changes memory, Inductor's padding of a matrix product, is
answered as the H200 answered it (pad_mm.json: 57 products, each with its inputs' padding timed
or not, measured by benchmarks/gpu_pad_mm.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from hipmem.replay.record import run as record_run
from hipmem.replay.record.torch_site import triton_requirement

from .recording import RECORD, answer_of, run_record

TRUTHS = RECORD / "truths-h200-2026-11-29"
BOOT = Path(record_run.__file__).parent / "boot"


def _boot_module(name: str) -> ModuleType:
    """A module of the recording's boot folder, which runs in the user's interpreter."""
    spec = importlib.util.spec_from_file_location(name, BOOT / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("settings", ["defaults", "expandable"])
def test_a_compiled_script_allocates_what_the_gpu_allocated(
    record_torch: object, tmp_path: Path, settings: str
) -> None:
    conf = "expandable_segments:True" if settings == "expandable" else ""
    done = run_record(tmp_path, RECORD / "scripts" / "mlp_compile.py", "--json",
                      "--alloc-conf", conf)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    answer = answer_of(done)
    on_gpu = json.loads((TRUTHS / "mlp_compile.json").read_text())["runs"][settings]
    assert answer["max_memory_reserved"] == on_gpu["max_memory_reserved"]
    assert answer["max_memory_allocated"] == on_gpu["max_memory_allocated"]


def test_the_padding_verdict_is_the_h200s() -> None:
    padded_is_faster = _boot_module("_hipmem_compile").padded_is_faster
    products = json.loads((TRUTHS / "pad_mm.json").read_text())["products"]
    answered = 0
    for product in products:
        m, k, n = product["m"], product["k"], product["n"]
        m_pad, k_pad, n_pad = product["pads"]
        for flags in ("00", "10", "01", "11"):
            on_gpu = product.get(f"pad_faster_{flags}")
            if on_gpu is None:  # aligned, or not compute-bound: Inductor never times it
                continue
            mat1_left_out, mat2_left_out = flags[0] == "1", flags[1] == "1"
            timed = bool((m_pad or k_pad) and not mat1_left_out) or bool(
                (k_pad or n_pad) and not mat2_left_out
            )
            contiguous = (k, n)  # the inputs' leading dimensions: the probe's are contiguous
            answer = padded_is_faster(product["dtype"], 1, m, k, n, contiguous, timed)
            assert answer == on_gpu, (product, flags)
            answered += 1
    assert answered == 228


def test_a_transposed_input_unaligned_in_memory_pads_as_on_the_gpu() -> None:
    """The three verdicts a compiled Hugging Face GPT-2 asked of the H200 (bf16, batch 8 x 512,
    vocabulary 50257): the output layer, and its backward's two products, one of which reads
    the logits' gradient transposed (50257 x 4096 with strides (1, 50257)): unaligned in
    memory though only its row count is unaligned. All three padded on the GPU."""
    padded_is_faster = _boot_module("_hipmem_compile").padded_is_faster
    asked = [((4096, 768, 50257), (768, 768), True), ((4096, 50257, 768), (50257, 768), True),
             ((50257, 4096, 768), (50257, 768), True)]  # fmt: skip
    for (m, k, n), leading, timed in asked:
        assert padded_is_faster("torch.bfloat16", 1, m, k, n, leading, timed)
    # the same product stored untransposed: aligned rows, never padded (the probe's 4095 x 4096)
    assert not padded_is_faster("torch.bfloat16", 1, 50257, 4096, 768, (4096, 768), True)


@pytest.mark.parametrize(
    ("requires", "tag", "wanted"),
    [  # the Requires-Dist lines of the wheels hipmem installs, as written in their METADATA
        ('triton==3.6.0; platform_system == "Linux"', "cp311", "triton==3.6.0"),
        ('triton~=3.8.0; platform_system == "Linux" and python_version < "3.15"', "cp311",
         "triton~=3.8.0"),
        ('triton (==3.0.0) ; platform_system == "Linux" and platform_machine == "x86_64" and '
         'python_version < "3.13"', "cp311", "triton==3.0.0"),
        ('triton (==3.0.0) ; platform_system == "Linux" and platform_machine == "x86_64" and '
         'python_version < "3.13"', "cp313", None),
        ('triton==3.5.1; platform_system == "Linux" and platform_machine == "x86_64"', "cp312",
         "triton==3.5.1"),
        ('triton==3.6.0; platform_system == "Windows"', "cp311", None),
    ],
)  # fmt: skip
def test_the_triton_installed_is_the_one_the_wheel_requires(
    tmp_path: Path, requires: str, tag: str, wanted: str | None
) -> None:
    metadata = tmp_path / "torch-2.11.0+cu130.dist-info" / "METADATA"
    metadata.parent.mkdir()
    metadata.write_text("Metadata-Version: 2.4\nName: torch\nRequires-Dist: filelock\n"
                        f"Requires-Dist: {requires}\nRequires-Dist: sympy>=1.13.3\n")  # fmt: skip
    assert triton_requirement(tmp_path, tag) == wanted
