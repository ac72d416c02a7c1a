# The channel between gpu-server's front and its workers (design decision 14; channel.h). One
# message per SOCK_SEQPACKET packet, descriptors beside it (SCM_RIGHTS). Not the client protocol:
# its own schema, versioned with the binary (the front runs its own executable as the worker).
@0xf9a0ea21e0df61ed;

$import "/capnp/c++.capnp".namespace("cuwire::wire::worker");

struct Caps {
  memoryBytes @0 :UInt64;
  memoryFraction @1 :Float64;
  compute @2 :Int32;
}

# The worker's settings, the front's own as resolved at its start; the tenant's ledger beside it.
struct Init {
  driver @0 :Text;
  devicePrintfToClient @1 :Bool;
  serverName @2 :Text;
  backendName @3 :Text;
  maxMessageBytes @4 :UInt32;
  maxBulkBytes @5 :UInt64;
  idleTimeoutMs @6 :Int64;
  readSpinUs @7 :Int64;
  shmLane @8 :Bool;
  maxContexts @9 :UInt64;
  maxStreams @10 :UInt64;
  maxHandles @11 :UInt64;
  contextMemory @12 :UInt64;
  tenantName @13 :Text;
  tenantOpen @14 :Bool;
  caps @15 :Caps;
  slot @16 :UInt32;
  label @17 :Text;
  logLevel @18 :Text;
  borrow @19 :Bool;
  # The GPUs' schedules (compute_scheduler.h), their memfd beside after the ledger's.
  scheduleDevices @20 :List(Int32);
  scheduleRecord @21 :Int32;
  partitions @22 :List(Partition);
}

# The worker's tenant's SMs of its own on one GPU (sm_partition.h), where the front placed them:
# groups first .. first+count-1 of the GPU split into groups of `step` SMs.
struct Partition {
  device @0 :Int32;
  sms @1 :UInt32;
  step @2 :UInt32;
  first @3 :UInt32;
  count @4 :UInt32;
}

# A session past its Hello and admission: the client's socket, its data lane's memfd (lane) and
# the memfd of its figures (stats) beside, in that order.
struct Open {
  id @0 :UInt64;
  sequence @1 :UInt64;
  client @2 :Text;
  pid @3 :UInt32;
  peer @4 :Text;
  gpu @5 :Int32;
  devices @6 :List(Int32);
  lane @7 :Bool;
  stats @8 :Bool;
}

# A host-call connection the front authenticated; the worker checks the key. Its socket beside.
struct HostCalls {
  id @0 :UInt64;
  sequence @1 :UInt64;
  session @2 :UInt64;
  key @3 :Data;  # random bytes, zeros among them
  client @4 :Text;
  peer @5 :Text;
}

struct ToWorker {
  union {
    init @0 :Init;
    open @1 :Open;
    drain @2 :UInt64;
    evict @3 :UInt64;
    caps @4 :Caps;
    quit @5 :Void;
    ping @6 :UInt64;
    hostCalls @7 :HostCalls;
  }
}

struct FromWorker {
  union {
    # Serving: the backend is up (error empty), or why not.
    ready @0 :Text;
    # A session ended; everything it held on the backend is given back.
    ended @1 :UInt64;
    pong @2 :UInt64;
  }
}
