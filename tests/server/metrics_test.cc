// The server's figures (server/ops/stats.h) and their Prometheus exposition (server/ops/metrics.h,
// metrics_http.h): session figures added up exactly, the text format checked line by line by a
// strict parser, /metrics of a running server with two tenants after a client ran (exactly the
// families of the table in server/ops/metric_names.h), and the Grafana dashboard in deploy/
// (only metrics and labels of that table).

#include <arpa/inet.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "generated/call_ids.h"
#include "server/ops/config_file.h"
#include "server/ops/metric_names.h"
#include "server/ops/metrics.h"
#include "server/ops/metrics_http.h"
#include "server/ops/stats.h"
#include "server/session/server.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

using server::MetricDef;
using server::MetricType;
using server::SessionStats;
using server::StatsSnapshot;
using server::TenantStats;

// ---- figures

constexpr uint32_t kCopy = static_cast<uint32_t>(CallId::k_cuMemcpyHtoD_v2);
constexpr uint32_t kLaunch = static_cast<uint32_t>(CallId::k_cuLaunchKernel);

TEST(ServerStats, SessionsAddUpToExactPercentiles) {
  TenantStats tenant;
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> dist(9.0, 1.5);
  std::vector<uint64_t> all;
  {
    auto a = tenant.open_session();
    auto b = tenant.open_session();
    for (int i = 0; i < 50000; ++i) {
      const uint64_t v = static_cast<uint64_t>(dist(rng)) + 100;
      all.push_back(v);
      (i % 2 ? a : b)
          ->record(kCopy, v / 10, v, i % 100 == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS, 16, 4);
    }
    tenant.close_session(a);  // one ended, one still live: the snapshot has both
    StatsSnapshot s = tenant.snapshot();
    ASSERT_EQ(s.calls.size(), 1u);
    const server::CallSnapshot& c = s.calls.at(kCopy);
    EXPECT_EQ(c.service.count(), all.size());
    EXPECT_EQ(c.errors.at(CUDA_ERROR_INVALID_VALUE), 500u);
    EXPECT_EQ(s.bytes_in, 16u * all.size());
    EXPECT_EQ(s.bytes_out, 4u * all.size());
    std::sort(all.begin(), all.end());
    for (double q : {0.5, 0.9, 0.99, 0.999}) {
      const double exact =
          static_cast<double>(all[LatencyHistogram::nearest_rank(q, all.size()) - 1]);
      EXPECT_NEAR(static_cast<double>(c.service.quantile(q)), exact, exact * 0.01) << q;
    }
    EXPECT_EQ(c.service.min(), all.front());
    EXPECT_EQ(c.service.max(), all.back());
    EXPECT_EQ(c.service.count_at_most(UINT64_MAX - 1), all.size());
    const uint64_t below = static_cast<uint64_t>(
        std::upper_bound(all.begin(), all.end(), uint64_t{10000}) - all.begin());
    EXPECT_NEAR(static_cast<double>(c.service.count_at_most(10000)), static_cast<double>(below),
                all.size() * 0.01);
    tenant.close_session(b);
  }
  EXPECT_EQ(tenant.snapshot().calls.at(kCopy).service.count(), all.size());
}

std::shared_ptr<SessionStats> new_stats(bool shared = false) {
  std::shared_ptr<SessionStats> s;
  EXPECT_TRUE(SessionStats::create(-1, shared, &s).is_ok());
  return s;
}

TEST(ServerStats, ClientValuesCannotGrowTheTables) {
  auto stats = new_stats();
  SessionStats& s = *stats;
  // Call ids the manifest does not have are one call, 0; error codes past the slots one code.
  // (15 and 1500 are gaps in the manifest's ids, the others past its end.)
  for (uint32_t id : {15u, 1500u, 5000u, 70000u, 0xffffffffu}) {
    s.record(id, 1, 1, CUDA_SUCCESS, 0, 0);
  }
  for (int code = 1; code <= 40; ++code) s.record(1, 1, 1, static_cast<CUresult>(code), 0, 0);
  StatsSnapshot snap;
  s.add_to(&snap);
  EXPECT_EQ(snap.calls.at(0).service.count(), 5u);
  EXPECT_EQ(snap.calls.size(), 2u);  // "unknown" and cuInit
  const auto& errors = snap.calls.at(1).errors;
  EXPECT_LE(errors.size(), SessionStats::kErrorSlots);
  // The first codes keep their own counts, the rest are CUDA_ERROR_UNKNOWN's.
  EXPECT_EQ(errors.at(1), 1u);
  EXPECT_EQ(errors.at(CUDA_ERROR_UNKNOWN), 40u - (SessionStats::kErrorSlots - 1));
  uint64_t total = 0;
  for (const auto& [code, n] : errors) total += n;
  EXPECT_EQ(total, 40u);
}

