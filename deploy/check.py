#!/usr/bin/env python3
"""Offline checks of deploy/ (no cluster, no Docker engine), run by .ci/run:

- every manifest in deploy/k8s against the Kubernetes 1.37 schemas (kubernetes-validate,
  strict: unknown fields refused);
- the manifests against the server: grace period >= preStop + the server's own drain limit
  (read from crates/gr00t/src/shutdown.rs), memory request >= the measured peak RSS,
  probes on /health, the replica id and Prometheus annotations;
- the Dockerfile (dockerfile-parse): multi-stage, non-root USER, HEALTHCHECK on /health, weights
  from the HF cache volume, and the files it COPYs resolve the workspace (`cargo metadata`);
- deploy/nginx/gr00t.conf with `nginx -t`.
Prints `N passed, M failed`; exits 1 on any failure.
"""
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from dockerfile_parse import DockerfileParser

from checklist import check, report

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy/k8s"
# README "Speed": peak RSS of the full-size model on the CPU (VmHWM), fp32 and bf16.
PEAK_RSS_BYTES = 6.11e9


def quantity(q):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    return float(m.group(1)) * units.get(m.group(2), 1)


def manifests():
    files = sorted(K8S.glob("*.yaml"))
    r = subprocess.run(["kubernetes-validate", "--strict", "--quiet", *map(str, files)],
                       capture_output=True, text=True)
    check(f"{len(files)} manifests valid against the Kubernetes schemas", r.returncode == 0,
          (r.stdout + r.stderr).strip()[-2000:])
    docs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    kinds = {d["kind"] for d in docs}
    check("Deployment, Service, PodDisruptionBudget, Ingress present",
          {"Deployment", "Service", "PodDisruptionBudget", "Ingress"} <= kinds, kinds)
    dep = next(d for d in docs if d["kind"] == "Deployment")
    pod = dep["spec"]["template"]
    c = pod["spec"]["containers"][0]
    grace = int(re.search(r"const GRACE: Duration = Duration::from_secs\((\d+)\)",
                          (ROOT / "crates/gr00t/src/shutdown.rs").read_text()).group(1))
    pre = c["lifecycle"]["preStop"]["exec"]["command"]
    pre_s = int(pre[1]) if pre[0] == "sleep" else 0
    tgps = pod["spec"]["terminationGracePeriodSeconds"]
    check("terminationGracePeriodSeconds > preStop + the server's drain limit", tgps > pre_s + grace,
          f"{tgps} s vs {pre_s} + {grace} s")
    mem = quantity(c["resources"]["requests"]["memory"])
    check("memory request >= the measured peak RSS (6.11 GB)", mem >= PEAK_RSS_BYTES,
          f"{mem / 1e9:.2f} GB")
    check("memory limit >= request", quantity(c["resources"]["limits"]["memory"]) >= mem)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check(f"{probe} on GET /health", c[probe]["httpGet"]["path"] == "/health")
    env = {e["name"]: e for e in c["env"]}
    check("GR00T_REPLICA_ID from the pod name",
          env["GR00T_REPLICA_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name")
    ann = pod["metadata"]["annotations"]
    check("Prometheus scrape annotations",
          ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") == "/metrics"
          and f"--port={ann.get('prometheus.io/port')}" in c["args"])
    ing = [d for d in docs if d["kind"] == "Ingress"]
    check("ingress hashes on X-Session-Id", all(
        d["metadata"]["annotations"]["nginx.ingress.kubernetes.io/upstream-hash-by"]
        == "$http_x_session_id" for d in ing))


def dockerfile():
    p = DockerfileParser(path=str(ROOT / "deploy/Dockerfile"))
    instr = p.structure
    froms = [i for i in instr if i["instruction"] == "FROM"]
    check("Dockerfile: multi-stage", len(froms) >= 2 and " AS " in froms[0]["value"].upper())
    last = max(i["startline"] for i in froms)
    final = [i for i in instr if i["startline"] > last]
    users = [i["value"] for i in final if i["instruction"] == "USER"]
    check("Dockerfile: runs as a non-root user", users and users[-1].split(":")[0] not in
          ("0", "root"), users)
    hc = [i["value"] for i in final if i["instruction"] == "HEALTHCHECK"]
    check("Dockerfile: HEALTHCHECK on /health", hc and "/health" in hc[0], hc)
    envs = p.envs
    check("Dockerfile: weights from the HF cache volume",
          envs.get("HF_HOME") == "/models/huggingface"
          and any(i["instruction"] == "VOLUME" and "/models/huggingface" in i["value"]
                  for i in final))
    # The build stage COPYs: enough to resolve the workspace offline.
    copies = [i["value"].split() for i in instr if i["instruction"] == "COPY"
              and i["startline"] < last and "--from" not in i["value"]]
    with tempfile.TemporaryDirectory() as tmp:
        for *srcs, _dest in copies:
            for s in srcs:
                src = ROOT / s
                dst = Path(tmp) / s
                if src.is_dir():
                    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("target"))
                else:
                    shutil.copy(src, dst)
        r = subprocess.run(["cargo", "metadata", "--locked", "--offline", "--no-deps",
                            "--format-version", "1"], cwd=tmp, capture_output=True, text=True)
        check("Dockerfile: the COPYed files resolve the workspace (cargo metadata --locked)",
              r.returncode == 0, r.stderr.strip()[-500:])


def nginx():
    with tempfile.TemporaryDirectory() as tmp:
        for d in ("logs", "temp"):
            Path(tmp, d).mkdir()
        r = subprocess.run(["nginx", "-t", "-p", tmp + "/", "-c",
                            str(ROOT / "deploy/nginx/gr00t.conf")], capture_output=True, text=True)
        check("nginx -t deploy/nginx/gr00t.conf", r.returncode == 0, r.stderr.strip()[-500:])


def main():
    manifests()
    dockerfile()
    nginx()
    return report()


if __name__ == "__main__":
    sys.exit(main())
