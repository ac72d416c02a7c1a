// Coverage corpus: the intrinsics, math library calls, atomics, memory forms and warp
// primitives that CUDA samples and typical user code use. Compiled for the default PTX target
// and again with -G (coverage_g), and both run through the interpreter by coverage_test.cc.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace cg = cooperative_groups;

// ---- integer intrinsics: out[i * 32 + k]
extern "C" __global__ void int_intrinsics(const unsigned* x, const unsigned* y,
                                          unsigned long long* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned a = x[i], b = y[i];
  int sa = (int)a, sb = (int)b;
  unsigned long long la = ((unsigned long long)a << 32) | b;
  unsigned long long lb = ((unsigned long long)b << 29) ^ a;
  unsigned long long* o = out + i * 32;
  o[0] = __brev(a);
  o[1] = __brevll(la);
  o[2] = __clz(sa);
  o[3] = __clzll((long long)la);
  o[4] = __popc(a);
  o[5] = __popcll(la);
  o[6] = __ffs(sa);
  o[7] = __ffsll((long long)lb);
  o[8] = __byte_perm(a, b, b & 0x7777);
  o[9] = __funnelshift_l(a, b, sb);
  o[10] = __funnelshift_r(a, b, sb);
  o[11] = __funnelshift_lc(a, b, sb & 63);
  o[12] = __funnelshift_rc(a, b, sb & 63);
  o[13] = (unsigned)__mul24(sa, sb);
  o[14] = __umul24(a, b);
  o[15] = __umulhi(a, b);
  o[16] = (unsigned)__mulhi(sa, sb);
  o[17] = __umul64hi(la, lb);
  o[18] = (unsigned long long)__mul64hi((long long)la, (long long)lb);
  o[19] = __sad(sa, sb, 7u);
  o[20] = __usad(a, b, 9u);
  o[21] = (unsigned)__dp4a(sa, sb, 100);
  o[22] = __dp4a(a, b, 5u);
  o[23] = (unsigned)__dp2a_lo(sa, sb, -3);
  o[24] = __dp2a_hi(a, b, 11u);
  o[25] = (unsigned)__hadd(sa, sb);
  o[26] = (unsigned)__rhadd(sa, sb);
  o[27] = __uhadd(a, b);
  o[28] = __urhadd(a, b);
  o[29] = (a >> (b & 7)) & ((1u << ((b >> 8) & 15)) - 1);  // bfe pattern
  o[30] = (unsigned)(((int)(a << 3)) >> 11);
  o[31] = (a & 0xff00ff00u) | ((b << 4) & 0x00ff00ffu);  // lop3 / bfi pattern
}

// ---- SIMD video intrinsics: out[i * 12 + k]
extern "C" __global__ void simd_intrinsics(const unsigned* x, const unsigned* y, unsigned* out,
                                           int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned a = x[i], b = y[i];
  unsigned* o = out + i * 12;
  o[0] = __vadd2(a, b);
  o[1] = __vadd4(a, b);
  o[2] = __vsub4(a, b);
  o[3] = __vabsdiffu4(a, b);
  o[4] = __vmaxu4(a, b);
  o[5] = __vmins2(a, b);
  o[6] = __vcmpeq4(a, b);
  o[7] = __vcmpgtu2(a, b);
  o[8] = __vavgu4(a, b);
  o[9] = __vsads4(a, b);
  o[10] = __vaddss2(a, b);
  o[11] = __vsetltu4(a, b);
}

