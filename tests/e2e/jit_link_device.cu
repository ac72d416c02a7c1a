// The other half of jit_link.cu's program: a device function and a variable, with a printf
// string of its own (each module's `$str` must stay apart when they are linked).
#include <cstdio>

__device__ int offset_value = 11;

__device__ int scale(int x) {
  if (x == -12345) printf("scale: %d\n", x);
  return 3 * x;
}