TEST(ServerStats, CallsPastTheSessionsEntriesCountAsUnknownAndNoneIsLost) {
  auto s = new_stats();
  std::vector<uint32_t> ids;
  for (uint32_t id = 1; id < SessionStats::kCallSlots; ++id) {
    if (call_name(id)) ids.push_back(id);
  }
  ASSERT_GT(ids.size(), SessionStats::kCallEntries);  // the manifest has more calls than entries
  for (uint32_t id : ids) s->record(id, 1, 2, CUDA_SUCCESS, 0, 0);
  for (uint32_t id : ids) s->record(id, 1, 2, CUDA_ERROR_INVALID_VALUE, 0, 0);
  StatsSnapshot snap;
  s->add_to(&snap);
  EXPECT_EQ(snap.total_calls(), 2 * ids.size());
  EXPECT_EQ(s->calls(), 2 * ids.size());
  // The first kCallEntries - 1 calls have rows of their own; the last entry is "unknown"'s.
  EXPECT_EQ(snap.calls.size(), SessionStats::kCallEntries);
  for (size_t i = 0; i + 1 < SessionStats::kCallEntries; ++i) {
    ASSERT_TRUE(snap.calls.count(ids[i])) << server::call_label(ids[i]);
    EXPECT_EQ(snap.calls.at(ids[i]).service.count(), 2u);
    EXPECT_EQ(snap.calls.at(ids[i]).errors.at(CUDA_ERROR_INVALID_VALUE), 1u);
  }
  const uint64_t past = ids.size() - (SessionStats::kCallEntries - 1);
  EXPECT_EQ(snap.calls.at(0).service.count(), 2 * past);
  EXPECT_EQ(snap.calls.at(0).errors.at(CUDA_ERROR_INVALID_VALUE), past);
}

TEST(ServerStats, AnotherProcessRecordsWhereThisOneReads) {
  auto s = new_stats(/*shared=*/true);
  ASSERT_GE(s->fd(), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::shared_ptr<SessionStats> mine;
    if (!SessionStats::attach(dup(s->fd()), -1, &mine).is_ok()) _exit(2);
    for (int i = 0; i < 1000; ++i) mine->record(kLaunch, 5, 100 + i, CUDA_SUCCESS, 3, 4);
    mine->record(kCopy, 5, 7, CUDA_ERROR_OUT_OF_MEMORY, 0, 0);
    mine->set_memory(12345);
    _exit(0);  // gone: what it recorded stays
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  StatsSnapshot snap;
  s->add_to(&snap);
  EXPECT_EQ(snap.calls.at(kLaunch).service.count(), 1000u);
  EXPECT_EQ(snap.calls.at(kLaunch).service.max(), 1099u);
  EXPECT_EQ(snap.calls.at(kCopy).errors.at(CUDA_ERROR_OUT_OF_MEMORY), 1u);
  EXPECT_EQ(snap.bytes_in, 3000u);
  EXPECT_EQ(snap.bytes_out, 4000u);
  EXPECT_EQ(s->memory(), 12345u);
  EXPECT_EQ(s->calls(), 1001u);
}

TEST(ServerStats, ABlockAnotherProcessScribbledOnIsReadAsFiguresOnly) {
  auto s = new_stats(/*shared=*/true);
  s->record(kLaunch, 1, 1, CUDA_SUCCESS, 0, 0);
  struct stat st {};
  ASSERT_EQ(fstat(s->fd(), &st), 0);
  const size_t bytes = static_cast<size_t>(st.st_size);
  EXPECT_NE(ftruncate(s->fd(), 0), 0) << "a worker could shrink the block under the front";
  void* raw = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd(), 0);
  ASSERT_NE(raw, MAP_FAILED);
  // Everything but the block's mark: indexes past the entries, counts at their largest.
  std::memset(static_cast<char*>(raw) + 8, 0xff, bytes - 8);
  StatsSnapshot snap;
  s->add_to(&snap);  // follows no index out of range (AddressSanitizer would say)
  EXPECT_TRUE(snap.calls.empty());
  munmap(raw, bytes);
  // Not a block: refused.
  int other = memfd_create("not-stats", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(ftruncate(other, 4096), 0);
  std::shared_ptr<SessionStats> bad;
  EXPECT_FALSE(SessionStats::attach(other, -1, &bad).is_ok());
  other = memfd_create("zeros", MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(other, static_cast<off_t>(bytes)), 0);
  EXPECT_FALSE(SessionStats::attach(other, -1, &bad).is_ok());  // the right size, no mark
}

TEST(ServerStats, ReadersSeeAConsistentSnapshotWhileTheSessionRecords) {
  auto stats = new_stats();
  SessionStats& s = *stats;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 200000; ++i) s.record(kLaunch, 10, 1000 + i % 5000, CUDA_SUCCESS, 1, 1);
    done = true;
  });
  uint64_t last = 0;
  while (!done) {
    StatsSnapshot snap;
    s.add_to(&snap);
    if (!snap.calls.count(kLaunch)) continue;
    const uint64_t n = snap.calls.at(kLaunch).service.count_at_most(UINT64_MAX - 1);
    EXPECT_GE(n, last);  // counts only grow
    last = n;
  }
  writer.join();
  StatsSnapshot snap;
  s.add_to(&snap);
  EXPECT_EQ(snap.calls.at(kLaunch).service.count(), 200000u);
}

