// PTX text -> syntax tree. Recursive descent over a token list; the grammar covered is what
// nvcc 12/13 emits plus the common hand-written forms.
//
// The text may come from a hostile client: recursion (nested operands and initializers) is
// bounded by kMaxNesting, and the token list and the tree by kMaxTokens / kMaxTreeBytes, so
// no image can overflow the stack or make a load allocate without bound.

#include "server/backend/sim/ptx/parser.h"

#include <cctype>
#include <cstring>
#include <stdexcept>

#include "server/backend/sim/ptx/float16.h"

namespace cuwire::ptx::ast {
namespace {

// Nesting of {..} / (..) operands, `!` prefixes and {..} initializers. nvcc emits at most 2.
constexpr int kMaxNesting = 32;
// A token costs 24 bytes; nvcc's output has about one token per 4 bytes of text, so this
// admits some 60 MiB of text.
constexpr size_t kMaxTokens = size_t{16} << 20;
// Bytes of syntax tree (body items and operands, estimated with a heap string each): about 20
// times the text for nvcc's output, so this admits some 50 MiB of text.
constexpr size_t kMaxTreeBytes = size_t{1} << 30;
constexpr size_t kHeapStringBytes = 32;

struct Token {
  enum class Kind : uint8_t { kIdent, kNumber, kString, kPunct, kEnd };
  Kind kind = Kind::kEnd;
  int line = 0;
  std::string_view text;
};

// Internal control flow only: caught in Parse() and turned into an error message.
struct SyntaxError {
  int line;
  std::string what;
};

bool IsIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' ||
         c == '.';
}
bool IsIdentChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.' ||
         c == ':';  // ':' appears inside modifiers like ld.global.L1::evict_last
}

std::vector<Token> Tokenize(std::string_view s) {
  std::vector<Token> out;
  int line = 1;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < s.size() && !(s[i] == '*' && s[i + 1] == '/')) {
        if (s[i] == '\n') ++line;
        ++i;
      }
      if (i + 1 >= s.size()) throw SyntaxError{line, "unterminated comment"};
      i += 2;
      continue;
    }
    Token t;
    t.line = line;
    size_t start = i;
    if (c == '"') {
      ++i;
      while (i < s.size() && s[i] != '"' && s[i] != '\n') ++i;
      if (i >= s.size() || s[i] != '"') throw SyntaxError{line, "unterminated string"};
      ++i;
      t.kind = Token::Kind::kString;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      ++i;
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
      // Decimal exponent with sign: 1.5e-3.
      if (i < s.size() && (s[i] == '-' || s[i] == '+') && (s[i - 1] == 'e' || s[i - 1] == 'E') &&
          !(s[start] == '0' && start + 1 < s.size() &&
            std::strchr("xXfFdD", s[start + 1]) != nullptr)) {
        ++i;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      }
      t.kind = Token::Kind::kNumber;
    } else if (IsIdentStart(c)) {
      ++i;
      while (i < s.size() && IsIdentChar(s[i])) {
        // A lone ':' ends a label ("name:"); "::" belongs to a modifier.
        if (s[i] == ':') {
          if (i + 1 < s.size() && s[i + 1] == ':') {
            i += 2;
            continue;
          }
          break;
        }
        ++i;
      }
      t.kind = Token::Kind::kIdent;
      if (c == '.') {
        // Directives may be written without spaces (`.reg.b32 f;` in the inline asm of
        // cuda_fp16.hpp): each `.word` is its own token.
        for (size_t j = start + 1; j < i; ++j) {
          if (s[j] != '.') continue;
          t.text = s.substr(start, j - start);
          out.push_back(t);
          start = j;
        }
      }
    } else if (std::strchr(",;:{}[]()+-=<>@!|*", c) != nullptr) {
      ++i;
      t.kind = Token::Kind::kPunct;
    } else {
      throw SyntaxError{line, std::string("unexpected character '") + c + "'"};
    }
    t.text = s.substr(start, i - start);
    out.push_back(t);
    if (out.size() > kMaxTokens)
      throw SyntaxError{line, "more than " + std::to_string(kMaxTokens) + " tokens"};
  }
  Token end;
  end.line = line;
  out.push_back(end);
  return out;
}

