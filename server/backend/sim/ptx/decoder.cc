// Syntax tree -> Program: resolves register names to slots, immediates to constant slots,
// labels to pcs, variables to offsets in their state space, and opcode strings to Inst fields.

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "server/backend/sim/ptx/float16.h"
#include "server/backend/sim/ptx/program.h"
#include "server/backend/sim/ptx/ptx.h"

namespace cuwire::ptx {

Type TypeFromName(std::string_view n) {
  static const std::unordered_map<std::string_view, Type> kTypes = {
      {"b8", Type::kB8},         {"b16", Type::kB16},     {"b32", Type::kB32},
      {"b64", Type::kB64},       {"u8", Type::kU8},       {"u16", Type::kU16},
      {"u32", Type::kU32},       {"u64", Type::kU64},     {"s8", Type::kS8},
      {"s16", Type::kS16},       {"s32", Type::kS32},     {"s64", Type::kS64},
      {"f16", Type::kF16},       {"f16x2", Type::kF16x2}, {"bf16", Type::kBF16},
      {"bf16x2", Type::kBF16x2}, {"f32", Type::kF32},     {"f64", Type::kF64},
      {"pred", Type::kPred},     {"u16x2", Type::kU16x2}, {"s16x2", Type::kS16x2},
  };
  auto it = kTypes.find(n);
  return it == kTypes.end() ? Type::kNone : it->second;
}

namespace {

// A malformed module: fails Module::parse.
struct DecodeError {
  int line;
  std::string what;
};
// A well-formed instruction the interpreter does not implement: becomes Op::kUnsupported.
struct Unsupported {
  std::string what;
};

uint32_t AlignUp(uint64_t v, uint32_t a) {
  if (a == 0) a = 1;
  return static_cast<uint32_t>((v + a - 1) / a * a);
}

uint32_t VarAlign(const ast::Variable& v) {
  return v.align ? v.align : ast::TypeSize(v.type) * v.vec;
}
uint64_t VarSize(const ast::Variable& v) {
  return static_cast<uint64_t>(ast::TypeSize(v.type)) * v.vec * (v.is_array ? v.count : 1);
}

// Bounds that keep a hostile module from making launches allocate without limit: registers
// cost 256 bytes per slot per warp; shared/local/param variables are allocated per block/thread.
constexpr uint32_t kMaxSlots = 65536;  // cuSOLVER's largest kernels use over 16384
constexpr uint64_t kMaxSpaceBytes = 64u << 20;
constexpr size_t kMaxCallDepth = 255;
// Decoded instructions of a whole module, over all kernels (64 bytes each).
constexpr size_t kMaxModuleInsts = size_t{16} << 20;

// Strongly connected components of the call graph (Tarjan's algorithm, iterative so a long
// call chain in a hostile module cannot overflow the stack): function name -> component id.
// A call between two functions of one component is recursion.
std::map<std::string, uint32_t> CallGraphComponents(
    const std::map<std::string, const ast::Function*>& funcs) {
  std::vector<const ast::Function*> nodes;
  std::unordered_map<std::string_view, uint32_t> index_of;
  for (const auto& [name, f] : funcs) {
    if (!f->has_body) continue;
    index_of.emplace(name, static_cast<uint32_t>(nodes.size()));
    nodes.push_back(f);
  }
  std::vector<std::vector<uint32_t>> edges(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const ast::BodyItem& b : nodes[i]->body) {
      if (b.kind != ast::BodyItem::Kind::kInstruction || b.inst.opcode.rfind("call", 0) != 0)
        continue;
      for (const ast::Operand& o : b.inst.operands) {
        if (o.kind != ast::Operand::Kind::kName) continue;
        auto it = index_of.find(o.name);
        if (it != index_of.end()) edges[i].push_back(it->second);
      }
    }
  }
  constexpr uint32_t kUnvisited = 0xffffffffu;
  std::vector<uint32_t> index(nodes.size(), kUnvisited), low(nodes.size()), comp(nodes.size());
  std::vector<bool> on_stack(nodes.size());
  std::vector<uint32_t> stack;
  std::vector<std::pair<uint32_t, size_t>> frames;  // node, next edge
  uint32_t next_index = 0, next_comp = 0;
  for (uint32_t root = 0; root < nodes.size(); ++root) {
    if (index[root] != kUnvisited) continue;
    frames.push_back({root, 0});
    while (!frames.empty()) {
      auto& [v, e] = frames.back();
      if (e == 0 && index[v] == kUnvisited) {
        index[v] = low[v] = next_index++;
        stack.push_back(v);
        on_stack[v] = true;
      }
      if (e < edges[v].size()) {
        uint32_t w = edges[v][e++];
        if (index[w] == kUnvisited) {
          frames.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          comp[w] = next_comp;
        } while (w != v);
        ++next_comp;
      }
      uint32_t done = v;
      frames.pop_back();
      if (!frames.empty()) {
        uint32_t parent = frames.back().first;
        low[parent] = std::min(low[parent], low[done]);
      }
    }
  }
  std::map<std::string, uint32_t> out;
  for (size_t i = 0; i < nodes.size(); ++i) out.emplace(nodes[i]->name, comp[i]);
  return out;
}

std::vector<std::string_view> SplitDots(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '.') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

struct Name {
  enum class Kind : uint8_t { kReg, kShared, kLocal, kKernelParam, kThreadParam, kModuleVar };
  Kind kind = Kind::kReg;
  uint32_t slot = kNoSlot;  // register slot, or slot that holds the symbol's address
  uint32_t bits = 64;       // register width
  uint32_t size = 0;        // params: bytes
  uint32_t offset = 0;      // params: offset in their space
  const ast::Variable* var = nullptr;
};

struct FuncLayout {
  const ast::Function* fn = nullptr;
  std::vector<std::pair<uint32_t, uint32_t>> params;   // thread-param offset, size
  std::vector<std::pair<uint32_t, uint32_t>> returns;  // thread-param offset, size
  bool queued = false;
  uint32_t entry_pc = 0;
  std::vector<uint32_t> call_sites;  // CallSite indexes waiting for entry_pc
  int table_index = -1;              // index in Program::functions once its address is taken
};

// Modifiers of one opcode, pre-sorted into the categories most instructions share.
struct Mods {
  std::vector<Type> types;
  Rounding rnd = Rounding::kDefault;
  bool ftz = false, sat = false, approx = false, full = false, uni = false;
  bool has_space = false;
  Space space = Space::kGeneric;
  uint8_t vec = 1;
  // .L2::cache_hint: the instruction takes a 64-bit cache-policy operand last, which changes
  // nothing here (see ParseMods) and is skipped.
  bool cache_policy = false;
  // .volatile, .relaxed, .acquire, .acq_rel, .sc, .mmio, .cv, .cg: a load that can observe
  // another thread's later write (what a loop waiting for one is written with).
  bool polls = false;
  std::vector<std::string_view> rest;  // op-specific; anything left unused is unsupported
};

class KernelDecoder {
 public:
  KernelDecoder(const ast::Module& m, const std::map<std::string, const ast::Function*>& funcs,
                const std::map<std::string, const ast::Variable*>& module_vars,
                const std::map<std::string, uint32_t>& function_ids,
                const std::vector<std::string>& address_taken,
                const std::map<std::string, uint32_t>& components, size_t* module_insts, Program* p)
      : module_(m),
        funcs_(funcs),
        module_vars_(module_vars),
        function_ids_(function_ids),
        address_taken_(address_taken),
        components_(components),
        module_insts_(*module_insts),
        p_(*p) {}

  void Run(const ast::Function& entry, KernelInfo* info) {
    p_.kernel = entry.name;
    // Kernel params: C layout in the launch's parameter buffer.
    std::unordered_map<std::string, Name> param_scope;
    uint32_t off = 0;
    for (const ast::Variable& v : entry.params) {
      uint32_t align = std::max<uint32_t>(1, VarAlign(v));
      uint32_t size = SpaceSize(v);
      off = AlignUp(off, align);
      if (uint64_t{off} + size > 32764) throw DecodeError{v.line, "kernel parameters too large"};
      ParamInfo pi;
      pi.offset = off;
      pi.size = size;
      pi.align = align;
      info->params.push_back(pi);
      Name n;
      n.kind = Name::Kind::kKernelParam;
      n.size = size;
      n.offset = off;
      n.slot = Const(off);
      n.var = &v;
      param_scope[v.name] = n;
      off += size;
    }
    info->param_bytes = off;
    info->name = entry.name;
    // Functions named in module variable initializers may be called through those pointers.
    p_.function_by_id.assign(function_ids_.size(), -1);
    for (const std::string& f : address_taken_) FunctionAddress(f);
    info->max_threads = entry.max_threads;
    if (entry.cluster[0])
      info->cluster = Dim3{entry.cluster[0], entry.cluster[1], entry.cluster[2]};
    info->explicit_cluster = entry.explicit_cluster;
    DecodeFunction(entry, /*is_entry=*/true, param_scope);
    // Callees, breadth first; each is decoded once per kernel.
    while (!queue_.empty()) {
      std::string name = queue_.front();
      queue_.erase(queue_.begin());
      FuncLayout& fl = layouts_[name];
      std::unordered_map<std::string, Name> scope;
      for (size_t i = 0; i < fl.fn->params.size(); ++i)
        scope[fl.fn->params[i].name] = ThreadParamName(&fl.fn->params[i], fl.params[i]);
      for (size_t i = 0; i < fl.fn->returns.size(); ++i)
        scope[fl.fn->returns[i].name] = ThreadParamName(&fl.fn->returns[i], fl.returns[i]);
      fl.entry_pc = static_cast<uint32_t>(p_.code.size());
      for (uint32_t cs : fl.call_sites) p_.calls[cs].entry_pc = fl.entry_pc;
      if (fl.table_index >= 0)
        p_.functions[static_cast<size_t>(fl.table_index)].entry_pc = fl.entry_pc;
      DecodeFunction(*fl.fn, false, scope);
    }
    // Extern (dynamic) shared arrays start after all static shared variables.
    uint32_t dyn_align = 16;
    for (const ast::Variable* v : dynamic_shared_) dyn_align = std::max(dyn_align, VarAlign(*v));
    p_.dynamic_shared_offset = AlignUp(p_.static_shared_bytes, dyn_align);
    for (auto& [slot, value] : p_.constants)
      if (dynamic_shared_slots_.count(slot)) value = p_.dynamic_shared_offset;
    // Frames a thread may have: enough for every callee once (recursion is refused), at most
    // kMaxCallDepth (the executor keeps a lane's depth in 8 bits; a deeper chain of calls fails
    // the launch with "call stack overflow", as it would overflow a GPU thread's stack).
    p_.max_call_depth = static_cast<uint32_t>(std::min<size_t>(layouts_.size() + 1, kMaxCallDepth));
    // ptxas refuses kernels whose per-thread local data (here: .local variables and the .param
    // space of calls) exceeds what a thread may address.
    uint64_t thread_bytes = uint64_t{p_.local_bytes} + p_.thread_param_bytes;
    if (thread_bytes > kMaxThreadLocalBytes)
      throw DecodeError{entry.line, "kernel " + entry.name + " uses too much local data (" +
                                        std::to_string(thread_bytes) + " bytes, " +
                                        std::to_string(kMaxThreadLocalBytes) + " max)"};
    info->static_shared_bytes = p_.static_shared_bytes;
    info->local_bytes = p_.local_bytes;
    info->thread_bytes = static_cast<uint32_t>(thread_bytes);
    // Per warp: the register file, call stacks (pcs and alloca tops) and alloca stacks.
    info->warp_bytes = (uint64_t{p_.num_slots} * sizeof(uint64_t) +
                        uint64_t{p_.max_call_depth} * sizeof(uint32_t) * 2 +
                        (p_.uses_stack_alloc ? kStackAllocLimit : 0)) *
                       32;
    info->num_regs = num_regs_;
  }

 private:
  Name ThreadParamName(const ast::Variable* v, std::pair<uint32_t, uint32_t> loc) {
    Name n;
    n.kind = Name::Kind::kThreadParam;
    n.offset = loc.first;
    n.size = loc.second;
    n.slot = Const(loc.first);
    n.var = v;
    return n;
  }

  uint32_t AllocThreadParam(const ast::Variable& v) {
    return Place(&p_.thread_param_bytes, SpaceSize(v), VarAlign(v), v.line);
  }

  FuncLayout& Layout(const ast::Function* fn) {
    auto [it, inserted] = layouts_.try_emplace(fn->name);
    FuncLayout& fl = it->second;
    if (inserted) {
      fl.fn = fn;
      for (const ast::Variable& v : fn->params)
        fl.params.push_back({AllocThreadParam(v), static_cast<uint32_t>(VarSize(v))});
      for (const ast::Variable& v : fn->returns)
        fl.returns.push_back({AllocThreadParam(v), static_cast<uint32_t>(VarSize(v))});
    }
    return fl;
  }

  uint32_t Const(uint64_t value) {
    auto it = const_slots_.find(value);
    if (it != const_slots_.end()) return it->second;
    uint32_t slot = NewSlot();
    p_.constants.push_back({slot, value});
    const_slots_[value] = slot;
    return slot;
  }

