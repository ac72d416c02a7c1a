// Mipmapped arrays: levels and their extents, copies to each level, sampling by explicit level
// of detail and by gradients, the texture's bias and clamps, point and linear filtering between
// levels, txq, surfaces over a level (levels made on the device from the level above, as
// renderers do), layered and 3D mipmaps, refusals, and the memory a mipmap holds. Results are
// compared with CPU references.
#include <math.h>

#include <vector>

#include "tests/e2e/check.h"

// The value every texel of a test mipmap holds: its level, row and column.
static float texel_value(int level, int x, int y, int w) { return 100.0f * level + y * w + x; }

__global__ void sample_lod(cudaTextureObject_t t, const float4* q, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2DLod<float>(t, q[i].x, q[i].y, q[i].z);
}

__global__ void sample_grad(cudaTextureObject_t t, const float4* q, const float4* g, float* out,
                            int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = tex2DGrad<float>(t, q[i].x, q[i].y, make_float2(g[i].x, g[i].y),
                              make_float2(g[i].z, g[i].w));
}

__global__ void query(cudaTextureObject_t t, int* out) {
  int levels, w1, h2;
  asm("txq.num_mipmap_levels.b32 %0, [%1];" : "=r"(levels) : "l"(t));
  asm("txq.level.width.b32 %0, [%1], %2;" : "=r"(w1) : "l"(t), "r"(1));
  asm("txq.level.height.b32 %0, [%1], %2;" : "=r"(h2) : "l"(t), "r"(2));
  out[0] = levels;
  out[1] = w1;
  out[2] = h2;
}

// One level from the level above: each texel the mean of the four it covers, read through a
// linear-filtered texture at their shared corner, written through the level's surface.
__global__ void downsample(cudaTextureObject_t above, cudaSurfaceObject_t level, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) {
    float v = tex2D<float>(above, (x + 0.5f) / w, (y + 0.5f) / h);
    surf2Dwrite(v, level, x * sizeof(float), y);
  }
}

__global__ void sample_layered_lod(cudaTextureObject_t t, float* out, int layers, float u, float v,
                                   float lod) {
  int l = threadIdx.x;
  if (l < layers) out[l] = tex2DLayeredLod<float>(t, u, v, l, lod);
}

__global__ void sample_3d_lod(cudaTextureObject_t t, float* out, float u, float v, float w,
                              float lod) {
  out[0] = tex3DLod<float>(t, u, v, w, lod);
}

struct Level {
  int w, h;
};

static cudaTextureObject_t make_tex(cudaMipmappedArray_t m, int levels,
                                    cudaTextureFilterMode mip_filter, float bias = 0,
                                    float min_clamp = 0, float max_clamp = -1,
                                    cudaTextureFilterMode filter = cudaFilterModePoint) {
  cudaResourceDesc r = {};
  r.resType = cudaResourceTypeMipmappedArray;
  r.res.mipmap.mipmap = m;
  cudaTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeClamp;
  td.filterMode = filter;
  td.readMode = cudaReadModeElementType;
  td.normalizedCoords = 1;
  td.mipmapFilterMode = mip_filter;
  td.mipmapLevelBias = bias;
  td.minMipmapLevelClamp = min_clamp;
  td.maxMipmapLevelClamp = max_clamp < 0 ? float(levels - 1) : max_clamp;
  cudaTextureObject_t t = 0;
  CHECK(cudaCreateTextureObject(&t, &r, &td, nullptr));
  return t;
}

// A point sample of level `l` at normalized (u, v), clamped at the edges.
static float point(const std::vector<Level>& lv, int l, float u, float v) {
  int x = (int)floorf(u * lv[l].w), y = (int)floorf(v * lv[l].h);
  x = x < 0 ? 0 : x >= lv[l].w ? lv[l].w - 1 : x;
  y = y < 0 ? 0 : y >= lv[l].h ? lv[l].h - 1 : y;
  return texel_value(l, x, y, lv[l].w);
}

static float run_lod(cudaTextureObject_t t, float u, float v, float lod) {
  std::vector<float4> q = {make_float4(u, v, lod, 0)};
  float4* d_q = upload(q);
  float* d_out;
  CHECK(cudaMalloc(&d_out, sizeof(float)));
  sample_lod<<<1, 1>>>(t, d_q, d_out, 1);
  CHECK(cudaGetLastError());
  float out = 0;
  CHECK(cudaMemcpy(&out, d_out, sizeof out, cudaMemcpyDeviceToHost));
  free_device(d_q, d_out);
  return out;
}

