// Bindless texture and surface objects for the PTX interpreter tests. Every kernel takes its
// object handles as parameters and runs one thread per lookup (i < n).

#define INDEX                                    \
  int i = blockIdx.x * blockDim.x + threadIdx.x; \
  if (i >= n) return

// tex1Dfetch over [first, first + n): tex.1d.v4.f32.s32.
extern "C" __global__ void fetch_linear(cudaTextureObject_t t, int first, float* out, int n) {
  INDEX;
  out[i] = tex1Dfetch<float>(t, first + i);
}

// tex.1d.v4.f32.f32
extern "C" __global__ void sample_1d(cudaTextureObject_t t, const float* x, float* out, int n) {
  INDEX;
  out[i] = tex1D<float>(t, x[i]);
}

// tex.2d.v4.f32.f32
extern "C" __global__ void sample_2d(cudaTextureObject_t t, const float2* xy, float4* out, int n) {
  INDEX;
  out[i] = tex2D<float4>(t, xy[i].x, xy[i].y);
}

// tex.2d.v4.u32.f32 (cudaReadModeElementType on 8-bit data)
extern "C" __global__ void sample_2d_uchar4(cudaTextureObject_t t, const float2* xy, uchar4* out,
                                            int n) {
  INDEX;
  out[i] = tex2D<uchar4>(t, xy[i].x, xy[i].y);
}

// tex.level.2d and tex.grad.2d: no mipmaps here, both read level 0.
extern "C" __global__ void sample_2d_lod_grad(cudaTextureObject_t t, const float2* xy, float* out,
                                              int n) {
  INDEX;
  out[2 * i] = tex2DLod<float>(t, xy[i].x, xy[i].y, 2.0f);
  out[2 * i + 1] = tex2DGrad<float>(t, xy[i].x, xy[i].y, make_float2(1, 0), make_float2(0, 1));
}

// tex.3d.v4.f32.f32
extern "C" __global__ void sample_3d(cudaTextureObject_t t, const float4* xyz, float* out, int n) {
  INDEX;
  out[i] = tex3D<float>(t, xyz[i].x, xyz[i].y, xyz[i].z);
}

// tex.a1d.v4.f32.f32
extern "C" __global__ void sample_1d_layered(cudaTextureObject_t t, const float* x,
                                             const int* layer, float* out, int n) {
  INDEX;
  out[i] = tex1DLayered<float>(t, x[i], layer[i]);
}

// tex.a2d.v4.f32.f32 (w = layer)
extern "C" __global__ void sample_2d_layered(cudaTextureObject_t t, const float4* xyl, float* out,
                                             int n) {
  INDEX;
  out[i] = tex2DLayered<float>(t, xyl[i].x, xyl[i].y, static_cast<int>(xyl[i].w));
}

// tex.cube.v4.f32.f32
extern "C" __global__ void sample_cube(cudaTextureObject_t t, const float4* dir, float* out,
                                       int n) {
  INDEX;
  out[i] = texCubemap<float>(t, dir[i].x, dir[i].y, dir[i].z);
}

// tld4.r.2d and tld4.a.2d (.v4.f32.f32)
extern "C" __global__ void gather_2d(cudaTextureObject_t t, const float2* xy, float4* out, int n) {
  INDEX;
  out[2 * i] = tex2Dgather<float4>(t, xy[i].x, xy[i].y, 0);
  out[2 * i + 1] = tex2Dgather<float4>(t, xy[i].x, xy[i].y, 3);
}

// tld4.g.2d.v4.s32.f32
extern "C" __global__ void gather_2d_int(cudaTextureObject_t t, const float2* xy, int4* out,
                                         int n) {
  INDEX;
  out[i] = tex2Dgather<int4>(t, xy[i].x, xy[i].y, 1);
}