  uint32_t NewReg() {
    ++num_regs_;
    return NewSlot();
  }

  uint32_t NewSlot() {
    if (p_.num_slots >= kMaxSlots)
      throw DecodeError{line_,
                        "more than " + std::to_string(kMaxSlots) + " registers and constants"};
    return p_.num_slots++;
  }

  // Size of a shared/local/param variable, bounded so offsets fit in 32 bits.
  uint32_t SpaceSize(const ast::Variable& v) {
    uint64_t size = VarSize(v);
    if (size > kMaxSpaceBytes) throw DecodeError{v.line, "variable '" + v.name + "' is too large"};
    return static_cast<uint32_t>(size);
  }

  // Adds `size` bytes at `align` to a state-space layout; returns the offset.
  uint32_t Place(uint32_t* total, uint32_t size, uint32_t align, int line) {
    uint32_t off = AlignUp(*total, std::max<uint32_t>(1, align));
    if (uint64_t{off} + size > kMaxSpaceBytes)
      throw DecodeError{line,
                        "state space larger than " + std::to_string(kMaxSpaceBytes) + " bytes"};
    *total = off + size;
    return off;
  }

  uint32_t SharedOffset(const ast::Variable* v) {
    auto it = shared_offsets_.find(v);
    if (it != shared_offsets_.end()) return it->second;
    uint32_t off = Place(&p_.static_shared_bytes, SpaceSize(*v), VarAlign(*v), v->line);
    shared_offsets_[v] = off;
    return off;
  }

  // Resolves a variable to the Name through which instructions reference it.
  Name VariableName(const ast::Variable* v, bool in_function) {
    Name n;
    n.var = v;
    if (v->space == "shared") {
      n.kind = Name::Kind::kShared;
      if (v->is_unsized || (v->is_extern && v->is_array && v->count == 0)) {
        // Value patched once the static layout is final.
        n.slot = NewSlot();
        p_.constants.push_back({n.slot, 0});
        dynamic_shared_slots_.insert(n.slot);
        dynamic_shared_.push_back(v);
      } else {
        n.slot = kNoSlot;  // allocated on first use, see SymbolSlot()
      }
    } else if (v->space == "local") {
      n.kind = Name::Kind::kLocal;
      // 16-byte granularity keeps each thread's local area aligned for any access size.
      uint32_t off = Place(&p_.local_bytes, SpaceSize(*v), VarAlign(*v), v->line);
      p_.local_bytes = AlignUp(p_.local_bytes, 16);
      n.slot = Const(off);
    } else if (v->space == "global" || v->space == "const") {
      n.kind = Name::Kind::kModuleVar;
      n.slot = NewSlot();
      p_.symbol_slots.push_back({n.slot, v->name});
    } else if (v->space == "param" && in_function) {
      n.kind = Name::Kind::kThreadParam;
      n.offset = AllocThreadParam(*v);
      n.size = static_cast<uint32_t>(VarSize(*v));
      n.slot = Const(n.offset);
    } else {
      throw DecodeError{v->line, "unsupported variable declaration '" + v->name + "'"};
    }
    return n;
  }

  // Finds `name` in the scopes (innermost first), then at module scope.
  Name* Lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    auto mv = module_names_.find(name);
    if (mv != module_names_.end()) return &mv->second;
    auto decl = module_vars_.find(name);
    if (decl != module_vars_.end()) {
      Name n = VariableName(decl->second, false);
      return &(module_names_[name] = n);
    }
    return nullptr;
  }

  uint32_t AddressSlot(Name* n) {
    if (n->kind == Name::Kind::kShared && n->slot == kNoSlot) n->slot = Const(SharedOffset(n->var));
    return n->slot;
  }

  void DecodeFunction(const ast::Function& fn, bool is_entry,
                      const std::unordered_map<std::string, Name>& params) {
    is_entry_ = is_entry;
    fn_ = &fn;
    scopes_.clear();
    scopes_.push_back(params);
    scopes_.emplace_back();
    // Labels are function-scoped; collect their pcs first so forward branches resolve.
    labels_.clear();
    uint32_t pc = static_cast<uint32_t>(p_.code.size());
    for (const ast::BodyItem& b : fn.body) {
      if (b.kind == ast::BodyItem::Kind::kInstruction) ++pc;
      if (b.kind == ast::BodyItem::Kind::kLabel) labels_[b.label] = pc;
    }
    for (const ast::BodyItem& b : fn.body) {
      switch (b.kind) {
        case ast::BodyItem::Kind::kBlockBegin:
          scopes_.emplace_back();
          break;
        case ast::BodyItem::Kind::kBlockEnd:
          if (scopes_.size() <= 2) throw DecodeError{b.line, "unbalanced '}'"};
          scopes_.pop_back();
          break;
        case ast::BodyItem::Kind::kLabel:
          break;
        case ast::BodyItem::Kind::kDeclaration:
          Declare(b.var);
          break;
        case ast::BodyItem::Kind::kInstruction:
          // Each kernel gets its own copy of every function it calls, so a module of many
          // kernels calling one large function multiplies; the total is bounded.
          if (++module_insts_ > kMaxModuleInsts)
            throw DecodeError{b.line, "module decodes to more than " +
                                          std::to_string(kMaxModuleInsts) + " instructions"};
          p_.code.push_back(DecodeOrUnsupported(b.inst));
          break;
      }
    }
    // Falling off the end of a function returns.
    Inst ret;
    ret.op = is_entry ? Op::kExit : Op::kRet;
    ret.line = static_cast<uint32_t>(fn.line);
    p_.code.push_back(ret);
  }

  void Declare(const ast::Variable& v) {
    auto& scope = scopes_.back();
    if (v.space == "reg") {
      Type t = TypeFromName(v.type);
      if (t == Type::kNone) throw DecodeError{v.line, "unsupported register type ." + v.type};
      uint32_t bits = static_cast<uint32_t>(TypeBits(t) * v.vec);
      auto add = [&](const std::string& name) {
        Name n;
        n.kind = Name::Kind::kReg;
        n.slot = NewReg();
        n.bits = bits > 64 ? 64 : bits;
        scope[name] = n;
      };
      if (v.reg_range) {
        for (uint32_t i = 0; i < v.reg_range; ++i) add(v.name + std::to_string(i));
      } else {
        add(v.name);
      }
      return;
    }
    scope[v.name] = VariableName(&v, true);
  }

  Inst DecodeOrUnsupported(const ast::Instruction& in) {
    try {
      return Decode(in);
    } catch (const Unsupported& u) {
      Inst x;
      x.op = Op::kUnsupported;
      x.line = static_cast<uint32_t>(in.line);
      x.aux = static_cast<uint32_t>(p_.messages.size());
      std::string msg = "unsupported PTX instruction '" + in.opcode + "'";
      if (!u.what.empty()) msg += " (" + u.what + ")";
      msg += " at line " + std::to_string(in.line) + " in " + fn_->name;
      p_.messages.push_back(msg);
      return x;
    }
  }

  // ---- operands ----------------------------------------------------------------------------

  [[noreturn]] void Error(const std::string& what) { throw DecodeError{line_, what}; }

  static uint64_t EncodeFloat(double v, Type t) {
    switch (t) {
      case Type::kF32:
        return FloatBits(static_cast<float>(v));
      case Type::kF64:
        return DoubleBits(v);
      case Type::kF16:
        return FloatToHalf(static_cast<float>(v));
      case Type::kBF16:
        return FloatToBf16(static_cast<float>(v));
      default:
        return DoubleBits(v);
    }
  }

  uint64_t ImmValue(const ast::Operand& o, Type t) {
    if (o.kind == ast::Operand::Kind::kInt) {
      if (IsFloat(t)) return EncodeFloat(static_cast<double>(o.imm), t);
      return static_cast<uint64_t>(o.imm);
    }
    // Float literal.
    if (IsFloat(t)) return EncodeFloat(o.fval, t);
    if (o.fbits_width) return o.fbits;  // mov.b32 %r1, 0f3F800000: the bits as written
    return static_cast<uint64_t>(static_cast<int64_t>(o.fval));
  }

  uint32_t SpecialSlot(const std::string& n) {
    static const std::unordered_map<std::string, uint32_t> kSpecial = {
        {"%tid.x", kSlotTidX},
        {"%tid.y", kSlotTidY},
        {"%tid.z", kSlotTidZ},
        {"%ntid.x", kSlotNtidX},
        {"%ntid.y", kSlotNtidY},
        {"%ntid.z", kSlotNtidZ},
        {"%ctaid.x", kSlotCtaidX},
        {"%ctaid.y", kSlotCtaidY},
        {"%ctaid.z", kSlotCtaidZ},
        {"%nctaid.x", kSlotNctaidX},
        {"%nctaid.y", kSlotNctaidY},
        {"%nctaid.z", kSlotNctaidZ},
        {"%laneid", kSlotLaneId},
        {"%warpid", kSlotWarpId},
        {"%nwarpid", kSlotNWarpId},
        {"%smid", kSlotSmId},
        {"%nsmid", kSlotNSmId},
        {"%gridid", kSlotGridId},
        {"%lanemask_eq", kSlotLanemaskEq},
        {"%lanemask_lt", kSlotLanemaskLt},
        {"%lanemask_le", kSlotLanemaskLe},
        {"%lanemask_gt", kSlotLanemaskGt},
        {"%lanemask_ge", kSlotLanemaskGe},
        {"%dynamic_smem_size", kSlotDynSmemSize},
        {"%total_smem_size", kSlotTotalSmemSize},
        {"%reserved_smem_offset_begin", kSlotReservedSmemBegin},
        {"%reserved_smem_offset_end", kSlotReservedSmemEnd},
        {"%reserved_smem_offset_cap", kSlotReservedSmemCap},
        {"%reserved_smem_offset_0", kSlotReservedSmem0},
        {"%reserved_smem_offset_1", kSlotReservedSmem1},
        {"%cluster_ctarank", kSlotClusterCtaRank},
        {"%cluster_nctarank", kSlotClusterNCtaRank},
        {"%cluster_ctaid.x", kSlotClusterCtaidX},
        {"%cluster_ctaid.y", kSlotClusterCtaidY},
        {"%cluster_ctaid.z", kSlotClusterCtaidZ},
        {"%cluster_nctaid.x", kSlotClusterNCtaidX},
        {"%cluster_nctaid.y", kSlotClusterNCtaidY},
        {"%cluster_nctaid.z", kSlotClusterNCtaidZ},
        {"%clusterid.x", kSlotClusterIdX},
        {"%clusterid.y", kSlotClusterIdY},
        {"%clusterid.z", kSlotClusterIdZ},
        {"%nclusterid.x", kSlotNClusterIdX},
        {"%nclusterid.y", kSlotNClusterIdY},
        {"%nclusterid.z", kSlotNClusterIdZ},
        {"%is_explicit_cluster", kSlotIsExplicitCluster},
    };
    auto it = kSpecial.find(n);
    if (it != kSpecial.end()) {
      if (it->second >= kSlotClusterCtaRank && it->second <= kSlotIsExplicitCluster)
        p_.uses_cluster_slots = true;
      if (it->second >= kSlotReservedSmemBegin && it->second <= kSlotReservedSmem1)
        p_.uses_reserved_smem = true;
      return it->second;
    }
    if (n.size() > 7 && n.size() <= 9 && n.compare(0, 7, "%envreg") == 0) {
      uint32_t i = 0;
      for (size_t k = 7; k < n.size(); ++k) {
        if (n[k] < '0' || n[k] > '9') return kNoSlot;
        i = i * 10 + static_cast<uint32_t>(n[k] - '0');
      }
      if (i <= 31) return kSlotEnvReg0 + i;
    }
    return kNoSlot;
  }

  // A source operand of type `t` (immediates are encoded for t).
  uint32_t Src(const ast::Operand& o, Type t) {
    using K = ast::Operand::Kind;
    switch (o.kind) {
      case K::kInt:
      case K::kFloat:
        return Const(ImmValue(o, t));
      case K::kName: {
        if (o.negated) throw Unsupported{"negated operand"};
        if (o.name == "WARP_SZ") return Const(32);
        if (Name* n = Lookup(o.name)) return n->kind == Name::Kind::kReg ? n->slot : AddressSlot(n);
        uint32_t s = SpecialSlot(o.name);
        if (s != kNoSlot) return s;
        if (o.name.rfind("%clock", 0) == 0 || o.name == "%globaltimer")
          throw Unsupported{"special register " + o.name + " outside mov"};
        if (o.name[0] == '%') throw Unsupported{"special register " + o.name};
        if (funcs_.count(o.name)) return Const(FunctionAddress(o.name));
        Error("unknown name '" + o.name + "'");
      }
      case K::kAddress: {
        // `sym+imm` as a value.
        Name* n = Lookup(o.name);
        if (!n || n->kind == Name::Kind::kReg) Error("bad address expression");
        if (n->kind == Name::Kind::kModuleVar) {
          uint32_t slot = NewSlot();
          p_.symbol_slots.push_back({slot, n->var->name, o.imm});
          return slot;
        }
        uint32_t base = AddressSlot(n);
        uint64_t value = 0;
        for (auto& c : p_.constants)
          if (c.first == base) value = c.second;
        return Const(value + static_cast<uint64_t>(o.imm));
      }
      default:
        throw Unsupported{"operand form"};
    }
  }