int main() {
  const int W = 16, H = 8;
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  size_t free0 = 0, total = 0;
  CHECK(cudaMemGetInfo(&free0, &total));

  // Ten levels asked of a 16x8 array: the driver makes 1 + log2(16) = 5.
  cudaMipmappedArray_t mip;
  CHECK(
      cudaMallocMipmappedArray(&mip, &fd, make_cudaExtent(W, H, 0), 10, cudaArraySurfaceLoadStore));
  std::vector<Level> lv;
  for (int l = 0;; ++l) {
    cudaArray_t a;
    if (cudaGetMipmappedArrayLevel(&a, mip, l) != cudaSuccess) {
      cudaGetLastError();
      break;
    }
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned flags;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
    lv.push_back({(int)ext.width, (int)ext.height});
    std::vector<float> img(ext.width * ext.height);
    for (int y = 0; y < (int)ext.height; ++y)
      for (int x = 0; x < (int)ext.width; ++x)
        img[y * ext.width + x] = texel_value(l, x, y, (int)ext.width);
    CHECK(cudaMemcpy2DToArray(a, 0, 0, img.data(), ext.width * sizeof(float),
                              ext.width * sizeof(float), ext.height, cudaMemcpyHostToDevice));
  }
  const Level expect_levels[] = {{16, 8}, {8, 4}, {4, 2}, {2, 1}, {1, 1}};
  EXPECT(lv.size() == 5, "%zu levels", lv.size());
  for (int l = 0; l < 5; ++l)
    EXPECT(lv[l].w == expect_levels[l].w && lv[l].h == expect_levels[l].h, "level %d is %dx%d", l,
           lv[l].w, lv[l].h);

  // Explicit levels of detail, every texel of every level, point filtering between levels.
  cudaTextureObject_t t = make_tex(mip, 5, cudaFilterModePoint);
  {
    std::vector<float4> q;
    std::vector<float> want;
    for (int l = 0; l < 5; ++l)
      for (int y = 0; y < lv[l].h; ++y)
        for (int x = 0; x < lv[l].w; ++x) {
          q.push_back(make_float4((x + 0.5f) / lv[l].w, (y + 0.5f) / lv[l].h, (float)l, 0));
          want.push_back(texel_value(l, x, y, lv[l].w));
        }
    // Fractions take the nearest level; outside [0, 4] the end levels.
    const float lods[] = {1.4f, 1.6f, 0.5f, 0.51f, -3.0f, 9.0f};
    const int nearest[] = {1, 2, 0, 1, 0, 4};
    for (int k = 0; k < 6; ++k) {
      q.push_back(make_float4(0.3f, 0.7f, lods[k], 0));
      want.push_back(point(lv, nearest[k], 0.3f, 0.7f));
    }
    int n = (int)q.size();
    float4* d_q = upload(q);
    float* d_out;
    CHECK(cudaMalloc(&d_out, n * sizeof(float)));
    sample_lod<<<(n + 63) / 64, 64>>>(t, d_q, d_out, n);
    CHECK(cudaGetLastError());
    std::vector<float> out(n);
    CHECK(cudaMemcpy(out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i)
      EXPECT(out[i] == want[i], "lookup %d: %f, expected %f", i, out[i], want[i]);
    free_device(d_q, d_out);
  }

  // Gradients: the level of detail is log2 of the longer footprint in level-0 texels.
  {
    const float u = 0.4f, v = 0.6f;
    std::vector<float4> q, g;
    std::vector<float> want;
    auto add = [&](float dxu, float dxv, float dyu, float dyv, int level) {
      q.push_back(make_float4(u, v, 0, 0));
      g.push_back(make_float4(dxu, dxv, dyu, dyv));
      want.push_back(point(lv, level, u, v));
    };
    add(1.0f / W, 0, 0, 1.0f / H, 0);   // one texel per step: level 0
    add(2.0f / W, 0, 0, 1.0f / H, 1);   // two along x: level 1
    add(0, 0, 0, 4.0f / H, 2);          // four along y: level 2
    add(3.0f / W, 4.0f / H, 0, 0, 2);   // |(3, 4)| = 5: log2 5 = 2.32, level 2
    add(6.0f / W, 8.0f / H, 0, 0, 3);   // 10: log2 10 = 3.32, level 3
    add(0.5f / W, 0, 0, 0.25f / H, 0);  // magnified: level 0
    add(64.0f / W, 0, 0, 0, 4);         // beyond the last level
    int n = (int)q.size();
    float4* d_q = upload(q);
    float4* d_g = upload(g);
    float* d_out;
    CHECK(cudaMalloc(&d_out, n * sizeof(float)));
    sample_grad<<<1, 32>>>(t, d_q, d_g, d_out, n);
    CHECK(cudaGetLastError());
    std::vector<float> out(n);
    CHECK(cudaMemcpy(out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i)
      EXPECT(out[i] == want[i], "gradient lookup %d: %f, expected %f", i, out[i], want[i]);
    free_device(d_q, d_g, d_out);
  }

  // The texture's bias and clamps.
  {
    cudaTextureObject_t biased = make_tex(mip, 5, cudaFilterModePoint, 1.0f);
    EXPECT(run_lod(biased, 0.3f, 0.7f, 1.0f) == point(lv, 2, 0.3f, 0.7f), "bias 1 at level 1");
    cudaTextureObject_t low = make_tex(mip, 5, cudaFilterModePoint, 0, 2.0f);
    EXPECT(run_lod(low, 0.3f, 0.7f, 0.0f) == point(lv, 2, 0.3f, 0.7f), "min clamp 2");
    cudaTextureObject_t high = make_tex(mip, 5, cudaFilterModePoint, 0, 0, 1.0f);
    EXPECT(run_lod(high, 0.3f, 0.7f, 3.0f) == point(lv, 1, 0.3f, 0.7f), "max clamp 1");
    // A description that leaves the clamps at zero samples the base level only.
    cudaTextureObject_t base = make_tex(mip, 5, cudaFilterModePoint, 0, 0, 0);
    EXPECT(run_lod(base, 0.3f, 0.7f, 3.0f) == point(lv, 0, 0.3f, 0.7f), "zero clamps");
    for (cudaTextureObject_t x : {biased, low, high, base}) CHECK(cudaDestroyTextureObject(x));
  }

  // Linear filtering between levels blends the two around the level of detail.
  {
    cudaTextureObject_t lin = make_tex(mip, 5, cudaFilterModeLinear);
    const float lods[] = {1.25f, 2.5f, 0.75f, 3.0f};
    for (float lod : lods) {
      int l0 = (int)floorf(lod);
      float f = lod - l0;
      float want = (1 - f) * point(lv, l0, 0.3f, 0.7f) + f * point(lv, l0 + 1, 0.3f, 0.7f);
      float got = run_lod(lin, 0.3f, 0.7f, lod);
      EXPECT(fabsf(got - want) < 1e-3f, "linear mip at %f: %f, expected %f", lod, got, want);
    }
    CHECK(cudaDestroyTextureObject(lin));
  }

  // txq: the levels and each level's extents.
  {
    int* d_q;
    CHECK(cudaMalloc(&d_q, 3 * sizeof(int)));
    query<<<1, 1>>>(t, d_q);
    CHECK(cudaGetLastError());
    int got[3];
    CHECK(cudaMemcpy(got, d_q, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(got[0] == 5 && got[1] == 8 && got[2] == 2, "txq: %d levels, width(1) %d, height(2) %d",
           got[0], got[1], got[2]);
    CHECK(cudaFree(d_q));
  }

  // Levels made on the device: each from the level above through a texture and a surface.
  {
    const int N = 32;
    cudaMipmappedArray_t gen;
    CHECK(cudaMallocMipmappedArray(&gen, &fd, make_cudaExtent(N, N, 0), 6,
                                   cudaArraySurfaceLoadStore));
    std::vector<std::vector<float>> ref(6);
    ref[0].resize(N * N);
    for (int y = 0; y < N; ++y)
      for (int x = 0; x < N; ++x) ref[0][y * N + x] = (float)((x * 7 + y * 3) % 16);
    cudaArray_t l0;
    CHECK(cudaGetMipmappedArrayLevel(&l0, gen, 0));
    CHECK(cudaMemcpy2DToArray(l0, 0, 0, ref[0].data(), N * sizeof(float), N * sizeof(float), N,
                              cudaMemcpyHostToDevice));
    for (int l = 1; l < 6; ++l) {
      int w = N >> l, pw = N >> (l - 1);
      ref[l].resize(w * w);
      for (int y = 0; y < w; ++y)
        for (int x = 0; x < w; ++x) {
          const float* p = ref[l - 1].data();
          ref[l][y * w + x] = (p[2 * y * pw + 2 * x] + p[2 * y * pw + 2 * x + 1] +
                               p[(2 * y + 1) * pw + 2 * x] + p[(2 * y + 1) * pw + 2 * x + 1]) /
                              4;
        }
      cudaArray_t above, level;
      CHECK(cudaGetMipmappedArrayLevel(&above, gen, l - 1));
      CHECK(cudaGetMipmappedArrayLevel(&level, gen, l));
      cudaResourceDesc ra = {}, rl = {};
      ra.resType = rl.resType = cudaResourceTypeArray;
      ra.res.array.array = above;
      rl.res.array.array = level;
      cudaTextureDesc td = {};
      td.filterMode = cudaFilterModeLinear;
      td.normalizedCoords = 1;
      cudaTextureObject_t ta;
      CHECK(cudaCreateTextureObject(&ta, &ra, &td, nullptr));
      cudaSurfaceObject_t sl;
      CHECK(cudaCreateSurfaceObject(&sl, &rl));
      downsample<<<dim3((w + 31) / 32, w), 32>>>(ta, sl, w, w);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());  // the objects are destroyed once the kernel is done
      CHECK(cudaDestroyTextureObject(ta));
      CHECK(cudaDestroySurfaceObject(sl));
    }
    // Every level read back through a texture over the whole mipmap.
    cudaTextureObject_t tg = make_tex(gen, 6, cudaFilterModePoint);
    for (int l = 0; l < 6; ++l) {
      int w = N >> l;
      for (int k = 0; k < 3; ++k) {
        int x = (k * 5) % w, y = (k * 3 + 1) % w;
        float got = run_lod(tg, (x + 0.5f) / w, (y + 0.5f) / w, (float)l);
        EXPECT(got == ref[l][y * w + x], "generated level %d (%d, %d): %f, expected %f", l, x, y,
               got, ref[l][y * w + x]);
      }
    }
    CHECK(cudaDestroyTextureObject(tg));
    CHECK(cudaFreeMipmappedArray(gen));
  }

  // Layered mipmaps keep their layers at every level; 3D ones halve their depth.
  {
    cudaMipmappedArray_t layered;
    CHECK(cudaMallocMipmappedArray(&layered, &fd, make_cudaExtent(8, 8, 3), 4, cudaArrayLayered));
    for (int l = 0; l < 4; ++l) {
      cudaArray_t a;
      CHECK(cudaGetMipmappedArrayLevel(&a, layered, l));
      cudaChannelFormatDesc got;
      cudaExtent ext;
      unsigned flags;
      CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
      int w = 8 >> l;
      EXPECT((int)ext.width == w && (int)ext.height == w && ext.depth == 3,
             "layered level %d: %zux%zux%zu", l, ext.width, ext.height, ext.depth);
      std::vector<float> img(w * w * 3);
      for (int i = 0; i < w * w * 3; ++i) img[i] = 1000.0f * l + i / (w * w);  // layer number
      cudaMemcpy3DParms p = {};
      p.srcPtr = make_cudaPitchedPtr(img.data(), w * sizeof(float), w, w);
      p.dstArray = a;
      p.extent = make_cudaExtent(w, w, 3);
      p.kind = cudaMemcpyHostToDevice;
      CHECK(cudaMemcpy3D(&p));
    }
    cudaTextureObject_t tl = make_tex(layered, 4, cudaFilterModePoint);
    float* d_out;
    CHECK(cudaMalloc(&d_out, 3 * sizeof(float)));
    sample_layered_lod<<<1, 32>>>(tl, d_out, 3, 0.5f, 0.5f, 2.0f);
    CHECK(cudaGetLastError());
    float out[3];
    CHECK(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost));
    for (int l = 0; l < 3; ++l) EXPECT(out[l] == 2000.0f + l, "layer %d at level 2: %f", l, out[l]);

    cudaMipmappedArray_t vol;
    cudaArray_t v1;
    CHECK(cudaMallocMipmappedArray(&vol, &fd, make_cudaExtent(8, 8, 8), 4, 0));
    CHECK(cudaGetMipmappedArrayLevel(&v1, vol, 1));
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned flags;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, v1));
    EXPECT(ext.width == 4 && ext.height == 4 && ext.depth == 4, "3D level 1: %zux%zux%zu",
           ext.width, ext.height, ext.depth);
    std::vector<float> cube(64);
    for (int i = 0; i < 64; ++i) cube[i] = (float)i;
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr(cube.data(), 4 * sizeof(float), 4, 4);
    p.dstArray = v1;
    p.extent = make_cudaExtent(4, 4, 4);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    cudaTextureObject_t tv = make_tex(vol, 4, cudaFilterModePoint);
    // Texel (1, 2, 3) of level 1.
    sample_3d_lod<<<1, 1>>>(tv, d_out, 1.5f / 4, 2.5f / 4, 3.5f / 4, 1.0f);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out, d_out, sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(out[0] == 3 * 16 + 2 * 4 + 1, "3D level 1 texel (1, 2, 3): %f", out[0]);
    CHECK(cudaFree(d_out));
    for (cudaTextureObject_t x : {tl, tv}) CHECK(cudaDestroyTextureObject(x));
    CHECK(cudaFreeMipmappedArray(layered));
    CHECK(cudaFreeMipmappedArray(vol));
  }

  // Refusals: a level past the last, a surface over the whole mipmap, a level freed alone.
  {
    cudaArray_t none;
    EXPECT(cudaGetMipmappedArrayLevel(&none, mip, 5) != cudaSuccess, "level 5 of 5");
    cudaGetLastError();
    cudaResourceDesc r = {};
    r.resType = cudaResourceTypeMipmappedArray;
    r.res.mipmap.mipmap = mip;
    cudaSurfaceObject_t s = 0;
    EXPECT(cudaCreateSurfaceObject(&s, &r) != cudaSuccess, "a surface over a mipmapped array");
    cudaGetLastError();
    cudaArray_t level1;
    CHECK(cudaGetMipmappedArrayLevel(&level1, mip, 1));
    EXPECT(cudaFreeArray(level1) != cudaSuccess, "a mipmap's level freed on its own");
    cudaGetLastError();
    // The level is still there.
    EXPECT(run_lod(t, 0.3f, 0.7f, 1.0f) == point(lv, 1, 0.3f, 0.7f), "level 1 after refusal");
  }

  CHECK(cudaDestroyTextureObject(t));
  CHECK(cudaFreeMipmappedArray(mip));

  // The memory a mipmap holds: every level's texels, and all of it back when it is freed.
  {
    const size_t w = 1024, h = 512;
    size_t before = 0, held = 0, after = 0;
    CHECK(cudaMemGetInfo(&before, &total));
    cudaMipmappedArray_t big;
    CHECK(cudaMallocMipmappedArray(&big, &fd, make_cudaExtent(w, h, 0), 11, 0));
    CHECK(cudaMemGetInfo(&held, &total));
    size_t texels = 0;
    for (int l = 0; l < 11; ++l) {
      size_t lw = w >> l ? w >> l : 1, lh = h >> l ? h >> l : 1;
      texels += lw * lh;
    }
    const size_t bytes = texels * sizeof(float);
    EXPECT(before - held >= bytes && before - held <= bytes + (1u << 20),
           "a %zu-byte mipmap took %zu bytes", bytes, before - held);
    CHECK(cudaFreeMipmappedArray(big));
    CHECK(cudaMemGetInfo(&after, &total));
    EXPECT(after == before, "free memory %zu after the mipmap, %zu before", after, before);
  }
  size_t free1 = 0;
  CHECK(cudaMemGetInfo(&free1, &total));
  EXPECT(free1 == free0, "free memory %zu at the end, %zu at the start", free1, free0);
  printf("mipmaps: all checks passed\n");
  return 0;
}
