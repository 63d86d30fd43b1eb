#!/usr/bin/env python3
"""The ZMQ door against both of Isaac-GR00T's serializers, built on the published packages.

N1.7's `MsgSerializer` encodes arrays with `msgpack-numpy` 0.4.8 on `msgpack` 1.1 ({b"nd": True,
...}); older clients send `{"__ndarray_class__": True, "as_npy": ...}`. Checks that both get
bit-identical actions for case0 (and HTTP's), that each reply uses the request's form byte for
byte as that library writes it, that `get_modality_config` decodes for both, and that object,
structured and malformed payloads get `{"error": ...}` naming the key (a pickle is never
loaded) while the server keeps serving. Prints `N passed, M failed`.
"""
import os
import pickle
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import msgpack
import msgpack_numpy as mnp
import numpy as np

import test_protocols as tp

zc = tp.zc
GROUPS = tp.GROUPS


@dataclass
class ModalityConfig:
    """The fields of Isaac-GR00T's `gr00t.data.types.ModalityConfig`, which clients rebuild."""

    delta_indices: list
    modality_keys: list
    sin_cos_embedding_keys: list | None = None
    mean_std_embedding_keys: list | None = None
    action_configs: list | None = None


def exchange(client, request):
    """Sends a request dict packed with the client's encoder; returns the raw reply bytes."""
    client.socket.send(msgpack.packb(request, default=client.encode))
    return client.socket.recv()


def same_arrays(a, b, what):
    for g in GROUPS:
        x, y = a[g], b[g]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            raise AssertionError(f"{what} {g}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}, "
                                 f"max|Δ| {np.max(np.abs(x - y)) if x.shape == y.shape else '-'}")


def nd_payload(kind, ty, data, nd=True, shape=(1,)):
    """A hand-made msgpack-numpy map, as a forged or foreign client would send it."""
    return {b"nd": nd, b"type": ty, b"kind": kind, b"shape": list(shape), b"data": data}


