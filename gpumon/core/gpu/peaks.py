"""Dense peak FLOP/s of GPUs by dtype: the denominator of MFU.

Figures are NVIDIA's datasheets' per-GPU tensor-core peaks **without sparsity**: the datasheets print the
2:4-sparse figure (marked *) for TF32/BF16/FP16/FP8 on Ampere and later, which is twice the dense one and
never reached by dense training, so each is halved here. ``fp32`` is the non-tensor FP32 peak (an fp32 matmul
with TF32 off). Sources (read 2026-11):

- H100 SXM5 / PCIe / NVL, and GH200 (H100 SXM figures): "NVIDIA H100 Tensor Core GPU" datasheet
  (nvidia.com/en-us/data-center/h100/): SXM FP32 67, TF32 989*, BF16/FP16 1979*, FP8 3958*; PCIe FP32 51,
  TF32 756*, BF16/FP16 1513*, FP8 3026*; NVL FP32 60, TF32 835*, BF16/FP16 1671*, FP8 3341* TFLOPS.
- H200 SXM / NVL: "NVIDIA H200 Tensor Core GPU" datasheet (nvidia.com/en-us/data-center/h200/): the same
  figures as H100 SXM and H100 NVL.
- A100 (SXM4 and PCIe, 40/80 GB; A800 alike): "NVIDIA A100 Tensor Core GPU" datasheet: FP32 19.5, TF32 156
  (312*), BF16/FP16 312 (624*).
- A10: datasheet: FP32 31.2, TF32 62.5 (125*), BF16/FP16 125 (250*).
- L4: datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*, FP8 485*.
- L40S: datasheet: FP32 91.6, TF32 183 (366*), BF16/FP16 362.05 (733*), FP8 733 (1466*).
- V100 SXM2 / PCIe: datasheet: FP32 15.7 / 14, tensor (FP16) 125 / 112; no BF16, TF32 or FP8.
- T4: datasheet: FP32 8.1, FP16 (mixed precision) 65.
- AMD Instinct (ROCm torch names the device "AMD Instinct MI300X"): amd.com's product pages, dense figures
  (the sparse ones are twice): MI300X and MI325X matrix FP32 163.4, BF16/FP16 1307.4, FP8 2614.9; MI250X
  matrix FP32 95.7, BF16/FP16 383; MI210 matrix FP32 45.3, BF16/FP16 181. Their TF32 is left out: PyTorch's
  ``allow_tf32`` does not switch it on ROCm, so the doctor's TF32 rule stays NVIDIA's.
"""

from __future__ import annotations

TERA = 1e12

# (substrings the device name must contain, lower case), {dtype: dense TFLOP/s}; the first match wins.
_TABLE: tuple[tuple[tuple[str, ...], dict[str, float]], ...] = (
    (("h100", "pcie"), {"fp32": 51, "tf32": 378, "bf16": 756.5, "fp16": 756.5, "fp8": 1513}),
    (("h100", "nvl"), {"fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}),
    (("h200", "nvl"), {"fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}),
    (("h100",), {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979}),
    (("h200",), {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979}),
    (("gh200",), {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979}),
    (("a100",), {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}),
    (("a800",), {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}),
    (("a10",), {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125}),
    (("l40s",), {"fp32": 91.6, "tf32": 183, "bf16": 362.05, "fp16": 362.05, "fp8": 733}),
    (("l4",), {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5}),
    (("v100", "pcie"), {"fp32": 14, "fp16": 112}),
    (("v100",), {"fp32": 15.7, "fp16": 125}),
    (("t4",), {"fp32": 8.1, "fp16": 65}),
    (("mi300x",), {"fp32": 163.4, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}),
    (("mi325x",), {"fp32": 163.4, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}),
    (("mi250x",), {"fp32": 95.7, "bf16": 383, "fp16": 383}),
    (("mi210",), {"fp32": 45.3, "bf16": 181, "fp16": 181}),
)


def _words(name: str) -> set[str]:
    """The name's words, so that "a10" does not match "a100" nor "l4" match "l40s"."""
    return set(name.lower().replace("-", " ").replace("_", " ").split())


def dense_peaks(name: str) -> dict[str, float] | None:
    """{dtype: dense FLOP/s} of a device by its name ("NVIDIA H100 80GB HBM3"); None when not in the table."""
    words = _words(name)
    for keys, peaks in _TABLE:
        if all(any(w == k or (k in ("pcie", "nvl") and w.startswith(k)) for w in words) for k in keys):
            return {dtype: tflops * TERA for dtype, tflops in peaks.items()}
    return None


def peak_for(name: str | None, dtypes: dict[str, float]) -> tuple[float | None, str, str]:
    """(the dense peak FLOP/s the step's work could reach, its dtype, the reason when None) for a device and
    the FLOPs it ran per dtype. Mixed dtypes: the FLOPs over the time each share takes at its own peak."""
    if not name or name == "cpu":
        return None, "", "a CPU has no dense peak in gpumon's table: MFU is for GPUs"
    peaks = dense_peaks(name)
    if peaks is None:
        return None, "", f"no dense peak known for {name} (core/gpu/peaks.py)"
    total = sum(dtypes.values())
    if total <= 0:
        return None, "", "the step's FLOPs by dtype are unknown"
    missing = [d for d in dtypes if d not in peaks]
    if missing:
        return None, "", f"{name} has no {', '.join(sorted(missing))} peak in the table"
    seconds = sum(flops / peaks[d] for d, flops in dtypes.items())
    return total / seconds, dtype_label(dtypes), ""


def dtype_label(dtypes: dict[str, float]) -> str:
    """What a step's math ran in: its one dtype ("bf16"), else the one with the most FLOPs ("mostly bf16");
    "" when none is known."""
    counted = {d: f for d, f in dtypes.items() if f > 0}
    if not counted:
        return ""
    main = max(counted, key=lambda d: counted[d])
    return main if len(counted) == 1 else f"mostly {main}"
