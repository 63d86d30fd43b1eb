#!/usr/bin/env python3
"""Fleet test: 3 `gr00t serve` replicas on the tiny fixture checkpoint (loopback ports), Debian's
nginx in front with deploy/nginx/gr00t.conf, and N simulated robots (bench/loadgen: one session
and one distinct observation each, every answer checked against its solo answer).

1. Throughput and p50/p99 latency behind nginx with 1, 2 and 3 replicas; every session's
   answers must come from one replica (X-Session-Id hashing).
2. Faults under load: one replica SIGKILLed and restarted, then another drained (SIGTERM, it
   must exit 0) and restarted. The robots run 4-step episodes in server-side sessions (RTC
   against the session's last chunk, `POST /reset` between episodes), each step echoing the
   previous answer's `session_token`: a replica that does not hold the session answers 409
   `session restarted` and the robot starts a new episode; no client-side replica rule. No
   wrong or lost answer (each answer equals the solo answer of the step the server reports);
   clients see only retryable errors; the killed replica's sessions start over elsewhere
   (step 1) until it is back, and the servers reported their restart (409s > 0).
3. The websocket and ZMQ doors through nginx: answers bit-equal to HTTP, connections spread.

Usage (repository root): bench/fleet/fleet.py [--quick] [--clients N] [--seconds S] [--out DIR]
GR00T=path picks the server (default target/release/gr00t, else target/debug/gr00t).
Prints a Markdown table and a verdict per check; exits 1 if any check fails.
"""
import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
from checklist import check, report  # noqa: E402

FIXTURES = ROOT / "tests/fixtures/gr00t_n17_tiny"
CONF = ROOT / "deploy/nginx/gr00t.conf"
LOADGEN_DIR = ROOT / "bench/loadgen"
STARTUP_TIMEOUT = 120.0


def ports(base):
    """Front and replica ports: HTTP base+i, websocket base+100+i, ZMQ base+200+i (i=0: nginx)."""
    return {i: (base + i, base + 100 + i, base + 200 + i) for i in range(4)}