// ---- the exposition format, strictly

// Names as the format defines them (no std::regex: GCC 12 warns inside it under ASan).
bool is_name(const std::string& s, bool colons) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
                    (colons && c == ':') || (i > 0 && std::isdigit(static_cast<unsigned char>(c)));
    if (!ok) return false;
  }
  return true;
}

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses Prometheus text format 0.0.4 and checks it the way a scraper would, plus the rules
// the server promises: every sample belongs to a family declared once with HELP and TYPE before
// it, no series twice, histogram buckets cumulative with +Inf equal to _count.
class Exposition {
 public:
  explicit Exposition(const std::string& text) { parse(text); }

  const std::vector<Sample>& samples() const { return samples_; }
  // The value of the one sample named `name` with exactly `labels`; NaN when there is none.
  double value(const std::string& name, const std::map<std::string, std::string>& labels) const {
    for (const Sample& s : samples_) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    return NAN;
  }
  double value(const MetricDef& m, const std::map<std::string, std::string>& labels,
               const std::string& suffix = "") const {
    return value(std::string(m.name) + suffix, labels);
  }
  const std::map<std::string, std::string>& types() const { return types_; }
  const std::map<std::string, std::string>& helps() const { return helped_; }
  // Families in the order of their TYPE lines.
  const std::vector<std::string>& declared() const { return declared_; }
  // The family a sample's name belongs to (a histogram's _bucket, _sum and _count its own).
  std::string family_of(const std::string& name) const {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sfx = suffix;
      if (name.size() > sfx.size() &&
          name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
        const std::string base = name.substr(0, name.size() - sfx.size());
        auto it = types_.find(base);
        if (it != types_.end() && it->second == "histogram") return base;
      }
    }
    return name;
  }

 private:
  void parse(const std::string& text) {
    size_t pos = 0;
    int line_no = 0;
    ASSERT_FALSE(text.empty());
    ASSERT_EQ(text.back(), '\n') << "the text ends with a newline";
    while (pos < text.size()) {
      const size_t end = text.find('\n', pos);
      const std::string line = text.substr(pos, end - pos);
      pos = end + 1;
      ++line_no;
      SCOPED_TRACE("line " + std::to_string(line_no) + ": " + line);
      ASSERT_FALSE(line.empty()) << "no blank lines";
      if (line[0] == '#') {
        // "# HELP name text" or "# TYPE name type".
        const std::string kind = line.substr(0, 7);
        const size_t sp = line.find(' ', 7);
        const std::string name = line.substr(7, sp == std::string::npos ? sp : sp - 7);
        const std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
        static const std::set<std::string> types = {"counter", "gauge", "histogram", "summary",
                                                    "untyped"};
        if (kind == "# HELP " && is_name(name, true) && !rest.empty()) {
          ASSERT_TRUE(helped_.emplace(name, rest).second) << "HELP twice";
        } else if (kind == "# TYPE " && is_name(name, true) && types.count(rest)) {
          ASSERT_TRUE(types_.emplace(name, rest).second) << "TYPE twice";
          declared_.push_back(name);
          ASSERT_TRUE(helped_.count(name)) << "HELP before TYPE";
          ASSERT_TRUE(sampled_.count(name) == 0) << "TYPE after its samples";
        } else {
          FAIL() << "a comment that is neither HELP nor TYPE";
        }
        continue;
      }
      Sample s;
      size_t i = 0;
      while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
      s.name = line.substr(0, i);
      ASSERT_TRUE(is_name(s.name, true)) << "metric name";
      if (i < line.size() && line[i] == '{') {
        ++i;
        while (line.at(i) != '}') {
          size_t eq = line.find('=', i);
          ASSERT_NE(eq, std::string::npos);
          const std::string label = line.substr(i, eq - i);
          ASSERT_TRUE(is_name(label, false)) << "label name " << label;
          ASSERT_EQ(line.at(eq + 1), '"');
          std::string value;
          size_t j = eq + 2;
          for (;; ++j) {
            ASSERT_LT(j, line.size()) << "unterminated label value";
            if (line[j] == '"') break;
            if (line[j] == '\\') {
              ++j;
              ASSERT_LT(j, line.size());
              ASSERT_TRUE(line[j] == '\\' || line[j] == '"' || line[j] == 'n') << "escape";
              value += line[j] == 'n' ? '\n' : line[j];
            } else {
              value += line[j];
            }
          }
          ASSERT_TRUE(s.labels.emplace(label, value).second) << "label twice";
          i = j + 1;
          if (line.at(i) == ',') ++i;
        }
        ++i;
      }
      ASSERT_EQ(line.at(i), ' ');
      const std::string value = line.substr(i + 1);
      ASSERT_FALSE(value.empty());
      ASSERT_EQ(value.find(' '), std::string::npos) << "no timestamps";
      if (value == "+Inf") {
        s.value = INFINITY;
      } else {
        size_t used = 0;
        try {
          s.value = std::stod(value, &used);
        } catch (const std::exception&) {
          FAIL() << "value " << value;
        }
        ASSERT_EQ(used, value.size()) << "value " << value;
      }
      const std::string family = family_of(s.name);
      ASSERT_TRUE(types_.count(family)) << "sample of an undeclared family " << family;
      sampled_.insert(family);
      std::string key = s.name;
      for (const auto& [k, v] : s.labels) key += "|" + k + "=" + v;
      ASSERT_TRUE(series_.insert(key).second) << "series twice";
      samples_.push_back(s);
    }
    check_histograms();
  }

  void check_histograms() {
    // By family and label set without le: the buckets in order, then _count.
    std::map<std::string, std::vector<std::pair<double, double>>> buckets;
    std::map<std::string, double> counts;
    for (const Sample& s : samples_) {
      const std::string family = family_of(s.name);
      if (types_.at(family) != "histogram") continue;
      auto labels = s.labels;
      std::string le;
      if (s.name == family + "_bucket") {
        ASSERT_TRUE(labels.count("le")) << s.name << " without le";
        le = labels.at("le");
        labels.erase("le");
      } else {
        ASSERT_FALSE(labels.count("le"));
      }
      std::string key = family;
      for (const auto& [k, v] : labels) key += "|" + k + "=" + v;
      if (s.name == family + "_bucket") {
        buckets[key].emplace_back(le == "+Inf" ? INFINITY : std::stod(le), s.value);
      } else if (s.name == family + "_count") {
        counts[key] = s.value;
      }
    }
    for (const auto& [key, b] : buckets) {
      SCOPED_TRACE(key);
      ASSERT_FALSE(b.empty());
      for (size_t i = 1; i < b.size(); ++i) {
        ASSERT_LT(b[i - 1].first, b[i].first) << "le in increasing order";
        ASSERT_LE(b[i - 1].second, b[i].second) << "cumulative";
      }
      ASSERT_TRUE(std::isinf(b.back().first)) << "+Inf last";
      ASSERT_TRUE(counts.count(key)) << "_count";
      ASSERT_EQ(b.back().second, counts.at(key)) << "+Inf equals _count";
    }
  }

  std::set<std::string> sampled_, series_;
  std::map<std::string, std::string> helped_, types_;
  std::vector<std::string> declared_;
  std::vector<Sample> samples_;
};

