#!/usr/bin/env python3
"""The websocket door's dialects, driven by clients built on the published `openpi-client`.

- RoboArena's DROID evaluation client (openpi-client + `endpoint`, `session_id`): its
  `PolicyServerConfig` metadata, per-session frame history (a connection's own without a
  token), `reset`, int32 session ids, the same actions as HTTP and as a plain openpi client,
  errors as a text frame then close 1011.
- vLLM-Omni's GR00T dialect on `/v1/realtime/robot/openpi`: its metadata, the nested GR00T
  observation giving HTTP's actions bit for bit, `reset`, errors as `{"type": "error"}` with the
  connection kept open.
- The plain openpi client (no `endpoint`) unchanged.

Prints `N passed, M failed`; exits non-zero on any failure.
"""
import asyncio
import sys

import numpy as np
from openpi_client import msgpack_numpy as opm
from openpi_client import websocket_client_policy

import test_protocols as tp
import roboarena_client as rc  # noqa: E402  (examples/, on the path through test_protocols)
import vllm_omni_client as vc  # noqa: E402

GROUPS = tp.GROUPS
ACTION_KEYS = ["eef_9d", "gripper_position", "joint_position"]


def same(a, b, what):
    """Bit-identical float32 groups (shapes included)."""
    for g in GROUPS:
        x, y = np.asarray(a[g]), np.asarray(b[g])
        if x.dtype != np.float32 or x.shape != y.shape or x.tobytes() != y.astype(np.float32).tobytes():
            raise AssertionError(f"{what} {g}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}")


def chunk(groups):
    """RoboArena's `actions`: joints then gripper per step."""
    return np.concatenate([groups["joint_position"], groups["gripper_position"]], 1)


