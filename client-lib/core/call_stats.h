// Client-observed latency of every driver call, per call: the time from entering the stub to
// having the answer (round trips), to the frame being written (fire-and-forget calls), or to
// the answer taken from the client's caches (local: a cached reply, a device attribute), and
// the bulk bytes a call carried each way (copies, images).
//
// With CUWIRE_STATS=1 (or CUWIRE_STATS=PATH) the table is printed to stderr (or written to PATH)
// when the program exits.
//
// Thread-safety: record_call() is safe from any thread and takes no lock: each thread records
// into its own rows, which the report adds up.
#pragma once

#include <cstdint>
#include <string>

namespace cuwire::client {

enum class CallKind : uint8_t { kRoundTrip, kAsync, kLocal };
void record_call(uint32_t call_id, uint64_t ns, CallKind kind, uint64_t bytes = 0);

// A clock for timing calls that take a fraction of a microsecond (fire-and-forget calls), where
// CLOCK_MONOTONIC's own cost (about 30 ns a read) would be a tenth of the call: the CPU's cycle
// counter where it is invariant and the kernel keeps time by it, else CLOCK_MONOTONIC.
// ticks_to_ns(call_ticks() - t0) is the time since t0 in nanoseconds, to about 0.1 % once the
// program has run a millisecond.
uint64_t call_ticks();
uint64_t ticks_to_ns(uint64_t ticks);

// "-" for 0, else "123 B", "12.3 KiB", "12.3 MiB", "12.3 GiB".
std::string format_bytes(uint64_t b);
// "1.23 us", "123.4 us", "12.3 ms".
std::string format_ns(uint64_t ns);

// The table as text: one row per call, sorted by total time.
std::string format_call_stats();

// Registers the exit-time report if CUWIRE_STATS asks for it; idempotent.
void install_stats_report();

}  // namespace cuwire::client
