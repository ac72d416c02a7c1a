// Texture and surface objects over CUDA arrays, linear and pitched memory: point and linear
// filtering, normalized coordinates and address modes, normalized-float reads of 8-bit data,
// 3D and layered textures, surface writes and reads, descriptor queries. Results are compared
// with CPU references.
#include <math.h>
#include <string.h>

#include <vector>

#include "tests/e2e/check.h"

__global__ void sample2d(cudaTextureObject_t t, float* out, int w, int h, float scale, float off) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(t, (x + off) * scale, (y + off) * scale);
}

__global__ void fetch1d(cudaTextureObject_t t, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<int>(t, i) * 2;
}

__global__ void sample_uchar4(cudaTextureObject_t t, float4* out, int w, int h) {
  int x = threadIdx.x, y = blockIdx.x;
  if (x < w && y < h) out[y * w + x] = tex2D<float4>(t, x + 0.5f, y + 0.5f);
}

__global__ void sample3d(cudaTextureObject_t t, float* out, int w, int h, int d) {
  int x = threadIdx.x, y = blockIdx.x, z = blockIdx.y;
  if (x < w && y < h && z < d)
    out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void sample_layered(cudaTextureObject_t t, float* out, int w, int h, int layers) {
  int x = threadIdx.x, y = blockIdx.x, l = blockIdx.y;
  if (x < w && y < h && l < layers)
    out[(l * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l);
}

__global__ void surf_scale(cudaSurfaceObject_t in, cudaSurfaceObject_t out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) {
    float v = surf2Dread<float>(in, x * sizeof(float), y);
    surf2Dwrite(v * 3.0f + 1.0f, out, x * sizeof(float), y);
  }
}

static cudaTextureObject_t make_tex(cudaResourceDesc& r, cudaTextureFilterMode filter,
                                    cudaTextureAddressMode mode, bool normalized,
                                    cudaTextureReadMode read = cudaReadModeElementType) {
  cudaTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = mode;
  td.filterMode = filter;
  td.readMode = read;
  td.normalizedCoords = normalized;
  cudaTextureObject_t t = 0;
  CHECK(cudaCreateTextureObject(&t, &r, &td, nullptr));
  return t;
}

// The GPU's bilinear filter: weights in 1.8 fixed point.
static float lerp_weight(float f) { return roundf(f * 256.0f) / 256.0f; }

int main() {
  const int w = 24, h = 10;
  std::vector<float> img(w * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) img[y * w + x] = (float)(x * x + 3 * y) * 0.25f;
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CHECK(cudaMallocArray(&a, &fd, w, h, cudaArraySurfaceLoadStore));
  CHECK(cudaMemcpy2DToArray(a, 0, 0, img.data(), w * sizeof(float), w * sizeof(float), h,
                            cudaMemcpyHostToDevice));
  cudaResourceDesc r = {};
  r.resType = cudaResourceTypeArray;
  r.res.array.array = a;
  float* d_out;
  CHECK(cudaMalloc((void**)&d_out, w * h * sizeof(float) * 8));
  std::vector<float> out(w * h);

  // Point sampling at texel centres returns the texels.
  cudaTextureObject_t tp = make_tex(r, cudaFilterModePoint, cudaAddressModeClamp, false);
  sample2d<<<dim3(1, h), 32>>>(tp, d_out, w, h, 1.0f, 0.5f);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), d_out, w * h * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < w * h; ++i)
    EXPECT(out[i] == img[i], "point sample %d: %f vs %f", i, out[i], img[i]);

  // Linear filtering between texel centres (offset 0.75 texel), clamped at the edges.
  cudaTextureObject_t tl = make_tex(r, cudaFilterModeLinear, cudaAddressModeClamp, false);
  sample2d<<<dim3(1, h), 32>>>(tl, d_out, w, h, 1.0f, 0.75f);
  CHECK(cudaMemcpy(out.data(), d_out, w * h * sizeof(float), cudaMemcpyDeviceToHost));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      // Sample at (x + 0.75, y + 0.75): texel centres x and x+1 (weight 0.25 on the right).
      auto at = [&](int xx, int yy) {
        xx = xx < 0 ? 0 : xx >= w ? w - 1 : xx;
        yy = yy < 0 ? 0 : yy >= h ? h - 1 : yy;
        return img[yy * w + xx];
      };
      float a0 = lerp_weight(0.25f);
      float top = at(x, y) * (1 - a0) + at(x + 1, y) * a0;
      float bot = at(x, y + 1) * (1 - a0) + at(x + 1, y + 1) * a0;
      float want = top * (1 - a0) + bot * a0;
      float got = out[y * w + x];
      EXPECT(fabsf(got - want) <= 1e-3f * fmaxf(1.0f, fabsf(want)), "linear at %d,%d: %f vs %f", x,
             y, got, want);
    }

  // Normalized coordinates with wrap: u = 1 + (x + 0.5) / w reads texel x again.
  cudaTextureObject_t tw = make_tex(r, cudaFilterModePoint, cudaAddressModeWrap, true);
  sample2d<<<dim3(1, h), 32>>>(tw, d_out, w, h, 1.0f, 0.0f);  // coords are raw texel indices
  CHECK(cudaMemcpy(out.data(), d_out, w * h * sizeof(float), cudaMemcpyDeviceToHost));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      // u = x, v = y in normalized space: each wraps to 0 (the fraction is 0), so texel (0,0).
      EXPECT(out[y * w + x] == img[0], "wrap at %d,%d: %f", x, y, out[y * w + x]);
    }

  // The resource description comes back naming the same array.
  cudaResourceDesc back = {};
  CHECK(cudaGetTextureObjectResourceDesc(&back, tp));
  EXPECT(back.resType == cudaResourceTypeArray && back.res.array.array == a, "resource desc");
  cudaTextureDesc tdb = {};
  CHECK(cudaGetTextureObjectTextureDesc(&tdb, tl));
  EXPECT(tdb.filterMode == cudaFilterModeLinear, "texture desc filter %d", (int)tdb.filterMode);

  // tex1Dfetch from linear device memory.
  const int n = 300;
  std::vector<int> iv(n);
  for (int i = 0; i < n; ++i) iv[i] = i * 5 - 100;
  int *d_lin, *d_iout;
  CHECK(cudaMalloc((void**)&d_lin, n * sizeof(int)));
  CHECK(cudaMalloc((void**)&d_iout, n * sizeof(int)));
  CHECK(cudaMemcpy(d_lin, iv.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  cudaResourceDesc lr = {};
  lr.resType = cudaResourceTypeLinear;
  lr.res.linear.devPtr = d_lin;
  lr.res.linear.desc = cudaCreateChannelDesc<int>();
  lr.res.linear.sizeInBytes = n * sizeof(int);
  cudaTextureObject_t t1 = make_tex(lr, cudaFilterModePoint, cudaAddressModeClamp, false);
  fetch1d<<<(n + 127) / 128, 128>>>(t1, d_iout, n);
  std::vector<int> iout(n);
  CHECK(cudaMemcpy(iout.data(), d_iout, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(iout[i] == iv[i] * 2, "fetch %d: %d", i, iout[i]);

  // uchar4 in pitched memory, read as normalized floats.
  const int cw = 8, ch = 4;
  uchar4* d_px;
  size_t pitch;
  CHECK(cudaMallocPitch((void**)&d_px, &pitch, cw * sizeof(uchar4), ch));
  std::vector<uchar4> px(cw * ch);
  for (int i = 0; i < cw * ch; ++i) px[i] = make_uchar4(i, 255 - i, i * 7, 128);
  CHECK(cudaMemcpy2D(d_px, pitch, px.data(), cw * sizeof(uchar4), cw * sizeof(uchar4), ch,
                     cudaMemcpyHostToDevice));
  cudaResourceDesc pr = {};
  pr.resType = cudaResourceTypePitch2D;
  pr.res.pitch2D.devPtr = d_px;
  pr.res.pitch2D.desc = cudaCreateChannelDesc<uchar4>();
  pr.res.pitch2D.width = cw;
  pr.res.pitch2D.height = ch;
  pr.res.pitch2D.pitchInBytes = pitch;
  cudaTextureObject_t tc =
      make_tex(pr, cudaFilterModePoint, cudaAddressModeClamp, false, cudaReadModeNormalizedFloat);
  float4* d_f4;
  CHECK(cudaMalloc((void**)&d_f4, cw * ch * sizeof(float4)));
  sample_uchar4<<<ch, 32>>>(tc, d_f4, cw, ch);
  std::vector<float4> f4(cw * ch);
  CHECK(cudaMemcpy(f4.data(), d_f4, cw * ch * sizeof(float4), cudaMemcpyDeviceToHost));
  for (int i = 0; i < cw * ch; ++i) {
    EXPECT(f4[i].x == px[i].x / 255.0f && f4[i].y == px[i].y / 255.0f &&
               f4[i].z == px[i].z / 255.0f && f4[i].w == px[i].w / 255.0f,
           "uchar4 %d: %f %f %f %f", i, f4[i].x, f4[i].y, f4[i].z, f4[i].w);
  }

  // A 3D texture and a layered 2D texture.
  const int vw = 6, vh = 5, vd = 4;
  std::vector<float> vol(vw * vh * vd);
  for (size_t i = 0; i < vol.size(); ++i) vol[i] = (float)i * 1.5f - 7.0f;
  for (int layered = 0; layered < 2; ++layered) {
    cudaArray_t va;
    CHECK(cudaMalloc3DArray(&va, &fd, make_cudaExtent(vw, vh, vd), layered ? cudaArrayLayered : 0));
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr(vol.data(), vw * sizeof(float), vw, vh);
    p.dstArray = va;
    p.extent = make_cudaExtent(vw, vh, vd);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    cudaResourceDesc vr = {};
    vr.resType = cudaResourceTypeArray;
    vr.res.array.array = va;
    cudaTextureObject_t tv = make_tex(vr, cudaFilterModePoint, cudaAddressModeClamp, false);
    if (layered) {
      sample_layered<<<dim3(vh, vd), 32>>>(tv, d_out, vw, vh, vd);
    } else {
      sample3d<<<dim3(vh, vd), 32>>>(tv, d_out, vw, vh, vd);
    }
    std::vector<float> vout(vol.size());
    CHECK(cudaMemcpy(vout.data(), d_out, vol.size() * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(vout == vol, "%s texture read differs", layered ? "layered" : "3D");
    CHECK(cudaDestroyTextureObject(tv));
    CHECK(cudaFreeArray(va));
  }

  // Surfaces: read one array, write another.
  cudaArray_t b;
  CHECK(cudaMallocArray(&b, &fd, w, h, cudaArraySurfaceLoadStore));
  cudaSurfaceObject_t sa, sb;
  CHECK(cudaCreateSurfaceObject(&sa, &r));
  cudaResourceDesc rb = r;
  rb.res.array.array = b;
  CHECK(cudaCreateSurfaceObject(&sb, &rb));
  surf_scale<<<dim3(1, h), 32>>>(sa, sb, w, h);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy2DFromArray(out.data(), w * sizeof(float), b, 0, 0, w * sizeof(float), h,
                              cudaMemcpyDeviceToHost));
  for (int i = 0; i < w * h; ++i)
    EXPECT(out[i] == img[i] * 3.0f + 1.0f, "surface %d: %f", i, out[i]);

  // A surface needs an array made for load/store.
  cudaArray_t plain;
  CHECK(cudaMallocArray(&plain, &fd, 4, 4));
  cudaResourceDesc rp = r;
  rp.res.array.array = plain;
  cudaSurfaceObject_t bad = 0;
  EXPECT(cudaCreateSurfaceObject(&bad, &rp) != cudaSuccess, "surface over a plain array");
  cudaGetLastError();

  CHECK(cudaDestroySurfaceObject(sa));
  CHECK(cudaDestroySurfaceObject(sb));
  for (cudaTextureObject_t t : {tp, tl, tw, t1, tc}) CHECK(cudaDestroyTextureObject(t));
  for (cudaArray_t arr : {plain, a, b}) CHECK(cudaFreeArray(arr));
  free_device(d_out, d_lin, d_iout, d_px, d_f4);
  printf("textures: all checks passed\n");
  return 0;
}