// ---- float -> int / float -> float conversions: out[i * 40 + k] (bit patterns)
extern "C" __global__ void conversions(const float* x, const double* dx, unsigned long long* out,
                                       int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float f = x[i];
  double d = dx[i];
  unsigned long long* o = out + i * 40;
  o[0] = (unsigned)__float2int_rn(f);
  o[1] = (unsigned)__float2int_rz(f);
  o[2] = (unsigned)__float2int_rd(f);
  o[3] = (unsigned)__float2int_ru(f);
  o[4] = __float2uint_rn(f);
  o[5] = __float2uint_rd(f);
  o[6] = (unsigned long long)__float2ll_rn(f);
  o[7] = __float2ull_ru(f);
  o[8] = (unsigned)__double2int_rn(d);
  o[9] = (unsigned)__double2int_rd(d);
  o[10] = (unsigned long long)__double2ll_ru(d);
  o[11] = __double2ull_rz(d);
  o[12] = __float_as_uint(__int2float_rn((int)(d * 1e6)));
  o[13] = __float_as_uint(__int2float_rz((int)(d * 1e6) | 0x1000001));
  o[14] = __float_as_uint(__uint2float_rd(0xffffff01u ^ (unsigned)i));
  o[15] = __float_as_uint(__ll2float_ru((long long)(d * 1e12)));
  o[16] = __float_as_uint(__double2float_rn(d));
  o[17] = __float_as_uint(__double2float_rz(d));
  o[18] = __float_as_uint(__double2float_rd(d));
  o[19] = __float_as_uint(__double2float_ru(d));
  o[20] = __float_as_uint(rintf(f));
  o[21] = __float_as_uint(truncf(f));
  o[22] = __float_as_uint(floorf(f));
  o[23] = __float_as_uint(ceilf(f));
  o[24] = __float_as_uint(roundf(f));
  o[25] = (unsigned long long)lrintf(f);
  o[26] = (unsigned long long)llroundf(f);
  o[27] = __float_as_uint(__saturatef(f));
  o[28] = __double_as_longlong(rint(d));
  o[29] = __double_as_longlong(round(d));
  o[30] = __double_as_longlong(trunc(d));
  o[31] = (unsigned)__double2hiint(d);
  o[32] = (unsigned)__double2loint(d);
  o[33] = __double_as_longlong(__hiloint2double(__double2hiint(d), __double2loint(d) ^ 1));
  o[34] = (unsigned long long)(long long)f;
  o[35] = (unsigned long long)(unsigned char)(int)f;
  o[36] = (unsigned long long)(short)f;
  o[37] = __double_as_longlong((double)(unsigned long long)(d * 1e15));
  o[38] = __float_as_uint((float)(long long)(d * 1e15));
  o[39] = __double_as_longlong(__ull2double_rd((unsigned long long)(d * 1e18) | 1));
}

// ---- correctly / directed rounded arithmetic intrinsics: out[i * 24 + k]
extern "C" __global__ void rounded_arith(const float* x, const float* y, const double* dx,
                                         const double* dy, unsigned long long* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i];
  double c = dx[i], e = dy[i];
  unsigned long long* o = out + i * 24;
  o[0] = __float_as_uint(__fadd_rz(a, b));
  o[1] = __float_as_uint(__fadd_ru(a, b));
  o[2] = __float_as_uint(__fsub_rd(a, b));
  o[3] = __float_as_uint(__fmul_ru(a, b));
  o[4] = __float_as_uint(__fmul_rz(a, b));
  o[5] = __float_as_uint(__fmaf_rd(a, b, 1.0f));
  o[6] = __float_as_uint(__fdiv_rn(a, b));
  o[7] = __float_as_uint(__fdiv_rz(a, b));
  o[8] = __float_as_uint(__frcp_rn(b));
  o[9] = __float_as_uint(__frcp_ru(b));
  o[10] = __float_as_uint(__fsqrt_rn(fabsf(a)));
  o[11] = __float_as_uint(__fsqrt_rd(fabsf(a)));
  o[12] = __double_as_longlong(__dadd_rz(c, e));
  o[13] = __double_as_longlong(__dmul_ru(c, e));
  o[14] = __double_as_longlong(__ddiv_rd(c, e));
  o[15] = __double_as_longlong(__drcp_rn(e));
  o[16] = __double_as_longlong(__dsqrt_ru(fabs(c)));
  o[17] = __double_as_longlong(__fma_rz(c, e, 0.5));
  o[18] = __float_as_uint(a / b);
  o[19] = __double_as_longlong(c / e);
  o[20] = __float_as_uint(sqrtf(fabsf(b)));
  o[21] = __double_as_longlong(sqrt(fabs(e)));
  o[22] = __float_as_uint(1.0f / b);
  o[23] = __double_as_longlong(1.0 / e);
}

