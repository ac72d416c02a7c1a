# Control and call messages of the cuwire wire protocol. Each travels in one frame (frame.h):
# fixed header + this message + optional raw bulk bytes that never enter a builder.
@0x889832da346433f8;

$import "/capnp/c++.capnp".namespace("cuwire::wire");

struct Hello {
  protocolVersion @0 :UInt32;
  manifestHash @1 :UInt64;   # hash of the driver manifest the client was generated from
  clientName @2 :Text;       # program name, for logs and statistics
  pid @3 :UInt32;
  token @4 :Text;            # bearer token; empty when the server needs none
  probe @5 :Bool;            # only ask what room the server has for this token's tenant: the
                             # server checks the Hello as any other, answers a Welcome with
                             # `room` and closes; no session is made, counted or placed. An
                             # older server ignores the field and makes a session.
  lane @7 :Bool;             # over a Unix socket: right after this Hello comes one byte carrying
                             # a memfd (SCM_RIGHTS), the shared-memory data lane the client
                             # offers (protocol/shm_lane.h); Welcome.lane says whether the server
                             # took it
  control @6 :Bool;          # a control connection (admin API, NVML): no session is made,
                             # counted or placed; Control frames follow and each is answered
                             # by a ControlReply. The admin token may ask everything, a
                             # tenant's token only its own view (`view`).
  hostCalls @8 :Bool;        # the host-call connection of session `hostCallSession`: the
                             # server sends it a HostCall frame when a stream reaches a host
                             # function of that session, and waits for its HostCallDone. The
                             # Hello carries the session's token and the key its Welcome gave
                             # (`hostCallKey`); no session is made, counted or placed.
  hostCallSession @9 :UInt64;
  hostCallKey @10 :Data;
}

struct Welcome {
  protocolVersion @0 :UInt32;
  sessionId @1 :UInt64;
  serverName @2 :Text;
  backend @3 :Text;          # "sim" or "cuda"
  room @4 :Room;             # set only in the answer to a probe Hello (sessionId is then 0)
  lane @5 :Bool;             # the server took the client's data lane (Hello.lane): large copies
                             # of this session may carry their bytes through it
  hostCallKey @6 :Data;      # 16 random bytes: the key a host-call connection of this session
                             # presents (Hello.hostCalls); empty from a server that has none,
                             # whose clients run host functions themselves
}

# On a host-call connection (Hello.hostCalls): in a HostCall frame, the server asks the client
# to run its host function `id` (a stream reached it) and tells the stream's status; in a
# HostCallDone frame the client says it returned (status unused).
struct HostCall {
  id @0 :UInt64;
  status @1 :UInt32;
}

# What a server has left for a new session of the probing client's tenant: placement's view
# (server/tenancy/placement.h) of the GPU it would place that session on.
struct Room {
  fits @0 :Bool;
  memoryLeft @1 :UInt64;     # bytes left on that GPU for the tenant
  computeLeft @2 :UInt32;    # percent of that GPU not committed to compute-capped tenants
  sessions @3 :UInt32;       # sessions on that GPU now
  why @4 :Text;              # when it does not fit: what each GPU lacks
  placement @5 :Text;        # "spread" or "binpack", the policy this server applies to the
                             # tenant; empty when it places no session (the figures are then 0)
}

struct Error {
  kind @0 :Kind;
  message @1 :Text;

  enum Kind {
    failed @0;            # server fault; the session is over
    malformedFrame @1;    # bad magic, truncated, undecodable message
    frameTooLarge @2;     # a length over the configured maximum
    unknownType @3;       # frame type this server does not know
    versionMismatch @4;
    manifestMismatch @5;
    unauthorized @6;
    overloaded @7;        # over a server limit (connections, sessions); try again later
    unexpected @8;        # a valid frame at the wrong time (e.g. a call before Hello)
    goingAway @9;         # the server ends the session: it is shutting down, or the client
                          # was silent past a timeout. Added after the first release: an
                          # older peer decodes it as an unknown kind, still an Error.
  }
}

# One driver call. `args` holds the scalar arguments packed by the generated stub; byte arrays
# the call reads (memcpy sources, module images) follow as the frame's bulk bytes.
struct Call {
  callId @0 :UInt32;
  context @1 :UInt64;        # the calling thread's current context handle, 0 if none
  args @2 :Data;
}

# Answer to a Call that wants one. Byte arrays the call writes (memcpy destinations) follow as
# the frame's bulk bytes.
struct Reply {
  result @0 :UInt32;         # CUresult
  outs @1 :Data;
  deviceOutput @2 :Data;     # device printf text of the session's finished kernels, sent with
                             # the reply to a synchronizing call; the client writes it to stdout
}

# A request on a control connection (Hello.control): a command name and its arguments as a JSON
# object. Commands and their answers: server/ops/admin.h.
struct Control {
  command @0 :Text;
  args @1 :Text;             # JSON object; empty: no arguments
}

struct ControlReply {
  ok @0 :Bool;
  error @1 :Text;            # when not ok: why, for the user
  body @2 :Text;             # when ok: the answer, a JSON object
}
