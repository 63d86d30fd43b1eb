#!/usr/bin/env python3
"""A control loop over HTTP in a server-side session: the server keeps the robot's last chunk
(RTC joins each new chunk onto it) and its frames (after the first step only the frame at t is
sent; the server supplies t−15).

Each answer carries the session's `session_token`; the client echoes it on its next step. When
the server no longer holds that session (it expired or was reset, the server restarted, or a
balancer sent the step to another replica), it answers 409 `session restarted` instead of
continuing something else: the client resets the session and sends the whole observation
again. Once a step has echoed the token the session is locked to it: requests and resets
without it are refused (409 `session locked`), so another client that learns the session id
cannot drive or reset the robot's session; a client that meets such a refusal itself (it lost
the token: restarted, or an earlier visit's session on a replica) moves to a new session id
(`<robot>.<n>`). A session's first step must be step 1 (a replica may still hold an earlier visit's
state under the same id: then that is reset too). Uses only the standard library.

Usage: python3 examples/http_session_client.py [--url http://127.0.0.1:20000] [--robot franka-1]
       [--steps 5] [--request BODY.json]  (default: the server's /demo request)
"""
import argparse
import json
import urllib.error
import urllib.request

# RTC steps for a loop that executes 8 of 40 rows before sending the next observation, with
# about 4 rows of latency (gr00t bench --loop --control-hz R --execute 8 measures yours).
RTC = {"rtc_overlap_steps": 32, "rtc_frozen_steps": 4, "action_horizon": 40}


def post(url, path, body, session):
    """POST JSON with the session header; returns (status, reply, replica that answered)."""
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "X-Session-Id": session})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.load(r), r.headers.get("X-Gr00t-Replica")
    except urllib.error.HTTPError as e:
        return e.code, json.load(e), e.headers.get("X-Gr00t-Replica")


def current_only(body):
    """The observation with only the frame at t of each camera."""
    return {**body, "images": {cam: frames[-1:] for cam, frames in body["images"].items()}}


class SessionRobot:
    """One robot's session: step `n` sends the frame at t only and joins onto chunk n − 1."""

    def __init__(self, url, session):
        self.url, self.session, self.step = url, session, 0
        self.base, self.moves = session, 0
        # The token of the session the last answer was in (echoed on the next step).
        self.token = None
        self.resets = 0

    def reset(self):
        # Once a step echoed the token the session is locked to it: a reset must carry it too.
        body = {"session_id": self.session, "session_token": self.token}
        status, reply, _ = post(self.url, "/reset", body, self.session)
        if status == 409 and reply.get("error", "").startswith("session locked"):
            self.move_on()
        else:
            assert status == 200, reply
        self.step, self.token = 0, None
        self.resets += 1

    def move_on(self):
        """Leaves a session locked to a token this client does not hold (an earlier run's, or
        a replica's from an earlier visit) for a fresh id; the old one expires on the server."""
        self.moves += 1
        self.session = f"{self.base}.{self.moves}"
        self.step, self.token = 0, None

    def act(self, observation):
        """The answer to `observation` (a /predict body with [t−15, t] frames)."""
        while True:
            if self.step == 0:
                body = observation
            else:
                body = {**current_only(observation), **RTC, "session_token": self.token}
            status, reply, _ = post(self.url, "/predict", body, self.session)
            if status == 409 and reply.get("error", "").startswith("session restarted"):
                # The server does not hold our session any more: start it over, whole.
                self.token = None
                self.reset()
                continue
            if status == 409 and reply.get("error", "").startswith("session locked"):
                # This id's session is locked to a token we do not hold: use another id.
                self.move_on()
                continue
            if status == 409:
                # A newer observation of this session replaced this one: it was not computed.
                return None
            if status != 200:
                raise RuntimeError(f"{status}: {reply.get('error')}")
            if self.step == 0 and reply["session"]["step"] != 1:
                # A first step that met an earlier visit's state: clear it, send again.
                self.reset()
                continue
            self.step = reply["session"]["step"]
            self.token = reply["session_token"]
            return reply


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:20000")
    ap.add_argument("--robot", default="franka-1", help="session id")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--request", help="a /predict body with [t-15, t] frames")
    args = ap.parse_args()
    if args.request:
        with open(args.request) as f:
            observation = json.load(f)
    else:
        with urllib.request.urlopen(args.url + "/demo", timeout=60) as r:
            observation = json.load(r)["request"]
    robot = SessionRobot(args.url, args.robot)
    robot.reset()
    for _ in range(args.steps):
        r = robot.act(observation)
        if r is None:
            print("superseded")
            continue
        print(f"step {r['session']['step']}: rtc {r.get('rtc_source', '-'):7s} "
              f"queue {r['queue_ms']:.1f} ms, age {r['observation_age_ms']:.0f} ms, "
              f"joint_position[0] {[round(x, 4) for x in r['actions']['joint_position'][0]]}")
    robot.reset()


if __name__ == "__main__":
    main()
