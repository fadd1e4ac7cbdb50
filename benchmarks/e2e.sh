# Shell functions for the end-to-end rounds, sourced by run.sh and
# compare.sh (not run on its own).

# e2e_pins sets pin_server and pin_wrk: cmd/e2e on core 0 and wrk on core 1
# when taskset and two cores are there, else nothing; e2e_pinned says which.
e2e_pins() {
  pin_server=() pin_wrk=() e2e_pinned=no
  if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    pin_server=(taskset -c 0) pin_wrk=(taskset -c 1) e2e_pinned=yes
  fi
}

# e2e_round BIN LIB: serves contender LIB with the cmd/e2e binary BIN on a
# free loopback port, loads it with wrk for 1 s of warm-up and then
# E2E_SECONDS with E2E_CONNS connections, stops it, and sets e2e_rps
# (requests/s) and e2e_non2xx. Call it directly, not in a subshell: while it
# serves, $server is its pid (for the caller's cleanup trap), and a server
# that does not start exits the script. $tmp is the caller's scratch
# directory.
e2e_round() {
  rm -f "$tmp/url"
  "${pin_server[@]}" "$1" -lib "$2" -addr 127.0.0.1:0 > "$tmp/url" &
  server=$!
  local url=
  for _ in $(seq 100); do
    url=$(head -n 1 "$tmp/url" 2>/dev/null || true)
    [ -n "$url" ] && break
    sleep 0.05
  done
  if [ -z "$url" ]; then echo "cmd/e2e -lib $2 did not start" >&2; exit 1; fi
  "${pin_wrk[@]}" wrk -t1 -c"$E2E_CONNS" -d1s "$url" > /dev/null
  local out
  out=$("${pin_wrk[@]}" wrk -t1 -c"$E2E_CONNS" -d"${E2E_SECONDS}s" "$url")
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
  e2e_rps=$(awk '/^Requests\/sec:/ {print $2}' <<< "$out")
  e2e_non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<< "$out")
}
