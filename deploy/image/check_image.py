#!/usr/bin/env python3
"""Builds the container image of deploy/Dockerfile and runs it as a user would (needs a
Docker engine; run by .ci/run when one can be started):

- the image: the runtime user is 10001, `HEALTHCHECK` on /health, the weights volume, no
  weights inside (its size);
- the container with its default command and a read-only Hugging Face cache that holds the tiny
  fixture checkpoint at the pinned snapshot's path, as `gr00t pull` lays it out: Docker's own
  health check turns `healthy`, the server runs as uid 10001, every DROID fixture case posted
  to the published HTTP port gives NVIDIA's golden actions (max|Δ| < 1e-5, the README gate),
  and the published ZMQ and websocket ports give the HTTP answer bit for bit (the example
  clients; tests/python/requirements.txt);
- `docker stop` (SIGTERM to the server, PID 1) ends it with exit code 0 well inside the grace
  period;
- the container as deploy/k8s/deployment.yaml runs it (its args, env, user, read-only root
  filesystem, no capabilities, no privilege escalation, memory limit, the hub cache read-only
  and an emptyDir /tmp): ready on its readiness probe, the pod name in `X-Gr00t-Replica`, the
  golden actions, then its preStop hook and SIGTERM, exit 0 inside
  `terminationGracePeriodSeconds`.

  python3 deploy/image/check_image.py [--local-bases] [--tag gr00t-rs:check] [--keep]

`--local-bases` first builds the two base images from Debian's mirror (base-images.sh, tagged
gr00t-local/…) and builds on them, for machines that cannot reach Docker Hub. Prints `N passed, M failed`; exits 1 on any failure.
"""
import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/fixtures/gr00t_n17_tiny"
GROUPS = ("eef_9d", "gripper_position", "joint_position")
REPO_FOLDER = "models--nvidia--GR00T-N1.7-3B"
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + str(detail) if detail else ''}", flush=True)


def docker(*args, check_rc=True, **kw):
    """Runs the Docker CLI; its stdout, stripped."""
    p = subprocess.run([DOCKER, *args], capture_output=True, text=True, **kw)
    if check_rc and p.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:2])}: {p.stderr.strip()[-2000:]}")
    return p.stdout.strip()


def docker_cli():
    """A client that builds with BuildKit without the buildx plugin: Docker 23+ (BuildKit by
    default, with buildx) or Debian's 20.10 client (DOCKER_BUILDKIT=1)."""
    return os.environ.get("DOCKER", "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker")


def safetensors(path):
    """A safetensors file's f32 tensors as numpy arrays (the format is a JSON header + bytes)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__" or meta["dtype"] != "F32":
            continue
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], np.float32).reshape(meta["shape"])
    return out


def hub_cache(dst):
    """A Hugging Face cache holding the tiny checkpoint as the pinned N1.7 snapshot."""
    rev = re.search(r'MODEL_REVISION: &str = "([0-9a-f]+)"',
                    (ROOT / "crates/gr00t-model/src/hub.rs").read_text()).group(1)
    full = rev + "0" * (40 - len(rev))
    repo = dst / "hub" / REPO_FOLDER
    shutil.copytree(FIXTURE / "checkpoint", repo / "snapshots" / full)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs/main").write_text(full)
    # The container's user is not this machine's: everything readable by all, nothing writable.
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return full


def logs(name):
    """The container's output (the server logs to stderr)."""
    p = subprocess.run([DOCKER, "logs", name], capture_output=True, text=True)
    return p.stdout + p.stderr


def published(name, port):
    """The loopback host port Docker published for the container's `port`."""
    out = docker("port", name, f"{port}/tcp").splitlines()[0]
    return int(out.rsplit(":", 1)[1])


def wait_healthy(name, timeout):
    """Polls Docker's health status; (status, seconds waited)."""
    t0 = time.monotonic()
    status = "?"
    while time.monotonic() - t0 < timeout:
        state = json.loads(docker("inspect", "--format", "{{json .State}}", name))
        status = state.get("Health", {}).get("Status", "none")
        if status == "healthy" or not state.get("Running"):
            break
        time.sleep(1)
    return status, time.monotonic() - t0


