/* A client for tenant_test's interprocess-memory tests.
 *   ipc_probe export     allocates 1 MiB whose words are 0xabcd1234, prints "handle HEX" (the
 *                        cuIpcMemHandle, 128 hex digits), then answers lines on stdin:
 *                        "check" -> "value W0 W1" (its first two words, hex); "free" -> frees the
 *                        memory, "freed ERR"; "quit" -> exits.
 *                        It also prints "event HEX", the handle of an interprocess event it
 *                        recorded.
 *   ipc_probe open_event HEX  opens the event handle, "open_event ERR"; when that succeeded,
 *                        waits for it in a stream and synchronises, "waited ERR", destroys
 *                        its event, "destroyed ERR".
 *   ipc_probe open HEX   opens the handle and prints "open ERR"; when that succeeded, "read W0"
 *                        (the first word), sets word 0 to 0x5555 with a memset and adds 1 to
 *                        word 1 with a kernel, "wrote ERR", closes the handle, "closed ERR".
 *   ipc_probe shareable_export  creates 2 MiB of physical memory that may be exported as a
 *                        POSIX file descriptor, maps it, fills it with 0x5a, exports it and
 *                        prints "shareable PATH" (/proc/PID/fd/FD, which another process of
 *                        the same user opens to get the descriptor), then answers "release"
 *                        (releases and unmaps it, "released ERR") and "quit".
 *   ipc_probe shareable_import PATH [forge]  opens PATH and imports the memory from it (with
 *                        `forge`: from a copy of its contents with one byte changed), prints
 *                        "import ERR"; when that succeeded, maps it and prints "read B ERR",
 *                        its first byte.
 *   ipc_probe pool_export  makes a pool that may be exported as a POSIX file descriptor,
 *                        allocates 1 MiB from it whose words are 0x600dcafe, and prints
 *                        "plain ERR" (exporting a pool made without handle types), then
 *                        "pool PATH HEX" (the pool's descriptor as /proc/PID/fd/FD and the
 *                        allocation's export data, 128 hex digits); then answers "check"
 *                        ("value W0 W1"), "free" (frees the allocation, "freed ERR"),
 *                        "destroy" (destroys the pool, "destroyed ERR") and "quit".
 *   ipc_probe pool_import PATH HEX [forge|forge_data]  imports the pool from PATH (with
 *                        `forge`: from a copy with one byte of the secret changed), "import
 *                        ERR"; when that succeeded, imports the allocation from HEX (with
 *                        `forge_data`: one byte changed), "pointer ERR"; when that succeeded,
 *                        imports it again, "again ERR", "read W0 ERR", adds 1 to word 1 with a
 *                        kernel, "wrote ERR", tries to allocate from the imported pool, "alloc
 *                        ERR", frees the pointer, "freed ERR", and again, "freed again ERR",
 *                        copies from it, "after free ERR"; at last destroys its pool,
 *                        "destroyed ERR". */
#define _GNU_SOURCE /* memfd_create */
#include <cuda.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/server/probe.h"

static const char kAddOne[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry add1(.param .u64 p)\n"
    "{\n"
    "  .reg .b64 %rd<3>;\n"
    "  .reg .b32 %r<3>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  ld.global.u32 %r1, [%rd2+4];\n"
    "  add.s32 %r2, %r1, 1;\n"
    "  st.global.u32 [%rd2+4], %r2;\n"
    "  ret;\n"
    "}\n";

/* Handles and export data travel between the probes as hex digits, two a byte. */
static void print_hex(const void* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) printf("%02x", ((const unsigned char*)bytes)[i]);
}

/* Prints "LABEL HEX" for a handle that `r` made, or else "LABEL error NAME"; 1 after the
 * error. */
static int print_handle(const char* label, CUresult r, const void* bytes, size_t n) {
  if (r != CUDA_SUCCESS) {
    printf("%s error %s\n", label, name(r));
    return 1;
  }
  printf("%s ", label);
  print_hex(bytes, n);
  printf("\n");
  return 0;
}

static void parse_hex(void* bytes, size_t n, const char* hex) {
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    sscanf(hex + 2 * i, "%2x", &v);
    ((unsigned char*)bytes)[i] = (unsigned char)v;
  }
}

/* Opens an exporter's descriptor by its /proc path; with `forge`, a memfd holding a copy of what
 * it reads there with the last byte (one of the secret's) changed. -1 when that fails. */
static int open_exported(const char* path, int forge) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    printf("cannot open %s\n", path);
    return -1;
  }
  if (forge) {
    unsigned char bytes[256];
    ssize_t n = pread(fd, bytes, sizeof bytes, 0);
    if (n < 1) return -1;
    bytes[n - 1] ^= 1;
    close(fd);
    fd = memfd_create("forged", 0);
    if (fd < 0 || write(fd, bytes, (size_t)n) != n) return -1;
  }
  return fd;
}

