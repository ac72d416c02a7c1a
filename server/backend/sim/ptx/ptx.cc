// Module: parse + decode at load time, RunKernel at launch time.

#include "server/backend/sim/ptx/ptx.h"

#include <new>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "server/backend/sim/ptx/executor.h"
#include "server/backend/sim/ptx/parser.h"
#include "server/backend/sim/ptx/program.h"

namespace cuwire::ptx {
namespace {

class ParsedModule final : public Module {
 public:
  ParsedModule(std::vector<Program> programs, std::vector<KernelInfo> kernels,
               std::vector<VariableInfo> variables)
      : programs_(std::move(programs)),
        kernels_(std::move(kernels)),
        variables_(std::move(variables)) {}

  const std::vector<KernelInfo>& kernels() const override { return kernels_; }
  const std::vector<VariableInfo>& variables() const override { return variables_; }

  const KernelInfo* find_kernel(std::string_view name) const override {
    for (const KernelInfo& k : kernels_)
      if (k.name == name) return &k;
    return nullptr;
  }

  LaunchResult launch(std::string_view kernel, const LaunchConfig& config,
                      const std::unordered_map<std::string, uint64_t>& variable_addresses,
                      GlobalMemory& memory) const override {
    for (size_t i = 0; i < kernels_.size(); ++i) {
      if (kernels_[i].name == kernel)
        return RunKernel(programs_[i], kernels_[i], config, variable_addresses, memory);
    }
    LaunchResult r;
    r.error = LaunchError::kInvalidLaunch;
    r.message = "no kernel named '" + std::string(kernel) + "' in this module";
    return r;
  }

 private:
  std::vector<Program> programs_;  // parallel to kernels_
  std::vector<KernelInfo> kernels_;
  std::vector<VariableInfo> variables_;
};

// Functions the driver provides to every module, which PTX declares `.extern` and calls without
// a definition (ptxas resolves them itself); the decoder runs each in its own way.
bool DriverProvides(const std::string& name) {
  return name == "vprintf" || name == "malloc" || name == "free" || name == "__assertfail" ||
         name == "__assert_fail" || name == "cudaGraphSetConditional";
}

// The first direct call to a function the module declares but defines nowhere and the driver
// does not provide, in any function's body (called or not, as ptxas compiles them all): the
// driver's JIT refuses such a module at load ("Unresolved extern function"). Null when none.
const ast::Instruction* UnresolvedCall(const ast::Module& m, std::string* name) {
  std::unordered_set<std::string> declared, defined;
  for (const ast::Function& f : m.functions) (f.has_body ? defined : declared).insert(f.name);
  for (const ast::Function& f : m.functions) {
    for (const ast::BodyItem& b : f.body) {
      if (b.kind != ast::BodyItem::Kind::kInstruction) continue;
      const ast::Instruction& in = b.inst;
      if (in.opcode != "call" && in.opcode.rfind("call.", 0) != 0) continue;
      // call [(results),] target[, (arguments)][, prototype]: the first name is the target.
      for (const ast::Operand& o : in.operands) {
        if (o.kind == ast::Operand::Kind::kList) continue;
        if (o.kind == ast::Operand::Kind::kName && declared.count(o.name) &&
            !defined.count(o.name) && !DriverProvides(o.name)) {
          *name = o.name;
          return &in;
        }
        break;
      }
    }
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<Module> Module::parse(std::string_view ptx_text, std::string* error) {
  // Parser and decoder bound what a module may make them allocate; a host that still cannot
  // hold it fails this load, not the process.
  try {
    ast::Module tree;
    if (!ast::Parse(ptx_text, &tree, error)) return nullptr;
    std::string missing;
    if (const ast::Instruction* call = UnresolvedCall(tree, &missing)) {
      if (error) {
        *error =
            "line " + std::to_string(call->line) + ": unresolved extern function '" + missing + "'";
      }
      return nullptr;
    }
    std::vector<Program> programs;
    std::vector<KernelInfo> kernels;
    std::vector<VariableInfo> variables;
    if (!DecodeModule(tree, &programs, &kernels, &variables, error)) return nullptr;
    return std::make_unique<ParsedModule>(std::move(programs), std::move(kernels),
                                          std::move(variables));
  } catch (const std::bad_alloc&) {
    if (error) *error = "out of host memory while loading the module";
  } catch (const std::length_error&) {
    if (error) *error = "out of host memory while loading the module";
  }
  return nullptr;
}

}  // namespace cuwire::ptx