// ---- float classification, NaN rules, sign: out[i * 16 + k]
extern "C" __global__ void float_classify(const float* x, const float* y, const double* dx,
                                          unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i];
  double d = dx[i];
  unsigned* o = out + i * 16;
  o[0] = isnan(a);
  o[1] = isinf(a);
  o[2] = isfinite(a);
  o[3] = signbit(a) != 0;
  o[4] = isnan(d);
  o[5] = isinf(d);
  o[6] = isfinite(d);
  o[7] = signbit(d) != 0;
  o[8] = __float_as_uint(fminf(a, b));
  o[9] = __float_as_uint(fmaxf(a, b));
  o[10] = __float_as_uint(copysignf(a, b));
  o[11] = (unsigned)(__double_as_longlong(fmin(d, (double)b)) >> 32);
  o[12] = (unsigned)(__double_as_longlong(copysign(d, (double)a)) >> 32);
  o[13] = __float_as_uint(fabsf(a) + fdimf(a, b));
  o[14] = (fabsf(a) >= 1.17549435e-38f) && isfinite(a);
  o[15] = __isnanf(b) | (__isinff(b) << 1) | (__finitef(b) << 2);
}

// ---- libdevice expansions, float: out[i * 24 + k]
extern "C" __global__ void libm_f32(const float* x, const float* y, float* out, int* iout, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i];
  float* o = out + i * 24;
  int e = 0;
  o[0] = frexpf(a, &e);
  iout[i * 4 + 0] = e;
  o[1] = ldexpf(a, (int)b);
  float ip = 0;
  o[2] = modff(a, &ip);
  o[3] = ip;
  o[4] = fmodf(a, b);
  o[5] = remainderf(a, b);
  int q = 0;
  o[6] = remquof(a, b, &q);
  iout[i * 4 + 1] = q & 7;
  o[7] = erff(a * 0.1f);
  o[8] = erfcf(a * 0.1f);
  o[9] = lgammaf(fabsf(a) + 0.5f);
  o[10] = tgammaf(fabsf(a) * 0.1f + 0.5f);
  o[11] = expf(a * 0.05f);
  o[12] = exp10f(a * 0.01f);
  o[13] = log1pf(fabsf(a));
  o[14] = expm1f(a * 0.01f);
  o[15] = cbrtf(a);
  o[16] = hypotf(a, b);
  o[17] = atan2f(a, b);
  o[18] = powf(fabsf(a) + 1.0f, b * 0.1f);
  o[19] = sinpif(a * 0.01f);
  o[20] = asinhf(a);
  o[21] = logbf(a);
  iout[i * 4 + 2] = ilogbf(a);
  o[22] = nextafterf(a, b);
  o[23] = fmaf(a, b, -a);
  float s, c;
  sincosf(a, &s, &c);
  iout[i * 4 + 3] = __float_as_int(s + c);
}

// ---- libdevice expansions, double: out[i * 16 + k]
extern "C" __global__ void libm_f64(const double* x, const double* y, double* out, int* iout,
                                    int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double a = x[i], b = y[i];
  double* o = out + i * 16;
  int e = 0;
  o[0] = frexp(a, &e);
  iout[i] = e;
  o[1] = ldexp(a, (int)b);
  o[2] = fmod(a, b);
  o[3] = remainder(a, b);
  o[4] = erf(a * 0.1);
  o[5] = lgamma(fabs(a) + 0.5);
  o[6] = tgamma(fabs(a) * 0.1 + 0.5);
  o[7] = exp(a * 0.05);
  o[8] = log(fabs(a) + 1.0);
  o[9] = sin(a);
  o[10] = cos(b);
  o[11] = pow(fabs(a) + 1.0, b * 0.1);
  o[12] = atan2(a, b);
  o[13] = cbrt(a);
  o[14] = rsqrt(fabs(a) + 1.0);
  double ip = 0;
  o[15] = modf(a, &ip) + ip * 0.5;
}

