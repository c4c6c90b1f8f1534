# tests/lib.sh — shell helpers the test scripts share (sourced, not run).

# The port tlsfront announced in its output file LOG ("... https://127.0.0.1:PORT/ ...");
# waits for the line (up to 60 s, a safety net for a loaded machine) and
# prints nothing if it never came: the caller fails then.
tlsfront_port() {
  local log=$1 port= _
  for _ in $(seq 600); do
    port=$(sed -n 's|.*https://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$log" | head -n1)
    [[ -z $port ]] || break
    sleep 0.1
  done
  echo "$port"
}