  uint32_t Dst(const ast::Operand& o, uint32_t* bits = nullptr) {
    if (o.kind != ast::Operand::Kind::kName || o.negated) Error("destination must be a register");
    if (o.name == "_") {
      if (bits) *bits = 64;
      return kSlotSink;
    }
    Name* n = Lookup(o.name);
    if (!n) Error("unknown register '" + o.name + "'");
    if (n->kind != Name::Kind::kReg) Error("destination '" + o.name + "' is not a register");
    if (bits) *bits = n->bits;
    return n->slot;
  }

  uint32_t PredSrc(const ast::Operand& o, bool* negated) {
    *negated = o.negated;
    ast::Operand plain = o;
    plain.negated = false;
    return Src(plain, Type::kPred);
  }

  // [base+imm] -> (slot, offset, symbol kind if the base is a variable).
  void Address(const ast::Operand& o, Inst* x, Name::Kind* sym_kind) {
    if (o.kind != ast::Operand::Kind::kAddress) Error("expected an address operand");
    if (!o.elems.empty()) throw Unsupported{"texture/surface operand"};
    *sym_kind = Name::Kind::kReg;
    x->imm = o.imm;
    if (o.name.empty()) {
      x->s[0] = kSlotZero;
      return;
    }
    Name* n = Lookup(o.name);
    if (!n) Error("unknown name '" + o.name + "'");
    *sym_kind = n->kind;
    x->s[0] = n->kind == Name::Kind::kReg ? n->slot : AddressSlot(n);
  }

  void Need(const ast::Instruction& in, size_t n) {
    if (in.operands.size() != n)
      Error(in.opcode + " expects " + std::to_string(n) + " operands, got " +
            std::to_string(in.operands.size()));
  }

  // ---- opcodes -----------------------------------------------------------------------------

  Mods ParseMods(const std::vector<std::string_view>& parts) {
    Mods m;
    for (size_t i = 1; i < parts.size(); ++i) {
      std::string_view p = parts[i];
      Type t = TypeFromName(p);
      if (t != Type::kNone) {
        m.types.push_back(t);
        continue;
      }
      if (p == "rn")
        m.rnd = Rounding::kRn;
      else if (p == "rz")
        m.rnd = Rounding::kRz;
      else if (p == "rm")
        m.rnd = Rounding::kRm;
      else if (p == "rp")
        m.rnd = Rounding::kRp;
      else if (p == "rni")
        m.rnd = Rounding::kRni;
      else if (p == "rzi")
        m.rnd = Rounding::kRzi;
      else if (p == "rmi")
        m.rnd = Rounding::kRmi;
      else if (p == "rpi")
        m.rnd = Rounding::kRpi;
      else if (p == "rna")
        m.rnd = Rounding::kRna;
      else if (p == "ftz")
        m.ftz = true;
      else if (p == "sat" || p == "satfinite")
        m.sat = true;
      else if (p == "approx")
        m.approx = true;
      else if (p == "full")
        m.full = true;
      else if (p == "uni")
        m.uni = true;
      else if (p == "v2" || p == "v4")
        m.vec = static_cast<uint8_t>(p[1] - '0');
      else if (p == "global") {
        m.has_space = true;
        m.space = Space::kGlobal;
      } else if (p == "shared" || p == "shared::cta" || p == "shared::cluster") {
        // shared::cluster addresses include the cluster's other blocks' (see executor.cc).
        m.has_space = true;
        m.space = Space::kShared;
      } else if (p == "local") {
        m.has_space = true;
        m.space = Space::kLocal;
      } else if (p == "const") {
        m.has_space = true;
        m.space = Space::kConst;
      } else if (p == "param") {
        m.has_space = true;
        m.space = Space::kKernelParam;
      } else if (p == "L2::cache_hint")
        m.cache_policy = true;
      // Cache hints, memory-order semantics and scopes do not change results here: the
      // interpreter executes memory operations one at a time in program order. Those a
      // waiting loop reads with mark the instruction (Mods::polls) for the scheduler.
      else if (p == "volatile" || p == "relaxed" || p == "acquire" || p == "acq_rel" || p == "sc" ||
               p == "mmio" || p == "cv" || p == "cg") {
        m.polls = true;
        continue;
      } else if (p == "nc" || p == "ca" || p == "cs" || p == "lu" || p == "wb" || p == "wt" ||
                 p == "release" || p == "weak" || p == "cta" || p == "gpu" || p == "sys" ||
                 p == "cluster" || p == "aligned" || p == "sync" || p == "noftz" ||
                 p == "unified" || (p.find("::") != std::string_view::npos && p.rfind("L", 0) == 0))
        continue;
      else
        m.rest.push_back(p);
    }
    return m;
  }

  static Cmp ParseCmp(std::string_view s, bool* ok) {
    static const std::unordered_map<std::string_view, Cmp> kCmp = {
        {"eq", Cmp::kEq},   {"ne", Cmp::kNe},   {"lt", Cmp::kLt},   {"le", Cmp::kLe},
        {"gt", Cmp::kGt},   {"ge", Cmp::kGe},   {"lo", Cmp::kLo},   {"ls", Cmp::kLs},
        {"hi", Cmp::kHi},   {"hs", Cmp::kHs},   {"equ", Cmp::kEqu}, {"neu", Cmp::kNeu},
        {"ltu", Cmp::kLtu}, {"leu", Cmp::kLeu}, {"gtu", Cmp::kGtu}, {"geu", Cmp::kGeu},
        {"num", Cmp::kNum}, {"nan", Cmp::kNan},
    };
    auto it = kCmp.find(s);
    *ok = it != kCmp.end();
    return *ok ? it->second : Cmp::kEq;
  }

  static void NoRest(const Mods& m) {
    if (!m.rest.empty()) throw Unsupported{"modifier ." + std::string(m.rest[0])};
  }
  static Type OneType(const Mods& m) {
    if (m.types.size() != 1) throw Unsupported{"expected one type"};
    return m.types[0];
  }

