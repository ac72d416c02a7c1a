// Texture sampling, surface addressing and the txq/suq attributes, on the TextureObject /
// SurfaceObject views the backend hands out (ptx.h). Internal to the interpreter: the executor
// resolves handles and registers, these functions do the arithmetic for one thread.
//
// Thread-safety: pure functions; they read texel memory (and ResolveSurface hands out a
// pointer for the caller to write through).
//
// Bounds: every texel or surface access is first brought into range by the address mode or
// clamp mode, then checked once more against TexelLayout::bytes, so a layout whose sizes and
// pitches disagree with its byte count yields an error here instead of touching other memory.
#pragma once

#include <cstdint>
#include <string>

#include "server/backend/sim/ptx/program.h"
#include "server/backend/sim/ptx/ptx.h"

namespace cuwire::ptx {

// Checks what the sampling arithmetic relies on (non-zero extents, 1/2/4 channels, a cube's six
// faces, data for non-empty memory); on failure says why in *why.
bool ValidTexelLayout(const TexelLayout& layout, ResourceShape shape, std::string* why);
// The same for an object's layouts: a texture's mipmap levels each (at most 32, in level 0's
// format), a surface's one.
bool ValidObject(const TextureObject& t, std::string* why);
bool ValidObject(const SurfaceObject& s, std::string* why);

// One lookup's coordinates, as the tex/tld4 instruction supplies them. The object's shape says
// which are used: x (1D), x y (2D), x y z (3D; a cube map's direction), plus `layer` for layered
// shapes and cube-map arrays.
struct TexCoord {
  float f[3] = {0, 0, 0};    // float coordinates (normalized or not, as the object says)
  int32_t i[3] = {0, 0, 0};  // integer coordinates: texel indices, never filtered
  bool integer = false;
  uint32_t layer = 0;
  // Mipmap level selection (ptx.h "Mipmaps"): kLevel reads lod (or level, for an .s32 lod),
  // kGrad the gradients of the coordinates, in the coordinates' units.
  TexLod lod_mode = TexLod::kBase;
  float lod = 0;
  float dpdx[3] = {0, 0, 0};
  float dpdy[3] = {0, 0, 0};
};

// tex: the four 32-bit result components (float bits for float reads, integers otherwise).
// Returns false if a texel address fell outside texels.bytes.
bool SampleTexture(const TextureObject& t, const TexCoord& c, uint32_t out[4]);

// tld4: component `comp` (0..3) of the four texels bilinear filtering would blend, in PTX order
// (counter-clockwise from lower left): (i, j+1), (i+1, j+1), (i+1, j), (i, j), where (i, j) is
// the texel at the footprint's smallest x and y. Returns false as SampleTexture does.
bool GatherTexture(const TextureObject& t, const TexCoord& c, int comp, uint32_t out[4]);

// txq (lod: txq.level's level of detail; 0 otherwise) and suq. Attributes a surface or texture
// does not have read 0; see ptx.h for the encodings.
uint32_t QueryTexture(const TextureObject& t, TexQuery q, uint32_t lod);
uint32_t QuerySurface(const SurfaceObject& s, TexQuery q);

// suld/sust coordinates: x in bytes (not scaled), y, z in elements; layer for arrays.
struct SurfaceCoord {
  int32_t x = 0, y = 0, z = 0;
  uint32_t layer = 0;
};

enum class SurfaceAccess : uint8_t {
  kOk,             // *host points at `size` bytes to read or write
  kSkip,           // out of range under .zero (or .clamp with nothing to clamp to): reads
                   // return 0, writes are dropped
  kOutOfRange,     // out of range under .trap
  kMisaligned,     // x is not a multiple of the access size
  kOutsideMemory,  // the layout's sizes point past texels.bytes
};

// Applies `mode` to an access of `size` bytes (a power of two) at `c`.
SurfaceAccess ResolveSurface(const SurfaceObject& s, const SurfaceCoord& c, uint32_t size,
                             SurfaceClamp mode, uint8_t** host);

}  // namespace cuwire::ptx