class MkdirOnLoad:
    """Unpickling this creates a directory: the proof that nobody unpickled it."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def checks(server):
    request = tp.case_request()
    host, port = server.zmq.rsplit(":", 1)
    new = zc.PolicyClient(host, port, timeout_ms=60_000, serializer="msgpack-numpy")
    old = zc.PolicyClient(host, port, timeout_ms=60_000, serializer="npy")
    state = {}
    http = tp.http_predict(server, request)
    options = lambda: {"noise": zc.case0_noise()}  # noqa: E731

    def both_forms_bit_identical():
        a = new.get_action(zc.case0_observation(), options())
        b = old.get_action(zc.case0_observation(), options())
        assert list(a) == list(GROUPS), list(a)
        same_arrays(a, b, "msgpack-numpy vs .npy client")
        same_arrays({g: a[g][0] for g in GROUPS}, http, "msgpack-numpy client vs HTTP")
        state["actions"] = a

    def reply_mirrors_the_request():
        data = {"observation": zc.case0_observation(), "options": options()}
        raw = exchange(new, {"endpoint": "get_action", "data": data})
        actions, info = msgpack.unpackb(raw)
        # info: the wait and the observation's age in ms (no session named).
        assert sorted(info) == ["observation_age_ms", "queue_ms"], info
        assert all(isinstance(v, float) and v >= 0 for v in info.values()), info
        for g, v in actions.items():
            assert v[b"nd"] is True and v[b"kind"] == b"" and v[b"type"] == "<f4", (g, v.keys())
        # Byte for byte what msgpack-numpy writes for the arrays it decodes from it.
        assert msgpack.packb(msgpack.unpackb(raw, object_hook=mnp.decode),
                             default=mnp.encode) == raw, "not msgpack-numpy's bytes"
        raw = exchange(old, {"endpoint": "get_action", "data": data})
        actions, _ = msgpack.unpackb(raw)
        assert all("__ndarray_class__" in v for v in actions.values()), actions.keys()
        assert msgpack.packb(msgpack.unpackb(raw, object_hook=zc.decode),
                             default=zc.encode) == raw, "not np.save's bytes"

    def numpy_scalar_seed():
        # case0's noise is seed 0's; a numpy int travels as {nd: False, ...}.
        a = new.get_action(zc.case0_observation(), {"seed": np.int64(0)})
        same_arrays(a, state["actions"], "seed np.int64(0) vs case0 noise")

    def modality_config_for_old_and_new():
        reply = msgpack.unpackb(exchange(new, {"endpoint": "get_modality_config"}))
        for name in ("video", "state", "action", "language"):
            entry = reply[name]
            # N1.7 looks for __ModalityConfig__, older clients for __ModalityConfig_class__.
            assert entry.get("__ModalityConfig__") is True, (name, entry.keys())
            assert entry.get("__ModalityConfig_class__") is True, (name, entry.keys())
            ModalityConfig(**entry["as_json"])
        assert ModalityConfig(**reply["video"]["as_json"]).delta_indices == [-15, 0]
        assert len(ModalityConfig(**reply["action"]["as_json"]).delta_indices) == 40

    tp.check("N1.7 msgpack-numpy client == .npy client == HTTP (bit-equal)",
             both_forms_bit_identical)
    tp.check("reply uses the request's form, byte for byte", reply_mirrors_the_request)
    tp.check("numpy scalar seed (nd: False) accepted", numpy_scalar_seed)
    tp.check("get_modality_config decodes with both markers", modality_config_for_old_and_new)

    marker = Path(tempfile.mkdtemp()) / "unpickled"
    obj_type = [["", "|O"]]

    def refused(edit, want, where="observation"):
        def run():
            obs = zc.case0_observation()
            opts = None
            if where == "observation":
                edit(obs)
            else:
                opts = edit()
            e = tp.zmq_error(new, {"observation": obs, "options": opts})
            for w in want:
                assert w in e, f"{e!r} lacks {w!r}"
            assert not marker.exists(), "the server unpickled a payload"
        return run

    def object_wrist(obs):
        obs["video"]["wrist_image_left"] = nd_payload(
            b"O", obj_type, pickle.dumps(MkdirOnLoad(str(marker))))

    def object_unused_key(obs):
        obs["extra"] = nd_payload(b"O", obj_type, pickle.dumps(MkdirOnLoad(str(marker))))

    def object_truthy_int(obs):
        obs["state"]["eef_9d"] = nd_payload(b"O", obj_type, pickle.dumps(0), nd=1)

    def structured(obs):
        obs["state"]["eef_9d"] = mnp.encode(np.zeros((1, 1, 9), dtype=[("a", "<f4")]))

    def unicode(obs):
        obs["state"]["eef_9d"] = mnp.encode(np.array([["hi"]]))

    def short_data(obs):
        obs["state"]["joint_position"] = nd_payload(b"", "<f4", b"\0" * 27, shape=(1, 1, 7))

    def no_npy_bytes(obs):
        obs["state"]["joint_position"] = {"__ndarray_class__": True}

    def f64_state(obs):
        obs["state"]["gripper_position"] = obs["state"]["gripper_position"].astype(np.float64)

    # (check, how the observation is broken, what the error must name)
    for name, edit, want in [
        ("object array (pickle) in a camera -> error, never unpickled", object_wrist,
         ["data.observation.video.wrist_image_left", "pickle"]),
        ("object array under an unused key -> error", object_unused_key,
         ["data.observation.extra", "object arrays"]),
        ("object payload with nd: 1 -> error", object_truthy_int,
         ["state.eef_9d", "object arrays"]),
        ("structured array (kind V) -> error", structured, ["state.eef_9d", "structured"]),
        ("unicode array -> error naming the key", unicode,
         ["State key 'eef_9d'", "unsupported dtype"]),
        ("short data -> error naming the key", short_data,
         ["State key 'joint_position'", "needs 28 bytes"]),
        (".npy marker without bytes -> error", no_npy_bytes,
         ["State key 'joint_position'", "as_npy"]),
        ("float64 state (new form) -> upstream's message", f64_state,
         ["State key 'gripper_position'", "np.float32. Got float64"]),
    ]:
        tp.check(name, refused(edit, want))
    tp.check("object array as options.noise -> error",
             refused(lambda: {"noise": nd_payload(b"O", obj_type, b"")},
                     ["data.options.noise", "pickle"], where="options"))

    def still_serving():
        assert server.alive(), "server exited"
        same_arrays(new.get_action(zc.case0_observation(), options()), state["actions"],
                    "msgpack-numpy client after errors")
        same_arrays(old.get_action(zc.case0_observation(), options()), state["actions"],
                    ".npy client after errors")

    tp.check("both clients still served after errors", still_serving)
    new.close()
    old.close()


if __name__ == "__main__":
    sys.exit(tp.run(checks))