  Inst Decode(const ast::Instruction& in) {
    line_ = in.line;
    Inst x;
    x.line = static_cast<uint32_t>(in.line);
    if (!in.guard.empty()) {
      ast::Operand g;
      g.name = in.guard;
      bool neg;
      x.guard = PredSrc(g, &neg);
      x.guard_negated = in.guard_negated;
    }
    std::vector<std::string_view> parts = SplitDots(in.opcode);
    std::string_view op = parts[0];
    Mods m = ParseMods(parts);
    x.rnd = m.rnd;
    x.ftz = m.ftz;
    x.sat = m.sat;
    x.approx = m.approx;
    const auto& ops = in.operands;

    auto binary = [&](Op o, Type t) {
      Need(in, 3);
      x.op = o;
      x.type = t;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], t);
      x.s[1] = Src(ops[2], t);
    };
    auto unary = [&](Op o, Type t) {
      Need(in, 2);
      x.op = o;
      x.type = t;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], t);
    };

    if (op == "add" || op == "sub" || op == "addc" || op == "subc") {
      bool cc = false;
      for (auto r : m.rest) {
        if (r == "cc")
          cc = true;
        else
          throw Unsupported{"modifier ." + std::string(r)};
      }
      Type t = OneType(m);
      Op o = op == "add"    ? (cc ? Op::kAddCC : Op::kAdd)
             : op == "sub"  ? (cc ? Op::kSubCC : Op::kSub)
             : op == "addc" ? Op::kAddC
                            : Op::kSubC;
      if ((o != Op::kAdd && o != Op::kSub) && IsFloat(t)) throw Unsupported{"carry on float"};
      if ((t == Type::kU16x2 || t == Type::kS16x2) && (o != Op::kAdd && o != Op::kSub))
        throw Unsupported{"carry on packed integers"};
      binary(o, t);
      x.mod = cc ? 1 : 0;  // addc.cc: also writes the carry
      return x;
    }
    if (op == "madc" ||
        (op == "mad" && std::find(m.rest.begin(), m.rest.end(), "cc") != m.rest.end())) {
      // Extended-precision mad{c}.{lo,hi}{.cc}.{u32,s32,u64,s64} (libdevice's wide multiplies).
      Type t = OneType(m);
      if (IsFloat(t) || TypeBits(t) < 32) throw Unsupported{"type"};
      bool cc = false, hi = false, have_mode = false;
      for (auto r : m.rest) {
        if (r == "cc")
          cc = true;
        else if ((r == "lo" || r == "hi") && !have_mode) {
          hi = r == "hi";
          have_mode = true;
        } else
          throw Unsupported{"modifier ." + std::string(r)};
      }
      if (!have_mode) throw Unsupported{"mad with carry needs .lo or .hi"};
      Need(in, 4);
      x.op = Op::kMadCarry;
      x.type = t;
      x.mod = static_cast<uint8_t>((op == "madc" ? 1 : 0) | (cc ? 2 : 0) | (hi ? 4 : 0));
      x.d[0] = Dst(ops[0]);
      for (int i = 0; i < 3; ++i) x.s[i] = Src(ops[i + 1], t);
      return x;
    }
    if (op == "mul" || op == "mad" || op == "mul24" || op == "mad24") {
      Type t = OneType(m);
      std::string_view mode = "";
      for (auto r : m.rest) {
        if (r == "lo" || r == "hi" || r == "wide")
          mode = r;
        else
          throw Unsupported{"modifier ." + std::string(r)};
      }
      bool is_mad = op[1] == 'a';
      Op o;
      if (IsFloat(t)) {
        if (op == "mul24" || op == "mad24" || !mode.empty()) throw Unsupported{"float mode"};
        o = is_mad ? Op::kFma : Op::kMulLo;
      } else if (op == "mul24" || op == "mad24") {
        if (t != Type::kU32 && t != Type::kS32) throw Unsupported{"mul24 type"};
        o = mode == "hi" ? (is_mad ? Op::kMad24Hi : Op::kMul24Hi)
                         : (is_mad ? Op::kMad24Lo : Op::kMul24Lo);
      } else {
        if (mode.empty()) throw Unsupported{"integer mul needs .lo/.hi/.wide"};
        o = mode == "lo"   ? (is_mad ? Op::kMadLo : Op::kMulLo)
            : mode == "hi" ? (is_mad ? Op::kMadHi : Op::kMulHi)
                           : (is_mad ? Op::kMadWide : Op::kMulWide);
      }
      Need(in, is_mad ? 4 : 3);
      x.op = o;
      x.type = t;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], t);
      x.s[1] = Src(ops[2], t);
      if (is_mad) {
        Type ct = t;
        if (mode == "wide") {
          ct = TypeBits(t) == 32 ? (IsSigned(t) ? Type::kS64 : Type::kU64)
                                 : (IsSigned(t) ? Type::kS32 : Type::kU32);
        }
        x.s[2] = Src(ops[3], ct);
      }
      return x;
    }
    if (op == "fma") {
      NoRest(m);
      Need(in, 4);
      x.op = Op::kFma;
      x.type = OneType(m);
      if (!IsFloat(x.type)) throw Unsupported{"fma type"};
      x.d[0] = Dst(ops[0]);
      for (int i = 0; i < 3; ++i) x.s[i] = Src(ops[i + 1], x.type);
      return x;
    }
    if (op == "div" || op == "rem" || op == "min" || op == "max" || op == "and" || op == "or" ||
        op == "xor" || op == "copysign") {
      if ((op == "min" || op == "max") && !m.rest.empty() && m.rest[0] == "NaN") {
        x.nan = 1;
        m.rest.erase(m.rest.begin());
      }
      NoRest(m);
      Type t = OneType(m);
      Op o = op == "div"   ? Op::kDiv
             : op == "rem" ? Op::kRem
             : op == "min" ? Op::kMin
             : op == "max" ? Op::kMax
             : op == "and" ? Op::kAnd
             : op == "or"  ? Op::kOr
             : op == "xor" ? Op::kXor
                           : Op::kCopysign;
      if ((o == Op::kAnd || o == Op::kOr || o == Op::kXor) && IsFloat(t))
        throw Unsupported{"float type"};
      if (o == Op::kRem && IsFloat(t)) throw Unsupported{"float rem"};
      if ((t == Type::kU16x2 || t == Type::kS16x2) && o != Op::kMin && o != Op::kMax)
        throw Unsupported{"packed integer type"};
      if (x.nan && !IsFloat(t)) throw Unsupported{".NaN on integers"};
      binary(o, t);
      return x;
    }
    if (op == "abs" || op == "neg" || op == "not" || op == "cnot" || op == "brev" || op == "sqrt" ||
        op == "rsqrt" || op == "rcp" || op == "ex2" || op == "lg2" || op == "sin" || op == "cos" ||
        op == "tanh") {
      NoRest(m);
      Type t = OneType(m);
      Op o = op == "abs"     ? Op::kAbs
             : op == "neg"   ? Op::kNeg
             : op == "not"   ? Op::kNot
             : op == "cnot"  ? Op::kCnot
             : op == "brev"  ? Op::kBrev
             : op == "sqrt"  ? Op::kSqrt
             : op == "rsqrt" ? Op::kRsqrt
             : op == "rcp"   ? Op::kRcp
             : op == "ex2"   ? Op::kEx2
             : op == "lg2"   ? Op::kLg2
             : op == "sin"   ? Op::kSin
             : op == "cos"   ? Op::kCos
                             : Op::kTanh;
      bool float_only = o == Op::kSqrt || o == Op::kRsqrt || o == Op::kRcp || o == Op::kEx2 ||
                        o == Op::kLg2 || o == Op::kSin || o == Op::kCos || o == Op::kTanh;
      if (float_only && t != Type::kF32 && t != Type::kF64) throw Unsupported{"type"};
      if ((o == Op::kNot || o == Op::kCnot || o == Op::kBrev) && IsFloat(t))
        throw Unsupported{"type"};
      unary(o, t);
      return x;
    }
    if (op == "bfind") {
      bool shiftamt = false;
      for (auto r : m.rest) {
        if (r == "shiftamt")
          shiftamt = true;
        else
          throw Unsupported{"modifier ." + std::string(r)};
      }
      Type t = OneType(m);
      if (IsFloat(t) || TypeBits(t) < 32) throw Unsupported{"type"};
      unary(Op::kBfind, t);
      x.mod = shiftamt ? 1 : 0;
      return x;
    }
    if (op == "dp4a" || op == "dp2a") {
      bool hi = false, have_mode = false;
      for (auto r : m.rest) {
        if (op == "dp2a" && (r == "lo" || r == "hi") && !have_mode) {
          hi = r == "hi";
          have_mode = true;
        } else {
          throw Unsupported{"modifier ." + std::string(r)};
        }
      }
      if (op == "dp2a" && !have_mode) throw Unsupported{"dp2a needs .lo or .hi"};
      if (m.types.size() != 2) throw Unsupported{"expected .atype.btype"};
      for (Type t : m.types)
        if (t != Type::kU32 && t != Type::kS32) throw Unsupported{"type"};
      Need(in, 4);
      x.op = op == "dp4a" ? Op::kDp4a : Op::kDp2a;
      x.type = m.types[0];
      x.type2 = m.types[1];
      x.mod = hi ? 1 : 0;
      Type ct = IsSigned(x.type) || IsSigned(x.type2) ? Type::kS32 : Type::kU32;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], x.type);
      x.s[1] = Src(ops[2], x.type2);
      x.s[2] = Src(ops[3], ct);
      return x;
    }
    if (op == "sad") {
      NoRest(m);
      Type t = OneType(m);
      if (IsFloat(t) || TypeBits(t) < 16) throw Unsupported{"type"};
      Need(in, 4);
      x.op = Op::kSad;
      x.type = t;
      x.d[0] = Dst(ops[0]);
      for (int i = 0; i < 3; ++i) x.s[i] = Src(ops[i + 1], t);
      return x;
    }
    if (op == "vabsdiff2" || op == "vabsdiff4") {
      // SIMD video form with the default mask and selectors only (what nvcc emits for
      // __vabsdiffu4 / __vsadu4 and friends).
      bool add = false;
      for (auto r : m.rest) {
        if (r == "add" && !add)
          add = true;
        else
          throw Unsupported{"modifier ." + std::string(r)};
      }
      if (m.sat) throw Unsupported{"modifier .sat"};
      if (m.types.size() != 3) throw Unsupported{"expected .dtype.atype.btype"};
      for (Type t : m.types)
        if (t != Type::kU32 && t != Type::kS32) throw Unsupported{"type"};
      Need(in, 4);
      for (const ast::Operand& o : ops)
        if (o.kind != ast::Operand::Kind::kName && o.kind != ast::Operand::Kind::kInt)
          throw Unsupported{"operand selectors"};
      x.op = Op::kVabsdiff;
      x.type = m.types[1];
      x.type2 = m.types[2];
      x.vec = static_cast<uint8_t>(op.back() - '0');
      x.mod = add ? 1 : 0;
      x.d[0] = Dst(ops[0]);
      for (int i = 0; i < 3; ++i) x.s[i] = Src(ops[i + 1], Type::kU32);
      return x;
    }
    if (op == "alloca" || op == "stacksave" || op == "stackrestore") {
      NoRest(m);
      Type t = OneType(m);
      if (t != Type::kU32 && t != Type::kU64) throw Unsupported{"type"};
      x.type = t;
      p_.uses_stack_alloc = true;
      if (op == "alloca") {
        // alloca.type ptr, size{, align}: `ptr` is a .local address.
        if (ops.size() != 2 && ops.size() != 3) Error("alloca expects 2 or 3 operands");
        x.op = Op::kStackAlloc;
        x.d[0] = Dst(ops[0]);
        x.s[0] = Src(ops[1], t);
        x.imm = 8;
        if (ops.size() == 3) {
          if (ops[2].kind != ast::Operand::Kind::kInt || ops[2].imm <= 0 || ops[2].imm > 4096 ||
              (ops[2].imm & (ops[2].imm - 1)) != 0)
            Error("alloca alignment must be a power of two up to 4096");
          x.imm = std::max<int64_t>(8, ops[2].imm);
        }
      } else if (op == "stacksave") {
        Need(in, 1);
        x.op = Op::kStackSave;
        x.d[0] = Dst(ops[0]);
      } else {
        Need(in, 1);
        x.op = Op::kStackRestore;
        x.s[0] = Src(ops[0], t);
      }
      return x;
    }
    if (op == "popc" || op == "clz") {
      NoRest(m);
      Type t = OneType(m);
      Need(in, 2);
      x.op = op == "popc" ? Op::kPopc : Op::kClz;
      x.type = t;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], t);
      return x;
    }
    if (op == "shl" || op == "shr") {
      NoRest(m);
      Type t = OneType(m);
      Need(in, 3);
      x.op = op == "shl" ? Op::kShl : Op::kShr;
      x.type = t;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], t);
      x.s[1] = Src(ops[2], Type::kU32);
      return x;
    }
    if (op == "shf") {
      // shf.{l,r}.{wrap,clamp}.b32 d, a, b, c: funnel shift of the 64-bit value {b:a}.
      bool left = false, clamp = false, have_dir = false, have_mode = false;
      for (auto r : m.rest) {
        if (r == "l" || r == "r") {
          left = r == "l";
          have_dir = true;
        } else if (r == "wrap" || r == "clamp") {
          clamp = r == "clamp";
          have_mode = true;
        } else {
          throw Unsupported{"modifier ." + std::string(r)};
        }
      }
      if (!have_dir || !have_mode) throw Unsupported{"shf needs direction and mode"};
      Need(in, 4);
      x.op = left ? Op::kShfL : Op::kShfR;
      x.mod = clamp ? 1 : 0;
      x.type = Type::kB32;
      x.d[0] = Dst(ops[0]);
      for (int i = 0; i < 3; ++i) x.s[i] = Src(ops[i + 1], Type::kU32);
      return x;
    }
    if (op == "lop3") {
      NoRest(m);
      Need(in, 5);
      x.op = Op::kLop3;
      x.type = OneType(m);
      x.d[0] = Dst(ops[0]);
      for (int i = 0; i < 3; ++i) x.s[i] = Src(ops[i + 1], x.type);
      if (ops[4].kind != ast::Operand::Kind::kInt) throw Unsupported{"lop3 needs an immediate LUT"};
      x.aux = static_cast<uint32_t>(ops[4].imm & 0xff);
      return x;
    }
    if (op == "bmsk") {
      // bmsk.{clamp,wrap}.b32 d, a, b: b bits set from bit a.
      if (m.rest.size() != 1 || (m.rest[0] != "clamp" && m.rest[0] != "wrap") ||
          OneType(m) != Type::kB32)
        throw Unsupported{"bmsk form"};
      Need(in, 3);
      x.op = Op::kBmsk;
      x.type = Type::kB32;
      x.aux = m.rest[0] == "wrap";
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], Type::kU32);
      x.s[1] = Src(ops[2], Type::kU32);
      return x;
    }
    if (op == "bfe" || op == "bfi") {
      NoRest(m);
      Type t = OneType(m);
      bool bfi = op == "bfi";
      Need(in, bfi ? 5 : 4);
      x.op = bfi ? Op::kBfi : Op::kBfe;
      x.type = t;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], t);
      if (bfi) {
        x.s[1] = Src(ops[2], t);
        x.s[2] = Src(ops[3], Type::kU32);
        x.s[3] = Src(ops[4], Type::kU32);
      } else {
        x.s[1] = Src(ops[2], Type::kU32);
        x.s[2] = Src(ops[3], Type::kU32);
      }
      return x;
    }
    if (op == "prmt") {
      if (!m.rest.empty()) throw Unsupported{"prmt mode ." + std::string(m.rest[0])};
      Need(in, 4);
      x.op = Op::kPrmt;
      x.type = Type::kB32;
      x.d[0] = Dst(ops[0]);
      for (int i = 0; i < 3; ++i) x.s[i] = Src(ops[i + 1], Type::kB32);
      return x;
    }
    if (op == "selp") {
      NoRest(m);
      Need(in, 4);
      x.op = Op::kSelp;
      x.type = OneType(m);
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], x.type);
      x.s[1] = Src(ops[2], x.type);
      bool neg;
      x.s[2] = PredSrc(ops[3], &neg);
      if (neg) throw Unsupported{"negated selp predicate"};
      return x;
    }
    if (op == "setp" || op == "set") {
      if (m.rest.empty()) throw Unsupported{"missing comparison"};
      bool ok;
      x.mod = static_cast<uint8_t>(ParseCmp(m.rest[0], &ok));
      if (!ok) throw Unsupported{"comparison ." + std::string(m.rest[0])};
      for (size_t i = 1; i < m.rest.size(); ++i) {
        auto r = m.rest[i];
        if (r == "and")
          x.bool_op = BoolOp::kAnd;
        else if (r == "or")
          x.bool_op = BoolOp::kOr;
        else if (r == "xor")
          x.bool_op = BoolOp::kXor;
        else
          throw Unsupported{"modifier ." + std::string(r)};
      }
      if (op == "setp") {
        x.op = Op::kSetp;
        x.type2 = OneType(m);
        x.type = Type::kPred;
      } else {
        x.op = Op::kSet;
        if (m.types.size() != 2) throw Unsupported{"set needs two types"};
        x.type = m.types[0];
        x.type2 = m.types[1];
      }
      Need(in, x.bool_op == BoolOp::kNone ? 3 : 4);
      x.d[0] = Dst(ops[0]);
      if (!ops[0].pair.empty()) {
        ast::Operand q;
        q.name = ops[0].pair;
        x.d[1] = Dst(q);
      }
      x.s[0] = Src(ops[1], x.type2);
      x.s[1] = Src(ops[2], x.type2);
      if (x.bool_op != BoolOp::kNone) {
        bool neg;
        x.s[2] = PredSrc(ops[3], &neg);
        x.vec = neg ? 1 : 0;  // reused: 1 = negate the combining predicate
      }
      return x;
    }
    if (op == "slct") {
      NoRest(m);
      if (m.types.size() != 2) throw Unsupported{"slct needs two types"};
      Need(in, 4);
      x.op = Op::kSlct;
      x.type = m.types[0];
      x.type2 = m.types[1];
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], x.type);
      x.s[1] = Src(ops[2], x.type);
      x.s[2] = Src(ops[3], x.type2);
      return x;
    }
    if (op == "testp") {
      if (m.rest.size() != 1) throw Unsupported{"testp op"};
      auto r = m.rest[0];
      TestpOp t = r == "finite"       ? TestpOp::kFinite
                  : r == "infinite"   ? TestpOp::kInfinite
                  : r == "number"     ? TestpOp::kNumber
                  : r == "notanumber" ? TestpOp::kNotANumber
                  : r == "normal"     ? TestpOp::kNormal
                  : r == "subnormal"  ? TestpOp::kSubnormal
                                      : throw Unsupported{"testp ." + std::string(r)};
      Need(in, 2);
      x.op = Op::kTestp;
      x.mod = static_cast<uint8_t>(t);
      x.type = OneType(m);
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], x.type);
      return x;
    }
    if (op == "mov") {
      NoRest(m);
      Need(in, 2);
      x.type = OneType(m);
      const ast::Operand& d = ops[0];
      const ast::Operand& a = ops[1];
      if (d.kind == ast::Operand::Kind::kVector) {
        x.op = Op::kUnpack;
        if (d.elems.size() > 4 || d.elems.size() < 2) throw Unsupported{"unpack size"};
        x.vec = static_cast<uint8_t>(d.elems.size());
        for (size_t i = 0; i < d.elems.size(); ++i) x.d[i] = Dst(d.elems[i]);
        x.s[0] = Src(a, x.type);
        return x;
      }
      x.d[0] = Dst(d);
      if (a.kind == ast::Operand::Kind::kVector) {
        x.op = Op::kPack;
        if (a.elems.size() > 4 || a.elems.size() < 2) throw Unsupported{"pack size"};
        x.vec = static_cast<uint8_t>(a.elems.size());
        for (size_t i = 0; i < a.elems.size(); ++i) x.s[i] = Src(a.elems[i], Type::kB64);
        return x;
      }
      if (a.kind == ast::Operand::Kind::kName &&
          (a.name == "%clock" || a.name == "%clock64" || a.name == "%globaltimer" ||
           a.name == "%clock_hi" || a.name == "%globaltimer_lo" || a.name == "%globaltimer_hi")) {
        x.op = Op::kReadClock;
        x.aux = a.name == "%clock"            ? 0
                : a.name == "%clock64"        ? 1
                : a.name == "%clock_hi"       ? 3
                : a.name == "%globaltimer"    ? 2
                : a.name == "%globaltimer_lo" ? 4
                                              : 5;
        return x;
      }
      x.op = Op::kMov;
      x.s[0] = Src(a, x.type);
      return x;
    }
    if (op == "cvt" && std::find(parts.begin(), parts.end(), "tf32") != parts.end()) {
      // cvt.{rna,rn,rz}{.satfinite}.tf32.f32 d, a (sm_80 / sm_90): d holds the TF32 value as
      // an f32 bit pattern with the low 13 mantissa bits clear.
      if (m.types.size() != 1 || m.types[0] != Type::kF32) throw Unsupported{"cvt tf32 form"};
      for (auto r : m.rest)
        if (r != "tf32") throw Unsupported{"modifier ." + std::string(r)};
      if (m.rnd != Rounding::kRna && m.rnd != Rounding::kRn && m.rnd != Rounding::kRz)
        throw Unsupported{"cvt tf32 rounding"};
      Need(in, 2);
      x.op = Op::kCvtTf32;
      x.rnd = m.rnd;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], Type::kF32);
      return x;
    }
    if (op == "cvt") {
      NoRest(m);
      if (m.types.size() != 2) throw Unsupported{"cvt needs two types"};
      x.op = Op::kCvt;
      x.type = m.types[0];
      x.type2 = m.types[1];
      if (x.type == Type::kF16x2 || x.type == Type::kBF16x2) {
        // cvt.rn.f16x2.f32 d, a, b: a goes to the upper half.
        Need(in, 3);
        x.d[0] = Dst(ops[0]);
        x.s[0] = Src(ops[1], x.type2);
        x.s[1] = Src(ops[2], x.type2);
        return x;
      }
      if (x.type2 == Type::kF16x2 || x.type2 == Type::kBF16x2) throw Unsupported{"cvt type"};
      Need(in, 2);
      x.d[0] = Dst(ops[0], &dst_bits_);
      x.dst_bits = static_cast<uint8_t>(dst_bits_);
      x.s[0] = Src(ops[1], x.type2);
      return x;
    }
    if (op == "cvta" || op == "isspacep") {
      bool to = false;
      for (auto r : m.rest) {
        if (r == "to")
          to = true;
        else
          throw Unsupported{"modifier ." + std::string(r)};
      }
      if (!m.has_space) throw Unsupported{"missing state space"};
      Need(in, 2);
      x.op = op == "isspacep" ? Op::kIsspacep : (to ? Op::kCvtaTo : Op::kCvta);
      x.mod = static_cast<uint8_t>(m.space);
      x.type = m.types.empty() ? Type::kU64 : m.types[0];
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], Type::kU64);
      return x;
    }
    if (op == "ld" || op == "ldu" || op == "st") {
      NoRest(m);
      bool store = op == "st";
      Need(in, m.cache_policy ? 3 : 2);
      x.op = store ? Op::kSt : Op::kLd;
      x.type = OneType(m);
      x.vec = m.vec;
      const ast::Operand& val = store ? ops[1] : ops[0];
      Name::Kind sk;
      Address(store ? ops[0] : ops[1], &x, &sk);
      x.space = m.has_space ? m.space : Space::kGeneric;
      if (x.space == Space::kKernelParam) {
        if (sk == Name::Kind::kThreadParam || (sk == Name::Kind::kReg && !is_entry_) || store)
          x.space = Space::kThreadParam;
        if (store && sk == Name::Kind::kKernelParam) throw Unsupported{"store to kernel param"};
      }
      if (x.space == Space::kGeneric && sk != Name::Kind::kReg && sk != Name::Kind::kModuleVar)
        throw Unsupported{"generic access through a non-global symbol"};
      uint32_t bits = 64;
      if (val.kind == ast::Operand::Kind::kVector) {
        if (val.elems.size() != x.vec)
          Error("vector size does not match .v" + std::to_string(x.vec));
        for (size_t i = 0; i < val.elems.size(); ++i) {
          if (store)
            x.d[i] = Src(val.elems[i], x.type);  // d[] holds the values to store
          else
            x.d[i] = Dst(val.elems[i], &bits);
        }
      } else {
        if (x.vec != 1) Error("vector access needs a {..} operand");
        if (store)
          x.d[0] = Src(val, x.type);
        else
          x.d[0] = Dst(val, &bits);
      }
      x.dst_bits = static_cast<uint8_t>(bits);
      x.polls = !store && m.polls;
      return x;
    }
    if (op == "atom" || op == "red") {
      AtomOp a = AtomOp::kAdd;
      bool have = false;
      for (auto r : m.rest) {
        static const std::unordered_map<std::string_view, AtomOp> kAtom = {
            {"add", AtomOp::kAdd},   {"min", AtomOp::kMin}, {"max", AtomOp::kMax},
            {"exch", AtomOp::kExch}, {"cas", AtomOp::kCas}, {"and", AtomOp::kAnd},
            {"or", AtomOp::kOr},     {"xor", AtomOp::kXor}, {"inc", AtomOp::kInc},
            {"dec", AtomOp::kDec},
        };
        auto it = kAtom.find(r);
        if (it == kAtom.end() || have) throw Unsupported{"modifier ." + std::string(r)};
        a = it->second;
        have = true;
      }
      if (!have) throw Unsupported{"missing atomic operation"};
      x.op = Op::kAtom;
      x.mod = static_cast<uint8_t>(a);
      x.polls = op == "atom";
      x.type = OneType(m);
      int bits = TypeBits(x.type);
      // 16-bit: atom.cas.b16 and atom.add.noftz.{f16,bf16} (sm_70 / sm_90); f16x2 and bf16x2
      // adds are per half.
      if (bits == 16 && !(a == AtomOp::kCas && !IsFloat(x.type)) &&
          !(a == AtomOp::kAdd && IsFloat(x.type)))
        throw Unsupported{"16-bit atomic operation"};
      if (bits != 16 && bits != 32 && bits != 64) throw Unsupported{"atomic width"};
      if (IsFloat(x.type) && a != AtomOp::kAdd && a != AtomOp::kExch)
        throw Unsupported{"float atomic op"};
      if ((x.type == Type::kF16x2 || x.type == Type::kBF16x2) && a != AtomOp::kAdd)
        throw Unsupported{"packed half atomic op"};
      if (m.vec != 1 && !(IsFloat(x.type) && a == AtomOp::kAdd && bits >= 16 && bits <= 32))
        throw Unsupported{"vector atomics other than float add"};
      x.space = m.has_space ? m.space : Space::kGeneric;
      if (x.space != Space::kGeneric && x.space != Space::kGlobal && x.space != Space::kShared)
        throw Unsupported{"atomic state space"};
      bool red = op == "red";
      size_t nsrc = a == AtomOp::kCas ? 2 : 1;
      Need(in, (red ? 1 : 2) + nsrc + (m.cache_policy ? 1 : 0));
      size_t i = 0;
      if (!red) {
        if (m.vec == 1) x.d[0] = Dst(ops[0]);
        x.has_result = 1;
        i = 1;
      }
      Name::Kind sk;
      Address(ops[i], &x, &sk);
      if (m.vec != 1) {
        // atom.add.v2.f32 {d..}, [a], {b..} (sm_90): each element is its own atomic add.
        x.vec = m.vec;
        const ast::Operand& v = ops[i + 1];
        if (v.kind != ast::Operand::Kind::kVector || v.elems.size() != m.vec ||
            (!red && (ops[0].kind != ast::Operand::Kind::kVector || ops[0].elems.size() != m.vec)))
          Error("vector atomic needs {..} operands of .v" + std::to_string(m.vec));
        x.aux = static_cast<uint32_t>(p_.value_slots.size());
        for (size_t k = 0; k < m.vec; ++k) p_.value_slots.push_back(Src(v.elems[k], x.type));
        for (size_t k = 0; k < m.vec; ++k)
          p_.value_slots.push_back(red ? kSlotSink : Dst(ops[0].elems[k]));
        x.d[0] = kSlotSink;
        return x;
      }
      x.s[1] = Src(ops[i + 1], x.type);
      if (nsrc == 2) x.s[2] = Src(ops[i + 2], x.type);
      return x;
    }
    if (op == "bra" || op == "brx") {
      NoRest(m);
      if (op == "brx") throw Unsupported{"indirect branch"};
      Need(in, 1);
      if (ops[0].kind != ast::Operand::Kind::kName) Error("bra needs a label");
      auto it = labels_.find(ops[0].name);
      if (it == labels_.end()) Error("unknown label '" + ops[0].name + "'");
      x.op = Op::kBra;
      x.aux = it->second;
      return x;
    }
    if (op == "call") {
      NoRest(m);
      return DecodeCall(in, x);
    }
    if (op == "ret" || op == "exit") {
      NoRest(m);
      Need(in, 0);
      x.op = (op == "exit" || is_entry_) ? Op::kExit : Op::kRet;
      return x;
    }
    if (op == "barrier" && parts.size() >= 3 && parts[1] == "cluster") {
      // barrier.cluster.arrive[.release|.relaxed][.aligned], barrier.cluster.wait[.acquire]
      // [.aligned]: cluster.sync() is one of each.
      bool arrive = parts[2] == "arrive";
      if (!arrive && parts[2] != "wait")
        throw Unsupported{"barrier.cluster." + std::string(parts[2])};
      for (size_t i = 3; i < parts.size(); ++i)
        if (parts[i] != "aligned" && parts[i] != "release" && parts[i] != "relaxed" &&
            parts[i] != "acquire")
          throw Unsupported{"modifier ." + std::string(parts[i])};
      Need(in, 0);
      x.op = arrive ? Op::kClusterArrive : Op::kClusterWait;
      return x;
    }
    if (op == "mapa" || op == "getctarank") {
      NoRest(m);
      const bool mapa = op == "mapa";
      Need(in, mapa ? 3 : 2);
      x.op = mapa ? Op::kMapa : Op::kGetCtaRank;
      x.type = OneType(m);
      if (m.has_space && m.space != Space::kShared) throw Unsupported{"state space"};
      x.mod = m.has_space ? 1 : 0;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], m.has_space ? x.type : Type::kU64);
      if (mapa) x.s[1] = Src(ops[2], Type::kU32);
      return x;
    }
    if (op == "bar" || op == "barrier") {
      // bar.sync / bar.cta.sync / barrier.sync[.aligned] id[, count]; bar.warp.sync mask;
      // bar.red.{popc.u32,and.pred,or.pred} d, id[, count], {!}p (__syncthreads_count etc.).
      bool warp = false, sync = false, red = false;
      int red_mode = -1;
      for (size_t i = 1; i < parts.size(); ++i) {
        auto p = parts[i];
        if (p == "warp")
          warp = true;
        else if (p == "sync")
          sync = true;
        else if (p == "red")
          red = true;
        else if (red && p == "popc")
          red_mode = 0;
        else if (red && p == "and")
          red_mode = 1;
        else if (red && p == "or")
          red_mode = 2;
        else if (p == "cta" || p == "aligned" || p == "u32" || p == "pred")
          continue;
        else
          throw Unsupported{"modifier ." + std::string(p)};
      }
      if (warp) {
        // Lanes of a warp already run in lockstep here.
        x.op = Op::kNop;
        return x;
      }
      // Named barriers and thread counts are not modelled: every barrier waits for all
      // non-exited threads of the block.
      x.op = Op::kBarSync;
      if (red) {
        if (red_mode < 0) throw Unsupported{"bar.red operation"};
        if (ops.size() != 3 && ops.size() != 4) Error("bar.red expects 3 or 4 operands");
        x.has_result = 1;
        x.mod = static_cast<uint8_t>(red_mode);
        x.d[0] = Dst(ops[0]);
        bool neg;
        x.s[2] = PredSrc(ops.back(), &neg);
        x.vec = neg ? 1 : 0;
        return x;
      }
      if (!sync && parts.size() != 1) throw Unsupported{};
      if (ops.empty() || ops.size() > 2) Error("bar.sync expects 1 or 2 operands");
      return x;
    }
    // griddepcontrol (programmatic dependent launch): a stream's launches run one after the
    // other here, so the previous grid has always finished and there is nothing to signal.
    if (op == "membar" || op == "fence" || op == "nanosleep" || op == "pmevent" ||
        op == "prefetch" || op == "prefetchu" || op == "griddepcontrol") {
      x.op = Op::kNop;
      x.polls = op == "nanosleep";  // a waiting thread's pause: its warp gives up its turn
      return x;
    }
    if (op == "trap" || op == "brkpt") {
      x.op = Op::kTrap;
      x.aux = static_cast<uint32_t>(p_.messages.size());
      p_.messages.push_back(std::string(op) + " executed at line " + std::to_string(in.line) +
                            " in " + fn_->name);
      return x;
    }
    if (op == "shfl") {
      ShflMode mode = ShflMode::kIdx;
      bool have = false;
      for (auto r : m.rest) {
        if (r == "up")
          mode = ShflMode::kUp;
        else if (r == "down")
          mode = ShflMode::kDown;
        else if (r == "bfly")
          mode = ShflMode::kBfly;
        else if (r == "idx")
          mode = ShflMode::kIdx;
        else
          throw Unsupported{"modifier ." + std::string(r)};
        have = true;
      }
      if (!have) throw Unsupported{"missing shfl mode"};
      x.op = Op::kShfl;
      x.mod = static_cast<uint8_t>(mode);
      x.type = Type::kB32;
      if (ops.size() != 4 && ops.size() != 5) Error("shfl expects 4 or 5 operands");
      x.d[0] = Dst(ops[0]);
      if (!ops[0].pair.empty()) {
        ast::Operand q;
        q.name = ops[0].pair;
        x.d[1] = Dst(q);
      }
      for (int i = 0; i < 3; ++i) x.s[i] = Src(ops[i + 1], Type::kB32);
      return x;
    }
    if (op == "vote") {
      VoteMode mode = VoteMode::kAll;
      bool have = false;
      for (auto r : m.rest) {
        if (r == "all")
          mode = VoteMode::kAll;
        else if (r == "any")
          mode = VoteMode::kAny;
        else if (r == "ballot")
          mode = VoteMode::kBallot;
        else if (r == "uni")
          mode = VoteMode::kUni;
        else
          throw Unsupported{"modifier ." + std::string(r)};
        have = true;
      }
      if (m.uni) {
        mode = VoteMode::kUni;
        have = true;
      }
      if (!have) throw Unsupported{"missing vote mode"};
      if (ops.size() != 2 && ops.size() != 3) Error("vote expects 2 or 3 operands");
      x.op = Op::kVote;
      x.mod = static_cast<uint8_t>(mode);
      x.d[0] = Dst(ops[0]);
      bool neg;
      x.s[0] = PredSrc(ops[1], &neg);
      x.vec = neg ? 1 : 0;
      return x;
    }
    if (op == "activemask") {
      Need(in, 1);
      x.op = Op::kActivemask;
      x.d[0] = Dst(ops[0]);
      return x;
    }
    if (op == "match") {
      bool all = false, have = false;
      for (auto r : m.rest) {
        if (r == "any")
          all = false;
        else if (r == "all")
          all = true;
        else
          throw Unsupported{"modifier ." + std::string(r)};
        have = true;
      }
      if (!have) throw Unsupported{"missing match mode"};
      Need(in, 3);
      x.op = all ? Op::kMatchAll : Op::kMatchAny;
      x.type = OneType(m);
      x.d[0] = Dst(ops[0]);
      if (!ops[0].pair.empty()) {
        ast::Operand q;
        q.name = ops[0].pair;
        x.d[1] = Dst(q);
      }
      x.s[0] = Src(ops[1], x.type);
      return x;
    }
    if (op == "redux") {
      // redux.sync.op.type d, a, membermask (sm_80): integer reductions only.
      static const std::unordered_map<std::string_view, AtomOp> kRedux = {
          {"add", AtomOp::kAdd}, {"min", AtomOp::kMin}, {"max", AtomOp::kMax},
          {"and", AtomOp::kAnd}, {"or", AtomOp::kOr},   {"xor", AtomOp::kXor},
      };
      if (m.rest.size() != 1 || !kRedux.count(m.rest[0]))
        throw Unsupported{m.rest.empty() ? "missing operation"
                                         : "modifier ." + std::string(m.rest.back())};
      Type t = OneType(m);
      if (t != Type::kU32 && t != Type::kS32 && t != Type::kB32) throw Unsupported{"type"};
      Need(in, 3);
      x.op = Op::kRedux;
      x.mod = static_cast<uint8_t>(kRedux.at(m.rest[0]));
      x.type = t;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Src(ops[1], t);
      x.s[1] = Src(ops[2], Type::kU32);
      return x;
    }
    if (op == "createpolicy") {
      // createpolicy.{fractional,range}... d, ...: an L2 eviction policy for .L2::cache_hint
      // accesses, which ignore it here; d gets an opaque 0.
      if (ops.empty()) Error("createpolicy needs a destination");
      x.op = Op::kMov;
      x.type = Type::kB64;
      x.d[0] = Dst(ops[0]);
      x.s[0] = Const(0);
      return x;
    }
    if (op == "mma") return DecodeMma(in, m, x);
    if (op == "ldmatrix") {
      // ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans][.shared{::cta}].b16 {d..}, [a]
      bool shape = false, trans = false;
      uint8_t count = 0;
      for (auto r : m.rest) {
        if (r == "m8n8")
          shape = true;
        else if (r == "x1" || r == "x2" || r == "x4")
          count = static_cast<uint8_t>(r[1] - '0');
        else if (r == "trans")
          trans = true;
        else
          throw Unsupported{"modifier ." + std::string(r)};
      }
      if (!shape || !count || m.types.size() != 1 || m.types[0] != Type::kB16)
        throw Unsupported{"form (only .m8n8 .b16)"};
      if (m.has_space && m.space != Space::kShared) throw Unsupported{"state space"};
      Need(in, 2);
      const ast::Operand& d = ops[0];
      if (d.kind == ast::Operand::Kind::kVector) {
        if (d.elems.size() != count)
          Error("ldmatrix .x" + std::to_string(count) + " needs " + std::to_string(count) +
                " destinations");
        for (size_t i = 0; i < count; ++i) x.d[i] = Dst(d.elems[i]);
      } else {
        if (count != 1) Error("ldmatrix .x" + std::to_string(count) + " needs a {..} operand");
        x.d[0] = Dst(d);
      }
      Name::Kind sk;
      Address(ops[1], &x, &sk);
      x.op = Op::kLdmatrix;
      x.space = m.has_space ? Space::kShared : Space::kGeneric;
      x.vec = count;
      x.mod = trans ? 1 : 0;
      return x;
    }
    if (op == "cp" && parts.size() > 1 && parts[1] == "async") return DecodeCpAsync(in, parts, x);
    if (op == "tex" || op == "tld4") return DecodeTexture(in, m, x, op == "tld4");
    if (op == "txq" || op == "suq") return DecodeQuery(in, m, x, op == "suq");
    if (op == "suld" || op == "sust") return DecodeSurface(in, m, x, op == "sust");
    throw Unsupported{};
  }

  // mma.sync.aligned.<shape>.row.col.<d>.<a>.<b>.<c> {d..}, {a..}, {b..}, {c..}: the shapes
  // and types of MmaKind. A, B and C registers go to Program::value_slots from x.aux on.
  Inst DecodeMma(const ast::Instruction& in, const Mods& m, Inst x) {
    const auto& ops = in.operands;
    std::string_view shape;
    bool row = false, col = false;
    int tf32 = 0;  // tf32 is not a Type: ParseMods leaves it in rest
    for (auto r : m.rest) {
      if (r == "m8n8k4" || r == "m16n8k16" || r == "m16n8k8")
        shape = r;
      else if (r == "row")
        row = true;
      else if (r == "col")
        col = true;
      else if (r == "tf32")
        ++tf32;
      else
        throw Unsupported{"modifier ." + std::string(r)};
    }
    // The four types in order; the two tf32 sit between the f32 destination and accumulator.
    std::vector<std::string_view> all;
    for (Type t : m.types)
      all.push_back(t == Type::kF64    ? "f64"
                    : t == Type::kF32  ? "f32"
                    : t == Type::kF16  ? "f16"
                    : t == Type::kBF16 ? "bf16"
                                       : "?");
    if (tf32) {
      if (tf32 != 2 || all.size() != 2) throw Unsupported{"types"};
      all = {all[0], "tf32", "tf32", all[1]};
    }
    if (!row || !col || all.size() != 4) throw Unsupported{"layout or types"};
    MmaKind kind;
    size_t na, nb, ncd;
    auto is = [&](const char* d, const char* ab, const char* c) {
      return all[0] == d && all[1] == ab && all[2] == ab && all[3] == c;
    };
    if (shape == "m8n8k4" && is("f64", "f64", "f64")) {
      kind = MmaKind::kM8n8k4F64, na = 1, nb = 1, ncd = 2;
    } else if (shape == "m16n8k16" && is("f32", "f16", "f32")) {
      kind = MmaKind::kM16n8k16F16, na = 4, nb = 2, ncd = 4;
    } else if (shape == "m16n8k16" && is("f32", "bf16", "f32")) {
      kind = MmaKind::kM16n8k16Bf16, na = 4, nb = 2, ncd = 4;
    } else if (shape == "m16n8k8" && is("f32", "f16", "f32")) {
      kind = MmaKind::kM16n8k8F16, na = 2, nb = 1, ncd = 4;
    } else if (shape == "m16n8k8" && is("f32", "bf16", "f32")) {
      kind = MmaKind::kM16n8k8Bf16, na = 2, nb = 1, ncd = 4;
    } else if (shape == "m16n8k8" && is("f32", "tf32", "f32")) {
      kind = MmaKind::kM16n8k8Tf32, na = 4, nb = 2, ncd = 4;
    } else {
      throw Unsupported{"shape and types"};
    }
    Need(in, 4);
    const Type reg = kind == MmaKind::kM8n8k4F64 ? Type::kF64 : Type::kB32;
    auto regs = [&](const ast::Operand& o, size_t count, auto&& each) {
      if (o.kind == ast::Operand::Kind::kVector) {
        if (o.elems.size() != count) Error(in.opcode + ": an operand has the wrong register count");
        for (const ast::Operand& e : o.elems) each(e);
      } else {
        if (count != 1) Error(in.opcode + ": an operand needs a {..} list");
        each(o);
      }
    };
    x.op = Op::kMma;
    x.mod = static_cast<uint8_t>(kind);
    x.type = reg;
    size_t i = 0;
    regs(ops[0], ncd, [&](const ast::Operand& e) { x.d[i++] = Dst(e); });
    x.aux = static_cast<uint32_t>(p_.value_slots.size());
    regs(ops[1], na, [&](const ast::Operand& e) { p_.value_slots.push_back(Src(e, reg)); });
    regs(ops[2], nb, [&](const ast::Operand& e) { p_.value_slots.push_back(Src(e, reg)); });
    regs(ops[3], ncd, [&](const ast::Operand& e) { p_.value_slots.push_back(Src(e, reg)); });
    return x;
  }

  // cp.async.{ca,cg}.shared{::cta}.global [dst], [src], cp-size{, src-size | , ignore-src}
  // copies at once (the copy is complete before any wait can observe it); commit_group,
  // wait_group and wait_all are then no-ops.
  Inst DecodeCpAsync(const ast::Instruction& in, const std::vector<std::string_view>& parts,
                     Inst x) {
    const auto& ops = in.operands;
    if (parts.size() >= 3 &&
        (parts[2] == "commit_group" || parts[2] == "wait_group" || parts[2] == "wait_all")) {
      if (parts.size() != 3) throw Unsupported{"modifier ." + std::string(parts[3])};
      if (ops.size() != (parts[2] == "wait_group" ? 1u : 0u))
        Error(in.opcode + " has the wrong number of operands");
      x.op = Op::kNop;
      return x;
    }
    bool shared = false, global = false, have_cache = false;
    for (size_t i = 2; i < parts.size(); ++i) {
      auto p = parts[i];
      if ((p == "ca" || p == "cg") && !have_cache)
        have_cache = true;
      else if (p == "shared" || p == "shared::cta")
        shared = true;
      else if (p == "global")
        global = true;
      else if (p.rfind("L2::", 0) == 0 && p != "L2::cache_hint")
        continue;  // prefetch size
      else
        throw Unsupported{"modifier ." + std::string(p)};
    }
    if (!have_cache || !shared || !global) throw Unsupported{"form"};
    if (ops.size() < 3 || ops.size() > 4) Error("cp.async expects 3 or 4 operands");
    if (ops[2].kind != ast::Operand::Kind::kInt ||
        (ops[2].imm != 4 && ops[2].imm != 8 && ops[2].imm != 16))
      Error("cp.async size must be 4, 8 or 16");
    x.op = Op::kCpAsync;
    x.vec = static_cast<uint8_t>(ops[2].imm);
    Name::Kind sk;
    Inst dst, src;
    Address(ops[0], &dst, &sk);
    Address(ops[1], &src, &sk);
    if (src.imm != static_cast<int32_t>(src.imm)) Error("cp.async source offset out of range");
    x.s[0] = dst.s[0];
    x.imm = dst.imm;
    x.s[1] = src.s[0];
    x.aux = static_cast<uint32_t>(static_cast<int32_t>(src.imm));
    x.s[2] = Const(x.vec);  // src-size: all of it
    x.mod = 0;
    if (ops.size() == 4) {
      const ast::Operand& o = ops[3];
      Name* n = o.kind == ast::Operand::Kind::kName ? Lookup(o.name) : nullptr;
      if (n && n->kind == Name::Kind::kReg && n->bits == 1) {
        bool neg;
        x.s[2] = PredSrc(o, &neg);  // ignore-src: when true, the destination is zero-filled
        x.mod = neg ? 2 : 1;
      } else {
        x.s[2] = Src(o, Type::kU32);
      }
    }
    return x;
  }

  // ---- textures and surfaces ---------------------------------------------------------------

  struct Geometry {
    std::string_view name;
    bool layered;      // first coordinate is the layer index
    int axes;          // coordinates after the layer
    size_t min_count;  // coordinate vector length (3d/a2d/cube: a 4th element is ignored)
    size_t max_count;
  };

  static const Geometry* FindGeometry(std::string_view r) {
    static constexpr Geometry kGeometries[] = {
        {"1d", false, 1, 1, 1},   {"2d", false, 2, 2, 2}, {"3d", false, 3, 3, 4},
        {"a1d", true, 1, 2, 2},   {"a2d", true, 2, 3, 4}, {"cube", false, 3, 3, 4},
        {"acube", true, 3, 4, 4},
    };
    for (const Geometry& g : kGeometries)
      if (g.name == r) return &g;
    return nullptr;
  }

  // The handle operand `a` of `[a, ...]` / `[a]`: a .u64 register, or a kernel parameter
  // declared .texref/.surfref (read from the parameter buffer at launch).
  void TextureHandle(const ast::Operand& o, TextureOp* t) {
    if (o.kind != ast::Operand::Kind::kAddress || o.name.empty() || o.imm != 0)
      Error("expected a texture or surface operand [handle, ...]");
    Name* n = Lookup(o.name);
    if (!n) Error("unknown name '" + o.name + "'");
    if (n->kind == Name::Kind::kReg) {
      t->handle = n->slot;
      return;
    }
    if (n->kind == Name::Kind::kKernelParam && n->size >= 8) {
      t->handle = kNoSlot;
      t->handle_param = n->offset;
      return;
    }
    throw Unsupported{"texture or surface named by " + o.name};
  }

  // Coordinates of `[a, {c...}]` assigned to `t` per `g`; `type` is the coordinate type.
  void TextureCoords(const ast::Operand& addr, const Geometry& g, Type type, TextureOp* t) {
    if (addr.elems.size() > 1) throw Unsupported{"separate sampler operand"};
    if (addr.elems.empty()) Error("texture or surface operand without coordinates");
    const ast::Operand& c = addr.elems[0];
    std::vector<const ast::Operand*> list;
    if (c.kind == ast::Operand::Kind::kVector) {
      for (const ast::Operand& e : c.elems) list.push_back(&e);
    } else {
      list.push_back(&c);
    }
    if (list.size() < g.min_count || list.size() > g.max_count)
      Error("." + std::string(g.name) + " expects " + std::to_string(g.min_count) +
            " coordinates, got " + std::to_string(list.size()));
    size_t i = 0;
    if (g.layered) t->layer = Src(*list[i++], Type::kU32);
    for (int a = 0; a < g.axes; ++a) t->coord[a] = Src(*list[i++], type);
    for (; i < list.size(); ++i) Src(*list[i], type);  // ignored element; must still be valid
  }

  // tex.grad's dPdx or dPdy: a scalar (1D) or a vector of .f32, one element per axis the
  // geometry addresses (a .v4 for 3D and cube maps: the fourth element is not used).
  void Gradient(const ast::Operand& o, const Geometry& g, uint32_t out[3]) {
    std::vector<const ast::Operand*> list;
    if (o.kind == ast::Operand::Kind::kVector) {
      for (const ast::Operand& e : o.elems) list.push_back(&e);
    } else {
      list.push_back(&o);
    }
    if (list.size() < static_cast<size_t>(g.axes) || list.size() > 4)
      Error("tex.grad ." + std::string(g.name) + " expects " + std::to_string(g.axes) +
            " gradient components, got " + std::to_string(list.size()));
    for (size_t i = 0; i < list.size(); ++i) {
      uint32_t slot = Src(*list[i], Type::kF32);
      if (i < 3) out[i] = slot;
    }
  }

  uint32_t AddTextureOp(const TextureOp& t) {
    p_.texture_ops.push_back(t);
    return static_cast<uint32_t>(p_.texture_ops.size() - 1);
  }

  // tex{.base,.level,.grad}.geom.v4.dtype.ctype d{|p}, [a, c]{, lod | , dPdx, dPdy};
  // tld4.comp.geom.v4.dtype.f32 d{|p}, [a, c];
  Inst DecodeTexture(const ast::Instruction& in, const Mods& m, Inst x, bool gather) {
    const Geometry* geom = nullptr;
    int extra = 0;  // operands after [a, c]
    bool lod_seen = false;
    TexLod lod = TexLod::kBase;
    int comp = -1;
    for (auto r : m.rest) {
      if (const Geometry* g = FindGeometry(r); g && !geom) {
        geom = g;
      } else if (!gather && (r == "base" || r == "level" || r == "grad") && !lod_seen) {
        lod_seen = true;
        lod = r == "level" ? TexLod::kLevel : r == "grad" ? TexLod::kGrad : TexLod::kBase;
        extra = r == "level" ? 1 : r == "grad" ? 2 : 0;
      } else if (gather && comp < 0 && (r == "r" || r == "g" || r == "b" || r == "a")) {
        comp = r == "r" ? 0 : r == "g" ? 1 : r == "b" ? 2 : 3;
      } else {
        throw Unsupported{"modifier ." + std::string(r)};
      }
    }
    if (!geom) throw Unsupported{"missing or unsupported geometry"};
    if (gather && comp < 0) throw Unsupported{"missing tld4 component"};
    if (gather && geom->name != "2d" && geom->name != "a2d" && geom->name != "cube" &&
        geom->name != "acube")
      throw Unsupported{"tld4 geometry ." + std::string(geom->name)};
    if (m.vec != 4 || m.types.size() != 2) throw Unsupported{"expected .v4.dtype.ctype"};
    Type dtype = m.types[0], ctype = m.types[1];
    if (dtype != Type::kF32 && dtype != Type::kS32 && dtype != Type::kU32)
      throw Unsupported{"result type"};
    if (ctype != Type::kF32 && (gather || ctype != Type::kS32))
      throw Unsupported{"coordinate type"};
    const auto& ops = in.operands;
    size_t want = 2 + static_cast<size_t>(extra);
    if (ops.size() < want) Error(in.opcode + " expects " + std::to_string(want) + " operands");
    if (ops.size() > want) throw Unsupported{"offset or depth-compare operand"};
    if (ops[0].kind != ast::Operand::Kind::kVector || ops[0].elems.size() != 4)
      Error(in.opcode + " needs a 4-element destination vector");
    TextureOp t;
    TextureHandle(ops[1], &t);
    TextureCoords(ops[1], *geom, ctype, &t);
    t.int_coords = ctype == Type::kS32;
    t.component = static_cast<uint8_t>(gather ? comp : 0);
    t.lod_mode = lod;
    if (lod == TexLod::kLevel) {
      // The level of detail has the coordinates' type: an .s32 level with .s32 coordinates.
      t.lod_int = ctype == Type::kS32;
      t.lod = Src(ops[2], ctype);
    } else if (lod == TexLod::kGrad) {
      Gradient(ops[2], *geom, t.dpdx);
      Gradient(ops[3], *geom, t.dpdy);
    }
    for (int i = 0; i < 4; ++i) x.d[i] = Dst(ops[0].elems[i]);
    if (!ops[0].pair.empty()) {
      ast::Operand q;
      q.name = ops[0].pair;
      t.sparse = Dst(q);
    }
    x.op = gather ? Op::kTld4 : Op::kTex;
    x.type = dtype;
    x.vec = 4;
    x.aux = AddTextureOp(t);
    return x;
  }

  // txq{.level}.query.b32 d, [a]{, lod};  suq.query.b32 d, [a];
  Inst DecodeQuery(const ast::Instruction& in, const Mods& m, Inst x, bool surface) {
    static const std::unordered_map<std::string_view, TexQuery> kQueries = {
        {"width", TexQuery::kWidth},
        {"height", TexQuery::kHeight},
        {"depth", TexQuery::kDepth},
        {"channel_data_type", TexQuery::kChannelDataType},
        {"channel_order", TexQuery::kChannelOrder},
        {"normalized_coords", TexQuery::kNormalizedCoords},
        {"filter_mode", TexQuery::kFilterMode},
        {"addr_mode_0", TexQuery::kAddrMode0},
        {"addr_mode_1", TexQuery::kAddrMode1},
        {"addr_mode_2", TexQuery::kAddrMode2},
        {"array_size", TexQuery::kArraySize},
        {"num_mipmap_levels", TexQuery::kNumMipmapLevels},
        {"num_samples", TexQuery::kNumSamples},
        {"memory_layout", TexQuery::kMemoryLayout},
    };
    bool level = false, have = false;
    TexQuery q = TexQuery::kWidth;
    for (auto r : m.rest) {
      auto it = kQueries.find(r);
      if (!surface && r == "level" && !level) {
        level = true;
      } else if (it != kQueries.end() && !have) {
        q = it->second;
        have = true;
      } else {
        throw Unsupported{"query ." + std::string(r)};
      }
    }
    if (!have) throw Unsupported{"missing query"};
    bool texture_only = q == TexQuery::kNormalizedCoords || q == TexQuery::kFilterMode ||
                        q == TexQuery::kAddrMode0 || q == TexQuery::kAddrMode1 ||
                        q == TexQuery::kAddrMode2 || q == TexQuery::kNumMipmapLevels ||
                        q == TexQuery::kNumSamples;
    if ((surface && texture_only) || (!surface && q == TexQuery::kMemoryLayout) ||
        (level && q != TexQuery::kWidth && q != TexQuery::kHeight && q != TexQuery::kDepth))
      throw Unsupported{"query for this instruction"};
    Type t32 = OneType(m);
    if (TypeBits(t32) != 32 || IsFloat(t32)) throw Unsupported{"query type"};
    Need(in, level ? 3 : 2);
    TextureOp t;
    TextureHandle(in.operands[1], &t);
    if (!in.operands[1].elems.empty()) Error(in.opcode + " takes [handle] without coordinates");
    if (level) t.lod = Src(in.operands[2], Type::kU32);
    t.query = q;
    x.op = surface ? Op::kSuq : Op::kTxq;
    x.type = Type::kB32;
    x.vec = 1;
    x.d[0] = Dst(in.operands[0]);
    x.aux = AddTextureOp(t);
    return x;
  }

  // suld.b.geom{.cop}{.vec}.btype.clamp d, [a, b];  sust.b.geom{.cop}{.vec}.btype.clamp [a, b], c;
  Inst DecodeSurface(const ast::Instruction& in, const Mods& m, Inst x, bool store) {
    const Geometry* geom = nullptr;
    bool unformatted = false, have_clamp = false;
    TextureOp t;
    for (auto r : m.rest) {
      const Geometry* g = FindGeometry(r);
      if (g && !geom && g->name != "cube" && g->name != "acube") {
        geom = g;
      } else if (r == "b" && !unformatted) {
        unformatted = true;
      } else if ((r == "trap" || r == "clamp" || r == "zero") && !have_clamp) {
        have_clamp = true;
        t.clamp = r == "trap"    ? SurfaceClamp::kTrap
                  : r == "clamp" ? SurfaceClamp::kClamp
                                 : SurfaceClamp::kZero;
      } else {
        throw Unsupported{"modifier ." + std::string(r)};  // includes sust.p (formatted)
      }
    }
    if (!unformatted) throw Unsupported{"formatted surface access"};
    if (!geom) throw Unsupported{"missing or unsupported geometry"};
    Type type = OneType(m);
    int bits = TypeBits(type);
    if (bits < 8 || type == Type::kPred) throw Unsupported{"surface data type"};
    Need(in, 2);
    const ast::Operand& addr = store ? in.operands[0] : in.operands[1];
    const ast::Operand& val = store ? in.operands[1] : in.operands[0];
    TextureHandle(addr, &t);
    TextureCoords(addr, *geom, Type::kS32, &t);
    t.elem_bytes = static_cast<uint8_t>(bits / 8);
    // A scalar may be written bare or as a 1-element vector ({%r5}, as nvcc does).
    std::vector<const ast::Operand*> vals;
    if (val.kind == ast::Operand::Kind::kVector) {
      for (const ast::Operand& e : val.elems) vals.push_back(&e);
    } else {
      vals.push_back(&val);
    }
    if (vals.size() != m.vec) Error("vector size does not match .v" + std::to_string(m.vec));
    for (size_t i = 0; i < vals.size(); ++i) {
      if (store)
        x.s[i] = Src(*vals[i], type);
      else
        x.d[i] = Dst(*vals[i]);
    }
    x.op = store ? Op::kSust : Op::kSuld;
    x.type = type;
    x.vec = m.vec;
    x.aux = AddTextureOp(t);
    return x;
  }

  // The address of a function with a body (for indirect calls); queues it for decoding.
  uint64_t FunctionAddress(const std::string& name) {
    auto fit = funcs_.find(name);
    if (fit == funcs_.end() || !fit->second->has_body || !function_ids_.count(name))
      throw Unsupported{"address of external function or kernel " + name};
    FuncLayout& fl = Layout(fit->second);
    uint32_t id = function_ids_.at(name);
    if (fl.table_index < 0) {
      fl.table_index = static_cast<int>(p_.functions.size());
      p_.function_by_id[id] = fl.table_index;
      FunctionEntry e;
      e.name = name;
      e.id = id;
      e.entry_pc = fl.entry_pc;
      e.params = fl.params;
      e.returns = fl.returns;
      p_.functions.push_back(std::move(e));
    }
    if (!fl.queued) {
      fl.queued = true;
      queue_.push_back(name);
    }
    return kFunctionAddressBase + uint64_t{id} * kFunctionAddressStep;
  }

  // call (ret), %reg, (args), prototype: the callee is looked up at run time.
  Inst DecodeIndirectCall(const ast::Operand* rets, uint32_t target, const ast::Operand* args,
                          Inst x) {
    CallSite cs;
    cs.target = target;
    auto bind = [&](const ast::Operand* list, std::vector<ByteCopy>* out, bool is_arg) {
      if (!list) return;
      for (const ast::Operand& o : list->elems) {
        Name* nm = o.kind == ast::Operand::Kind::kName ? Lookup(o.name) : nullptr;
        if (!nm || nm->kind != Name::Kind::kThreadParam)
          throw Unsupported{"call arguments other than .param variables"};
        if (is_arg)
          out->push_back({nm->offset, 0, nm->size});
        else
          out->push_back({0, nm->offset, nm->size});
      }
    };
    bind(args, &cs.args, true);
    bind(rets, &cs.results, false);
    x.op = Op::kCall;
    x.aux = static_cast<uint32_t>(p_.calls.size());
    p_.calls.push_back(std::move(cs));
    return x;
  }

  Inst DecodeCall(const ast::Instruction& in, Inst x) {
    // call (ret), func, (args);  call func, (args);  call func;  call (ret), func;
    const auto& ops = in.operands;
    size_t i = 0;
    const ast::Operand* rets = nullptr;
    const ast::Operand* args = nullptr;
    if (i < ops.size() && ops[i].kind == ast::Operand::Kind::kList) rets = &ops[i++];
    if (i >= ops.size() || ops[i].kind != ast::Operand::Kind::kName) Error("call needs a target");
    const std::string& target = ops[i++].name;
    if (i < ops.size() && ops[i].kind == ast::Operand::Kind::kList) args = &ops[i++];
    if (Name* n = Lookup(target); n && n->kind == Name::Kind::kReg) {
      // The prototype (or a list of possible targets) names the signature; the interpreter
      // checks the callee's parameter count against the call at run time instead.
      if (i + 1 < ops.size()) Error("call has too many operands");
      return DecodeIndirectCall(rets, n->slot, args, x);
    }
    if (i < ops.size()) throw Unsupported{"direct call with a prototype operand"};
    auto fit = funcs_.find(target);
    if (fit == funcs_.end() || !fit->second->has_body) {
      if (target == "__assertfail" || target == "__assert_fail") {
        x.op = Op::kAssert;
        x.aux = static_cast<uint32_t>(p_.messages.size());
        p_.messages.push_back("device-side assertion failed (line " + std::to_string(in.line) +
                              " in " + fn_->name + ")");
        return x;
      }
      if (target == "vprintf") return DecodeVprintf(rets, args, x);
      if (target == "malloc" || target == "free") return DecodeHeapCall(target, rets, args, x);
      if (target == "cudaGraphSetConditional") return DecodeSetConditional(rets, args, x);
      if (fit == funcs_.end() && !module_has_decl(target))
        Error("call to unknown function '" + target + "'");
      throw Unsupported{"call to external function " + target};
    }
    // A call back into the caller's own strongly connected component is recursion.
    auto caller = components_.find(fn_->name);
    auto callee_c = components_.find(target);
    if (caller != components_.end() && callee_c != components_.end() &&
        caller->second == callee_c->second)
      throw Unsupported{"recursive call to " + target};
    const ast::Function* callee = fit->second;
    FuncLayout& fl = Layout(callee);
    CallSite cs;
    auto bind = [&](const ast::Operand* list,
                    const std::vector<std::pair<uint32_t, uint32_t>>& slots,
                    std::vector<ByteCopy>* out, bool to_callee) {
      size_t n = list ? list->elems.size() : 0;
      if (n != slots.size()) Error("call to " + target + " with wrong number of parameters");
      for (size_t k = 0; k < n; ++k) {
        const ast::Operand& o = list->elems[k];
        Name* nm = o.kind == ast::Operand::Kind::kName ? Lookup(o.name) : nullptr;
        if (!nm || nm->kind != Name::Kind::kThreadParam)
          throw Unsupported{"call arguments other than .param variables"};
        uint32_t size = std::min(nm->size, slots[k].second);
        if (to_callee)
          out->push_back({nm->offset, slots[k].first, size});
        else
          out->push_back({slots[k].first, nm->offset, size});
      }
    };
    bind(args, fl.params, &cs.args, true);
    bind(rets, fl.returns, &cs.results, false);
    uint32_t index = static_cast<uint32_t>(p_.calls.size());
    p_.calls.push_back(std::move(cs));
    fl.call_sites.push_back(index);
    if (!fl.queued) {
      fl.queued = true;
      queue_.push_back(callee->name);
    } else if (fl.entry_pc) {
      p_.calls[index].entry_pc = fl.entry_pc;
    }
    x.op = Op::kCall;
    x.aux = index;
    return x;
  }

  // The .param variable a call to an external function (vprintf, malloc, free) passes.
  Name* CallParam(const ast::Operand& o) {
    Name* nm = o.kind == ast::Operand::Kind::kName ? Lookup(o.name) : nullptr;
    if (!nm || nm->kind != Name::Kind::kThreadParam)
      throw Unsupported{"call arguments other than .param variables"};
    return nm;
  }

  // vprintf(format, args) runs in the executor; its CallSite records where the caller's
  // argument and return params are (`from` of args, `to` of results).
  Inst DecodeVprintf(const ast::Operand* rets, const ast::Operand* args, Inst x) {
    if (!args || args->elems.size() != 2 || (rets && rets->elems.size() > 1))
      Error("call to vprintf with wrong number of parameters");
    CallSite cs;
    for (const ast::Operand& o : args->elems) {
      Name* nm = CallParam(o);
      cs.args.push_back({nm->offset, 0, std::min<uint32_t>(nm->size, 8)});
    }
    if (rets && rets->elems.size() == 1) {
      Name* nm = CallParam(rets->elems[0]);
      cs.results.push_back({0, nm->offset, std::min<uint32_t>(nm->size, 4)});
    }
    x.op = Op::kVprintf;
    x.aux = static_cast<uint32_t>(p_.calls.size());
    p_.calls.push_back(std::move(cs));
    return x;
  }

  // malloc(size) -> pointer / free(pointer) on the launch's device heap; the CallSite records
  // where the caller's argument (`from` of args[0]) and result (`to` of results[0]) are.
  Inst DecodeHeapCall(const std::string& target, const ast::Operand* rets, const ast::Operand* args,
                      Inst x) {
    bool is_malloc = target == "malloc";
    if (!args || args->elems.size() != 1 ||
        (rets ? rets->elems.size() : 0) != (is_malloc ? 1u : 0u))
      Error("call to " + target + " with wrong number of parameters");
    CallSite cs;
    Name* a = CallParam(args->elems[0]);
    cs.args.push_back({a->offset, 0, std::min<uint32_t>(a->size, 8)});
    if (is_malloc) {
      Name* r = CallParam(rets->elems[0]);
      cs.results.push_back({0, r->offset, std::min<uint32_t>(r->size, 8)});
    }
    x.op = is_malloc ? Op::kMalloc : Op::kFree;
    x.aux = static_cast<uint32_t>(p_.calls.size());
    p_.calls.push_back(std::move(cs));
    return x;
  }

  // cudaGraphSetConditional(handle, value): the CallSite records where the two are.
  Inst DecodeSetConditional(const ast::Operand* rets, const ast::Operand* args, Inst x) {
    if (!args || args->elems.size() != 2 || (rets && !rets->elems.empty()))
      Error("call to cudaGraphSetConditional with wrong number of parameters");
    CallSite cs;
    Name* h = CallParam(args->elems[0]);
    Name* v = CallParam(args->elems[1]);
    cs.args.push_back({h->offset, 0, std::min<uint32_t>(h->size, 8)});
    cs.args.push_back({v->offset, 0, std::min<uint32_t>(v->size, 4)});
    x.op = Op::kSetConditional;
    x.aux = static_cast<uint32_t>(p_.calls.size());
    p_.calls.push_back(std::move(cs));
    return x;
  }

  bool module_has_decl(const std::string& name) const {
    for (const ast::Function& f : module_.functions)
      if (f.name == name) return true;
    return false;
  }

  const ast::Module& module_;
  const std::map<std::string, const ast::Function*>& funcs_;
  const std::map<std::string, const ast::Variable*>& module_vars_;
  const std::map<std::string, uint32_t>& function_ids_;
  const std::vector<std::string>& address_taken_;
  const std::map<std::string, uint32_t>& components_;  // function -> call-graph SCC id
  size_t& module_insts_;  // instructions decoded for the whole module so far
  Program& p_;
  std::unordered_map<uint64_t, uint32_t> const_slots_;
  std::unordered_map<const ast::Variable*, uint32_t> shared_offsets_;
  std::set<uint32_t> dynamic_shared_slots_;
  std::vector<const ast::Variable*> dynamic_shared_;
  std::unordered_map<std::string, Name> module_names_;
  std::vector<std::unordered_map<std::string, Name>> scopes_;
  std::unordered_map<std::string, uint32_t> labels_;
  std::map<std::string, FuncLayout> layouts_;
  std::vector<std::string> queue_;
  const ast::Function* fn_ = nullptr;
  bool is_entry_ = false;
  int line_ = 0;
  uint32_t dst_bits_ = 64;
  uint32_t num_regs_ = 0;
};

}  // namespace