// ---- __half / __half2: out[i * 24 + k] (bit patterns)
extern "C" __global__ void half_arith(const float* x, const float* y, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half a = __float2half_rn(x[i]), b = __float2half_rn(y[i]);
  __half2 a2 = __halves2half2(a, b), b2 = __floats2half2_rn(y[i], x[i] * 0.5f);
  unsigned* o = out + i * 24;
  o[0] = __half_as_ushort(__hadd(a, b));
  o[1] = __half_as_ushort(__hsub(a, b));
  o[2] = __half_as_ushort(__hmul(a, b));
  o[3] = __half_as_ushort(__hfma(a, b, __float2half(1.5f)));
  o[4] = __half_as_ushort(__hneg(a));
  o[5] = __half_as_ushort(__habs(a));
  o[6] = __half_as_ushort(__hmax(a, b));
  o[7] = __half_as_ushort(__hmin(a, b));
  o[8] = __heq(a, b) | (__hlt(a, b) << 1) | (__hgt(a, b) << 2) | (__hisnan(a) << 3) |
         (__hge(a, b) << 4) | (__hisinf(b) << 5);
  __half2 s = __hadd2(a2, b2);
  o[9] = *reinterpret_cast<unsigned*>(&s);
  __half2 m = __hmul2(a2, b2);
  o[10] = *reinterpret_cast<unsigned*>(&m);
  __half2 f = __hfma2(a2, b2, __float2half2_rn(0.25f));
  o[11] = *reinterpret_cast<unsigned*>(&f);
  __half2 mx = __hmax2(a2, b2);
  o[12] = *reinterpret_cast<unsigned*>(&mx);
  __half2 sb = __hsub2(a2, b2);
  o[13] = *reinterpret_cast<unsigned*>(&sb);
  float2 back = __half22float2(a2);
  o[14] = __float_as_uint(back.x + back.y);
  o[15] = __half_as_ushort(__low2half(b2)) | (__half_as_ushort(__high2half(b2)) << 16);
  o[16] = __half_as_ushort(__hdiv(a, b));
  o[17] = __half_as_ushort(hsqrt(__habs(a)));
  o[18] = __hbeq2(a2, a2) | (__hblt2(a2, b2) << 1);
  o[19] = (unsigned)__half2int_rn(a) & 0xffff;
  o[20] = __half_as_ushort(__int2half_rn(i * 3 - 50));
  __half2 neg = __hneg2(a2);
  o[21] = *reinterpret_cast<unsigned*>(&neg);
  o[22] = __half_as_ushort(__float2half_rz(x[i] * 1.001f));
  o[23] = __float_as_uint(__low2float(a2) * __high2float(b2));
}

// ---- __nv_bfloat16: out[i * 8 + k] (bit patterns)
extern "C" __global__ void bf16_arith(const float* x, const float* y, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __nv_bfloat16 a = __float2bfloat16(x[i]), b = __float2bfloat16_rz(y[i]);
  unsigned* o = out + i * 8;
  o[0] = __bfloat16_as_ushort(a);
  o[1] = __bfloat16_as_ushort(b);
  o[2] = __float_as_uint(__bfloat162float(a) + __bfloat162float(b));
  o[3] = __bfloat16_as_ushort(__hadd(a, b));
  o[4] = __bfloat16_as_ushort(__hmul(a, b));
  o[5] = __bfloat16_as_ushort(__hsub(a, b));
  __nv_bfloat162 p = __floats2bfloat162_rn(x[i], y[i]);
  o[6] = *reinterpret_cast<unsigned*>(&p);
  o[7] = __hlt(a, b);
}

// ---- atomics: one block; acc layout documented in coverage_test.cc
extern "C" __global__ void atomics_wide(int* i32, unsigned long long* u64, float* f32, double* f64,
                                        __half2* h2, __half* h1, unsigned short* u16, int* scoped) {
  int t = threadIdx.x;
  atomicAdd(&f64[0], 0.5 * t);
  atomicAdd(&f32[0], 1.0f);
  atomicExch(&f32[1], (float)t);
  atomicAdd(&u64[0], (unsigned long long)t << 33);
  atomicMin((long long*)&u64[1], -(long long)t);
  atomicMax(&u64[2], (unsigned long long)t * 3);
  atomicAnd(&u64[3], ~(1ull << t));
  atomicOr(&u64[4], 1ull << ((t + 20) & 63));
  atomicXor(&u64[5], (unsigned long long)t * t * 0x9E3779B97F4A7C15ull);
  // atomicCAS loop (64-bit): multiply accumulator.
  unsigned long long old = u64[6], assumed;
  do {
    assumed = old;
    old = atomicCAS(&u64[6], assumed, assumed * 3 + 1);
  } while (assumed != old);
  atomicInc((unsigned*)&i32[0], 10u);
  atomicDec((unsigned*)&i32[1], 7u);
  atomicMin(&i32[2], 100 - t);
  atomicMax((unsigned*)&i32[3], (unsigned)t * 5);
  int prev = atomicSub(&i32[4], 2);
  i32[8 + t] = prev;  // every prev distinct
  atomicAdd(&h2[0], __floats2half2_rn(1.0f, 0.5f));
  atomicAdd(&h1[0], __float2half(0.25f));
  unsigned short o16 = u16[0], a16;
  do {
    a16 = o16;
    o16 = atomicCAS(&u16[0], a16, (unsigned short)(a16 + 3));
  } while (a16 != o16);
  atomicAdd_block(&scoped[0], 1);
  atomicAdd_system(&scoped[1], 2);
  atomicExch_block(&scoped[2], 7);
  atomicCAS_system(&scoped[3], 0, 9);
  __threadfence();
  __threadfence_block();
  __threadfence_system();
  // Results of red-style atomics not used: nvcc emits red.*.
  atomicAdd(&i32[5], t);
  atomicOr(&i32[6], 1 << (t & 31));
}