TEST(Exposition, TheParserRefusesWhatAScraperWould) {
  // The parser must be able to fail, or it checks nothing.
  auto fails = [](const std::string& text) {
    bool failed = false;
    {
      ::testing::TestPartResultArray results;
      ::testing::ScopedFakeTestPartResultReporter reporter(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
      Exposition e(text);
      failed = results.size() > 0;
    }
    return failed;
  };
  const std::string head = "# HELP a_total A.\n# TYPE a_total counter\n";
  EXPECT_FALSE(fails(head + "a_total{x=\"1\"} 3\n"));
  EXPECT_TRUE(fails(head + "a_total{x=\"1\"} 3\na_total{x=\"1\"} 4\n"));  // twice
  EXPECT_TRUE(fails("b 1\n"));                                            // undeclared
  EXPECT_TRUE(fails(head + "a_total{x=\"a\\q\"} 1\n"));                   // bad escape
  EXPECT_TRUE(fails(head + "a_total{x=\"1} 1\n"));                        // unterminated
  EXPECT_TRUE(fails(head + "a_total 1x\n"));                              // bad value
  const std::string h = "# HELP h H.\n# TYPE h histogram\n";
  EXPECT_FALSE(fails(h + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n"));
  EXPECT_TRUE(fails(h + "h_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n"));
  EXPECT_TRUE(fails(h + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 5\n"));
}

// ---- a running server

std::string http(const Address& a, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(a.port);
  inet_pton(AF_INET, a.host.c_str(), &sa.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  EXPECT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::string body_of(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

class Metrics : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << server_.status().to_string();
    ASSERT_TRUE(server_->metrics_address().has_value());
  }

  TestServer server_{{.gpus = 2,
                      .memory_bytes = 4ull << 30,
                      .config = R"(
[[tenant]]
name = "busy"
token = "busy-token"
memory = "1GiB"
compute = 40
[[tenant]]
name = 'odd "name" \ here'
token = "idle-token"
)",
                      .metrics = "127.0.0.1:0"}};
};

// The exposition declares the table's families (server/ops/metric_names.h) and no others, in
// the table's order, each with its type and help text; every sample carries exactly its family's
// labels (a histogram's buckets le besides); with `all_sampled`, every family has samples.
void expect_the_table(const Exposition& e, bool all_sampled) {
  std::vector<std::string> table;
  for (const MetricDef& m : server::kMetrics) table.emplace_back(m.name);
  EXPECT_EQ(e.declared(), table);
  for (const MetricDef& m : server::kMetrics) {
    const std::string name(m.name);
    ASSERT_TRUE(e.types().count(name)) << name;
    EXPECT_EQ(e.types().at(name), server::type_name(m.type)) << name;
    EXPECT_EQ(e.helps().at(name), m.help) << name;
  }
  std::set<std::string> sampled;
  for (const Sample& s : e.samples()) {
    const std::string family = e.family_of(s.name);
    const MetricDef* m = server::find_metric(family);
    ASSERT_NE(m, nullptr) << s.name;
    sampled.insert(family);
    std::set<std::string> want, got;
    for (std::string_view l : m->labels()) want.emplace(l);
    if (s.name == family + "_bucket") want.insert("le");
    for (const auto& [k, v] : s.labels) got.insert(k);
    EXPECT_EQ(got, want) << s.name;
  }
  if (all_sampled) {
    EXPECT_EQ(sampled, std::set<std::string>(table.begin(), table.end()));
  }
}

TEST_F(Metrics, ServesTheFiguresOfEveryTenant) {
  namespace m = server::metric;
  ChildProcess p(GREEN_PROBE, {"2"}, server_.env("busy-token"));
  ASSERT_EQ(p.line().substr(0, 8), "green ok");
  ASSERT_EQ(p.wait(), 0);
  // The session's end reaches the tenant's figures a moment after the client is gone.
  const std::string ended = std::string(m::kSessions.name) + "{tenant=\"busy\"} 0\n";
  for (int i = 0; i < 1000 && server_->metrics_text().find(ended) == std::string::npos; ++i) {
    usleep(10000);
  }

  const std::string response =
      http(*server_->metrics_address(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(response.substr(0, 15), "HTTP/1.1 200 OK") << response.substr(0, 200);
  EXPECT_NE(response.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  const std::string text = body_of(response);
  Exposition e(text);
  if (::testing::Test::HasFatalFailure()) return;

  const std::string odd = "odd \"name\" \\ here";
  // Every family of the table, and nothing else; each with samples after the client's calls.
  expect_the_table(e, true);
  // The client's calls, its two deliberate cuGreenCtxCreate failures among them.
  EXPECT_EQ(e.value(m::kCallDuration, {{"tenant", "busy"}, {"call", "cuGreenCtxCreate"}}, "_count"),
            3);
  EXPECT_EQ(e.value(m::kCallErrors, {{"tenant", "busy"},
                                     {"call", "cuGreenCtxCreate"},
                                     {"code", "CUDA_ERROR_INVALID_VALUE"}}),
            2);
  EXPECT_EQ(e.value(m::kCallQueue, {{"tenant", "busy"}, {"call", "cuGreenCtxCreate"}}, "_count"),
            3);
  EXPECT_GT(e.value(m::kCalls, {{"tenant", "busy"}}), 20);
  // 16 KiB came back from the device (the probe's result), more went to it (its PTX, a memset).
  EXPECT_GE(e.value(m::kTransferBytes, {{"tenant", "busy"}, {"direction", "device_to_host"}}),
            16384);
  EXPECT_GT(e.value(m::kTransferBytes, {{"tenant", "busy"}, {"direction", "host_to_device"}}), 0);
  // Each GPU once in cuwire_gpu_info, with a UUID to join DCGM's figures on; no fallback (the
  // sim was asked for).
  for (const char* gpu : {"0", "1"}) {
    int found = 0;
    for (const Sample& s : e.samples()) {
      if (s.name != "cuwire_gpu_info" || s.labels.at("gpu") != gpu) continue;
      ++found;
      EXPECT_EQ(s.value, 1);
      EXPECT_EQ(s.labels.at("uuid").rfind("GPU-", 0), 0u) << s.labels.at("uuid");
      EXPECT_FALSE(s.labels.at("model").empty());
      EXPECT_TRUE(s.labels.count("pci_bus_id"));
    }
    EXPECT_EQ(found, 1) << "GPU " << gpu;
  }
  EXPECT_EQ(e.value(m::kBackendFallback, {}), 0);
  // The idle tenant is there, with zeros; its name escaped and read back as it is.
  EXPECT_EQ(e.value(m::kCalls, {{"tenant", odd}}), 0);
  EXPECT_EQ(e.value(m::kSessions, {{"tenant", odd}}), 0);
  EXPECT_EQ(e.value(m::kTenantMemoryUsed, {{"tenant", odd}, {"gpu", "1"}}), 0);
  EXPECT_EQ(e.value(m::kSessions, {{"tenant", "busy"}}), 0);
  // Caps: 1 GiB and 40 % for busy, the GPU's 4 GiB and all of it for the other.
  EXPECT_EQ(e.value(m::kTenantMemoryLimit, {{"tenant", "busy"}, {"gpu", "0"}}), 1ull << 30);
  EXPECT_EQ(e.value(m::kTenantMemoryLimit, {{"tenant", odd}, {"gpu", "0"}}), 4ull << 30);
  EXPECT_EQ(e.value(m::kTenantComputeLimit, {{"tenant", "busy"}}), 0.4);
  EXPECT_EQ(e.value(m::kTenantComputeLimit, {{"tenant", odd}}), 1);
  EXPECT_EQ(e.value(m::kGpuMemoryTotal, {{"gpu", "1"}}), 4ull << 30);
  // Its memory is given back: nothing held once it is gone.
  EXPECT_EQ(e.value(m::kGpuMemoryUsed, {{"gpu", "0"}}), 0);
  EXPECT_EQ(e.value(m::kGpuSessions, {{"gpu", "0"}}), 0);
  // Busy: measured by the compute scheduler on the GPU the capped tenant ran on.
  EXPECT_GT(e.value(m::kTenantGpuBusy, {{"tenant", "busy"}, {"gpu", "0"}}) +
                e.value(m::kTenantGpuBusy, {{"tenant", "busy"}, {"gpu", "1"}}),
            0);
  EXPECT_EQ(e.value(m::kBuildInfo, {{"version", server::cuwire_version()},
                                    {"cuda", server::cuda_version()},
                                    {"backend", "sim"}}),
            1);

  // The rest of HTTP: other paths, other methods, HEAD.
  const Address a = *server_->metrics_address();
  EXPECT_EQ(http(a, "GET /other HTTP/1.1\r\n\r\n").substr(0, 12), "HTTP/1.1 404");
  EXPECT_EQ(http(a, "POST /metrics HTTP/1.1\r\n\r\n").substr(0, 12), "HTTP/1.1 405");
  EXPECT_EQ(http(a, "nonsense\r\n\r\n").substr(0, 12), "HTTP/1.1 400");
  const std::string head = http(a, "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(head.substr(0, 12), "HTTP/1.1 200");
  EXPECT_EQ(body_of(head), "");
  EXPECT_EQ(http(a, std::string(9000, 'x')).substr(0, 12), "HTTP/1.1 431");
  // /healthz for probes: ok while serving.
  const std::string health = http(a, "GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(health.substr(0, 12), "HTTP/1.1 200");
  EXPECT_EQ(body_of(health), "ok\n");
}

TEST(MetricsHttpHealth, UnhealthyWithItsReason) {
  const auto render = [] { return std::string("x 1\n"); };
  const std::string ok = server::http_response("GET /healthz HTTP/1.1\r\n\r\n", render);
  EXPECT_EQ(ok.substr(0, 12), "HTTP/1.1 200");
  const std::string draining = server::http_response("GET /healthz HTTP/1.1\r\n\r\n", render,
                                                     [] { return std::string("draining"); });
  EXPECT_EQ(draining.substr(0, 12), "HTTP/1.1 503");
  EXPECT_NE(draining.find("\r\n\r\ndraining\n"), std::string::npos) << draining;
  EXPECT_EQ(server::http_response("HEAD /healthz HTTP/1.1\r\n\r\n", render).substr(0, 12),
            "HTTP/1.1 200");
}

// A metric name as a query writes it: its family in the table (server/ops/metric_names.h) and the
// suffix of a histogram's series ("" for the family's own name); null when the table has none.
const MetricDef* resolve(const std::string& name, std::string* suffix) {
  suffix->clear();
  if (const MetricDef* m = server::find_metric(name)) return m;
  for (const char* sfx : {"_bucket", "_sum", "_count"}) {
    if (!name.ends_with(sfx)) continue;
    const MetricDef* m = server::find_metric(name.substr(0, name.size() - std::strlen(sfx)));
    if (m && m->type == MetricType::kHistogram) {
      *suffix = sfx;
      return m;
    }
  }
  return nullptr;
}

bool is_label_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// What is wrong in one PromQL expression of the dashboard: metrics the table does not have,
// label matchers (metric{label=~"..."}) and label_values(metric, label) with labels the metric
// does not carry, and by (...) / without (...) labels that no metric the expression names has.
std::vector<std::string> query_problems(const std::string& expr) {
  std::vector<std::string> problems;
  std::set<std::string> carried;  // labels of the metrics the expression names
  std::vector<std::string> grouped;
  auto word_at = [&](size_t at) {
    size_t end = at;
    while (end < expr.size() && is_label_char(expr[end])) ++end;
    return expr.substr(at, end - at);
  };
  auto skip_space = [&](size_t at) {
    while (at < expr.size() && expr[at] == ' ') ++at;
    return at;
  };
  for (size_t at = 0; at < expr.size();) {
    if (!is_label_char(expr[at]) || (at > 0 && is_label_char(expr[at - 1]))) {
      // Quoted text (matchers' values, a dashboard variable's) is not a name.
      if (expr[at] == '"') {
        for (++at; at < expr.size() && expr[at] != '"'; ++at) {
          if (expr[at] == '\\') ++at;
        }
      }
      ++at;
      continue;
    }
    const std::string word = word_at(at);
    at += word.size();
    if (word == "by" || word == "without") {
      size_t p = skip_space(at);
      if (p < expr.size() && expr[p] == '(') {
        for (p = skip_space(p + 1); p < expr.size() && expr[p] != ')'; p = skip_space(p)) {
          const std::string label = word_at(p);
          if (label.empty()) {
            problems.push_back("a malformed grouping");
            break;
          }
          grouped.push_back(label);
          p = skip_space(p + label.size());
          if (p < expr.size() && expr[p] == ',') ++p;
        }
        at = p;
      }
      continue;
    }
    if (word == "label_values") {
      // label_values(metric, label)
      size_t p = skip_space(at);
      if (p < expr.size() && expr[p] == '(') {
        p = skip_space(p + 1);
        const std::string name = word_at(p);
        p = skip_space(p + name.size());
        const std::string label =
            p < expr.size() && expr[p] == ',' ? word_at(skip_space(p + 1)) : "";
        std::string suffix;
        const MetricDef* m = resolve(name, &suffix);
        if (!m) {
          problems.push_back(name + ", which the table does not have");
        } else if (!m->labels().contains(label)) {
          problems.push_back("label_values of " + name + " by " + label + ", which it lacks");
        }
        at = p;
      }
      continue;
    }
    if (!word.starts_with("cuwire_")) continue;
    std::string suffix;
    const MetricDef* m = resolve(word, &suffix);
    if (!m) {
      problems.push_back(word + ", which the table does not have");
      continue;
    }
    const server::MetricLabels labels = m->labels();
    auto has = [&](const std::string& l) {
      return labels.contains(l) || (suffix == "_bucket" && l == "le");
    };
    for (std::string_view l : labels) carried.emplace(l);
    if (suffix == "_bucket") carried.insert("le");
    // Its matchers: label, an operator (=, !=, =~, !~), a quoted value; comma-separated.
    if (at < expr.size() && expr[at] == '{') {
      size_t p = at + 1;
      while (p < expr.size() && expr[p] != '}') {
        p = skip_space(p);
        const std::string label = word_at(p);
        if (label.empty()) {
          problems.push_back("a malformed matcher of " + word);
          break;
        }
        if (!has(label)) problems.push_back(word + "{" + label + "}, a label it lacks");
        p += label.size();
        while (p < expr.size() && expr[p] != '"') ++p;
        for (++p; p < expr.size() && expr[p] != '"'; ++p) {
          if (expr[p] == '\\') ++p;
        }
        p = skip_space(p + 1);
        if (p < expr.size() && expr[p] == ',') ++p;
      }
      at = p + 1;
    }
  }
  for (const std::string& l : grouped) {
    if (!carried.count(l)) problems.push_back("grouped by " + l + ", which no metric here has");
  }
  return problems;
}

TEST(Dashboard, TheQueryCheckerFindsWhatIsWrong) {
  // The checker must be able to fail, or it checks nothing.
  EXPECT_EQ(query_problems("sum by (tenant, call, le) (rate(cuwire_call_duration_seconds_bucket"
                           "{tenant=~\"$tenant\"}[5m]))"),
            std::vector<std::string>{});
  EXPECT_EQ(query_problems("label_values(cuwire_sessions, tenant)"), std::vector<std::string>{});
  EXPECT_EQ(query_problems("cuwire_no_such_thing").size(), 1u);
  EXPECT_EQ(query_problems("cuwire_sessions_count").size(), 1u);  // not a histogram
  EXPECT_EQ(query_problems("cuwire_gpu_sessions{tenant=\"a\"}").size(), 1u);
  EXPECT_EQ(query_problems("cuwire_call_duration_seconds_sum{le=\"1\"}").size(), 1u);
  EXPECT_EQ(query_problems("sum by (gpu) (cuwire_calls_total)").size(), 1u);
  EXPECT_EQ(query_problems("label_values(cuwire_sessions, gpu)").size(), 1u);
  EXPECT_EQ(query_problems("cuwire_sessions{tenant=~\"cuwire_nothing\"}"),
            std::vector<std::string>{});  // a value is no name
}

TEST_F(Metrics, TheDashboardNamesOnlyMetricsTheServerExports) {
  const std::string path = std::string(CUWIRE_DEPLOY_DIR) + "/grafana/cuwire.json";
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  const std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // It is JSON (Python's parser, which the build already needs): the panels' expressions and
  // the variables' queries, one a line.
  ChildProcess check("/usr/bin/env",
                     {"python3", "-c",
                      "import json, sys\nd = json.load(open(sys.argv[1]))\n"
                      "q = [t['expr'] for p in d['panels'] for t in p['targets']]\n"
                      "print(len(q))\n"
                      "q += [v['query'] for v in d.get('templating', {}).get('list', [])\n"
                      "      if isinstance(v.get('query'), str) and 'cuwire_' in v['query']]\n"
                      "for e in q: print(' '.join(e.split()))\n",
                      path});
  const int targets = std::atoi(check.line().c_str());
  std::vector<std::string> queries;
  for (std::string q; !(q = check.line()).empty();) queries.push_back(q);
  EXPECT_EQ(check.wait(), 0);
  EXPECT_GE(targets, 10);
  EXPECT_GT(queries.size(), static_cast<size_t>(targets));  // the tenant variable's
  // Each names only the table's metrics, with their labels.
  for (const std::string& q : queries) {
    EXPECT_EQ(query_problems(q), std::vector<std::string>{}) << path << ": " << q;
  }

  // Every metric named anywhere in the file is the table's (a histogram's series by their
  // family), and the running server declares it.
  Exposition e(server_->metrics_text());
  if (::testing::Test::HasFatalFailure()) return;
  expect_the_table(e, false);
  std::set<std::string> named;
  for (size_t at = 0; (at = json.find("cuwire_", at)) != std::string::npos;) {
    size_t end = at + 7;
    while (end < json.size() &&
           (std::islower(static_cast<unsigned char>(json[end])) ||
            std::isdigit(static_cast<unsigned char>(json[end])) || json[end] == '_')) {
      ++end;
    }
    named.insert(json.substr(at, end - at));
    at = end;
  }
  ASSERT_GE(named.size(), 10u);
  for (const std::string& name : named) {
    std::string suffix;
    const MetricDef* m = resolve(name, &suffix);
    ASSERT_NE(m, nullptr) << path << " names " << name << ", which the server does not export";
    EXPECT_TRUE(e.types().count(std::string(m->name))) << name;
  }
}

}  // namespace
}  // namespace cuwire::testing
