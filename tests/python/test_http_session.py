#!/usr/bin/env python3
"""examples/http_session_client.py against the server: a session's first step is the whole
observation without RTC, the next ones send the frame at t only and join onto the session's
last chunk; two robots doing the same get the same answers; a session reset behind the
client's back (by the holder of its token: without it the reset is refused, the session being
locked to the token the client echoed) is reported by the 409 its echoed `session_token` gets,
and started over, giving the first answer again; so is another replica's session of the same name; the example runs end
to end. Prints `N passed, M failed`.
"""
import subprocess
import sys

import numpy as np

import test_protocols as tp

sys.path.insert(0, str(tp.ROOT / "examples"))
import http_session_client as hsc  # noqa: E402


def groups(reply):
    return {g: np.asarray(reply["actions"][g], np.float32) for g in tp.GROUPS}


def checks(server):
    body = tp.case_request()
    url = f"http://{server.http}"
    a = hsc.SessionRobot(url, "py-arm-a")
    b = hsc.SessionRobot(url, "py-arm-b")
    answers = {}

    def steps_and_sources():
        a.reset()
        answers["a"] = [a.act(body) for _ in range(3)]
        got = [(r["session"]["step"], r.get("rtc_source")) for r in answers["a"]]
        assert got == [(1, None), (2, "session"), (3, "session")], got
        # The first step is the plain answer of the whole observation.
        tp.assert_equal(groups(answers["a"][0]), tp.http_predict(server, body), "step 1")
        d = max(float(np.max(np.abs(groups(answers["a"][1])[g] - groups(answers["a"][0])[g])))
                for g in tp.GROUPS)
        assert d > 1e-3, f"step 2 is step 1 again (max|Δ| {d:.2e})"

    def another_robot_gets_the_same():
        b.reset()
        for k, want in enumerate(answers["a"]):
            tp.assert_equal(groups(b.act(body)), groups(want), f"robot b step {k + 1}")

    def acts_started_over(what):
        # Robot a's next step is told (409) its session is gone, starts it over, and gets the
        # first answer again.
        resets = a.resets
        r = a.act(body)
        assert a.resets == resets + 1 and a.step == 1, (a.resets, a.step)
        assert r["session"]["step"] == 1 and "rtc_source" not in r, r
        tp.assert_equal(groups(r), groups(answers["a"][0]), what)

    def a_lost_session_is_started_over():
        # Robot a echoed its token, so its session is locked to it: another client that
        # knows only the id cannot reset it.
        status, reply, _ = hsc.post(url, "/reset", {"session_id": "py-arm-a"}, "py-arm-a")
        assert status == 409 and reply["error"].startswith("session locked"), reply
        # The server forgets robot a (as a restarted or another replica would).
        body_reset = {"session_id": "py-arm-a", "session_token": a.token}
        status, reply, _ = hsc.post(url, "/reset", body_reset, "py-arm-a")
        assert status == 200 and reply["reset"] is True, reply
        acts_started_over("after the reset")

    def another_replicas_state_is_started_over():
        # As if robot a's last answer had come from a replica that has since gone: this
        # server holds a session of that name, but another one (its token differs).
        assert a.step == 1, a.step
        a.token = "0123456789abcdef0123456789abcdef"
        acts_started_over("after the replica change")

    def the_example_runs():
        out = subprocess.run([sys.executable, str(tp.ROOT / "examples/http_session_client.py"),
                              "--url", url, "--steps", "3", "--robot", "py-example"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert [l.split(":")[0] for l in lines] == ["step 1", "step 2", "step 3"], lines
        assert "rtc session" in lines[2], lines

    tp.check("steps 1..3: whole observation, then t only with RTC from the session",
             steps_and_sources)
    tp.check("a second robot doing the same gets the same answers (bit-equal)",
             another_robot_gets_the_same)
    tp.check("a session lost on the server is told by a 409 (session_token) and started over",
             a_lost_session_is_started_over)
    tp.check("another replica's session of the same name is told by a 409 and started over",
             another_replicas_state_is_started_over)
    tp.check("examples/http_session_client.py runs end to end", the_example_runs)


if __name__ == "__main__":
    sys.exit(tp.run(checks))
