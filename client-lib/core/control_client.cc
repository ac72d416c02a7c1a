#include "client-lib/core/control_client.h"

#include <unistd.h>

#include <vector>

#include "generated/call_ids.h"
#include "protocol/address.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "protocol/transport.h"

namespace cuwire::client {
namespace {

StreamTimeouts deadline_in(std::chrono::milliseconds t) {
  StreamTimeouts out;
  if (t.count() > 0) out.deadline = StreamTimeouts::Clock::now() + t;
  return out;
}

// The server's Error frame as one sentence.
std::string refusal(const Frame& f) {
  ErrorMsg e;
  if (!decode_error(f, &e)) return "an undecodable Error frame";
  return std::string(error_kind_name(e.kind)) + ": " + e.message;
}

}  // namespace

ControlClient::~ControlClient() {
  if (!stream_) return;
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kGoodbye);
  h.sequence = sequence_;
  stream_->set_timeouts(deadline_in(std::chrono::milliseconds(500)));
  (void)write_frame(*stream_, h, {});
  stream_->shutdown();
}

Status ControlClient::connect(const ControlOptions& options, std::unique_ptr<ControlClient>* out) {
  std::vector<ListedAddress> list;
  if (Status s = parse_address_list(options.server, &list); !s) return s;
  if (list.empty()) return Status::invalid_argument("no server address");
  const ListedAddress& where = list.front();
  std::unique_ptr<ControlClient> c(new ControlClient());
  c->address_ = where.text;
  c->timeout_ = options.timeout;
  TlsClientOptions tls;
  tls.ca_file = options.ca_file;
  if (Status s = connect_stream(where.address, tls, &c->stream_); !s) {
    return Status::disconnected("cannot reach gpu-server at " + where.text + ": " + s.message());
  }
  c->stream_->set_timeouts(deadline_in(options.timeout));
  HelloMsg hello;
  hello.manifest_hash = kManifestHash;
  hello.client_name = options.client_name;
  hello.pid = static_cast<uint32_t>(getpid());
  hello.token = options.token;
  hello.control = true;
  std::vector<uint8_t> msg;
  encode_hello(hello, &msg);
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kHello);
  h.sequence = c->sequence_++;
  Frame f;
  Status s = write_frame(*c->stream_, h, msg);
  if (s) s = read_frame(*c->stream_, FrameLimits{}, &f);
  if (!s) {
    return Status::disconnected("handshake with gpu-server at " + where.text +
                                " failed: " + s.message());
  }
  if (f.type() == FrameType::kError) {
    return Status::failed("gpu-server at " + where.text + " refused: " + refusal(f));
  }
  WelcomeMsg w;
  if (Status d = decode_welcome(f, &w); !d) {
    return Status::malformed("gpu-server at " + where.text +
                             " answered Hello with something else: " + d.message());
  }
  if (w.session_id != 0) {
    // A server older than control connections made a session of it: it cannot answer.
    return Status::failed("gpu-server at " + where.text +
                          " does not serve control requests (an older version)");
  }
  c->backend_ = w.backend;
  *out = std::move(c);
  return Status::ok();
}

Status ControlClient::request(const std::string& command, const std::string& args_json,
                              std::string* body) {
  stream_->set_timeouts(deadline_in(timeout_));
  std::vector<uint8_t> msg;
  encode_control({command, args_json}, &msg);
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kControl);
  h.sequence = sequence_++;
  Frame f;
  Status s = write_frame(*stream_, h, msg);
  if (s) s = read_frame(*stream_, FrameLimits{}, &f);
  if (!s) return Status::disconnected("gpu-server at " + address_ + ": " + s.message());
  if (f.type() == FrameType::kError) {
    // Going away (idle, shutting down): the connection is over, a new one may be tried.
    ErrorMsg e;
    const bool going = decode_error(f, &e).is_ok() && e.kind == ErrorKind::kGoingAway;
    stream_->shutdown();
    const std::string why = "gpu-server at " + address_ + ": " + refusal(f);
    return going ? Status::disconnected(why) : Status::failed(why);
  }
  ControlReplyMsg r;
  if (Status d = decode_control_reply(f, &r); !d) {
    return Status::malformed("gpu-server at " + address_ + ": " + d.message());
  }
  if (!r.ok) return Status::failed(r.error);
  *body = std::move(r.body);
  return Status::ok();
}

}  // namespace cuwire::client
