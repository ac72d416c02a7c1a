// Syntax tree of a PTX module, as read from text. Internal to the interpreter: the decoder
// (decoder.cc) turns it into executable programs; nothing outside server/backend/sim/ptx sees it.
//
// Thread-safety: plain values, no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cuwire::ptx::ast {

struct Operand {
  enum class Kind : uint8_t {
    kName,     // register, special register, symbol or label: `name`
    kInt,      // integer literal: `imm` (two's complement of the written value)
    kFloat,    // 0f/0d hex literal or decimal float: `fval`, `fbits`, `fbits_width`
    kAddress,  // [name+imm] / [imm]: `name` may be empty
    kVector,   // {a, b, ...}: `elems`
    kList,     // (a, b, ...) in call: `elems`
  };
  Kind kind = Kind::kName;
  bool negated = false;  // `!%p`
  std::string name;
  std::string pair;  // second destination of `%r|%p` and `{..}|%p` forms
  int64_t imm = 0;
  double fval = 0;
  uint64_t fbits = 0;   // bits as written for 0f (32) / 0d (64) literals
  int fbits_width = 0;  // 0 for decimal literals
  std::vector<Operand> elems;
};

struct Instruction {
  int line = 0;
  std::string guard;  // predicate register, empty if unguarded
  bool guard_negated = false;
  std::string opcode;  // full dotted opcode, e.g. "ld.global.v2.f32"
  std::vector<Operand> operands;
};

// A variable declared with .reg/.shared/.local/.param/.global/.const.
struct Variable {
  int line = 0;
  std::string space;  // "reg", "shared", "local", "param", "global", "const"
  std::string type;   // "b32", "f32", "pred", ...
  std::string name;
  uint32_t align = 0;  // 0 = natural
  uint32_t vec = 1;    // .v2/.v4
  uint64_t count = 1;  // array elements (product of dimensions); 0 for `[]`
  bool is_array = false;
  bool is_unsized = false;  // `name[]` (extern shared)
  uint32_t reg_range = 0;   // .reg %r<N>: N registers named %r0..%r{N-1}
  bool is_extern = false;
  bool is_managed = false;    // `.attribute(.managed)`: a __managed__ variable
  std::vector<uint8_t> init;  // encoded initializer, little-endian elements
  bool has_init = false;
  // Initializer elements that name a symbol (a function, for tables of function pointers):
  // byte offset in `init` of the 8-byte element, and the name.
  std::vector<std::pair<uint64_t, std::string>> init_symbols;
};

struct BodyItem {
  enum class Kind : uint8_t { kInstruction, kLabel, kDeclaration, kBlockBegin, kBlockEnd };
  Kind kind = Kind::kInstruction;
  int line = 0;
  Instruction inst;   // kInstruction
  std::string label;  // kLabel
  Variable var;       // kDeclaration
};

struct Function {
  int line = 0;
  bool is_entry = false;
  bool has_body = false;  // false for prototypes and .extern declarations
  std::string name;
  std::vector<Variable> params;
  std::vector<Variable> returns;
  uint32_t max_threads = 0;  // product of .maxntid / .reqntid
  // .reqnctapercluster x[, y[, z]]: the cluster every launch has (0: none given);
  // .explicitcluster: the kernel must be launched with one.
  uint32_t cluster[3] = {0, 0, 0};
  bool explicit_cluster = false;
  std::vector<BodyItem> body;
};

struct Module {
  std::vector<Variable> variables;  // module scope: global, const, shared
  std::vector<Function> functions;  // in file order; may contain repeated names (prototypes)
};

// Parses PTX text. On failure returns false and sets *error to "line N: what".
bool Parse(std::string_view text, Module* out, std::string* error);

// Byte size of a PTX fundamental type name ("u32" -> 4, "pred" -> 1); 0 if unknown.
uint32_t TypeSize(std::string_view type);

}  // namespace cuwire::ptx::ast