// ---- shared-memory atomics on 64-bit and float
extern "C" __global__ void shared_atomics(unsigned long long* out, float* fout) {
  __shared__ unsigned long long s64[2];
  __shared__ float sf;
  __shared__ double sd;
  if (threadIdx.x == 0) {
    s64[0] = 0;
    s64[1] = ~0ull;
    sf = 0;
    sd = 0;
  }
  __syncthreads();
  atomicAdd(&s64[0], (unsigned long long)threadIdx.x << 32);
  atomicMin(&s64[1], (unsigned long long)threadIdx.x + 1000);
  atomicAdd(&sf, 0.5f);
  atomicAdd(&sd, 0.25);
  __syncthreads();
  if (threadIdx.x == 0) {
    out[0] = s64[0];
    out[1] = s64[1];
    fout[0] = sf;
    fout[1] = (float)sd;
  }
}

// ---- load/store forms
struct __align__(16) Quad {
  int a, b, c, d;
};

extern "C" __global__ void load_forms(const float4* f4, const int4* i4, const double2* d2,
                                      const uchar4* u4, const short2* s2, const char2* c2,
                                      const longlong2* l2, const __half2* h2, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float4 a = __ldg(&f4[i]);
  int4 b = __ldcg(&i4[i]);
  double2 c = __ldca(&d2[i]);
  uchar4 d = __ldg(&u4[i]);
  short2 e = __ldcs(&s2[i]);
  char2 f = __ldlu(&c2[i]);
  longlong2 g = __ldcv(&l2[i]);
  __half2 h = __ldg(&h2[i]);
  volatile const float* vf = reinterpret_cast<volatile const float*>(f4);
  float* o = out + i * 8;
  o[0] = a.x + a.y * 2 + a.z * 3 + a.w * 4;
  o[1] = (float)(b.x - b.y + b.z - b.w);
  o[2] = (float)(c.x * c.y);
  o[3] = (float)(d.x + d.y * 3 + d.z * 5 + d.w * 7);
  o[4] = (float)(e.x * e.y) + (float)(f.x - f.y);
  o[5] = (float)(g.x % 1000 + g.y % 1000);
  o[6] = __low2float(h) - __high2float(h);
  o[7] = vf[i * 4 + 1];
}

extern "C" __global__ void store_forms(float4* f4, int2* i2, double2* d2, uchar4* u4, short4* s4,
                                       Quad* q, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __stcg(&f4[i], make_float4(i, i + 0.5f, -i, 2.0f * i));
  __stcs(&i2[i], make_int2(i * 7, -i));
  __stwb(&d2[i], make_double2(i * 0.25, 1e10 + i));
  __stwt(&u4[i], make_uchar4(i, i + 1, 255 - i, 7));
  s4[i] = make_short4(-i, i * 100, 3, -32768 + i);
  q[i] = Quad{i, i * 2, i * 3, i * 4};
}

