// Field-by-field conversions between the driver's copy descriptors (CUDA_MEMCPY2D, CUDA_MEMCPY3D,
// CUDA_MEMCPY3D_PEER), shared by the client (2D and peer copies travel as a CUDA_MEMCPY3D), the
// server (which runs a 2D copy as the 2D call it came from) and the sim backend (which runs every
// 3D copy as a peer copy).
#pragma once

#include <cuda.h>

namespace cuwire {

// The fields all three descriptors have: each side's position, memory type, pointers and pitch,
// and the extent in bytes and rows. Fields `to` has and `from` lacks are left as they are.
template <typename To, typename From>
void copy_2d_fields(const From& from, To* to) {
  to->srcXInBytes = from.srcXInBytes;
  to->srcY = from.srcY;
  to->srcMemoryType = from.srcMemoryType;
  to->srcHost = from.srcHost;
  to->srcDevice = from.srcDevice;
  to->srcArray = from.srcArray;
  to->srcPitch = from.srcPitch;
  to->dstXInBytes = from.dstXInBytes;
  to->dstY = from.dstY;
  to->dstMemoryType = from.dstMemoryType;
  to->dstHost = from.dstHost;
  to->dstDevice = from.dstDevice;
  to->dstArray = from.dstArray;
  to->dstPitch = from.dstPitch;
  to->WidthInBytes = from.WidthInBytes;
  to->Height = from.Height;
}

// Those and the third dimension: every field CUDA_MEMCPY3D and CUDA_MEMCPY3D_PEER share (all but
// the peer form's contexts).
template <typename To, typename From>
void copy_3d_fields(const From& from, To* to) {
  copy_2d_fields(from, to);
  to->srcZ = from.srcZ;
  to->srcLOD = from.srcLOD;
  to->srcHeight = from.srcHeight;
  to->dstZ = from.dstZ;
  to->dstLOD = from.dstLOD;
  to->dstHeight = from.dstHeight;
  to->Depth = from.Depth;
}

}  // namespace cuwire