/* Adds 1 to the word after d's first with a kernel, and waits for it. */
static CUresult add_one(CUdeviceptr d) {
  CUmodule mod = NULL;
  CUfunction fn = NULL;
  void* args[] = {&d};
  CUresult r = cuModuleLoadData(&mod, kAddOne);
  if (r == CUDA_SUCCESS) r = cuModuleGetFunction(&fn, mod, "add1");
  if (r == CUDA_SUCCESS) r = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
  if (r == CUDA_SUCCESS) r = cuCtxSynchronize();
  return r;
}

/* An exporter's answers to the lines on stdin about its allocation d (from `pool`, when that
 * is not NULL): "check" (d's first two words), "free", and for a pool "destroy"; any other line
 * ends them. */
static void answer(CUdeviceptr d, CUmemoryPool pool) {
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "check", 5) == 0) {
      unsigned w[2] = {0, 0};
      CUresult r = cuMemcpyDtoH(w, d, sizeof w);
      printf("value %08x %08x %s\n", w[0], w[1], name(r));
    } else if (strncmp(line, "free", 4) == 0) {
      CUresult r = pool ? cuMemFreeAsync(d, NULL) : cuMemFree(d);
      if (!r && pool) r = cuCtxSynchronize();
      printf("freed %s\n", name(r));
    } else if (pool && strncmp(line, "destroy", 7) == 0) {
      printf("destroyed %s\n", name(cuMemPoolDestroy(pool)));
    } else {
      break;
    }
    fflush(stdout);
  }
}

