#!/usr/bin/env python3
"""Soak: a simulated control loop against `gr00t serve` on the tiny checkpoint for DURATION
seconds (default 3600). Every minute: server RSS (VmRSS) and that minute's latency p50/p99/max
go to OUT/minutes.csv; the server log to OUT/server.log.
Usage: GR00T=target/release/gr00t bench/loadgen/soak.py [DURATION] [OUT]"""
import http.client, json, os, random, subprocess, sys, time
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests/fixtures/gr00t_n17_tiny")
DUR = float(sys.argv[1]) if len(sys.argv) > 1 else 3600
OUT = sys.argv[2] if len(sys.argv) > 2 else "/tmp/soak"
os.makedirs(OUT, exist_ok=True)
PORT = int(os.environ.get("PORT", "23917"))
GR00T = os.environ.get("GR00T", os.path.join(ROOT, "target/release/gr00t"))
srv = subprocess.Popen([GR00T, "serve", "--checkpoint", FIX + "/checkpoint",
                        "--port", str(PORT), "--history", "20"],
                       stderr=open(OUT + "/server.log", "w"), stdout=subprocess.DEVNULL)
def rss_kb(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1])
cases = []
for c in range(4):
    d = json.load(open(f"{FIX}/case{c}/request.json"))
    d.pop("noise", None)
    cases.append(d)
# wait ready
for _ in range(600):
    if "Application startup complete" in open(OUT + "/server.log").read(): break
    time.sleep(1)
conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
out = open(OUT + "/minutes.csv", "w")
out.write("minute,elapsed_s,requests,errors,rss_mb,p50_ms,p99_ms,max_ms\n"); out.flush()
rng = random.Random(7)
t0 = time.time(); nxt = t0; minute = 0; lat = []; errs = 0; step = 0; total = 0
def sample():
    global minute, lat, errs, nxt
    lat.sort()
    p = lambda q: lat[min(len(lat)-1, int(q*len(lat)))] if lat else float('nan')
    out.write(f"{minute},{time.time()-t0:.0f},{len(lat)},{errs},{rss_kb(srv.pid)/1024:.1f},{p(0.5):.1f},{p(0.99):.1f},{(lat[-1] if lat else float('nan')):.1f}\n"); out.flush()
    minute += 1; lat = []; errs = 0; nxt += 60
sample()
while time.time() - t0 < DUR:
    base = cases[step % 4]
    req = dict(base)
    req["state"] = {k: [x + rng.uniform(-0.01, 0.01) for x in v] for k, v in base["state"].items()}
    req["seed"] = step
    body = json.dumps(req).encode()
    s = time.perf_counter()
    try:
        conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
        r = conn.getresponse(); r.read()
        if r.status != 200: errs += 1
    except Exception as e:
        errs += 1; conn.close(); conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    lat.append((time.perf_counter() - s) * 1000); step += 1; total += 1
    if time.time() >= nxt: sample()
sample()
srv.terminate(); srv.wait()
print("done", total, "requests; exit", srv.returncode)
