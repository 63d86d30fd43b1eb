"""Turns the raw outputs of bench/run.sh into a Markdown report: per-stage medians, achieved
GFLOP/s, the GEMM-bound floor (stage FLOPs / best fp32 GEMM rate of the same run) and the
ratios against the floor, the PyTorch eager peer and the issue's targets.

Usage: python3 report.py OUT_DIR   (reads gemm.json, cold.json, loop.json, peer.txt, machine.txt)
"""
import json
import re
import sys
from pathlib import Path

STAGES = ["decode", "encode", "vision", "llm", "adapter", "denoise", "decode_actions"]


def machine(out):
    text = (out / "machine.txt").read_text()
    field = lambda name: (re.search(rf"^{name}:\s*(.+)$", text, re.M) or [None, "?"])[1].strip()
    avx512 = re.search(r"^flags with avx512:\s*(.*)$", text, re.M)
    loads = re.findall(r"load average (before|after): (.+)", text)
    return {
        "model": field("Model name"),
        "cpus": field(r"CPU\(s\)"),
        "avx512": (avx512[1].strip() or "none") if avx512 else "?",
        "load": "; ".join(f"{w} {v}" for w, v in loads),
    }


def peer(out):
    p = out / "peer.txt"
    if not p.exists():
        return None
    m = re.search(r"vision_ms (\d+)\s+llm_ms (-?\d+)\s+backbone_ms (\d+)", p.read_text())
    if not m:
        return None
    head = re.search(r"threads (\d+)", p.read_text())
    return {"vision": float(m[1]), "llm": float(m[2]), "backbone": float(m[3]),
            "threads": int(head[1]) if head else None}


def main():
    out = Path(sys.argv[1])
    gemm = json.loads((out / "gemm.json").read_text())
    cold = json.loads((out / "cold.json").read_text())
    loop = json.loads((out / "loop.json").read_text())
    rate = gemm["best_gflops"]
    m = machine(out)
    pr = peer(out)

    def floor_ms(gflop):
        return gflop / rate * 1e3

    lines = []
    lines.append(f"Machine: {m['model']}, {m['cpus']} CPUs, AVX-512: {m['avx512']}; {m['load']}")
    blas = gemm.get("blas", {})
    lines.append(
        f"Best fp32 GEMM: {rate:.1f} GFLOP/s (numpy {gemm.get('numpy')}, "
        f"{blas.get('internal_api', '?')} {blas.get('version', '')} kernel "
        f"{blas.get('architecture', '?')}, {gemm.get('threads')} threads; by size "
        + ", ".join(f"{n}: {g:.0f}" for n, g in gemm["by_size"].items()) + ")")
    lines.append(f"gr00t threads: {cold['threads']}; peak RSS {cold['peak_rss_mb']:.0f} MB (cold run), "
                 f"{loop['peak_rss_mb']:.0f} MB (loop run)")
    lines.append("")
    lines.append("| stage | cold median ms | GFLOP | GFLOP/s | floor ms | × floor | loop median ms |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    rows = [(s, cold["stages"][s]["median_ms"], cold["stages"][s]["gflop"],
             loop["stages"][s]["median_ms"]) for s in STAGES]
    bb = lambda d: d["stages"]["vision"]["median_ms"] + d["stages"]["llm"]["median_ms"]
    bb_gflop = cold["stages"]["vision"]["gflop"] + cold["stages"]["llm"]["gflop"]
    total_gflop = sum(cold["stages"][s]["gflop"] for s in STAGES)
    rows.append(("backbone (vision+llm)", bb(cold), bb_gflop, bb(loop)))
    rows.append(("total", cold["total_ms"], total_gflop, loop["total_ms"]))
    for name, ms, gflop, loop_ms in rows:
        if gflop > 0:
            fl = floor_ms(gflop)
            lines.append(f"| {name} | {ms:.1f} | {gflop:.1f} | {gflop / ms * 1e3:.1f} | "
                         f"{fl:.1f} | {ms / fl:.2f} | {loop_ms:.1f} |")
        else:
            lines.append(f"| {name} | {ms:.1f} | - | - | - | - | {loop_ms:.1f} |")
    lines.append("")
    if pr:
        lines.append(f"PyTorch eager peer ({pr['threads']} threads): "
                     f"vision {pr['vision']:.0f} ms, llm {pr['llm']:.0f} ms, backbone {pr['backbone']:.0f} ms")
        lines.append("")
        lines.append("| part | ours ms | PyTorch ms | ours / PyTorch | PyTorch GFLOP/s |")
        lines.append("|---|---:|---:|---:|---:|")
        suspect = False
        for part, ours, gflop in [
                ("vision", cold["stages"]["vision"]["median_ms"], cold["stages"]["vision"]["gflop"]),
                ("llm", cold["stages"]["llm"]["median_ms"], cold["stages"]["llm"]["gflop"]),
                ("backbone", bb(cold), bb_gflop)]:
            peer_rate = gflop / pr[part] * 1e3 if pr[part] > 0 else float("inf")
            suspect |= peer_rate > rate
            lines.append(f"| {part} | {ours:.0f} | {pr[part]:.0f} | {ours / pr[part]:.2f} | {peer_rate:.0f} |")
        if suspect:
            # The peer's llm time is (vision + LLM forward) − (a separate vision call).
            lines.append("")
            lines.append("Note: a PyTorch part runs faster than the machine's best GEMM rate, so the "
                         "peer's vision/llm split is not trustworthy in this run; compare the backbone.")
        lines.append("")
    lines.append("Targets (issue 5):")
    checks = []
    if pr:
        checks.append(("backbone ≤ PyTorch eager peer", bb(cold) / pr["backbone"], 1.0))
    checks.append(("backbone ≤ 1.15 × its GEMM floor", bb(cold) / floor_ms(bb_gflop), 1.15))
    checks.append(("cold request ≤ 1.25 × its GEMM floor", cold["total_ms"] / floor_ms(total_gflop), 1.25))
    checks.append(("control loop ≤ 0.6 × cold request", loop["total_ms"] / cold["total_ms"], 0.6))
    for what, ratio, bound in checks:
        lines.append(f"- {what}: {ratio:.2f} ({'met' if ratio <= bound else 'NOT met'})")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