int main(int argc, char** argv) {
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  if (argc < 2 || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuCtxCreate(&ctx, NULL, 0, dev) != CUDA_SUCCESS) {
    printf("setup failed\n");
    return 1;
  }
  if (strcmp(argv[1], "export") == 0) {
    const size_t bytes = 1 << 20;
    CUdeviceptr d = 0;
    CUipcMemHandle h;
    if (cuMemAlloc(&d, bytes) != CUDA_SUCCESS ||
        cuMemsetD32(d, 0xabcd1234u, bytes / 4) != CUDA_SUCCESS) {
      printf("alloc failed\n");
      return 1;
    }
    CUresult r = cuIpcGetMemHandle(&h, d);
    if (print_handle("handle", r, h.reserved, sizeof h.reserved)) return 1;
    CUevent ev = NULL;
    CUipcEventHandle eh;
    r = cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) r = cuEventRecord(ev, NULL);
    if (r == CUDA_SUCCESS) r = cuIpcGetEventHandle(&eh, ev);
    if (print_handle("event", r, eh.reserved, sizeof eh.reserved)) return 1;
    fflush(stdout);
    answer(d, NULL);
    return 0;
  }
  if (strcmp(argv[1], "open") == 0 && argc == 3 && strlen(argv[2]) == 2 * sizeof(CUipcMemHandle)) {
    CUipcMemHandle h;
    parse_hex(h.reserved, sizeof h.reserved, argv[2]);
    CUdeviceptr d = 0;
    CUresult r = cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("open %s\n", name(r));
    if (r != CUDA_SUCCESS) return 0;
    unsigned w0 = 0;
    r = cuMemcpyDtoH(&w0, d, sizeof w0);
    printf("read %08x %s\n", w0, name(r));
    r = cuMemsetD32(d, 0x5555u, 1);
    if (r == CUDA_SUCCESS) r = add_one(d);
    printf("wrote %s\n", name(r));
    printf("closed %s\n", name(cuIpcCloseMemHandle(d)));
    /* Closed: the memory is no longer this session's to copy from. */
    r = cuMemcpyDtoH(&w0, d, sizeof w0);
    printf("after close %s\n", name(r));
    return 0;
  }
  if (strcmp(argv[1], "open_event") == 0 && argc == 3 &&
      strlen(argv[2]) == 2 * sizeof(CUipcEventHandle)) {
    CUipcEventHandle h;
    parse_hex(h.reserved, sizeof h.reserved, argv[2]);
    CUevent ev = NULL;
    CUresult r = cuIpcOpenEventHandle(&ev, h);
    printf("open_event %s\n", name(r));
    if (r != CUDA_SUCCESS) return 0;
    r = cuStreamWaitEvent(NULL, ev, 0);
    if (r == CUDA_SUCCESS) r = cuEventSynchronize(ev);
    printf("waited %s\n", name(r));
    printf("destroyed %s\n", name(cuEventDestroy(ev)));
    return 0;
  }
  if (strcmp(argv[1], "shareable_export") == 0) {
    const size_t bytes = 2 << 20;
    CUmemAllocationProp prop = device_memory_prop();
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    int fd = -1;
    CUresult r = cuMemCreate(&h, bytes, &prop, 0);
    if (!r) r = cuMemAddressReserve(&va, bytes, 0, 0, 0);
    if (!r) r = cuMemMap(va, bytes, 0, h, 0);
    if (!r) r = cuMemsetD8(va, 0x5a, bytes);
    if (!r) r = cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r) {
      printf("export error %s\n", name(r));
      return 1;
    }
    printf("shareable /proc/%d/fd/%d\n", (int)getpid(), fd);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
      if (strncmp(line, "release", 7) == 0) {
        r = cuMemRelease(h);
        if (!r) r = cuMemUnmap(va, bytes);
        printf("released %s\n", name(r));
        fflush(stdout);
      } else if (strncmp(line, "quit", 4) == 0) {
        return 0;
      }
    }
    return 0;
  }
  if (strcmp(argv[1], "shareable_import") == 0 && argc >= 3) {
    int fd = open_exported(argv[2], argc == 4 && strcmp(argv[3], "forge") == 0);
    if (fd < 0) return 1;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = cuMemImportFromShareableHandle(&h, (void*)(intptr_t)fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    printf("import %s\n", name(r));
    if (r) return 0;
    const size_t bytes = 2 << 20;
    CUdeviceptr va = 0;
    unsigned char first = 0;
    r = cuMemAddressReserve(&va, bytes, 0, 0, 0);
    if (!r) r = cuMemMap(va, bytes, 0, h, 0);
    if (!r) r = cuMemcpyDtoH(&first, va, 1);
    printf("read %02x %s\n", first, name(r));
    return 0;
  }
  if (strcmp(argv[1], "pool_export") == 0) {
    const size_t bytes = 1 << 20;
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool plain = NULL, pool = NULL;
    int fd = -1;
    CUresult r = cuMemPoolCreate(&plain, &props);
    if (!r)
      printf("plain %s\n", name(cuMemPoolExportToShareableHandle(
                               &fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)));
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUdeviceptr d = 0;
    CUmemPoolPtrExportData data;
    if (!r) r = cuMemPoolCreate(&pool, &props);
    if (!r) r = cuMemAllocFromPoolAsync(&d, bytes, pool, NULL);
    if (!r) r = cuMemsetD32Async(d, 0x600dcafeu, bytes / 4, NULL);
    if (!r) r = cuCtxSynchronize();
    if (!r)
      r = cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (!r) r = cuMemPoolExportPointer(&data, d);
    if (r) {
      printf("export error %s\n", name(r));
      return 1;
    }
    printf("pool /proc/%d/fd/%d ", (int)getpid(), fd);
    print_hex(data.reserved, sizeof data.reserved);
    printf("\n");
    fflush(stdout);
    answer(d, pool);
    return 0;
  }
  if (strcmp(argv[1], "pool_import") == 0 && argc >= 4 &&
      strlen(argv[3]) == 2 * sizeof(CUmemPoolPtrExportData)) {
    const char* forge = argc == 5 ? argv[4] : "";
    int fd = open_exported(argv[2], strcmp(forge, "forge") == 0);
    if (fd < 0) return 1;
    CUmemoryPool pool = NULL;
    CUresult r = cuMemPoolImportFromShareableHandle(&pool, (void*)(intptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    printf("import %s\n", name(r));
    if (r) return 0;
    CUmemPoolPtrExportData data;
    parse_hex(data.reserved, sizeof data.reserved, argv[3]);
    if (strcmp(forge, "forge_data") == 0) data.reserved[9] ^= 1; /* another base */
    CUdeviceptr d = 0;
    r = cuMemPoolImportPointer(&d, pool, &data);
    printf("pointer %s\n", name(r));
    if (!r) {
      CUdeviceptr again = 0;
      printf("again %s\n", name(cuMemPoolImportPointer(&again, pool, &data)));
      unsigned w0 = 0;
      r = cuMemcpyDtoH(&w0, d, sizeof w0);
      printf("read %08x %s\n", w0, name(r));
      printf("wrote %s\n", name(add_one(d)));
      CUdeviceptr mine = 0;
      printf("alloc %s\n", name(cuMemAllocFromPoolAsync(&mine, 256, pool, NULL)));
      printf("freed %s\n", name(cuMemFree(d)));
      printf("freed again %s\n", name(cuMemFree(d)));
      printf("after free %s\n", name(cuMemcpyDtoH(&w0, d, sizeof w0)));
    }
    printf("destroyed %s\n", name(cuMemPoolDestroy(pool)));
    return 0;
  }
  printf(
      "usage: ipc_probe export | open HEX | open_event HEX | shareable_export | shareable_import "
      "PATH | pool_export | pool_import PATH HEX\n");
  return 2;
}
