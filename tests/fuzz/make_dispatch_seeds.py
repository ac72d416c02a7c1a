#!/usr/bin/env python3
"""Writes the seed corpus of the dispatch fuzzer (tests/fuzz/dispatch_corpus/): short call
sequences in the fuzzer's input format (see dispatch_fuzzer.cc). Python 3 standard library.

  make_dispatch_seeds.py MANIFEST OUTDIR
"""
import os
import re
import struct
import sys

CLIENT_ID = 1 << 44
SERVER_ID = 2 << 44
PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry fill(.param .u64 p, .param .u32 n)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  .reg .pred %p;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x;
  setp.ge.u32 %p, %r2, %r1;
  @%p ret;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r2, 4;
  add.s64 %rd2, %rd2, %rd3;
  st.global.u32 [%rd2], %r2;
  ret;
}
\0"""


def ids(manifest):
    out = {}
    with open(manifest, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^(\d+) (\w+) ", line)
            if m:
                out[m.group(2)] = int(m.group(1))
    return out


def call(ids_, name, args=b"", bulk=b"", ctx=True):
    return struct.pack("<IBHI", ids_[name], 1 if ctx else 0, len(args), len(bulk)) + args + bulk


def u32(v): return struct.pack("<I", v)
def u64(v): return struct.pack("<Q", v)
def i32(v): return struct.pack("<i", v)


def main(argv):
    manifest, outdir = argv[1], argv[2]
    c = ids(manifest)
    os.makedirs(outdir, exist_ok=True)
    seeds = {
        "memory": call(c, "cuMemAlloc_v2", u64(4096))
        + call(c, "cuMemGetInfo_v2")
        + call(c, "cuMemsetD8_v2", u64(0x200000000) + b"\x07" + u64(64))
        + call(c, "cuMemcpyHtoD_v2", u64(0x200000000) + u64(16) + u64(16), b"x" * 16)
        + call(c, "cuMemcpyDtoH_v2", u64(0x200000000) + u64(16))
        + call(c, "cuMemFree_v2", u64(0x200000000)),
        "devices": call(c, "cuDeviceGetCount", ctx=False)
        + call(c, "cuDeviceGetName", i32(64) + i32(0), ctx=False)
        + call(c, "cuDeviceGetAttribute", i32(1), ctx=False)
        + call(c, "cuDeviceTotalMem_v2", i32(1), ctx=False),
        "streams": call(c, "cuStreamCreate", u64(CLIENT_ID + 10) + u32(0))
        + call(c, "cuEventCreate", u64(CLIENT_ID + 11) + u32(0))
        + call(c, "cuEventRecord", u64(CLIENT_ID + 11) + u64(CLIENT_ID + 10))
        + call(c, "cuStreamWaitEvent", u64(CLIENT_ID + 10) + u64(CLIENT_ID + 11) + u32(0))
        + call(c, "cuStreamSynchronize", u64(CLIENT_ID + 10))
        + call(c, "cuStreamDestroy_v2", u64(CLIENT_ID + 10)),
        "launch": call(c, "cuModuleLoadData", u64(len(PTX)), PTX)
        + call(c, "cuModuleGetFunction", u64(SERVER_ID) + u32(4) + b"fill")
        + call(c, "cuMemAlloc_v2", u64(1024))
        + call(c, "cuLaunchKernel",
               u64(SERVER_ID + 1) + u64(0) + u32(1) * 3 + u32(32) + u32(1) + u32(1)
               + u32(0) + u32(2) + u32(0) + u32(0)
               + u64(16) + u32(0) + u32(8) + u32(8) + u32(4)
               + u64(0) + u64(16),
               u64(0x200000000) + u32(32) + u32(0))
        + call(c, "cuCtxSynchronize"),
        "pools": call(c, "cuDeviceGetDefaultMemPool", i32(0))
        + call(c, "cuMemAllocAsync", u64(4096) + u64(0))
        + call(c, "cuMemPoolTrimTo", u64(SERVER_ID) + u64(0))
        + call(c, "cuMemPoolDestroy", u64(SERVER_ID)),
        # A pool made to be exported (CUmemPoolProps: pinned, POSIX descriptor handles, device
        # 0), an allocation from it, both exported; imports with a wrong secret and wrong data.
        "pool_ipc": call(c, "cuMemPoolCreate",
                         u64(88) + u32(1) + u32(1) + u32(1) + i32(0) + bytes(72))
        + call(c, "cuMemAllocFromPoolAsync", u64(4096) + u64(SERVER_ID) + u64(0))
        + call(c, "cuMemPoolExportToShareableHandle", u64(SERVER_ID))
        + call(c, "cuMemPoolExportPointer", u64(0x200000000))
        + call(c, "cuMemPoolImportFromShareableHandle", u64(1) + bytes(32))
        + call(c, "cuMemPoolImportPointer", u64(SERVER_ID) + bytes(64))
        + call(c, "cuMemFreeAsync", u64(0x200000000) + u64(0))
        + call(c, "cuMemPoolDestroy", u64(SERVER_ID)),
        "capture": call(c, "cuStreamCreate", u64(CLIENT_ID + 20) + u32(0))
        + call(c, "cuStreamBeginCapture_v2", u64(CLIENT_ID + 20) + u32(0))
        + call(c, "cuMemAlloc_v2", u64(1024))
        + call(c, "cuMemsetD32Async", u64(0x200000000) + u32(5) + u64(16) + u64(CLIENT_ID + 20))
        + call(c, "cuStreamEndCapture", u64(CLIENT_ID + 20))
        + call(c, "cuGraphGetNodes", u64(SERVER_ID) + u32(1))
        + call(c, "cuGraphInstantiateWithFlags", u64(SERVER_ID) + u64(0))
        + call(c, "cuGraphLaunch", u64(SERVER_ID + 1) + u64(CLIENT_ID + 20))
        + call(c, "cuStreamSynchronize", u64(CLIENT_ID + 20)),
    }
    for name, data in seeds.items():
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