def checks(server):
    request = tp.case_request()
    host, port = server.ws.rsplit(":", 1)
    port = int(port)
    uri = f"ws://{server.ws}"
    seed42 = {k: v for k, v in request.items() if k != "noise"}
    http42 = tp.http_predict(server, seed42)  # no seed: the default 42, as these clients get
    http0 = tp.http_predict(server, request)  # case0's noise = seed 0
    state = {}

    def roboarena_metadata():
        meta = rc.RoboArenaClient(host, port).get_server_metadata()
        assert tuple(meta["image_resolution"]) == (180, 320), meta
        want = {"needs_wrist_camera": True, "n_external_cameras": 1,
                "needs_stereo_camera": False, "needs_session_id": True,
                "action_space": "joint_position", "action_horizon": 40}
        got = {k: meta.get(k) for k in want}
        assert got == want, got

    def roboarena_session_history():
        # t-15 then t0 in one session: the session's history pairs them. Without
        # --api-token a session is its connection's own: another client's "ep-A" is apart.
        c = rc.RoboArenaClient(host, port)
        c.infer(rc.case0_observation("t-15", "ep-A"))
        other = rc.RoboArenaClient(host, port).infer(rc.case0_observation("t0", "ep-A"))
        reply = c.infer(rc.case0_observation("t0", "ep-A"))
        same(reply, http42, "RoboArena [t-15, t0] vs HTTP")
        assert not np.array_equal(other["actions"], reply["actions"]), \
            "another connection's ep-A used this one's frames"
        acts = reply["actions"]
        assert acts.dtype == np.float32 and acts.shape == (40, 8), (acts.dtype, acts.shape)
        assert np.array_equal(acts, chunk(http42)), "actions != [joints | gripper]"

    def roboarena_sessions_and_reset():
        c = rc.RoboArenaClient(host, port)
        c.infer(rc.case0_observation("t-15", "ep-A"))
        first_b = c.infer(rc.case0_observation("t0", "ep-B"))  # paired with itself
        with_ab = c.infer(rc.case0_observation("t0", "ep-A"))  # ep-A's oldest is t-15
        same(with_ab, http42, "ep-A after ep-B")
        assert not np.array_equal(first_b["actions"], with_ab["actions"]), "B used A's frames"
        assert c.reset({"session_id": "ep-A"}) == "reset successful"
        same(c.infer(rc.case0_observation("t0", "ep-A")), first_b, "ep-A after reset")
        same(c.infer(rc.case0_observation("t0", "ep-B")), first_b, "ep-B untouched by reset")

    def roboarena_int32_session():
        c = rc.RoboArenaClient(host, port)
        c.infer(rc.case0_observation("t-15", np.array([7], np.int32)))
        same(c.infer(rc.case0_observation("t0", np.array([7], np.int32))), http42,
             "int32 session_id")

    def roboarena_cartesian_like_plain_openpi():
        cart = [0.4, 0.1, 0.3, 3.0, -0.2, 0.5]
        c = rc.RoboArenaClient(host, port)
        c.infer(rc.case0_observation("t-15", "ep-cart", cart))
        arena = c.infer(rc.case0_observation("t0", "ep-cart", cart))
        # The plain openpi client sends both frames itself and no endpoint.
        obs = rc.case0_observation("t0", None, cart)
        for cam in ("exterior_image_1_left", "wrist_image_left"):
            past = rc.case0_observation("t-15")[f"observation/{cam}"]
            obs[f"observation/{cam}"] = np.stack([past, obs[f"observation/{cam}"]])
        plain = websocket_client_policy.WebsocketClientPolicy(host, port).infer(obs)
        same(arena, plain, "RoboArena vs plain openpi (cartesian_position)")
        assert np.array_equal(arena["actions"], plain["actions"])

    def plain_openpi_unchanged():
        reply = websocket_client_policy.WebsocketClientPolicy(host, port).infer(
            tp.wsc.case0_observation())
        same(reply, http0, "plain openpi client vs HTTP")
        assert "server_timing" in reply and reply["actions"].shape == (40, 8)

    tp.check("RoboArena metadata: PolicyServerConfig fields", roboarena_metadata)
    tp.check("RoboArena session history == HTTP (bit-equal), apart per connection",
             roboarena_session_history)
    tp.check("RoboArena sessions are separate; reset clears one", roboarena_sessions_and_reset)
    tp.check("RoboArena int32 session_id (1,)", roboarena_int32_session)
    tp.check("RoboArena cartesian == plain openpi client (bit-equal)",
             roboarena_cartesian_like_plain_openpi)
    tp.check("plain openpi client (published package) == HTTP seed 0", plain_openpi_unchanged)

    def arena_bad(changes, want):
        def run():
            obs = rc.case0_observation("t0", "ep-bad")
            obs["endpoint"] = "infer"
            for k, v in changes.items():
                if v is None:
                    obs.pop(k, None)
                else:
                    obs[k] = v
            _, reply, code = asyncio.run(tp.ws_exchange(uri, opm.packb(obs)))
            assert isinstance(reply, str), f"expected a text frame, got {type(reply)}"
            assert want in reply, f"{reply!r} lacks {want!r}"
            assert code == 1011, f"close code {code}"
        return run

    tp.check("RoboArena unknown endpoint -> text + 1011",
             arena_bad({"endpoint": "teleport"}, "endpoint must be 'infer' or 'reset'"))
    tp.check("RoboArena no eef_9d / cartesian_position -> text + 1011",
             arena_bad({"observation/eef_9d": None}, "observation/cartesian_position"))
    tp.check("RoboArena float session_id -> text + 1011",
             arena_bad({"session_id": np.array([1.5])}, "session_id must be"))
    tp.check("RoboArena 224x224 frame -> text + 1011",
             arena_bad({"observation/wrist_image_left": np.zeros((224, 224, 3), np.uint8)},
                       "16:9"))

    def vllm_metadata():
        c = vc.VllmOmniClient(host, port)
        m = c.metadata
        assert m["action_horizon"] == 40 and m["action_keys"] == ACTION_KEYS, m
        assert m["embodiment_tag"] == "OXE_DROID_RELATIVE_EEF_RELATIVE_JOINT", m
        assert m["needs_session_id"] is True and list(m["image_resolution"]) == [180, 320], m
        c.close()

    def vllm_infer():
        c = vc.VllmOmniClient(host, port)
        reply = c.infer(tp.zc.case0_observation(), "gr00t-e2e", seed=0)
        assert sorted(reply) == ACTION_KEYS, sorted(reply)
        dims = {"eef_9d": 9, "gripper_position": 1, "joint_position": 7}
        for k, d in dims.items():
            assert reply[k].dtype == np.float32 and reply[k].shape == (1, 40, d), k
        same({g: reply[g][0] for g in GROUPS}, http0, "vLLM-Omni seed 0 vs HTTP")
        state["vllm"] = reply
        unseeded = c.infer(tp.zc.case0_observation(), "gr00t-e2e")
        same({g: unseeded[g][0] for g in GROUPS}, http42, "vLLM-Omni no seed vs HTTP")
        assert c.reset("gr00t-e2e") == {"status": "reset successful"}
        c.close()

    tp.check("vLLM-Omni metadata", vllm_metadata)
    tp.check("vLLM-Omni infer == HTTP (bit-equal), reset", vllm_infer)

    def vllm_errors_keep_the_connection():
        c = vc.VllmOmniClient(host, port)

        def error(request=None, raw=None, text=None):
            if text is not None:
                c.ws.send(text)
                reply = opm.unpackb(c.ws.recv(timeout=60))
            elif raw is not None:
                c.ws.send(raw)
                reply = opm.unpackb(c.ws.recv(timeout=60))
            else:
                reply = c.call(request)
            assert isinstance(reply, dict) and reply.get("type") == "error", reply
            return reply["message"]

        def obs(edit):
            o = tp.zc.case0_observation()
            edit(o)
            return {**o, "endpoint": "infer", "session_id": "bad"}

        def f64(o):
            o["state"]["eef_9d"] = o["state"]["eef_9d"].astype(np.float64)

        def no_wrist(o):
            del o["video"]["wrist_image_left"]

        def square(o):
            o["video"]["wrist_image_left"] = np.zeros((1, 2, 224, 224, 3), np.uint8)

        cases = [
            (dict(request=obs(f64)), "State key 'eef_9d' must be a numpy array of type "
                                     "np.float32. Got float64"),
            (dict(request=obs(no_wrist)), "Video key 'wrist_image_left' must be in"),
            (dict(request=obs(square)), "16:9"),
            (dict(request={"endpoint": "teleport"}), "endpoint must be 'infer' or 'reset'"),
            (dict(request={**tp.zc.case0_observation(), "seed": -1}), "seed must be"),
            (dict(raw=b"\xc1not msgpack"), "msgpack"),
            (dict(text="hello"), "binary"),
        ]
        for kwargs, want in cases:
            m = error(**kwargs)
            assert want in m, f"{m!r} lacks {want!r}"
        again = c.infer(tp.zc.case0_observation(), "gr00t-e2e", seed=0)
        same({g: again[g][0] for g in GROUPS}, http0, "vLLM-Omni after errors")
        c.close()

    tp.check("vLLM-Omni errors are {'type': 'error'}, connection kept",
             vllm_errors_keep_the_connection)

    def still_serving():
        assert server.alive(), "server exited"
        reply = rc.RoboArenaClient(host, port).infer(rc.case0_observation("t0"))
        assert reply["actions"].shape == (40, 8)
        same(tp.http_predict(server, request), http0, "HTTP again")

    tp.check("every door still serves after errors", still_serving)


if __name__ == "__main__":
    sys.exit(tp.run(checks))