// ---- misc special registers and sync: out[t * 8 + k]
extern "C" __global__ void specials(unsigned long long* out) {
  int t = threadIdx.x;
  long long c0 = clock64();
  unsigned c32 = (unsigned)clock();
  unsigned long long gt;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt));
  __nanosleep(100);
  __syncwarp();
  __syncwarp(0x0000ffffu | (0xffff0000u));
  long long c1 = clock64();
  unsigned warpid, smid, lane;
  asm("mov.u32 %0, %%warpid;" : "=r"(warpid));
  asm("mov.u32 %0, %%smid;" : "=r"(smid));
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  asm volatile("prefetch.global.L2 [%0];" ::"l"(out));
  asm volatile("prefetchu.L1 [%0];" ::"l"(out));
  unsigned long long* o = out + t * 8;
  o[0] = c1 > c0;
  o[1] = c32 != 0xffffffffu;
  o[2] = gt != 0;
  o[3] = lane;
  o[4] = smid < 1024;
  o[5] = warpid < 64;
  unsigned lt;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
  o[6] = lt;
  o[7] = __activemask();
}

// ---- a wait of `cycles` clocks, as programs write one: out[t] = the clocks it saw pass
extern "C" __global__ void clock_wait(long long cycles, unsigned long long* out) {
  long long start = clock64();
  long long now = start;
  while (now - start < cycles) now = clock64();
  out[blockIdx.x * blockDim.x + threadIdx.x] = (unsigned long long)(now - start);
}

// ---- warp primitives: out[t * 16 + k]
extern "C" __global__ void warp_ops(const int* in, int* out) {
  int t = threadIdx.x;
  int lane = t & 31;
  int v = in[t];
  int* o = out + t * 16;
  o[0] = __shfl_sync(0xffffffffu, v, lane + 3, 8);
  o[1] = __shfl_up_sync(0xffffffffu, v, 2, 16);
  o[2] = __shfl_down_sync(0xffffffffu, v, 3, 8);
  o[3] = __shfl_xor_sync(0xffffffffu, v, 5, 16);
  float fv = (float)v * 0.5f;
  o[4] = (int)(__shfl_down_sync(0xffffffffu, fv, 1) * 2.0f);
  long long lv = ((long long)v << 32) | (unsigned)lane;
  long long ls = __shfl_xor_sync(0xffffffffu, lv, 1);
  o[5] = (int)(ls >> 32) + (int)(ls & 0xffffffff);
  double dv = v * 0.25;
  o[6] = (int)(__shfl_sync(0xffffffffu, dv, 0) * 4.0);
  o[7] = (int)__match_any_sync(0xffffffffu, v & 3);
  int pred = 0;
  o[8] = (int)__match_all_sync(0xffffffffu, v & 0, &pred);
  o[9] = pred;
  o[10] = (int)__match_any_sync(0xffffffffu, (long long)(v & 1) << 40);
  o[11] = (int)__ballot_sync(0xffffffffu, v > 50);
  o[12] = __any_sync(0xffffffffu, v == 17) | (__all_sync(0xffffffffu, v >= 0) << 1) |
          (__uni_sync(0xffffffffu, lane < 40) << 2);
  if (lane < 20) {
    unsigned m = __activemask();
    o[13] = __popc(m) + __shfl_sync(m, v, 19);
  } else {
    o[13] = -1;
  }
  __half2 h = __floats2half2_rn(v, -v);
  __half2 hs = __shfl_xor_sync(0xffffffffu, h, 2);
  o[14] = (int)__low2float(hs) * 1000 + (int)__high2float(hs);
  o[15] = __syncthreads_or(v == 3) + 2 * __syncthreads_and(v >= 0) + 4 * __syncthreads_count(v & 1);
}

// ---- cooperative groups: out[t * 8 + k]
extern "C" __global__ void coop_groups(const int* in, int* out) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  cg::thread_block_tile<8> tile8 = cg::tiled_partition<8>(block);
  int t = block.thread_rank();
  int v = in[t];
  int* o = out + t * 8;
  o[0] = cg::reduce(warp, v, cg::plus<int>());
  o[1] = cg::reduce(tile8, v, cg::greater<int>());
  o[2] = tile8.shfl_down(v, 1);
  o[3] = (int)warp.ballot(v & 1);
  o[4] = tile8.meta_group_rank() * 100 + tile8.thread_rank();
  cg::thread_group dyn = cg::tiled_partition(block, 4);
  o[5] = dyn.thread_rank() + 10 * (int)dyn.size();
  block.sync();
  if (v & 1) {
    cg::coalesced_group odd = cg::coalesced_threads();
    o[6] = odd.thread_rank() * 100 + odd.size();
  } else {
    o[6] = -1;
  }
  o[7] = cg::exclusive_scan(warp, v);
}

