#!/usr/bin/env python3
"""The CUDA work `gpu-market-agent check --workload` runs, on the GPU CUDA_VISIBLE_DEVICES names.

    gpu-workload.py burn        keeps the GPU busy with dense matrix products until killed;
                                prints `busy` once the first ones have run
    gpu-workload.py hold MIB    allocates MIB MiB (touched, so the memory is really taken) and
                                holds it until killed, printing `allocated`; exits 3 when the
                                allocation is refused (out of memory, or over an MPS client's
                                pinned limit)

Uses PyTorch, else CuPy: whichever the host's Python has.
"""
import sys
import time

REFUSED = 3


def torch_backend():
    import torch

    def burn():
        n = 8192
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        c = a @ b
        torch.cuda.synchronize()
        print("busy", flush=True)
        while True:
            for _ in range(16):
                c = a @ b
            torch.cuda.synchronize()

    def hold(mib):
        try:
            x = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
            x.fill_(1)
            torch.cuda.synchronize()
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            print(" ".join(str(e).split())[:300], file=sys.stderr)
            sys.exit(REFUSED)
        return x

    return burn, hold


def cupy_backend():
    import cupy

    def burn():
        n = 8192
        a = cupy.random.random((n, n), dtype=cupy.float32)
        b = cupy.random.random((n, n), dtype=cupy.float32)
        c = a @ b
        cupy.cuda.Device().synchronize()
        print("busy", flush=True)
        while True:
            for _ in range(16):
                c = a @ b
            cupy.cuda.Device().synchronize()

    def hold(mib):
        try:
            x = cupy.empty(mib << 20, dtype=cupy.uint8)
            x.fill(1)
            cupy.cuda.Device().synchronize()
        except (cupy.cuda.memory.OutOfMemoryError, cupy.cuda.runtime.CUDARuntimeError) as e:
            print(" ".join(str(e).split())[:300], file=sys.stderr)
            sys.exit(REFUSED)
        return x

    return burn, hold


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("burn", "hold"):
        sys.exit(__doc__)
    try:
        burn, hold = torch_backend()
    except ImportError:
        try:
            burn, hold = cupy_backend()
        except ImportError:
            sys.exit("neither PyTorch nor CuPy can be imported: no CUDA workload to run")
    if sys.argv[1] == "burn":
        burn()
    else:
        held = hold(int(sys.argv[2]))
        print("allocated", flush=True)
        while held is not None:
            time.sleep(3600)


if __name__ == "__main__":
    main()
