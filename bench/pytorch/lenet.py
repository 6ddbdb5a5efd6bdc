#!/usr/bin/env python3
"""PyTorch's rate for the LeNet Cohort serves, on the same GPU: the baseline of issue 48's
LeNet goal ("PyTorch's rate on the same kind").

The network is the service's (crates/services/lenet/src/model.rs: conv 20x5x5 + tanh, pool,
conv 50x20x5x5 + tanh, pool, dense 800->500 + ReLU, dense 500->10) with its shipped weights
(lenet.safetensors). Each timed step takes a batch of 28x28 8-bit images, scales them by 1/255,
runs the network and takes each image's class (argmax), as a request's answer is. Two feeds:
`resident` (the images already in GPU memory: the kernels alone) and `from-host` (the images
copied in from pinned host memory and the classes copied back each step, as an engine must).
Maths: fp32, and tf32 (PyTorch's allow_tf32, cuDNN's too). Before timing, the classes of a
batch are checked against the same network run in float64 on the CPU.

    python3 bench/pytorch/lenet.py --batches 1024,8192 --out lenet-pytorch.json
"""
import argparse
import json
import platform
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


def forward(w, x):
    x = torch.tanh(F.conv2d(x, w["conv1.weight"], w["conv1.bias"]))
    x = F.max_pool2d(x, 2)
    x = torch.tanh(F.conv2d(x, w["conv2.weight"], w["conv2.bias"]))
    x = F.max_pool2d(x, 2)
    x = F.relu(F.linear(x.flatten(1), w["fc1.weight"], w["fc1.bias"]))
    return F.linear(x, w["fc2.weight"], w["fc2.bias"])


def classes(w, images):
    return forward(w, images.to(torch.float32).div_(255.0).unsqueeze(1)).argmax(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", default="crates/services/lenet/src/lenet.safetensors")
    p.add_argument("--batches", default="1024,8192")
    p.add_argument("--secs", type=float, default=2.0, help="timed seconds per point")
    p.add_argument("--out", default="lenet-pytorch.json")
    a = p.parse_args()
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    cpu_w = {k: v.to(torch.float64) for k, v in load_file(a.weights).items()}
    w = {k: v.to(torch.float32).to(dev) for k, v in cpu_w.items()}
    gen = torch.Generator().manual_seed(7)
    points = []
    with torch.inference_mode():
        for math in ["fp32", "tf32"]:
            torch.backends.cuda.matmul.allow_tf32 = math == "tf32"
            torch.backends.cudnn.allow_tf32 = math == "tf32"
            for batch in [int(b) for b in a.batches.split(",")]:
                host = torch.randint(0, 256, (batch, 28, 28), dtype=torch.uint8, generator=gen).pin_memory()
                want = forward(cpu_w, host[:256].to(torch.float64).div(255.0).unsqueeze(1)).argmax(1)
                got = classes(w, host[:256].to(dev)).cpu()
                agree = (got == want).float().mean().item()
                if agree < 0.99:
                    raise SystemExit(f"{math} batch {batch}: classes agree with float64 on {agree:.3f} only")
                resident = host.to(dev)
                out_host = torch.empty(batch, dtype=torch.int64).pin_memory()
                for feed in ["resident", "from-host"]:
                    def step():
                        if feed == "resident":
                            return classes(w, resident)
                        c = classes(w, host.to(dev, non_blocking=True))
                        out_host.copy_(c, non_blocking=True)
                        return c
                    for _ in range(5):
                        step()
                    torch.cuda.synchronize()
                    steps, t0 = 0, time.perf_counter()
                    while time.perf_counter() - t0 < a.secs:
                        for _ in range(20):
                            step()
                        torch.cuda.synchronize()
                        steps += 20
                    secs = time.perf_counter() - t0
                    rate = steps * batch / secs
                    points.append({"math": math, "batch": batch, "feed": feed, "images_per_s": rate,
                                   "agree_with_f64": agree})
                    print(f"pytorch lenet {math:5} batch {batch:5} {feed:9} {rate / 1e6:6.3f} M images/s")
    doc = {"tool": "bench/pytorch/lenet.py", "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "host": platform.node(), "points": points}
    with open(a.out + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    import os
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
