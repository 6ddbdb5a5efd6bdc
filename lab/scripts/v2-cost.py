#!/usr/bin/env python3
"""Host CPU per answer of the Open Inference Protocol's HTTP path, and of the same over gRPC
(`--grpc`: the stubs tritonclient ships, one channel), against the JSON gateway for the same
request (issue goal, for LeNet: v2 HTTP <= 1.25x the gateway). `--service lenet`
(whose CPU forward pass is most of it) or `echo` (the HTTP paths alone). The server
(`cohort serve --service NAME:cpu`, one io thread, one worker) is pinned to one core, this
client to another; each path is driven closed loop over one keep-alive connection with the same
images, every answer checked against the gateway's, and the server's CPU time (utime +
stime from /proc) divided by the answers. Writes a JSON with the machine, commit and
command.

    lab/scripts/v2-cost.py --bin target/release/cohort --out lab/results/v2-cost-2core.json
"""

import argparse
import http.client
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/cohort")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--service", choices=["lenet", "echo"], default="lenet")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--grpc", action="store_true", help="also the gRPC path (needs tritonclient[grpc])")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.sched_setaffinity(0, {a.client_cpu})
    grpc_listen = ["--grpc", "127.0.0.1:0"] if a.grpc else []
    server = subprocess.Popen(
        ["taskset", "-c", str(a.server_cpu), a.bin, "serve", "--http", "127.0.0.1:0", *grpc_listen,
         "--service", f"{a.service}:cpu", "--workers", "1", "--io-threads", "1", "--log-level", "warn"],
        stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    port = int(line.split("http=")[1].split()[0].rsplit(":", 1)[1])
    grpc_port = int(line.split("grpc=")[1].split()[0].rsplit(":", 1)[1]) if a.grpc else None
    images = np.random.default_rng(1).integers(0, 256, size=(64, 784), dtype=np.uint8)

    def gateway(c: http.client.HTTPConnection, img: np.ndarray) -> int:
        c.request("POST", "/v1/lenet", json.dumps({"image": img.tolist()}))
        return json.loads(c.getresponse().read())["digit"]

    def v2_json(c: http.client.HTTPConnection, img: np.ndarray) -> int:
        body = {"inputs": [{"name": "image", "datatype": "UINT8", "shape": [1, 784], "data": img.tolist()}],
                "outputs": [{"name": "class"}]}
        c.request("POST", "/v2/models/lenet/infer", json.dumps(body))
        return json.loads(c.getresponse().read())["outputs"][0]["data"][0]

    def v2_binary(c: http.client.HTTPConnection, img: np.ndarray) -> int:
        head = json.dumps({"inputs": [{"name": "image", "datatype": "UINT8", "shape": [1, 784],
                                       "parameters": {"binary_data_size": 784}}],
                           "outputs": [{"name": "class", "parameters": {"binary_data": True}}]}).encode()
        c.request("POST", "/v2/models/lenet/infer", head + img.tobytes(),
                  {"Inference-Header-Content-Length": str(len(head))})
        r = c.getresponse()
        n = int(r.getheader("Inference-Header-Content-Length"))
        return int(np.frombuffer(r.read()[n:], dtype="<i8")[0])

    def echo_gateway(c: http.client.HTTPConnection, img: np.ndarray) -> bytes:
        c.request("POST", "/v1/echo", json.dumps({"data": img[:64].tobytes().hex()}))
        return json.loads(c.getresponse().read())["data"]

    def echo_v2_json(c: http.client.HTTPConnection, img: np.ndarray) -> bytes:
        body = {"inputs": [{"name": "data", "datatype": "BYTES", "shape": [1], "data": [img[:64].tobytes().hex()]}]}
        c.request("POST", "/v2/models/echo/infer", json.dumps(body))
        return json.loads(c.getresponse().read())["outputs"][0]["data"][0]

    def echo_v2_binary(c: http.client.HTTPConnection, img: np.ndarray) -> bytes:
        data = img[:64].tobytes().hex().encode()
        blob = len(data).to_bytes(4, "little") + data
        head = json.dumps({"inputs": [{"name": "data", "datatype": "BYTES", "shape": [1],
                                       "parameters": {"binary_data_size": len(blob)}}],
                           "outputs": [{"name": "data", "parameters": {"binary_data": True}}]}).encode()
        c.request("POST", "/v2/models/echo/infer", head + blob, {"Inference-Header-Content-Length": str(len(head))})
        r = c.getresponse()
        n = int(r.getheader("Inference-Header-Content-Length"))
        return r.read()[n + 4:].decode()

    def grpc_infer(stub, model: str, name: str, datatype: str, shape: list, raw: bytes):
        from tritonclient.grpc import service_pb2 as pb
        r = pb.ModelInferRequest(model_name=model, raw_input_contents=[raw])
        r.inputs.add(name=name, datatype=datatype, shape=shape)
        return stub.ModelInfer(r)

    def v2_grpc(stub, img: np.ndarray) -> int:
        r = grpc_infer(stub, "lenet", "image", "UINT8", [1, 784], img.tobytes())
        return int(np.frombuffer(r.raw_output_contents[0], dtype="<i8")[0])

    def echo_v2_grpc(stub, img: np.ndarray) -> bytes:
        data = img[:64].tobytes().hex().encode()
        r = grpc_infer(stub, "echo", "data", "BYTES", [1], len(data).to_bytes(4, "little") + data)
        return r.raw_output_contents[0][4:].decode()

    paths = {"lenet": [("gateway_json", gateway), ("v2_json", v2_json), ("v2_binary", v2_binary)],
             "echo": [("gateway_json", echo_gateway), ("v2_json", echo_v2_json), ("v2_binary", echo_v2_binary)]}
    if a.grpc:
        paths["lenet"].append(("v2_grpc", v2_grpc))
        paths["echo"].append(("v2_grpc", echo_v2_grpc))

    def connect(name: str):
        if name != "v2_grpc":
            return http.client.HTTPConnection("127.0.0.1", port)
        import grpc
        from tritonclient.grpc import service_pb2_grpc
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        stub.close = channel.close
        return stub
    results = {}
    want = None
    for name, call in paths[a.service]:
        c = connect(name)
        for img in images[:50]:  # warm-up
            call(c, img)
        got = [call(c, img) for img in images]
        if want is None:
            want = got
        assert got == want, f"{name} answered other digits"
        t0, c0 = time.perf_counter(), cpu_seconds(server.pid)
        for i in range(a.requests):
            call(c, images[i % len(images)])
        wall, cpu = time.perf_counter() - t0, cpu_seconds(server.pid) - c0
        results[name] = {"answers": a.requests, "server_cpu_s": cpu,
                         "server_cpu_us_per_answer": 1e6 * cpu / a.requests,
                         "answers_per_s": a.requests / wall}
        c.close()
        print(f"{name:13} {results[name]['server_cpu_us_per_answer']:7.1f} us server CPU per answer, "
              f"{results[name]['answers_per_s']:8.0f} answers/s", file=sys.stderr)
    server.terminate()
    server.wait()
    base = results["gateway_json"]["server_cpu_us_per_answer"]
    for r in results.values():
        r["ratio_to_gateway"] = r["server_cpu_us_per_answer"] / base
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    out = {"command": " ".join(sys.argv), "commit": commit,
           "machine": {"cpus": os.cpu_count(), "cpu_model": platform.processor() or platform.machine(),
                       "kernel": platform.release()},
           "server": f"cohort serve --service {a.service}:cpu --workers 1 --io-threads 1, pinned to one core",
           "client": "one keep-alive connection, closed loop, pinned to another core",
           "results": results}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