def render_conf(base, n, out):
    """deploy/nginx/gr00t.conf with this run's ports and only replicas 1..n."""
    text = CONF.read_text()
    p = ports(base)
    # The file's own ports: front 20000/8000/5555, replica i 2000i/800i/555(5+i).
    own = {0: (20000, 8000, 5555), 1: (20001, 8001, 5556), 2: (20002, 8002, 5557),
           3: (20003, 8003, 5558)}
    lines = []
    for line in text.splitlines():
        m = re.match(r"\s*server 127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            i = next(i for i in (1, 2, 3) if port in own[i])
            if i > n:
                continue
            line = line.replace(str(port), str(p[i][own[i].index(port)]))
        m = re.match(r"\s*listen (\d+);", line)
        if m:
            port = int(m.group(1))
            line = line.replace(str(port), str(p[0][own[0].index(port)]))
        lines.append(line)
    conf = out / "gr00t.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


class Nginx:
    def __init__(self, base, n, out):
        self.prefix = out / f"nginx-{n}"
        for d in ("logs", "temp"):
            (self.prefix / d).mkdir(parents=True, exist_ok=True)
        conf = render_conf(base, n, self.prefix)
        subprocess.run(["nginx", "-t", "-q", "-p", str(self.prefix), "-c", str(conf)], check=True)
        self.proc = subprocess.Popen(["nginx", "-p", str(self.prefix), "-c", str(conf),
                                      "-g", "daemon off;"])
        wait_http(f"127.0.0.1:{base}", "/health", lambda: self.proc.poll() is None)

    def stop(self):
        self.proc.send_signal(signal.SIGQUIT)  # graceful: finish open requests
        self.proc.wait(timeout=30)

    def access_log(self):
        return (self.prefix / "logs/access.log").read_text().splitlines()

    def zmq_log(self):
        return (self.prefix / "logs/zmq.log").read_text().splitlines()


def wait_http(addr, path, alive, timeout=STARTUP_TIMEOUT):
    end = time.time() + timeout
    while time.time() < end:
        if not alive():
            raise RuntimeError(f"process behind {addr} exited")
        try:
            with urllib.request.urlopen(f"http://{addr}{path}", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{addr}{path} not up after {timeout}s")


class Replica:
    def __init__(self, i, base, gr00t, out, queue):
        self.i, self.id = i, f"gr00t-{i}"
        self.http, self.ws, self.zmq = ports(base)[i]
        self.gr00t, self.out, self.queue = gr00t, out, queue
        self.starts = 0
        self.proc = None

    def start(self):
        self.starts += 1
        self.log = self.out / f"{self.id}.{self.starts}.log"
        env = dict(os.environ, GR00T_REPLICA_ID=self.id,
                   # One compute thread each: two replicas get a core each on a 2-core machine.
                   RAYON_NUM_THREADS=os.environ.get("RAYON_NUM_THREADS", "1"))
        self.proc = subprocess.Popen(
            [self.gr00t, "serve", "--checkpoint", str(FIXTURES / "checkpoint"),
             "--host", "127.0.0.1", "--port", str(self.http), "--ws-port", str(self.ws),
             "--zmq-port", str(self.zmq), "--queue", str(self.queue), "--no-ui"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), env=env)

    def wait_ready(self):
        wait_http(f"127.0.0.1:{self.http}", "/health", lambda: self.proc.poll() is None)
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/info", timeout=5) as r:
            info = json.load(r)
        # --port moves up when taken: make sure it is ours, not someone else's server.
        assert info.get("replica_id") == self.id, f"port {self.http} answers {info.get('replica_id')}"
        return time.time()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def loadgen(binary, front, clients, seconds, answers_out=None):
    cmd = [str(binary), "--addr", front, "--fixtures", str(FIXTURES), "--clients", str(clients),
           "--requests", "1000000", "--max-seconds", str(seconds)]
    if answers_out:
        cmd += ["--answers-out", str(answers_out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"loadgen failed ({r.returncode}): {r.stdout}\n{r.stderr}")


# Steps per session episode in the fault run: each step RTC against the session's last chunk.
EPISODE = 4


def fault_run(args, lg, reps, base, out):
    """Load for args.fault_seconds on 3 replicas; kill one at 25 %, drain another at 55 %."""
    front = f"127.0.0.1:{base}"
    answers = out / "fault_answers.jsonl"
    lg_proc = subprocess.Popen(
        [str(lg), "--addr", front, "--fixtures", str(FIXTURES), "--clients", str(args.clients),
         "--requests", "1000000", "--max-seconds", str(args.fault_seconds),
         "--answers-out", str(answers), "--episode", str(EPISODE)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The loadgen says "loading…" once its solo answers are in: the load starts then.
    line = lg_proc.stderr.readline()
    assert "loading" in line, line
    t0 = time.time()
    events = {}
    killed, drained = reps[args.victim - 1], reps[args.drained - 1]

    def at(frac):
        time.sleep(max(0.0, t0 + frac * args.fault_seconds - time.time()))

    at(0.25)
    killed.proc.send_signal(signal.SIGKILL)
    killed.proc.wait()
    events["killed"] = time.time()
    killed.start()
    events["killed_back"] = killed.wait_ready()
    at(0.55)
    drained.proc.send_signal(signal.SIGTERM)
    events["drain"] = time.time()
    drain_rc = drained.proc.wait(timeout=150)
    events["drained"] = time.time()
    drained.start()
    events["drained_back"] = drained.wait_ready()
    stdout, stderr = lg_proc.communicate(timeout=args.fault_seconds + 300)
    summary = json.loads(stdout)
    rows = [json.loads(l) for l in answers.read_text().splitlines()]
    return summary, rows, events, drain_rc, drained


def analyse_faults(summary, rows, events, drain_rc, drained, killed_id, reps, nginx):
    check("fault run: 0 wrong answers", summary["answers_wrong"] == 0,
          f"{summary['answers_ok']} right, {summary['answers_wrong']} wrong")
    check("fault run: no lost answer, no non-retryable error", summary["other_failures"] == 0,
          "; ".join(summary["other_failure_samples"]))
    check("drained replica exited 0 after finishing its requests", drain_rc == 0, f"exit {drain_rc}")
    prev = drained.out / f"{drained.id}.{drained.starts - 1}.log"
    _, sigterm, after = prev.read_text().partition("SIGTERM received")
    finished = len(re.findall(r"POST /predict 200", after))
    check("drained replica: requests in flight finished, no 5xx after SIGTERM",
          sigterm and not re.search(r"POST /predict 5\d\d", after),
          f"{finished} answered after the signal")
    # Sessions on the killed replica just before the kill.
    before = {}
    for r in rows:
        if r["t_unix"] < events["killed"]:
            before[r["session"]] = r["replica"]
    victims = sorted(s for s, rep in before.items() if rep == killed_id)
    during = [r for r in rows if events["killed"] < r["t_unix"] < events["killed_back"]]
    resumed = {s for s in victims
               if any(r["session"] == s and r["replica"] != killed_id for r in rows
                      if r["t_unix"] > events["killed"])}
    check("killed replica's sessions resumed on another replica",
          victims and resumed == set(victims),
          f"{len(resumed)}/{len(victims)} sessions ({', '.join(victims)})")
    # Server-side state: a victim's first answer elsewhere is a fresh session's (step 1), and
    # every answer is its session step's solo answer (the 0-wrong check above).
    fresh = {s for s in victims
             if next((r["step"] for r in rows if r["session"] == s and r["replica"] != killed_id
                      and r["t_unix"] > events["killed"]), None) == 1}
    check("killed replica's sessions started over elsewhere (step 1, RTC from nothing)",
          victims and fresh == set(victims),
          f"{len(fresh)}/{len(victims)}; {summary['session_resets']} resets sent")
    check("the killed replica's sessions were told of the restart (409 session restarted)",
          summary["session_restarted_409"] > 0,
          f"{summary['session_restarted_409']} answered 409")
    came_back = {s for s in victims
                 if any(r["session"] == s and r["replica"] == killed_id for r in rows
                        if r["t_unix"] > events["killed_back"])}
    retried_in_nginx = sum(1 for l in nginx.access_log() if "upstream_status=" in l
                           and re.search(r"upstream=\S+, ", l))
    return {
        "victim_sessions": len(victims),
        "came_back_after_restart": len(came_back),
        "answers_during_outage": len(during),
        "kill_to_ready_s": events["killed_back"] - events["killed"],
        "drain_s": events["drained"] - events["drain"],
        "client_retried_503": summary["retried_503"],
        "client_retried_connection_errors": summary["retried_connection_errors"],
        "nginx_resent_to_another_replica": retried_in_nginx,
        "session_resets": summary["session_resets"],
        "stale_session_answers_resent": summary["stale_session_answers_resent"],
        "session_restarted_409": summary["session_restarted_409"],
        "answers_ok": summary["answers_ok"],
        "latency_ms": summary["latency_ms"],
        "max_attempts": max((r["attempts"] for r in rows), default=0),
        "sessions_moved": summary["sessions_moved"],
    }


def protocol_doors(base, reps, nginx, direct_http):
    """ZMQ and websocket through nginx: bit-equal to HTTP, connections spread over replicas."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import numpy as np
        import websockets
        import websocket_client as wsc
        import zmq_client as zc
    except ImportError as e:
        check("ZMQ/websocket doors through nginx", False,
              f"{e} (pip install -r tests/python/requirements.txt)")
        return
    request = json.loads((FIXTURES / "case0/request.json").read_text())
    body = json.dumps(request).encode()
    req = urllib.request.Request(f"http://{direct_http}/predict", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        http = {k: np.array(v, np.float32) for k, v in json.load(r)["actions"].items()}
    seeded = dict((k, v) for k, v in request.items() if k != "noise")
    seeded["seed"] = 0
    req = urllib.request.Request(f"http://{direct_http}/predict", json.dumps(seeded).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        http0 = {k: np.array(v, np.float32) for k, v in json.load(r)["actions"].items()}
    n_conn, per_conn = 6, 2  # websocket: per_conn answers over two connections
    zmq_ok = 0
    clients = [zc.PolicyClient("127.0.0.1", base + 200, timeout_ms=60_000) for _ in range(n_conn)]
    for _ in range(per_conn):
        for c in clients:
            a = c.get_action(zc.case0_observation(), {"noise": zc.case0_noise()})
            zmq_ok += all(np.array_equal(a[g][0], http[g]) for g in http)
    for c in clients:
        c.close()
    want = np.concatenate([http0["joint_position"], http0["gripper_position"]], 1)

    async def ws_all():
        # Two rounds of connections, each with its session id in the handshake: a session's
        # reconnection must reach the replica of its first connection.
        ok = 0
        for _ in range(2):
            conns = [await websockets.connect(
                f"ws://127.0.0.1:{base + 100}", max_size=None, compression=None, proxy=None,
                additional_headers={"X-Session-Id": f"ws-{k}"}) for k in range(n_conn)]
            for ws in conns:
                await ws.recv()  # metadata
            for _ in range(per_conn // 2):
                for ws in conns:
                    await ws.send(wsc.packb(wsc.case0_observation()))
                    reply = wsc.unpackb(await ws.recv())
                    ok += bool(np.array_equal(reply["actions"], want))
            for ws in conns:
                await ws.close()
        return ok

    ws_ok = asyncio.run(ws_all())
    time.sleep(0.5)  # nginx logs a stream/websocket connection when it closes
    zmq_up = {re.search(r"upstream=(\S+)", l).group(1) for l in nginx.zmq_log()}
    ws_sessions = {}
    for l in nginx.access_log():
        if " 101 " in l:
            m = re.search(r"session=(ws-\d+) upstream=(\S+)", l)
            ws_sessions.setdefault(m.group(1), set()).add(m.group(2))
    ws_up = set().union(*ws_sessions.values()) if ws_sessions else set()
    total = n_conn * per_conn
    check("ZMQ through nginx: answers bit-equal to HTTP", zmq_ok == total,
          f"{zmq_ok}/{total}, {n_conn} connections on {len(zmq_up)} replicas")
    check("websocket through nginx: answers bit-equal to HTTP", ws_ok == total,
          f"{ws_ok}/{total}, {n_conn} connections on {len(ws_up)} replicas")
    check("websocket: a session's reconnection reaches its replica (X-Session-Id handshake)",
          len(ws_sessions) == n_conn and all(len(v) == 1 for v in ws_sessions.values()),
          {k: sorted(v) for k, v in sorted(ws_sessions.items())})
    check("ZMQ and websocket connections spread over replicas",
          len(zmq_up) > 1 and len(ws_up) > 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI: 9 robots, 2.5 s per setting, 10 s faults")
    ap.add_argument("--clients", type=int, default=None, help="robots (12; 9 with --quick)")
    ap.add_argument("--seconds", type=float, default=None, help="per replica count")
    ap.add_argument("--fault-seconds", type=float, default=None)
    ap.add_argument("--queue", type=int, default=8)
    ap.add_argument("--base-port", type=int, default=int(os.environ.get("FLEET_PORT", 28000)))
    ap.add_argument("--out", default="/tmp/gr00t-fleet")
    args = ap.parse_args()
    args.clients = args.clients or (9 if args.quick else 12)
    args.seconds = args.seconds or (2.5 if args.quick else 30.0)
    args.fault_seconds = args.fault_seconds or (10.0 if args.quick else 40.0)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)

    gr00t = os.environ.get("GR00T") or next(
        (str(p) for p in (ROOT / "target/release/gr00t", ROOT / "target/debug/gr00t")
         if p.exists()), None)
    if not gr00t:
        sys.exit("no gr00t binary: cargo build -p gr00t (or GR00T=path)")
    if not shutil.which("nginx"):
        if os.geteuid() != 0:
            sys.exit("nginx missing: apt-get install nginx libnginx-mod-stream")
        subprocess.run("apt-get update -qq && apt-get install -y -qq nginx libnginx-mod-stream",
                       shell=True, check=True)
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=LOADGEN_DIR, check=True)
    lg = LOADGEN_DIR / "target/release/gr00t-loadgen"
    base = args.base_port
    print(f"gr00t {gr00t}; {os.cpu_count()} CPUs; {args.clients} robots; "
          f"{args.seconds:g} s per setting; load average {os.getloadavg()[0]:.1f}; out {out}",
          flush=True)
    t_start = time.time()

    reps = [Replica(i, base, gr00t, out, args.queue) for i in (1, 2, 3)]
    nginx = None
    table = []
    try:
        for r in reps:
            r.start()
        for r in reps:
            r.wait_ready()
        for n in (1, 2, 3):
            nginx = Nginx(base, n, out)
            rc, s = loadgen(lg, f"127.0.0.1:{base}", args.clients, args.seconds)
            nginx.stop()
            nginx = None
            (out / f"loadgen-{n}.json").write_text(json.dumps(s, indent=1))
            allowed = {f"gr00t-{i}" for i in range(1, n + 1)}
            table.append((n, s))
            check(f"{n} replica(s): 0 wrong, 0 failed", rc == 0 and s["answers_wrong"] == 0
                  and s["other_failures"] == 0,
                  f"{s['answers_ok']} answers, {s['answers_wrong']} wrong, "
                  f"{s['other_failures']} failed")
            check(f"{n} replica(s): every session on one replica",
                  s["sessions_on_one_replica"] == args.clients
                  and set(s["answers_by_replica"]) <= allowed,
                  f"{s['sessions_on_one_replica']}/{args.clients}; by replica "
                  f"{s['answers_by_replica']}")
        spread = table[-1][1]["sessions_by_replica"]
        check("3 replicas: the ring spreads the sessions", len(spread) >= 2, spread)

        nginx = Nginx(base, 3, out)
        # The victim: the replica holding most sessions (the hash decides which).
        by = table[-1][1]["sessions_by_replica"]
        args.victim = int(max(by, key=by.get).split("-")[1])
        args.drained = next(i for i in (1, 2, 3) if i != args.victim
                            and f"gr00t-{i}" in by) if len(by) > 1 else args.victim % 3 + 1
        summary, rows, events, drain_rc, drained = fault_run(args, lg, reps, base, out)
        faults = analyse_faults(summary, rows, events, drain_rc, drained,
                                f"gr00t-{args.victim}", reps, nginx)
        (out / "faults.json").write_text(json.dumps(faults, indent=1))
        protocol_doors(base, reps, nginx, f"127.0.0.1:{reps[0].http}")
    finally:
        if nginx:
            nginx.stop()
        for r in reps:
            r.stop()

    print()
    print(f"| replicas | robots | answers | wrong | throughput (answers/s) | p50 ms | p99 ms |"
          f" 503s retried | sessions by replica | answers by replica |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for n, s in table:
        by = ", ".join(f"{k} {v}" for k, v in sorted(s["answers_by_replica"].items()))
        sb = ", ".join(f"{k} {v}" for k, v in sorted(s["sessions_by_replica"].items()))
        print(f"| {n} | {s['clients']} | {s['answers_ok']} | {s['answers_wrong']} | "
              f"{s['throughput_rps']:.1f} | {s['latency_ms']['p50']:.0f} | "
              f"{s['latency_ms']['p99']:.0f} | {s['retried_503']} | {sb} | {by} |")
    f = faults
    print(f"\nfaults ({args.fault_seconds:g} s, {args.clients} robots): gr00t-{args.victim} "
          f"SIGKILLed at 25 % and back {f['kill_to_ready_s']:.1f} s later; gr00t-{args.drained} "
          f"SIGTERMed at 55 %, drained in {f['drain_s']:.1f} s, restarted.")
    print(f"  {f['answers_ok']} answers, 0 wrong required; {f['victim_sessions']} sessions "
          f"on the killed replica, {f['came_back_after_restart']} back on it after its restart; "
          f"nginx re-sent {f['nginx_resent_to_another_replica']} requests to another replica; "
          f"clients retried {f['client_retried_503']} × 503 and "
          f"{f['client_retried_connection_errors']} × connection errors; "
          f"{EPISODE}-step RTC episodes: {f['session_resets']} session resets, "
          f"{f['session_restarted_409']} × 409 session restarted, "
          f"{f['stale_session_answers_resent']} first steps on a replica's stale session reset "
          f"and re-sent; p50 "
          f"{f['latency_ms']['p50']:.0f} ms, p99 {f['latency_ms']['p99']:.0f} ms, max "
          f"{f['latency_ms']['max']:.0f} ms")
    print(f"({time.time() - t_start:.0f} s; load average {os.getloadavg()[0]:.1f} at the end)")
    return report()


if __name__ == "__main__":
    sys.exit(main())