// CUDA has no intrinsics for txq/suq on objects; kernels use inline PTX.
extern "C" __global__ void query(cudaTextureObject_t t, cudaSurfaceObject_t s, int* out) {
  asm("txq.width.b32 %0, [%1];" : "=r"(out[0]) : "l"(t));
  asm("txq.height.b32 %0, [%1];" : "=r"(out[1]) : "l"(t));
  asm("txq.depth.b32 %0, [%1];" : "=r"(out[2]) : "l"(t));
  asm("txq.channel_data_type.b32 %0, [%1];" : "=r"(out[3]) : "l"(t));
  asm("txq.channel_order.b32 %0, [%1];" : "=r"(out[4]) : "l"(t));
  asm("txq.normalized_coords.b32 %0, [%1];" : "=r"(out[5]) : "l"(t));
  asm("txq.filter_mode.b32 %0, [%1];" : "=r"(out[6]) : "l"(t));
  asm("txq.addr_mode_0.b32 %0, [%1];" : "=r"(out[7]) : "l"(t));
  asm("txq.addr_mode_1.b32 %0, [%1];" : "=r"(out[8]) : "l"(t));
  asm("txq.array_size.b32 %0, [%1];" : "=r"(out[9]) : "l"(t));
  asm("txq.num_mipmap_levels.b32 %0, [%1];" : "=r"(out[10]) : "l"(t));
  asm("txq.level.width.b32 %0, [%1], %2;" : "=r"(out[11]) : "l"(t), "r"(1));
  asm("suq.width.b32 %0, [%1];" : "=r"(out[12]) : "l"(s));
  asm("suq.height.b32 %0, [%1];" : "=r"(out[13]) : "l"(s));
  asm("suq.depth.b32 %0, [%1];" : "=r"(out[14]) : "l"(s));
  asm("suq.array_size.b32 %0, [%1];" : "=r"(out[15]) : "l"(s));
  asm("suq.channel_data_type.b32 %0, [%1];" : "=r"(out[16]) : "l"(s));
  asm("suq.memory_layout.b32 %0, [%1];" : "=r"(out[17]) : "l"(s));
}

// sust.b.2d.b32.trap / suld.b.2d.b32.trap; x is scaled to bytes as CUDA code must.
extern "C" __global__ void surf_write_2d(cudaSurfaceObject_t s, const float* in, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) surf2Dwrite(in[y * w + x] * 2.0f, s, x * 4, y);
}
extern "C" __global__ void surf_read_2d(cudaSurfaceObject_t s, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) out[y * w + x] = surf2Dread<float>(s, x * 4, y);
}

// x in bytes, unscaled: the caller picks in- and out-of-range positions.
extern "C" __global__ void surf_read_modes(cudaSurfaceObject_t s, int x, int y, float* out) {
  out[0] = surf2Dread<float>(s, x, y, cudaBoundaryModeZero);
  out[1] = surf2Dread<float>(s, x, y, cudaBoundaryModeClamp);
}
extern "C" __global__ void surf_read_trap(cudaSurfaceObject_t s, int x, int y, float* out) {
  out[0] = surf2Dread<float>(s, x, y);
}
extern "C" __global__ void surf_write_modes(cudaSurfaceObject_t s, int x, int y, float v) {
  surf2Dwrite(v, s, x, y, cudaBoundaryModeZero);
  surf2Dwrite(v + 1.0f, s, x, y, cudaBoundaryModeClamp);
}

// sust/suld .b.1d.v4.b8: writes value i at element i, reads element n-1-i back.
extern "C" __global__ void surf_1d_uchar4(cudaSurfaceObject_t s, uchar4* out, int n) {
  INDEX;
  surf1Dwrite(make_uchar4(i, i + 1, i + 2, 255 - i), s, i * 4);
  __syncthreads();
  out[i] = surf1Dread<uchar4>(s, (n - 1 - i) * 4);
}

// sust/suld .b.3d.v4.b32 at (i % w, i / w % h, i / (w*h)).
extern "C" __global__ void surf_3d_float4(cudaSurfaceObject_t s, float4* out, int w, int h, int n) {
  INDEX;
  int x = i % w, y = i / w % h, z = i / (w * h);
  surf3Dwrite(make_float4(x, y, z, i), s, x * 16, y, z);
  __syncthreads();
  out[i] = surf3Dread<float4>(s, x * 16, y, z);
}

// sust/suld .b.a2d.v2.b16 at (i % w, i / w % h) of layer i / (w*h).
extern "C" __global__ void surf_2d_layered_short2(cudaSurfaceObject_t s, short2* out, int w, int h,
                                                  int n) {
  INDEX;
  int x = i % w, y = i / w % h, layer = i / (w * h);
  surf2DLayeredwrite(make_short2(i, -i), s, x * 4, y, layer);
  __syncthreads();
  out[i] = surf2DLayeredread<short2>(s, x * 4, y, layer);
}
