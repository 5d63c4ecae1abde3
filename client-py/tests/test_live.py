"""Against a live sluiced (CPU backend) serving the ONNX model "typed":
outputs compared with onnxruntime's, blocking, low-level and asyncio
requests, and the refusals of this package, the C library and the daemon."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from conftest import MODEL, assert_close

import sluice


def random_inputs(batch: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "image": rng.standard_normal((batch, 3, 8, 8)).astype(np.float32),
        "offset": rng.standard_normal((batch, 10)).astype(np.float32),
    }


def test_model_metadata(client):
    m = client.model(MODEL)
    assert m.max_batch == 4
    assert [(t.name, t.dtype, t.shape) for t in m.inputs] == [
        ("image", np.dtype(np.float32), (None, 3, 8, 8)),
        ("offset", np.dtype(np.float32), (None, 10)),
    ]
    assert [(t.name, t.shape) for t in m.outputs] == [("logits", (None, 10)), ("probs", (None, 10))]
    assert "max_batch 4" in repr(m) and "image: f32[N,3,8,8]" in repr(m)


def test_infer_matches_onnxruntime(client, served):
    out = client.model(MODEL).infer(served.inputs)
    assert sorted(out) == ["logits", "probs"]
    for name, want in served.expected.items():
        assert_close(out[name], want)


@pytest.mark.parametrize("batch", [1, 3, 4])
def test_infer_at_every_batch(client, oracle, batch):
    x = random_inputs(batch, seed=batch)
    out = client.model(MODEL).infer(x, priority="be")
    for name, want in oracle(x).items():
        assert_close(out[name], want)


def test_many_requests_reuse_the_arena(client, oracle):
    m = client.model(MODEL)
    for i in range(50):
        x = random_inputs(1 + i % 4, seed=100 + i)
        out = m.infer(x, deadline_ms=60_000)
        assert_close(out["probs"], oracle(x)["probs"])
    assert client.in_flight == 0
    assert client._arena.in_use() == 0


def test_submit_then_poll_and_wait(client, oracle):
    m = client.model(MODEL)
    xs = [random_inputs(2, seed=200 + i) for i in range(4)]
    reqs = [m.submit(x) for x in xs]
    assert client.in_flight == 4
    got = [None] * 4
    got[3] = reqs[3].wait(timeout=30)
    while got[0] is None:
        got[0] = reqs[0].poll()
    got[1], got[2] = reqs[1].wait(), reqs[2].wait()
    for x, out in zip(xs, got):
        assert_close(out["logits"], oracle(x)["logits"])
    with pytest.raises(sluice.SluiceError, match="already redeemed"):
        reqs[0].wait()
    assert client.in_flight == 0


def test_dropped_request_is_reaped(client):
    m = client.model(MODEL)
    m.submit(random_inputs(4, seed=1))  # dropped unredeemed: its arena block is not lost
    assert len(client._abandoned) == 1
    for _ in range(100):
        m.infer(random_inputs(1, seed=2))  # each submit first redeems what was dropped
        if not client._abandoned:
            break
    assert client._abandoned == []
    assert client._arena.in_use() == 0 and client.in_flight == 0


def test_async_concurrent_requests(client, oracle):
    m = client.model(MODEL)
    xs = [random_inputs(1 + i % 4, seed=300 + i) for i in range(24)]
    ticks = 0
    stop = False

    async def ticker():
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    async def main():
        nonlocal stop
        t = asyncio.ensure_future(ticker())
        outs = await asyncio.gather(
            *(m.infer_async(x, priority="rt" if i % 2 else "be") for i, x in enumerate(xs))
        )
        stop = True
        await t
        return outs

    outs = asyncio.run(main())
    for x, out in zip(xs, outs):
        want = oracle(x)
        assert_close(out["logits"], want["logits"])
        assert_close(out["probs"], want["probs"])
    assert ticks > 1  # the loop kept running while the requests were in flight
    assert client.in_flight == 0


def test_async_more_requests_than_the_rings_hold(client, oracle):
    # Beyond the completion ring's capacity the worker holds requests back
    # until one completes (sluice.Busy is never seen by the caller).
    m = client.model(MODEL)
    x = random_inputs(4, seed=9)
    want = oracle(x)
    peak = 0

    async def main():
        nonlocal peak
        tasks = [asyncio.ensure_future(m.infer_async(x)) for _ in range(600)]
        while not all(t.done() for t in tasks):
            peak = max(peak, client.in_flight)
            await asyncio.sleep(0.001)
        return [t.result() for t in tasks]

    outs = asyncio.run(main())
    assert len(outs) == 600
    for out in outs:
        assert_close(out["probs"], want["probs"])
    assert peak > 1  # requests were in flight together
    assert client.in_flight == 0 and client._arena.in_use() == 0


def test_async_cancelled_request_is_still_redeemed(client, oracle):
    m = client.model(MODEL)
    x = random_inputs(2, seed=11)

    async def main():
        t = asyncio.ensure_future(m.infer_async(x))
        await asyncio.sleep(0)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        return await m.infer_async(x)

    out = asyncio.run(main())
    assert_close(out["logits"], oracle(x)["logits"])
    # The cancelled one may complete after the other; the worker redeems it then.
    for _ in range(3000):  # watchdog: 30 s
        if client.in_flight == 0:
            break
        time.sleep(0.01)
    assert client.in_flight == 0 and client._arena.in_use() == 0


def test_async_refusal_raises_in_the_awaiting_coroutine(client):
    m = client.model(MODEL)

    async def main():
        with pytest.raises(sluice.TensorError, match="BAD_BATCH"):
            await m.infer_async(random_inputs(5, seed=0))
        with pytest.raises(sluice.DeadlineMissed):
            await m.infer_async(random_inputs(1, seed=0), deadline_ms=1e-6)
        return await m.infer_async(random_inputs(1, seed=0))

    assert "probs" in asyncio.run(main())


def test_wrong_shape(client, served):
    x = dict(served.inputs, image=np.zeros((2, 3, 9, 9), np.float32))
    with pytest.raises(sluice.TensorError) as e:
        client.model(MODEL).infer(x)
    assert e.value.name == "BAD_SHAPE"
    assert (
        "input 'image' of model 'typed' (f32[N,3,8,8]) takes shape (N, 3, 8, 8) "
        "with N from 1 to 4; given (2, 3, 9, 9)" in str(e.value)
    )


def test_wrong_dtype(client, served):
    x = dict(served.inputs, offset=served.inputs["offset"].astype(np.float64))
    with pytest.raises(sluice.TensorError) as e:
        client.model(MODEL).infer(x)
    assert e.value.name == "BAD_DTYPE"
    assert "input 'offset' of model 'typed' (f32[N,10]) takes float32; given float64" in str(e.value)


def test_batch_too_large(client):
    with pytest.raises(sluice.TensorError) as e:
        client.model(MODEL).infer(random_inputs(5, seed=0))
    assert e.value.name == "BAD_BATCH"
    assert "batch 5 (input 'image') is over max_batch 4 of model 'typed'" in str(e.value)


def test_unknown_model(client):
    with pytest.raises(sluice.UnknownModel) as e:
        client.model("no-such-model")
    assert e.value.name == "ENOMODEL"
    assert "no-such-model" in e.value.detail


def test_c_library_refusal_carries_its_message(client):
    # Past this package's checks: the C library's own (sluice_submit_typed).
    m = client.model(MODEL)
    x = random_inputs(5, seed=0)
    with pytest.raises(sluice.TensorError) as e, client._lock:
        client._submit_locked(m, 5, [x["image"], x["offset"]], 0, 0)
    assert e.value.name == "EBADTENSOR" and e.value.code == -13
    assert e.value.detail.startswith("sluice_submit_typed: ")
    assert "batch 5" in e.value.detail and "typed" in e.value.detail
    assert client._arena.in_use() == 0


def test_daemon_refusal_carries_the_status_and_detail(client):
    # An untyped request to a model of two inputs: the daemon refuses it.
    m = client.model(MODEL)
    req = m.submit_raw(np.zeros(2 * 3 * 8 * 8 * 4, np.uint8))
    with pytest.raises(sluice.TensorError) as e:
        req.wait(timeout=30)
    assert e.value.name == "BAD_TENSOR_TABLE" and e.value.status == 12
    assert 'model "typed" has 2 inputs and 2 outputs' in e.value.detail
    assert e.value.detail.startswith("sluice_wait_timeout: request 0x")
    assert client._arena.in_use() == 0


def test_deadline_missed(client):
    with pytest.raises(sluice.DeadlineMissed) as e:
        client.model(MODEL).infer(random_inputs(1, seed=0), deadline_ms=1e-6)
    assert e.value.name == "DEADLINE_MISSED" and e.value.status == 8


def test_closed_client(served):
    c = sluice.connect(served.socket)
    m = c.model(MODEL)
    c.close()
    c.close()
    with pytest.raises(sluice.Disconnected, match="closed"):
        m.infer(random_inputs(1, seed=0))


def test_default_socket_from_environment(served, monkeypatch):
    monkeypatch.setenv("SLUICE_SOCKET", served.socket)
    with sluice.connect() as c:
        assert c.model(MODEL).max_batch == 4