bool DecodeModule(const ast::Module& module, std::vector<Program>* programs,
                  std::vector<KernelInfo>* kernels, std::vector<VariableInfo>* variables,
                  std::string* error) {
  try {
    std::map<std::string, const ast::Function*> funcs;
    for (const ast::Function& f : module.functions) {
      auto& slot = funcs[f.name];
      if (!slot || (f.has_body && !slot->has_body))
        slot = &f;
      else if (f.has_body && slot->has_body)
        throw DecodeError{f.line, "function '" + f.name + "' defined twice"};
    }
    std::map<std::string, uint32_t> function_ids;
    for (const auto& [name, f] : funcs)
      if (f->has_body && !f->is_entry)
        function_ids.emplace(name, static_cast<uint32_t>(function_ids.size()));
    std::vector<std::string> address_taken;
    std::map<std::string, const ast::Variable*> vars;
    for (const ast::Variable& v : module.variables) {
      if (!vars.emplace(v.name, &v).second)
        throw DecodeError{v.line, "variable '" + v.name + "' declared twice"};
      if (v.space == "global" || v.space == "const") {
        if (v.is_extern) continue;  // defined in another module; cannot be placed here
        if (VarSize(v) > (uint64_t{1} << 32))
          throw DecodeError{v.line, "variable '" + v.name + "' is too large"};
        VariableInfo vi;
        vi.name = v.name;
        vi.size = VarSize(v);
        vi.align = std::max<uint32_t>(1, VarAlign(v));
        vi.is_const = v.space == "const";
        vi.is_managed = v.is_managed;
        vi.initializer = v.init;
        if (vi.initializer.size() > vi.size)
          throw DecodeError{v.line, "initializer of '" + v.name + "' is larger than the variable"};
        for (const auto& [at, symbol] : v.init_symbols) {
          auto id = function_ids.find(symbol);
          if (id == function_ids.end())
            throw DecodeError{v.line, "initializer of '" + v.name + "' names '" + symbol +
                                          "', which is not a function defined in this module"};
          uint64_t addr = kFunctionAddressBase + uint64_t{id->second} * kFunctionAddressStep;
          std::memcpy(vi.initializer.data() + at, &addr, 8);
          address_taken.push_back(symbol);
        }
        variables->push_back(std::move(vi));
      } else if (v.space == "local") {
        throw DecodeError{v.line, "module-scope .local variables are not supported"};
      }
    }
    std::map<std::string, uint32_t> components = CallGraphComponents(funcs);
    size_t module_insts = 0;
    for (const ast::Function& f : module.functions) {
      if (!f.is_entry || !f.has_body) continue;
      Program p;
      KernelInfo info;
      KernelDecoder d(module, funcs, vars, function_ids, address_taken, components, &module_insts,
                      &p);
      d.Run(f, &info);
      programs->push_back(std::move(p));
      kernels->push_back(std::move(info));
    }
    return true;
  } catch (const DecodeError& e) {
    if (error) *error = "line " + std::to_string(e.line) + ": " + e.what;
    return false;
  }
}

}  // namespace cuwire::ptx
