#!/bin/sh
# Runs one end-to-end program unmodified through `cuwire run` against a gpu-server with the sim
# backend that this script starts on a private Unix socket and stops afterwards.
#   run_e2e.sh GPU_SERVER CUWIRE PROGRAM [ARGS...]
# Exit status: the program's (124 when it ran past E2E_TIMEOUT seconds, default 300).
# With E2E_RELAY=PATH (cuwire's libcuda.so.1) the program talks to a relay: a gpu-server on the
# cuda backend whose driver is that library, pointed at a second gpu-server on the sim.
# E2E_SIM_ARGS: further options for the sim server (e.g. --sim-profile sm_121), split on spaces.
# E2E_TLS=1 (with E2E_RELAY): the program reaches the relay over TLS (a certificate made here
# for localhost, a token), so that a relay with workers relays the connection's bytes to them.
set -u
sim_args=${E2E_SIM_ARGS:-}
server=$1 cuwire=$2 program=$3
shift 3
dir=$(mktemp -d "${TMPDIR:-/tmp}/cuwire-e2e.XXXXXX")
sock="$dir/gpu.sock"
# wait_for SOCKET PID LOG: the server at SOCKET is listening, or the script ends.
wait_for() {
  i=0
  while [ ! -S "$1" ] && [ $i -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
  done
  if [ ! -S "$1" ]; then
    echo "run_e2e: gpu-server did not start:" >&2
    cat "$3" >&2
    kill "$2" ${upid:-} 2>/dev/null
    rm -rf "$dir"
    exit 1
  fi
}
upid=
if [ -n "${E2E_RELAY:-}" ]; then
  # A relay chain: the program's gpu-server runs the cuda backend over cuwire's own client
  # library (E2E_RELAY), which forwards to a second gpu-server on the sim backend.
  # shellcheck disable=SC2086
  "$server" --listen "unix:$dir/upstream.sock" --backend sim $sim_args >"$dir/upstream.log" 2>&1 &
  upid=$!
  wait_for "$dir/upstream.sock" "$upid" "$dir/upstream.log"
  # E2E_ISOLATION=MODE: the relay's sessions run in worker processes (--isolation MODE).
  tls_args=
  if [ -n "${E2E_TLS:-}" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
      -subj /CN=localhost -addext subjectAltName=DNS:localhost \
      -keyout "$dir/key.pem" -out "$dir/cert.pem" >/dev/null 2>&1 || {
      echo "run_e2e: openssl could not make a certificate" >&2
      exit 1
    }
    tls_args="--listen tls:127.0.0.1:0 --tls-cert $dir/cert.pem --tls-key $dir/key.pem"
    export CUWIRE_SERVER_TOKEN=e2e-token
  fi
  # shellcheck disable=SC2086
  CUWIRE_SERVER="unix:$dir/upstream.sock" \
    "$server" --listen "unix:$sock" --backend cuda --driver "$E2E_RELAY" \
    --isolation "${E2E_ISOLATION:-none}" --ready-file "$dir/ready" $tls_args \
    >"$dir/server.log" 2>&1 &
else
  # shellcheck disable=SC2086
  "$server" --listen "unix:$sock" --backend sim $sim_args >"$dir/server.log" 2>&1 &
fi
spid=$!
wait_for "$sock" "$spid" "$dir/server.log"
address="unix:$sock"
if [ -n "${E2E_TLS:-}" ]; then
  i=0
  while [ ! -f "$dir/ready" ] && [ $i -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
  done
  port=$(sed -n 's/^tls:127\.0\.0\.1://p' "$dir/ready" 2>/dev/null)
  address="tls:localhost:$port"
  export CUWIRE_CA="$dir/cert.pem" CUWIRE_TOKEN=e2e-token
fi
if [ -n "${E2E_ALONE:-}" ]; then
  # cuwire's libcuda.so.1 copied alone into an empty directory, found by the loader there: no
  # `cuwire run`, nothing of the build beside it.
  mkdir "$dir/alone"
  cp "$E2E_ALONE" "$dir/alone/libcuda.so.1"
  LD_LIBRARY_PATH="$dir/alone" CUWIRE_SERVER="$address" timeout "${E2E_TIMEOUT:-300}" \
    "$program" "$@"
  rc=$?
else
  timeout "${E2E_TIMEOUT:-300}" "$cuwire" run --server "$address" -- "$program" "$@"
  rc=$?
fi
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
if [ -n "$upid" ]; then
  kill "$upid" 2>/dev/null
  wait "$upid" 2>/dev/null
fi
if [ $rc -ne 0 ]; then
  echo "run_e2e: exit status $rc; server log:" >&2
  tail -n 30 "$dir/server.log" >&2
  if [ -n "$upid" ]; then
    echo "run_e2e: upstream server log:" >&2
    tail -n 30 "$dir/upstream.log" >&2
  fi
fi
rm -rf "$dir"
exit $rc
