# Sourced by the scripts that start `kiban up` in the background (demo, gpu-check, sweep-check).

# wait_for_kiban PID SECONDS: wait until the server started as PID (home KIBAN_HOME, log
# KIBAN_HOME/server.log) answers `kiban nodes`; if it exits first or does not answer within
# SECONDS, print its log and return 1.
wait_for_kiban() {
    local _
    for _ in $(seq 1 $(($2 * 5))); do
        if [[ -s "$KIBAN_HOME/url" ]] && kiban nodes >/dev/null 2>&1; then return 0; fi
        kill -0 "$1" 2>/dev/null || break
        sleep 0.2
    done
    cat "$KIBAN_HOME/server.log" >&2
    return 1
}