bool ParseUnsigned(std::string_view t, uint64_t* v) {
  if (t.empty()) return false;
  uint64_t r = 0;
  size_t i = 0;
  int base = 10;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
    base = 16;
    i = 2;
  } else if (t.size() > 1 && t[0] == '0' && std::isdigit(static_cast<unsigned char>(t[1]))) {
    base = 8;
    i = 1;
  }
  size_t end = t.size();
  if (end > i && (t[end - 1] == 'U' || t[end - 1] == 'u')) --end;  // 10U
  if (end <= i) return false;
  for (; i < end; ++i) {
    int d;
    char c = t[i];
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    if (d >= base) return false;
    r = r * base + d;  // wraps like nvcc's 64-bit literals
  }
  *v = r;
  return true;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  void ParseModule(Module* m) {
    while (!AtEnd()) {
      const Token& t = Peek();
      if (IsPunct(t, ';')) {
        Next();
        continue;
      }
      if (t.kind != Token::Kind::kIdent) Fail(t, "expected a directive");
      CountNode(t, sizeof(Variable));
      std::string_view d = t.text;
      if (d == ".version" || d == ".target" || d == ".address_size" || d == ".file" ||
          d == ".loc") {
        SkipLine();
      } else if (d == ".pragma") {
        SkipPast(';');
      } else if (d == ".section") {
        Next();
        Next();  // section name
        SkipBalancedBraces();
      } else {
        ParseModuleDeclaration(m);
      }
    }
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    size_t k = pos_ + ahead;
    return k < toks_.size() ? toks_[k] : toks_.back();
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ < toks_.size() - 1) ++pos_;
    return t;
  }
  bool AtEnd() const { return Peek().kind == Token::Kind::kEnd; }
  static bool IsPunct(const Token& t, char c) {
    return t.kind == Token::Kind::kPunct && t.text[0] == c;
  }
  [[noreturn]] static void Fail(const Token& t, const std::string& what) {
    std::string near = t.kind == Token::Kind::kEnd ? "end of input" : std::string(t.text);
    throw SyntaxError{t.line, what + " near '" + near + "'"};
  }
  void Expect(char c) {
    const Token& t = Next();
    if (!IsPunct(t, c)) Fail(t, std::string("expected '") + c + "'");
  }
  bool Accept(char c) {
    if (IsPunct(Peek(), c)) {
      Next();
      return true;
    }
    return false;
  }
  // Counts one level of recursion for the scope's lifetime.
  class Nest {
   public:
    Nest(Parser& p, const Token& at) : p_(p) {
      if (++p_.depth_ > kMaxNesting)
        Fail(at, "nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    ~Nest() { --p_.depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };

  // Counts a tree node of `bytes` against kMaxTreeBytes.
  void CountNode(const Token& at, size_t bytes) {
    tree_bytes_ += bytes + kHeapStringBytes;
    if (tree_bytes_ > kMaxTreeBytes)
      Fail(at, "module larger than " + std::to_string(kMaxTreeBytes >> 20) + " MiB of syntax");
  }

  std::string_view ExpectIdent() {
    const Token& t = Next();
    if (t.kind != Token::Kind::kIdent) Fail(t, "expected a name");
    return t.text;
  }
  uint64_t ExpectUnsigned() {
    const Token& t = Next();
    uint64_t v;
    if (t.kind != Token::Kind::kNumber || !ParseUnsigned(t.text, &v)) Fail(t, "expected a number");
    return v;
  }
  void SkipLine() {
    int line = Next().line;
    while (!AtEnd() && Peek().line == line) Next();
  }
  void SkipPast(char c) {
    while (!AtEnd() && !IsPunct(Peek(), c)) Next();
    Next();
  }
  void SkipBalancedBraces() {
    Expect('{');
    int depth = 1;
    while (depth > 0) {
      const Token& t = Next();
      if (t.kind == Token::Kind::kEnd) Fail(t, "unbalanced '{'");
      if (IsPunct(t, '{')) ++depth;
      if (IsPunct(t, '}')) --depth;
    }
  }

  void ParseModuleDeclaration(Module* m) {
    bool is_extern = false;
    // Linkage prefixes.
    while (Peek().kind == Token::Kind::kIdent &&
           (Peek().text == ".visible" || Peek().text == ".extern" || Peek().text == ".weak" ||
            Peek().text == ".common")) {
      if (Peek().text == ".extern") is_extern = true;
      Next();
    }
    const Token& t = Peek();
    if (t.kind != Token::Kind::kIdent) Fail(t, "expected a declaration");
    if (t.text == ".entry" || t.text == ".func") {
      ParseFunction(m, is_extern);
      return;
    }
    if (t.text == ".global" || t.text == ".const" || t.text == ".shared" || t.text == ".local") {
      Variable v = ParseVariable();
      v.is_extern = is_extern;
      m->variables.push_back(std::move(v));
      Expect(';');
      return;
    }
    Fail(t, "unknown directive");
  }

  // `.space [.align N] [.vN] .type name[dims] [= init]` (no trailing ';').
  Variable ParseVariable() {
    Variable v;
    const Token& sp = Next();
    v.line = sp.line;
    v.space = std::string(sp.text.substr(1));
    bool pointer = false;
    for (;;) {
      const Token& t = Peek();
      if (t.kind != Token::Kind::kIdent || t.text[0] != '.') break;
      Next();
      if (t.text == ".align") {
        // After `.ptr`, `.align N` is the pointee's alignment: the parameter itself is laid
        // out at its own size (`.param .u64 .ptr .global .align 4 p` sits at an 8-byte
        // boundary, as the assembler puts it).
        const auto n = static_cast<uint32_t>(ExpectUnsigned());
        if (!pointer) v.align = n;
      } else if (t.text == ".ptr") {
        pointer = true;
      } else if (t.text == ".attribute") {
        // `.global .attribute(.managed) .align 4 .u32 x`: a __managed__ variable.
        Expect('(');
        do {
          const Token& a = Next();
          if (a.kind != Token::Kind::kIdent || (a.text != ".managed" && a.text != ".unified"))
            Fail(a, "unknown variable attribute");
          if (a.text == ".managed") v.is_managed = true;
          // `.unified(uuid1, uuid2)` names the variable across modules: no layout change.
          if (a.text == ".unified" && Accept('(')) {
            while (!Accept(')')) {
              if (Peek().kind == Token::Kind::kEnd) Fail(Peek(), "unterminated .unified");
              Next();
            }
          }
        } while (Accept(','));
        Expect(')');
      } else if (t.text == ".v2" || t.text == ".v4" || t.text == ".v8") {
        v.vec = static_cast<uint32_t>(t.text[2] - '0');
      } else if (t.text == ".global" || t.text == ".shared" || t.text == ".local" ||
                 t.text == ".const" || t.text == ".param") {
        // `.param .u64 .ptr .global .align 16 p`: attributes that do not change layout.
      } else if (v.space == "param" &&
                 (t.text == ".texref" || t.text == ".surfref" || t.text == ".samplerref")) {
        // An opaque texture/surface/sampler handle passed as a kernel parameter: 64 bits.
        v.type = "b64";
      } else {
        if (TypeSize(t.text.substr(1)) == 0) Fail(t, "unknown type");
        v.type = std::string(t.text.substr(1));
      }
    }
    if (v.type.empty()) Fail(Peek(), "declaration without a type");
    const Token& name = Next();
    if (name.kind != Token::Kind::kIdent) Fail(name, "expected a variable name");
    v.name = std::string(name.text);
    if (Accept('<')) {
      uint64_t n = ExpectUnsigned();
      if (n > (1u << 20)) Fail(Peek(), "register range too large");
      v.reg_range = static_cast<uint32_t>(n);
      Expect('>');
    }
    while (Accept('[')) {
      v.is_array = true;
      if (Accept(']')) {
        v.is_unsized = true;
        v.count = 0;
        continue;
      }
      uint64_t dim = ExpectUnsigned();
      if (dim > (uint64_t{1} << 40) || (dim && v.count > (uint64_t{1} << 40) / dim))
        Fail(Peek(), "array too large");
      v.count *= dim;
      Expect(']');
    }
    if (Accept('=')) {
      v.has_init = true;
      ParseInitializer(&v);
    }
    return v;
  }

  void EncodeInitElement(Variable* v, const Token& t, bool negative) {
    uint32_t size = TypeSize(v->type);
    uint64_t bits = 0;
    bool is_float_type = v->type[0] == 'f';
    std::string_view s = t.text;
    // The bits of `d` as the element's float type (f32 or f64).
    auto float_bits = [size](double d) {
      return size == 4 ? uint64_t{FloatBits(static_cast<float>(d))} : DoubleBits(d);
    };
    if (t.kind != Token::Kind::kNumber) Fail(t, "unsupported initializer element");
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'f' || s[1] == 'F' || s[1] == 'd' || s[1] == 'D')) {
      uint64_t raw;
      if (!ParseUnsigned(std::string("0x") + std::string(s.substr(2)), &raw)) Fail(t, "bad float");
      bits = raw;  // written bits are taken as is
    } else if (s.find_first_of(".eE") != std::string_view::npos && s.find('x') == s.npos) {
      double d = 0;
      try {
        d = std::stod(std::string(s));
      } catch (const std::exception&) {  // out of range, or no digits
        Fail(t, "bad float");
      }
      if (negative) d = -d;
      bits = float_bits(d);
    } else {
      uint64_t u;
      if (!ParseUnsigned(s, &u)) Fail(t, "bad number");
      if (is_float_type) {
        bits = float_bits(negative ? -static_cast<double>(u) : static_cast<double>(u));
      } else {
        bits = negative ? (~u + 1) : u;
      }
    }
    for (uint32_t i = 0; i < size; ++i) v->init.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  }

  // One scalar element: a number, or (in a 64-bit variable) a symbol name, `generic(name)`.
  void ParseInitElement(Variable* v) {
    if (Peek().kind == Token::Kind::kIdent) {
      const Token& t = Next();
      if (TypeSize(v->type) != 8) Fail(t, "symbol in an initializer of a non-64-bit variable");
      std::string_view name = t.text;
      if (name == "generic" && Accept('(')) {
        const Token& inner = Next();
        if (inner.kind != Token::Kind::kIdent) Fail(inner, "expected a symbol");
        name = inner.text;
        Expect(')');
      }
      v->init_symbols.push_back({v->init.size(), std::string(name)});
      v->init.insert(v->init.end(), 8, 0);
      return;
    }
    bool neg = Accept('-');
    EncodeInitElement(v, Next(), neg);
  }

  void ParseInitializer(Variable* v) {
    Nest nest(*this, Peek());
    CountNode(Peek(), 8);
    if (Accept('{')) {
      if (Accept('}')) return;
      do {
        if (IsPunct(Peek(), '{'))
          ParseInitializer(v);
        else
          ParseInitElement(v);
      } while (Accept(','));
      Expect('}');
      return;
    }
    ParseInitElement(v);
  }

  void ParseParamList(std::vector<Variable>* out) {
    Expect('(');
    if (Accept(')')) return;
    do {
      const Token& t = Peek();
      if (t.kind != Token::Kind::kIdent || (t.text != ".param" && t.text != ".reg"))
        Fail(t, "expected .param");
      out->push_back(ParseVariable());
    } while (Accept(','));
    Expect(')');
  }

  void ParseFunction(Module* m, bool is_extern) {
    Function f;
    const Token& kw = Next();
    f.line = kw.line;
    f.is_entry = kw.text == ".entry";
    if (!f.is_entry && IsPunct(Peek(), '(')) ParseParamList(&f.returns);
    f.name = std::string(ExpectIdent());
    if (IsPunct(Peek(), '(')) ParseParamList(&f.params);
    // Performance directives between the signature and the body.
    for (;;) {
      const Token& t = Peek();
      if (t.kind != Token::Kind::kIdent) break;
      if (t.text == ".maxntid" || t.text == ".reqntid") {
        Next();
        uint64_t prod = ExpectUnsigned();
        while (Accept(',')) {
          uint64_t n = ExpectUnsigned();
          // Real limits are 1024; anything above 2^32 would wrap to "no limit".
          if (n && prod > UINT32_MAX / n) Fail(t, "thread count too large");
          prod *= n;
        }
        if (prod > UINT32_MAX) Fail(t, "thread count too large");
        f.max_threads = static_cast<uint32_t>(prod);
      } else if (t.text == ".reqnctapercluster") {
        Next();
        f.cluster[0] = f.cluster[1] = f.cluster[2] = 1;
        for (int i = 0; i < 3; ++i) {
          const uint64_t n = ExpectUnsigned();
          if (n == 0 || n > 1024) Fail(t, "cluster dimension out of range");
          f.cluster[i] = static_cast<uint32_t>(n);
          if (!Accept(',')) break;
        }
        Accept(';');
      } else if (t.text == ".explicitcluster") {
        Next();
        f.explicit_cluster = true;
        Accept(';');
      } else if (t.text == ".minnctapersm" || t.text == ".maxnreg" || t.text == ".maxnctapersm" ||
                 t.text == ".noreturn" || t.text == ".pragma" || t.text == ".maxclusterrank") {
        Next();
        while (Peek().kind == Token::Kind::kNumber || IsPunct(Peek(), ',') ||
               Peek().kind == Token::Kind::kString)
          Next();
        Accept(';');
      } else {
        break;
      }
    }
    if (Accept(';') || is_extern) {
      if (is_extern) Accept(';');
      m->functions.push_back(std::move(f));
      return;
    }
    f.has_body = true;
    Expect('{');
    ParseBody(&f);
    m->functions.push_back(std::move(f));
  }

  void ParseBody(Function* f) {
    // Marks where a nested { } block begins or ends in the body.
    auto add_block_mark = [&](BodyItem::Kind kind, const Token& at) {
      BodyItem b;
      b.kind = kind;
      b.line = at.line;
      f->body.push_back(std::move(b));
    };
    int depth = 1;
    while (depth > 0) {
      const Token& t = Peek();
      if (t.kind == Token::Kind::kEnd) Fail(t, "missing '}' at end of function");
      CountNode(t, sizeof(BodyItem));
      if (IsPunct(t, '{')) {
        Next();
        ++depth;
        add_block_mark(BodyItem::Kind::kBlockBegin, t);
        continue;
      }
      if (IsPunct(t, '}')) {
        Next();
        if (--depth == 0) break;
        add_block_mark(BodyItem::Kind::kBlockEnd, t);
        continue;
      }
      if (IsPunct(t, ';')) {
        Next();
        continue;
      }
      if (t.kind == Token::Kind::kIdent && t.text[0] == '.') {
        std::string_view d = t.text;
        if (d == ".loc" || d == ".file") {
          SkipLine();
        } else if (d == ".pragma") {
          SkipPast(';');
        } else if (d == ".reg" || d == ".local" || d == ".shared" || d == ".param" ||
                   d == ".const" || d == ".global") {
          BodyItem b;
          b.kind = BodyItem::Kind::kDeclaration;
          b.line = t.line;
          b.var = ParseVariable();
          // `.reg .b32 %a, %b;`: several names share one declaration.
          while (Accept(',')) {
            CountNode(Peek(), sizeof(BodyItem));
            BodyItem more = b;
            const Token& n = Next();
            if (n.kind != Token::Kind::kIdent) Fail(n, "expected a register name");
            more.var.name = std::string(n.text);
            more.var.reg_range = 0;
            if (Accept('<')) {
              uint64_t n = ExpectUnsigned();
              if (n > (1u << 20)) Fail(Peek(), "register range too large");
              more.var.reg_range = static_cast<uint32_t>(n);
              Expect('>');
            }
            f->body.push_back(std::move(b));
            b = std::move(more);
          }
          f->body.push_back(std::move(b));
          Expect(';');
        } else {
          Fail(t, "unknown directive in function body");
        }
        continue;
      }
      if (t.kind == Token::Kind::kIdent && IsPunct(Peek(1), ':')) {
        Next();
        Next();
        // `prototype_0 : .callprototype ...;` declares an indirect-call signature.
        if (Peek().kind == Token::Kind::kIdent && Peek().text == ".callprototype") {
          SkipPast(';');
          continue;
        }
        BodyItem b;
        b.kind = BodyItem::Kind::kLabel;
        b.line = t.line;
        b.label = std::string(t.text);
        f->body.push_back(std::move(b));
        continue;
      }
      BodyItem b;
      b.kind = BodyItem::Kind::kInstruction;
      b.line = t.line;
      ParseInstruction(&b.inst);
      f->body.push_back(std::move(b));
    }
  }

  void ParseInstruction(Instruction* in) {
    in->line = Peek().line;
    if (Accept('@')) {
      in->guard_negated = Accept('!');
      in->guard = std::string(ExpectIdent());
    }
    const Token& op = Next();
    if (op.kind != Token::Kind::kIdent || op.text[0] == '.' || op.text[0] == '%')
      Fail(op, "expected an instruction");
    in->opcode = std::string(op.text);
    if (Accept(';')) return;
    do {
      in->operands.push_back(ParseOperand());
    } while (Accept(','));
    Expect(';');
  }

  void ParseNumberInto(const Token& t, bool negative, Operand* o) {
    std::string_view s = t.text;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'f' || s[1] == 'F' || s[1] == 'd' || s[1] == 'D')) {
      uint64_t raw;
      if (!ParseUnsigned(std::string("0x") + std::string(s.substr(2)), &raw))
        Fail(t, "bad float literal");
      o->kind = Operand::Kind::kFloat;
      o->fbits = raw;
      if (s[1] == 'f' || s[1] == 'F') {
        if (s.size() != 10) Fail(t, "0f literal needs 8 hex digits");
        o->fbits_width = 32;
        uint32_t b = static_cast<uint32_t>(raw);
        float f;
        std::memcpy(&f, &b, 4);
        o->fval = f;
      } else {
        if (s.size() != 18) Fail(t, "0d literal needs 16 hex digits");
        o->fbits_width = 64;
        std::memcpy(&o->fval, &raw, 8);
      }
      if (negative) {
        o->fval = -o->fval;
        o->fbits ^= o->fbits_width == 32 ? 0x80000000ull : 0x8000000000000000ull;
      }
      return;
    }
    bool hex = s.size() > 1 && (s[1] == 'x' || s[1] == 'X');
    if (!hex && s.find_first_of(".eE") != std::string_view::npos) {
      o->kind = Operand::Kind::kFloat;
      try {
        o->fval = std::stod(std::string(s));
      } catch (const std::exception&) {
        Fail(t, "bad float literal");
      }
      if (negative) o->fval = -o->fval;
      return;
    }
    uint64_t u;
    if (!ParseUnsigned(s, &u)) Fail(t, "bad integer literal");
    o->kind = Operand::Kind::kInt;
    o->imm = static_cast<int64_t>(negative ? (~u + 1) : u);
  }

  Operand ParseOperand() {
    Operand o;
    const Token& t = Peek();
    Nest nest(*this, t);
    CountNode(t, sizeof(Operand));
    if (IsPunct(t, '{')) {
      Next();
      o.kind = Operand::Kind::kVector;
      do {
        o.elems.push_back(ParseOperand());
      } while (Accept(','));
      Expect('}');
      // `{%f1, %f2, %f3, %f4}|%p`: tex/tld4 with a residency predicate.
      if (Accept('|')) o.pair = std::string(ExpectIdent());
      return o;
    }
    if (IsPunct(t, '(')) {
      Next();
      o.kind = Operand::Kind::kList;
      if (Accept(')')) return o;
      do {
        o.elems.push_back(ParseOperand());
      } while (Accept(','));
      Expect(')');
      return o;
    }
    if (IsPunct(t, '[')) {
      Next();
      o.kind = Operand::Kind::kAddress;
      if (Peek().kind == Token::Kind::kIdent && IsPunct(Peek(1), ',')) {
        // Texture/surface operands: [tex, {coords}]. Kept for the decoder to reject.
        o.name = std::string(Next().text);
        while (Accept(',')) o.elems.push_back(ParseOperand());
        Expect(']');
        return o;
      }
      if (Peek().kind == Token::Kind::kIdent) {
        o.name = std::string(Next().text);
        if (IsPunct(Peek(), '+') || IsPunct(Peek(), '-')) {
          bool neg = false;
          while (IsPunct(Peek(), '+') || IsPunct(Peek(), '-')) {
            if (Next().text[0] == '-') neg = !neg;
          }
          uint64_t v = ExpectUnsigned();
          o.imm = static_cast<int64_t>(neg ? (~v + 1) : v);
        }
      } else {
        bool neg = Accept('-');
        uint64_t v = ExpectUnsigned();
        o.imm = static_cast<int64_t>(neg ? (~v + 1) : v);
      }
      Expect(']');
      return o;
    }
    if (IsPunct(t, '!')) {
      Next();
      o = ParseOperand();
      o.negated = !o.negated;
      return o;
    }
    if (IsPunct(t, '-')) {
      Next();
      const Token& n = Next();
      if (n.kind != Token::Kind::kNumber) Fail(n, "expected a number after '-'");
      ParseNumberInto(n, true, &o);
      return o;
    }
    if (t.kind == Token::Kind::kNumber) {
      ParseNumberInto(Next(), false, &o);
      return o;
    }
    if (t.kind == Token::Kind::kIdent) {
      o.kind = Operand::Kind::kName;
      o.name = std::string(Next().text);
      if (Accept('|')) o.pair = std::string(ExpectIdent());
      if (IsPunct(Peek(), '+') && Peek(1).kind == Token::Kind::kNumber) {
        // `sym+8` used as a value (mov of an address expression).
        Next();
        o.kind = Operand::Kind::kAddress;
        o.imm = static_cast<int64_t>(ExpectUnsigned());
      }
      return o;
    }
    Fail(t, "expected an operand");
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;          // current recursion depth (Nest)
  size_t tree_bytes_ = 0;  // estimated tree size so far (CountNode)
};

}  // namespace

uint32_t TypeSize(std::string_view t) {
  if (t == "pred") return 1;
  if (t == "b8" || t == "u8" || t == "s8") return 1;
  if (t == "b16" || t == "u16" || t == "s16" || t == "f16" || t == "bf16") return 2;
  if (t == "b32" || t == "u32" || t == "s32" || t == "f32" || t == "f16x2" || t == "bf16x2")
    return 4;
  if (t == "b64" || t == "u64" || t == "s64" || t == "f64") return 8;
  if (t == "b128") return 16;
  return 0;
}

bool Parse(std::string_view text, Module* out, std::string* error) {
  try {
    Parser p(Tokenize(text));
    p.ParseModule(out);
    return true;
  } catch (const SyntaxError& e) {
    if (error) *error = "line " + std::to_string(e.line) + ": " + e.what;
    return false;
  }
}

}  // namespace cuwire::ptx::ast