// ---- device function calls with many parameters and struct returns
struct Big {
  double d;
  int k[5];
  float f;
};

__device__ __noinline__ Big make_big(int a, long long b, float c, double d, char e, short f,
                                     unsigned g, float h, double i2, int j, int k, int l) {
  Big r;
  r.d = d * i2 + b;
  for (int m = 0; m < 5; ++m) r.k[m] = a * m + e + f + (int)g + j * k - l;
  r.f = c * h;
  return r;
}

__device__ __noinline__ float2 pair_of(float x) { return make_float2(x * 2, x + 1); }

extern "C" __global__ void calls(double* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Big b = make_big(i, 1000000000000ll + i, i * 0.5f, i * 1.5, (char)(i & 0x7f), (short)-i, 7u * i,
                   3.0f, 2.0, i + 1, i + 2, 5);
  float2 p = pair_of((float)i);
  out[i * 4 + 0] = b.d;
  out[i * 4 + 1] = b.k[0] + b.k[1] + b.k[2] + b.k[3] + b.k[4];
  out[i * 4 + 2] = b.f;
  out[i * 4 + 3] = p.x * p.y;
}

// ---- switch tables, local arrays with dynamic indexing
extern "C" __global__ void control(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = in[i];
  int r;
  switch (v & 15) {
    case 0:
      r = 11;
      break;
    case 1:
      r = v * 3;
      break;
    case 2:
      r = v - 7;
      break;
    case 3:
      r = v ^ 0x55;
      break;
    case 4:
      r = -v;
      break;
    case 5:
      r = v << 2;
      break;
    case 6:
      r = v / 3;
      break;
    case 7:
      r = 123456;
      break;
    case 8:
      r = v % 5;
      break;
    case 9:
      r = v * v;
      break;
    case 10:
      r = 1;
      break;
    case 11:
      r = v + 100;
      break;
    default:
      r = 0;
      break;
  }
  int arr[37];
  for (int k = 0; k < 37; ++k) arr[k] = k * v;
  out[i * 2] = r;
  out[i * 2 + 1] = arr[(v * 7) % 37 < 0 ? 0 : (v * 7) % 37] + arr[i % 37];
}

// ---- 3D grid with large dimensions: each thread writes its linear id
extern "C" __global__ void grid3d(unsigned* out, unsigned long long* sum) {
  unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
  unsigned z = blockIdx.z * blockDim.z + threadIdx.z;
  unsigned w = gridDim.x * blockDim.x, h = gridDim.y * blockDim.y;
  unsigned id = (z * h + y) * w + x;
  out[id] = id ^ 0x5a5a;
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) atomicAdd(sum, 1ull);
}

// ---- device-side malloc/free
extern "C" __global__ void device_malloc(int* out, int n) {
  int t = threadIdx.x;
  int* p = static_cast<int*>(malloc(n * sizeof(int)));
  if (!p) {
    out[t] = -1;
    return;
  }
  for (int k = 0; k < n; ++k) p[k] = t * k;
  int s = 0;
  for (int k = 0; k < n; ++k) s += p[k];
  free(p);
  out[t] = s;
}

// ---- variable-length stack allocation
extern "C" __global__ void stack_alloca(const int* in, int* out) {
  int t = threadIdx.x;
  int n = in[t];
  int* buf = static_cast<int*>(alloca(n * sizeof(int)));
  for (int k = 0; k < n; ++k) buf[k] = k + t;
  int s = 0;
  for (int k = 0; k < n; ++k) s += buf[(k * 5) % n];
  out[t] = s;
}

// ---- function pointers (indirect calls)
typedef float (*BinaryOp)(float, float);
__device__ __noinline__ float op_add(float a, float b) { return a + b; }
__device__ __noinline__ float op_mul(float a, float b) { return a * b; }
__device__ __noinline__ float op_max(float a, float b) { return fmaxf(a, b) * 2.0f; }
__device__ BinaryOp g_ops[3] = {op_add, op_mul, op_max};

extern "C" __global__ void function_pointers(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  BinaryOp local[3] = {op_max, op_add, op_mul};
  out[i * 2] = g_ops[i % 3](x[i], 3.0f);
  out[i * 2 + 1] = local[(i / 3) % 3](x[i], -1.5f);
}