def golden_delta(port, case, token=None):
    """max|Δ| over the action groups between a fixture case's answer and NVIDIA's actions."""
    got = predict(port, json.loads((case / "request.json").read_text()), token)
    want = safetensors(case / "taps.safetensors")
    return max(float(np.max(np.abs(got[g] - want[f"output.{g}"].reshape(got[g].shape))))
               for g in GROUPS)


def predict(port, body, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/predict", data=json.dumps(body).encode(), headers=headers,
        method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        reply = json.load(r)
    return {g: np.asarray(reply["actions"][g], np.float32) for g in GROUPS}


def check_other_doors(name, http):
    """case0 through the published ZMQ and websocket ports, with the example clients, equals the
    HTTP answer bit for bit (the noise of case0 is seed 0's)."""
    import asyncio

    import websockets
    sys.path.insert(0, str(ROOT / "examples"))
    import websocket_client as wsc
    import zmq_client as zc

    request = json.loads((FIXTURE / "case0/request.json").read_text())
    want = predict(http, request)
    try:
        client = zc.PolicyClient("127.0.0.1", published(name, 5555), timeout_ms=60_000)
        got = client.get_action(zc.case0_observation(), {"noise": zc.case0_noise()})
        same = all(np.array_equal(got[g][0], want[g]) for g in GROUPS)
        check("ZMQ port 5555: get_action == HTTP (bit-equal)", same)
    except Exception as e:  # noqa: BLE001 - a failed door is a failed check
        check("ZMQ port 5555: get_action == HTTP (bit-equal)", False, f"{type(e).__name__}: {e}")

    async def exchange(uri):
        async with websockets.connect(uri, max_size=None, open_timeout=20) as ws:
            await asyncio.wait_for(ws.recv(), 60)  # the metadata
            await ws.send(wsc.packb(wsc.case0_observation()))
            return wsc.unpackb(await asyncio.wait_for(ws.recv(), 60))

    try:
        reply = asyncio.run(exchange(f"ws://127.0.0.1:{published(name, 8000)}"))
        same = all(np.array_equal(np.asarray(reply[g], np.float32), want[g]) for g in GROUPS)
        check("websocket port 8000: infer == HTTP (bit-equal)", same)
    except Exception as e:  # noqa: BLE001
        check("websocket port 8000: infer == HTTP (bit-equal)", False, f"{type(e).__name__}: {e}")


def deployment_container():
    """The gr00t container of deploy/k8s/deployment.yaml: (pod spec, container spec)."""
    import yaml

    docs = yaml.safe_load_all((ROOT / "deploy/k8s/deployment.yaml").read_text())
    dep = next(d for d in docs if d and d.get("kind") == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "gr00t")


def docker_size(quantity):
    """A Kubernetes binary quantity (`8Gi`, `512Mi`) as Docker writes sizes (`8g`, `512m`)."""
    q = str(quantity)
    for unit, short in (("Gi", "g"), ("Mi", "m"), ("Ki", "k")):
        if q.endswith(unit):
            return q[: -len(unit)] + short
    return q


def docker_run_as_deployment(name, tag, cache, pod_name):
    """`docker run` flags that reproduce the Deployment's container (what kubelet would do with
    it on one node); the readiness probe's container port, the grace period and the API token
    that stands in for its Secret."""
    pod, c = deployment_container()
    ctx = {**pod.get("securityContext", {}), **c.get("securityContext", {})}
    flags = ["--name", name, "--user", f"{ctx['runAsUser']}:{ctx['runAsGroup']}"]
    if ctx.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    if ctx.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    flags += [f"--cap-drop={cap}" for cap in ctx.get("capabilities", {}).get("drop", [])]
    limits = c["resources"]["limits"]
    flags += ["--memory", docker_size(limits["memory"])]
    token = None
    for e in c.get("env", []):
        src = e.get("valueFrom", {})
        if "value" in e:
            value = e["value"]
        elif src.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            value = pod_name
        elif src.get("resourceFieldRef", {}).get("resource") == "limits.cpu":
            value = str(limits["cpu"])
        elif "secretKeyRef" in src and e["name"] == "GR00T_API_TOKEN":
            value = token = secrets.token_hex(24)  # what `kubectl create secret` would hold
        else:
            raise ValueError(f"env {e['name']}: no stand-in for {src}")
        flags += ["-e", f"{e['name']}={value}"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for m in c["volumeMounts"]:
        v = volumes[m["name"]]
        if "persistentVolumeClaim" in v:
            flags += ["-v", f"{cache}:{m['mountPath']}{':ro' if m.get('readOnly') else ''}"]
        elif "emptyDir" in v:
            flags += ["--tmpfs", f"{m['mountPath']}:size={docker_size(v['emptyDir'].get('sizeLimit', '64Mi'))}"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    flags += [f"-p127.0.0.1::{port}" for port in ports.values()]
    probe = c["readinessProbe"]["httpGet"]
    port = probe["port"] if isinstance(probe["port"], int) else ports[probe["port"]]
    return (["run", "-d", *flags, tag, *c["args"]], port, probe["path"],
            c["lifecycle"]["preStop"]["exec"]["command"], pod["terminationGracePeriodSeconds"], token)


def check_as_deployment(tag, cache):
    """Runs the image as the Deployment's pod would and checks readiness, replica, answers and
    the shutdown sequence."""
    name, pod_name = f"gr00t-pod-{os.getpid()}", "gr00t-7c9f-abcde"
    run, port, path, pre_stop, grace, token = docker_run_as_deployment(name, tag, cache, pod_name)
    try:
        docker(*run)
        host = None
        t0 = time.monotonic()
        ready = False
        while time.monotonic() - t0 < 180 and not ready:
            state = json.loads(docker("inspect", "--format", "{{json .State}}", name))
            if not state.get("Running"):
                break
            host = host or published(name, port)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{host}{path}", timeout=3) as r:
                    ready = r.status == 200
                    replica = r.headers.get("X-Gr00t-Replica")
            except OSError:
                time.sleep(1)
        check("as the Deployment runs it: ready on its readiness probe", ready,
              f"GET {path} 200 after {time.monotonic() - t0:.0f} s" if ready else logs(name)[-2000:])
        if not ready:
            return
        check("as the Deployment runs it: X-Gr00t-Replica is the pod name", replica == pod_name,
              replica)
        if token:
            try:
                golden_delta(host, FIXTURE / "case0")
                refused = None
            except urllib.error.HTTPError as e:
                refused = e.code
            check("as the Deployment runs it: /predict without the Secret's token is refused",
                  refused == 401, f"HTTP {refused}")
        d = golden_delta(host, FIXTURE / "case0", token)
        check("as the Deployment runs it: case0 matches the goldens", d < 1e-5, f"max|Δ| {d:.1e}")
        t0 = time.monotonic()
        docker("exec", name, *pre_stop)
        docker("stop", "-t", str(grace), name)
        took = time.monotonic() - t0
        code = docker("inspect", "--format", "{{.State.ExitCode}}", name)
        check("as the Deployment runs it: preStop, SIGTERM, exit 0 inside the grace period",
              code == "0" and took < grace, f"exit {code} after {took:.1f} s of {grace} s")
    finally:
        docker("rm", "-f", name, check_rc=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tag", default="gr00t-rs:check")
    ap.add_argument("--local-bases", action="store_true",
                    help="build rust:1.95-bookworm and debian:bookworm-slim from Debian's mirror first")
    ap.add_argument("--keep", action="store_true", help="keep the image afterwards")
    args = ap.parse_args()
    t_all = time.monotonic()
    if subprocess.run([DOCKER, "info"], capture_output=True).returncode != 0:
        print("no Docker engine answers (start dockerd first)", file=sys.stderr)
        return 2
    bases = []
    if args.local_bases:
        subprocess.run([str(ROOT / "deploy/image/base-images.sh")], check=True)
        rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout
        version = ".".join(rustc.split()[1].split(".")[:2])
        bases = ["--build-arg", f"RUST_IMAGE=gr00t-local/rust:{version}-bookworm",
                 "--build-arg", "RUNTIME_IMAGE=gr00t-local/debian:bookworm-slim"]

    t0 = time.monotonic()
    build = subprocess.run(
        [DOCKER, "build", "--network", "host", *bases, "-f", "deploy/Dockerfile", "-t", args.tag,
         "."],
        cwd=ROOT, env={**os.environ, "DOCKER_BUILDKIT": "1"}, capture_output=True, text=True)
    built = build.returncode == 0
    check("docker build -f deploy/Dockerfile", built,
          f"{time.monotonic() - t0:.0f} s" if built else (build.stdout + build.stderr)[-3000:])
    if not built:
        return finish(t_all)

    cfg = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", args.tag))
    size = int(docker("image", "inspect", "--format", "{{.Size}}", args.tag))
    check("image runs as uid 10001", cfg.get("User") == "10001:10001", cfg.get("User"))
    hc = " ".join((cfg.get("Healthcheck") or {}).get("Test") or [])
    check("image HEALTHCHECK reads /health", "/health" in hc, hc)
    check("image declares the weights volume", "/models/huggingface" in (cfg.get("Volumes") or {}))
    found = docker("run", "--rm", "--user", "0", "--entrypoint", "find", args.tag, "/", "-xdev", "-name",
                   "*.safetensors")
    check("image holds no weights", not found, f"{size / 1e6:.0f} MB, no *.safetensors"
          if not found else found[:500])

    name = f"gr00t-check-{os.getpid()}"
    tmp = Path(tempfile.mkdtemp(prefix="gr00t-image-"))
    try:
        cache = tmp / "huggingface"
        snapshot = hub_cache(cache)
        docker("run", "-d", "--name", name, "-e", "RAYON_NUM_THREADS=2",
               "-p", "127.0.0.1::20000", "-p", "127.0.0.1::8000", "-p", "127.0.0.1::5555",
               "-v", f"{cache}:/models/huggingface:ro", args.tag)
        status, waited = wait_healthy(name, 180)
        check("Docker's health check: healthy", status == "healthy",
              f"{status} after {waited:.0f} s (interval 10 s)")
        if status != "healthy":
            print(logs(name)[-3000:])
            return finish(t_all)
        want = f"/models/huggingface/hub/{REPO_FOLDER}/snapshots/{snapshot}"
        check("the default command loads the pinned snapshot from the mounted cache",
              f"loading checkpoint {want}" in logs(name), want)
        uid = docker("exec", name, "sh", "-c", "awk '/^Uid:/ {print $2}' /proc/1/status")
        check("the server (PID 1) runs as uid 10001", uid == "10001", uid)
        http = published(name, 20000)
        worst = {case.name: golden_delta(http, case) for case in sorted(FIXTURE.glob("case*"))}
        check(f"{len(worst)} DROID fixture cases through the published port match the goldens",
              worst and max(worst.values()) < 1e-5,
              ", ".join(f"{k} max|Δ| {v:.1e}" for k, v in worst.items()))
        check_other_doors(name, http)
        t0 = time.monotonic()
        docker("stop", "-t", "30", name)
        stopped = time.monotonic() - t0
        code = docker("inspect", "--format", "{{.State.ExitCode}}", name)
        check("docker stop: SIGTERM drains and exits 0", code == "0" and stopped < 25,
              f"exit {code} after {stopped:.1f} s")
        check("the server logged the drain", "SIGTERM received" in logs(name))
        check_as_deployment(args.tag, cache)
    finally:
        docker("rm", "-f", name, check_rc=False)
        shutil.rmtree(tmp, ignore_errors=True)
        if not args.keep:
            docker("image", "rm", args.tag, check_rc=False)
    return finish(t_all)


def finish(t0):
    passed, failed = results.count(True), results.count(False)
    print(f"({time.monotonic() - t0:.0f} s)\n{passed} passed, {failed} failed")
    return 1 if failed else 0


DOCKER = docker_cli()

if __name__ == "__main__":
    sys.exit(main())
